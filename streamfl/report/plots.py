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
* ``heterogeneity.png`` — σ_t² (at the played points and at the comparator),
  ζ_t², K_t² (rolling means) and the two sides of the regime condition
  (:mod:`streamfl.regret.regime`), in loss units;
* ``decomposition.png`` — FedSEA Lemma 1: the regret of the virtual average
  plus the consensus part, and the bound's (L/2)·consensus term;
* ``client_regret.png`` — per-client regret for every comparator, with the
  clients' spread.

A seeds run (:mod:`streamfl.runtime.seeds`) has ``<column>_lo``/``_hi``
columns; every curve that has them gets a shaded 95 % t-interval band.

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

from .labels import main_label  # noqa: F401  (re-exported: plots and the CLI name the main learner alike)

__all__ = [
    "MAX_POINTS",
    "MAX_CLIENTS",
    "load_metrics",
    "load_summary",
    "plot_regret",
    "plot_regret_over_sqrt_t",
    "plot_client_losses",
    "plot_heterogeneity",
    "plot_decomposition",
    "plot_client_regret",
    "plot_sweep",
    "plot_regime_agreement",
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
    ("regret_concept", "vs the generator's true concept (w*, b*)", "#e6ab02"),     # sparse_logistic runs
)
_BASELINE_COLOURS = ("#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
_CLIENT_RE = re.compile(r"^client(\d+)_cum_loss$")


# ---------------------------------------------------------------------- loading
def _metric_names(run_dir: Path) -> list[str]:
    """Column names of a run folder's metrics file (header only), or [] when it has none."""
    csv, pq = run_dir / "metrics.csv", run_dir / "metrics.parquet"
    if csv.is_file():
        return list(pd.read_csv(csv, nrows=0).columns)
    if pq.is_file():
        import pyarrow.parquet as papq
        return list(papq.read_schema(pq).names)
    return []


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
    if (summary or {}).get("model") in ("gmf", "sparse_logistic"):
        main = main_label(summary)
    return f"{name} ({main})" if name else str(main)


def _main_label(summary: Mapping | None) -> str:
    """The main learner as readers know it ('FedSEA' for the learner named fedsea)."""
    main = str((summary or {}).get("main") or "main learner")
    if (summary or {}).get("model") == "sparse_logistic":
        return "FedSubAvg" if summary.get("rule", "fedsubavg") == "fedsubavg" else "FedAvg"
    return "FedSEA" if main == "fedsea" else main


def _loss_units(summary: Mapping | None) -> str:
    """'nats' for log-loss tasks when the config says so, else 'loss units'."""
    cfg = _config(summary)
    source = cfg.get("source") if isinstance(cfg.get("source"), dict) else {}
    task = cfg.get("task") or source.get("task") or (summary or {}).get("task")
    return "nats" if task in ("logistic", "softmax") else "loss units"


def _baselines(df: pd.DataFrame) -> list[str]:
    """Baseline names found as ``gap_<name>`` columns (known names first); a seeds run's interval columns
    ``gap_<name>_lo``/``_hi`` are bands of ``gap_<name>``, not baselines."""
    cols = set(df.columns)
    names = [c[len("gap_"):] for c in df.columns if c.startswith("gap_")
             and not (c.endswith(("_lo", "_hi")) and c[:-3] in cols)]
    return sorted(names, key=lambda b: (BASELINES.index(b) if b in BASELINES else len(BASELINES), b))


def _client_columns(df: pd.DataFrame) -> list[tuple[int, str]]:
    found = [(int(m.group(1)), c) for c in df.columns if (m := _CLIENT_RE.match(c))]
    return sorted(found)


def _abrupt_steps(summary: Mapping | None) -> list[int]:
    """Steps t (counted from 1, as metrics.csv's t) at which an abrupt drift switch takes effect.

    The config's ``source.drift`` items look like ``{"kind": "abrupt",
    "at": [...]}`` with steps counted from 1 (see :class:`~streamfl.generators.
    schedules.Abrupt`): the new distribution is first seen at t = at.
    Anything malformed is ignored.

    >>> _abrupt_steps({"config": {"source": {"drift": [{"kind": "abrupt", "at": [1200]}]}}})
    [1200]
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
                steps.add(int(v))
    return sorted(steps)


_INJECTED_COLOURS = {"covariate_rotation": "#9467bd", "covariate_scale": "#17becf", "label_flip": "#d62728"}


def _injected_windows(summary: Mapping | None) -> list[tuple[float, float | None, str, str]]:
    """Injected drift of the config's ``source.inject``, as windows of steps t (counted from 1).

    Returns a list of ``(first t, last t or None for "to the end", legend
    label, kind)``. Injector steps count from 1, as metrics.csv's t (see
    :mod:`streamfl.generators.inject`): a covariate rotation or scale ramps
    from step ``start`` to step ``end`` (a switch when ``end`` is missing or
    equal) and is then held; a label flip acts on ``start ≤ t < end`` (to the
    end when ``end`` is missing). Anything malformed is ignored.

    >>> _injected_windows({"config": {"source": {"inject": [{"kind": "label_flip", "start": 4500, "fraction": 0.25}]}}})
    [(4500.0, None, 'injected label flip (25% of labels), t ≥ 4,500', 'label_flip')]
    >>> _injected_windows({"config": {"source": {"inject": [{"kind": "label_flip", "start": 10, "end": 20}]}}})[0][:3]
    (10.0, 19.0, 'injected label flip (all labels), t = 10–19')
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
        lo = start
        if kind in ("covariate_rotation", "covariate_scale"):
            hi = end if np.isfinite(end) else lo
            what = (f"rotation {_fmt(item.get('angle'))} rad" if kind == "covariate_rotation"
                    else f"scale ×{_fmt(item.get('factor'))}")
            when = f"at t = {int(lo):,}" if hi <= lo else f"t = {int(lo):,}–{int(hi):,}"
            out.append((lo, max(hi, lo), f"injected covariate {what}, {when} then held", kind))
        elif kind == "label_flip":
            hi = end - 1 if np.isfinite(end) else None                # the last flipped step
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
    ax.tick_params(which="both", labelsize=9)   # minor labels (log axes) the same size as major ones
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


def _live_note(df: pd.DataFrame, col: str) -> str:
    """Legend note for the live static estimate, with its first step when it starts late (warm-up).

    >>> _live_note(pd.DataFrame({"t": [1, 2, 3], "r": [np.nan, np.nan, 0.5]}), "r")
    ' (live estimate, from t = 3)'
    """
    y = df[col].to_numpy(dtype=float)
    t = df["t"].to_numpy()
    ok = np.flatnonzero(np.isfinite(y))
    if len(ok) and ok[0] > 0:
        return f" (live estimate, from t = {int(t[ok[0]]):,})"
    return " (live estimate)"


def _exact_label(summary: Mapping) -> str:
    """Legend label of the exact static checkpoints (the curve itself is exact for least squares)."""
    if "sufficient statistics" in str(summary.get("regret_static_method", "")):
        return "static, exact at checkpoints"
    return "static, exact (checkpoints and T)"


def _with_live_static(df: pd.DataFrame) -> pd.DataFrame:
    """The frame with the static regret to draw as a curve under ``regret_static``: the live estimate.

    Since metrics.csv carries the exact static regret only where it is known (``regret_static``, NaN
    elsewhere) and the live estimate at every step (``regret_static_live``, with a seeds run's
    ``_lo``/``_hi``), the curves follow the live estimate; the exact values are the markers of
    ``static_checkpoints``, and the certified interval (``regret_static_lower`` … ``_upper``) is shaded by
    :func:`_bound_band`. Frames of older runs (no live column) are returned as they are.
    """
    if "regret_static_live" not in df:
        return df
    out = df.drop(columns=[c for c in ("regret_static", "regret_static_lo", "regret_static_hi") if c in df])
    return out.rename(columns={"regret_static_live": "regret_static", "regret_static_live_lo": "regret_static_lo",
                               "regret_static_live_hi": "regret_static_hi"})


def _bound_band(ax, thin: pd.DataFrame, colour, t: np.ndarray, divide: np.ndarray | float = 1.0) -> bool:
    """Hatch the live static estimate's certified interval (``regret_static_lower`` … ``_upper``) where it is
    wider than the line (at least 0.2 % of the curve's range)."""
    if not (_has_data(thin, "regret_static_lower") and _has_data(thin, "regret_static_upper")):
        return False
    lo = thin["regret_static_lower"].to_numpy(dtype=float) / divide
    hi = thin["regret_static_upper"].to_numpy(dtype=float) / divide
    span = float(np.nanmax(hi) - np.nanmin(lo)) if np.isfinite(hi).any() else 0.0
    if not np.any(hi - lo > 2e-3 * max(span, 1e-300)):
        return False
    ax.fill_between(t, lo, hi, facecolor="none", edgecolor=colour, hatch="////", linewidth=0, alpha=0.5, zorder=2,
                    label="static: certified interval of the live estimate")
    return True


def _band(ax, thin: pd.DataFrame, col: str, colour, t: np.ndarray, divide: np.ndarray | float = 1.0) -> bool:
    """Shade ``<col>_lo`` … ``<col>_hi`` (a seeds run's 95 % t-interval) when the columns exist."""
    lo, hi = f"{col}_lo", f"{col}_hi"
    if not (_has_data(thin, lo) and _has_data(thin, hi)):
        return False
    ax.fill_between(t, thin[lo].to_numpy(dtype=float) / divide, thin[hi].to_numpy(dtype=float) / divide,
                    color=colour, alpha=0.18, linewidth=0, zorder=2)
    return True


def _seeds_note(summary: Mapping | None) -> str:
    """'; shaded: 95 % t-interval over N seeds' for a seeds run, else ''."""
    seeds = (summary or {}).get("seeds")
    return f"; mean of {len(seeds)} seeds, shaded: 95 % t-interval" if isinstance(seeds, list) and seeds else ""


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
    df = _with_live_static(df)
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
            label += _live_note(df, col)
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
        _band(top, thin, col, colour, t)
        if col == "regret_static":
            _bound_band(top, thin, colour, t)
    if len(ck_t):
        top.plot(ck_t, ck_r, linestyle="none", marker="o", markersize=5.5, markerfacecolor="white",
                 markeredgecolor="#1f77b4", markeredgewidth=1.6, label=_exact_label(summary), zorder=4,
                 clip_on=False)  # the points at t = 1 and T sit on the axes' edges
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
            _band(bottom, thin, f"gap_{b}", colour, t)         # a seeds run: the 95 % t-interval
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
    sub += _seeds_note(summary)
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
    df = _with_live_static(df)
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
            label += _live_note(df, col)
        ax.plot(t, thin[col].to_numpy(dtype=float) / root, color=colour, linewidth=1.8, label=label)
        _band(ax, thin, col, colour, t, root)
        if col == "regret_static":
            _bound_band(ax, thin, colour, t, root)
        drawn += 1
    if len(ck_t):
        ax.plot(ck_t, ck_r / np.sqrt(ck_t), linestyle="none", marker="o", markersize=5.5, markerfacecolor="white",
                markeredgecolor="#1f77b4", markeredgewidth=1.6, label=_exact_label(summary), zorder=4,
                 clip_on=False)  # the points at t = 1 and T sit on the axes' edges
        drawn += 1
    if len(t):
        _draw_drift(ax, summary, float(t.min()), float(t.max()))
        ax.set_xscale("log")
        ax.set_xlim(max(1.0, float(t.min())), max(float(t.max()), float(t.min()) * 1.01 + 1))
        # plain step numbers, and labelled minor ticks when the run spans few decades (T = 75: 1, 10 only)
        ax.xaxis.set_major_formatter(_PlainLogFormatter())
        ax.xaxis.set_minor_formatter(_PlainLogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.6)))
    if not drawn:
        ax.text(0.5, 0.5, "no regret series available", transform=ax.transAxes,
                ha="center", va="center", color="0.4")
    ax.set_xlabel("step t (log scale)")
    ax.set_ylabel(f"regret / √t ({units} per √step)")
    _style(ax)
    _legend_below(fig, ax)
    _titles(fig, ax, f"{_run_name(summary)}: regret / √t  (flat ⇒ O(√T) regret)",
            "a falling curve means regret grows slower than √T; a rising one, faster" + _seeds_note(summary))
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
        colour = palette(i / max(1, len(shown) - 1) * 0.9 if len(shown) > 1 else 0.55)  # a lone client: not near black
        # a client equal to the network at every step it played (M = 1) would hide under the black line:
        # draw it on top and say so in the legend
        net_here = network[keep]
        same = (len(net_here) == len(y[keep]) and len(net_here) > 0
                and bool(np.allclose(y[keep], net_here, rtol=1e-9, atol=0.0, equal_nan=True)))
        label = (f"client {m}" + (", identical to the network" if same else "")) if individual else None
        ax.plot(tt, yy, color=colour, linewidth=0.8 if not same else 1.2, alpha=0.75 if not same else 1.0,
                label=label, zorder=6 if same else 2)
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
        capped = (summary.get("client_columns") or {}).get("note") is not None
        sub += ("; per-client columns not recorded (M > output.client_columns_max), network only" if capped else
                "; per-client columns not recorded (output.client_columns: false), network only")
    elif len(with_rows) > len(shown):
        sub += f"; only the first {len(shown)} clients with rows are drawn"
    if empty:
        names = ", ".join(str(m) for m in empty[:8]) + (", …" if len(empty) > 8 else "")
        sub += f"; client{'s' if len(empty) > 1 else ''} {names} had no rows"
    sub += f"; final network average = {_fmt(network[-1] if len(network) else np.nan)} {units}"
    _titles(fig, ax, title, sub)
    return fig


_HET = (
    ("sigma2", "σ²", "gradient noise at the played points", "sigma2_mean", r"$\bar{\sigma}^2$", "#1f77b4"),
    ("sigma2_comparator", "σ²(u)", "gradient noise at the comparator", "sigma2_comparator_mean",
     r"$\bar{\sigma}^2(u)$", "#17becf"),
    ("zeta2", "ζ²", "spatial", "zeta2_mean", r"$\bar{\zeta}^2$", "#ff7f0e"),
    ("K2", "K²", "temporal", "K2_mean", r"$\bar{K}^2$", "#2ca02c"),
)


def _holds_text(holds: Any) -> str:
    """A condition's outcome in words: 'True', 'False', or 'undetermined' (None: a side could not be estimated).

    >>> _holds_text(None), _holds_text(True)
    ('undetermined', 'True')
    """
    return "undetermined" if holds is None else str(bool(holds))


def _verdict(regime: Mapping) -> tuple[bool | None, str]:
    helps = regime.get("parallelisation_helps")
    if helps is None:
        why = regime.get("reason") or "missing estimates"
        return None, f"regime undetermined ({why})"
    return bool(helps), "parallelisation helps" if helps else "parallelisation does not help"


def plot_heterogeneity(df: pd.DataFrame, summary: Mapping | None, path: str | Path) -> Path:
    """FedSEA's heterogeneity quantities and the regime condition against t.

    Top panel: σ_t² at the played points and at the comparator, ζ_t², K_t²
    (squared gradient units), each smoothed by a trailing rolling mean over
    max(1, T/100) steps (NaN-aware) on a log-y axis; non-positive values
    (empirical estimates are unbiased and may be negative) are not drawn;
    series that are identically 0 are listed instead of drawn. The legend
    carries the running means ± standard error (from
    ``summary["heterogeneity"]`` when present, else the column means).

    Bottom panel (when the run has the ``regime_noise`` and
    ``regime_temporal`` columns): the two sides of the regime condition,
    cumulative and in loss units — the noise term Σ η σ²/(2M(2 − ηℓ)) and
    the temporal term Σ K²/(2ηℓ²(2 − ηℓ)) (:mod:`streamfl.regret.regime`) —
    with the verdict: parallelisation helps when the noise term is at least
    the temporal term, undetermined (with the reason) when it cannot be
    evaluated; the transient P = D²/(2η(2 − ηℓ)) is drawn as a level and
    added to the temporal side. Seeds runs draw 95 % t-interval bands.

    Parameters
    ----------
    df : pandas.DataFrame
        Per-step metrics (``t``, ``cum_loss`` and any of ``sigma2``,
        ``sigma2_comparator``, ``zeta2``, ``K2``, ``regime_noise``,
        ``regime_temporal``).
    summary : dict
        The run summary (``heterogeneity`` with the means, standard errors,
        ``L`` and ``regime``; ``n_clients``).
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
    regime = het.get("regime") if isinstance(het.get("regime"), dict) else {}
    units = _loss_units(summary)
    T = len(df)
    window = max(1, T // 100)
    has_regime = _has_data(df, "regime_noise") or _has_data(df, "regime_temporal")
    fig = _new_figure(figsize=(8.0, 7.4) if has_regime else FIGSIZE)
    if has_regime:
        ax, ax2 = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [1.25, 1]})
    else:
        ax, ax2 = fig.add_subplot(), None
    idx = _thin_index(T)
    t = df["t"].to_numpy(dtype=float)[idx]
    drawn, zero = 0, []
    for col, sym, what, key, bar, colour in _HET:
        if not _has_data(df, col):
            continue
        raw = df[col].astype(float)
        finite = raw[np.isfinite(raw)]
        mean = _num(het.get(key))
        if not np.isfinite(mean):
            mean = float(finite.mean())
        se = _num(het.get(key.replace("_mean", "_se")))
        # a series recorded at some steps only (σ² once per chunk/round) is drawn through its own points:
        # smoothing it on the step grid left two-step fragments that read as a dashed line
        known = raw.notna().to_numpy()
        sparse = known.sum() < 0.5 * T
        if sparse:
            pts = raw[known]
            sel = _thin_index(len(pts))
            tt = df["t"].to_numpy(dtype=float)[known][sel]
            w = max(1, int(round(window * len(pts) / max(T, 1))))
            smooth = pts.rolling(w, min_periods=1).mean().to_numpy()[sel]
        else:
            tt = t
            smooth = raw.rolling(window, min_periods=1).mean().to_numpy()[idx]
        smooth = np.where(smooth > 0, smooth, np.nan)
        if not np.isfinite(smooth).any():
            zero.append(f"{sym} ≡ 0" if np.allclose(finite, 0) else f"{sym} ≤ 0 (mean {_fmt(mean)})")
            continue
        shown = f"{_fmt(max(mean, 0.0))}" + (f" ± {_fmt(se)}" if np.isfinite(se) else "")
        ax.plot(tt, smooth, color=colour, linewidth=1.6, label=f"{sym} ({what}), {bar} = {shown}")
        lo, hi = f"{col}_lo", f"{col}_hi"
        if _has_data(df, lo) and _has_data(df, hi):
            if sparse:
                blo = df[lo].astype(float)[known].rolling(w, min_periods=1).mean().to_numpy()[sel]
                bhi = df[hi].astype(float)[known].rolling(w, min_periods=1).mean().to_numpy()[sel]
            else:
                blo = df[lo].astype(float).rolling(window, min_periods=1).mean().to_numpy()[idx]
                bhi = df[hi].astype(float).rolling(window, min_periods=1).mean().to_numpy()[idx]
            ax.fill_between(tt, np.where(blo > 0, blo, np.nan), np.where(bhi > 0, bhi, np.nan),
                            color=colour, alpha=0.18, linewidth=0)
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
    ax.set_ylabel("squared gradient norm\n(loss² per model unit², log)")
    _style(ax)
    if zero:                             # in the legend: free text in the panel ran over the curves
        ax.plot([], [], linestyle="none", label=", ".join(zero) + " (not drawn on the log scale)")
    if ax.get_legend_handles_labels()[0] and ax2 is not None:
        ax.legend(fontsize=7.6, loc="best", framealpha=0.9)

    helps, verdict = _verdict(regime)
    N, V, P = _num(regime.get("noise_term")), _num(regime.get("temporal_term")), _num(regime.get("transient_term"))
    if np.isfinite(N) and np.isfinite(V):
        rest = V + (P if np.isfinite(P) else 0.0)
        sign = "≥" if N >= rest else "<"

        def pm(x, key):
            se = _num(regime.get(key))
            return _fmt(x) + (f" ± {_fmt(se)}" if np.isfinite(se) and het.get("estimator", "").startswith("emp")
                              else "")
        test = (f"noise term N = {pm(N, 'noise_term_se')}  {sign}  temporal V = {pm(V, 'temporal_term_se')}"
                f" + transient P = {_fmt(P)} ({units})\n⇒  {verdict}\n"
                f"(M = {summary.get('n_clients', 'n/a')}, curvature ℓ = {_fmt(regime.get('curvature'))} {units} "
                f"per model unit², σ² at the {regime.get('sigma2_used', 'n/a')})")
    else:
        test = f"⇒ {verdict}"
    lit = het.get("literal") if isinstance(het.get("literal"), dict) else {}
    if lit:
        test += (f"\nFedSEA's σ̄²/M ≥ L·K̄² read literally (not unit-invariant): "
                 f"{_fmt(lit.get('lhs'))} vs {_fmt(lit.get('rhs'))} ⇒ {_holds_text(lit.get('holds'))}")
    if ax2 is not None:
        tt = df["t"].to_numpy(dtype=float)
        for col, label, colour in (("regime_noise", "noise term N_t = Σ η σ²/(2M(2 − ηℓ))  (÷ M by averaging)", "#1f77b4"),
                                   ("regime_temporal", "temporal term V_t = Σ K²/(2ηℓ²(2 − ηℓ))  (not improved by averaging)", "#2ca02c")):
            if not _has_data(df, col):
                continue
            y = df[col].to_numpy(dtype=float)
            if not np.any(y[np.isfinite(y)] > 0):
                label += f"  (≤ 0 here, not drawn on the log scale: {_fmt(y[np.isfinite(y)][-1])})"
            ax2.plot(tt[idx], y[idx], color=colour, linewidth=1.7, label=label)
            _band(ax2, df.iloc[idx], col, colour, tt[idx])
        if np.isfinite(P) and P > 0:
            ax2.axhline(P, color="#7f7f7f", linestyle="--", linewidth=1.1,
                        label="transient P = D²/(2η(2 − ηℓ))  (reaching the first optimum; no M)")
        vals = np.concatenate([df[c].to_numpy(dtype=float) for c in ("regime_noise", "regime_temporal") if c in df])
        if np.any(vals > 0):
            ax2.set_yscale("log")
            ax2.yaxis.set_major_formatter(_PlainLogFormatter())
        if len(t):
            _draw_drift(ax2, summary, float(t.min()), float(t.max()), legend=False)
        ax2.set_ylabel(f"cumulative bound term\n({units})")
        ax2.set_xlabel("step t")
        _style(ax2)
    else:
        ax.set_xlabel("step t")
    leg_ax = ax2 if ax2 is not None else ax
    if not leg_ax.get_legend_handles_labels()[0]:
        leg_ax.plot([], [], linestyle="none", label="(no series to draw)")
    leg = _legend_below(fig, leg_ax, title=test, ncol=1)
    frame = leg.get_frame()
    frame.set_facecolor({True: "#eaf5ea", False: "#f8eded"}.get(helps, "white"))
    frame.set_edgecolor("0.6")
    _titles(fig, ax, f"{_run_name(summary)}: heterogeneity σ², ζ², K² and the regime condition",
            f"rolling mean over {window:,} step{'s' if window > 1 else ''}; {het.get('estimator', '')}"
            f"{_seeds_note(summary)}")
    return fig


_DECOMP = (
    # column, label, colour, style
    ("regret_expected", "expected regret of the played models, eq. (3)", "#d62728", "-"),
    ("regret_expected_virtual", "virtual average x̄_t (Lemma 1, first term)", "#9467bd", "-"),
    ("consensus_part_expected", "consensus part Σ c[F(x_m) − F(x̄)] (exact)", "#8c564b", "-"),
    ("consensus_bound", "bound's weight (L/2)·Σ (1/M)Σ‖x_m − x̄‖²", "#8c564b", "--"),
)


def plot_decomposition(df: pd.DataFrame, summary: Mapping | None, path: str | Path) -> Path:
    """FedSEA Lemma 1's split of the regret: virtual average plus consensus.

    Draws the regret of the played models, that of the virtual average
    x̄_t (``regret_expected_virtual``; ``regret_static_virtual`` on real data,
    where F is unknown and the realised losses are used), their exact
    difference in the same basis (``consensus_part_expected``,
    ``consensus_part_static``; the two curves add up to the regret's) and the
    bound's consensus term (L/2) Σ C_t
    with C_t = Σ_m c_{t,m} ‖x_{t,m} − x̄_t‖² (``cum_consensus`` × L/2, L from
    the summary). Seeds runs draw 95 % t-interval bands.

    Parameters
    ----------
    df : pandas.DataFrame
        Per-step metrics.
    summary : dict
        The run summary (``heterogeneity.L``, ``decomposition``).
    path : str or Path

    Returns
    -------
    Path
    """
    return _save(_decomposition_figure(df, summary), path)


def _decomposition_figure(df: pd.DataFrame, summary: Mapping | None) -> Figure:
    _require(df, REQUIRED)
    df = _with_live_static(df)
    summary = summary or {}
    units = _loss_units(summary)
    thin = _thin(df).copy()
    t = thin["t"].to_numpy(dtype=float)
    het = summary.get("heterogeneity") if isinstance(summary.get("heterogeneity"), dict) else {}
    L = _num(het.get("L"))
    decomp = summary.get("decomposition") if isinstance(summary.get("decomposition"), dict) else {}
    # decomposition.expected: this tree's summaries; basis: earlier ones (one basis, one consensus_part column)
    population = (_has_data(thin, "regret_expected_virtual") or isinstance(decomp.get("expected"), dict)
                  or decomp.get("basis") == "population F")
    for suffix in ("", "_lo", "_hi"):       # a run folder written before the parts were named by their basis
        old, new = f"consensus_part{suffix}", f"consensus_part_{'expected' if population else 'static'}{suffix}"
        if old in thin and new not in thin:
            thin[new] = thin[old]
    marks = np.asarray([[_num(v) for v in row] for row in summary.get("expected_checkpoints") or []
                        if isinstance(row, (list, tuple)) and len(row) == 3], dtype=float).reshape(-1, 3)
    if "cum_consensus" in thin and np.isfinite(L):
        for suffix in ("", "_lo", "_hi"):
            if f"cum_consensus{suffix}" in thin:
                thin[f"consensus_bound{suffix}"] = 0.5 * L * thin[f"cum_consensus{suffix}"].astype(float)
    rows = _DECOMP if population else (
        ("regret_static", "static regret of the played models", "#1f77b4", "-"),
        ("regret_static_virtual", "virtual average x̄_t (Lemma 1, first term)", "#9467bd", "-"),
        ("consensus_part_static", "consensus part Σ c[f(x_m, ξ) − f(x̄, ξ)] (realised)", "#8c564b", "-"),
        ("consensus_bound", "bound's weight (L/2)·Σ (1/M)Σ‖x_m − x̄‖²", "#8c564b", "--"))
    fig = _new_figure()
    ax = fig.add_subplot()
    ax.axhline(0.0, color="0.55", linewidth=0.8, zorder=1)
    drawn = 0
    present = [(col, label, colour, style) for col, label, colour, style in rows if _has_data(thin, col)]
    series = [(col, thin[col].to_numpy(dtype=float)) for col, *_ in present]
    notes = _coincidences(series, _span([y for _, y in series]))
    names = {"regret_static": "static regret", "regret_expected": "expected regret",
             "regret_static_virtual": "virtual average", "regret_expected_virtual": "virtual average",
             "consensus_part_static": "consensus part", "consensus_part_expected": "consensus part",
             "consensus_bound": "bound's weight"}
    live = (not population and len(_checkpoints(summary)[0])
            and "sufficient statistics" not in str(summary.get("regret_static_method", "")))
    for (col, label, colour, style), (_, y) in zip(present, series):
        if col == "regret_static" and live:
            label += _live_note(df, col)
        text = f"{label}: {_fmt(y[-1])}"
        if col in notes:
            other, note = notes[col]
            text += "; " + note.replace(other, names[other])
        ax.plot(t, y, color=colour, linestyle=style if col not in notes else (0, (4, 3)),
                linewidth=1.7 if col not in notes else 2.4, label=text, zorder=3 if col in notes else 2)
        _band(ax, thin, col, colour, t)
        drawn += 1
    if population and not _has_data(thin, "regret_expected") and len(marks):
        # logistic: the eq. (3) comparator is solved at the end, on the checkpoint grid
        for j, (label, colour) in enumerate((("expected regret of the played models, eq. (3)", "#d62728"),
                                             ("virtual average x̄_t (Lemma 1, first term)", "#9467bd")), start=1):
            ax.plot(marks[:, 0], marks[:, j], color=colour, linestyle=":", linewidth=1.0, marker="o", markersize=4.5,
                    markerfacecolor="white", markeredgecolor=colour,
                    label=f"{label}, exact at checkpoints: {_fmt(marks[-1, j])}", clip_on=False)
            drawn += 1
    if not drawn:
        ax.text(0.5, 0.5, "no decomposition columns in this run", transform=ax.transAxes,
                ha="center", va="center", color="0.4")
    if len(t):
        ax.set_xlim(float(t.min()), max(float(t.max()), float(t.min()) + 1))
        _draw_drift(ax, summary, float(t.min()), float(t.max()))
    ax.set_xlabel("step t")
    ax.set_ylabel(f"cumulative ({units})")
    _style(ax)
    _legend_below(fig, ax, ncol=1)
    _titles(fig, ax, f"{_run_name(summary)}: regret = virtual average + consensus (FedSEA Lemma 1)",
            ("population losses F" if population else "realised losses f (F unknown)")
            + f"; L = {_fmt(L)}" + _seeds_note(summary))
    return fig


_CLIENT_REGRET_RE = re.compile(r"^client(\d+)_regret_(static|expected|dynamic)$")


def plot_client_regret(df: pd.DataFrame, summary: Mapping | None, path: str | Path) -> Path:
    """Per-client regret for every comparator, with the clients' spread.

    One panel per comparator (static, expected, dynamic) that the run has:
    the clients' median (line) and their full range (shaded, min–max over
    clients) from the ``client<m>_regret_<comparator>`` columns. Where the
    per-client value is only exact at the end of the run (logistic static
    and expected: ``summary["client_regret"]``), the final values are drawn
    as points at T. The network's regret (the same comparator, all clients
    pooled, weights 1/M) is drawn for reference.

    Parameters
    ----------
    df : pandas.DataFrame
    summary : dict
        The run summary (``client_regret``).
    path : str or Path

    Returns
    -------
    Path
    """
    return _save(_client_regret_figure(df, summary), path)


def _client_regret_figure(df: pd.DataFrame, summary: Mapping | None) -> Figure:
    _require(df, REQUIRED)
    df = _with_live_static(df)
    summary = summary or {}
    units = _loss_units(summary)
    thin = _thin(df)
    t = thin["t"].to_numpy(dtype=float)
    last = summary.get("client_last_step")
    # clients that never played (0 rows) have no regret: their 0 is not a value to draw
    played = ([np.isfinite(_num(x)) and _num(x) > 0 for x in last]
              if isinstance(last, (list, tuple)) else None)
    ends = np.asarray([_num(x) for x in last], dtype=float) if played is not None else None
    T = float(t[-1]) if len(t) else 0.0
    ended = ends is not None and bool(np.any((ends > 0) & (ends < T)))
    found: dict[str, list[str]] = {}
    for c in thin.columns:
        m = _CLIENT_REGRET_RE.match(c)
        if m and not (played is not None and int(m.group(1)) < len(played) and not played[int(m.group(1))]):
            found.setdefault(m.group(2), []).append(c)
    finals = summary.get("client_regret") if isinstance(summary.get("client_regret"), dict) else {}
    kinds = [k for k in ("static", "expected", "dynamic")
             if k in found or (isinstance(finals.get(k), list) and finals.get(k))]
    fig = _new_figure(figsize=(4.0 * max(1, len(kinds)) + 0.8, 4.6))
    axes = fig.subplots(1, max(1, len(kinds)), squeeze=False)[0]
    colours = {"static": "#1f77b4", "expected": "#d62728", "dynamic": "#2ca02c"}
    for ax, kind in zip(axes, kinds):
        colour = colours[kind]
        curves = kind in found and any(_has_data(thin, c) for c in found[kind])
        if curves:
            Y = np.array(thin[found[kind]].to_numpy(dtype=float), copy=True)
            if ended:        # a client whose table ended stops at its last step, not flat to T
                for j, c in enumerate(found[kind]):
                    m = int(_CLIENT_REGRET_RE.match(c).group(1))
                    if m < len(ends) and 0 < ends[m] < T:
                        Y[t > ends[m], j] = np.nan
            still = " of the clients still playing" if ended else ""
            with np.errstate(all="ignore"):
                ax.fill_between(t, np.nanmin(Y, axis=1), np.nanmax(Y, axis=1), color=colour, alpha=0.2,
                                linewidth=0, label=f"clients' range{still} ({Y.shape[1]} clients)")
                ax.plot(t, np.nanmedian(Y, axis=1), color=colour, linewidth=1.7, label=f"clients' median{still}")
        vals = finals.get(kind)
        if isinstance(vals, list) and vals and len(t):
            v = np.asarray([_num(x) for x in vals])
            x = np.full(v.shape, t[-1])
            if played is not None and len(played) == len(v):
                if ended:    # each client's final value at its own last step
                    x = np.where((ends > 0) & (ends < T), ends, x)
                keep = np.asarray(played, dtype=bool)
                v, x = v[keep], x[keep]
            ax.plot(x, v, linestyle="none", marker="o", markersize=4, markerfacecolor="white",
                    markeredgecolor=colour, clip_on=False,
                    label="clients at their last step (exact)" if ended else "clients at T (exact)")
        net = f"regret_{kind}"
        if _has_data(thin, net) and not (kind == "static" and len(_checkpoints(summary)[0])
                                         and "sufficient" not in str(summary.get("regret_static_method", ""))):
            ax.plot(t, thin[net].to_numpy(dtype=float), color="black", linewidth=1.1, linestyle="--",
                    label="network (pooled clients)")
        elif np.isfinite(_num(summary.get(net))) and len(t):
            ax.plot([t[-1]], [_num(summary.get(net))], linestyle="none", marker="s", color="black", markersize=5,
                    label="network at T (pooled clients)")
        ax.axhline(0.0, color="0.55", linewidth=0.8, zorder=1)
        if len(t):
            ax.set_xlim(float(t.min()), max(float(t.max()), float(t.min()) + 1) * 1.02)
        # without per-step columns the panel holds points at T only: say why the rest of it is empty
        output = _config(summary).get("output")
        off = isinstance(output, dict) and output.get("client_columns") is False
        capped = (summary.get("client_columns") or {}).get("note") is not None
        why = ("output.client_columns: false" if off else
               "M > output.client_columns_max" if capped else "solved at the end of the run")
        # wrapped to the 4-inch panel: side by side, unwrapped titles ran into each other
        ax.set_title(kind if curves else _wrap(f"{kind}: per client at T only ({why})", 40), fontsize=10)
        ax.set_xlabel("step t")
        _style(ax)
        ax.legend(fontsize=7.5, loc="best", framealpha=0.9)
    if not kinds:
        axes[0].text(0.5, 0.5, "no per-client regret in this run (output.client_columns: false?)",
                     transform=axes[0].transAxes, ha="center", va="center", color="0.4")
    axes[0].set_ylabel(f"regret of client m alone ({units})")
    title = f"{_run_name(summary)}: per-client regret (each client against its own comparators)"
    fig.suptitle(_wrap(title, int(fig.get_figwidth() * 9)), fontsize=12, fontweight="bold")
    return fig


def render_run(run_dir: str | Path) -> list[Path]:
    """Render every figure of a finished run folder.

    Reads ``metrics.csv`` / ``metrics.parquet`` and ``summary.json`` and
    writes ``plots/regret.png``, ``plots/regret_over_sqrt_t.png``,
    ``plots/client_losses.png``, ``plots/heterogeneity.png``,
    ``plots/decomposition.png`` and ``plots/client_regret.png`` inside the
    run folder.

    Parameters
    ----------
    run_dir : str or Path
        The run folder.

    Returns
    -------
    list of Path
        The six PNG files, in the order above.

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
        plot_decomposition(df, summary, out / "decomposition.png"),
        plot_client_regret(df, summary, out / "client_regret.png"),
    ]


def render_ranking_run(run_dir: str | Path) -> list[Path]:
    """The figure of a streaming recommender run (``learner.model: gmf``): ``plots/ranking.png``.

    Two panels over the steps t: prequential HR@10 (pooled over every
    arriving positive so far) with the estimated comparator's final value
    for reference; the cumulative BCE loss and its regret against the
    ESTIMATED comparator (the fixed GMF trained offline on the recorded
    stream), labelled as such.

    Raises
    ------
    FileNotFoundError
        If the metrics or the summary file is missing.
    """
    from matplotlib.figure import Figure
    run_dir = Path(run_dir)
    df = load_metrics(run_dir)
    summary = load_summary(run_dir)
    out = run_dir / "plots"
    out.mkdir(exist_ok=True)
    fig = Figure(figsize=(11, 4.2))
    a, b = fig.subplots(1, 2)
    a.plot(df["t"], df["cum_hr10"], color="C0", label="FedNCF GMF (played models)")
    comp = (summary.get("comparator") or {}).get("prequential_hr10")
    if comp is not None:
        a.axhline(comp, color="grey", ls="--", lw=1, label=f"offline fixed GMF (estimate), {comp:.3f}")
    a.axhline(10 / 101, color="C3", ls=":", lw=1, label="constant scores, 10/101")
    a.set_xlabel("step t (each user's t-th interaction)")
    a.set_ylabel("prequential HR@10 (pooled so far)")
    a.set_ylim(0, 1)
    a.legend(fontsize=8)
    a.set_title("prequential HR@10")
    b.plot(df["t"], df["cum_loss"], color="C0", label="cumulative BCE (nats)")
    if "regret_static" in df:
        b.plot(df["t"], df["regret_static"], color="C1", label="regret vs offline fixed GMF (estimate)")
    b.set_xlabel("step t")
    b.set_ylabel("nats (network loss Σ_t Σ_m c_tm f)")
    b.legend(fontsize=8)
    b.set_title("loss and estimated regret")
    fig.tight_layout()
    path = out / "ranking.png"
    fig.savefig(path, dpi=110)
    return [path]


def render_sparse_run(run_dir: str | Path) -> list[Path]:
    """The figures of a streaming sparse logistic run (``learner.model: sparse_logistic``).

    Writes ``plots/regret.png`` and ``plots/regret_over_sqrt_t.png`` (:func:`plot_regret`,
    :func:`plot_regret_over_sqrt_t`: static regret against the best fixed sparse model in hindsight, regret
    against the generator's concept, loss gaps to the baselines) and ``plots/loss.png``: the cumulative loss
    Σ_t Σ_m c_tm f (nats) of every learner, of the fixed comparator and of the concept, against t.

    Raises
    ------
    FileNotFoundError
        If the metrics or the summary file is missing.
    ValueError
        If ``t`` or ``cum_loss`` is missing.
    """
    run_dir = Path(run_dir)
    df = load_metrics(run_dir)
    summary = load_summary(run_dir)
    out = run_dir / "plots"
    paths = [plot_regret(df, summary, out / "regret.png"),
             plot_regret_over_sqrt_t(df, summary, out / "regret_over_sqrt_t.png")]
    _require(df, REQUIRED)
    thin = _thin(df)
    t = thin["t"].to_numpy(dtype=float)
    fig = _new_figure()
    ax = fig.add_subplot()
    main = _main_label(summary)
    ax.plot(t, thin["cum_loss"], color="#1f77b4", linewidth=1.8, label=f"{main} (main, τ = {summary.get('tau')})")
    _band(ax, thin, "cum_loss", "#1f77b4", t)            # a seeds run: the 95 % t-interval
    for i, b in enumerate(_baselines(df)):
        colour = _BASELINE_COLOURS[i % len(_BASELINE_COLOURS)]
        ax.plot(t, thin[f"cum_loss_{b}"], color=colour, linestyle=_GAP_STYLES[i % len(_GAP_STYLES)],
                linewidth=1.4, label=b)
        _band(ax, thin, f"cum_loss_{b}", colour, t)
    if _has_data(thin, "comparator_static"):
        ax.plot(t, thin["comparator_static"], color="0.3", linewidth=1.2, label="best fixed model in hindsight")
        _band(ax, thin, "comparator_static", "0.3", t)
    if _has_data(thin, "concept_loss"):
        ax.plot(t, thin["concept_loss"], color="#e6ab02", linewidth=1.2, linestyle=":", label="true concept (w*, b*)")
        _band(ax, thin, "concept_loss", "#e6ab02", t)
    ax.set_xlabel("step t")
    ax.set_ylabel("cumulative loss Σ_t Σ_m c_tm f (nats)")
    _style(ax)
    _legend_below(fig, ax)
    _titles(fig, ax, f"{_run_name(summary)}: cumulative loss",
            f"T = {int(df['t'].iloc[-1]):,} steps, {_clients_text(summary.get('n_clients'))}, "
            f"F = {summary.get('n_features')} features{_seeds_note(summary)}")
    paths.append(_save(fig, out / "loss.png"))
    return paths


def render_model_run(run_dir: str | Path) -> list[Path]:
    """Render a finished run folder (one run or a seeds run's parent) with the figures of its model.

    Dispatches on ``summary.json``'s ``model``: :func:`render_ranking_run` (``gmf``),
    :func:`render_sparse_run` (``sparse_logistic``), else :func:`render_run` (the linear models).
    Returns the written PNG paths; raises what the chosen renderer raises (FileNotFoundError,
    ValueError).
    """
    model = load_summary(run_dir).get("model")
    render = {"gmf": render_ranking_run, "sparse_logistic": render_sparse_run}.get(model, render_run)
    return render(run_dir)


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


def plot_sweep(rows: Sequence[Mapping], path: str | Path, metric: str = "regret_expected",
               units: str = "loss units") -> Path:
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
    units : str
        The regret's units for the axis labels (``"nats"`` for log losses).

    Returns
    -------
    Path

    Raises
    ------
    ValueError
        If ``rows`` is empty, a row misses a key, or ``t`` and ``regret``
        differ in length.
    """
    return _save(_sweep_figure(rows, metric, units), path)


def _sweep_figure(rows: Sequence[Mapping], metric: str, units: str = "loss units") -> Figure:
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
    banded = False
    for r in sorted(rows, key=lambda r: (labels.index(str(r["label"])), int(r["M"]))):
        t = np.asarray(r["t"], dtype=float)
        y = np.asarray(r["regret"], dtype=float)
        idx = _thin_index(len(t))
        left.plot(t[idx], y[idx], color=colour(int(r["M"])), linestyle=style[str(r["label"])], linewidth=1.5)
        if "regret_lo" in r and "regret_hi" in r:
            lo, hi = np.asarray(r["regret_lo"], dtype=float), np.asarray(r["regret_hi"], dtype=float)
            if np.isfinite(lo).any():
                left.fill_between(t[idx], lo[idx], hi[idx], color=colour(int(r["M"])), alpha=0.15, linewidth=0)
                banded = True
    left.axhline(0.0, color="0.55", linewidth=0.8, zorder=1)
    left.set_xlabel("step t")
    left.set_ylabel(f"{name} $R_t$ {_METRIC_OF.get(metric, '')} ({units})".replace("  ", " "), fontsize=9.5)
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
        pts = sorted((int(r["M"]), _num(r["final"]), _num(r.get("final_lo")), _num(r.get("final_hi")))
                     for r in rows if str(r["label"]) == lab)
        pts = [p for p in pts if np.isfinite(p[1])]
        if not pts:
            continue
        m, v, lo, hi = np.array(pts, dtype=float).T
        finals_all.extend(v)
        right.plot(m, v, color="0.15", linestyle=style[lab], marker=marker[lab], markersize=6,
                   markerfacecolor="white", linewidth=1.5, label=lab, zorder=3)
        right.scatter(m, v, c=[colour(int(x)) for x in m], marker=marker[lab], s=30, zorder=4)
        if np.isfinite(lo).any():
            err = np.vstack([np.where(np.isfinite(lo), v - lo, 0.0), np.where(np.isfinite(hi), hi - v, 0.0)])
            right.errorbar(m, v, yerr=np.maximum(err, 0.0), fmt="none", ecolor="0.3", elinewidth=1.0, capsize=3,
                           zorder=3)
            finals_all.extend(lo[np.isfinite(lo)])
            banded = True
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
    right.set_ylabel(f"final {name} $R_T$ {_METRIC_OF.get(metric, '')} ({units})".replace("  ", " "),
                     fontsize=9.5)
    right.set_title(f"final {name} vs M", fontsize=10)
    _style(right)
    right.tick_params(which="minor", labelsize=8, colors="0.35")
    if right.get_legend_handles_labels()[0]:
        right.legend(fontsize=8.5, loc="best", framealpha=0.9)
    fig.suptitle("Benefit of parallelisation: regret vs number of clients M"
                 + ("  (mean over seeds; bands and bars: 95 % t-intervals)" if banded else ""),
                 fontsize=12.5, fontweight="bold")
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
        run = sweep_dir / str(rec["run"])
        banded = f"{metric}_lo" in _metric_names(run)         # a seeds run: mean and 95 % interval
        df = load_metrics(run, columns=[metric] + ([f"{metric}_lo", f"{metric}_hi"] if banded else []))
        row = {"label": str(rec["label"]), "M": int(rec["M"]), "t": df["t"].to_numpy(),
               "regret": df[metric].to_numpy(dtype=float), "final": _num(rec[metric])}
        if banded:
            row["regret_lo"], row["regret_hi"] = (df[f"{metric}_{e}"].to_numpy(dtype=float) for e in ("lo", "hi"))
        if f"{metric}_lo" in rec:
            row["final_lo"], row["final_hi"] = _num(rec[f"{metric}_lo"]), _num(rec[f"{metric}_hi"])
        rows.append(row)
    saved = sweep_dir / "sweep.json"
    units = "loss units"
    if saved.is_file():
        try:
            units = str(json.loads(saved.read_text()).get("units") or units)
        except (ValueError, AttributeError):
            pass                     # sweep.json is optional here: the axis labels fall back to 'loss units'
    return plot_sweep(rows, sweep_dir / "sweep.png", metric=metric, units=units)


def plot_regime_agreement(agreement: Mapping, path: str | Path) -> Path:
    """The regime flag against the measured benefit of M, one point per (setting, M).

    x: the predicted noise share N/(N + V + P) of the regime condition (flag:
    share ≥ ½); y: the measured share (R(1) − R(M))/((M − 1) R(M)) with its
    95 % t-interval over seeds (:func:`streamfl.runtime.sweep.measured_share`).
    Points in the lower-left and upper-right quadrants agree. Marker: M;
    filled: agree, open: disagree, grey: undetermined.

    Parameters
    ----------
    agreement : dict
        :func:`streamfl.runtime.sweep.regime_agreement`'s result.
    path : str or Path

    Returns
    -------
    Path
    """
    cells = list(agreement.get("cells") or [])
    fig = _new_figure(figsize=(7.2, 6.4))
    ax = fig.add_subplot()
    markers = {}
    for c in cells:
        x, y = _num(c.get("predicted_share")), _num(c.get("share_mean"))
        if not (np.isfinite(x) and np.isfinite(y)):
            continue
        M = int(c.get("M", 0))
        mk = markers.setdefault(M, _MARKERS[len(markers) % len(_MARKERS)])
        ok = c.get("agree")
        colour = {True: "#2ca02c", False: "#d62728"}.get(ok, "0.55")
        lo, hi = _num(c.get("share_lo")), _num(c.get("share_hi"))
        if np.isfinite(lo) and np.isfinite(hi):
            ax.plot([x, x], [lo, hi], color=colour, linewidth=1.0, alpha=0.7)
        ax.plot([x], [y], linestyle="none", marker=mk, markersize=7, color=colour,
                markerfacecolor=colour if ok else "white")
    ax.axhline(SHARE_LINE, color="0.4", linestyle="--", linewidth=1.0)
    ax.axvline(SHARE_LINE, color="0.4", linestyle="--", linewidth=1.0)
    ax.set_xlim(-0.03, 1.03)
    ys = [_num(c.get("share_mean")) for c in cells]
    ys = [y for y in ys if np.isfinite(y)]
    ax.set_ylim(min([-0.05] + ys) - 0.05, max([1.05] + ys) + 0.05)
    ax.set_xlabel("predicted: noise share N/(N + V + P) at M (flag: ≥ ½)")
    ax.set_ylabel("measured: (R(1) − R(M)) / ((M − 1) R(M))  (≥ ½ ⇔ R(M) ≤ 2R(1)/(M+1))")
    for M, mk in sorted(markers.items()):
        ax.plot([], [], linestyle="none", marker=mk, color="0.3", label=f"M = {M}")
    ax.plot([], [], linestyle="none", marker="o", color="#2ca02c", label="flag agrees")
    ax.plot([], [], linestyle="none", marker="o", color="#d62728", markerfacecolor="white", label="flag disagrees")
    _style(ax)
    _legend_below(fig, ax, ncol=4)
    _titles(fig, ax, "Regime condition vs measured benefit of parallelisation",
            f"{agreement.get('metric', '')}: flag agrees in {agreement.get('agree')} of {agreement.get('n')} cells; "
            f"literal σ̄²/M ≥ L·K̄²: {agreement.get('literal_agree')} of {agreement.get('literal_n')}")
    return _save(fig, path)


SHARE_LINE = 0.5
