"""Replay over a real broker: a finished run's data topic re-published into a new run is the same stream,
and the pacing is k× the recorded pace.

Skipped unless ``STREAMFL_KAFKA`` names the bootstrap address, e.g. ``127.0.0.1:9092``
(start one with ``scripts/kafka-local start``).
"""

import os
import subprocess
import sys
import time
import uuid

import numpy as np
import pandas as pd
import pytest
import yaml

BOOTSTRAP = os.environ.get("STREAMFL_KAFKA")
if not BOOTSTRAP:
    pytest.skip("STREAMFL_KAFKA is not set: start a broker with scripts/kafka-local start", allow_module_level=True)

from streamfl.transport.format import Data, decode, encode  # noqa: E402
from streamfl.transport.topics import (Topics, create_topics, delete_topics, ensure_topics,  # noqa: E402
                                       make_producer, quiet_kafka_logs)

quiet_kafka_logs()


def _run_id(tag):
    return f"test-{tag}-{uuid.uuid4().hex[:8]}"


def _read_topic(topic):
    """{(t, client): raw value} of every record of ``topic`` (all partitions)."""
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=BOOTSTRAP, client_id="streamfl-test-read", group_id=None,
                      auto_offset_reset="earliest", enable_auto_commit=False)
    tps = [TopicPartition(topic, p) for p in sorted(c.partitions_for_topic(topic))]
    c.assign(tps)
    c.seek_to_beginning(*tps)
    end = c.end_offsets(tps)
    out = {}
    deadline = time.monotonic() + 30
    while any(c.position(tp) < end[tp] for tp in tps) and time.monotonic() < deadline:
        for recs in c.poll(timeout_ms=200).values():
            for r in recs:
                msg = decode(r.value)
                assert (msg.t, msg.client) not in out
                out[(msg.t, msg.client)] = bytes(r.value)
    c.close()
    return out


@pytest.fixture
def recorded():
    """A 'recorded' data topic: M = 2 clients, 21 steps, record timestamps 100 ms apart (a 2.0 s span)."""
    src = Topics(_run_id("rec"))
    create_topics(BOOTSTRAP, src, 2)
    producer = make_producer(BOOTSTRAP, "streamfl-test-rec")
    base = int(time.time() * 1000) - 60_000
    rng = np.random.default_rng(0)
    for t in range(1, 22):
        for m in range(2):
            msg = Data(t=t, client=m, X=rng.standard_normal((1, 3)), y=np.array([float(t % 2)]))
            producer.send(src.data, value=encode(msg), key=str(m).encode(), partition=m,
                          timestamp_ms=base + (t - 1) * 100)
    producer.flush(10)
    producer.close()
    yield src, base
    delete_topics(BOOTSTRAP, src)


def test_replay_pacing_is_k_times_real_time_and_start_points_renumber(recorded):
    from producers.replay import replay_topic
    src, base = recorded
    want = _read_topic(src.data)
    # the recording spans 2.0 s: at 4× it sleeps ≥ 0.5 s; unpaced it must beat 2× real time (1.0 s) — its own
    # cost (42 records) took 0.53 s once under a loaded CI run, so a tighter bound only measured the load
    for speed, low, high in ((4.0, 0.4, 1.5), (None, 0.0, 1.0)):
        dst = Topics(_run_id("pace"))
        ensure_topics(BOOTSTRAP, dst, 2)
        try:
            started = time.monotonic()
            stats = replay_topic(BOOTSTRAP, src.data, dst.run_id, 2, speed=speed)
            took = time.monotonic() - started
            assert stats.records == 42 and stats.steps == 21 and stats.span_seconds == pytest.approx(2.0)
            assert low <= stats.wall_seconds <= high and took < high + 5, (speed, stats.wall_seconds)
            assert _read_topic(dst.data) == want                      # byte for byte, every (t, client)
        finally:
            delete_topics(BOOTSTRAP, dst)
    for kw in ({"from_offset": 10}, {"from_timestamp": (base + 1000) / 1000}):
        dst = Topics(_run_id("suffix"))
        ensure_topics(BOOTSTRAP, dst, 2)
        try:
            stats = replay_topic(BOOTSTRAP, src.data, dst.run_id, 2, **kw)
            assert stats.first_step == 11 and stats.steps == 11 and stats.records == 22, kw
            got = _read_topic(dst.data)
            for (t, m), raw in got.items():
                old, new = decode(want[(t + 10, m)]), decode(raw)
                assert new.t == t and new.X.tobytes() == old.X.tobytes() and new.y.tobytes() == old.y.tobytes()
        finally:
            delete_topics(BOOTSTRAP, dst)


def _cli(*argv, log, cwd):
    """A role command as a user runs it, from their own folder."""
    return subprocess.Popen([sys.executable, "-m", "streamfl.cli", *argv], stdout=log, stderr=subprocess.STDOUT,
                            cwd=cwd)


def test_replayed_run_with_another_step_size_sees_the_same_stream(tmp_path):
    """Run A (η = 0.05) over Kafka keeping its topics; replay its data topic into run B (η = 0.2, run by the
    role commands); B's data equals A's byte for byte and B's numbers equal embedded η = 0.2 to 1e-9."""
    from typer.testing import CliRunner

    from consumers.tracker import track
    from streamfl.cli import app
    from streamfl.config import parse_config
    from streamfl.runtime.experiment import build_stream, run_experiment
    from streamfl.runtime.kafka_run import run_kafka_experiment

    base = {"name": "replay", "seed": 4, "steps": 40, "chunk_size": 16,
            "source": {"kind": "synthetic", "task": "logistic", "clients": 3, "dim": 3},
            "learner": {"tau": 4, "step_size": {"kind": "constant", "eta": 0.05}},
            "baselines": [], "output": {"format": "parquet", "plots": False}}
    cfg_a = parse_config(base)
    base["learner"]["step_size"]["eta"] = 0.2
    cfg_b = parse_config(base)
    summary_a = run_kafka_experiment(cfg_a, BOOTSTRAP, workers=1, run_dir=tmp_path / "a", plots=False,
                                     timeout=30, keep_topics=True)
    a = Topics(summary_a["transport"]["run_id"])
    b = Topics(_run_id("b"))
    procs = []
    try:
        res = CliRunner().invoke(app, ["replay", "--broker", BOOTSTRAP, "--from-run", a.run_id, "--run-id", b.run_id,
                                       "--speed", "max"])
        assert res.exit_code == 0, res.output
        assert "replayed 120 records (40 steps" in res.output
        assert _read_topic(b.data) == _read_topic(a.data)

        cfg_path = tmp_path / "b.yaml"
        cfg_path.write_text(yaml.safe_dump(base))
        common = ["--broker", BOOTSTRAP, "--run-id", b.run_id, "--config", "b.yaml"]
        with open(tmp_path / "roles.log", "wb") as log:
            procs = [_cli("aggregate", *common, log=log, cwd=tmp_path),
                     _cli("worker", *common, "--timeout", "60", log=log, cwd=tmp_path)]
            out = tmp_path / "b"
            out.mkdir()
            (out / "config.yaml").write_text(cfg_path.read_text())
            summary_b = track(cfg_b, build_stream(cfg_b), BOOTSTRAP, b.run_id, out, timeout=60, plots=False)
            for p in procs:
                assert p.wait(30) == 0, (tmp_path / "roles.log").read_text()
        want = run_experiment(cfg_b, tmp_path / "embedded", plots=False)
        got_rows, want_rows = (pd.read_parquet(d / "metrics.parquet") for d in (out, tmp_path / "embedded"))
        for col in ("loss", "cum_loss", "regret_static", "regret_dynamic"):
            np.testing.assert_allclose(got_rows[col].to_numpy(), want_rows[col].to_numpy(), rtol=0, atol=1e-9,
                                       err_msg=col)
        for key in ("regret_static", "regret_expected", "regret_dynamic"):
            assert summary_b[key] == pytest.approx(want[key], abs=1e-9)
        assert summary_b[key] != pytest.approx(summary_a[key], abs=1e-6)        # the step size mattered
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        delete_topics(BOOTSTRAP, a)
        delete_topics(BOOTSTRAP, b)
