"""What an exact whole run cannot do cheaper than: the parts that are passes over the data, in CPU seconds.

Usage::

    nice -n 5 python benchmarks/floor.py [--steps 8000] [--repeats 3]

On the logistic reference experiment (synthetic stream, ζ = 0, M = 64,
d = 100, b = 1, FedSEA τ = 10, ``baselines: []``; the throughput benchmark's)
it measures, each in this process, median of ``--repeats``:

* ``generation``: drawing the stream's chunks (``build_stream(cfg).chunks``);
* ``learning``: the learner stepped on those chunks (the learning loop of
  ``benchmarks/throughput.py``);
* ``record``: writing the samples once to a file in a temporary folder,
  the bytes the tracker's spool writes (X, y, w, t) for the exact end-of-run
  comparator;
* ``one pass``: one evaluation of the exact logistic objective and its
  gradient over every recorded sample (the compiled kernel the end-of-run
  solves call, on the file read through ``RegretTracker._blocks``' mappings);
* ``passes``: how many such full passes ``finalize`` makes (objective
  evaluations of its L-BFGS runs, each weighted by its share of the
  samples: the checkpoint solves read a prefix, a client's solve 1/M of
  them), from one instrumented whole run.

The floor of an exact run is then generation + record + passes × one pass;
the learning loop is what issue 9 compares the whole run with.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

try:
    import streamfl  # noqa: F401
except ImportError:  # pragma: no cover
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def config(steps: int, out_dir: str):
    from streamfl.config import ExperimentConfig
    return ExperimentConfig.model_validate({
        "name": "floor", "seed": 0, "steps": steps,
        "source": {"kind": "synthetic", "task": "logistic", "clients": 64, "dim": 100, "heterogeneity": 0.0,
                   "drift": []},
        "learner": {"tau": 10, "step_size": {"kind": "constant", "eta": 0.05}},
        "baselines": [], "chunk_size": 256, "output": {"dir": out_dir, "plots": False}})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=8000)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    from streamfl.generators.build import build_stream
    from streamfl.regret import comparators as C
    from streamfl.regret import tracker as TR
    from streamfl.runtime.experiment import build_learners, run_experiment

    tmp = Path(tempfile.mkdtemp(prefix="streamfl-floor-"))
    cfg = config(a.steps, str(tmp))
    run_experiment(config(4, str(tmp)), tmp / "warm", plots=False)          # imports and kernels, untimed
    times = {k: [] for k in ("generation", "learning", "record", "one pass")}
    for _ in range(a.repeats):
        c = time.process_time()
        chunks = list(build_stream(cfg).chunks(256))
        times["generation"].append(time.process_time() - c)
        learners = build_learners(cfg, build_stream(cfg))
        c = time.process_time()
        with np.errstate(over="ignore", invalid="ignore"):
            for ch in chunks:
                for i in range(ch.n_steps):
                    for learner in learners.values():
                        learner.step(ch.X[i], ch.y[i], ch.t0 + i + 1, None)
        times["learning"].append(time.process_time() - c)
        spool = tmp / "spool"
        spool.mkdir(exist_ok=True)
        c = time.process_time()
        files = {k: open(spool / f"{k}.bin", "wb") for k in ("X", "y", "w", "t")}
        for ch in chunks:
            n, M, b, d = ch.X.shape
            files["X"].write(np.ascontiguousarray(ch.X))
            files["y"].write(np.ascontiguousarray(ch.y))
            files["w"].write(np.full(n * M * b, 1.0 / (M * b)))
            files["t"].write(np.repeat(ch.t0 + 1 + np.arange(n), M * b).astype(np.int64))
        for f in files.values():
            f.close()
        times["record"].append(time.process_time() - c)
        fake = TR.RegretTracker.__new__(TR.RegretTracker)
        fake.d, fake.M, fake.b, fake.spool_dir = 100, 64, 1, str(spool)
        theta = np.zeros(100)
        c = time.process_time()
        for X, y, w in fake._blocks()():
            C.weighted_loss_and_grad("logistic", theta, (100, 1), X, y, w)
        times["one pass"].append(time.process_time() - c)
        for k in ("X", "y", "w", "t"):
            os.remove(spool / f"{k}.bin")
        del chunks

    # full passes made by finalize: rows evaluated / rows recorded
    rows = [0]
    kernel = C._weighted_logistic

    def counted(theta, X, y, w):
        rows[0] += len(y)
        return kernel(theta, X, y, w)

    orig_final = TR.RegretTracker._finalize

    def final(self):
        rows[0] = 0
        C._weighted_logistic = counted
        try:
            return orig_final(self)
        finally:
            C._weighted_logistic = kernel
    TR.RegretTracker._finalize = final
    c = time.process_time()
    run_experiment(cfg, tmp / "run", plots=False)
    whole = time.process_time() - c
    TR.RegretTracker._finalize = orig_final
    N = a.steps * 64
    passes = rows[0] / N
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"logistic reference, M = 64, d = 100, T = {a.steps:,} ({N:,} client-samples); CPU seconds, median of "
          f"{a.repeats}")
    for k, v in times.items():
        print(f"  {k:11s} {med[k]:.3f} s  [{min(v):.3f}-{max(v):.3f}]")
    print(f"  passes      {passes:.1f} full passes over the recorded samples in finalize")
    floor = med["generation"] + med["record"] + passes * med["one pass"]
    print(f"  floor of an exact run = generation + record + passes x one pass = {floor:.2f} s "
          f"= {floor / med['learning']:.1f} x the learning loop ({med['learning']:.3f} s)")
    print(f"  this whole run: {whole:.2f} s CPU = {whole / med['learning']:.1f} x the learning loop")
    print(f"load average: {os.getloadavg()}")


if __name__ == "__main__":
    main()
