"""Figures of the C-VFL reproduction: accuracy against epochs and bytes, time to target against latency."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from .cvfl_settings import LABELS, Settings

BIT_COLOURS = {2: "#d62728", 3: "#ff7f0e", 4: "#2ca02c", 32: "#1f1f1f"}


def _curve(runs: pd.DataFrame, x: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean and std of test accuracy over seeds at each evaluation (runs share the evaluation grid)."""
    acc = runs.pivot_table(index="round", columns="seed", values="test_accuracy")
    xs = runs.groupby("round")[x].first().loc[acc.index].to_numpy(dtype=float)
    return xs, acc.mean(axis=1).to_numpy(), acc.std(axis=1, ddof=1).fillna(0).to_numpy()


def plot_accuracy(grid: pd.DataFrame, s: Settings, x: str, path: Path) -> Path:
    """One panel per compressor: test accuracy (mean ± std over seeds) against ``x`` ("epoch" or "bytes")."""
    kinds = [k for k in s.compressors if k in set(grid["compressor"])]
    fig = Figure(figsize=(4.2 * len(kinds), 3.8), constrained_layout=True)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(kinds), sharey=True, squeeze=False)[0]
    base = grid[grid["compressor"] == "none"]
    for ax, kind in zip(axes, kinds):
        for bits, runs in [(32, base)] + [(b, grid[(grid["compressor"] == kind) & (grid["bits"] == b)])
                                          for b in s.bits]:
            if runs.empty:
                continue
            xs, m, sd = _curve(runs, x)
            if x == "bytes":            # log axis: the untrained model (0 bytes sent) has no place on it
                xs, m, sd = xs[1:] / 1e6, m[1:], sd[1:]
            label = "b = 32 (none)" if bits == 32 else f"b = {bits}"
            ax.plot(xs, m, color=BIT_COLOURS.get(bits), lw=1.6, label=label)
            ax.fill_between(xs, m - sd, m + sd, color=BIT_COLOURS.get(bits), alpha=0.18, lw=0)
        ax.axhline(s.target, color="grey", lw=0.8, ls=":")
        ax.set_title(LABELS[kind])
        ax.set_xlabel("epoch" if x == "epoch" else "bytes sent, up + down (MB, log scale)")
        if x == "bytes":
            ax.set_xscale("log")
        ax.set_ylim(0.0, 1.0)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("test accuracy")
    axes[0].legend(loc="lower right", fontsize=8)
    fig.suptitle(f"C-VFL on digits (4 parties, quadrants), Q = {s.local_iterations}: "
                 f"mean ± std over {s.seeds} seeds; dotted: target {s.target:.0%}", fontsize=10)
    fig.savefig(path, dpi=110)
    return path


def plot_q_latency(rows: list[dict], s: Settings, path: Path) -> Path:
    """Time to target against round-trip latency, one line per Q (log–log)."""
    fig = Figure(figsize=(5.2, 3.8), constrained_layout=True)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    lat = np.array(s.latencies_ms, dtype=float)
    for r in rows:
        if not r["reached_target"]:
            continue
        m = np.array([r[f"time_{x:g}ms_mean"] for x in s.latencies_ms])
        sd = np.array([r[f"time_{x:g}ms_std"] for x in s.latencies_ms])
        ax.errorbar(lat, m, yerr=sd, marker="o", ms=4, capsize=3, label=f"Q = {r['Q']}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("round-trip latency (ms)")
    ax.set_ylabel(f"time to {s.target:.0%} test accuracy (s)")
    ax.set_title(f"{LABELS[s.q_compressor]}, b = {s.q_bits}: measured CPU time + rounds × latency", fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.savefig(path, dpi=110)
    return path
