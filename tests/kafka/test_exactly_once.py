"""Exactly once over a real broker under a paused worker (zombie), duplicate and misplaced DATA records,
and forged UPDATE records: the run ends with the numbers of the no-fault embedded run (to 1e-9), every
(step, client) is on the loss topic once, and what was refused is on the dead-letter topic with its reason.

Skipped unless ``STREAMFL_KAFKA`` names the bootstrap address. Same config as ``test_faults.py``
(T = 120, M = 4, τ = 5); the stream is held at step 17 (inside round 4) with the ``hold_at`` test hook.
"""

import os
import re
import signal
import time

import numpy as np
import pytest

BOOTSTRAP = os.environ.get("STREAMFL_KAFKA")
if not BOOTSTRAP:
    pytest.skip("STREAMFL_KAFKA is not set: start a broker with scripts/kafka-local start", allow_module_level=True)

from conftest import read_topic  # noqa: E402
from test_faults import HOLD, M, TAU, _assert_same, cfg  # noqa: E402,F401  (fixture; embedded is in conftest)

from streamfl.runtime.kafka_run import KafkaRun  # noqa: E402
from streamfl.transport.format import ClientState, Data, Loss, Update, decode, encode  # noqa: E402
from streamfl.transport.state import state_topic  # noqa: E402
from streamfl.transport.topics import key_of, make_producer  # noqa: E402


def _owned(log_path) -> list[int]:
    """The partitions a worker's log says it owns last (``owns partitions [...]``)."""
    found = re.findall(r"owns partitions \[([0-9, ]*)\]", log_path.read_text())
    return [int(p) for p in found[-1].split(",") if p.strip()] if found else []


def _wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def _uncommitted(topic):
    """Every record of partition 0 of ``topic`` as a read_uncommitted consumer sees it (aborted ones too)."""
    from kafka import KafkaConsumer, TopicPartition
    tp = TopicPartition(topic, 0)
    c = KafkaConsumer(bootstrap_servers=BOOTSTRAP, group_id=None, enable_auto_commit=False,
                      auto_offset_reset="earliest", isolation_level="read_uncommitted")
    try:
        c.assign([tp])
        c.seek_to_beginning(tp)
        end, out = c.end_offsets([tp])[tp], []
        deadline = time.monotonic() + 20
        while c.position(tp) < end and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=200).values():
                out.extend(decode(r.value) for r in recs)
        return out
    finally:
        c.close()


def _dead(run):
    """[(headers as str dict, raw value)] of the run's dead-letter topic."""
    from kafka import KafkaConsumer, TopicPartition
    tp = TopicPartition(run.topics.dead, 0)
    c = KafkaConsumer(bootstrap_servers=BOOTSTRAP, group_id=None, enable_auto_commit=False,
                      auto_offset_reset="earliest", isolation_level="read_committed")
    try:
        c.assign([tp])
        c.seek_to_beginning(tp)
        end, out = c.end_offsets([tp])[tp], []
        deadline = time.monotonic() + 20
        while c.position(tp) < end and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=200).values():
                out.extend(({k: v.decode() for k, v in r.headers}, r.value) for r in recs)
        return out
    finally:
        c.close()


def test_a_paused_worker_is_fenced_and_the_run_matches_embedded(cfg, embedded, tmp_path):
    """SIGSTOP worker 1 past its session timeout: its partitions move to worker 0, which restores them from
    the changelog and goes on; on SIGCONT worker 1 acts on its stale clients, but nothing it writes for
    them is committed (its transaction is fenced), it restores what it is given anew, and the run ends
    with the embedded numbers, every (step, client) reported once. The pause (24 s) is longer than the
    workers' stall timeout (20 s): waking up is not a stall (the zombie used to exit 1 and abort the run)."""
    with KafkaRun(cfg, BOOTSTRAP, workers=2, run_dir=tmp_path, timeout=20, keep_topics=True, hold_at=HOLD) as run:
        run.start()
        run.wait_reported(HOLD)
        w0, w1 = (run.log_dir / "worker-0.log"), (run.log_dir / "worker-1.log")
        _wait_for(lambda: _owned(w1), 10, "worker 1's assignment")
        taken = _owned(w1)
        pid = run.workers[1].proc.pid
        os.kill(pid, signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            run.release(HOLD + 2 * TAU)           # rounds 4 and 5 need worker 1's clients
            # ownership moves: worker 0 restores worker 1's partitions and finishes rounds 4 and 5 alone
            _wait_for(lambda: set(taken) <= set(_owned(w0)), 40, f"worker 0 to take partitions {taken}")
            run.wait_reported(HOLD + 2 * TAU)
            time.sleep(max(0.0, 24 - (time.monotonic() - stopped)))
        finally:
            os.kill(pid, signal.SIGCONT)
        run.release()
        summary = run.track()
        _assert_same(run, summary, embedded)                  # every (t, m) once on the committed loss topic
        assert summary["duplicate_loss_reports"] == 0
        assert run.workers[1].proc.poll() in (None, 0)        # the zombie did not fail the run

        committed = [msg for msg, _ in read_topic(BOOTSTRAP, run.topics.loss) if isinstance(msg, Loss)]
        written = [msg for msg in _uncommitted(run.topics.loss) if isinstance(msg, Loss)]
        stale = {(msg.t, c) for msg in written if msg.worker == 1 and HOLD < msg.t <= HOLD + 2 * TAU
                 for c in msg.clients.tolist() if c % run.P in taken}
        by_w1 = {(msg.t, c) for msg in committed if msg.worker == 1 for c in msg.clients.tolist()}
        assert not (stale & by_w1), "a LOSS the zombie wrote for its lost clients was committed"
        log1 = w1.read_text()
        # whatever the zombie did on waking (wrote and was fenced, or learned of its expulsion first),
        # it warned at most once
        assert len(re.findall(r"WARNING.*transaction aborted", log1)) <= 1
        assert "partitions" in log1 and ("lost" in log1 or "transaction aborted" in log1), log1[-2000:]
        assert re.search(r"worker 1: paused for 2\d s; not counted as a stall", log1), log1[-2000:]
        print(f"zombie wrote {len(stale)} stale (step, client) LOSS entries, none committed;",
              sorted({(m.t, tuple(m.clients.tolist())) for m in written if m.worker == 1 and m.t > HOLD})[:12], taken)
        run.keep_topics = False


def test_duplicate_and_misplaced_data_records(cfg, embedded, tmp_path):
    """After steps 1-17: a second, different record for (client 0, step 10) is dead-lettered as a duplicate
    (the first stands); a bit-identical copy of another client's step-12 record is counted once; a
    client-0 record on partition 2 with key "2" and a client-3 record keyed "0" are dead-lettered as
    wrong_partition. The owner of client 0 is then SIGKILLed: its successor restores from checkpoints
    whose offsets point at genuine records only, and the run ends with the embedded numbers."""
    with KafkaRun(cfg, BOOTSTRAP, workers=2, run_dir=tmp_path, timeout=45, keep_topics=True, hold_at=HOLD) as run:
        run.start()
        run.wait_reported(HOLD)

        def split():      # both workers own partitions, none twice: the group's assignment has settled
            owned = [set(_owned(run.log_dir / f"worker-{i}.log")) for i in (0, 1)]
            return all(owned) and not (owned[0] & owned[1])
        _wait_for(split, 30, "the two workers to split the partitions")   # a late joiner can still be rebalancing
        owners = {i: _owned(run.log_dir / f"worker-{i}.log") for i in (0, 1)}
        killed = next(i for i, ps in owners.items() if 0 in ps)
        other = 1 - killed
        twin = next(m for m in range(M) if m % run.P in owners[other])      # its copy is not re-read later
        chunk = next(run.stream.chunks(cfg.chunk_size))

        def genuine(t, m):
            i = t - 1
            return Data(t=t, client=m, X=chunk.X[i, m], y=chunk.y[i, m], present=True,
                        optimum=None if chunk.optimum is None else chunk.optimum[i, m])

        forged = genuine(10, 0)
        forged.X = forged.X + 1.0
        producer = make_producer(BOOTSTRAP, "streamfl-test-forger")
        records = [(0, key_of(0), encode(forged), "duplicate"),
                   (twin % run.P, key_of(twin), encode(genuine(12, twin)), None),        # bit-identical copy
                   (2, b"2", encode(genuine(HOLD + 1, 0)), "wrong_partition"),
                   (3, key_of(0), encode(genuine(HOLD + 1, 3)), "wrong_partition")]
        for part, key, value, _ in records:
            producer.send(run.topics.data, value=value, key=key, partition=part)
        producer.flush(timeout=30)
        producer.close(timeout=10)
        _wait_for(lambda: len(_dead(run)) >= 3, 20, "three dead letters")
        run.kill_worker(killed)
        run.release()
        summary = run.track()
        _assert_same(run, summary, embedded)

        dead = _dead(run)
        assert sorted(h["reason"] for h, _ in dead) == ["duplicate", "wrong_partition", "wrong_partition"]
        assert {bytes(v) for _, v in dead} == {v for _, _, v, r in records if r}
        assert all(h["source"].startswith("worker-") for h, _ in dead)
        assert summary["dead_letters"] == 3
        logs = "".join(p.read_text() for p in run.log_dir.glob("worker-*.log"))
        assert f"DATA of client {twin} step 12" in logs and "counted once" in logs

        # every checkpoint's resume offset is one past a genuine DATA record of its client and step
        data = {p: read_topic(BOOTSTRAP, run.topics.data, p) for p in range(run.P)}
        states = [msg for p in range(run.P) for msg, _ in read_topic(BOOTSTRAP, state_topic(run.run_id), p)
                  if isinstance(msg, ClientState) and msg.t > 0]
        assert states
        for st in states:
            learned, _ = data[st.client % run.P][st.offset - 1]
            assert (learned.client, learned.t) == (st.client, st.t)
            want = genuine(st.t, st.client) if st.t <= cfg.chunk_size else None
            if want is not None:
                np.testing.assert_array_equal(learned.X, want.X)
        run.keep_topics = False


def test_forged_updates_are_dead_lettered_and_the_run_goes_on(cfg, embedded, tmp_path):
    """Two UPDATEs of round 4 that no worker sent: one naming client 0 alone with a zero sum, one covering
    every client (it alone would complete the round). Neither is proven by the workers' committed offsets:
    the aggregator averages the genuine updates, dead-letters both forgeries, and the run goes on."""
    with KafkaRun(cfg, BOOTSTRAP, workers=2, run_dir=tmp_path, timeout=45, keep_topics=True, hold_at=HOLD) as run:
        run.start()
        run.wait_reported(HOLD)
        producer = make_producer(BOOTSTRAP, "streamfl-test-forger")
        forged = [encode(Update(round=4, worker=0, clients=np.array([0]), model_sum=np.zeros((3, 1)))),
                  encode(Update(round=4, worker=9, clients=np.arange(M), model_sum=np.ones((3, 1)),
                                n_participants=M))]
        for value in forged:
            producer.send(run.topics.updates, value=value, key=b"0", partition=0)
        producer.flush(timeout=30)
        producer.close(timeout=10)
        run.release()
        summary = run.track()
        _assert_same(run, summary, embedded)
        dead = _dead(run)
        assert {bytes(v) for _, v in dead} == set(forged)
        assert [h["reason"] for h, _ in dead] == ["unverified", "unverified"]
        assert all(h["source"] == "aggregator" and "not sent by the owner" in h["detail"] for h, _ in dead)
        run.keep_topics = False
