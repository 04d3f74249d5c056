"""End-to-end Kafka pipeline throughput vs kafka-python's raw consume throughput of the same bytes.

One run on one broker:

1. ``streamfl run --broker`` (via :func:`streamfl.runtime.kafka_run.run_kafka_experiment`, topics kept)
   of a sizeable config: produce → train (workers) → loss → regret (tracker), with the aggregator
   averaging every τ steps. Two figures, in client-samples per second (one DATA record holds a
   mini-batch of b samples of one client at one step):

   * ``pipeline_wall``: T·M·b / wall time of the whole call (topic creation, process start-up and
     import, all of the stream, the tracker's finalisation; plots off);
   * ``pipeline_tracker``: T·M·b / the tracker's own elapsed time (``summary.elapsed_seconds``: from
     the tracker's first poll to its last chunk), i.e. without process start-up.

2. ``raw_consume``: a plain group-less ``KafkaConsumer`` assigned to every partition of the run's data
   topic reads it from the beginning to its end offsets (no decoding), T·M·b / that time.

The ratio pipeline/raw is printed (the target is ≥ 50 %). ``--json`` prints one JSON object instead.

Usage::

    python benchmarks/kafka_throughput.py --broker 127.0.0.1:9092 [--clients 16 --dim 20 --steps 3000 \\
        --tau 10 --batch 8 --workers 1] [--json]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def raw_consume(bootstrap: str, topic: str) -> dict:
    """Read every record of ``topic`` once with a plain KafkaConsumer; return records, bytes and seconds."""
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=bootstrap, client_id="streamfl-bench-raw", group_id=None,
                      enable_auto_commit=False, auto_offset_reset="earliest", fetch_max_wait_ms=20)
    try:
        tps = [TopicPartition(topic, p) for p in sorted(c.partitions_for_topic(topic))]
        c.assign(tps)
        end = c.end_offsets(tps)
        c.seek_to_beginning(*tps)
        c.poll(timeout_ms=0)              # connect and fetch metadata before the clock starts
        records = size = 0
        started = time.perf_counter()
        pending = {tp for tp in tps if end[tp] > 0}
        while pending:
            for tp, recs in c.poll(timeout_ms=200).items():
                records += len(recs)
                size += sum(len(r.value) for r in recs)
                if c.position(tp) >= end[tp]:
                    pending.discard(tp)
            pending = {tp for tp in pending if c.position(tp) < end[tp]}
        return {"records": records, "bytes": size, "seconds": time.perf_counter() - started}
    finally:
        c.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Kafka pipeline vs raw consume throughput (client-samples/s).")
    ap.add_argument("--broker", required=True, help="HOST:PORT")
    ap.add_argument("--clients", type=int, default=16, help="M")
    ap.add_argument("--dim", type=int, default=20, help="d")
    ap.add_argument("--steps", type=int, default=3000, help="T")
    ap.add_argument("--tau", type=int, default=10, help="τ")
    ap.add_argument("--batch", type=int, default=8, help="b, samples per client per step (per DATA record)")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)

    from streamfl.config import parse_config
    from streamfl.runtime.kafka_run import run_kafka_experiment
    from streamfl.transport.topics import Topics, check_broker, delete_topics

    check_broker(args.broker)
    cfg = parse_config({
        "name": "kafka-bench", "seed": 0, "steps": args.steps,
        "source": {"kind": "synthetic", "task": "logistic", "clients": args.clients, "dim": args.dim},
        "learner": {"tau": args.tau, "batch_size": args.batch}, "baselines": [],
        "output": {"plots": False, "client_columns": False}})
    samples = args.steps * args.clients * args.batch
    def cpu(who):
        r = resource.getrusage(who)
        return r.ru_utime + r.ru_stime

    with tempfile.TemporaryDirectory() as tmp:
        cpu_self, cpu_children = cpu(resource.RUSAGE_SELF), cpu(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        summary = run_kafka_experiment(cfg, args.broker, workers=args.workers, run_dir=Path(tmp) / "run",
                                       plots=False, timeout=120, keep_topics=True)
        wall = time.perf_counter() - started
        cpu_self, cpu_children = cpu(resource.RUSAGE_SELF) - cpu_self, cpu(resource.RUSAGE_CHILDREN) - cpu_children
    topics = Topics(summary["transport"]["run_id"])
    try:
        raw = raw_consume(args.broker, topics.data)
    finally:
        delete_topics(args.broker, topics)
    assert raw["records"] == args.steps * args.clients, raw
    out = {
        "config": {"M": args.clients, "d": args.dim, "T": args.steps, "tau": args.tau, "b": args.batch,
                   "workers": args.workers},
        "samples": samples, "records": raw["records"], "bytes": raw["bytes"],
        "pipeline_wall_seconds": wall, "pipeline_tracker_seconds": summary["elapsed_seconds"],
        "raw_consume_seconds": raw["seconds"],
        "cpu_seconds": {"tracker_and_orchestration": cpu_self, "producer_workers_aggregator": cpu_children},
        "pipeline_wall_samples_per_s": samples / wall,
        "pipeline_tracker_samples_per_s": samples / summary["elapsed_seconds"],
        "raw_consume_samples_per_s": samples / raw["seconds"],
    }
    out["ratio_wall"] = out["pipeline_wall_samples_per_s"] / out["raw_consume_samples_per_s"]
    out["ratio_tracker"] = out["pipeline_tracker_samples_per_s"] / out["raw_consume_samples_per_s"]
    if args.json:
        print(json.dumps(out))
        return 0
    c = out["config"]
    print(f"M={c['M']} d={c['d']} T={c['T']} τ={c['tau']} b={c['b']} workers={c['workers']}: "
          f"{samples:,} client-samples in {raw['records']:,} DATA records ({raw['bytes'] / 1e6:.1f} MB)")
    print(f"pipeline, wall (incl. start-up)  {out['pipeline_wall_samples_per_s']:>12,.0f} samples/s  "
          f"({wall:.1f} s)")
    print(f"pipeline, tracker elapsed        {out['pipeline_tracker_samples_per_s']:>12,.0f} samples/s  "
          f"({summary['elapsed_seconds']:.1f} s)")
    print(f"raw consume (kafka-python)       {out['raw_consume_samples_per_s']:>12,.0f} samples/s  "
          f"({raw['seconds']:.2f} s)")
    print(f"CPU during the pipeline: tracker (this process) {cpu_self:.1f} s, "
          f"producer + workers + aggregator {cpu_children:.1f} s")
    print(f"ratio pipeline/raw: {out['ratio_wall']:.0%} (wall), {out['ratio_tracker']:.0%} (tracker)  [target ≥ 50%]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
