"""The tracker's Prometheus endpoint during and after a short run by the role commands (needs a broker).

Skipped unless ``STREAMFL_KAFKA`` names the bootstrap address, e.g. ``127.0.0.1:9092``
(start one with ``scripts/kafka-local start``).
"""

import os
import subprocess
import sys
import threading
import time
import urllib.request
import uuid

import pytest
import yaml

BOOTSTRAP = os.environ.get("STREAMFL_KAFKA")
if not BOOTSTRAP:
    pytest.skip("STREAMFL_KAFKA is not set: start a broker with scripts/kafka-local start", allow_module_level=True)

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from streamfl.transport.topics import Topics, delete_topics  # noqa: E402

NAMES = {"streamfl_regret", "streamfl_cumulative_loss", "streamfl_step", "streamfl_rounds",
         "streamfl_samples_per_second", "streamfl_loss_consumer_lag", "streamfl_round_latency_seconds",
         "streamfl_dead_letters", "streamfl_finished", "streamfl_samples_per_second_now"}


def scrape(port):
    """{(name, frozenset(labels)): value} from the endpoint."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def value(samples, name, **labels):
    want = set(labels.items())
    (v,) = [v for (n, ls), v in samples.items() if n == name and want <= set(ls)]
    return v


def test_tracker_serves_prometheus_metrics(tmp_path):
    from consumers.tracker import TrackerMetrics, track
    from streamfl.config import parse_config
    from streamfl.runtime.experiment import build_stream

    data = {"name": "metrics", "seed": 3, "steps": 120, "chunk_size": 10,
            "source": {"kind": "synthetic", "task": "least_squares", "clients": 2, "dim": 3},
            "learner": {"tau": 5}, "baselines": [], "output": {"plots": False}}
    cfg = parse_config(data)
    cfg_path = tmp_path / "cfg.yaml"
    cfg_path.write_text(yaml.safe_dump(data))
    run_id = f"test-metrics-{uuid.uuid4().hex[:8]}"
    common = ["--broker", BOOTSTRAP, "--run-id", run_id, "--config", "cfg.yaml"]     # relative: cwd is tmp_path
    metrics = TrackerMetrics(0, run_id, addr="127.0.0.1")
    during, stop = [], threading.Event()

    def scraper():
        while not stop.is_set():
            try:
                s = scrape(metrics.port)
                if value(s, "streamfl_step", run_id=run_id) > 0 and not value(s, "streamfl_finished", run_id=run_id):
                    during.append(s)
            except Exception:
                pass
            time.sleep(0.05)

    procs = []
    thread = threading.Thread(target=scraper, daemon=True)
    try:
        thread.start()
        with open(tmp_path / "roles.log", "wb") as log:
            procs = [subprocess.Popen([sys.executable, "-m", "streamfl.cli", role, *common], stdout=log,
                                      stderr=subprocess.STDOUT, cwd=tmp_path)
                     for role in ("aggregate", "worker", "produce")]
            out = tmp_path / "run"
            out.mkdir()
            (out / "config.yaml").write_text(cfg_path.read_text())
            summary = track(cfg, build_stream(cfg), BOOTSTRAP, run_id, out, timeout=60, plots=False, metrics=metrics)
            for p in procs:
                assert p.wait(30) == 0, (tmp_path / "roles.log").read_text()
        stop.set()
        thread.join(5)
        after = scrape(metrics.port)
        assert NAMES <= {n for n, _ in after}
        assert during, "no scrape saw the run in progress"
        assert 0 < value(during[-1], "streamfl_step", run_id=run_id) <= 120
        assert value(after, "streamfl_finished", run_id=run_id) == 1
        assert value(after, "streamfl_step", run_id=run_id) == 120
        assert value(after, "streamfl_rounds", run_id=run_id) == 24
        for c in ("static", "expected", "dynamic"):
            assert value(after, "streamfl_regret", run_id=run_id, comparator=c) == pytest.approx(
                summary[f"regret_{c}"], rel=1e-12, abs=1e-12)
        assert value(after, "streamfl_samples_per_second", run_id=run_id) == pytest.approx(
            summary["samples_per_second"])
        assert value(after, "streamfl_round_latency_seconds", run_id=run_id) >= 0
        assert value(after, "streamfl_loss_consumer_lag", run_id=run_id) == 0
        assert value(after, "streamfl_dead_letters", run_id=run_id) == summary["dead_letters"] == 0
    finally:
        stop.set()
        metrics.close()
        for p in procs:
            if p.poll() is None:
                p.kill()
        delete_topics(BOOTSTRAP, Topics(run_id))


def test_streamfl_run_serves_the_final_regrets_for_its_linger(tmp_path):
    """`streamfl run --broker --metrics-port P --metrics-linger S` as users run it: while a logistic run is
    live its expected regret (known only at the end) is not exported at all (it was NaN), a current
    samples/s rate is; once summary.json is written the endpoint still serves the exact final regrets."""
    import json
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    (tmp_path / "exp.yaml").write_text("seed: 4\nsteps: 400\nchunk_size: 20\nbaselines: []\n"
                                       "source: {kind: synthetic, task: logistic, clients: 2, dim: 3}\n"
                                       "learner: {tau: 5}\n")
    proc = subprocess.Popen([sys.executable, "-m", "streamfl.cli", "run", "--config", "exp.yaml", "--broker", BOOTSTRAP,
                             "--metrics-port", str(port), "--metrics-linger", "15", "--no-live", "--no-plots",
                             "--out", "run"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    during, after = [], None
    try:
        deadline = time.monotonic() + 120
        while after is None and time.monotonic() < deadline and proc.poll() is None:
            try:
                s = scrape(port)
            except Exception:
                time.sleep(0.05)
                continue
            if (tmp_path / "run" / "summary.json").is_file():
                after = s if [v for (n, _), v in s.items() if n == "streamfl_finished"] == [1.0] else None
            elif any(n == "streamfl_step" and v > 0 for (n, _), v in s.items()):
                during.append(s)
            time.sleep(0.05)
        assert after is not None, proc.communicate(timeout=60)
        summary = json.loads((tmp_path / "run" / "summary.json").read_text())
        run_id = summary["transport"]["run_id"]
        assert during, "no scrape saw the run in progress"
        for s in during:
            comparators = {dict(ls).get("comparator") for n, ls in s if n == "streamfl_regret"}
            assert "expected" not in comparators                    # no NaN placeholder while it does not exist
        assert any(value(s, "streamfl_samples_per_second_now", run_id=run_id) > 0 for s in during)
        for c in ("static", "expected", "dynamic"):
            assert value(after, "streamfl_regret", run_id=run_id, comparator=c) == pytest.approx(
                summary[f"regret_{c}"], rel=1e-12, abs=1e-12)
        assert value(after, "streamfl_step", run_id=run_id) == 400
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
