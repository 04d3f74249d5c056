"""Per-run Kafka topics, their creation, and the client → partition rule.

Every run gets its own five topics, so runs never see each other's records:

==========================  ==========  ============================================
topic                       partitions  records (key → value, :mod:`.format`)
==========================  ==========  ============================================
``streamfl.<run>.data``     P           client id → DATA, client m on partition m mod P
``streamfl.<run>.loss``     1           worker id → LOSS, one per worker per step
``streamfl.<run>.updates``  1           worker id → UPDATE, one per worker per round
``streamfl.<run>.global``   1           round → GLOBAL, one per round
``streamfl.<run>.dead``     1           original key → rejected record (reason in headers)
==========================  ==========  ============================================

Producers always pass the partition explicitly (:func:`partition_for`), so the
mapping does not depend on the client library's key hash.
"""

from __future__ import annotations

import logging
import re
import socket
import time
from dataclasses import dataclass

from .security import client_config

_RUN_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class BrokerUnavailable(ConnectionError):
    """The Kafka broker cannot be reached or did not answer in time (one-line message)."""


@dataclass(frozen=True)
class Topics:
    """The topic names of one run (see the module table)."""

    run_id: str

    def __post_init__(self):
        if not _RUN_ID.match(self.run_id):
            raise ValueError(f"run id must be 1-64 characters from [A-Za-z0-9_-], got {self.run_id!r}")

    @property
    def prefix(self) -> str:
        return f"streamfl.{self.run_id}"

    @property
    def data(self) -> str:
        return f"{self.prefix}.data"

    @property
    def loss(self) -> str:
        return f"{self.prefix}.loss"

    @property
    def updates(self) -> str:
        return f"{self.prefix}.updates"

    @property
    def global_(self) -> str:
        return f"{self.prefix}.global"

    @property
    def dead(self) -> str:
        return f"{self.prefix}.dead"

    def all(self) -> list[str]:
        return [self.data, self.loss, self.updates, self.global_, self.dead]

    @property
    def worker_group(self) -> str:
        """Consumer-group id of the workers on the data topic."""
        return f"{self.prefix}.workers"


def partition_for(client: int, n_partitions: int) -> int:
    """Partition of client m's DATA records: m mod P.

    >>> partition_for(5, 4)
    1
    """
    return int(client) % int(n_partitions)


def clients_of(partitions, n_clients: int, n_partitions: int) -> list[int]:
    """The clients whose records go to the given partitions, sorted.

    >>> clients_of({0, 2}, 7, 4)
    [0, 2, 4, 6]
    """
    parts = set(int(p) for p in partitions)
    return [m for m in range(n_clients) if m % n_partitions in parts]


def key_of(n: int) -> bytes:
    """Record key for a client / worker / round id (its decimal ASCII form)."""
    return str(int(n)).encode()


def split_bootstrap(bootstrap: str) -> tuple[str, int]:
    """``"host:port"`` → (host, port); ValueError with a clear message otherwise."""
    host, sep, port = str(bootstrap).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--broker must be HOST:PORT (e.g. 127.0.0.1:9092), got {bootstrap!r}")
    return host, int(port)


FETCH_MAX_WAIT_MS = 500
"""How long the broker may hold a consumer's fetch when it has no new data (ms).

A fetch returns as soon as a record arrives, so this bound does not delay
records; it only sets how often an idle consumer asks again. At 20 ms an idle
kafka-python consumer costs about 10 % of a core (and the broker answers 50
fetches/s per consumer); at 500 ms about 2 %.
"""


def quiet_kafka_logs() -> None:
    """Silence kafka-python's own logging (its reconnect warnings are not for users)."""
    log = logging.getLogger("kafka")
    log.setLevel(logging.CRITICAL)
    log.propagate = False


def make_producer(bootstrap: str, client_id: str):
    """A KafkaProducer for ordered (idempotent), acknowledged sends of a stream's DATA records.

    Records wait up to 5 ms to fill batches of up to 256 KiB per partition:
    fewer, larger produce requests cost the producer and the broker less per
    record than kafka-python's defaults (1 ms here before, 16 KiB).
    """
    quiet_kafka_logs()
    from kafka import KafkaProducer
    return KafkaProducer(bootstrap_servers=bootstrap, **client_config(), client_id=client_id, acks="all", linger_ms=5,
                         batch_size=256 * 1024, enable_idempotence=True, max_block_ms=30000,
                         bootstrap_timeout_ms=10000)


def make_reader(bootstrap: str, client_id: str, topic: str, partition: int = 0):
    """A group-less KafkaConsumer reading one partition of ``topic`` from its beginning (committed records only)."""
    quiet_kafka_logs()
    from kafka import KafkaConsumer, TopicPartition
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, **client_config(), client_id=client_id, group_id=None,
                             enable_auto_commit=False, auto_offset_reset="earliest", fetch_max_wait_ms=FETCH_MAX_WAIT_MS,
                             bootstrap_timeout_ms=10000, isolation_level="read_committed")
    tp = TopicPartition(topic, partition)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    return consumer


def dead_letter(producer, topics: Topics, raw: bytes, key: bytes | None, reason: str, source: str,
                detail: str | None = None, origin: tuple[int, int] | None = None) -> None:
    """Send a rejected record, unchanged, to the run's dead-letter topic.

    The headers ``reason`` (a :class:`~streamfl.transport.format.FormatError`
    reason or another short code) and ``source`` (who rejected it) say why;
    ``detail`` (optional) is the human-readable explanation; ``origin``
    (optional) is the rejected record's (partition, offset) on its own topic,
    written as headers ``partition`` and ``offset`` so that a worker that
    re-reads the record after a rebalance can tell it is already there.
    """
    producer.send(topics.dead, value=dead_letter_value(raw), key=key, partition=0,
                  headers=dead_letter_headers(reason, source, detail, origin))


def dead_letter_value(raw) -> bytes | None:
    """The value of a dead letter: the rejected record's bytes, unchanged (None for a tombstone)."""
    return None if raw is None else bytes(raw)


def dead_letter_headers(reason: str, source: str, detail: str | None = None,
                        origin: tuple[int, int] | None = None) -> list:
    """Headers of a dead letter (see :func:`dead_letter`)."""
    headers = [("reason", reason.encode()), ("source", source.encode())]
    if detail:
        headers.append(("detail", str(detail)[:1000].encode()))
    if origin is not None:
        headers += [("partition", str(origin[0]).encode()), ("offset", str(origin[1]).encode())]
    return headers


def check_broker(bootstrap: str, timeout: float = 8.0) -> None:
    """Raise :class:`BrokerUnavailable` unless a Kafka broker answers metadata within ``timeout`` s.

    A plain TCP connect is tried first (fails fast on a closed port), then a
    kafka-python admin client lists topics.
    """
    host, port = split_bootstrap(bootstrap)
    hint = "start one with scripts/kafka-local start"
    try:
        socket.create_connection((host, port), timeout=min(3.0, timeout)).close()
    except OSError as e:
        raise BrokerUnavailable(f"cannot reach a Kafka broker at {bootstrap} ({e.strerror or e}); {hint}") from None
    quiet_kafka_logs()
    from kafka import KafkaAdminClient
    security = client_config()          # a bad setting is its own one-line error (SecurityError)
    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, **security, client_id="streamfl-probe",
                                 request_timeout_ms=int(timeout * 1000), bootstrap_timeout_ms=int(timeout * 1000))
        try:
            admin.list_topics()
        finally:
            admin.close()
    except Exception as e:  # kafka-python raises many types here
        if security:          # kafka-python retries a refused login until its timeout: name the settings
            used = ", ".join(f"{k}={v}" for k, v in security.items() if "password" not in k)
            hint = f"check the STREAMFL_KAFKA_* security settings ({used}) and the password"
        raise BrokerUnavailable(f"{bootstrap} accepts connections but did not answer as a Kafka broker "
                                f"within {timeout:.0f} s ({type(e).__name__}); {hint}") from None


def create_topics(bootstrap: str, topics: Topics, n_partitions: int, timeout: float = 30.0) -> None:
    """Create the run's topics (data with ``n_partitions`` partitions, the others with 1).

    Waits until the metadata shows every topic with its partitions.

    Raises
    ------
    ValueError
        ``n_partitions`` < 1.
    BrokerUnavailable
        The topics did not appear within ``timeout`` s.
    """
    if n_partitions < 1:
        raise ValueError(f"the data topic needs at least 1 partition, got {n_partitions}")
    quiet_kafka_logs()
    from kafka import KafkaAdminClient, KafkaConsumer
    from kafka.admin import NewTopic
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **client_config(), client_id=f"streamfl-{topics.run_id}-admin")
    try:
        admin.create_topics([NewTopic(topics.data, n_partitions, 1)]
                            + [NewTopic(t, 1, 1) for t in topics.all()[1:]])
    finally:
        admin.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, **client_config(), client_id=f"streamfl-{topics.run_id}-meta")
    try:
        want = {t: (n_partitions if t == topics.data else 1) for t in topics.all()}
        deadline = time.monotonic() + timeout
        while True:
            consumer.topics()  # refresh metadata
            if all(len(consumer.partitions_for_topic(t) or ()) == n for t, n in want.items()):
                return
            if time.monotonic() > deadline:
                raise BrokerUnavailable(f"the topics of run {topics.run_id} did not appear within {timeout:.0f} s")
            time.sleep(0.1)
    finally:
        consumer.close()


def delete_topics(bootstrap: str, topics: Topics) -> None:
    """Delete the run's topics; errors are ignored (best effort clean-up)."""
    quiet_kafka_logs()
    try:
        from kafka import KafkaAdminClient
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, **client_config(), client_id=f"streamfl-{topics.run_id}-admin",
                                 request_timeout_ms=10000, bootstrap_timeout_ms=5000)
        try:
            admin.delete_topics(topics.all(), raise_errors=False)
        finally:
            admin.close()
    except Exception:
        pass


def ensure_topics(bootstrap: str, topics: Topics, n_partitions: int, timeout: float = 30.0) -> bool:
    """Create the run's topics unless they exist; for role processes started in any order.

    Every role (``streamfl produce|worker|aggregate|track|replay``) calls this
    before it reads or writes, so whichever starts first creates the topics
    with the right partition count (and the broker's ``auto.create.topics``
    never makes a 1-partition data topic behind our back).

    Returns
    -------
    bool
        True if this call created the topics, False if they already existed.

    Raises
    ------
    ValueError
        The data topic exists with a partition count other than ``n_partitions``.
    BrokerUnavailable
        The topics did not all appear within ``timeout`` s.
    """
    quiet_kafka_logs()
    from kafka import KafkaConsumer
    deadline = time.monotonic() + timeout
    tried = False
    while True:
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, **client_config(), client_id=f"streamfl-{topics.run_id}-meta",
                                 bootstrap_timeout_ms=10000)
        try:
            existing = consumer.topics()
            if all(t in existing for t in topics.all()):
                have = len(consumer.partitions_for_topic(topics.data) or ())
                if have != n_partitions:
                    raise ValueError(f"run {topics.run_id}: its data topic has {have} partitions, this process "
                                     f"expects {n_partitions} (pass the same --partitions to every role)")
                return False
        finally:
            consumer.close()
        if not tried:
            tried = True
            try:
                create_topics(bootstrap, topics, n_partitions, timeout)
                return True
            except BrokerUnavailable:
                raise
            except Exception as e:  # another role is creating them (TopicAlreadyExistsError): wait for it
                if "AlreadyExists" not in type(e).__name__ + str(e):
                    raise
        if time.monotonic() > deadline:
            raise BrokerUnavailable(f"the topics of run {topics.run_id} did not all appear within {timeout:.0f} s")
        time.sleep(0.2)
