"""The workers' state changelog: one compacted topic of client checkpoints per run.

``streamfl.<run>.state`` has P partitions, like the data topic, and
``cleanup.policy=compact``. Its records are :class:`~streamfl.transport.format.ClientState`
messages keyed by client id (decimal ASCII, :func:`~streamfl.transport.topics.key_of`);
client m's records go to partition m mod P, the partition of its data. After
compaction the topic keeps the latest checkpoint of every client — its model,
its last completed step, the data-topic offset to resume from and the
loss-topic offset from which its already reported steps can be found — which
is all a new owner needs to take a client over (see :mod:`consumers.worker`
for the checkpoint protocol).

:class:`StateStore` follows the whole topic and keeps the latest record per
client in memory (M small records); :meth:`StateStore.catch_up` is the
restoration step with its watchdog.
"""

from __future__ import annotations

import logging
import time

from .format import ClientState, FormatError, GMFState, decode, encode
from .security import client_config
from .topics import FETCH_MAX_WAIT_MS, BrokerUnavailable, key_of, partition_for, quiet_kafka_logs

log = logging.getLogger("streamfl.state")

__all__ = ["RestoreStalled", "StateStore", "create_state_topic", "delete_state_topic", "resilient_producer",
           "resilient_reader", "send_states", "state_topic", "transactional_producer"]


class RestoreStalled(RuntimeError):
    """Reading the state changelog made no progress in time; one-line message."""


def high_watermark(reader, tp) -> int:
    """The end of ``tp`` including records of transactions still open (a ``read_committed`` reader's
    ``end_offsets`` stops at the first open transaction)."""
    from kafka.protocol.consumer import IsolationLevel
    fetcher = reader._fetcher
    level = fetcher._isolation_level
    try:
        fetcher._isolation_level = IsolationLevel.READ_UNCOMMITTED
        return reader.end_offsets([tp])[tp]
    finally:
        fetcher._isolation_level = level


def read_to_end(reader, topic: str, on_record, timeout: float, start: int | None = None,
                settle: float = 0.0) -> None:
    """Read partition 0 of ``topic`` with ``reader`` up to its current end, calling ``on_record(rec)`` per record.

    Parameters
    ----------
    reader : KafkaConsumer
        Assigned to partition 0 of ``topic`` (see :func:`resilient_reader`).
    on_record : callable(ConsumerRecord)
    timeout : float
        Seconds the end offset may stay unreadable, or the reading without progress.
    start : int or None
        Offset to start from (None: the reader's position).
    settle : float
        Also wait up to this long for transactions open at the start to end
        (committed or aborted), so that records committed just before are
        read too; then stop at the first transaction still open.

    Raises
    ------
    RestoreStalled
        The end offset could not be read, or no record arrived, for ``timeout`` s.
    """
    from kafka import TopicPartition
    tp = TopicPartition(topic, 0)
    deadline = time.monotonic() + timeout
    while True:
        try:
            end = reader.end_offsets([tp])[tp]
            if settle > 0:
                end = max(end, high_watermark(reader, tp))
            break
        except Exception as e:
            if time.monotonic() > deadline:
                raise RestoreStalled(f"cannot read the end of {topic} ({type(e).__name__}) within "
                                     f"{timeout:.0f} s") from None
            time.sleep(0.2)
    if start is not None:
        reader.seek(tp, start)
    last = time.monotonic()
    settle_until = time.monotonic() + settle
    while reader.position(tp) < end:
        got = reader.poll(timeout_ms=100)
        for records in got.values():
            for rec in records:
                on_record(rec)
        if got:
            last = time.monotonic()
        elif settle > 0 and time.monotonic() > settle_until:      # an open transaction: stop before it
            end = reader.end_offsets([tp])[tp]
            settle = 0.0
        elif time.monotonic() - last > timeout:
            raise RestoreStalled(f"reading {topic} stalled at offset {reader.position(tp)} of {end} "
                                 f"({timeout:.0f} s without progress)")


def state_topic(run_id: str) -> str:
    """Name of the run's state changelog topic, ``streamfl.<run>.state``."""
    return f"streamfl.{run_id}.state"


def create_state_topic(bootstrap: str, run_id: str, n_partitions: int, timeout: float = 30.0) -> str:
    """Create the compacted state topic with ``n_partitions`` partitions; return its name.

    Waits until the metadata shows all partitions. An existing topic is kept.

    Raises
    ------
    BrokerUnavailable
        The topic did not appear within ``timeout`` s.
    """
    quiet_kafka_logs()
    from kafka import KafkaAdminClient, KafkaConsumer
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError
    name = state_topic(run_id)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **client_config(), client_id=f"streamfl-{run_id}-admin")
    try:
        admin.create_topics([NewTopic(name, n_partitions, 1, topic_configs={"cleanup.policy": "compact"})])
    except TopicAlreadyExistsError:
        pass
    finally:
        admin.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, **client_config(), client_id=f"streamfl-{run_id}-meta")
    try:
        deadline = time.monotonic() + timeout
        while len(consumer.partitions_for_topic(name) or ()) != n_partitions:
            if time.monotonic() > deadline:
                raise BrokerUnavailable(f"the state topic {name} did not appear within {timeout:.0f} s")
            consumer.topics()
            time.sleep(0.1)
    finally:
        consumer.close()
    return name


def delete_state_topic(bootstrap: str, run_id: str) -> None:
    """Delete the state topic; errors are ignored (best-effort clean-up)."""
    quiet_kafka_logs()
    try:
        from kafka import KafkaAdminClient
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, **client_config(), client_id=f"streamfl-{run_id}-admin",
                                 request_timeout_ms=10000, bootstrap_timeout_ms=5000)
        try:
            admin.delete_topics([state_topic(run_id)], raise_errors=False)
        finally:
            admin.close()
    except Exception:
        pass


class StateStore:
    """Follows every partition of the state topic; the latest checkpoint per client.

    Parameters
    ----------
    bootstrap, run_id : str
    n_partitions : int
        P of the state (= data) topic.
    client_id : str
        Kafka client id of the reader.

    Attributes
    ----------
    latest : dict[int, ClientState]
        Client id → its newest checkpoint read so far.
    """

    def __init__(self, bootstrap: str, run_id: str, n_partitions: int, client_id: str):
        quiet_kafka_logs()
        from kafka import KafkaConsumer, TopicPartition
        self.topic, self.P = state_topic(run_id), int(n_partitions)
        self.latest: dict[int, ClientState] = {}
        self.consumer = KafkaConsumer(bootstrap_servers=bootstrap, **client_config(), client_id=client_id, group_id=None,
                                      enable_auto_commit=False, auto_offset_reset="earliest", fetch_max_wait_ms=FETCH_MAX_WAIT_MS,
                                      bootstrap_timeout_ms=10000, reconnect_backoff_max_ms=1000,
                                      request_timeout_ms=15000, isolation_level="read_committed")
        self.tps = [TopicPartition(self.topic, p) for p in range(self.P)]
        self.consumer.assign(self.tps)
        self.consumer.seek_to_beginning(*self.tps)

    def poll(self, timeout_ms: int = 0) -> int:
        """Read whatever is available; return the number of records read.

        Raises
        ------
        FormatError
            A record is not a valid STATE message.
        """
        n = 0
        for records in self.consumer.poll(timeout_ms=timeout_ms).values():
            for rec in records:
                msg = decode(rec.value)
                if not isinstance(msg, (ClientState, GMFState)):
                    raise FormatError("bad_type", f"a {type(msg).__name__} record on {self.topic} "
                                                  f"(partition {rec.partition} offset {rec.offset})")
                old = self.latest.get(msg.client)
                if old is None or msg.t >= old.t:
                    self.latest[msg.client] = msg
                n += 1
        return n

    def catch_up(self, partitions, timeout: float) -> None:
        """Read the given state partitions up to their current end (restoration).

        Parameters
        ----------
        partitions : iterable of int
        timeout : float
            Seconds without progress before giving up (the watchdog).

        Raises
        ------
        RestoreStalled
            The end offsets could not be fetched, or the reader stalled below them.
        """
        tps = [self.tps[p] for p in sorted(set(partitions))]
        if not tps:
            return
        deadline = time.monotonic() + timeout
        while True:
            try:
                ends = self.consumer.end_offsets(tps)
                break
            except Exception as e:       # broker briefly unavailable: retry until the watchdog fires
                if time.monotonic() > deadline:
                    raise RestoreStalled(f"cannot fetch the end offsets of {self.topic} partitions "
                                         f"{[tp.partition for tp in tps]} within {timeout:.0f} s ({type(e).__name__})") from None
                time.sleep(0.2)
        last_progress = time.monotonic()
        while True:
            behind = {tp.partition: (self.consumer.position(tp), end) for tp, end in ends.items()
                      if self.consumer.position(tp) < end}
            if not behind:
                return
            if self.poll(timeout_ms=100):
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > timeout:
                raise RestoreStalled(f"restoring clients from {self.topic} stalled: partition → (position, end) "
                                     f"{behind} after {timeout:.0f} s without progress")

    def done(self, n_clients: int, n_steps: int) -> bool:
        """True once every client 0 … M-1 has a checkpoint at step ``n_steps`` (the run is over)."""
        return len(self.latest) >= n_clients and all(
            (s := self.latest.get(m)) is not None and s.t >= n_steps for m in range(n_clients))

    def close(self) -> None:
        try:
            self.consumer.close(autocommit=False)
        except Exception:
            pass


def send_states(producer, run_id: str, n_partitions: int, states) -> list:
    """Send checkpoints (ClientState) to the state topic; return the send futures.

    Client m's record goes to partition m mod P with key m. The caller flushes
    and checks the futures before committing data offsets.
    """
    topic = state_topic(run_id)
    return [producer.send(topic, value=encode(s), key=key_of(s.client), partition=partition_for(s.client, n_partitions))
            for s in states]


def resilient_producer(bootstrap: str, client_id: str):
    """An ordered, idempotent, acknowledged producer that reconnects quickly after a broker restart.

    Like :func:`streamfl.transport.topics.make_producer`, with the reconnect
    backoff capped at 1 s (kafka-python's default cap is 30 s) and a 2-minute
    delivery timeout, so records sent while the broker is down are retried
    until it is back.
    """
    quiet_kafka_logs()
    from kafka import KafkaProducer
    return KafkaProducer(bootstrap_servers=bootstrap, **client_config(), client_id=client_id, acks="all", linger_ms=1,
                         enable_idempotence=True, max_block_ms=60000, bootstrap_timeout_ms=10000,
                         reconnect_backoff_max_ms=1000, delivery_timeout_ms=120000, request_timeout_ms=15000)


def transactional_producer(bootstrap: str, client_id: str, transactional_id: str, timeout: float = 10.0):
    """A transactional producer (Kafka's exactly-once writes), initialised and ready for ``begin_transaction``.

    Like :func:`resilient_producer`, plus ``transactional_id`` (one per
    worker: a newer producer with the same id fences an older one) and a
    transaction timeout of ``timeout`` s: the broker aborts a transaction left
    open longer (a frozen or dead worker's), so records of committed
    transactions behind it become readable again (``read_committed``
    consumers stop at the first open transaction).
    """
    quiet_kafka_logs()
    from kafka import KafkaProducer
    producer = KafkaProducer(bootstrap_servers=bootstrap, **client_config(), client_id=client_id, acks="all",
                             linger_ms=1, enable_idempotence=True, transactional_id=transactional_id,
                             transaction_timeout_ms=int(timeout * 1000), max_block_ms=60000,
                             bootstrap_timeout_ms=10000, reconnect_backoff_max_ms=1000, delivery_timeout_ms=120000,
                             request_timeout_ms=15000, retry_backoff_ms=10)
    producer.init_transactions()
    return producer


def resilient_reader(bootstrap: str, client_id: str, topic: str, partition: int = 0):
    """A group-less reader of one partition from its beginning, reconnect backoff capped at 1 s.

    It reads committed records only (``read_committed``): records of aborted
    transactions (a fenced worker's) are never seen, and reading stops at the
    first transaction still open.
    """
    quiet_kafka_logs()
    from kafka import KafkaConsumer, TopicPartition
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, **client_config(), client_id=client_id, group_id=None,
                             enable_auto_commit=False, auto_offset_reset="earliest", fetch_max_wait_ms=FETCH_MAX_WAIT_MS,
                             bootstrap_timeout_ms=10000, reconnect_backoff_max_ms=1000, request_timeout_ms=15000,
                             isolation_level="read_committed")
    tp = TopicPartition(topic, partition)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    return consumer
