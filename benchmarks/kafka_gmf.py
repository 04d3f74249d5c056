"""Streaming FedNCF GMF on MovieLens 100K: embedded run against the same run over Kafka, side by side.

For one config (the first ``--steps`` steps of ML-100K, τ = ``--tau``,
``learner.gmf`` defaults, metrics as parquet) it runs, in this order and in
one process:

1. the embedded engine (:func:`streamfl.runtime.experiment.run_experiment`);
2. the Kafka run (:func:`streamfl.runtime.kafka_run.run_kafka_experiment`,
   ``--workers`` workers, ``--partitions`` data partitions, one producer,
   the aggregator, the tracker in this process);

and prints, for each, the wall time, the CPU time (this process's
``time.process_time`` for the embedded run; for the Kafka run this
process's plus its reaped children's ``RUSAGE_CHILDREN`` user + system, i.e.
every role), the CPU time the comparator's fits took (the same work in
both: the tracker runs in this process), and whether every column of
metrics.parquet and the summary's HR@10, BCE and regret are equal (``==``,
no tolerance). Wall time depends on the machine's load; quote the load
average with it.

Usage::

    python benchmarks/kafka_gmf.py --broker 127.0.0.1:9092 [--data /path/to/ml-100k --steps 200 --tau 10 \\
        --workers 1 --partitions 4] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Streaming GMF on ML-100K: embedded vs Kafka (wall, CPU, equality).")
    ap.add_argument("--broker", required=True, help="HOST:PORT")
    ap.add_argument("--data", default="/work/shared/data/ml-100k", help="folder holding u.data")
    ap.add_argument("--steps", type=int, default=200, help="T (null for all 737 steps: pass 0)")
    ap.add_argument("--tau", type=int, default=10, help="τ")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)

    import numpy as np
    import pandas as pd

    from streamfl.config import parse_config
    from streamfl.runtime.experiment import run_experiment
    from streamfl.runtime.kafka_run import run_kafka_experiment

    cfg = parse_config({"name": "bench-kafka-gmf", "seed": 0, "steps": args.steps or None,
                        "source": {"kind": "movielens", "path": args.data},
                        "learner": {"model": "gmf", "tau": args.tau, "step_size": {"kind": "inv_sqrt", "eta": 20.0}},
                        "baselines": [], "output": {"format": "parquet", "plots": False}})
    out = {"steps": args.steps or 737, "tau": args.tau, "workers": args.workers, "partitions": args.partitions}
    with tempfile.TemporaryDirectory() as tmp:
        emb_dir, kaf_dir = Path(tmp) / "embedded", Path(tmp) / "kafka"
        wall, cpu = time.perf_counter(), time.process_time()
        want = run_experiment(cfg, emb_dir, plots=False)
        out["embedded"] = {"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu,
                           "comparator_cpu_s": want["comparator"]["cpu_seconds"]}
        wall, cpu, child = time.perf_counter(), time.process_time(), _children_cpu()
        got = run_kafka_experiment(cfg, args.broker, workers=args.workers, run_dir=kaf_dir, plots=False,
                                   partitions=args.partitions, timeout=120)
        out["kafka"] = {"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu,
                        "children_cpu_s": _children_cpu() - child,
                        "comparator_cpu_s": got["comparator"]["cpu_seconds"]}
        out["kafka"]["all_roles_cpu_s"] = out["kafka"]["cpu_s"] + out["kafka"]["children_cpu_s"]
        a, b = pd.read_parquet(emb_dir / "metrics.parquet"), pd.read_parquet(kaf_dir / "metrics.parquet")
        out["columns_equal"] = {c: bool(np.array_equal(a[c].to_numpy(), b[c].to_numpy(), equal_nan=True))
                                for c in a.columns}
        out["summary_equal"] = {k: want[k] == got[k] for k in ("prequential_hr10", "avg_loss_per_interaction",
                                                                "regret_static", "bytes_up", "bytes_down")}
        out["hr10"], out["bce"], out["regret_static"] = (want["prequential_hr10"], want["avg_loss_per_interaction"],
                                                         want["regret_static"])
        out["interactions"] = want["interactions"]
    out["load_average"] = os.getloadavg()
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"ML-100K, T = {out['steps']}, τ = {args.tau}, {out['interactions']:,} interactions; load average "
          f"{out['load_average'][0]:.1f}")
    for name in ("embedded", "kafka"):
        r = out[name]
        print(f"{name:9s} wall {r['wall_s']:7.1f} s   CPU {r.get('all_roles_cpu_s', r['cpu_s']):7.1f} s "
              f"(comparator fits {r['comparator_cpu_s']:.1f} s)")
    print(f"every metrics column equal: {all(out['columns_equal'].values())} {out['columns_equal']}")
    print(f"summary HR@10 {out['hr10']:.4f}, BCE {out['bce']:.4f}, regret {out['regret_static']:.3f}; equal: "
          f"{out['summary_equal']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
