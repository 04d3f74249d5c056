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

Re-sent contributions
---------------------
After a rebalance the new owner of a client replays it from its checkpoint
and may reach the round end again. Workers leave out clients whose
contribution for the round is already on the updates topic (they scan it when
they restore), and the aggregator also ignores — logs at INFO, counts in
:attr:`RoundAggregator.duplicates` — an UPDATE whose clients were all counted
for the round already, or whose round is already published.

Rejections
----------
An UPDATE is rejected — logged with its reason and copied to the run's
dead-letter topic, never averaged — when it is malformed (including NaN or
inf values, see :func:`streamfl.transport.format.decode`), is not an UPDATE,
names a client id ≥ M (``unknown_client``), has a model shape different from
the round's (``shape_mismatch``), or covers some clients already counted for
the round together with others that are not (``overlapping_clients``: a sum
cannot be split). A round with a rejected update never completes; the
workers' barrier then times out with an error naming the dead-letter topic.

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

from streamfl.transport.format import FormatError, Global, Update, decode, encode
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
    """Round bookkeeping without Kafka: feed UPDATEs, get GLOBALs (see the module doc).

    Parameters
    ----------
    n_clients : int
        M; round r is complete when its updates cover clients 0 … M−1.
    published : int
        Highest round already published (a restarted aggregator's start).

    Examples
    --------
    >>> agg = RoundAggregator(3)
    >>> agg.add(Update(1, 0, np.array([0, 2]), np.array([[3.0]]))) is None
    True
    >>> agg.add(Update(1, 1, np.array([1]), np.array([[3.0]]))).model
    array([[2.]])
    >>> agg.add(Update(1, 1, np.array([1]), np.array([[3.0]]))) is None    # re-sent: ignored
    True
    """

    def __init__(self, n_clients: int, published: int = 0):
        self.M = int(n_clients)
        self.rounds: dict[int, list[tuple[int, set, np.ndarray, int]]] = {}   # r → [(min id, ids, sum, n)]
        self.published = int(published)      # highest round published
        self.duplicates = 0                  # updates ignored as re-sent

    def add(self, upd: Update) -> Global | None:
        """Count one update; return the round's GLOBAL once complete, else None.

        Raises
        ------
        Rejected
            ``unknown_client``, ``shape_mismatch`` or ``overlapping_clients``;
            nothing of the update is counted then.
        """
        r, ids = upd.round, set(upd.clients.tolist())
        if r <= self.published:
            self.duplicates += 1
            log.info("ignored UPDATE of round %d from worker %d: round already published", r, upd.worker)
            return None
        if max(ids) >= self.M:
            raise Rejected("unknown_client", f"round {r}: client ids {sorted(ids)}, M = {self.M}")
        parts = self.rounds.get(r, [])
        if parts and upd.model_sum.shape != parts[0][2].shape:
            raise Rejected("shape_mismatch", f"round {r}: model {upd.model_sum.shape}, others {parts[0][2].shape}")
        counted = set().union(*(p[1] for p in parts))
        if ids <= counted:
            self.duplicates += 1
            log.info("round %d: ignored clients %s re-sent by worker %d", r, sorted(ids), upd.worker)
            return None
        if ids & counted:
            raise Rejected("overlapping_clients", f"round {r}: worker {upd.worker} sums clients {sorted(ids)}, of "
                                                  f"which {sorted(ids & counted)} were counted already")
        parts.append((min(ids), ids, upd.model_sum, int(upd.n_participants)))
        self.rounds[r] = parts
        if len(counted) + len(ids) < self.M:
            return None
        del self.rounds[r]
        self.published = max(self.published, r)
        total = np.zeros_like(parts[0][2])
        n = 0
        for _, _, model_sum, k in sorted(parts, key=lambda p: p[0]):
            total += model_sum
            n += k
        return Global(round=r, model=total / n if n else total, n_participants=n)


def handle(agg: RoundAggregator, raw: bytes) -> tuple[Global | None, str | None]:
    """Decode and add one record: (GLOBAL or None, rejection reason or None). Logs rejections."""
    try:
        msg = decode(raw)
        if not isinstance(msg, Update):
            raise Rejected("not_an_update", f"got a {type(msg).__name__} record on the updates topic")
        return agg.add(msg), None
    except (FormatError, Rejected) as e:
        log.error("rejected UPDATE: %s", e)
        return None, e.reason


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
    if start:
        from kafka import TopicPartition
        reader.seek(TopicPartition(topics.updates, 0), start)
    agg = RoundAggregator(n_clients, published=done)
    last = time.monotonic()
    try:
        while done < n_rounds and not should_stop():
            for records in reader.poll(timeout_ms=100).values():
                for rec in records:
                    last = time.monotonic()
                    out, reason = handle(agg, rec.value)
                    if reason is not None:
                        dead_letter(producer, topics, rec.value, rec.key, reason, "aggregator")
                    if out is not None:
                        producer.send(topics.global_, value=encode(out), key=key_of(out.round), partition=0,
                                      headers=[(UPDATES_OFFSET, str(rec.offset + 1).encode())])
                        producer.flush(timeout=max(30.0, timeout))
                        done = max(done, out.round)
                        log.info("published GLOBAL of round %d", out.round)
            if time.monotonic() - last > timeout:
                raise RuntimeError(f"no UPDATE for {timeout:.0f} s after round {agg.published}")
        producer.flush(timeout=30)
        return done
    finally:
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
