"""Compare two run folders number by number: summary.json and the metrics file, before and after a change.

Usage::

    python benchmarks/compare_runs.py OLD_RUN_DIR NEW_RUN_DIR [--rtol 1e-12]

Prints, for summary.json, every number that differs (with its key path and
relative difference) and, for metrics.csv, the columns that differ (largest
relative difference, row of it). Keys that describe the run rather than its
results (``elapsed_seconds``, ``samples_per_second``, ``run_dir``, the
config's output folder) are skipped. A value counts as the same when both
are NaN/absent.

Two numbers agree when |new − old| ≤ rtol·|old| + atol (``--rtol`` 1e-12,
``--atol`` 1e-15: quantities that are exactly zero in exact arithmetic, such
as the consensus error right after an averaging round or ζ² of a ζ = 0
stream, come out as rounding noise of 1e-30 whose relative change means
nothing); in metrics.csv rtol also applies to the column's largest magnitude
(a gap column, the difference of two cumulative losses, passes near zero
with the rounding of its operands). metrics.csv holds 10 significant digits, so a cell may also differ
by one unit in its 10th digit when the value sits next to a rounding
boundary; such cells are counted and reported apart ("last printed digit").
The exit code is 0 when every number agrees, 1 otherwise; "bit-identical" is
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


def compare(old: Path, new: Path, rtol: float, atol: float = 1e-15, quiet: bool = False) -> tuple[bool, bool]:
    """(all numbers agree, bit-identical) for two run folders; prints the differences unless ``quiet``."""
    so = json.loads((old / "summary.json").read_text())
    sn = json.loads((new / "summary.json").read_text())
    so.get("config", {}).get("output", {}).pop("dir", None)
    sn.get("config", {}).get("output", {}).pop("dir", None)
    diffs: list = []
    _walk(so, sn, "", diffs)
    worst, bad = 0.0, 0
    for path, a, b in diffs:
        r = rel(a, b)
        far = not (isinstance(a, (int, float)) and isinstance(b, (int, float)) and abs(a - b) <= rtol * abs(a) + atol)
        bad += far
        if far:
            worst = max(worst, r)
        if not quiet and (far or r > 1e-15):
            print(f"summary {path}: {a!r} -> {b!r} (relative {r:.3g}{', ABOVE the tolerance' if far else ''})")
    name = so.get("metrics_file", "metrics.csv")
    fo, fn = old / name, new / name
    same_bytes = fo.read_bytes() == fn.read_bytes()
    digits = 0
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
            same = (a == b) | (np.isnan(a) & np.isnan(b))
            if same.all():
                continue
            with np.errstate(invalid="ignore", divide="ignore"):
                d = np.where(same, 0.0, np.abs(a - b))
                r = np.where(same, 0.0, d / np.maximum(np.abs(a), 1e-300))
                last = ~same & (d <= 1.01e-9 * np.maximum(np.abs(a), np.abs(b)))      # one unit of the 10th digit
                # a column of differences (gap_<b>: cumulative losses of ~10³ minus each other) passing near 0
                # carries the rounding of its operands: the tolerance is also rtol × the column's magnitude
                scale = np.nanmax(np.abs(np.where(np.isfinite(a), a, np.nan))) if np.isfinite(a).any() else 0.0
                far = ~same & ~last & ~(d <= rtol * np.maximum(np.abs(a), scale) + atol)
            r = np.where(np.isnan(r), np.inf, r)
            digits += int(last.sum())
            if far.any():
                i = int(np.argmax(np.where(far, r, -1)))
                worst = max(worst, float(r[i]))
                bad += int(far.sum())
                if not quiet:
                    print(f"metrics {col}: {int(far.sum())} cells ABOVE the tolerance, worst relative {r[i]:.3g} "
                          f"at row {i} ({a[i]!r} -> {b[i]!r})")
            elif not quiet and (~same & ~last).any():
                i = int(np.argmax(np.where(~same & ~last, d, -1)))
                print(f"metrics {col}: differs within the tolerance, largest at row {i} ({a[i]!r} -> {b[i]!r})")
    ok = bad == 0
    identical = not diffs and same_bytes
    if not quiet:
        if identical:
            print("bit-identical")
        else:
            worst_ok = max((rel(a, b) for _, a, b in diffs if isinstance(a, (int, float))), default=0.0)
            print(f"{'all numbers agree' if ok else f'{bad} numbers DISAGREE (worst relative {worst:.3g})'}: "
                  f"summary.json {len(diffs)} numbers differ, largest relative {worst_ok:.3g}; "
                  f"metrics.csv {digits} cells differ in the last printed digit (rtol {rtol:g}, atol {atol:g})")
    return ok, identical


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--rtol", type=float, default=1e-12)
    ap.add_argument("--atol", type=float, default=1e-15)
    a = ap.parse_args()
    ok, _ = compare(a.old, a.new, a.rtol, a.atol)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
