"""The FedSEA server: averages the workers' pre-summed UPDATEs into one GLOBAL model per round.

For round r each worker sends one UPDATE(r, clients, Σ models, n): the sum of
the models x_{rτ,m} of its clients that took part in the round (saw a sample
in steps (r−1)τ+1 … rτ), the ids of all the clients it covers, and n, how
many of them took part. Once the covered clients of round r are exactly
0 … M−1, the aggregator publishes

    GLOBAL(r) = (Σ_updates model_sum) / (Σ_updates n),

FedSEA's uniform average (1/M) Σ_m x_{rτ,m} (paper 002, Algorithm 1) when
every client took part — what :class:`streamfl.aggregation.FedAvg` computes in
embedded mode (``W.mean(axis=0)``); with partial participation (real tables
whose clients start or end at different steps) the average over the clients
that took part, as embedded. A round in which no client took part is
published with n = 0 and the clients keep their models. Sums are added in
order of each update's smallest client id; the result equals the embedded
one up to the last bits (the summation order changes).

Compressed uploads
------------------
With ``learner.compression`` (the aggregator is started with the run's
``--config``) the workers send :class:`~streamfl.transport.format.CompressedUpdate`
records instead: one compressor payload per client that took part, the
encoding of C(x_{rτ,m} − x̄) with dither key (seed, m + 1, r − 1), x̄ the
last published global model with participants (zeros before the first). The
aggregator decodes each payload and publishes FedAvg of x̄ + Ĉ(·) over the
clients that took part, computed by :class:`streamfl.aggregation.FedAvg` on
the (M, d, K) array of uploads exactly as the embedded server does
(:class:`streamfl.runtime.learners.Federated`), so the numbers equal the
embedded run's bit for bit. Each such GLOBAL carries the headers
``bytes_up`` (the lengths of the payloads averaged in the round) and
``bytes_down`` (M float64 payloads of the global model when it has
participants, 0 otherwise — the embedded count), which the tracker sums
into the ``bytes_up`` / ``bytes_down`` columns. A payload that does not
decode (truncated, another compressor or b, another shape) is rejected
(``bad_payload``), one that decodes to NaN or inf (``non_finite``); an
UPDATE of the other kind than the run's (``compression_mismatch``). Payloads
are decoded as soon as a record arrives, so such a record goes to the
dead-letter topic at once, whoever sent it.

Streaming GMF
-------------
For ``learner.model: gmf`` (the aggregator is started with the run's
``--config``) the workers send :class:`~streamfl.transport.format.GMFUpdate`
records (their clients' touched item rows, counts and h, b; a worker may
split its clients over several records of one round). A record naming an
item id outside the table (``unknown_item``) or rows of another width
(``shape_mismatch``) is dead-lettered on arrival; an UPDATE of the other
kind is ``model_mismatch``. Once the round's records cover every client
once, :func:`consumers.gmf.gmf_global` lays them out as the embedded
server's (M, ·) update and applies the run's
:class:`~streamfl.aggregation.MFFedAvg`, so GMF_GLOBAL(r) — item-row deltas
and averaged h, b, with the round's ``bytes_up``/``bytes_down`` headers —
is the embedded global update bit for bit.

Which updates count
-------------------
An UPDATE of round r is averaged only once it is proven to come from the
owner of its clients: the workers' committed consumer-group offsets of the
partitions of its clients name round r and the update's digest
(:mod:`streamfl.transport.fencing`). Workers commit those offsets in the same
Kafka transaction as the update, and the broker accepts them only from a
current member of the workers' group, so a record written by anyone else — a
stray or forged writer, a fenced zombie — is never proven. Unproven updates
are held (the offsets may become visible a moment after the record) and go
to the dead-letter topic (``unverified``) when their round is published.

Among the proven updates of round r the aggregator picks a set that covers
the clients 0 … M−1 exactly once, in order of arrival (after a rebalance a
client's contribution can be on the topic twice: sent by its old owner, and
again by its new owner inside a larger sum); the rest are re-sent
contributions, logged and counted in :attr:`RoundAggregator.duplicates`, as
is a bit-identical copy of an update or an update of a round already
published.

Rejections
----------
An UPDATE is rejected — logged with its reason and copied to the run's
dead-letter topic, never averaged — when it is malformed (including NaN or
inf values, see :func:`streamfl.transport.format.decode`), is not an UPDATE,
names a client id ≥ M (``unknown_client``), has a model shape different from
the round's (``shape_mismatch``), covers exactly the clients of an update
counted before with another sum (``conflicting_duplicate``, naming both
workers; the first stands), or is ``unverified`` (above).

Restart
-------
Each GLOBAL record carries a header ``updates_offset``: the updates-topic
offset just after the record that completed its round. No update of a later
round can precede it (workers send round r+1 only after receiving GLOBAL(r)).
On start the aggregator reads the global topic to its end, takes the last
published round R and its ``updates_offset``, and resumes reading updates
there, ignoring rounds ≤ R. A restarted aggregator therefore rebuilds the
unfinished round's partial sums and never publishes a round twice (if it died
between sending GLOBAL(r) and its acknowledgement and the record was lost, it
recomputes GLOBAL(r) from the same client models: the same value).

Run as a process::

    python -m consumers.aggregator --bootstrap 127.0.0.1:9092 --run-id abc --clients 8 --rounds 200
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import time

import numpy as np

from streamfl.transport.fencing import parse_proof, update_digest
from streamfl.transport.format import (CompressedUpdate, FormatError, GMFGlobal, GMFUpdate, Global, Update, decode,
                                       encode)
from streamfl.transport.spec import check_fingerprint, code_origin
from streamfl.transport.security import client_config
from streamfl.transport.state import RestoreStalled, read_to_end
from streamfl.transport.state import resilient_producer as make_producer
from streamfl.transport.state import resilient_reader as make_reader
from streamfl.transport.topics import BrokerUnavailable, Topics, check_broker, dead_letter, key_of

log = logging.getLogger("streamfl.aggregator")


class Rejected(ValueError):
    """An UPDATE that must not be averaged; ``reason`` is a short code."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


class RoundAggregator:
    """Round bookkeeping without Kafka: feed proven UPDATEs, get GLOBALs (see the module doc).

    Parameters
    ----------
    n_clients : int
        M; round r is complete when some of its updates cover clients 0 … M−1 exactly once.
    published : int
        Highest round already published (a restarted aggregator's start).
    compressor : Compressor or None
        The run's upload compressor (``learner.compression``); then only
        :class:`CompressedUpdate` records are accepted (see "Compressed uploads").
    seed : int
        The run seed (the dither keys' first component).
    last_global : ndarray (d, K) or None
        x̄: the last published global model with participants (a restarted
        aggregator's), or zeros of the model's shape at the start. Required
        with a compressor (it also gives the model's shape).

    Raises
    ------
    ValueError
        A compressor without ``last_global``.

    Examples
    --------
    >>> agg = RoundAggregator(3)
    >>> agg.add(Update(1, 0, np.array([0, 2]), np.array([[3.0]]))) is None
    True
    >>> agg.add(Update(1, 0, np.array([0, 2]), np.array([[3.0]]))) is None    # the same bytes again
    True
    >>> agg.add(Update(1, 1, np.array([1]), np.array([[3.0]]))).model
    array([[2.]])
    >>> agg.duplicates
    1
    """

    def __init__(self, n_clients: int, published: int = 0, compressor=None, seed: int = 0,
                 last_global: np.ndarray | None = None, gmf: tuple | None = None):
        self.M = int(n_clients)
        self.gmf = gmf                       # (MFFedAvg strategy, I, D) of a streaming GMF run, else None
        self.compressor, self.seed = compressor, int(seed)
        self.last_global = None if last_global is None else np.asarray(last_global, dtype=np.float64)
        if compressor is not None and self.last_global is None:
            raise ValueError("a RoundAggregator with a compressor needs last_global (x̄, zeros of the model's "
                             "shape at the start)")
        self.last_bytes = (0, 0)             # (bytes up, bytes down) of the last published round (compressed runs)
        self.rounds: dict[int, list[tuple[frozenset, np.ndarray, int, int]]] = {}   # r → [(ids, sum, n, worker)]
        self.published = int(published)      # highest round published
        self.duplicates = 0                  # updates ignored as copies, re-sent or late
        self.unused: list[tuple[int, list]] = []   # (worker, clients) of the last published round left out

    def add(self, upd: Update | CompressedUpdate) -> Global | None:
        """Count one update; return the round's GLOBAL once complete, else None.

        Raises
        ------
        Rejected
            ``unknown_client``, ``shape_mismatch``, ``conflicting_duplicate``,
            ``compression_mismatch``, ``bad_payload`` or ``non_finite``;
            nothing of the update is counted then.
        """
        r, ids = upd.round, frozenset(upd.clients.tolist())
        if r <= self.published:
            self.duplicates += 1
            log.info("ignored UPDATE of round %d from worker %d: round already published", r, upd.worker)
            return None
        if not ids or max(ids) >= self.M or min(ids) < 0:
            raise Rejected("unknown_client", f"round {r}: client ids {sorted(ids)}, M = {self.M}")
        if isinstance(upd, GMFUpdate) != (self.gmf is not None):
            raise Rejected("model_mismatch", f"round {r}: worker {upd.worker} sent "
                           + ("a GMF update, but this run's model is linear" if self.gmf is None else
                              f"a {type(upd).__name__}, but this run's model is GMF (GMF_UPDATE records)"))
        if self.gmf is not None:
            return self._add_gmf(upd, r, ids)
        compressed = isinstance(upd, CompressedUpdate)
        if compressed != (self.compressor is not None):
            raise Rejected("compression_mismatch", f"round {r}: worker {upd.worker} sent "
                           + ("compressed uploads, but this run sets no learner.compression" if compressed else
                              f"an uncompressed update, but this run compresses uploads ({self.compressor!r})"))
        parts = self.rounds.get(r, [])
        value = self.decode_uploads(upd) if compressed else upd.model_sum
        shape = value.model_shape if compressed else value.shape
        if parts and shape is not None and parts[0][1] is not None:
            other = parts[0][1].model_shape if compressed else parts[0][1].shape
            if other is not None and shape != other:
                raise Rejected("shape_mismatch", f"round {r}: model {shape}, others {other}")
        if compressed and shape is not None and shape != self.last_global.shape:
            raise Rejected("shape_mismatch", f"round {r}: model {shape}, the global model's {self.last_global.shape}")
        n = int(upd.n_participants)
        same = (lambda old: old[2] == n and old[1] == value) if compressed else \
            (lambda old: old[2] == n and np.array_equal(old[1], value))
        chosen = self._cover(r, upd, ids, (ids, value, n, int(upd.worker)), same)
        if chosen is None:
            return None
        use = sorted(chosen, key=lambda p: min(p[0]))
        if compressed:
            return self._average(r, [p[1] for p in use])
        total = np.zeros_like(use[0][1])
        n = 0
        for _, model_sum, k, _ in use:
            total += model_sum
            n += k
        return Global(round=r, model=total / n if n else total, n_participants=n)

    def _cover(self, r: int, upd, ids: frozenset, entry: tuple, same) -> list | None:
        """Add ``entry`` = (client ids, value, participants, worker) to round r's parts; return the parts that
        cover the clients 0 … M−1 exactly once (and close the round), or None while they do not.

        A repeat of a counted part for the same clients (``same(old_entry)`` true) is counted once; one with
        other values raises :class:`Rejected` (``conflicting_duplicate``). Parts left out of the cover were
        re-sent after a rebalance (counted in :attr:`duplicates`).
        """
        parts = self.rounds.get(r, [])
        for old in parts:
            if old[0] == ids:
                if same(old):
                    self.duplicates += 1
                    log.info("round %d: worker %d's update of clients %s repeats one counted (same values): "
                             "counted once", r, upd.worker, sorted(ids))
                    return None
                raise Rejected("conflicting_duplicate", f"round {r}: worker {upd.worker}'s update of clients "
                                                        f"{sorted(ids)} differs from worker {old[3]}'s, counted "
                                                        f"first")
        parts.append(entry)
        self.rounds[r] = parts
        chosen = exact_cover([p[0] for p in parts], self.M)
        if chosen is None:
            return None
        del self.rounds[r]
        self.published = max(self.published, r)
        self.unused = [(parts[i][3], sorted(parts[i][0])) for i in range(len(parts)) if i not in chosen]
        if self.unused:
            self.duplicates += len(self.unused)
            log.info("round %d: contributions re-sent after a rebalance left out: %s", r, self.unused)
        return [parts[i] for i in chosen]

    def _add_gmf(self, upd: GMFUpdate, r: int, ids: frozenset) -> GMFGlobal | None:
        """:meth:`add` for a streaming GMF run: exact cover as for UPDATEs, then :func:`consumers.gmf.gmf_global`."""
        from consumers.gmf import gmf_global
        strategy = self.gmf[0]
        self.check_gmf(upd)
        raw = encode(upd)
        chosen = self._cover(r, upd, ids, (ids, upd, upd.n_participants, int(upd.worker)),
                             lambda old: encode(old[1]) == raw)
        if chosen is None:
            return None
        out, up, down = gmf_global(r, [p[1] for p in chosen], self.M, strategy)
        self.last_bytes = (up, down)
        return out

    def check_gmf(self, upd: GMFUpdate) -> None:
        """Raise :class:`Rejected` (``unknown_item``, ``shape_mismatch``) for a GMF_UPDATE that names an item
        outside this run's table or has rows of another width (:func:`consumers.gmf.update_problem`)."""
        from consumers.gmf import update_problem
        problem = update_problem(upd, self.gmf[1], self.gmf[2]) if self.gmf is not None else None
        if problem is not None:
            raise Rejected(*problem)

    # ---- compressed uploads (see "Compressed uploads" in the module doc) --------------------------------
    def decode_uploads(self, upd: CompressedUpdate) -> "_Uploads":
        """The participants' decoded payloads Ĉ of one record.

        Raises
        ------
        Rejected
            ``compression_mismatch`` (the run sets no compressor), ``bad_payload`` (a payload does not
            decode with the run's compressor, or not to a (d, K) model) or ``non_finite`` (NaN/inf).
        """
        if self.compressor is None:
            raise Rejected("compression_mismatch", f"round {upd.round}: worker {upd.worker} sent compressed "
                                                   f"uploads, but this run sets no learner.compression")
        from streamfl.compression import dither_key
        sent = upd.split()
        c = self.compressor
        rows = None
        if sent:
            ids = [m for m, _ in sent]
            keys = [dither_key(self.seed, m + 1, upd.round - 1) for m in ids] if c.dithered else None
            try:
                rows = c.decode_batch([p for _, p in sent], keys)
            except ValueError as e:
                raise Rejected("bad_payload", f"round {upd.round}: worker {upd.worker}'s payloads do not decode "
                                              f"with {c!r}: {e}") from None
            if rows.ndim != 3:
                raise Rejected("bad_payload", f"round {upd.round}: worker {upd.worker}'s payloads decode to shape "
                                              f"{rows.shape[1:]}; a model is (d, K)")
            if not np.isfinite(rows).all():
                bad = int(rows.size - np.isfinite(rows).sum())
                raise Rejected("non_finite", f"round {upd.round}: worker {upd.worker}'s payloads decode to {bad} "
                                             f"NaN/inf value(s)")
        return _Uploads([m for m, _ in sent], rows, [p for _, p in sent])

    def _average(self, r: int, uploads: list) -> Global:
        """GLOBAL(r): FedAvg of x̄ + Ĉ over the clients that took part, on the (M, d, K) uploads as embedded."""
        from streamfl.aggregation import FedAvg
        from streamfl.compression import NoCompression
        xbar = self.last_global
        shape = xbar.shape
        if not any(u.ids for u in uploads):   # nobody took part: the clients keep their models
            self.last_bytes = (0, 0)
            return Global(round=r, model=np.zeros(shape), n_participants=0)
        uploaded = np.empty((self.M,) + shape)
        uploaded[:] = xbar                    # rows of clients without part have weight 0
        took_part = np.zeros(self.M)
        for u in uploads:
            if u.ids:
                uploaded[u.ids] = xbar + u.rows
                took_part[u.ids] = 1.0
        model = FedAvg("uniform").aggregate(uploaded, took_part)
        self.last_global = np.array(model, copy=True)
        self.last_bytes = (sum(u.nbytes for u in uploads),
                           self.M * len(NoCompression("float64").encode(np.zeros(shape))))
        return Global(round=r, model=model, n_participants=int(took_part.sum()))


class _Uploads:
    """The decoded compressed uploads of one record: participant ids, Ĉ rows (p, d, K) or None, payloads."""

    def __init__(self, ids: list, rows, payloads: list):
        self.ids, self.rows, self.payloads = ids, rows, payloads
        self.nbytes = sum(len(p) for p in payloads)

    @property
    def model_shape(self):
        return None if self.rows is None else self.rows.shape[1:]

    def __eq__(self, other) -> bool:
        return isinstance(other, _Uploads) and self.ids == other.ids and self.payloads == other.payloads

    __hash__ = None


def exact_cover(sets: list, n: int) -> list[int] | None:
    """Indices of sets (in order of preference) that cover 0 … n−1 exactly once, or None.

    Depth-first over the smallest uncovered element, earlier sets first; the
    number of sets of a round is small (about one per worker).

    >>> exact_cover([{0, 1}, {1}, {0, 1, 2}, {2}], 3)
    [0, 3]
    >>> exact_cover([{0, 1}, {1, 2}], 3) is None
    True
    """
    if sum(len(s) for s in sets) < n or set().union(*sets) != set(range(n)):
        return None

    def search(covered: frozenset, chosen: list) -> list | None:
        if len(covered) == n:
            return chosen
        first = min(set(range(n)) - covered)
        for i, s in enumerate(sets):
            if first in s and not (s & covered) and i not in chosen:
                found = search(covered | s, chosen + [i])
                if found is not None:
                    return found
        return None

    return search(frozenset(), [])


def handle(agg: RoundAggregator, raw: bytes) -> tuple[Global | None, str | None]:
    """Decode and add one (proven) record: (GLOBAL or None, rejection reason or None). Logs rejections."""
    try:
        msg = decode(raw)
        if not isinstance(msg, (Update, CompressedUpdate, GMFUpdate)):
            raise Rejected("not_an_update", f"got a {type(msg).__name__} record on the updates topic")
        return agg.add(msg), None
    except (FormatError, Rejected) as e:
        log.error("rejected UPDATE: %s", e)
        return None, e.reason


class OwnershipCheck:
    """Is an UPDATE proven by the workers' committed offsets? (see :mod:`streamfl.transport.fencing`)

    Parameters
    ----------
    bootstrap, run_id : str
    n_partitions : int
        P of the data topic (client m's partition is m mod P).
    """

    def __init__(self, bootstrap: str, run_id: str, n_partitions: int):
        from kafka import KafkaAdminClient, TopicPartition
        topics = Topics(run_id)
        self.group, self.P = topics.worker_group, int(n_partitions)
        self.tps = [TopicPartition(topics.data, p) for p in range(self.P)]
        self.admin = KafkaAdminClient(bootstrap_servers=bootstrap, **client_config(),
                                      client_id=f"streamfl-{run_id}-aggregator-check", request_timeout_ms=15000)
        self.meta: dict[int, tuple[int, list]] = {}
        self.fetched = -1.0

    def refresh(self, min_age: float = 0.05) -> None:
        """Read the group's committed offsets (at most every ``min_age`` s)."""
        if time.monotonic() - self.fetched < min_age:
            return
        try:
            got = self.admin.list_group_offsets({self.group: self.tps}).get(self.group, {})
        except Exception as e:          # no offsets yet, coordinator moving, broker restarting: try again later
            log.debug("committed offsets of %s unreadable: %s", self.group, e)
            return
        self.meta = {tp.partition: parse_proof(om.metadata) for tp, om in got.items() if om is not None}
        self.fetched = time.monotonic()

    def proven(self, upd: Update, raw: bytes) -> bool:
        """True once every partition of the update's clients names its round and digest."""
        digest = update_digest(raw)
        for p in {int(c) % self.P for c in upd.clients.tolist()}:
            r, digests = self.meta.get(p, (0, []))
            if r != upd.round or digest not in digests:
                return False
        return True

    def close(self) -> None:
        try:
            self.admin.close()
        except Exception:
            pass


UPDATES_OFFSET = "updates_offset"      # GLOBAL record header: where the next round's updates start
BYTES_UP, BYTES_DOWN = "bytes_up", "bytes_down"   # GLOBAL record headers of compressed runs: the round's bytes


def published_rounds(bootstrap: str, run_id: str, timeout: float = 30.0, models: list | None = None) -> tuple[int, int]:
    """(last published round R, updates-topic offset to resume from) read from the global topic.

    (0, 0) when nothing was published yet. A GLOBAL without the
    ``updates_offset`` header (older writers) resumes from offset 0. If
    ``models`` is a list, the model of the last GLOBAL with participants is
    appended to it (x̄ of a compressed run; nothing when there is none).

    Raises
    ------
    RuntimeError
        The global topic's end could not be read, or reading it made no progress, for ``timeout`` s.
    """
    topics = Topics(run_id)
    found = [0, 0]                                   # last published round, updates offset to resume from
    last_model: list = []

    def on_record(rec):
        try:
            msg = decode(rec.value)
        except FormatError:
            return
        if isinstance(msg, (Global, GMFGlobal)) and msg.round > found[0]:
            hdr = dict(rec.headers or ()).get(UPDATES_OFFSET)
            found[:] = [msg.round, int(hdr.decode()) if hdr else 0]
            if msg.n_participants and isinstance(msg, Global):
                last_model[:] = [msg.model]

    reader = make_reader(bootstrap, f"streamfl-{run_id}-aggregator-restore", topics.global_)
    try:
        read_to_end(reader, topics.global_, on_record, timeout)
    except RestoreStalled as e:
        raise RuntimeError(str(e)) from None
    finally:
        reader.close()
    if models is not None:
        models.extend(last_model)
    return found[0], found[1]


def run_aggregator(bootstrap: str, run_id: str, n_clients: int, n_rounds: int, timeout: float = 300.0,
                   should_stop=lambda: False, compressor=None, seed: int = 0,
                   model_shape: tuple | None = None, gmf: tuple | None = None, fingerprint: bytes | None = None) -> int:
    """Consume UPDATEs and publish GLOBALs until ``n_rounds`` rounds are published.

    ``compressor``, ``seed`` and ``model_shape`` (d, K) are the run's upload
    compressor, seed and model shape when it sets ``learner.compression``
    (see "Compressed uploads" in the module doc; ``model_shape`` is then required).
    ``gmf`` = (MFFedAvg strategy, I, D) for a streaming GMF run (see "Streaming GMF").
    Resumes after the last published round (see "Restart" in the module doc).
    Returns the number of rounds published in total (by this and earlier
    incarnations). Stops early (returning) when ``should_stop()`` is true, and
    raises RuntimeError after ``timeout`` s without any record.
    ``fingerprint``: the run config's learner fingerprint
    (:func:`streamfl.transport.spec.config_fingerprint`); an UPDATE carrying
    another one raises :class:`~streamfl.transport.spec.ConfigMismatch` (a
    worker started with another config file).
    """
    topics = Topics(run_id)
    models: list = []
    done, start = published_rounds(bootstrap, run_id, models=models)
    if done:
        log.info("resuming after round %d (updates from offset %d)", done, start)
    producer = make_producer(bootstrap, f"streamfl-{run_id}-aggregator")
    reader = make_reader(bootstrap, f"streamfl-{run_id}-aggregator", topics.updates)
    P = len(reader.partitions_for_topic(topics.data) or ())
    if not P:
        raise RuntimeError(f"the data topic {topics.data} does not exist")
    check = OwnershipCheck(bootstrap, run_id, P)
    if start:
        from kafka import TopicPartition
        reader.seek(TopicPartition(topics.updates, 0), start)
    last_global = models[-1] if models else (np.zeros(model_shape) if model_shape is not None else None)
    agg = RoundAggregator(n_clients, published=done, compressor=compressor, seed=seed, last_global=last_global,
                          gmf=gmf)
    held: dict[int, list] = {}           # round → [(record, Update)] not proven yet, in arrival order
    last = time.monotonic()

    def reject(rec, reason: str, detail: str | None = None) -> None:
        dead_letter(producer, topics, rec.value, rec.key, reason, "aggregator", detail, origin=(0, rec.offset))

    try:
        while done < n_rounds and not should_stop():
            waiting = any(held.values())      # unproven updates: look again soon (their offsets are on the way)
            for records in reader.poll(timeout_ms=5 if waiting else 100).values():
                for rec in records:
                    last = time.monotonic()
                    if fingerprint is not None:      # a worker started with another config: stop, naming it
                        check_fingerprint(rec.headers, fingerprint, f"UPDATE at offset {rec.offset} (a worker's)")
                    try:
                        msg = decode(rec.value)
                        if not isinstance(msg, (Update, CompressedUpdate, GMFUpdate)):
                            raise Rejected("not_an_update", f"got a {type(msg).__name__} record on the updates topic")
                        if isinstance(msg, CompressedUpdate):     # payloads that cannot count, whoever sent them
                            agg.decode_uploads(msg)
                        if isinstance(msg, GMFUpdate):          # item ids and widths, at once
                            agg.check_gmf(msg)
                    except (FormatError, Rejected) as e:
                        log.error("rejected UPDATE at offset %d: %s", rec.offset, e)
                        reject(rec, e.reason, str(e))
                        continue
                    if msg.round <= agg.published:
                        agg.add(msg)                     # late: counted as a duplicate
                    else:
                        held.setdefault(msg.round, []).append((rec, msg))
            if held:
                check.refresh(min_age=0.005)
            for r in sorted(held):
                waiting = []
                for rec, msg in held[r]:
                    if r <= agg.published:
                        waiting.append((rec, msg))
                        continue
                    if not check.proven(msg, rec.value):
                        waiting.append((rec, msg))
                        continue
                    try:
                        out = agg.add(msg)
                    except Rejected as e:
                        log.error("rejected UPDATE at offset %d: %s", rec.offset, e)
                        reject(rec, e.reason, str(e))
                        continue
                    if out is not None:
                        headers = [(UPDATES_OFFSET, str(rec.offset + 1).encode())]
                        if compressor is not None or gmf is not None:
                            headers += [(BYTES_UP, str(agg.last_bytes[0]).encode()),
                                        (BYTES_DOWN, str(agg.last_bytes[1]).encode())]
                        producer.send(topics.global_, value=encode(out), key=key_of(out.round), partition=0,
                                      headers=headers)
                        producer.flush(timeout=max(30.0, timeout))
                        done = max(done, out.round)
                        log.info("published GLOBAL of round %d", out.round)
                held[r] = waiting
                if r <= agg.published:
                    for rec, msg in waiting:
                        detail = (f"round {r}: worker {msg.worker}'s update of clients {msg.clients.tolist()} is not "
                                  f"named by the committed offsets of {topics.worker_group} (not sent by the owner "
                                  f"of those clients)")
                        log.error("rejected UPDATE at offset %d: unverified: %s", rec.offset, detail)
                        reject(rec, "unverified", detail)
                    del held[r]
            if time.monotonic() - last > timeout:
                unproven = {r: [m.worker for _, m in v] for r, v in held.items() if v}
                raise RuntimeError(f"no UPDATE for {timeout:.0f} s after round {agg.published}"
                                   + (f"; updates not proven by the workers' committed offsets (round: workers) "
                                      f"{unproven}" if unproven else ""))
        producer.flush(timeout=30)
        return done
    finally:
        check.close()
        reader.close()
        producer.close(timeout=10)


def main(argv=None) -> int:
    """Entry point; exit 0 when all rounds are published (or on SIGTERM), 1 on error."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--run-id", required=True)
    ap.add_argument("--clients", type=int, required=True, help="M")
    ap.add_argument("--rounds", type=int, required=True, help="⌊T/τ⌋")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--config", default=None,
                    help="the run folder's config.yaml; needed when it sets learner.compression")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s aggregator %(levelname)s %(message)s", stream=sys.stderr)
    log.info("code: %s", code_origin(__file__))
    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    try:
        check_broker(args.bootstrap)       # the same bounded check and message as every role and the CLI
    except (BrokerUnavailable, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        compressor, seed, shape, gmf, fingerprint = None, 0, None, None, None
        if args.config:
            from streamfl.generators.build import build_stream
            from streamfl.transport.spec import config_fingerprint, read_config, upload_compressor
            cfg = read_config(args.config)
            compressor, seed = upload_compressor(cfg), cfg.seed
            fingerprint = config_fingerprint(cfg, learner=True)
            if compressor is not None:
                stream = build_stream(cfg)
                shape = (stream.n_features, stream.n_classes if stream.task == "softmax" else 1)
                log.info("uploads compressed by %r (seed %d, model %s)", compressor, seed, shape)
            if cfg.learner.model == "gmf":
                from streamfl.config import GMFConfig
                from streamfl.runtime.experiment import gmf_strategy
                stream = build_stream(cfg)
                gmf = (gmf_strategy(cfg), stream.n_items, (cfg.learner.gmf or GMFConfig()).dim)
                log.info("streaming GMF: %r over I = %d items, D = %d", gmf[0].rule, gmf[1], gmf[2])
        n = run_aggregator(args.bootstrap, args.run_id, args.clients, args.rounds, args.timeout, lambda: bool(stop),
                           compressor, seed, shape, gmf, fingerprint)
        log.info("published %d GLOBAL model(s)", n)
        return 0
    except Exception as e:
        print(f"error: aggregator: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
