"""The C-VFL reproduction as a benchmark: its wall time, and the paper's claims checked on its numbers.

Runs :func:`streamfl.reproduce.cvfl.reproduce` with the default settings
(5 seeds; scalar, lattice and top-k at b = 2, 3, 4 plus b = 32; the Q/latency
table) into ``--out`` (a temporary folder by default), then checks:

1. **time**: the whole reproduction takes ≤ 15 minutes of wall time on the
   machine it runs on (2 cores: ``--workers 2``). The CPU seconds of the runs
   are printed too: wall time on a machine shared with other work says more
   about the other work than about this code.
2. **communication** (C-VFL §5): for at least one compressor, at b = 2 or 3,
   the bytes to reach the target accuracy are ≥ 90 % fewer than at b = 32, and
   its final accuracy is within one standard deviation (over the seeds) of the
   uncompressed final accuracy (|mean_b − mean_32| ≤ std_32).

Exit status 1 if a check fails. Usage::

    python benchmarks/cvfl_reproduction.py [--out DIR] [--workers 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from streamfl.reproduce.cvfl import LABELS, Settings, reproduce

LIMIT_SECONDS = 15 * 60


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=None, help="results folder (default: a temporary one)")
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args(argv)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp) / "cvfl"
        s = Settings(workers=args.workers)
        summary = reproduce(out, s, lambda done, total, job: print(f"\r{done}/{total} runs", end="", flush=True))
        print()
        print((out / "tables.md").read_text())
    ok = True
    wall, cpu = summary["wall_seconds"], summary["jobs_cpu_seconds"]
    print(f"wall time {wall:.0f} s with {s.workers} workers (limit {LIMIT_SECONDS} s); the runs took {cpu:.0f} CPU s; "
          f"1-minute load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after (other work on the machine)")
    ok &= wall <= LIMIT_SECONDS
    passing = [r for r in summary["compression"] if r["bits"] in (2, 3)
               and r["byte_reduction_to_target"] >= 0.90 and r["final_within_one_std_of_uncompressed"]]
    for r in summary["compression"]:
        if r["bits"] in (2, 3):
            print(f"{LABELS[r['compressor']]:>22} b={r['bits']}: bytes to {s.target:.0%} reduced by "
                  f"{r['byte_reduction_to_target']:.1%}, final accuracy {r['final_accuracy_mean']:.3f} ± "
                  f"{r['final_accuracy_std']:.3f}, within one std of b = 32: {r['final_within_one_std_of_uncompressed']}")
    print("communication claim (≥ 90 % fewer bytes at b = 2 or 3, accuracy within one std):",
          "holds for " + ", ".join(f"{LABELS[r['compressor']]} b={r['bits']}" for r in passing) if passing else "FAILS")
    ok &= bool(passing)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
