"""Streaming FedNCF (GMF) over a real broker gives the embedded run's numbers, bit for bit.

MovieLens 100K (M = 943 users as clients, I = 1682 items), the first T = 60
steps, τ = 10: every column of ``metrics.parquet`` (losses, HR@10, the
live and final comparator and the regret) and the summary's HR@10, BCE,
regret and bytes equal the embedded engine's exactly — with one or two
workers, after a worker is killed (SIGKILL) mid-round and replaced, after the
aggregator is restarted mid-round, with the roles started by hand, and
with malformed GMF records on the updates and loss topics (dead-lettered
with their reason).

Skipped unless ``STREAMFL_KAFKA`` names the bootstrap address and the data
set is at ``/work/shared/data/ml-100k``.
"""

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

BOOTSTRAP = os.environ.get("STREAMFL_KAFKA")
if not BOOTSTRAP:
    pytest.skip("STREAMFL_KAFKA is not set: start a broker with scripts/kafka-local start", allow_module_level=True)
ML100K = Path("/work/shared/data/ml-100k")
if not (ML100K / "u.data").is_file():
    pytest.skip(f"MovieLens 100K not found at {ML100K} (u.data): the GMF Kafka tests need it",
                allow_module_level=True)

from conftest import read_topic  # noqa: E402
from streamfl.config import parse_config  # noqa: E402
from streamfl.runtime.experiment import run_experiment  # noqa: E402
from streamfl.runtime.kafka_run import KafkaRun  # noqa: E402
from streamfl.transport.format import GMFGlobal, GMFUpdate, RankedLoss, encode  # noqa: E402
from streamfl.transport.topics import key_of  # noqa: E402

T, TAU, HOLD, M, I = 60, 10, 25, 943, 1682          # HOLD: inside round 3 (checkpoints at step 20)
SUMMARY_KEYS = ("prequential_hr10", "avg_loss_per_interaction", "regret_static", "interactions", "bytes_up",
                "bytes_down", "regret_over_sqrt_T", "client_cum_loss", "client_interactions", "client_hr10",
                "client_regret", "client_user_ids")


@pytest.fixture(scope="module")
def cfg():
    return parse_config({
        "name": "kafka-gmf", "seed": 5, "steps": T, "chunk_size": 20,
        "source": {"kind": "movielens", "path": str(ML100K)},
        "learner": {"model": "gmf", "tau": TAU, "gmf": {}},
        "baselines": [],
        "output": {"format": "parquet", "plots": False},      # parquet: every float64 bit on disk
    })


def _assert_same(run, summary, embedded):
    want_summary, want = embedded
    got = pd.read_parquet(run.run_dir / "metrics.parquet")
    assert list(got.columns) == list(want.columns)
    assert got["t"].tolist() == list(range(1, T + 1))
    for col in want.columns:                       # exact: the same arithmetic in the same order
        assert np.array_equal(got[col].to_numpy(), want[col].to_numpy(), equal_nan=True), col
    for key in SUMMARY_KEYS:
        assert summary[key] == want_summary[key], key
    assert summary["cum_loss"] == want_summary["cum_loss"]
    assert summary["comparator"]["loss"] == want_summary["comparator"]["loss"]
    assert summary["comparator"]["prequential_hr10"] == want_summary["comparator"]["prequential_hr10"]
    assert summary["model"] == "gmf" and summary["rounds"] == want_summary["rounds"] == T // TAU
    # the embedded keys, less the engine's CPU time (spread over the worker processes over Kafka)
    assert set(want_summary) - set(summary) == {"engine_cpu_seconds"}
    # every (step, client) reported exactly once; one GLOBAL per round
    seen = {}
    for msg, _ in read_topic(BOOTSTRAP, run.topics.loss):
        if isinstance(msg, RankedLoss):
            for m in msg.clients.tolist():
                seen[(msg.t, m)] = seen.get((msg.t, m), 0) + 1
    assert len(seen) == T * M and set(seen.values()) == {1}
    rounds = [msg.round for msg, _ in read_topic(BOOTSTRAP, run.topics.global_) if isinstance(msg, GMFGlobal)]
    assert sorted(rounds) == list(range(1, T // TAU + 1))


@pytest.mark.parametrize("workers", [1, 2])
def test_gmf_over_kafka_equals_embedded(cfg, embedded, workers, tmp_path):
    with KafkaRun(cfg, BOOTSTRAP, workers=workers, run_dir=tmp_path, partitions=4, timeout=60,
                  keep_topics=True) as run:
        run.start()
        summary = run.track(plots=False)
        _assert_same(run, summary, embedded)
        assert summary["transport"]["workers"] == workers and summary["dead_letters"] == 0
        run.keep_topics = False


@pytest.mark.parametrize("workers", [1, 2])
def test_gmf_worker_killed_mid_round_and_replaced_equals_embedded(cfg, embedded, workers, tmp_path):
    """SIGKILL inside round 3: the clients are restored from their step-20 checkpoints (p, h, b and the
    items seen) by a new worker (one worker) or by the survivor, which then holds clients of two rounds
    (two workers); the numbers do not change."""
    with KafkaRun(cfg, BOOTSTRAP, workers=workers, run_dir=tmp_path, partitions=4, timeout=60,
                  keep_topics=True, hold_at=HOLD) as run:
        run.start()
        run.wait_reported(HOLD)
        run.kill_worker(workers - 1)
        if workers == 1:
            run.start_worker()
        run.release()
        summary = run.track(plots=False)
        _assert_same(run, summary, embedded)
        heir = run.log_dir / f"worker-{1 if workers == 1 else 0}.log"
        restored = [ln for ln in heir.read_text().splitlines() if "restored partitions" in ln and ", 20)" in ln]
        assert restored, f"{heir.name} did not restore clients from their round-2 checkpoint (step 20)"
        run.keep_topics = False


def test_gmf_aggregator_restarted_mid_run_equals_embedded(cfg, embedded, tmp_path):
    """The aggregator is killed inside round 3; round 3's updates reach the topic with no aggregator; a new one
    resumes after the last published GMF_GLOBAL and completes it from the topic."""
    with KafkaRun(cfg, BOOTSTRAP, workers=1, run_dir=tmp_path, partitions=4, timeout=60, keep_topics=True,
                  hold_at=HOLD) as run:
        run.start()
        run.wait_reported(HOLD)
        run.kill_aggregator()
        run.release(3 * TAU)
        run.wait_reported(3 * TAU)
        run.start_aggregator()
        run.release()
        summary = run.track(plots=False)
        _assert_same(run, summary, embedded)
        assert "resuming after round 2" in (run.log_dir / "aggregator-1.log").read_text()
        run.keep_topics = False


def test_malformed_gmf_records_are_dead_lettered_and_the_run_still_equals_embedded(cfg, embedded, tmp_path):
    """An update naming item I (out of range) and a RANKED_LOSS with 3 negatives instead of 4 are put on
    the run's topics before it starts; the aggregator and the tracker dead-letter them with their reason."""
    from streamfl.transport.state import resilient_producer
    bad_update = encode(GMFUpdate(round=1, worker=7, table=0, clients=np.array([0]), n_samples=np.array([1]),
                                  n_rows=np.array([1]), ids=np.array([I]), rows=np.zeros((1, 12)),
                                  counts=np.array([1]), h=np.zeros((1, 12)), b=np.zeros(1)))
    bad_loss = encode(RankedLoss(t=1, worker=7, clients=np.array([0]), losses=np.array([0.5]), ranks=np.array([3]),
                                 negatives=np.array([[1, 2, 3]])))
    with KafkaRun(cfg, BOOTSTRAP, workers=1, run_dir=tmp_path, partitions=4, timeout=60, keep_topics=True) as run:
        producer = resilient_producer(BOOTSTRAP, "streamfl-test-stray")
        producer.send(run.topics.updates, value=bad_update, key=key_of(7), partition=0)
        producer.send(run.topics.loss, value=bad_loss, key=key_of(7), partition=0)
        producer.flush(30)
        producer.close()
        run.start()
        summary = run.track(plots=False)
        want_summary, want = embedded
        got = pd.read_parquet(run.run_dir / "metrics.parquet")
        for col in want.columns:
            assert np.array_equal(got[col].to_numpy(), want[col].to_numpy(), equal_nan=True), col
        for key in SUMMARY_KEYS:
            assert summary[key] == want_summary[key], key
        dead = {bytes(encode(msg)): h for msg, h in read_topic(BOOTSTRAP, run.topics.dead)}
        assert set(dead) == {bad_update, bad_loss}
        up, loss = ({k: v.decode() for k, v in dead[raw].items()} for raw in (bad_update, bad_loss))
        assert (up["reason"], up["source"]) == ("unknown_item", "aggregator")
        assert up["detail"] == (f"unknown_item: round 1: worker 7's update names item ids [{I}], this run has "
                                f"I = {I} items")
        assert (loss["reason"], loss["source"]) == ("shape_mismatch", "tracker")
        assert loss["detail"] == "LOSS from worker 7 at step 1: negatives (3,), expected (4,)"
        assert summary["dead_letters"] == 2
        run.keep_topics = False


def test_gmf_roles_started_by_hand_write_the_embedded_run_folder(tmp_path):
    """`streamfl aggregate | worker | produce | track --partitions 4` from a user's folder (relative data
    path, plots on): the tracker's metrics.csv is the embedded run's, byte for byte, and its plot is drawn."""
    import uuid

    from conftest import roles_by_hand
    from streamfl.config import load_config
    (tmp_path / "data").symlink_to(ML100K)
    (tmp_path / "gmf.yaml").write_text("name: by-hand\nseed: 2\nsteps: 30\nchunk_size: 10\n"
                                       "source: {kind: movielens, path: data}\nlearner: {model: gmf, tau: 10}\n"
                                       "baselines: []\n")
    cwd = os.getcwd()
    try:
        os.chdir(tmp_path)               # the config's relative data path, as the roles read it
        want = run_experiment(load_config(tmp_path / "gmf.yaml"), tmp_path / "embedded", plots=False)
    finally:
        os.chdir(cwd)
    out = roles_by_hand(BOOTSTRAP, tmp_path, "gmf.yaml", f"roles-gmf-{uuid.uuid4().hex[:8]}", ("--partitions", "4"))
    assert "M = 943 clients (one per user), I = 1682 items" in out
    assert (tmp_path / "kafka" / "metrics.csv").read_bytes() == (tmp_path / "embedded" / "metrics.csv").read_bytes()
    got = __import__("json").loads((tmp_path / "kafka" / "summary.json").read_text())
    for key in SUMMARY_KEYS:
        assert got[key] == want[key], key
    assert (tmp_path / "kafka" / "plots" / "ranking.png").is_file()
