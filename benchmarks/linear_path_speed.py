"""The linear path's speed and numbers before and after a change of the engine, side by side.

Usage::

    git archive <old-commit> streamfl | tar -x -C /tmp/old
    python benchmarks/linear_path_speed.py --old /tmp/old [--repeats 3] [--steps 3000]

Each repeat runs, in two child processes one after the other (old source tree
first, then the installed/current one), the same experiment: logistic,
M = 64, d = 100, τ = 10, baselines tau1 and local. It prints per process

* ``loop``: CPU seconds (``time.process_time``) of the learners alone, stepped
  as the engine steps them, over 10 passes of the stream's cached chunks;
* ``whole``: CPU seconds of ``run_experiment`` (tracker, metrics; plots off);
* ``cum``: FedSEA's cumulative loss (``repr``: equal strings mean bit-identical).

and at the end the ratio of the median loop times (current / old).
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
from streamfl.config import parse_config
from streamfl.generators.build import build_stream
from streamfl.runtime.experiment import build_learners, run_experiment
steps = int(sys.argv[1])
cfg = parse_config({"name": "speed", "steps": steps, "seed": 0, "baselines": ["tau1", "local"],
                    "source": {"kind": "synthetic", "task": "logistic", "clients": 64, "dim": 100,
                               "heterogeneity": 0.5},
                    "learner": {"tau": 10}, "output": {"plots": False, "client_columns": False}})
stream = build_stream(cfg)
chunks = list(stream.chunks(256))
learners = build_learners(cfg, stream)
t0 = time.process_time()
for _ in range(10):
    for ch in chunks:
        for i in range(ch.n_steps):
            for learner in learners.values():
                learner.step(ch.X[i], ch.y[i], ch.t0 + i + 1, None)
loop = time.process_time() - t0
t0 = time.process_time()
s = run_experiment(cfg, Path(tempfile.mkdtemp()) / "r", plots=False, stream=stream)
whole = time.process_time() - t0
print(json.dumps({"from": streamfl.__file__, "loop": loop, "whole": whole, "cum": repr(s["cum_loss"]["fedsea"])}))
'''


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", required=True, help="folder holding the old commit's streamfl package")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3000)
    a = ap.parse_args()
    times = {"old": [], "current": []}
    for _ in range(a.repeats):
        for label, path in (("old", a.old), ("current", None)):
            env = dict(os.environ)
            if path:
                env["PYTHONPATH"] = path
            out = subprocess.run([sys.executable, "-P", "-c", CHILD, str(a.steps)], env=env, capture_output=True,
                                 text=True, check=True)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            times[label].append(r["loop"])
            print(f"{label:8s} loop {r['loop']:.3f} s CPU  whole {r['whole']:.3f} s CPU  cum {r['cum']}  ({r['from']})")
    print(f"loop, current / old (medians): {statistics.median(times['current']) / statistics.median(times['old']):.3f}")
    print(f"load average: {os.getloadavg()}")


if __name__ == "__main__":
    main()
