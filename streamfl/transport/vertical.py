"""Topics and records of a vertical (C-VFL) run over Kafka.

Topics of run ``<run>`` (all 1 partition, so every topic is totally ordered):

===============================  ===============================================================
topic                            records (key → value)
===============================  ===============================================================
``streamfl.<run>.v.party<m>``    sample id → ROW: party m's feature slice (D_m float64), m = 1..M
``streamfl.<run>.v.labels``      sample id → LABEL (int64)
``streamfl.<run>.v.up``          party id → EMBED: round r, party m, C_m(h_m) payload
``streamfl.<run>.v.down``        party id → BATCH (round r, the round's sample ids) for all parties,
                                 then RELAY: round r, party m, the others' payloads and C_0(θ_0)
``streamfl.<run>.v.dead``        original key → a rejected record, unchanged (reason in headers)
===============================  ===============================================================

The feature topics and the labels topic end with an END record (the number
of records the producer sent), so the server knows when the stream is over.

Every value starts with a magic byte ``0xCF``, the format version and the
record type, then fixed little-endian fields. The compressor payloads inside
EMBED and RELAY are carried unchanged; the run's byte counts are their
lengths (:mod:`streamfl.compression`), not the lengths of the records.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from .format import FormatError

MAGIC, VERSION = 0xCF, 1
_HEAD = struct.Struct("<BBB")


class VType(IntEnum):
    ROW = 1
    LABEL = 2
    END = 3
    EMBED = 4
    BATCH = 5
    RELAY = 6
    STOP = 7


@dataclass(frozen=True)
class VerticalTopics:
    """Topic names of one vertical run with M parties."""

    run_id: str
    n_parties: int

    @property
    def prefix(self) -> str:
        return f"streamfl.{self.run_id}.v"

    def party(self, m: int) -> str:
        return f"{self.prefix}.party{m}"

    @property
    def labels(self) -> str:
        return f"{self.prefix}.labels"

    @property
    def up(self) -> str:
        return f"{self.prefix}.up"

    @property
    def down(self) -> str:
        return f"{self.prefix}.down"

    @property
    def dead(self) -> str:
        return f"{self.prefix}.dead"

    def all(self) -> list[str]:
        return [self.party(m) for m in range(1, self.n_parties + 1)] + [self.labels, self.up, self.down, self.dead]


def _head(t: VType) -> bytes:
    return _HEAD.pack(MAGIC, VERSION, int(t))


def encode_row(row: np.ndarray) -> bytes:
    """ROW: a party's feature slice of one sample, (D_m,) float64."""
    return _head(VType.ROW) + np.ascontiguousarray(row, dtype="<f8").tobytes()


def encode_label(y: int) -> bytes:
    """LABEL: a sample's class id."""
    return _head(VType.LABEL) + struct.pack("<q", int(y))


def encode_end(count: int) -> bytes:
    """END: the producer sent ``count`` records before this one on the topic."""
    return _head(VType.END) + struct.pack("<q", int(count))


def encode_embed(r: int, m: int, payload: bytes) -> bytes:
    """EMBED: party m's compressed embedding of round r."""
    return _head(VType.EMBED) + struct.pack("<qi", r, m) + payload


def encode_batch(r: int, ids: np.ndarray) -> bytes:
    """BATCH: round r's sample ids (B,) int64, in the order of the round's rows."""
    return _head(VType.BATCH) + struct.pack("<q", r) + np.ascontiguousarray(ids, dtype="<i8").tobytes()


def encode_relay(r: int, m: int, payloads: list[bytes]) -> bytes:
    """RELAY: what party m receives in round r: the others' payloads (party order) then C_0(θ_0)."""
    lens = struct.pack(f"<{len(payloads)}I", *map(len, payloads))
    return _head(VType.RELAY) + struct.pack("<qiI", r, m, len(payloads)) + lens + b"".join(payloads)


def encode_stop(rounds: int) -> bytes:
    """STOP: the server ran ``rounds`` rounds; the parties exit."""
    return _head(VType.STOP) + struct.pack("<q", rounds)


def decode(raw: bytes | None):
    """(type, fields) of a vertical record; :class:`FormatError` (reason, detail) when it is malformed.

    Fields: ROW → row (D,) float64; LABEL → int; END → count; EMBED → (r, m, payload);
    BATCH → (r, ids); RELAY → (r, m, [payloads]); STOP → rounds.
    """
    if raw is None or len(raw) < _HEAD.size:
        raise FormatError("truncated", "record shorter than its 3-byte header")
    magic, version, t = _HEAD.unpack_from(raw)
    if magic != MAGIC:
        raise FormatError("bad_magic", f"first byte {magic:#x}, expected {MAGIC:#x}")
    if version != VERSION:
        raise FormatError("bad_version", f"format version {version}, this reader knows {VERSION}")
    body = memoryview(raw)[_HEAD.size:]
    try:
        t = VType(t)
    except ValueError:
        raise FormatError("bad_type", f"unknown record type {t}") from None
    try:
        if t is VType.ROW:
            if len(body) % 8:
                raise FormatError("bad_length", f"a row of {len(body)} bytes is not a whole number of float64")
            return t, np.frombuffer(body, dtype="<f8").astype(np.float64)
        if t in (VType.LABEL, VType.END, VType.STOP):
            if len(body) != 8:
                raise FormatError("bad_length", f"{t.name} body of {len(body)} bytes, expected 8")
            return t, struct.unpack("<q", body)[0]
        if t is VType.EMBED:
            r, m = struct.unpack_from("<qi", body)
            return t, (r, m, bytes(body[12:]))
        if t is VType.BATCH:
            (r,) = struct.unpack_from("<q", body)
            if (len(body) - 8) % 8:
                raise FormatError("bad_length", "BATCH ids are not a whole number of int64")
            return t, (r, np.frombuffer(body[8:], dtype="<i8").astype(np.int64))
        r, m, n = struct.unpack_from("<qiI", body)
        lens = struct.unpack_from(f"<{n}I", body, 16)
        pos, out = 16 + 4 * n, []
        for k in lens:
            out.append(bytes(body[pos:pos + k]))
            pos += k
        if pos != len(body):
            raise FormatError("bad_length", f"RELAY lengths add up to {pos} bytes, the body has {len(body)}")
        return t, (r, m, out)
    except struct.error as e:
        raise FormatError("truncated", f"{t.name}: {e}") from None


def sample_id(key: bytes | None) -> int:
    """The sample id in a record key (decimal ASCII); :class:`FormatError` ``bad_key`` otherwise."""
    try:
        i = int(key.decode("ascii"))
    except Exception:
        raise FormatError("bad_key", f"record key {key!r} is not a decimal sample id") from None
    if i < 0:
        raise FormatError("bad_key", f"negative sample id {i}")
    return i


def create_vertical_topics(bootstrap: str, topics: VerticalTopics, timeout: float = 30.0) -> None:
    """Create the run's topics (1 partition each) unless they exist; wait until they all appear."""
    import time

    from .security import client_config
    from .topics import BrokerUnavailable, quiet_kafka_logs
    quiet_kafka_logs()
    from kafka import KafkaAdminClient, KafkaConsumer
    from kafka.admin import NewTopic
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, **client_config(), client_id=f"streamfl-{topics.run_id}-meta")
    try:
        missing = [t for t in topics.all() if t not in consumer.topics()]
        if missing:
            admin = KafkaAdminClient(bootstrap_servers=bootstrap, **client_config(),
                                     client_id=f"streamfl-{topics.run_id}-admin")
            try:
                admin.create_topics([NewTopic(t, 1, 1) for t in missing])
            except Exception as e:
                if "AlreadyExists" not in type(e).__name__ + str(e):
                    raise
            finally:
                admin.close()
        deadline = time.monotonic() + timeout
        while not all(consumer.partitions_for_topic(t) for t in topics.all()):
            if time.monotonic() > deadline:
                raise BrokerUnavailable(f"the topics of vertical run {topics.run_id} did not appear within {timeout:.0f} s")
            time.sleep(0.1)
            consumer.topics()
    finally:
        consumer.close()


def delete_vertical_topics(bootstrap: str, topics: VerticalTopics) -> None:
    """Delete the run's topics (best effort)."""
    from .security import client_config
    from .topics import quiet_kafka_logs
    quiet_kafka_logs()
    try:
        from kafka import KafkaAdminClient
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, **client_config(), client_id=f"streamfl-{topics.run_id}-admin",
                                 request_timeout_ms=10000)
        try:
            admin.delete_topics(topics.all())
        finally:
            admin.close()
    except Exception:
        pass


def reader(bootstrap: str, client_id: str, topics: list[str]):
    """A group-less consumer of partition 0 of every topic in ``topics``, from the beginning (committed records)."""
    from .security import client_config
    from .topics import FETCH_MAX_WAIT_MS, quiet_kafka_logs
    quiet_kafka_logs()
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=bootstrap, **client_config(), client_id=client_id, group_id=None,
                      enable_auto_commit=False, auto_offset_reset="earliest", fetch_max_wait_ms=FETCH_MAX_WAIT_MS,
                      isolation_level="read_committed")
    tps = [TopicPartition(t, 0) for t in topics]
    c.assign(tps)
    c.seek_to_beginning(*tps)
    return c
