"""End-to-end Kafka pipeline throughput vs kafka-python's raw consume throughput of the same bytes.

One run on one broker:

1. ``streamfl run --broker`` (via :func:`streamfl.runtime.kafka_run.run_kafka_experiment`, topics kept)
   of a sizeable config: produce → train (workers) → loss → regret (tracker), with the aggregator
   averaging every τ steps. Figures in client-samples per second (one DATA record holds a
   mini-batch of b samples of one client at one step):

   * ``pipeline_stream``: T·M·b / (the tracker's last regret update − the broker timestamp of the
     first DATA record): the stream from its first produced record to its last regret, i.e. every
     role at work, without interpreter start-up and without the end-of-run exact hindsight solve;
   * ``pipeline_wall``: T·M·b / wall time of the whole call (topic creation, process start-up and
     imports, the group join, all of the stream, the tracker's finalisation; plots off).

2. ``raw_consume``: a plain group-less ``KafkaConsumer`` (kafka-python's defaults) assigned to every
   partition of the run's data topic reads it from the beginning to its end offsets (no decoding),
   three times; T·M·b / the median time.

The ratio pipeline_stream / raw_consume is the figure with a target (≥ 50 %). The pipeline runs
``--workers`` worker and ``--producers`` producer processes (default 2 each: one per core of a
2-core machine; kafka-python's pure-Python record checksum makes both roles CPU-bound, and the
partitions are shared). ``--json`` prints one JSON object instead of the table.

Usage::

    python benchmarks/kafka_throughput.py --broker 127.0.0.1:9092 [--clients 16 --dim 20 --steps 3000 \\
        --tau 10 --batch 8 --workers 2 --producers 2] [--json]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def raw_consume(bootstrap: str, topic: str) -> dict:
    """Read every record of ``topic`` once with a plain KafkaConsumer.

    Returns records, bytes, seconds, and ``first_timestamp``: the earliest
    record timestamp (s since the epoch; the producer's create time).
    """
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=bootstrap, client_id="streamfl-bench-raw", group_id=None,
                      enable_auto_commit=False, auto_offset_reset="earliest")
    try:
        tps = [TopicPartition(topic, p) for p in sorted(c.partitions_for_topic(topic))]
        c.assign(tps)
        end = c.end_offsets(tps)
        c.seek_to_beginning(*tps)
        c.poll(timeout_ms=0)              # connect and fetch metadata before the clock starts
        records = size = 0
        first = float("inf")
        started = time.perf_counter()
        pending = {tp for tp in tps if end[tp] > 0}
        while pending:
            for tp, recs in c.poll(timeout_ms=200).items():
                records += len(recs)
                size += sum(len(r.value) for r in recs)
                first = min(first, recs[0].timestamp / 1000.0)
            pending = {tp for tp in pending if c.position(tp) < end[tp]}
        return {"records": records, "bytes": size, "seconds": time.perf_counter() - started,
                "first_timestamp": first}
    finally:
        c.close()


def _cpu(who) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Kafka pipeline vs raw consume throughput (client-samples/s).")
    ap.add_argument("--broker", required=True, help="HOST:PORT")
    ap.add_argument("--clients", type=int, default=16, help="M")
    ap.add_argument("--dim", type=int, default=20, help="d")
    ap.add_argument("--steps", type=int, default=3000, help="T")
    ap.add_argument("--tau", type=int, default=10, help="τ")
    ap.add_argument("--batch", type=int, default=8, help="b, samples per client per step (per DATA record)")
    ap.add_argument("--workers", type=int, default=2, help="worker processes of the pipeline")
    ap.add_argument("--producers", type=int, default=2, help="producer processes of the pipeline")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)

    from streamfl.config import parse_config
    from streamfl.runtime.kafka_run import run_kafka_experiment
    from streamfl.transport.state import delete_state_topic
    from streamfl.transport.topics import Topics, check_broker, delete_topics

    try:
        check_broker(args.broker)
    except Exception as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    cfg = parse_config({
        "name": "kafka-bench", "seed": 0, "steps": args.steps,
        "source": {"kind": "synthetic", "task": "logistic", "clients": args.clients, "dim": args.dim},
        "learner": {"tau": args.tau, "batch_size": args.batch}, "baselines": [],
        "output": {"plots": False, "client_columns": False}})
    samples = args.steps * args.clients * args.batch
    last_update = []
    with tempfile.TemporaryDirectory() as tmp:
        cpu_self, cpu_children = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        summary = run_kafka_experiment(cfg, args.broker, workers=args.workers, producers=args.producers,
                                       run_dir=Path(tmp) / "run",
                                       plots=False, timeout=120, keep_topics=True,
                                       on_chunk=lambda tracker, stream: last_update.append(time.time()))
        wall = time.perf_counter() - started
        cpu_self = _cpu(resource.RUSAGE_SELF) - cpu_self
        cpu_children = _cpu(resource.RUSAGE_CHILDREN) - cpu_children
    topics = Topics(summary["transport"]["run_id"])
    try:
        raws = [raw_consume(args.broker, topics.data) for _ in range(3)]
    finally:
        delete_topics(args.broker, topics)
        delete_state_topic(args.broker, topics.run_id)
    for raw in raws:
        assert raw["records"] == args.steps * args.clients, raw
    raw_seconds = statistics.median(r["seconds"] for r in raws)
    stream = last_update[-1] - raws[0]["first_timestamp"]
    out = {
        "config": {"M": args.clients, "d": args.dim, "T": args.steps, "tau": args.tau, "b": args.batch,
                   "workers": args.workers, "producers": args.producers},
        "samples": samples, "records": raws[0]["records"], "bytes": raws[0]["bytes"],
        "pipeline_stream_seconds": stream, "pipeline_wall_seconds": wall,
        "raw_consume_seconds": [r["seconds"] for r in raws],
        "pipeline_stream_samples_per_s": samples / stream,
        "pipeline_wall_samples_per_s": samples / wall,
        "raw_consume_samples_per_s": samples / raw_seconds,
        "cpu_seconds": {"tracker_and_orchestration": cpu_self, "producer_workers_aggregator": cpu_children},
    }
    out["ratio_stream"] = out["pipeline_stream_samples_per_s"] / out["raw_consume_samples_per_s"]
    out["ratio_wall"] = out["pipeline_wall_samples_per_s"] / out["raw_consume_samples_per_s"]
    if args.json:
        print(json.dumps(out))
        return 0
    c = out["config"]
    print(f"M={c['M']} d={c['d']} T={c['T']} τ={c['tau']} b={c['b']} workers={c['workers']} "
          f"producers={c['producers']}: "
          f"{samples:,} client-samples in {out['records']:,} DATA records ({out['bytes'] / 1e6:.1f} MB)")
    print(f"pipeline, first record → last regret  {out['pipeline_stream_samples_per_s']:>10,.0f} samples/s  "
          f"({stream:.1f} s)")
    print(f"pipeline, wall (incl. start-up)       {out['pipeline_wall_samples_per_s']:>10,.0f} samples/s  "
          f"({wall:.1f} s)")
    print(f"raw consume (kafka-python), median    {out['raw_consume_samples_per_s']:>10,.0f} samples/s  "
          f"({' / '.join(f'{r:.1f}' for r in out['raw_consume_seconds'])} s)")
    print(f"CPU during the pipeline: tracker (this process) {cpu_self:.1f} s, "
          f"producer + workers + aggregator {cpu_children:.1f} s")
    print(f"ratio pipeline/raw: {out['ratio_stream']:.0%} (first record → last regret), "
          f"{out['ratio_wall']:.0%} (wall)  [target ≥ 50%]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
