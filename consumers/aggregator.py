"""The FedSEA server: averages the workers' UPDATEs into one GLOBAL model per round.

For round r the workers send UPDATE(r, worker, n_clients, Σ models). Once the
counts of round r add up to M, the aggregator publishes

    GLOBAL(r) = (Σ_workers model_sum) / M,

FedSEA's uniform average (1/M) Σ_m x_{t,m} — what
:func:`streamfl.aggregation.weighted_average` with uniform weights (i.e.
``W.mean(axis=0)``) computes in embedded mode. Partial sums are added in
order of worker id; with one worker the result is bit-identical to
``W.mean(axis=0)``, with several it can differ in the last bit only (the
summation order changes).

An UPDATE is rejected — logged with its reason and copied to the run's
dead-letter topic, never averaged — when it is malformed (including NaN or
inf values, see :func:`streamfl.transport.format.decode`), is not an UPDATE,
is for a round already published, repeats a worker within a round, has a
model shape different from the round's, or would push the round's count above
M. A round with a rejected update never completes; the workers' barrier then
times out with an error naming the dead-letter topic.

Per-client updates and idempotence
----------------------------------
Workers under consumer-group membership (:mod:`consumers.worker`) send
:class:`~streamfl.transport.format.RoundModels`: the models of the clients
they own, one row per client. Contributions are keyed by client, so a client
re-sent after a rebalance (replayed from the last checkpoint: the same model)
is ignored — logged at INFO, not dead-lettered — and so is any MODELS record
for a round already published. A client id ≥ M is rejected
(``unknown_client``). The global model is Σ_m x_m / M summed in client order:
the same arithmetic as ``W.mean(axis=0)`` in embedded mode (bit for bit),
whichever worker sent which client.

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

from streamfl.transport.format import FormatError, Global, RoundModels, Update, decode, encode
from streamfl.transport.state import resilient_producer as make_producer
from streamfl.transport.state import resilient_reader as make_reader
from streamfl.transport.topics import Topics, dead_letter, key_of

log = logging.getLogger("streamfl.aggregator")


class Rejected(ValueError):
    """An UPDATE that must not be averaged; ``reason`` is a short code."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


class RoundAggregator:
    """Pure round bookkeeping (no Kafka): feed UPDATEs, get GLOBALs.

    Parameters
    ----------
    n_clients : int
        M; a round is complete when its updates' ``n_clients`` sum to M.

    Examples
    --------
    >>> agg = RoundAggregator(3)
    >>> agg.add(Update(1, 0, 2, np.array([[3.0]]))) is None
    True
    >>> agg.add(Update(1, 1, 1, np.array([[3.0]]))).model
    array([[2.]])
    """

    def __init__(self, n_clients: int, published: int = 0):
        self.M = int(n_clients)
        self.rounds: dict[int, dict] = {}    # round → {("w", worker) | ("c", client): (count, model sum)}
        self.published = int(published)      # highest round published
        self.duplicates = 0                  # MODELS rows ignored as re-sent

    def add_models(self, msg: RoundModels) -> Global | None:
        """Record per-client models; return the round's GLOBAL once complete, else None.

        Clients already counted for the round, and records of rounds already
        published, are ignored (see the module doc).

        Raises
        ------
        Rejected
            ``unknown_client``, ``shape_mismatch`` or ``too_many_clients``
            (mixed with :class:`Update` records); nothing of the record is counted then.
        """
        r = msg.round
        if r <= self.published and r not in self.rounds:
            self.duplicates += len(msg.clients)
            log.info("ignored MODELS of round %d from worker %d: round already published", r, msg.worker)
            return None
        ids = msg.clients.tolist()
        if max(ids) >= self.M:
            raise Rejected("unknown_client", f"round {r}: client ids {ids}, M = {self.M}")
        parts = self.rounds.get(r, {})
        shape = next(iter(parts.values()))[1].shape if parts else msg.models.shape[1:]
        if msg.models.shape[1:] != shape:
            raise Rejected("shape_mismatch", f"round {r}: models {msg.models.shape[1:]}, others {shape}")
        new = [(m, x) for m, x in zip(ids, msg.models) if ("c", m) not in parts]
        if len(new) < len(ids):
            self.duplicates += len(ids) - len(new)
            log.info("round %d: ignored re-sent clients %s from worker %d", r,
                     sorted(set(ids) - {m for m, _ in new}), msg.worker)
        count = sum(c for c, _ in parts.values()) + len(new)
        if count > self.M:
            raise Rejected("too_many_clients", f"round {r} would average {count} clients, M = {self.M}")
        parts = self.rounds.setdefault(r, parts)
        for m, x in new:
            parts[("c", m)] = (1, x)
        return self._maybe_complete(r, count)

    def _maybe_complete(self, r: int, count: int) -> Global | None:
        if count < self.M:
            return None
        parts = self.rounds.pop(r)
        self.published = max(self.published, r)
        keys = sorted(parts)
        total = np.zeros_like(parts[keys[0]][1])
        for k in keys:
            total += parts[k][1]
        return Global(round=r, model=total / self.M)

    def add(self, upd: Update) -> Global | None:
        """Record one update; return the round's GLOBAL once complete, else None.

        Raises
        ------
        Rejected
            ``stale_round``, ``duplicate_worker``, ``shape_mismatch`` or ``too_many_clients``.
        """
        r = upd.round
        if r <= self.published and r not in self.rounds:
            raise Rejected("stale_round", f"round {r} was already published")
        parts = self.rounds.setdefault(r, {})
        if ("w", upd.worker) in parts:
            raise Rejected("duplicate_worker", f"worker {upd.worker} already sent round {r}")
        if parts:
            shape = next(iter(parts.values()))[1].shape
            if upd.model_sum.shape != shape:
                raise Rejected("shape_mismatch", f"round {r}: model {upd.model_sum.shape}, others {shape}")
        count = sum(c for c, _ in parts.values()) + upd.n_clients
        if count > self.M:
            raise Rejected("too_many_clients", f"round {r} would average {count} clients, M = {self.M}")
        parts[("w", upd.worker)] = (upd.n_clients, upd.model_sum)
        return self._maybe_complete(r, count)


def handle(agg: RoundAggregator, raw: bytes) -> tuple[Global | None, str | None]:
    """Decode and add one record: (GLOBAL or None, rejection reason or None). Logs rejections."""
    try:
        msg = decode(raw)
        if isinstance(msg, RoundModels):
            return agg.add_models(msg), None
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
        The global topic could not be read to its end within ``timeout`` s.
    """
    topics = Topics(run_id)
    reader = make_reader(bootstrap, f"streamfl-{run_id}-aggregator-restore", topics.global_)
    try:
        from kafka import TopicPartition
        tp = TopicPartition(topics.global_, 0)
        deadline = time.monotonic() + timeout
        while True:
            try:
                end = reader.end_offsets([tp])[tp]
                break
            except Exception as e:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"cannot read the end of {topics.global_} ({type(e).__name__})") from None
                time.sleep(0.2)
        last_round, resume = 0, 0
        while reader.position(tp) < end:
            for records in reader.poll(timeout_ms=100).values():
                for rec in records:
                    try:
                        msg = decode(rec.value)
                    except FormatError:
                        continue
                    if isinstance(msg, Global) and msg.round > last_round:
                        last_round = msg.round
                        hdr = dict(rec.headers or ()).get(UPDATES_OFFSET)
                        resume = int(hdr.decode()) if hdr else 0
            if time.monotonic() > deadline:
                raise RuntimeError(f"reading {topics.global_} to its end ({end}) stalled at "
                                   f"{reader.position(tp)} for {timeout:.0f} s")
        return last_round, resume
    finally:
        reader.close()


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
        n = run_aggregator(args.bootstrap, args.run_id, args.clients, args.rounds, args.timeout, lambda: bool(stop))
        log.info("published %d GLOBAL model(s)", n)
        return 0
    except Exception as e:
        print(f"error: aggregator: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
