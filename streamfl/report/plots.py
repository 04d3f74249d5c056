"""PNG figures of a finished run folder.

A run folder holds ``metrics.csv`` (or ``metrics.parquet``; one row per step,
the columns of :meth:`streamfl.regret.tracker.RegretTracker.update`) and
``summary.json`` (the end-of-run summary). :func:`render_run` writes four
figures into ``<run>/plots/``:

* ``regret.png`` — cumulative regret against every available comparator and
  the exact static checkpoints; below, in a panel of their own, the loss gaps
  to the baselines (another quantity);
* ``regret_over_sqrt_t.png`` — regret / √t on a log-t axis (flat ⇒ O(√T));
* ``client_losses.png`` — every client's running average loss and the
  network's;
* ``heterogeneity.png`` — σ_t², ζ_t², K_t² (rolling means) and FedSEA's regime
  test σ̄²/M ≥ L·K̄².

:func:`plot_sweep` compares the regret curves of a sweep over the number of
clients M; :func:`render_sweep` draws it from a sweep folder's files.

Figures are drawn on :class:`matplotlib.figure.Figure` objects with the Agg
canvas: no pyplot, no global state, safe in threads and headless servers.
Long runs are thinned to at most :data:`MAX_POINTS` points per curve (the last
row is always kept); markers and vertical lines are never thinned. Every
time axis marks the run's drift, read from ``summary["config"]["source"]``:
abrupt switches (``drift``) as dotted lines, injected drift (``inject``) as
shaded windows.
"""

from __future__ import annotations

import json
import math
import re
import textwrap
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.cm import ScalarMappable
from matplotlib.colors import ListedColormap, LogNorm, Normalize
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogFormatter, NullLocator

__all__ = [
    "MAX_POINTS",
    "MAX_CLIENTS",
    "load_metrics",
    "load_summary",
    "plot_regret",
    "plot_regret_over_sqrt_t",
    "plot_client_losses",
    "plot_heterogeneity",
    "plot_sweep",
    "render_run",
    "render_sweep",
]

#: Largest number of points drawn per curve.
MAX_POINTS = 5000
#: Largest number of client curves drawn by :func:`plot_client_losses`.
MAX_CLIENTS = 32

DPI = 120
FIGSIZE = (8.0, 5.0)
BASELINES = ("tau1", "local", "centralized", "river")
REQUIRED = ("t", "cum_loss")

_COMPARATORS = (
    # column, legend label, colour
    ("regret_static", "static: best fixed in hindsight", "#1f77b4"),
    ("regret_expected", "expected: FedSEA eq. (3)", "#d62728"),
    ("regret_dynamic", "dynamic: per-step optimum", "#2ca02c"),
)
_BASELINE_COLOURS = ("#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
_CLIENT_RE = re.compile(r"^client(\d+)_cum_loss$")


# ---------------------------------------------------------------------- loading
def load_metrics(run_dir: str | Path, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """Read the per-step metrics of a run.

    Parameters
    ----------
    run_dir : str or Path
        The run folder (holding ``metrics.csv`` or ``metrics.parquet``; the
        CSV wins when both exist), or the path of the metrics file itself.
    columns : list of str or None
        Read only these columns (all by default); ``t`` and ``cum_loss`` are
        always read.

    Returns
    -------
    pandas.DataFrame
        Every row of the file (no thinning here; the plot functions thin),
        sorted by ``t``, with the columns coerced to numbers.

    Raises
    ------
    FileNotFoundError
        If neither ``metrics.csv`` nor ``metrics.parquet`` exists.
    ValueError
        If a required column (``t``, ``cum_loss``) is missing.
    """
    run_dir = Path(run_dir)
    if run_dir.is_file():
        candidates = [run_dir]
    else:
        candidates = [run_dir / "metrics.csv", run_dir / "metrics.parquet"]
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        raise FileNotFoundError(
            f"No metrics file in the run folder {str(run_dir)!r}: expected 'metrics.csv' or 'metrics.parquet'.")
    if columns is not None:
        wanted = set(REQUIRED) | set(columns)
        columns = lambda c: c in wanted         # noqa: E731  (missing ones are reported by _require)
    if path.suffix == ".parquet":
        df = pd.read_parquet(path)
        if columns is not None:
            df = df[[c for c in df.columns if columns(c)]]
    else:
        df = pd.read_csv(path, usecols=columns)
    _require(df, REQUIRED if columns is None else sorted(wanted), source=str(path))
    df = df.apply(pd.to_numeric, errors="coerce")
    if not df["t"].is_monotonic_increasing:
        df = df.sort_values("t", kind="stable")
    return df.reset_index(drop=True)


def load_summary(run_dir: str | Path) -> dict:
    """Read ``summary.json`` of a run folder.

    Parameters
    ----------
    run_dir : str or Path
        The run folder.

    Returns
    -------
    dict

    Raises
    ------
    FileNotFoundError
        If the folder has no ``summary.json``.
    """
    path = Path(run_dir) / "summary.json"
    if not path.is_file():
        raise FileNotFoundError(f"No 'summary.json' in the run folder {str(run_dir)!r}.")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


# ---------------------------------------------------------------------- helpers
def _require(df: pd.DataFrame, columns: Sequence[str], source: str = "the metrics") -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"Required column {missing[0]!r} is missing from {source} "
                         f"(missing: {missing}; present: {list(df.columns)[:12]}{'...' if df.shape[1] > 12 else ''}).")


def _thin_index(n: int, max_points: int = MAX_POINTS) -> np.ndarray:
    """Indices of at most ``max_points`` rows out of ``n``: half on a geometric
    grid (detail at small t, for log axes), half on a uniform stride, always
    including the first and the last row."""
    if n <= max_points:
        return np.arange(n)
    half = max_points // 2
    geo = np.unique(np.geomspace(1, n, half).astype(np.int64) - 1)
    stride = math.ceil((n - 1) / (max_points - half - 1))
    uni = np.arange(0, n - 1, stride)
    idx = np.union1d(np.union1d(geo, uni), [n - 1])
    return idx[idx < n]


def _thin(df: pd.DataFrame, max_points: int = MAX_POINTS) -> pd.DataFrame:
    return df.iloc[_thin_index(len(df), max_points)]


def _has_data(df: pd.DataFrame, column: str) -> bool:
    return column in df.columns and bool(np.isfinite(df[column].to_numpy(dtype=float)).any())


def _num(x: Any) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")


def _fmt(x: Any) -> str:
    v = _num(x)
    return "n/a" if not np.isfinite(v) else f"{v:.4g}"


def _config(summary: Mapping | None) -> dict:
    cfg = (summary or {}).get("config")
    return cfg if isinstance(cfg, dict) else {}


def _run_name(summary: Mapping | None) -> str:
    name = _config(summary).get("name")
    main = (summary or {}).get("main") or "learner"
    return f"{name} ({main})" if name else str(main)


def _main_label(summary: Mapping | None) -> str:
    """The main learner as readers know it ('FedSEA' for the learner named fedsea)."""
    main = str((summary or {}).get("main") or "main learner")
    return "FedSEA" if main == "fedsea" else main


def _loss_units(summary: Mapping | None) -> str:
    """'nats' for log-loss tasks when the config says so, else 'loss units'."""
    cfg = _config(summary)
    source = cfg.get("source") if isinstance(cfg.get("source"), dict) else {}
    task = cfg.get("task") or source.get("task") or (summary or {}).get("task")
    return "nats" if task in ("logistic", "softmax") else "loss units"


def _baselines(df: pd.DataFrame) -> list[str]:
    """Baseline names found as ``gap_<name>`` columns (known names first)."""
    names = [c[len("gap_"):] for c in df.columns if c.startswith("gap_")]
    return sorted(names, key=lambda b: (BASELINES.index(b) if b in BASELINES else len(BASELINES), b))


def _client_columns(df: pd.DataFrame) -> list[tuple[int, str]]:
    found = [(int(m.group(1)), c) for c in df.columns if (m := _CLIENT_RE.match(c))]
    return sorted(found)


def _abrupt_steps(summary: Mapping | None) -> list[int]:
    """1-based steps t at which an abrupt drift switch takes effect.

    The config's ``source.drift`` items look like ``{"kind": "abrupt",
    "at": [...]}`` with 0-based steps (see :class:`~streamfl.generators.
    schedules.Abrupt`); the new distribution is first seen at t = at + 1.
    Anything malformed is ignored.
    """
    source = _config(summary).get("source")
    drift = source.get("drift") if isinstance(source, dict) else None
    if isinstance(drift, dict):
        drift = [drift]
    if not isinstance(drift, (list, tuple)):
        return []
    steps: set[int] = set()
    for item in drift:
        if not isinstance(item, dict) or str(item.get("kind", "")).lower() != "abrupt":
            continue
        at = item.get("at")
        for a in (at if isinstance(at, (list, tuple)) else [at]):
            v = _num(a)
            if np.isfinite(v):
                steps.add(int(v) + 1)
    return sorted(steps)


_INJECTED_COLOURS = {"covariate_rotation": "#9467bd", "covariate_scale": "#17becf", "label_flip": "#d62728"}


def _injected_windows(summary: Mapping | None) -> list[tuple[float, float | None, str, str]]:
    """Injected drift of the config's ``source.inject``, as 1-based step windows.

    Returns a list of ``(first t, last t or None for "to the end", legend
    label, kind)``. Injector steps are 0-based (see
    :mod:`streamfl.generators.inject`): a covariate rotation or scale ramps
    from ``start`` to ``end`` (a switch when ``end`` is missing or equal) and
    is then held; a label flip acts on ``start ≤ step < end`` (to the end when
    ``end`` is missing). Anything malformed is ignored.

    >>> _injected_windows({"config": {"source": {"inject": [{"kind": "label_flip", "start": 4500, "fraction": 0.25}]}}})
    [(4501.0, None, 'injected label flip (25% of labels), t ≥ 4,501', 'label_flip')]
    """
    source = _config(summary).get("source")
    items = source.get("inject") if isinstance(source, dict) else None
    if not isinstance(items, (list, tuple)):
        return []
    out = []
    for item in items:
        if not isinstance(item, dict):
            continue
        kind = str(item.get("kind", ""))
        start, end = _num(item.get("start")), _num(item.get("end"))
        if not np.isfinite(start):
            continue
        lo = start + 1
        if kind in ("covariate_rotation", "covariate_scale"):
            hi = end + 1 if np.isfinite(end) else lo
            what = (f"rotation {_fmt(item.get('angle'))} rad" if kind == "covariate_rotation"
                    else f"scale ×{_fmt(item.get('factor'))}")
            when = f"at t = {int(lo):,}" if hi <= lo else f"t = {int(lo):,}–{int(hi):,}"
            out.append((lo, max(hi, lo), f"injected covariate {what}, {when} then held", kind))
        elif kind == "label_flip":
            hi = end if np.isfinite(end) else None
            frac = _num(item.get("fraction", 1.0))
            share = "all labels" if frac == 1 else f"{frac:.0%} of labels"
            when = f"t ≥ {int(lo):,}" if hi is None else f"t = {int(lo):,}–{int(hi):,}"
            out.append((lo, hi, f"injected label flip ({share}), {when}", kind))
    return out


def _continuous_drift(summary: Mapping | None) -> list[str]:
    """The config's drift schedules that act at every step, in words (abrupt switches are drawn instead)."""
    source = _config(summary).get("source")
    drift = source.get("drift") if isinstance(source, dict) else None
    if isinstance(drift, dict):
        drift = [drift]
    words = []
    for item in drift if isinstance(drift, (list, tuple)) else []:
        if not isinstance(item, dict):
            continue
        kind = str(item.get("kind", ""))
        if kind == "rotation":
            words.append(f"rotation {_fmt(item.get('speed'))} rad/step")
        elif kind in ("linear", "random_walk", "adaptive"):
            key = {"linear": "speed", "random_walk": "step", "adaptive": "budget"}[kind]
            words.append(f"{kind.replace('_', ' ')} {_fmt(item.get(key))} per step")
        elif kind == "periodic":
            words.append(f"periodic (amplitude {_fmt(item.get('amplitude'))}, period {_fmt(item.get('period'))})")
    return words


def _clients_text(M) -> str:
    """'M = 1 client', 'M = 8 clients'."""
    return f"M = {M} client{'' if M == 1 else 's'}"


class _PlainLogFormatter(LogFormatter):
    """Log-axis labels as plain numbers (0.6, 0.01, 1e-05): matplotlib picks
    which ticks get a label, we only change how it reads."""

    def __call__(self, x, pos=None):
        return f"{x:g}" if super().__call__(x, pos) else ""


def _new_figure(figsize=FIGSIZE) -> Figure:
    fig = Figure(figsize=figsize, dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _style(ax) -> None:
    ax.grid(True, which="major", alpha=0.35, linewidth=0.7)
    ax.grid(True, which="minor", alpha=0.12, linewidth=0.5)
    ax.tick_params(labelsize=9)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def _wrap(text: str, width: int) -> str:
    """Wrap each line of ``text`` at ``width`` characters, never inside $math$."""
    keep = "\x00"
    parts = text.split("$")
    protected = "$".join(p.replace(" ", keep) if i % 2 else p for i, p in enumerate(parts))
    lines = [textwrap.fill(line, width, break_long_words=False) for line in protected.split("\n")]
    return "\n".join(lines).replace(keep, " ")


def _titles(fig: Figure, ax, title: str, subtitle: str | None = None) -> None:
    """Bold figure title and grey subtitle, wrapped to the figure's width (long run names)."""
    width = fig.get_figwidth()
    fig.suptitle(_wrap(title, int(width * 9)), fontsize=12.5, fontweight="bold")
    if subtitle:
        ax.set_title(_wrap(subtitle, int(width * 14)), fontsize=9, color="0.35")


def _legend_below(fig: Figure, ax, title: str | None = None, ncol: int | None = None, **kw):
    """One legend under the axes (never on top of the data); ``ax`` may be a list of axes."""
    handles, labels = [], []
    for a in ax if isinstance(ax, (list, tuple)) else [ax]:
        for h, lab in zip(*a.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    if not handles:
        return None
    if ncol is None:      # as many columns as fit the figure's width (about 5.6 px per character at 8.5 pt)
        longest = max(len(lab) for lab in labels)
        ncol = max(1, min(3, len(handles), int(fig.get_figwidth() * DPI / (longest * 5.6 + 70))))
    return fig.legend(handles, labels, loc="outside lower center", ncol=ncol, fontsize=8.5, frameon=True,
                      framealpha=1.0, edgecolor="0.8", title=title, title_fontsize=9, **kw)


def _save(fig: Figure, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, format="png", facecolor="white")
    return path


def _draw_drift(ax, summary: Mapping | None, t_min: float, t_max: float, legend: bool = True) -> int:
    """Mark the run's drift events on ``ax``: abrupt switches of ``source.drift``
    as dotted lines, injected drift of ``source.inject`` as shaded windows
    (hatched for label flips) or dashed lines (switches). Returns the number
    of marks drawn. ``legend=False`` draws them unlabelled (second panels)."""
    shown = [s for s in _abrupt_steps(summary) if t_min <= s <= t_max]
    for i, s in enumerate(shown):
        ax.axvline(s, color="0.3", linestyle=":", linewidth=1.1, zorder=1,
                   label="abrupt drift switch" if i == 0 and legend else None)
    drawn = len(shown)
    for lo, hi, label, kind in _injected_windows(summary):
        hi = t_max if hi is None else hi
        if lo > t_max or hi < t_min:
            continue
        colour = _INJECTED_COLOURS.get(kind, "0.5")
        label = label if legend else None
        if hi <= lo:
            ax.axvline(lo, color=colour, linestyle="--", linewidth=1.2, zorder=1, label=label)
        else:
            ax.axvspan(max(lo, t_min), min(hi, t_max), facecolor=colour, alpha=0.12, zorder=0,
                       hatch="//" if kind == "label_flip" else None, edgecolor=colour, linewidth=0, label=label)
        drawn += 1
    return drawn


def _coincidences(series: Sequence[tuple[str, np.ndarray]], span: float) -> dict[str, tuple[str, str]]:
    """Legend notes for curves that hide each other.

    For each series that coincides with an earlier one X, ``(X, note)`` with
    the note ``"identical to X"`` when they differ by at most 1e-9 of their
    size, ``"overlaps X"`` when by at most 2 % of the panel's y-span ``span``
    (the max |Δ| is given).

    >>> a = np.array([0.0, 1.0, 2.0])
    >>> _coincidences([("local", a), ("river", a + 1e-15), ("tau1", a + 0.01), ("far", -a)], span=4.0)
    {'river': ('local', 'identical to local (max |Δ| = 1e-15)'), 'tau1': ('local', 'overlaps local (max |Δ| = 0.01)')}
    """
    notes: dict[str, tuple[str, str]] = {}
    for i, (name, y) in enumerate(series):
        for other, z in series[:i]:
            ok = np.isfinite(y) & np.isfinite(z)
            if not ok.any():
                continue
            diff = float(np.max(np.abs(y[ok] - z[ok])))
            size = float(np.max(np.abs(z[ok])))
            if diff <= 1e-9 * size:
                notes[name] = (other, f"identical to {other}" + (f" (max |Δ| = {diff:.1g})" if diff else ""))
            elif span > 0 and diff <= 0.02 * span:
                notes[name] = (other, f"overlaps {other} (max |Δ| = {diff:.2g})")
            if name in notes:
                break
    return notes


def _span(values: Sequence[np.ndarray]) -> float:
    finite = np.concatenate([np.asarray(v, dtype=float)[np.isfinite(v)] for v in values]) if values else np.array([])
    return float(finite.max() - finite.min()) if finite.size else 0.0


def _exact_label(summary: Mapping) -> str:
    """Legend label of the exact static checkpoints (the curve itself is exact for least squares)."""
    if "sufficient statistics" in str(summary.get("regret_static_method", "")):
        return "static, exact at checkpoints"
    return "static, exact (end-of-run solver)"


def _checkpoints(summary: Mapping | None) -> tuple[np.ndarray, np.ndarray]:
    pts = []
    for item in (summary or {}).get("static_checkpoints") or []:
        try:
            t, r = _num(item[0]), _num(item[1])
        except (TypeError, IndexError, KeyError):
            continue
        if np.isfinite(t) and np.isfinite(r) and t > 0:
            pts.append((t, r))
    pts.sort()
    arr = np.asarray(pts, dtype=float).reshape(-1, 2)
    return arr[:, 0], arr[:, 1]


# ---------------------------------------------------------------------- run plots
def plot_regret(df: pd.DataFrame, summary: Mapping | None, path: str | Path) -> Path:
    """Cumulative regret of the main learner and its loss gaps, against t.

    Top panel, regrets: one solid curve per available comparator —
    ``regret_static`` (best fixed model in hindsight), ``regret_expected``
    (FedSEA eq. (3)) and ``regret_dynamic`` (per-step optimum); all-NaN
    columns are skipped — and the exact static regrets of
    ``summary["static_checkpoints"]`` as markers. Bottom panel (only when the
    run has baselines), loss gaps, another quantity: ``gap_<baseline>``, the
    main learner's cumulative loss minus the baseline's (below 0: the main
    learner is ahead), each with its own line style and markers placed at
    staggered steps, so that curves lying on top of each other stay visible;
    the legend says which curve is identical to or overlaps which. Both
    panels mark the drift: abrupt switches of ``source.drift`` and injected
    drift of ``source.inject`` (see :func:`_draw_drift`); drift that acts at
    every step is named in the subtitle.

    Parameters
    ----------
    df : pandas.DataFrame
        Per-step metrics (at least ``t`` and ``cum_loss``).
    summary : dict
        The run summary (``main``, ``n_clients``, ``regret_static``,
        ``static_checkpoints``, ``regret_static_method``, ``config``); missing
        keys are tolerated.
    path : str or Path
        Output PNG file (parent folders are created).

    Returns
    -------
    Path
        ``path``.

    Raises
    ------
    ValueError
        If ``t`` or ``cum_loss`` is missing.
    """
    return _save(_regret_figure(df, summary), path)


_GAP_STYLES = ("--", "-.", (0, (1, 1.5)), (0, (6, 2, 1, 2, 1, 2)), (0, (3, 1)), (0, (8, 2)))
_GAP_MARKERS = ("o", "s", "^", "D", "v", "P", "X")


def _regret_figure(df: pd.DataFrame, summary: Mapping | None) -> Figure:
    _require(df, REQUIRED)
    summary = summary or {}
    units = _loss_units(summary)
    thin = _thin(df)
    t = thin["t"].to_numpy(dtype=float)
    gaps = [b for b in _baselines(df) if _has_data(df, f"gap_{b}")]
    fig = _new_figure((8.0, 7.6) if gaps else FIGSIZE)
    if gaps:
        top, bottom = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    else:
        top, bottom = fig.add_subplot(), None
    t_lo, t_hi = float(np.nanmin(t)), float(np.nanmax(t))
    every = max(1, len(t) // 10)

    ck_t, ck_r = _checkpoints(summary)
    comps = []
    for col, label, colour in _COMPARATORS:
        if not _has_data(thin, col):
            continue
        if col == "regret_static" and len(ck_t) and "sufficient statistics" not in str(summary.get("regret_static_method", "")):
            label += " (live estimate)"
        comps.append((col, label, colour))
    full = [(label, df[col].to_numpy(dtype=float)) for col, label, _ in comps]
    notes = _coincidences(full, _span([v for _, v in full]))
    involved = set(notes) | {other for other, _ in notes.values()}
    top.axhline(0.0, color="0.55", linewidth=0.8, zorder=1)
    for i, (col, label, colour) in enumerate(comps):
        mark = dict(marker=_GAP_MARKERS[i], markevery=(i * every // 3, every), markersize=5,
                    markerfacecolor="white") if label in involved else {}
        shown = f"{label}, {notes[label][1]}" if label in notes else label
        top.plot(t, thin[col].to_numpy(dtype=float), color=colour, linewidth=1.8, label=shown, zorder=3, **mark)
    if len(ck_t):
        top.plot(ck_t, ck_r, linestyle="none", marker="o", markersize=5.5, markerfacecolor="white",
                 markeredgecolor="#1f77b4", markeredgewidth=1.6, label=_exact_label(summary), zorder=4)
    if not comps and not len(ck_t):
        top.text(0.5, 0.5, "no regret series available", transform=top.transAxes,
                 ha="center", va="center", color="0.4")
    top.set_ylabel(f"cumulative regret $R_t$ ({units})")
    _draw_drift(top, summary, t_lo, t_hi)

    if bottom is not None:
        full = [(b, df[f"gap_{b}"].to_numpy(dtype=float)) for b in gaps]
        notes = _coincidences(full, _span([v for _, v in full]))
        bottom.axhline(0.0, color="0.55", linewidth=0.8, zorder=1)
        extra = 0
        for i, b in enumerate(gaps):
            if b in BASELINES:       # a fixed colour per known baseline, the same in every run
                colour = _BASELINE_COLOURS[BASELINES.index(b)]
            else:
                colour = _BASELINE_COLOURS[len(BASELINES) + extra % (len(_BASELINE_COLOURS) - len(BASELINES))]
                extra += 1
            label = f"loss gap to {b}" + (f", {notes[b][1]}" if b in notes else "")
            bottom.plot(t, thin[f"gap_{b}"].to_numpy(dtype=float), color=colour,
                        linestyle=_GAP_STYLES[i % len(_GAP_STYLES)], linewidth=1.4, label=label, zorder=2 + i,
                        marker=_GAP_MARKERS[i % len(_GAP_MARKERS)], markersize=5, markerfacecolor="white",
                        markevery=(i * every // len(gaps), every))
        bottom.set_ylabel(f"loss gap ({units})")
        main = _main_label(summary)
        bottom.set_title(f"loss gaps: {main}'s cumulative loss − each baseline's (below 0: {main} ahead)",
                         fontsize=9, color="0.35")
        _draw_drift(bottom, summary, t_lo, t_hi, legend=False)
        _style(bottom)
    (bottom or top).set_xlabel("step t")
    top.set_xlim(t_lo, t_hi if t_hi > t_lo else t_lo + 1)
    _style(top)
    _legend_below(fig, [top] + ([bottom] if bottom is not None else []))
    T = int(df["t"].iloc[-1])
    sub = f"T = {T:,} steps"
    if "n_clients" in summary:
        sub += f", {_clients_text(summary['n_clients'])}"
    if "regret_static" in summary:
        sub += f"; final static regret R_T = {_fmt(summary['regret_static'])} {units}"
        if summary.get("regret_static_method"):
            sub += f" [{summary['regret_static_method']}]"
    if not gaps:
        sub += "; no baselines in this run"
    drift = _continuous_drift(summary)
    if drift:
        sub += "\ndrift at every step: " + ", ".join(drift)
    _titles(fig, top, f"{_run_name(summary)}: cumulative regret", sub)
    return fig


def plot_regret_over_sqrt_t(df: pd.DataFrame, summary: Mapping | None, path: str | Path) -> Path:
    """Regret divided by √t against t on a log-t axis.

    A curve that flattens means regret grows as O(√T); a decreasing one means
    sub-√T growth. Draws ``regret_static``/√t and, when present,
    ``regret_expected``/√t and ``regret_dynamic``/√t, plus the exact static
    checkpoints / √t as markers.

    Parameters
    ----------
    df : pandas.DataFrame
        Per-step metrics (at least ``t`` and ``cum_loss``).
    summary : dict
        The run summary (``static_checkpoints``, ``config``, ``main``).
    path : str or Path
        Output PNG file.

    Returns
    -------
    Path
    """
    return _save(_regret_over_sqrt_t_figure(df, summary), path)


def _regret_over_sqrt_t_figure(df: pd.DataFrame, summary: Mapping | None) -> Figure:
    _require(df, REQUIRED)
    summary = summary or {}
    units = _loss_units(summary)
    thin = _thin(df)
    thin = thin[thin["t"] > 0]
    t = thin["t"].to_numpy(dtype=float)
    root = np.sqrt(t)
    fig = _new_figure()
    ax = fig.add_subplot()
    ax.axhline(0.0, color="0.55", linewidth=0.8, zorder=1)
    ck_t, ck_r = _checkpoints(summary)
    drawn = 0
    for col, label, colour in _COMPARATORS:
        if not _has_data(thin, col):
            continue
        if col == "regret_static" and len(ck_t) and "sufficient statistics" not in str(summary.get("regret_static_method", "")):
            label += " (live estimate)"
        ax.plot(t, thin[col].to_numpy(dtype=float) / root, color=colour, linewidth=1.8, label=label)
        drawn += 1
    if len(ck_t):
        ax.plot(ck_t, ck_r / np.sqrt(ck_t), linestyle="none", marker="o", markersize=5.5, markerfacecolor="white",
                markeredgecolor="#1f77b4", markeredgewidth=1.6, label=_exact_label(summary), zorder=4)
        drawn += 1
    if len(t):
        _draw_drift(ax, summary, float(t.min()), float(t.max()))
        ax.set_xscale("log")
        ax.set_xlim(max(1.0, float(t.min())), max(float(t.max()), float(t.min()) * 1.01 + 1))
    if not drawn:
        ax.text(0.5, 0.5, "no regret series available", transform=ax.transAxes,
                ha="center", va="center", color="0.4")
    ax.set_xlabel("step t (log scale)")
    ax.set_ylabel(f"regret / √t ({units} per √step)")
    _style(ax)
    _legend_below(fig, ax)
    _titles(fig, ax, f"{_run_name(summary)}: regret / √t  (flat ⇒ O(√T) regret)",
            "a falling curve means regret grows slower than √T; a rising one, faster")
    return fig


def plot_client_losses(df: pd.DataFrame, summary: Mapping | None, path: str | Path) -> Path:
    """Running average loss of every client and of the network against t.

    Each client m contributes its running average loss over the steps it was
    present (``client<m>_avg_loss``, else ``client<m>_cum_loss / t``) as a
    thin line, at most :data:`MAX_CLIENTS` clients (the lowest indices; the
    subtitle says when more exist). A client whose table ended before T
    stops at its last step (``summary["client_last_step"]``; for older runs,
    the last step its cumulative loss changed) with a cross; a client with no
    rows has no line and is named in the subtitle, not the legend. The
    network's ``cum_loss / t`` is drawn in bold black. The y-axis holds every
    value from t = 1 on (log scale when they span more than a factor 10). Drift
    is marked as in :func:`plot_regret`.

    Parameters
    ----------
    df : pandas.DataFrame
        Per-step metrics (at least ``t`` and ``cum_loss``; client columns are
        optional).
    summary : dict
        The run summary (``n_clients``, ``client_last_step``, ``config``,
        ``main``).
    path : str or Path
        Output PNG file.

    Returns
    -------
    Path
    """
    return _save(_client_losses_figure(df, summary), path)


def _client_end_steps(df: pd.DataFrame, summary: Mapping, clients: Sequence[tuple[int, str]]) -> dict[int, int]:
    """Last step t each client was present (0: never), from the summary or, for older runs, the metrics."""
    last = summary.get("client_last_step")
    if isinstance(last, (list, tuple)) and clients and len(last) > max(m for m, _ in clients):
        return {m: int(_num(last[m])) if np.isfinite(_num(last[m])) else 0 for m, _ in clients}
    t = df["t"].to_numpy()
    out = {}
    for m, col in clients:
        moved = np.flatnonzero(np.diff(np.r_[0.0, df[col].to_numpy(dtype=float)]) != 0)
        out[m] = int(t[moved[-1]]) if len(moved) else 0
    return out


def _client_losses_figure(df: pd.DataFrame, summary: Mapping | None) -> Figure:
    _require(df, REQUIRED)
    summary = summary or {}
    units = _loss_units(summary)
    df = df[df["t"] > 0]
    thin = _thin(df)
    t = thin["t"].to_numpy(dtype=float)
    T = float(df["t"].iloc[-1]) if len(df) else 0.0
    clients = _client_columns(df)
    M = len(clients)
    try:
        M = max(M, int(summary.get("n_clients", 0) or 0))
    except (TypeError, ValueError):
        pass
    ends = _client_end_steps(df, summary, clients)
    empty = [m for m, _ in clients if ends[m] == 0]
    with_rows = [(m, c) for m, c in clients if ends[m] > 0]
    shown = with_rows[:MAX_CLIENTS]
    fig = _new_figure()
    ax = fig.add_subplot()
    network = thin["cum_loss"].to_numpy(dtype=float) / t
    palette = colormaps["viridis"]
    individual = len(shown) <= 8
    values = [network]
    ended = []
    for i, (m, col) in enumerate(shown):
        avg = col.replace("_cum_loss", "_avg_loss")
        # clients of real tables can end early: average over the steps each client was present
        y = thin[avg].to_numpy(dtype=float) if avg in thin else thin[col].to_numpy(dtype=float) / t
        end = ends[m]
        keep = t <= end
        tt, yy = t[keep], y[keep]
        at_end = df[df["t"] == end]
        if end < T and len(at_end):      # the exact end point, even when thinning skipped it
            row = at_end.iloc[-1]
            y_end = float(row[avg]) if avg in df else float(row[col]) / end
            tt, yy = np.r_[tt[tt < end], end], np.r_[yy[tt < end], y_end]
            ended.append((end, y_end))
        values.append(yy)
        colour = palette(i / max(1, len(shown) - 1) * 0.9)
        ax.plot(tt, yy, color=colour, linewidth=0.8, alpha=0.75, label=f"client {m}" if individual else None)
        if end < T and len(at_end):
            ax.plot([end], [y_end], linestyle="none", marker="x", color=colour, markersize=7, markeredgewidth=1.6,
                    zorder=6)
    if shown and not individual:
        note = (f"clients (first {len(shown)} of {len(with_rows)} with rows shown)" if len(with_rows) > len(shown)
                else f"clients {shown[0][0]}–{shown[-1][0]}")
        ax.plot([], [], color=palette(0.45), linewidth=0.8, label=note)
    if ended:
        ax.plot([], [], linestyle="none", marker="x", color="0.25", markersize=7, markeredgewidth=1.6,
                label=f"last step of a client whose table ended ({len(ended)} of {len(shown)})")
    ax.plot(t, network, color="black", linewidth=2.4, label="network (weighted mean over clients)", zorder=5)
    finite = np.concatenate(values)
    finite = finite[np.isfinite(finite)]
    if finite.size:                      # every value from t = 1 on: nothing is clipped
        lo, hi = float(finite.min()), float(finite.max())
        if lo > 0 and hi / lo > 10:
            ax.set_yscale("log")
            ax.set_ylim(lo / 1.08, hi * 1.08)
            ax.yaxis.set_major_formatter(_PlainLogFormatter())
            ax.yaxis.set_minor_formatter(_PlainLogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.6)))
        else:
            pad = 0.05 * (hi - lo) if hi > lo else max(abs(hi), 1.0) * 0.1
            ax.set_ylim(lo - pad, hi + pad)
    if len(t):
        lo, hi = float(t.min()), max(float(t.max()), float(t.min()) + 1)
        pad = 0.015 * (hi - lo)          # end crosses at the first or last step stay off the spines
        ax.set_xlim(lo - pad, hi + pad)
        _draw_drift(ax, summary, float(t.min()), float(t.max()))
    ax.set_xlabel("step t")
    ax.set_ylabel(f"running average loss ({units}{', log scale' if ax.get_yscale() == 'log' else ''})")
    _style(ax)
    _legend_below(fig, ax)
    title = f"{_run_name(summary)}: running average loss per client"
    sub = _clients_text(M)
    if not clients:
        sub += "; per-client columns not recorded (output.client_columns: false), network only"
    elif len(with_rows) > len(shown):
        sub += f"; only the first {len(shown)} clients with rows are drawn"
    if empty:
        names = ", ".join(str(m) for m in empty[:8]) + (", …" if len(empty) > 8 else "")
        sub += f"; client{'s' if len(empty) > 1 else ''} {names} had no rows"
    sub += f"; final network average = {_fmt(network[-1] if len(network) else np.nan)} {units}"
    _titles(fig, ax, title, sub)
    return fig


_HET = (
    ("sigma2", "σ²", "gradient noise", "sigma2_mean", r"$\bar{\sigma}^2$", "#1f77b4"),
    ("zeta2", "ζ²", "spatial", "zeta2_mean", r"$\bar{\zeta}^2$", "#ff7f0e"),
    ("K2", "K²", "temporal", "K2_mean", r"$\bar{K}^2$", "#2ca02c"),
)


def plot_heterogeneity(df: pd.DataFrame, summary: Mapping | None, path: str | Path) -> Path:
    """FedSEA's heterogeneity quantities σ_t², ζ_t², K_t² against t.

    Each series is smoothed by a trailing rolling mean over max(1, T/100)
    steps (NaN-aware), drawn on a log-y axis; all-NaN series are skipped and
    series that are identically 0 are listed instead of drawn. The legend
    carries the running means (from ``summary["heterogeneity"]`` when present,
    else the column means), and a text box states FedSEA's regime test
    σ̄²/M ≥ L·K̄² ("parallelisation helps" or not).

    Parameters
    ----------
    df : pandas.DataFrame
        Per-step metrics (``t``, ``cum_loss`` and any of ``sigma2``,
        ``zeta2``, ``K2``).
    summary : dict
        The run summary (``heterogeneity`` with ``sigma2_mean``,
        ``zeta2_mean``, ``K2_mean``, ``L``, ``parallelisation_helps``;
        ``n_clients``).
    path : str or Path
        Output PNG file.

    Returns
    -------
    Path
    """
    return _save(_heterogeneity_figure(df, summary), path)


def _heterogeneity_figure(df: pd.DataFrame, summary: Mapping | None) -> Figure:
    _require(df, REQUIRED)
    summary = summary or {}
    het = summary.get("heterogeneity") if isinstance(summary.get("heterogeneity"), dict) else {}
    T = len(df)
    window = max(1, T // 100)
    fig = _new_figure()
    ax = fig.add_subplot()
    idx = _thin_index(T)
    t = df["t"].to_numpy(dtype=float)[idx]
    means: dict[str, float] = {}
    drawn, zero = 0, []
    for col, sym, what, key, bar, colour in _HET:
        if not _has_data(df, col):
            means[key] = _num(het.get(key))
            continue
        raw = df[col].astype(float)
        finite = raw[np.isfinite(raw)]
        mean = _num(het.get(key))
        if not np.isfinite(mean):
            mean = float(finite.mean())
        means[key] = mean
        smooth = raw.rolling(window, min_periods=1).mean().to_numpy()[idx]
        smooth = np.where(smooth > 0, smooth, np.nan)
        if not np.isfinite(smooth).any():
            zero.append(f"{sym} ≡ 0")
            continue
        ax.plot(t, smooth, color=colour, linewidth=1.6, label=f"{sym} ({what}), mean {bar} = {_fmt(mean)}")
        drawn += 1
    if drawn:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(_PlainLogFormatter())
        ax.yaxis.set_minor_formatter(_PlainLogFormatter(labelOnlyBase=False, minor_thresholds=(1.2, 0.6)))
    else:
        ax.text(0.5, 0.5, "no heterogeneity estimates available", transform=ax.transAxes,
                ha="center", va="center", color="0.4")
    if len(t):
        ax.set_xlim(float(t.min()), max(float(t.max()), float(t.min()) + 1))
        _draw_drift(ax, summary, float(t.min()), float(t.max()))

    # FedSEA's regime test: σ̄²/M ≥ L·K̄².
    try:
        M = int(summary.get("n_clients") or len(_client_columns(df)) or 0)
    except (TypeError, ValueError):
        M = len(_client_columns(df))
    L = _num(het.get("L"))
    s2, k2 = means.get("sigma2_mean", np.nan), means.get("K2_mean", np.nan)
    lhs = s2 / M if M > 0 and np.isfinite(s2) else np.nan
    rhs = L * k2 if np.isfinite(L) and np.isfinite(k2) else np.nan
    if np.isfinite(lhs) and np.isfinite(rhs):
        helps = het.get("parallelisation_helps")
        helps = bool(lhs >= rhs) if helps is None else bool(helps)
        sign = "≥" if lhs >= rhs else "<"
        verdict = "parallelisation helps" if helps else "parallelisation does not help"
    else:
        missing = [name for name, v in (("$\\bar{\\sigma}^2$", s2), ("$\\bar{K}^2$", k2), ("L", L)) if not np.isfinite(v)]
        if not M:
            missing.append("M")
        helps, sign = None, "vs"
        verdict = f"regime undetermined (no estimate of {', '.join(missing)})"
        if not np.isfinite(s2):
            verdict += "\nwithout a known population F, $\\sigma^2$ needs mini-batches of b ≥ 2"
    test = (f"$\\bar{{\\sigma}}^2/M$ = {_fmt(lhs)}  {sign}  $L\\,\\bar{{K}}^2$ = {_fmt(rhs)}"
            f"   (M = {M or 'n/a'}, L = {_fmt(L)})   ⇒ {verdict}")
    if zero:
        test += "\n" + ", ".join(zero) + " throughout (not drawn on the log scale)"
    ax.set_xlabel("step t")
    ax.set_ylabel("squared gradient norm (log scale)")
    _style(ax)
    if not ax.get_legend_handles_labels()[0]:
        ax.plot([], [], linestyle="none", label="(no series to draw)")
    leg = _legend_below(fig, ax, title=test)
    frame = leg.get_frame()
    frame.set_facecolor({True: "#eaf5ea", False: "#f8eded"}.get(helps, "white"))
    frame.set_edgecolor("0.6")
    _titles(fig, ax, f"{_run_name(summary)}: heterogeneity σ², ζ², K²",
            f"rolling mean over {window:,} step{'s' if window > 1 else ''}; "
            "FedSEA: parallelisation helps when $\\bar{\\sigma}^2/M \\geq L\\,\\bar{K}^2$")
    return fig


def render_run(run_dir: str | Path) -> list[Path]:
    """Render every figure of a finished run folder.

    Reads ``metrics.csv`` / ``metrics.parquet`` and ``summary.json`` and
    writes ``plots/regret.png``, ``plots/regret_over_sqrt_t.png``,
    ``plots/client_losses.png`` and ``plots/heterogeneity.png`` inside the
    run folder.

    Parameters
    ----------
    run_dir : str or Path
        The run folder.

    Returns
    -------
    list of Path
        The four PNG files, in the order above.

    Raises
    ------
    FileNotFoundError
        If the metrics or the summary file is missing.
    ValueError
        If a required metrics column is missing.
    """
    run_dir = Path(run_dir)
    df = load_metrics(run_dir)
    summary = load_summary(run_dir)
    out = run_dir / "plots"
    return [
        plot_regret(df, summary, out / "regret.png"),
        plot_regret_over_sqrt_t(df, summary, out / "regret_over_sqrt_t.png"),
        plot_client_losses(df, summary, out / "client_losses.png"),
        plot_heterogeneity(df, summary, out / "heterogeneity.png"),
    ]


# ---------------------------------------------------------------------- sweeps
_METRIC_NAMES = {
    "regret_expected": ("expected regret", "FedSEA eq. (3)"),
    "regret_static": ("static regret", "best fixed in hindsight"),
    "regret_dynamic": ("dynamic regret", "per-step optimum"),
}
#: What each metric measures, for the axis labels of :func:`plot_sweep`.
_METRIC_OF = {
    "regret_expected": "of the clients' models, mean over clients",
    "regret_static": "of the network loss (mean over clients)",
    "regret_dynamic": r"of the average model $\bar{x}_t$",
}
_LINESTYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 1)))
_MARKERS = ("o", "s", "^", "D", "v", "P")


def plot_sweep(rows: Sequence[Mapping], path: str | Path, metric: str = "regret_expected") -> Path:
    """Compare the regret of runs that differ in the number of clients M.

    Left panel: the regret curves against t, coloured by M (log colour scale)
    with one line style per ``label``. Right panel: the final regret against
    M (log2 x axis), one line per ``label``. Values are plotted as the tracker
    computes them, and the axis labels say what that is: the static and
    expected regrets weigh every client's loss by 1/M (the network loss),
    the dynamic regret is that of the average model x̄_t. A dotted ∝ 1/√M
    guide is added when the values are positive.

    Parameters
    ----------
    rows : list of dict
        One dict per run with ``label`` (str, e.g. ``"mild drift"``), ``M``
        (int), ``t`` (ndarray of steps), ``regret`` (ndarray, same length as
        ``t``) and ``final`` (float).
    path : str or Path
        Output PNG file.
    metric : str
        Which regret the rows hold, for the axis labels (``regret_expected``,
        ``regret_static`` or ``regret_dynamic``).

    Returns
    -------
    Path

    Raises
    ------
    ValueError
        If ``rows`` is empty, a row misses a key, or ``t`` and ``regret``
        differ in length.
    """
    return _save(_sweep_figure(rows, metric), path)


def _sweep_figure(rows: Sequence[Mapping], metric: str) -> Figure:
    if not rows:
        raise ValueError("plot_sweep needs at least one row.")
    for i, r in enumerate(rows):
        missing = [k for k in ("label", "M", "t", "regret", "final") if k not in r]
        if missing:
            raise ValueError(f"Row {i} of the sweep is missing the key {missing[0]!r}.")
        if len(np.asarray(r["t"])) != len(np.asarray(r["regret"])):
            raise ValueError(f"Row {i} of the sweep: 't' and 'regret' differ in length "
                             f"({len(np.asarray(r['t']))} vs {len(np.asarray(r['regret']))}).")
    name, detail = _METRIC_NAMES.get(metric, (metric.replace("_", " "), ""))
    labels = list(dict.fromkeys(str(r["label"]) for r in rows))
    Ms = sorted({int(r["M"]) for r in rows})
    style = {lab: _LINESTYLES[i % len(_LINESTYLES)] for i, lab in enumerate(labels)}
    marker = {lab: _MARKERS[i % len(_MARKERS)] for i, lab in enumerate(labels)}
    cmap = ListedColormap(colormaps["viridis"](np.linspace(0.0, 0.88, 256)), name="viridis_trunc")
    norm = LogNorm(vmin=Ms[0], vmax=Ms[-1]) if len(Ms) > 1 and Ms[0] > 0 else Normalize(vmin=Ms[0] - 1, vmax=Ms[-1] + 1)

    def colour(M):
        return cmap(norm(M))

    fig = _new_figure(figsize=(12.5, 5.2))
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.35, 1]})
    for r in sorted(rows, key=lambda r: (labels.index(str(r["label"])), int(r["M"]))):
        t = np.asarray(r["t"], dtype=float)
        y = np.asarray(r["regret"], dtype=float)
        idx = _thin_index(len(t))
        left.plot(t[idx], y[idx], color=colour(int(r["M"])), linestyle=style[str(r["label"])], linewidth=1.5)
    left.axhline(0.0, color="0.55", linewidth=0.8, zorder=1)
    left.set_xlabel("step t")
    left.set_ylabel(f"{name} $R_t$ {_METRIC_OF.get(metric, '')} (loss units)".replace("  ", " "), fontsize=9.5)
    left.set_title(f"{name}{' [' + detail + ']' if detail else ''} over time", fontsize=10)
    _style(left)
    bar = fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=left, pad=0.01, aspect=30)
    bar.set_label("number of clients M", fontsize=9)
    bar.set_ticks(Ms, labels=[str(M) for M in Ms])
    bar.ax.minorticks_off()
    bar.ax.tick_params(labelsize=8.5)
    handles = [Line2D([], [], color="0.2", linestyle=style[lab], linewidth=1.5, label=lab) for lab in labels]
    left.legend(handles=handles, title="setting", title_fontsize=8.5, fontsize=8.5, loc="upper left",
                framealpha=0.9)

    finals_all = []
    for lab in labels:
        pts = sorted((int(r["M"]), _num(r["final"])) for r in rows if str(r["label"]) == lab)
        pts = [(m, v) for m, v in pts if np.isfinite(v)]
        if not pts:
            continue
        m, v = np.array(pts, dtype=float).T
        finals_all.extend(v)
        right.plot(m, v, color="0.15", linestyle=style[lab], marker=marker[lab], markersize=6,
                   markerfacecolor="white", linewidth=1.5, label=lab, zorder=3)
        right.scatter(m, v, c=[colour(int(x)) for x in m], marker=marker[lab], s=30, zorder=4)
    finals_all = np.asarray(finals_all, dtype=float)
    if finals_all.size and (finals_all > 0).all():
        right.set_yscale("log")
        plain = FuncFormatter(lambda v, _: f"{v:g}")
        right.yaxis.set_major_formatter(plain)
        right.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if str(f"{v:g}")[0] in "2357" else ""))
        if len(Ms) > 1 and Ms[0] > 0:
            ref_M = np.geomspace(Ms[0], Ms[-1], 50)
            ref = float(np.max(finals_all)) * np.sqrt(Ms[0] / ref_M)
            right.plot(ref_M, ref, color="0.5", linestyle=":", linewidth=1.2, label="∝ 1/√M guide", zorder=2)
    else:
        right.axhline(0.0, color="0.55", linewidth=0.8, zorder=1)
    if Ms[0] > 0:
        right.set_xscale("log", base=2)
        right.set_xticks(Ms, [str(M) for M in Ms])
        right.xaxis.set_minor_locator(NullLocator())
    right.set_xlabel("number of clients M (log₂ scale)")
    right.set_ylabel(f"final {name} $R_T$ {_METRIC_OF.get(metric, '')} (loss units)".replace("  ", " "),
                     fontsize=9.5)
    right.set_title(f"final {name} vs M", fontsize=10)
    _style(right)
    right.tick_params(which="minor", labelsize=8, colors="0.35")
    if right.get_legend_handles_labels()[0]:
        right.legend(fontsize=8.5, loc="best", framealpha=0.9)
    fig.suptitle("Benefit of parallelisation: regret vs number of clients M", fontsize=12.5, fontweight="bold")
    return fig


SWEEP_METRICS = ("regret_expected", "regret_static", "regret_dynamic")


def render_sweep(sweep_dir: str | Path) -> Path:
    """Render ``sweep.png`` of a sweep folder from its files.

    Reads ``sweep.csv`` (one row per run: ``run`` folder name, ``label``,
    ``M`` and the final value of the swept metric, one of
    ``regret_expected``, ``regret_static``, ``regret_dynamic``) and, for the
    curves, the metric column of each run's metrics file.

    Parameters
    ----------
    sweep_dir : str or Path
        The sweep folder written by ``streamfl run`` with a ``sweep:`` config.

    Returns
    -------
    Path
        ``<sweep_dir>/sweep.png``.

    Raises
    ------
    FileNotFoundError
        If ``sweep.csv`` or a run's metrics file is missing.
    ValueError
        If ``sweep.csv`` lacks a column (``run``, ``label``, ``M``, a metric).
    """
    sweep_dir = Path(sweep_dir)
    path = sweep_dir / "sweep.csv"
    if not path.is_file():
        raise FileNotFoundError(f"No 'sweep.csv' in the sweep folder {str(sweep_dir)!r}.")
    table = pd.read_csv(path)
    metric = next((m for m in SWEEP_METRICS if m in table.columns), None)
    _require(table, ("run", "label", "M") + ((metric,) if metric else ("regret_static",)), source=str(path))
    rows = []
    for rec in table.to_dict("records"):
        df = load_metrics(sweep_dir / str(rec["run"]), columns=[metric])
        rows.append({"label": str(rec["label"]), "M": int(rec["M"]), "t": df["t"].to_numpy(),
                     "regret": df[metric].to_numpy(dtype=float), "final": _num(rec[metric])})
    return plot_sweep(rows, sweep_dir / "sweep.png", metric=metric)
