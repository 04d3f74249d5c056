"""Fault tolerance over a real broker: membership changes, killed processes and a broker restart
leave the numbers of the no-fault embedded run (to 1e-9) and count every sample exactly once.

Skipped unless ``STREAMFL_KAFKA`` names the bootstrap address. The broker-restart test also needs
``STREAMFL_KAFKA_HOME`` (the state dir of a broker started with ``scripts/kafka-local start``, whose
``STREAMFL_KAFKA_PORT`` matches the bootstrap port) and runs last: it stops and restarts that broker.

Every test holds the stream at a step inside round 4 (τ = 5) with the ``hold_at`` test hook,
waits until all clients reported it, injects the fault, and releases the rest of the stream.
"""

import os
import subprocess
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

BOOTSTRAP = os.environ.get("STREAMFL_KAFKA")
if not BOOTSTRAP:
    pytest.skip("STREAMFL_KAFKA is not set: start a broker with scripts/kafka-local start", allow_module_level=True)

from conftest import read_topic  # noqa: E402
from streamfl.config import parse_config  # noqa: E402
from streamfl.runtime.kafka_run import KafkaRun  # noqa: E402
from streamfl.transport.format import Global, Loss  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
T, M, TAU, HOLD = 120, 4, 5, 17          # step 17: inside round 4
COLUMNS = ["loss", "cum_loss", "regret_static", "regret_dynamic"]


@pytest.fixture(scope="module")
def cfg():
    return parse_config({
        "name": "kafka-faults", "seed": 3, "steps": T,
        "source": {"kind": "synthetic", "task": "logistic", "clients": M, "dim": 3},
        "learner": {"tau": TAU},
        "baselines": [],
        "output": {"format": "parquet", "plots": False},
    })


def _assert_same(run, summary, embedded):
    want_summary, want = embedded
    got = pd.read_parquet(run.run_dir / "metrics.parquet")
    assert got["t"].tolist() == list(range(1, T + 1))
    for col in COLUMNS:
        np.testing.assert_allclose(got[col].to_numpy(), want[col].to_numpy(), rtol=0, atol=1e-9, err_msg=col)
    for key in ("regret_static", "regret_expected", "regret_dynamic"):
        assert summary[key] == pytest.approx(want_summary[key], abs=1e-9)
    # every sample produced is counted once: tracker count = embedded count = records produced × b
    assert run.produced == T * M
    assert summary["samples"] == want_summary["samples"] == T * M * run.stream.batch_size
    # the loss topic reports every (step, client) exactly once (replays are not re-reported)
    seen = {}
    for msg, _ in read_topic(BOOTSTRAP, run.topics.loss):
        if isinstance(msg, Loss):
            for m in msg.clients.tolist():
                seen[(msg.t, m)] = seen.get((msg.t, m), 0) + 1
    assert len(seen) == T * M and set(seen.values()) == {1}
    # one GLOBAL per round, never published twice
    rounds = [msg.round for msg, _ in read_topic(BOOTSTRAP, run.topics.global_) if isinstance(msg, Global)]
    assert sorted(rounds) == list(range(1, T // TAU + 1))


def _worker_logs(run):
    return "\n".join(p.read_text(errors="replace") for p in sorted(run.log_dir.glob("worker-*.log")))


def test_worker_added_mid_run_rebalances(cfg, embedded, tmp_path):
    started = time.monotonic()
    with KafkaRun(cfg, BOOTSTRAP, workers=1, run_dir=tmp_path, timeout=30, keep_topics=True, hold_at=HOLD) as run:
        run.start()
        run.wait_reported(HOLD)
        run.start_worker()
        assert run.wait_assigned(2, 30), "the second worker never got partitions"
        run.release()
        summary = run.track()
        _assert_same(run, summary, embedded)
        logs = _worker_logs(run)
        assert "revoked" in logs and "restored partitions" in logs
        run.keep_topics = False
    assert time.monotonic() - started < 60


def test_killed_worker_clients_move_to_another(cfg, embedded, tmp_path):
    started = time.monotonic()
    with KafkaRun(cfg, BOOTSTRAP, workers=2, run_dir=tmp_path, timeout=30, keep_topics=True, hold_at=HOLD) as run:
        run.start()
        run.wait_reported(HOLD)
        run.kill_worker(1)                     # SIGKILL mid-round: no leave, no flush
        run.release()
        summary = run.track()
        _assert_same(run, summary, embedded)
        w0 = (run.log_dir / "worker-0.log").read_text()
        taken = [ln for ln in w0.splitlines() if "restored partitions" in ln and ", 15)" in ln]
        assert taken, "worker 0 did not take over clients from their round-3 checkpoint (step 15)"
        run.keep_topics = False
    assert time.monotonic() - started < 60


def test_aggregator_restarted_mid_run(cfg, embedded, tmp_path):
    started = time.monotonic()
    with KafkaRun(cfg, BOOTSTRAP, workers=2, run_dir=tmp_path, timeout=30, keep_topics=True, hold_at=HOLD) as run:
        run.start()
        run.wait_reported(HOLD)
        run.kill_aggregator()
        run.release(4 * TAU)                   # round 4's models reach the updates topic with no aggregator
        run.wait_reported(4 * TAU)
        run.start_aggregator()                 # must complete round 4 from the topic
        run.release(7 * TAU + 2)
        run.wait_reported(7 * TAU + 2)
        run.restart_aggregator()               # and once more while idle
        run.release()
        summary = run.track()
        _assert_same(run, summary, embedded)
        run.keep_topics = False
    assert time.monotonic() - started < 60


def _broker_env():
    home = os.environ.get("STREAMFL_KAFKA_HOME")
    port = os.environ.get("STREAMFL_KAFKA_PORT", "9092")
    if not home or not BOOTSTRAP.endswith(":" + port):
        return None
    return dict(os.environ, STREAMFL_KAFKA_HOME=home, STREAMFL_KAFKA_PORT=port)


@pytest.mark.skipif(_broker_env() is None, reason="needs STREAMFL_KAFKA_HOME of the broker at STREAMFL_KAFKA "
                                                   "(and STREAMFL_KAFKA_PORT if not 9092) to restart it")
def test_broker_restarted_mid_run(cfg, embedded, tmp_path):
    env = _broker_env()
    script = str(ROOT / "scripts" / "kafka-local")
    started = time.monotonic()
    with KafkaRun(cfg, BOOTSTRAP, workers=2, run_dir=tmp_path, timeout=45, keep_topics=True, hold_at=HOLD) as run:
        run.start()
        run.wait_reported(HOLD)
        try:
            subprocess.run([script, "stop"], env=env, check=True, capture_output=True, timeout=60)
        finally:
            subprocess.run([script, "start"], env=env, check=True, capture_output=True, timeout=90)
        run.release()
        summary = run.track()
        _assert_same(run, summary, embedded)
        run.keep_topics = False
    assert time.monotonic() - started < 90
