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
from streamfl.transport.format import FormatError, Global, Update, decode, encode
from streamfl.transport.spec import code_origin
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

    def __init__(self, n_clients: int, published: int = 0):
        self.M = int(n_clients)
        self.rounds: dict[int, list[tuple[frozenset, np.ndarray, int, int]]] = {}   # r → [(ids, sum, n, worker)]
        self.published = int(published)      # highest round published
        self.duplicates = 0                  # updates ignored as copies, re-sent or late
        self.unused: list[tuple[int, list]] = []   # (worker, clients) of the last published round left out

    def add(self, upd: Update) -> Global | None:
        """Count one update; return the round's GLOBAL once complete, else None.

        Raises
        ------
        Rejected
            ``unknown_client``, ``shape_mismatch`` or ``conflicting_duplicate``;
            nothing of the update is counted then.
        """
        r, ids = upd.round, frozenset(upd.clients.tolist())
        if r <= self.published:
            self.duplicates += 1
            log.info("ignored UPDATE of round %d from worker %d: round already published", r, upd.worker)
            return None
        if not ids or max(ids) >= self.M or min(ids) < 0:
            raise Rejected("unknown_client", f"round {r}: client ids {sorted(ids)}, M = {self.M}")
        parts = self.rounds.get(r, [])
        if parts and upd.model_sum.shape != parts[0][1].shape:
            raise Rejected("shape_mismatch", f"round {r}: model {upd.model_sum.shape}, others {parts[0][1].shape}")
        n = int(upd.n_participants)
        for old_ids, old_sum, old_n, old_worker in parts:
            if old_ids == ids:
                if old_n == n and np.array_equal(old_sum, upd.model_sum):
                    self.duplicates += 1
                    log.info("round %d: worker %d's update of clients %s repeats one counted (same values): "
                             "counted once", r, upd.worker, sorted(ids))
                    return None
                raise Rejected("conflicting_duplicate", f"round {r}: worker {upd.worker}'s update of clients "
                                                        f"{sorted(ids)} differs from worker {old_worker}'s, counted "
                                                        f"first")
        parts.append((ids, upd.model_sum, n, int(upd.worker)))
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
        use = sorted((parts[i] for i in chosen), key=lambda p: min(p[0]))
        total = np.zeros_like(use[0][1])
        n = 0
        for _, model_sum, k, _ in use:
            total += model_sum
            n += k
        return Global(round=r, model=total / n if n else total, n_participants=n)


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
        if not isinstance(msg, Update):
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


def published_rounds(bootstrap: str, run_id: str, timeout: float = 30.0) -> tuple[int, int]:
    """(last published round R, updates-topic offset to resume from) read from the global topic.

    (0, 0) when nothing was published yet. A GLOBAL without the
    ``updates_offset`` header (older writers) resumes from offset 0.

    Raises
    ------
    RuntimeError
        The global topic's end could not be read, or reading it made no progress, for ``timeout`` s.
    """
    topics = Topics(run_id)
    found = [0, 0]                                   # last published round, updates offset to resume from

    def on_record(rec):
        try:
            msg = decode(rec.value)
        except FormatError:
            return
        if isinstance(msg, Global) and msg.round > found[0]:
            hdr = dict(rec.headers or ()).get(UPDATES_OFFSET)
            found[:] = [msg.round, int(hdr.decode()) if hdr else 0]

    reader = make_reader(bootstrap, f"streamfl-{run_id}-aggregator-restore", topics.global_)
    try:
        read_to_end(reader, topics.global_, on_record, timeout)
    except RestoreStalled as e:
        raise RuntimeError(str(e)) from None
    finally:
        reader.close()
    return found[0], found[1]


def run_aggregator(bootstrap: str, run_id: str, n_clients: int, n_rounds: int, timeout: float = 300.0,
                   should_stop=lambda: False) -> int:
    """Consume UPDATEs and publish GLOBALs until ``n_rounds`` rounds are published.

    Resumes after the last published round (see "Restart" in the module doc).
    Returns the number of rounds published in total (by this and earlier
    incarnations). Stops early (returning) when ``should_stop()`` is true, and
    raises RuntimeError after ``timeout`` s without any record.
    """
    topics = Topics(run_id)
    done, start = published_rounds(bootstrap, run_id)
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
    agg = RoundAggregator(n_clients, published=done)
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
                    try:
                        msg = decode(rec.value)
                        if not isinstance(msg, Update):
                            raise Rejected("not_an_update", f"got a {type(msg).__name__} record on the updates topic")
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
                        producer.send(topics.global_, value=encode(out), key=key_of(out.round), partition=0,
                                      headers=[(UPDATES_OFFSET, str(rec.offset + 1).encode())])
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
        n = run_aggregator(args.bootstrap, args.run_id, args.clients, args.rounds, args.timeout, lambda: bool(stop))
        log.info("published %d GLOBAL model(s)", n)
        return 0
    except Exception as e:
        print(f"error: aggregator: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
