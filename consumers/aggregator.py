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
from streamfl.transport.topics import Topics, dead_letter, key_of, make_producer, make_reader

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

    def __init__(self, n_clients: int):
        self.M = int(n_clients)
        self.rounds: dict[int, dict[int, Update]] = {}
        self.published = 0          # highest round published

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
        if upd.worker in parts:
            raise Rejected("duplicate_worker", f"worker {upd.worker} already sent round {r}")
        if parts:
            shape = next(iter(parts.values())).model_sum.shape
            if upd.model_sum.shape != shape:
                raise Rejected("shape_mismatch", f"round {r}: model {upd.model_sum.shape}, others {shape}")
        count = sum(p.n_clients for p in parts.values()) + upd.n_clients
        if count > self.M:
            raise Rejected("too_many_clients", f"round {r} would average {count} clients, M = {self.M}")
        parts[upd.worker] = upd
        if count < self.M:
            return None
        del self.rounds[r]
        self.published = max(self.published, r)
        total = np.zeros_like(parts[min(parts)].model_sum)
        for w in sorted(parts):
            total += parts[w].model_sum
        return Global(round=r, model=total / self.M)


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


def run_aggregator(bootstrap: str, run_id: str, n_clients: int, n_rounds: int, timeout: float = 300.0,
                   should_stop=lambda: False) -> int:
    """Consume UPDATEs and publish GLOBALs until ``n_rounds`` rounds are published.

    Returns the number of rounds published. Stops early (returning) when
    ``should_stop()`` is true, and raises RuntimeError after ``timeout`` s
    without any record.
    """
    topics = Topics(run_id)
    producer = make_producer(bootstrap, f"streamfl-{run_id}-aggregator")
    reader = make_reader(bootstrap, f"streamfl-{run_id}-aggregator", topics.updates)
    agg = RoundAggregator(n_clients)
    done, last = 0, time.monotonic()
    try:
        while done < n_rounds and not should_stop():
            for records in reader.poll(timeout_ms=100).values():
                for rec in records:
                    last = time.monotonic()
                    out, reason = handle(agg, rec.value)
                    if reason is not None:
                        dead_letter(producer, topics, rec.value, rec.key, reason, "aggregator")
                    if out is not None:
                        producer.send(topics.global_, value=encode(out), key=key_of(out.round), partition=0)
                        producer.flush(timeout=30)
                        done += 1
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
