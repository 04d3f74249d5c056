"""Reproduce C-VFL's experiments (Castiglia et al., ICML 2022, §5) on the 8×8 digits split into four quadrants.

What runs (every number from the payloads actually sent, see :mod:`streamfl.compression`):

* **Compression grid** (the paper's Figure 3 and Tables 2–4): for each
  compressor (scalar quantizer, hexagonal lattice quantizer, top-k) and
  b ∈ {2, 3, 4}, plus the uncompressed b = 32 baseline, C-VFL with Q local
  iterations trains for a fixed number of epochs, once per seed. The parties'
  embeddings are compressed with range (−1, 1) (they end in tanh; top-k per
  embedding vector) and the server model with the same compressor and b,
  scaled by its max |θ_0| (top-k over all of θ_0). Test accuracy is measured
  ``evals_per_epoch`` times per epoch. Reported per configuration: final and
  maximum test accuracy, bytes to reach the target accuracy, and the
  reduction of those bytes against b = 32 (mean ± std over seeds).
* **Local iterations against latency** (the shape of the paper's Table 5):
  the lattice quantizer at b = 3 with Q ∈ {1, 10, 25}, evaluated after every
  round until the target accuracy is reached. Time to target is *accounted*,
  not slept: time = measured CPU time of the training rounds (all parties and
  the server simulated in one single-threaded process) + rounds × round-trip
  latency, for latencies of 1, 10, 50 and 200 ms.

Runs are independent jobs spread over ``workers`` processes; the numbers do not
depend on the number of workers (only the measured CPU times vary).
"""

from __future__ import annotations

import json
import math
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from .cvfl_settings import COMPRESSORS, LABELS, Settings      # noqa: F401  (also imported from here)

EVERY_ROUND = 10 ** 9          # evals_per_epoch that evaluates after every round


@dataclass(frozen=True)
class Job:
    kind: str
    bits: int
    seed: int
    local_iterations: int
    epochs: int
    evals_per_epoch: int
    stop_at_accuracy: float | None
    table: str                      # "grid" or "q"


def run_job(settings: Settings, job: Job) -> pd.DataFrame:
    """Train one C-VFL model and return its evaluation rows (see :func:`~streamfl.vertical.train_epochs`)."""
    import torch
    from torch import nn

    from ..compression import make_compressor
    from ..vertical import CVFL, ConcatFusion, tanh_embedding, train_epochs
    from ..vertical.datasets import digits_quadrants

    cpu_start = time.process_time()
    torch.set_num_threads(1)
    train, test = digits_quadrants()
    torch.manual_seed(job.seed)
    parties = [tanh_embedding(w, settings.embedding, settings.hidden) for w in train.widths]
    server = ConcatFusion(nn.Linear(settings.embedding * train.n_parties, int(train.y.max()) + 1))
    model = CVFL(parties, server, local_iterations=job.local_iterations, lr=settings.lr, seed=job.seed,
                 compressor=make_compressor(job.kind, job.bits, range=(-1.0, 1.0), axis=-1),
                 server_compressor=make_compressor(job.kind, job.bits, range=None, axis=None))
    rows = train_epochs(model, train, epochs=job.epochs, batch_size=settings.batch_size, seed=job.seed,
                        test=test, evals_per_epoch=job.evals_per_epoch, stop_at_accuracy=job.stop_at_accuracy)
    df = pd.DataFrame(rows)
    df["job_cpu_seconds"] = time.process_time() - cpu_start      # the whole job: data, training, evaluation
    for k, v in (("table", job.table), ("compressor", job.kind), ("bits", job.bits), ("seed", job.seed),
                 ("Q", job.local_iterations)):
        df.insert(0, k, v)
    return df


def _jobs(s: Settings) -> list[Job]:
    grid = [("none", 32)] + [(c, b) for c in s.compressors for b in s.bits]
    jobs = [Job(c, b, seed, s.local_iterations, s.epochs, s.evals_per_epoch, None, "grid")
            for c, b in grid for seed in range(s.seeds)]
    jobs += [Job(s.q_compressor, s.q_bits, seed, q, s.q_max_epochs, EVERY_ROUND, s.target, "q")
             for q in s.q_values for seed in range(s.seeds)]
    # longest first, so the last job to finish is a short one
    return sorted(jobs, key=lambda j: -(j.epochs * j.local_iterations if j.table == "grid" else 10 * j.local_iterations))


def _mean_std(values) -> tuple[float, float]:
    v = np.asarray(values, dtype=float)
    return float(np.mean(v)), float(np.std(v, ddof=1)) if len(v) > 1 else 0.0


def first_reaching(df: pd.DataFrame, target: float) -> pd.Series | None:
    """The first evaluation row of one run whose test accuracy reaches ``target`` (None if none does)."""
    hit = df[df["test_accuracy"] >= target]
    return None if hit.empty else hit.iloc[0]


def summarise_grid(grid: pd.DataFrame, s: Settings) -> list[dict]:
    """Per (compressor, b): final and max accuracy, bytes to target, reduction against b = 32 (mean ± std)."""
    out = []
    groups = dict(iter(grid.groupby(["compressor", "bits"])))
    order = [("none", 32)] + [(c, b) for c in s.compressors for b in s.bits]
    runs = {k: groups[k] for k in order if k in groups}
    base = runs[("none", 32)]
    base_final = [g["test_accuracy"].iloc[-1] for _, g in base.groupby("seed")]
    base_bytes = [r["bytes"] for _, g in base.groupby("seed") if (r := first_reaching(g, s.target)) is not None]
    b_mean, _ = _mean_std(base_bytes) if base_bytes else (math.nan, 0)
    f_mean, f_std = _mean_std(base_final)
    for (kind, bits), g in runs.items():
        per_seed = list(g.groupby("seed"))
        final = [h["test_accuracy"].iloc[-1] for _, h in per_seed]
        best = [h["test_accuracy"].max() for _, h in per_seed]
        reach = [first_reaching(h, s.target) for _, h in per_seed]
        bytes_ = [r["bytes"] for r in reach if r is not None]
        epochs_ = [r["epoch"] for r in reach if r is not None]
        m_final, s_final = _mean_std(final)
        m_bytes, s_bytes = _mean_std(bytes_) if bytes_ else (math.nan, math.nan)
        out.append({
            "compressor": kind, "bits": int(bits), "seeds": len(per_seed),
            "final_accuracy_mean": m_final, "final_accuracy_std": s_final,
            "max_accuracy_mean": _mean_std(best)[0], "max_accuracy_std": _mean_std(best)[1],
            "reached_target": len(bytes_),
            "bytes_to_target_mean": m_bytes, "bytes_to_target_std": s_bytes,
            "epochs_to_target_mean": _mean_std(epochs_)[0] if epochs_ else math.nan,
            "bytes_per_epoch": float(g[g["seed"] == per_seed[0][0]]["bytes"].iloc[-1] / s.epochs),
            "byte_reduction_to_target": 1 - m_bytes / b_mean if bytes_ and len(bytes_) == len(per_seed) else math.nan,
            "final_within_one_std_of_uncompressed": bool(abs(m_final - f_mean) <= f_std),
        })
    return out


def summarise_q(qdf: pd.DataFrame, s: Settings) -> list[dict]:
    """Per Q: rounds and CPU seconds to target, and time to target for each latency (mean ± std over seeds)."""
    out = []
    for q, g in qdf.groupby("Q"):
        reach = [first_reaching(h, s.target) for _, h in g.groupby("seed")]
        ok = [r for r in reach if r is not None]
        row = {"Q": int(q), "seeds": len(reach), "reached_target": len(ok)}
        if ok:
            rounds = [r["round"] for r in ok]
            cpu = [r["cpu_seconds"] for r in ok]
            row.update(rounds_mean=_mean_std(rounds)[0], rounds_std=_mean_std(rounds)[1],
                       cpu_seconds_mean=_mean_std(cpu)[0], cpu_seconds_std=_mean_std(cpu)[1],
                       bytes_mean=_mean_std([r["bytes"] for r in ok])[0])
            for lat in s.latencies_ms:
                t = [r["cpu_seconds"] + r["round"] * lat / 1000 for r in ok]
                row[f"time_{lat:g}ms_mean"], row[f"time_{lat:g}ms_std"] = _mean_std(t)
        out.append(row)
    return out


def _pm(m: float, sd: float, fmt: str) -> str:
    return "—" if m != m else f"{m:{fmt}} ± {sd:{fmt}}"


def grid_table(rows: list[dict], s: Settings) -> str:
    """Markdown table of the compression grid."""
    lines = [f"| compressor | b | final accuracy | within 1 std of b = 32 | max accuracy | bytes to {s.target:.0%} "
             f"| reduction vs b = 32 | bytes / epoch |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        if r["reached_target"] == 0:
            to_target = "not reached"
        else:
            to_target = _pm(r["bytes_to_target_mean"] / 1e3, r["bytes_to_target_std"] / 1e3, ",.0f") + " kB"
            if r["reached_target"] < r["seeds"]:
                to_target += f" ({r['reached_target']}/{r['seeds']} seeds)"
        red = "—" if r["byte_reduction_to_target"] != r["byte_reduction_to_target"] else f"{r['byte_reduction_to_target']:.1%}"
        within = "—" if r["bits"] == 32 else ("yes" if r["final_within_one_std_of_uncompressed"] else "no")
        lines.append(f"| {LABELS[r['compressor']]} | {r['bits']} | {_pm(r['final_accuracy_mean'], r['final_accuracy_std'], '.3f')} "
                     f"| {within} | {_pm(r['max_accuracy_mean'], r['max_accuracy_std'], '.3f')} "
                     f"| {to_target} | {red} | {r['bytes_per_epoch'] / 1e3:,.0f} kB |")
    return "\n".join(lines)


def q_table(rows: list[dict], s: Settings) -> str:
    """Markdown table in the shape of C-VFL's Table 5: time to target per Q (rows) and latency (columns)."""
    head = " | ".join(f"{lat:g} ms" for lat in s.latencies_ms)
    lines = [f"| Q | {head} | rounds | CPU s |", "| --- |" + " --- |" * (len(s.latencies_ms) + 2)]
    for r in rows:
        if not r["reached_target"]:
            lines.append(f"| {r['Q']} |" + " not reached |" * len(s.latencies_ms) + " — | — |")
            continue
        cells = " | ".join(_pm(r[f"time_{lat:g}ms_mean"], r[f"time_{lat:g}ms_std"], ".2f") for lat in s.latencies_ms)
        reach = "" if r["reached_target"] == r["seeds"] else f" ({r['reached_target']}/{r['seeds']})"
        lines.append(f"| {r['Q']}{reach} | {cells} | {_pm(r['rounds_mean'], r['rounds_std'], '.0f')} "
                     f"| {_pm(r['cpu_seconds_mean'], r['cpu_seconds_std'], '.2f')} |")
    return "\n".join(lines)


def reproduce(out: Path, settings: Settings | None = None,
              progress: Callable[[int, int, Job], None] | None = None) -> dict:
    """Run the whole reproduction and write ``out``: runs.csv, summary.json, tables.md and the plots.

    Parameters
    ----------
    out : Path
        A new or empty folder (created).
    settings : Settings
    progress : callable(done, total, job), optional

    Returns
    -------
    dict
        The summary (also written to ``out/summary.json``), with the wall time measured.
    """
    s = settings or Settings()
    s.check()
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    jobs = _jobs(s)
    frames = []
    if s.workers == 1:
        for i, job in enumerate(jobs):
            frames.append(run_job(s, job))
            if progress:
                progress(i + 1, len(jobs), job)
    else:
        import multiprocessing as mp
        with ProcessPoolExecutor(max_workers=s.workers, mp_context=mp.get_context("spawn")) as pool:
            futures = {pool.submit(run_job, s, job): job for job in jobs}
            from concurrent.futures import as_completed
            for i, fut in enumerate(as_completed(futures)):
                frames.append(fut.result())
                if progress:
                    progress(i + 1, len(jobs), futures[fut])
    runs = pd.concat(frames, ignore_index=True).sort_values(["table", "compressor", "bits", "Q", "seed", "round"],
                                                            kind="stable")
    runs.to_csv(out / "runs.csv", index=False)
    return write_results(out, runs, s, wall_seconds=time.perf_counter() - start)


def write_results(out: Path, runs: pd.DataFrame, s: Settings, wall_seconds: float) -> dict:
    """Tables, plots and summary.json from the evaluation rows of all runs (``runs.csv``)."""
    from .cvfl_plots import plot_accuracy, plot_q_latency

    grid, qdf = runs[runs["table"] == "grid"], runs[runs["table"] == "q"]
    grid_rows, q_rows = summarise_grid(grid, s), summarise_q(qdf, s)
    plots = [plot_accuracy(grid, s, "epoch", out / "accuracy_vs_epochs.png"),
             plot_accuracy(grid, s, "bytes", out / "accuracy_vs_bytes.png"),
             plot_q_latency(q_rows, s, out / "time_to_target.png")]
    (out / "tables.md").write_text(f"## Compression (Q = {s.local_iterations}, {s.seeds} seeds)\n\n"
                                   f"{grid_table(grid_rows, s)}\n\n"
                                   f"## Time to {s.target:.0%} test accuracy ({s.q_compressor}, b = {s.q_bits})\n\n"
                                   f"{q_table(q_rows, s)}\n")
    cpu = runs.groupby(["table", "compressor", "bits", "Q", "seed"])["job_cpu_seconds"].first().sum() \
        if "job_cpu_seconds" in runs else math.nan
    summary = {"settings": {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(s).items()},
               "data": "scikit-learn digits 8×8, one 4×4 quadrant per party (M = 4); 1,437 train / 360 test",
               "compression": grid_rows, "q_latency": q_rows,
               "wall_seconds": wall_seconds, "jobs_cpu_seconds": float(cpu),
               "plots": [str(p) for p in plots]}
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=float))
    return summary


def run_cli(out: Path | None, console, **settings) -> dict:
    """``streamfl reproduce cvfl``: run with the given settings, report progress and the tables on ``console``."""
    from datetime import datetime

    s = Settings(**settings)
    s.check()
    out = out if out is not None else Path("runs") / f"reproduce-cvfl-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    n_jobs = len(_jobs(s))
    console.print(f"C-VFL reproduction: {n_jobs} runs on {s.workers} process(es) → {out}", soft_wrap=True)
    start = time.perf_counter()

    def progress(done: int, total: int, job: Job) -> None:
        console.print(f"  [{done}/{total}] {job.table}: {LABELS[job.kind]} b={job.bits} Q={job.local_iterations} "
                      f"seed={job.seed}  ({time.perf_counter() - start:.0f} s)", highlight=False)

    summary = reproduce(out, s, progress)
    console.print((out / "tables.md").read_text(), highlight=False, soft_wrap=True)
    console.print(f"done in {summary['wall_seconds']:.0f} s (the runs took {summary['jobs_cpu_seconds']:.0f} CPU s); "
                  f"results in {out}", soft_wrap=True)
    return summary
