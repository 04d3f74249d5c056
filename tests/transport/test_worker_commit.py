"""A worker's transaction counts as committed only if the broker acknowledged every record in it.

kafka-python ends a transaction none of whose records reached the broker without
an EndTxn and returns from ``commit_transaction`` without an error. A worker
whose producer had been fenced by a twin (a second worker with the same id)
then believed its round's UPDATE was on the topic, waited for the GLOBAL model
that could never come, and the run stalled (tests/kafka/test_more_faults.py::
test_a_second_worker_with_the_same_id failed about once in six runs).
"""
import threading
from types import SimpleNamespace

import pytest
from kafka.errors import ProducerFencedError
from kafka.producer.future import FutureProduceResult, FutureRecordMetadata

from consumers.worker import Fenced, Worker, _unwritten


def _future(outcome):
    produced = FutureProduceResult(("streamfl-updates", 0))
    f = FutureRecordMetadata(produced, 0, -1, None, 0, 10, 0)
    if outcome == "ok":
        produced.success((7, -1, None))
    elif outcome == "fenced":
        produced.failure(ProducerFencedError())
    return f


def test_unwritten_names_each_record_the_broker_did_not_acknowledge():
    assert _unwritten([_future("ok"), _future("ok")]) == []
    assert _unwritten([_future("ok"), _future("fenced")]) == ["ProducerFencedError"]
    assert _unwritten([_future("pending")], wait=0.01) == ["KafkaTimeoutError"]


class _Producer:
    def __init__(self):
        self.calls = []

    def send_offsets_to_transaction(self, offsets, meta):
        self.calls.append("offsets")

    def commit_transaction(self):        # returns without an error, as kafka-python does without EndTxn
        self.calls.append("commit")

    def abort_transaction(self):
        self.calls.append("abort")


def _worker(futures):
    w = Worker.__new__(Worker)
    w.id, w.topics = 0, SimpleNamespace(worker_group="g")
    w._txn_lock, w._txn_open, w._txn_futures = threading.RLock(), True, futures
    w.producer, w.consumer = _Producer(), SimpleNamespace(group_metadata=lambda: SimpleNamespace(
        generation_id=3, member_id="m"))
    w._offsets = lambda: {}
    w.fences = w._producer_fences = w.commits = 0
    return w


def test_a_commit_whose_records_were_not_written_is_a_fence():
    w = _worker([_future("ok"), _future("fenced")])
    with pytest.raises(Fenced, match=r"1 of 2 record\(s\) of the committed transaction were not written "
                                     r"\(ProducerFencedError\)"):
        w._commit()
    assert (w.commits, w.fences, w._txn_open) == (0, 1, False)
    assert w.producer.calls == ["commit", "abort"]


def test_a_commit_whose_records_were_all_written_counts():
    w = _worker([_future("ok")])
    w._commit()
    assert (w.commits, w.fences, w._txn_open, w._txn_futures) == (1, 0, False, [])


def test_stall_messages_list_at_most_twenty_client_ids():
    # a GMF worker's stall message listed all 943 clients, several times (10,440 characters on one line)
    from consumers.worker import _ids
    assert _ids([3, 1]) == "[3, 1]"
    assert _ids(list(range(943))) == ("[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, …] "
                                      "(943 in all)")
