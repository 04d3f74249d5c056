"""CPU seconds of a whole run (and of its ``finalize``) before and after a change, side by side, with the numbers.

Usage::

    git archive <old-commit> streamfl | tar -x -C /tmp/old
    nice -n 5 python benchmarks/whole_run_cpu.py --old /tmp/old --task logistic --steps 8000 [--repeats 3]

``--clients``, ``--dim``, ``--radius`` and ``--adversary`` change the
synthetic experiment's shape. The experiment is by default the throughput benchmark's (``benchmarks/throughput.py``):
a stationary synthetic stream (ζ = 0), M = 64, d = 100, FedSEA τ = 10,
``baselines: []``, every live comparator on, metrics.csv written, plots
off (softmax: River's RandomRBF stream, K = 10). Each repeat runs the old
source tree and then the current one, each in its own child process. It
prints per process

* ``whole``: CPU seconds (``time.process_time``) of ``run_experiment``;
* ``system``, ``page faults``: the part of ``whole`` spent in the kernel, and
  the minor page faults of the run (``getrusage``); ``peak RSS``: the
  process's peak resident memory;
* ``finalize``: the CPU seconds of that run spent in ``RegretTracker.finalize``;
* the final values of summary.json that the change must keep (static regret,
  its checkpoints, expected and dynamic regret, the per-client regrets), and at the end
  the largest relative difference between old and current of each.

Without ``--old`` only the current tree is run. ``--parts`` prints, for the
run, the CPU seconds by comparator (the throughput
benchmark's grouping of the regret package's functions, exclusive time, with
``time.process_time``); the rest of the run ("outside the tracker") is the
stream generation, the learning loop and the engine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r'''
import json, sys, tempfile, time
from pathlib import Path
import streamfl
from streamfl.config import ExperimentConfig
from streamfl.regret import tracker as trk
from streamfl.runtime.experiment import run_experiment
task, steps = sys.argv[1], int(sys.argv[2])
tracker_opts = json.loads(sys.argv[3])
shape = json.loads(sys.argv[6]) if len(sys.argv) > 6 else {}
parts = len(sys.argv) > 4 and sys.argv[4] == "parts"
tool_dir = sys.argv[5] if len(sys.argv) > 5 else ""
M, d, K, eta = shape.get("clients", 64), shape.get("dim", 100), 10, {"logistic": 0.05, "least_squares": 0.005,
                                                                        "softmax": 0.05}[task]
source = {"kind": "synthetic", "task": task, "clients": M, "dim": d, "heterogeneity": 0.0, "drift": [],
          "adversary": shape.get("adversary", "stochastic")}
if task == "softmax":
    source = {"kind": "river_synth", "name": "RandomRBF", "clients": M,
              "params": {"n_classes": K, "n_features": d, "n_centroids": 50}}
raw = {"name": "bench", "seed": 0, "steps": steps, "source": source,
       "learner": {"tau": 10, "step_size": {"kind": "constant", "eta": eta}, "radius": shape.get("radius")},
       "baselines": [], "chunk_size": 256, "output": {"dir": "runs", "plots": False}}
if tracker_opts:
    raw["tracker"] = tracker_opts
fin = [0.0]
orig = trk.RegretTracker.finalize
def timed(self):
    c = time.process_time()
    try:
        return orig(self)
    finally:
        fin[0] += time.process_time() - c
trk.RegretTracker.finalize = timed
# warm-up (lazy imports, compiled kernels loaded from numba's cache), untimed
run_experiment(ExperimentConfig.model_validate({**raw, "steps": 4}), Path(tempfile.mkdtemp()) / "w", plots=False)
fin[0] = 0.0
cfg = ExperimentConfig.model_validate(raw)
if parts:
    sys.path.insert(0, tool_dir)
    from throughput import instrument_tracker
    totals, restore = instrument_tracker(time.process_time)
import resource
r0 = resource.getrusage(resource.RUSAGE_SELF)
c = time.process_time()
s = run_experiment(cfg, Path(tempfile.mkdtemp()) / "r", plots=False)
whole = time.process_time() - c
r1 = resource.getrusage(resource.RUSAGE_SELF)
sys_s, faults = r1.ru_stime - r0.ru_stime, r1.ru_minflt - r0.ru_minflt
groups = {}
if parts:
    restore()
    groups = dict(totals.pop("__groups__"))
    groups["outside the tracker (stream generation, learning, engine, files)"] = whole - sum(groups.values())
vals = {"regret_static": s["regret_static"], "regret_expected": s.get("regret_expected"),
        "static_checkpoints": [v for _, v in s["static_checkpoints"]],
        "client_static": (s["client_regret"] or {}).get("static"),
        "client_expected": (s["client_regret"] or {}).get("expected"),
        "regret_dynamic": s.get("regret_dynamic"), "client_dynamic": (s["client_regret"] or {}).get("dynamic")}
print(json.dumps({"from": streamfl.__file__, "whole": whole, "finalize": fin[0], "values": vals, "groups": groups,
                  "system": sys_s, "faults": faults, "peak_rss_mb": r1.ru_maxrss / 1024}))
'''


def _flat(v):
    if v is None:
        return []
    return [float(x) for x in (v if isinstance(v, list) else [v]) if x is not None]


def rel_diff(a, b) -> float:
    """Largest |a − b| / max(|b|, 1e-12) over paired values (NaN if the shapes differ)."""
    fa, fb = _flat(a), _flat(b)
    if len(fa) != len(fb):
        return float("nan")
    return max((abs(x - y) / max(abs(y), 1e-12) for x, y in zip(fa, fb)), default=0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", help="folder holding the old commit's streamfl package")
    ap.add_argument("--task", default="logistic", choices=["logistic", "least_squares", "softmax"])
    ap.add_argument("--steps", type=int, default=8000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--parts", action="store_true", help="CPU seconds by comparator")
    ap.add_argument("--clients", type=int, default=64, help="M (default 64)")
    ap.add_argument("--dim", type=int, default=100, help="d (default 100)")
    ap.add_argument("--radius", type=float, default=None, help="learner.radius D (default none)")
    ap.add_argument("--adversary", default="stochastic", choices=["stochastic", "dirac"],
                    help="synthetic source's adversary (dirac: least squares only)")
    ap.add_argument("--tracker", default="{}", help="JSON of tracker options, e.g. '{\"refresh_every\": 256}'")
    a = ap.parse_args()
    labels = (("old", a.old), ("current", None)) if a.old else (("current", None),)
    res = {label: [] for label, _ in labels}
    for _ in range(a.repeats):
        for label, path in labels:
            env = dict(os.environ)
            if path:
                env["PYTHONPATH"] = path
            shape = json.dumps({"clients": a.clients, "dim": a.dim, "radius": a.radius, "adversary": a.adversary})
            extra = ["parts" if a.parts else "-", os.path.dirname(os.path.abspath(__file__)), shape]
            out = subprocess.run([sys.executable, "-P", "-c", CHILD, a.task, str(a.steps), a.tracker] + extra,
                                 env=env, capture_output=True, text=True)
            if out.returncode:
                sys.exit(out.stderr)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            res[label].append(r)
            print(f"{label:8s} whole {r['whole']:.3f} s CPU (system {r['system']:.3f}, {r['faults']:,} page faults)  "
                  f"finalize {r['finalize']:.3f} s CPU  peak RSS {r['peak_rss_mb']:.0f} MB  "
                  f"regret_static {r['values']['regret_static']!r}  ({r['from']})", flush=True)
            for g, sec in sorted(r["groups"].items(), key=lambda kv: -kv[1]):
                print(f"    {sec:7.3f} s CPU  {100 * sec / r['whole']:4.1f} %  {g}")
    for label, rs in res.items():
        print(f"{label:8s} median whole {statistics.median(r['whole'] for r in rs):.3f} s CPU, "
              f"finalize {statistics.median(r['finalize'] for r in rs):.3f} s CPU")
    if a.old:
        mo = statistics.median(r["whole"] for r in res["old"])
        mc = statistics.median(r["whole"] for r in res["current"])
        print(f"whole, current / old (medians): {mc / mo:.3f}")
        vo, vc = res["old"][0]["values"], res["current"][0]["values"]
        for key in vo:
            print(f"  max relative difference of {key}: {rel_diff(vc[key], vo[key]):.3g}")
    print(f"load average: {os.getloadavg()}")


if __name__ == "__main__":
    main()
