"""More faults over a real broker: a DATA record near the broker's size limit, a truncated DATA record,
a second worker started with an id already in use, and a stray member in the workers' consumer group.
Each ends with the numbers of the no-fault embedded run (to 1e-9) or a one-line error naming the cause.

Skipped unless ``STREAMFL_KAFKA`` names the bootstrap address. Same config as ``test_faults.py``.
"""

import os
import time

import numpy as np
import pandas as pd
import pytest

BOOTSTRAP = os.environ.get("STREAMFL_KAFKA")
if not BOOTSTRAP:
    pytest.skip("STREAMFL_KAFKA is not set: start a broker with scripts/kafka-local start", allow_module_level=True)

from test_exactly_once import _dead, _owned, _wait_for  # noqa: E402
import test_faults  # noqa: E402
from test_faults import COLUMNS, HOLD, M, _assert_same  # noqa: E402

cfg = test_faults.cfg                  # the fixture of test_faults.py (embedded is in conftest)

from streamfl.runtime.kafka_run import KafkaRun  # noqa: E402
from streamfl.transport.format import Data, encode  # noqa: E402
from streamfl.transport.topics import key_of  # noqa: E402


def test_huge_and_truncated_data_records_are_dead_lettered(cfg, embedded, tmp_path):
    """A DATA record just under the broker's 1 MiB limit (X of the wrong shape) and the first half of a
    genuine record are dead-lettered unchanged (shape_mismatch, truncated) and the run matches embedded."""
    with KafkaRun(cfg, BOOTSTRAP, workers=2, run_dir=tmp_path, timeout=30, keep_topics=True, hold_at=HOLD) as run:
        run.start()
        run.wait_reported(HOLD)
        chunk = next(run.stream.chunks(cfg.chunk_size))
        i = HOLD
        genuine = encode(Data(t=HOLD + 1, client=1, X=chunk.X[i, 1], y=chunk.y[i, 1], present=True,
                              optimum=None if chunk.optimum is None else chunk.optimum[i, 1]))
        n = (1048588 - 400) // 8           # just under the broker's default message.max.bytes
        huge = encode(Data(t=HOLD + 1, client=0, X=np.zeros((1, n)), y=np.zeros(1), present=True))
        truncated = genuine[: len(genuine) // 2]
        from kafka import KafkaProducer
        p = KafkaProducer(bootstrap_servers=BOOTSTRAP, max_request_size=4 << 20)
        p.send(run.topics.data, value=huge, key=key_of(0), partition=0).get(timeout=30)
        p.send(run.topics.data, value=truncated, key=key_of(1), partition=1).get(timeout=30)
        p.close(timeout=10)
        _wait_for(lambda: len(_dead(run)) >= 2, 30, "two dead letters")
        run.release()
        summary = run.track()
        _assert_same(run, summary, embedded)
        dead = _dead(run)
        assert sorted(h["reason"] for h, _ in dead) == ["shape_mismatch", "truncated"]
        assert {bytes(v) for _, v in dead} == {huge, truncated}
        assert summary["dead_letters"] == 2
        run.keep_topics = False


def test_a_second_worker_with_the_same_id(cfg, embedded, tmp_path):
    """A worker started with --worker-id 0 while worker 0 runs: both use one transactional id, so each new
    producer fences the other's. A fenced worker aborts, drops its clients and restores from the changelog
    (it used to exit 1 with a raw ProducerFencedError and abort the run); one fenced three times in a row
    stops with exit 3 naming the id clash, which the run tolerates. The numbers equal the embedded run's."""
    with KafkaRun(cfg, BOOTSTRAP, workers=2, run_dir=tmp_path, timeout=30, keep_topics=True, hold_at=HOLD) as run:
        run.start()
        run.wait_reported(HOLD)
        from streamfl.runtime.kafka_run import _Child
        run.workers.append(_Child("worker-twin", "consumers.worker",
                                  run.common + ["--config", str(run.config_path), "--partitions", str(run.P),
                                                "--worker-id", "0", "--timeout", str(run.timeout),
                                                "--session-timeout", str(run.session_timeout)], run.log_dir))
        _wait_for(lambda: _owned(run.log_dir / "worker-twin.log"), 40, "the twin's assignment")
        time.sleep(2)
        run.release()
        summary = run.track()
        _assert_same(run, summary, embedded)
        codes = [w.proc.poll() for w in run.workers]
        assert set(codes) <= {None, 0, 3}, codes            # a fenced twin stops with exit 3, tolerated
        logs = "".join(p.read_text() for p in run.log_dir.glob("worker-*.log"))
        assert "ProducerFenced" in logs, logs[-3000:]        # the twins did fence each other
        assert "Traceback" not in logs
        if 3 in codes:
            assert "is a second worker running with --worker-id 0?" in logs
        run.keep_topics = False


def test_a_stray_member_of_the_workers_group(cfg, tmp_path):
    """A plain consumer that joins the workers' group mid-run (a stale or mistyped --group, an operator's
    console consumer) takes a partition and never trains its client: the run cannot finish, and the
    workers' stall message names that member and the partition, not a guess."""
    import threading

    from kafka import KafkaConsumer
    from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor

    from streamfl.runtime.kafka_run import KafkaRunError
    with KafkaRun(cfg, BOOTSTRAP, workers=2, run_dir=tmp_path, timeout=20, hold_at=HOLD) as run:
        run.start()
        run.wait_reported(HOLD)
        stop = []
        stray = KafkaConsumer(bootstrap_servers=BOOTSTRAP, group_id=run.topics.worker_group,
                              client_id="stray", enable_auto_commit=False,
                              partition_assignment_strategy=(CooperativeStickyAssignor,))
        stray.subscribe([run.topics.data])

        def spin():
            while not stop:
                stray.poll(timeout_ms=200)
        th = threading.Thread(target=spin)
        th.start()
        try:
            time.sleep(8)
            owned = {tp.partition for tp in stray.assignment()}
            assert owned, "the stray consumer got no partition"
            run.release()
            with pytest.raises(KafkaRunError):
                run.track()           # the tracker may give up first; the workers' diagnosis follows
            want = (f"partitions {sorted(owned)} are assigned to member 'stray' at /127.0.0.1 of group "
                    f"{run.topics.worker_group}, which is not a worker of this run")

            def logs():
                return "".join(p.read_text() for p in run.log_dir.glob("worker-*.log"))
            _wait_for(lambda: want in logs(), 60, "the workers' stall message naming the stray member")
        finally:
            stop.append(1)
            th.join(10)
            stray.close()


def test_stray_records_on_the_loss_and_global_topics_do_not_end_the_run(cfg, embedded, tmp_path):
    """Garbage bytes and a LOSS naming client 99 on the loss topic, garbage and a GLOBAL of the wrong shape
    on the global topic (a stray writer): they used to end the run (the tracker's or every worker's
    'malformed ... record' error). The tracker dead-letters the loss-topic records with their reason, the
    workers skip the global-topic ones with a warning, and the run ends with the embedded numbers."""
    from streamfl.transport.format import Global, Loss
    with KafkaRun(cfg, BOOTSTRAP, workers=2, run_dir=tmp_path, timeout=30, keep_topics=True, hold_at=HOLD) as run:
        run.start()
        run.wait_reported(HOLD)
        loss_bad = [b"not a record", encode(Loss(HOLD + 1, 0, np.array([99]), np.array([0.5]), np.zeros((1, 3, 1))))]
        global_bad = [b"\x00garbage", encode(Global(round=4, model=np.zeros((5, 1)), n_participants=M))]
        from kafka import KafkaProducer
        p = KafkaProducer(bootstrap_servers=BOOTSTRAP)
        for v in loss_bad:
            p.send(run.topics.loss, value=v, partition=0).get(timeout=30)
        for v in global_bad:
            p.send(run.topics.global_, value=v, partition=0).get(timeout=30)
        p.close(timeout=10)
        run.release()
        summary = run.track()
        want_summary, want = embedded       # the loss topic holds the stray records: compare the numbers
        got = pd.read_parquet(run.run_dir / "metrics.parquet")
        for col in COLUMNS:
            np.testing.assert_allclose(got[col].to_numpy(), want[col].to_numpy(), rtol=0, atol=1e-9, err_msg=col)
        for key in ("regret_static", "regret_expected", "regret_dynamic"):
            assert summary[key] == pytest.approx(want_summary[key], abs=1e-9)
        assert summary["samples"] == want_summary["samples"] and summary["duplicate_loss_reports"] == 0
        dead = _dead(run)
        assert sorted((h["source"], h["reason"]) for h, _ in dead) == [("tracker", "bad_field"),
                                                                        ("tracker", "bad_magic")]
        assert {bytes(v) for _, v in dead} == set(loss_bad)
        assert summary["dead_letters"] == 2
        logs = "".join(p.read_text() for p in run.log_dir.glob("worker-*.log"))
        assert logs.count("that is not a GLOBAL of this run") == 2 * len(global_bad), logs[-3000:]
        run.keep_topics = False


def test_a_record_that_skips_steps_is_dead_lettered_once(cfg, embedded, tmp_path):
    """A well-formed DATA record of client 0 for step 20 while the stream is held at step 17 skips steps 18
    and 19: it is dead-lettered (out_of_order) and the genuine steps are learned. The owner of client 0 is
    then SIGKILLed; its successor replays the partition over that record and does not dead-letter it again.
    The numbers equal the embedded run's."""
    with KafkaRun(cfg, BOOTSTRAP, workers=2, run_dir=tmp_path, timeout=45, keep_topics=True, hold_at=HOLD) as run:
        run.start()
        run.wait_reported(HOLD)
        owners = {i: _owned(run.log_dir / f"worker-{i}.log") for i in (0, 1)}
        killed = next(i for i, ps in owners.items() if 0 in ps)
        chunk = next(run.stream.chunks(cfg.chunk_size))
        i = HOLD + 2
        skip = encode(Data(t=HOLD + 3, client=0, X=chunk.X[i, 0], y=chunk.y[i, 0], present=True,
                           optimum=None if chunk.optimum is None else chunk.optimum[i, 0]))
        from kafka import KafkaProducer
        p = KafkaProducer(bootstrap_servers=BOOTSTRAP)
        p.send(run.topics.data, value=skip, key=key_of(0), partition=0).get(timeout=30)
        p.close(timeout=10)
        _wait_for(lambda: len(_dead(run)) >= 1, 30, "the dead letter")
        run.kill_worker(killed)          # its successor restores from the step-15 checkpoint, before that record
        run.release()
        summary = run.track()
        _assert_same(run, summary, embedded)
        dead = _dead(run)
        assert [(h["reason"], bytes(v)) for h, v in dead] == [("out_of_order", skip)]
        assert "step 20 after step 17" in dead[0][0]["detail"]
        assert summary["dead_letters"] == 1
        run.keep_topics = False
