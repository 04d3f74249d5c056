"""Replay a recorded stream into a run's data topic: a previous run's data topic, or a CSV/Parquet file.

Two sources:

* **a Kafka topic** (``--from-run RUN_ID`` or ``--from-topic NAME``): the DATA
  records of a finished run (kept with ``streamfl run --broker … --keep-topics``)
  are re-published to ``streamfl.<new run>.data``, client m on partition
  m mod P. Partitions of the source are merged in (record timestamp, step,
  partition, offset) order; only the records present when the replay starts
  are read (the source is a finished recording). From the beginning, the
  record values are re-published **byte for byte**, so a new run with the same
  config sees exactly the original stream. Records that do not decode are
  forwarded unchanged (partitioned by their key) and counted.
* **a table** (``--file data.csv``): a ``source.kind: file`` config (from
  ``--config``, or built from ``--label``/``--features``/``--client-column``/
  ``--time-column``) is turned into the same stream the embedded engine builds
  (same ordering, client split, standardisation, batching), and each
  (step, client) block is published as one DATA record. Step t's time is the
  earliest time-column value among the rows of step t. A new run whose
  workers and tracker use that same config therefore sees the embedded
  engine's stream.

Start point: ``--from-offset N`` (topic: Kafka offset N in every source
partition; file: skip the first N steps) or ``--from-timestamp TS`` (topic:
record timestamp ≥ TS, via the broker's time index; file: time column ≥ TS).
With a start point the replay begins at the first *whole* step at or after
it and renumbers steps so that it becomes t = 1 (records are re-encoded with
the new t; arrays are unchanged bit for bit). The new run's tracker
regenerates X, y from its own config, so regret numbers of a suffix replay
are only meaningful if that config describes the same suffix.

Pacing (``--speed``): ``max`` publishes as fast as the broker acknowledges;
``1`` reproduces the recorded inter-arrival times (Kafka record timestamps in
ms, or the time column in seconds); ``k`` plays k× faster (``0.5`` is half
speed). The pacer sleeps until record time offset / k has elapsed since the
first record, so it never drifts cumulatively.

Run as a process::

    python -m producers.replay --bootstrap 127.0.0.1:9092 --run-id new1 --from-run 20261129-ab12cd34 --speed 4
    python -m producers.replay --bootstrap 127.0.0.1:9092 --run-id new2 --config runs/x/config.yaml \\
        --file data.csv --time-column ts --speed 60
"""

from __future__ import annotations

import argparse
import collections
import logging
import math
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from streamfl.transport.format import Data, FormatError, decode, encode
from streamfl.transport.security import client_config
from streamfl.transport.topics import Topics, key_of, make_producer, partition_for, quiet_kafka_logs

log = logging.getLogger("streamfl.replay")

__all__ = ["ReplayError", "ReplayStats", "Pacer", "parse_speed", "parse_timestamp", "replay_topic", "replay_file"]


class ReplayError(ValueError):
    """The replay cannot start or continue; the message is one line for the user."""


@dataclass
class ReplayStats:
    """What a replay did.

    Attributes
    ----------
    records : int
        DATA records published.
    steps : int
        Distinct steps published (after renumbering).
    first_step : int
        Original step number of the first replayed step (1 from the beginning).
    undecodable : int
        Source records that are not valid DATA (forwarded unchanged from a topic).
    span_seconds : float
        Recorded time between the first and last replayed record (s).
    wall_seconds : float
        Time the replay took (s).
    """

    records: int = 0
    steps: int = 0
    first_step: int = 1
    undecodable: int = 0
    span_seconds: float = 0.0
    wall_seconds: float = 0.0
    partitions: dict = field(default_factory=dict)


def parse_speed(value) -> float | None:
    """``"max"`` → None (no pacing); a number k > 0 → k (k× real time).

    >>> parse_speed("max"), parse_speed("4"), parse_speed(0.5)
    (None, 4.0, 0.5)
    """
    if value is None or str(value).strip().lower() in ("max", "inf", "fastest"):
        return None
    try:
        k = float(value)
    except (TypeError, ValueError):
        raise ReplayError(f"--speed must be 'max' or a number > 0 (1 = real time), got {value!r}") from None
    if not (k > 0 and math.isfinite(k)):
        raise ReplayError(f"--speed must be 'max' or a number > 0 (1 = real time), got {value!r}")
    return k


def parse_timestamp(value) -> float:
    """A start time as seconds since the epoch (UTC) or as a time-column value.

    Accepts a number (seconds; values above 10^11 are taken as milliseconds,
    Kafka's unit) or an ISO-8601 date/time (naive = UTC).

    >>> parse_timestamp("1700000000"), parse_timestamp("1700000000000")
    (1700000000.0, 1700000000.0)
    >>> parse_timestamp("2023-11-14T22:13:20Z")
    1700000000.0
    """
    s = str(value).strip()
    try:
        x = float(s)
        return x / 1000.0 if abs(x) > 1e11 else x
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        raise ReplayError(f"--from-timestamp must be seconds since the epoch, milliseconds, or ISO-8601 "
                          f"(e.g. 2026-01-31T12:00:00Z), got {value!r}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


class Pacer:
    """Sleeps so that record time offsets are reproduced at ``speed``× (None: never sleeps).

    ``wait(x)`` returns once ``(x - x_first) / speed`` seconds have passed since
    the first call (x in seconds). Sleeping against the start time, not the
    previous record, keeps the error from accumulating.
    """

    def __init__(self, speed: float | None, clock=time.monotonic, sleep=time.sleep):
        self.speed, self.clock, self.sleep = speed, clock, sleep
        self.start = None      # (wall, record time)

    def wait(self, record_time: float) -> None:
        if self.speed is None:
            return
        now = self.clock()
        if self.start is None:
            self.start = (now, record_time)
            return
        target = self.start[0] + (record_time - self.start[1]) / self.speed
        if target > now:
            self.sleep(target - now)


# --------------------------------------------------------------------------- topic source


def _source_records(bootstrap: str, topic: str, from_offset: int | None, from_timestamp: float | None,
                    client_id: str):
    """Yield (ts_ms, t, partition, offset, key, value, msg) of ``topic`` up to its end offsets at start,
    merged across partitions by (ts_ms, t, partition, offset). ``msg`` is the decoded Data or None."""
    quiet_kafka_logs()
    from kafka import KafkaConsumer, TopicPartition
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, **client_config(), client_id=client_id, group_id=None,
                             enable_auto_commit=False, auto_offset_reset="earliest", fetch_max_wait_ms=50,
                             max_partition_fetch_bytes=8 << 20, bootstrap_timeout_ms=10000)
    try:
        parts = consumer.partitions_for_topic(topic)
        if not parts:
            raise ReplayError(f"topic {topic} does not exist on {bootstrap} (was the run kept with --keep-topics?)")
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        begin, end = consumer.beginning_offsets(tps), consumer.end_offsets(tps)
        start = {}
        if from_timestamp is not None:
            found = consumer.offsets_for_times({tp: int(round(from_timestamp * 1000)) for tp in tps})
            start = {tp: (found[tp].offset if found.get(tp) is not None else end[tp]) for tp in tps}
        else:
            start = {tp: max(begin[tp], min(end[tp], int(from_offset or 0))) for tp in tps}
        for tp in tps:
            consumer.seek(tp, start[tp])
        live = {tp for tp in tps if start[tp] < end[tp]}
        bufs = {tp: collections.deque() for tp in tps}
        last_progress = time.monotonic()
        while live or any(bufs.values()):
            if any(not bufs[tp] for tp in live):
                got = consumer.poll(timeout_ms=200, max_records=5000)
                for tp, recs in got.items():
                    for r in recs:
                        if r.offset < end[tp]:
                            bufs[tp].append((r, _decode_data(r.value)))
                    if recs:
                        last_progress = time.monotonic()
                for tp in list(live):
                    if consumer.position(tp) >= end[tp]:
                        live.discard(tp)
                if time.monotonic() - last_progress > 30:
                    raise ReplayError(f"reading {topic} stalled for 30 s at positions "
                                      f"{ {tp.partition: consumer.position(tp) for tp in live} }")
                if any(not bufs[tp] for tp in live):
                    continue
            best, best_key = None, None
            for tp, q in bufs.items():
                if q:
                    r, msg = q[0]
                    k = (r.timestamp, msg.t if msg is not None else 0, tp.partition, r.offset)
                    if best_key is None or k < best_key:
                        best, best_key = tp, k
            r, msg = bufs[best].popleft()
            yield r.timestamp, best_key[1], best.partition, r.offset, r.key, r.value, msg
    finally:
        consumer.close()


def _decode_data(raw: bytes):
    try:
        msg = decode(raw)
    except FormatError:
        return None
    return msg if isinstance(msg, Data) else None


def replay_topic(bootstrap: str, source_topic: str, run_id: str, n_partitions: int, speed: float | None = None,
                 from_offset: int | None = None, from_timestamp: float | None = None, producer=None,
                 on_record=None) -> ReplayStats:
    """Re-publish ``source_topic`` (a run's data topic) into run ``run_id``'s data topic.

    Parameters
    ----------
    bootstrap : str
        HOST:PORT.
    source_topic : str
        E.g. ``streamfl.<old run>.data``.
    run_id : str
        The new run; its topics must exist (:func:`streamfl.transport.topics.ensure_topics`).
    n_partitions : int
        P of the new data topic; client m goes to partition m mod P.
    speed : float or None
        None = as fast as possible; k = k× the recorded pace (record timestamps).
    from_offset : int or None
        Start at this offset in every source partition.
    from_timestamp : float or None
        Start at the first record with timestamp ≥ this (s since the epoch).
    producer : KafkaProducer or None
        Default: a new idempotent producer (closed at the end).
    on_record : callable(Data or None) or None
        Called after each publish (tests, progress).

    Returns
    -------
    ReplayStats

    Raises
    ------
    ReplayError
        Source topic missing, both start options given, or the read stalls.
    """
    if from_offset is not None and from_timestamp is not None:
        raise ReplayError("give at most one of --from-offset and --from-timestamp")
    if from_offset is not None and from_offset < 0:
        raise ReplayError(f"--from-offset must be ≥ 0, got {from_offset}")
    target = Topics(run_id).data
    suffix = from_offset not in (None, 0) or from_timestamp is not None
    own = producer is None
    producer = producer or make_producer(bootstrap, f"streamfl-{run_id}-replay")
    stats, pacer = ReplayStats(), Pacer(speed)
    started = time.perf_counter()
    t_start, first_seen, steps = None, {}, set()
    pending = []          # records held back until every partition has shown its first step (suffix replays)
    first_ts = last_ts = None
    try:
        source = _source_records(bootstrap, source_topic, from_offset, from_timestamp, f"streamfl-{run_id}-replay-src")
        n_src = None
        for ts, t, part, offset, key, value, msg in source:
            if suffix and t_start is None:
                # the first whole step: a partition p's first step is whole iff its first client is p (clients
                # ≡ p mod P_src, sent in client order); take the latest such start over the partitions seen
                if msg is not None and part not in first_seen:
                    first_seen[part] = msg.t + (0 if msg.client == part else 1)
                if n_src is None:
                    n_src = len(_partitions(bootstrap, source_topic))
                pending.append((ts, part, key, value, msg))
                if len(first_seen) < n_src and len(pending) < 100000:
                    continue
                t_start = max(first_seen.values()) if first_seen else 1
                stats.first_step = t_start
                for item in pending:
                    first_ts, last_ts = _emit(producer, target, n_partitions, item, t_start, pacer, stats, steps,
                                              on_record, first_ts, last_ts)
                pending = []
                continue
            first_ts, last_ts = _emit(producer, target, n_partitions, (ts, part, key, value, msg),
                                      t_start if suffix else None, pacer, stats, steps, on_record, first_ts, last_ts)
        if pending:   # fewer records than partitions
            t_start = max(first_seen.values()) if first_seen else 1
            stats.first_step = t_start
            for item in pending:
                first_ts, last_ts = _emit(producer, target, n_partitions, item, t_start, pacer, stats, steps,
                                          on_record, first_ts, last_ts)
        producer.flush(timeout=60)
    finally:
        if own:
            producer.close(timeout=10)
    stats.steps = len(steps)
    stats.span_seconds = 0.0 if first_ts is None else (last_ts - first_ts) / 1000.0
    stats.wall_seconds = time.perf_counter() - started
    return stats


def _partitions(bootstrap, topic):
    from kafka import KafkaConsumer
    c = KafkaConsumer(bootstrap_servers=bootstrap, **client_config(), client_id="streamfl-replay-meta", bootstrap_timeout_ms=10000)
    try:
        return c.partitions_for_topic(topic) or set()
    finally:
        c.close()


def _emit(producer, target, P, item, t_start, pacer, stats, steps, on_record, first_ts, last_ts):
    ts, part, key, value, msg = item
    if msg is None:
        if t_start is not None:          # a suffix replay renumbers steps; an undecodable record has none
            stats.undecodable += 1
            return first_ts, last_ts
        try:
            p = partition_for(int(key), P)
        except (TypeError, ValueError):
            p = 0
        pacer.wait(ts / 1000.0)
        producer.send(target, value=bytes(value), key=key, partition=p)
        stats.undecodable += 1
        stats.records += 1
    else:
        if t_start is not None:
            if msg.t < t_start:
                return first_ts, last_ts
            msg.t = msg.t - t_start + 1
            value = encode(msg)
        pacer.wait(ts / 1000.0)
        p = partition_for(msg.client, P)
        producer.send(target, value=bytes(value), key=key_of(msg.client), partition=p)
        steps.add(msg.t)
        stats.records += 1
        stats.partitions[p] = stats.partitions.get(p, 0) + 1
    if on_record is not None:
        on_record(msg)
    return (ts if first_ts is None else first_ts), ts


# --------------------------------------------------------------------------- file source


def _table_stream(stream):
    """The TableStream inside ``stream`` (injectors wrap it), or None."""
    seen = 0
    while stream is not None and seen < 8:
        if hasattr(stream, "client_rows_"):
            return stream
        stream = next((getattr(stream, a) for a in ("stream", "base", "_stream", "inner", "source")
                       if getattr(stream, a, None) is not None), None)
        seen += 1
    return None


def step_times(cfg, stream) -> np.ndarray | None:
    """Seconds of each step of a file source: the earliest time-column value among step t's rows.

    Returns None if the config has no ``time_column``. Datetime columns (and
    ISO-8601 text, read as UTC) become seconds since the epoch; numeric columns
    are taken as seconds.
    """
    src = cfg.source
    col = getattr(src, "time_column", None)
    if col is None:
        return None
    from streamfl.generators.tabular import load_table_file, time_values
    table = load_table_file(src.path, thousands=src.thousands)
    times = time_values(table[col]).sort_values(kind="stable").reset_index(drop=True)   # as TableStream orders
    import pandas as pd
    if pd.api.types.is_numeric_dtype(times):
        secs = times.to_numpy(dtype=float)
    elif pd.api.types.is_timedelta64_dtype(times):
        secs = (times / pd.Timedelta(seconds=1)).to_numpy(dtype=float)
    else:                  # whatever the datetime's unit (pandas 3 reads microseconds)
        secs = ((pd.to_datetime(times, utc=True) - pd.Timestamp(0, tz="UTC")) / pd.Timedelta(seconds=1)).to_numpy(
            dtype=float)
    ts = _table_stream(stream)
    if ts is None:
        raise ReplayError("cannot map steps to time-column rows for this source")
    T, b = stream.n_steps, stream.batch_size
    out = np.full(T, np.inf)
    for rows in ts.client_rows_:
        k = min(T, len(rows) // b)
        if k:
            first = secs[np.asarray(rows)[: k * b : b]]
            out[:k] = np.minimum(out[:k], first)
    return np.maximum.accumulate(out)


def replay_file(bootstrap: str, cfg, run_id: str, n_partitions: int, speed: float | None = None,
                from_offset: int | None = None, from_timestamp: float | None = None, producer=None) -> ReplayStats:
    """Publish the stream of a ``source.kind: file`` config into run ``run_id``'s data topic, paced by time.

    ``from_offset`` skips the first N steps, ``from_timestamp`` starts at the
    first step whose time is ≥ it (time-column units: seconds, or seconds
    since the epoch for datetimes); both renumber steps from 1. Pacing
    (``speed`` not None) needs ``source.time_column``.

    Raises
    ------
    ReplayError
        Not a file source, pacing/timestamp without a time column, both
        start options, or a start beyond the end of the stream.
    """
    from streamfl.generators.build import build_stream
    if cfg.source.kind != "file":
        raise ReplayError(f"--file replays need a source.kind: file config, got {cfg.source.kind!r}")
    if from_offset is not None and from_timestamp is not None:
        raise ReplayError("give at most one of --from-offset and --from-timestamp")
    stream = build_stream(cfg)
    times = step_times(cfg, stream)
    if times is None and (speed is not None or from_timestamp is not None):
        raise ReplayError("pacing (--speed other than max) and --from-timestamp need a time column "
                          "(--time-column or source.time_column)")
    T, M = stream.n_steps, stream.n_clients
    skip = 0
    if from_offset is not None:
        if from_offset < 0:
            raise ReplayError(f"--from-offset must be ≥ 0, got {from_offset}")
        skip = int(from_offset)
    elif from_timestamp is not None:
        skip = int(np.searchsorted(times, from_timestamp, side="left"))
    if skip >= T:
        raise ReplayError(f"the start point is past the end of the stream ({T} steps)")
    target = Topics(run_id).data
    own = producer is None
    producer = producer or make_producer(bootstrap, f"streamfl-{run_id}-replay")
    stats, pacer = ReplayStats(first_step=skip + 1), Pacer(speed)
    parts = [partition_for(m, n_partitions) for m in range(M)]
    keys = [key_of(m) for m in range(M)]
    started = time.perf_counter()
    try:
        for chunk in stream.chunks(cfg.chunk_size):
            for i in range(chunk.n_steps):
                t = chunk.t0 + i + 1
                if t <= skip:
                    continue
                if times is not None:
                    pacer.wait(float(times[t - 1]))
                for m in range(M):
                    msg = Data(t=t - skip, client=m, X=chunk.X[i, m], y=chunk.y[i, m],
                               present=True if chunk.mask is None else bool(chunk.mask[i, m]),
                               optimum=None if chunk.optimum is None else chunk.optimum[i, m])
                    producer.send(target, value=encode(msg), key=keys[m], partition=parts[m])
                    stats.records += 1
                stats.steps += 1
        producer.flush(timeout=60)
    finally:
        if own:
            producer.close(timeout=10)
    if times is not None:
        stats.span_seconds = float(times[T - 1] - times[skip])
    stats.wall_seconds = time.perf_counter() - started
    return stats


def main(argv=None) -> int:
    """Entry point; exit 0, or 1 with ``error: replay: …`` on stderr."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--run-id", required=True, help="the new run whose data topic receives the records")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--from-run", help="run id of a previous run (its data topic)")
    src.add_argument("--from-topic", help="any topic of DATA records")
    src.add_argument("--file", help="CSV/Parquet file (with --config of source.kind: file, or the column options)")
    ap.add_argument("--config", help="experiment config; with --file its source describes the table")
    ap.add_argument("--partitions", type=int, help="P of the new data topic (default: source's / M)")
    ap.add_argument("--from-offset", type=int)
    ap.add_argument("--from-timestamp")
    ap.add_argument("--speed", default="max")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s replay %(levelname)s %(message)s", stream=sys.stderr)
    try:
        speed = parse_speed(args.speed)
        ts = None if args.from_timestamp is None else parse_timestamp(args.from_timestamp)
        if args.file:
            from streamfl.config import load_config
            if not args.config:
                raise ReplayError("--file needs --config (a source.kind: file experiment)")
            cfg = load_config(args.config)
            path = Path(args.file).resolve()              # --file is relative to the current folder
            cfg = cfg.model_copy(update={"source": cfg.source.model_copy(update={"path": path})})
            P = args.partitions or 1
            stats = replay_file(args.bootstrap, cfg, args.run_id, P, speed, args.from_offset, ts)
        else:
            topic = args.from_topic or Topics(args.from_run).data
            P = args.partitions or len(_partitions(args.bootstrap, topic)) or 1
            stats = replay_topic(args.bootstrap, topic, args.run_id, P, speed, args.from_offset, ts)
        log.info("replayed %d records (%d steps) in %.2f s", stats.records, stats.steps, stats.wall_seconds)
        return 0
    except Exception as e:
        print(f"error: replay: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
