"""Uncertainty over seeds: run one experiment under N seeds and report mean ± a confidence interval.

FedSEA's expected regret (eq. (3)) is an expectation over the adversary's
samples; one run gives one sample of it. ``streamfl run --seeds N`` (or
``seeds: N`` in a config) runs the experiment with seeds s, s + 1, …,
s + N − 1 (s = ``seed``) in parallel processes (a pool of min(N, cores)
workers), keeps each seed's run folder under the parent folder
(``<parent>/seed-<s>/``) and writes, in the parent:

* ``summary.json`` — every number of a run's summary replaced by its mean
  over the seeds, and ``intervals``: for every scalar figure (dotted key,
  e.g. ``heterogeneity.regime.noise_term``) its ``mean``, ``sd``, ``n`` and
  the 95 % Student-t interval ``lo``, ``hi`` (mean ± t_{0.975, n−1} sd/√n);
  booleans that differ between seeds become ``null`` with the fraction that
  was true in ``agreement``;
* ``metrics.csv`` — per step, the mean over seeds of every column, and for
  the columns that are not per client ``<column>_lo`` and ``<column>_hi``
  (the same t-interval, step by step), which the plots draw as shaded bands;
* ``plots/`` — the run figures of the mean, with bands (the figures of the
  run's model: :func:`~streamfl.report.plots.render_model_run`);
* ``wall_seconds`` in ``summary.json`` — the wall time of the whole seeds
  run (``elapsed_seconds`` is the mean of the seeds' own).

Figures a model does not track (``None`` in every seed, e.g. the expected
regret of a sparse logistic run) stay ``None`` and get no interval.

Every seed is a complete, independent run: the same numbers as
``streamfl run --seed s`` (tested).
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np
import pandas as pd

CONFIDENCE = 0.95
INTERVAL = "95 % Student-t interval over seeds: mean ± t(0.975, n − 1)·sd/√n"


def t_interval(values) -> dict:
    """Mean, sd and the 95 % Student-t interval of the finite ``values``.

    Returns ``{"mean", "sd", "n", "lo", "hi"}``; with one value lo = hi = mean
    is not claimed: they are NaN (no interval from one sample).

    >>> r = t_interval([1.0, 2.0, 3.0])
    >>> r["mean"], round(r["hi"] - r["mean"], 4)     # t(0.975, 2) = 4.3027, sd/√3 = 0.5774
    (2.0, 2.4841)
    """
    from scipy.stats import t as student_t
    v = np.asarray([x for x in values if x is not None], dtype=np.float64)
    v = v[np.isfinite(v)]
    n = int(v.size)
    if n == 0:
        return {"mean": math.nan, "sd": math.nan, "n": 0, "lo": math.nan, "hi": math.nan}
    mean = float(v.mean())
    if n == 1:
        return {"mean": mean, "sd": math.nan, "n": 1, "lo": math.nan, "hi": math.nan}
    sd = float(v.std(ddof=1))
    half = float(student_t.ppf(0.5 + CONFIDENCE / 2, n - 1)) * sd / math.sqrt(n)
    return {"mean": mean, "sd": sd, "n": n, "lo": mean - half, "hi": mean + half}


def t_band(Y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Column-wise mean and 95 % t-interval (lo, hi) of Y (seeds × steps); NaN bounds for one seed."""
    from scipy.stats import t as student_t
    Y = np.asarray(Y, dtype=np.float64)
    n = Y.shape[0]
    mean = Y.mean(axis=0)
    if n < 2:
        nan = np.full(mean.shape, np.nan)
        return mean, nan, nan
    half = float(student_t.ppf(0.5 + CONFIDENCE / 2, n - 1)) * Y.std(axis=0, ddof=1) / math.sqrt(n)
    return mean, mean - half, mean + half


def _is_num(x) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_))


def aggregate(summaries: list, intervals: dict, agreement: dict, prefix: str = ""):
    """Merge per-seed summaries: numbers → mean (interval recorded), equal values kept.

    Walks the dicts in parallel; scalar numbers get an entry in ``intervals``
    (keyed by the dotted path), booleans that differ get ``None`` and their
    fraction true in ``agreement``; lists of equal length are merged item by
    item (without intervals); other differing values become the list of values.
    A key that is ``None`` in every seed (a figure the model does not track)
    stays ``None``, with no entry in ``intervals`` or ``agreement``.
    """
    first = summaries[0]
    if all(x is None for x in summaries):
        return None                          # not tracked by this model (e.g. a sparse run's regret_expected)
    if all(isinstance(s, dict) for s in summaries):
        keys = list(dict.fromkeys(k for s in summaries for k in s))
        return {k: aggregate([s.get(k) for s in summaries], intervals, agreement, f"{prefix}{k}.") for k in keys}
    if all(isinstance(s, (list, tuple)) for s in summaries) and len({len(s) for s in summaries}) == 1:
        return [aggregate([s[i] for s in summaries], {}, {}, "") for i in range(len(first))]
    if all(x is None or _is_num(x) for x in summaries) and any(_is_num(x) for x in summaries):
        r = t_interval([float(x) for x in summaries if x is not None])
        if intervals is not None and prefix:
            intervals[prefix[:-1]] = r
        if all(isinstance(x, (int, np.integer)) and x == first for x in summaries):
            return first                     # an integer every seed agrees on (a count, an id) stays that integer
        return r["mean"]
    if all(isinstance(x, (bool, np.bool_)) or x is None for x in summaries):
        known = [bool(x) for x in summaries if x is not None]
        if known and len(set(known)) == 1 and len(known) == len(summaries):
            return known[0]
        if prefix and agreement is not None:
            agreement[prefix[:-1]] = {"true": sum(known), "false": len(known) - sum(known),
                                      "undetermined": len(summaries) - len(known)}
        return None
    if all(x == first for x in summaries):
        return first
    return list(summaries)


def _read_metrics(run_dir: Path) -> pd.DataFrame:
    csv, pq = run_dir / "metrics.csv", run_dir / "metrics.parquet"
    return pd.read_csv(csv) if csv.is_file() else pd.read_parquet(pq)


def aggregate_metrics(run_dirs: list[Path], out: Path, fmt: str = "csv") -> Path:
    """Per-step mean over seeds of every column, with ``<col>_lo``/``<col>_hi`` t-intervals
    for the columns that are not per client. Returns the written file."""
    from scipy.stats import t as student_t
    frames = [_read_metrics(Path(d)) for d in run_dirs]
    n = min(len(f) for f in frames)
    frames = [f.iloc[:n].reset_index(drop=True) for f in frames]
    cols = [c for c in frames[0].columns if all(c in f.columns for f in frames)]
    stack = np.stack([f[cols].to_numpy(dtype=np.float64) for f in frames])          # (S, T, C)
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(stack)
        cnt = ok.sum(axis=0)
        mean = np.where(cnt > 0, np.nansum(stack, axis=0) / np.maximum(cnt, 1), np.nan)
        dev = np.where(ok, stack - mean, 0.0)
        sd = np.sqrt(np.sum(dev * dev, axis=0) / np.maximum(cnt - 1, 1))
        tq = np.where(cnt > 1, student_t.ppf(0.5 + CONFIDENCE / 2, np.maximum(cnt - 1, 1)), np.nan)
        half = tq * sd / np.sqrt(np.maximum(cnt, 1))
    data = {}
    for j, c in enumerate(cols):
        data[c] = mean[:, j]
        if c != "t" and not c.startswith("client"):
            data[f"{c}_lo"] = mean[:, j] - half[:, j]
            data[f"{c}_hi"] = mean[:, j] + half[:, j]
    df = pd.DataFrame(data)
    df["t"] = df["t"].round().astype(np.int64)
    path = out / ("metrics.parquet" if fmt == "parquet" else "metrics.csv")
    if fmt == "parquet":
        df.to_parquet(path, index=False)
    else:
        df.to_csv(path, index=False)
    return path


def _one(cfg_json: str, run_dir: str, plots: bool) -> dict:
    """Worker: one seed's run (a fresh process; imports inside)."""
    from ..config import parse_config
    from .experiment import run_experiment
    cfg = parse_config(json.loads(cfg_json))
    return run_experiment(cfg, Path(run_dir), plots=plots)


def seed_configs(cfg, n: int) -> list:
    """The N configs of a seeds run: ``seed`` s, s + 1, …; ``seeds`` reset to 1, name kept."""
    return [cfg.model_copy(update={"seed": cfg.seed + k, "seeds": 1}) for k in range(n)]


def run_pool(jobs: list[tuple], workers: int | None = None, on_done=None) -> list[dict]:
    """Run (cfg, run_dir, plots) jobs in a process pool of min(len(jobs), cores) workers.

    Results come back in the order of ``jobs``; ``on_done()`` is called as each
    finishes. With one job or one core the jobs run in this process.
    """
    workers = workers or min(len(jobs), os.cpu_count() or 1)
    results: list = [None] * len(jobs)
    if workers <= 1 or len(jobs) == 1:
        from .experiment import run_experiment
        for i, (cfg, run_dir, plots) in enumerate(jobs):
            results[i] = run_experiment(cfg, Path(run_dir), plots=plots)
            if on_done:
                on_done()
        return results
    ctx = multiprocessing.get_context("spawn")         # no fork of a process holding numba/BLAS threads
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futures = {pool.submit(_one, cfg.model_dump_json(), str(run_dir), plots): i
                   for i, (cfg, run_dir, plots) in enumerate(jobs)}
        for fut in as_completed(futures):
            results[futures[fut]] = fut.result()
            if on_done:
                on_done()
    return results


def summarize_seeds(summaries: list[dict], run_dirs: list[Path], root: Path, cfg, extra: dict | None = None) -> dict:
    """The parent folder's summary.json and metrics file from finished seed runs.

    ``summaries`` and ``run_dirs``: one per seed, in seed order; ``extra``: keys added to the merged
    summary as they are (e.g. ``wall_seconds``, the whole seeds run's wall time in seconds). Returns the
    merged summary (see the module docstring); raises OSError when a file cannot be written.
    """
    intervals, agreement = {}, {}
    own = ("config", "run_dir", "plots", "metrics_file")          # per-run bookkeeping, not figures
    merged = aggregate([{k: v for k, v in s.items() if k not in own} for s in summaries], intervals, agreement)
    merged.update({"run_dir": str(root), "seeds": [s["config"]["seed"] for s in summaries],
                   "seed_runs": [str(Path(d).name) for d in run_dirs], "interval": INTERVAL,
                   "intervals": intervals, "agreement": agreement,
                   "config": json.loads(cfg.model_dump_json())})
    merged.update(extra or {})
    path = aggregate_metrics(run_dirs, root, cfg.output.format)
    merged["metrics_file"] = path.name
    from .sink import jsonable
    (root / "summary.json").write_text(json.dumps(jsonable(merged), indent=2))
    return merged


def run_seeds(cfg, out: Path | None = None, n: int | None = None, console=None, live: bool = True,
              plots: bool | None = None) -> dict:
    """Run ``cfg`` under ``n`` seeds (default ``cfg.seeds``) into one parent folder.

    Returns the merged summary (see the module docstring). Raises what a
    single run raises (ConfigError, ValueError, DivergenceError) for the
    first failing seed; the parent folder is then removed if this call
    created it.
    """
    from rich.progress import Progress

    from .experiment import claim_run_dir
    n = n or cfg.seeds
    root, undo = claim_run_dir(cfg, out)
    want_plots = cfg.output.plots if plots is None else plots
    configs = seed_configs(cfg, n)
    dirs = [root / f"seed-{c.seed}" for c in configs]
    started = time.perf_counter()
    try:
        with Progress(console=console, disable=not live) as progress:
            task = progress.add_task(f"{cfg.name}: {n} seeds", total=n)
            summaries = run_pool([(c, d, want_plots) for c, d in zip(configs, dirs)],
                                 on_done=lambda: progress.advance(task))
        import yaml
        (root / "config.yaml").write_text(yaml.safe_dump(json.loads(cfg.model_dump_json()), sort_keys=False))
        merged = summarize_seeds(summaries, dirs, root, cfg, {"wall_seconds": time.perf_counter() - started})
        if want_plots:
            from ..report.plots import render_model_run
            merged["plots"] = [str(p) for p in render_model_run(root)]
        return merged
    except BaseException:
        undo()                  # only what this run created: a pre-existing --out folder stays
        raise
