"""Compare two run folders number by number: summary.json and the metrics file, before and after a change.

Usage::

    python benchmarks/compare_runs.py OLD_RUN_DIR NEW_RUN_DIR [--rtol 1e-12]

Prints, for summary.json, every number that differs (with its key path and
relative difference) and, for metrics.csv, the columns that differ (largest
relative difference, row of it). Keys that describe the run rather than its
results (``elapsed_seconds``, ``samples_per_second``, ``run_dir``, the
config's output folder) are skipped. A value counts as the same when both
are NaN/absent. The exit code is 0 when every number is within ``--rtol``
(relative, against max(|old|, 1e-300)), 1 otherwise; "bit-identical" is
printed when every number and the metrics file's bytes are equal.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

SKIP = {"elapsed_seconds", "samples_per_second", "run_dir", "engine_cpu_seconds", "wall_seconds", "plots"}


def _walk(a, b, path: str, out: list) -> None:
    """Append (path, old, new) for every leaf that differs (numbers by value, others by equality)."""
    if path.split(".")[-1] in SKIP:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            _walk(a.get(k), b.get(k), f"{path}.{k}" if path else k, out)
        return
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            _walk(x, y, f"{path}[{i}]", out)
        return
    if isinstance(a, bool) or isinstance(b, bool) or not (isinstance(a, (int, float)) and isinstance(b, (int, float))):
        if a != b:
            out.append((path, a, b))
        return
    if a != b and not (math.isnan(a) and math.isnan(b)):
        out.append((path, a, b))


def rel(a: float, b: float) -> float:
    """|a − b| / max(|a|, 1e-300); 0 when both are NaN, inf when only one is."""
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if math.isnan(a) and math.isnan(b):
            return 0.0
        if math.isnan(a) or math.isnan(b) or math.isinf(a) or math.isinf(b):
            return 0.0 if a == b else math.inf
        return abs(a - b) / max(abs(a), 1e-300)
    return 0.0 if a == b else math.inf


def compare(old: Path, new: Path, rtol: float, quiet: bool = False) -> tuple[bool, bool]:
    """(all within rtol, bit-identical) for two run folders; prints the differences unless ``quiet``."""
    so = json.loads((old / "summary.json").read_text())
    sn = json.loads((new / "summary.json").read_text())
    so.get("config", {}).get("output", {}).pop("dir", None)
    sn.get("config", {}).get("output", {}).pop("dir", None)
    diffs: list = []
    _walk(so, sn, "", diffs)
    worst = 0.0
    for path, a, b in diffs:
        r = rel(a, b)
        worst = max(worst, r)
        if not quiet:
            print(f"summary {path}: {a!r} -> {b!r} (relative {r:.3g})")
    name = so.get("metrics_file", "metrics.csv")
    fo, fn = old / name, new / name
    same_bytes = fo.read_bytes() == fn.read_bytes()
    if not same_bytes:
        import pandas as pd
        mo = pd.read_csv(fo) if fo.suffix == ".csv" else pd.read_parquet(fo)
        mn = pd.read_csv(fn) if fn.suffix == ".csv" else pd.read_parquet(fn)
        if list(mo.columns) != list(mn.columns) or len(mo) != len(mn):
            print(f"metrics: columns or rows differ ({mo.shape} vs {mn.shape}; "
                  f"only old: {sorted(set(mo.columns) - set(mn.columns))[:8]}, "
                  f"only new: {sorted(set(mn.columns) - set(mo.columns))[:8]})")
            return False, False
        for col in mo.columns:
            a, b = mo[col].to_numpy(dtype=float), mn[col].to_numpy(dtype=float)
            both_nan = np.isnan(a) & np.isnan(b)
            with np.errstate(invalid="ignore", divide="ignore"):
                r = np.where(both_nan, 0.0, np.abs(a - b) / np.maximum(np.abs(a), 1e-300))
            r = np.where(np.isnan(r), np.inf, r)
            if r.max() > 0:
                i = int(np.argmax(r))
                worst = max(worst, float(r[i]))
                if not quiet:
                    print(f"metrics {col}: max relative {r[i]:.3g} at row {i} ({a[i]!r} -> {b[i]!r})")
    ok = worst <= rtol
    identical = not diffs and same_bytes
    if not quiet:
        print("bit-identical" if identical else f"largest relative difference {worst:.3g} "
              f"({'within' if ok else 'ABOVE'} {rtol:g})")
    return ok, identical


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--rtol", type=float, default=1e-12)
    a = ap.parse_args()
    ok, _ = compare(a.old, a.new, a.rtol)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
