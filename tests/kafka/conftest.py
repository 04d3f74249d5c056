"""Helpers of the Kafka tests. ``streamfl``, ``producers`` and ``consumers`` are imported as installed
(``pip install -e .``), never from the source tree by path."""
import pytest


@pytest.fixture(scope="module")
def embedded(cfg, tmp_path_factory):
    """The embedded run of the test module's ``cfg`` fixture: (summary, metrics.parquet as a DataFrame), the
    numbers every Kafka run of that module must reproduce."""
    import pandas as pd

    from streamfl.runtime.experiment import run_experiment
    run_dir = tmp_path_factory.mktemp("embedded")
    summary = run_experiment(cfg, run_dir, plots=False)
    return summary, pd.read_parquet(run_dir / "metrics.parquet")


# ---- helpers of the fault-tolerance tests (tests/kafka/test_faults.py) ----------------------------------
def read_topic(bootstrap: str, topic: str, partition: int = 0):
    """Every record of one partition of ``topic`` (decoded messages with their headers), read to its end."""
    import time as _time

    from kafka import TopicPartition
    from streamfl.transport.format import decode
    from streamfl.transport.state import resilient_reader
    reader = resilient_reader(bootstrap, "streamfl-test-reader", topic, partition)
    try:
        tp = TopicPartition(topic, partition)
        end = reader.end_offsets([tp])[tp]
        out, deadline = [], _time.monotonic() + 20
        while reader.position(tp) < end and _time.monotonic() < deadline:
            for records in reader.poll(timeout_ms=200).values():
                out.extend((decode(r.value), dict(r.headers or ())) for r in records)
        return out
    finally:
        reader.close()


# ---- the roles started by hand (test_equivalence.py, test_compressed_uploads.py, test_gmf.py, test_paths.py) ----
def roles_by_hand(bootstrap: str, cwd, config: str, run_id: str, extra=(), out: str = "kafka") -> str:
    """`streamfl aggregate | worker | produce` and `track --out <out>` started from ``cwd`` with ``--config
    config`` (and the options ``extra`` for every role, e.g. ``("--partitions", "4")``), as a user types
    them; asserts every role exits 0, deletes the run's topics, and returns what the tracker printed."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from streamfl.transport.state import delete_state_topic
    from streamfl.transport.topics import Topics, delete_topics

    common = ["--broker", bootstrap, "--run-id", run_id, "--config", config, *extra]
    root = str(Path(__file__).resolve().parents[2])

    def role(*argv, **kw):
        return subprocess.Popen([sys.executable, "-m", "streamfl.cli", *argv, *common], cwd=cwd,
                                env={**os.environ, "PYTHONPATH": root}, text=True, **kw)
    procs = []
    try:
        procs = [role(r, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for r in ("aggregate", "worker", "produce")]
        tracker = role("track", "--out", out, "--timeout", "60", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        procs.append(tracker)
        out, errs = tracker.communicate(timeout=180)
        assert tracker.returncode == 0, errs
        for p in procs[:-1]:
            assert p.wait(60) == 0, p.stderr.read()
        return out
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        delete_topics(bootstrap, Topics(run_id))
        delete_state_topic(bootstrap, run_id)
