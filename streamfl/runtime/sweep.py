"""Heterogeneity sweeps: the same experiment over a grid of settings, compared with intervals over seeds.

Every combination of ``sweep.parameters`` runs under ``seeds`` seeds (all
runs share one process pool of min(runs, cores) workers). The sweep folder
holds one folder per combination (with ``seed-<s>/`` run folders and the
seeds' summary when ``seeds`` > 1), and:

* ``sweep.csv`` — per combination: the final ``metric`` (mean and 95 %
  t-interval over seeds), the regime condition's two sides and verdict, the
  literal σ̄²/M ≥ L·K̄² for comparison;
* ``sweep.png`` — the regret curves (bands over seeds) and the final regret
  against M with error bars;
* for ``learner.model: sparse_logistic`` (metric ``regret_static``, the
  default there), per combination also every loss gap ``gap_<baseline>``
  (e.g. ``gap_fedavg``: FedSubAvg's lead over sparse FedAvg when negative)
  and ``regret_concept``, with their intervals; ``sweep.json`` says whether
  the metric came from the config or was chosen (``metric_source``, ``notes``);
* when M = 1 is in the grid (linear models) and the metric is the dynamic regret (or stays
  positive): ``agreement.csv``, ``regime.png`` and ``sweep.json`` — the
  regime flag checked against measurement (:func:`regime_agreement`).
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from ..config import apply_override, config_data, dump_config, parse_config, sweep_metric
from ..generators.build import build_stream
from .experiment import claim_run_dir
from .sink import jsonable
from .header import describe_inputs, header_lines
from .seeds import run_pool, summarize_seeds, t_band, t_interval


def _value_text(value) -> str:
    """A swept value as people write it: lists joined by ``+``, mappings as ``key:value`` joined by ``,``.

    >>> _value_text(["tau1", "local"]), _value_text({"kind": "abrupt", "at": [150]}), _value_text(0.5)
    ('tau1+local', 'kind:abrupt,at:150', '0.5')
    """
    if isinstance(value, (list, tuple)):
        return "+".join(_value_text(v) for v in value) or "none"
    if isinstance(value, dict):
        return ",".join(f"{k}:{_value_text(v)}" for k, v in value.items()) or "none"
    return str(value)


def _folder_part(text: str) -> str:
    """A sweep value or label as part of one folder name (no separators, spaces, quotes or brackets)."""
    for ch in ("/", "\\", " ", "\0", ":"):
        text = text.replace(ch, "_")
    for ch in ("'", '"', "[", "]", "{", "}"):
        text = text.replace(ch, "")
    return text.replace("=", "-")


#: The measured criterion: the noise (M-dependent) share of the regret at M is at least this.
SHARE = 0.5


def _read_column(run_dir: Path, summary: dict, metric: str) -> pd.DataFrame:
    name = summary["metrics_file"]
    if name.endswith(".csv"):
        return pd.read_csv(run_dir / name, usecols=["t", metric])
    return pd.read_parquet(run_dir / name, columns=["t", metric])


def measured_share(R1: float, RM: float, M: int) -> float:
    """The share of the regret at M that averaging removes, measured from R(1) and R(M).

    Under the two-term model R(M) = N/M + V (N: the noise term at M = 1, V:
    everything averaging does not improve), N = (R(1) − R(M))·M/(M − 1), so
    the noise share at M is (N/M)/R(M) = (R(1) − R(M)) / ((M − 1) R(M)).
    The regime flag claims N/M ≥ V, i.e. a share ≥ ½, i.e.
    R(M) ≤ 2 R(1)/(M + 1) (a fall of at least 60 % at M = 4, 88 % at M = 16).

    >>> round(measured_share(643.1, 54.4, 16), 3)
    0.721
    """
    if not (M > 1 and np.isfinite(R1) and np.isfinite(RM) and RM > 0):
        return math.nan
    return (R1 - RM) / ((M - 1) * RM)


def regime_agreement(cells: list[dict]) -> dict:
    """Check the regime flag against the measured benefit of M.

    Parameters
    ----------
    cells : list of dict
        One per (setting, M > 1): ``label``, ``M``, ``shares`` (the measured
        share per seed, paired with M = 1 of the same seed: the same drift
        path), ``flag`` (the regime condition at M: True / False / None),
        ``literal`` (σ̄²/M ≥ L·K̄² at M), ``predicted_share`` (N/(N + V + P)).

    Returns
    -------
    dict with ``cells`` (each with the share's mean and 95 % t-interval,
    ``measured`` = mean share ≥ ½, ``borderline`` when the interval contains
    ½, ``agree``), the counts ``agree``/``n`` for the flag and the literal
    condition, and ``text``, one sentence.
    """
    out, agree, n, lit_agree, lit_n, undetermined = [], 0, 0, 0, 0, 0
    for cell in cells:
        r = t_interval(cell["shares"])
        measured = None if not np.isfinite(r["mean"]) else bool(r["mean"] >= SHARE)
        borderline = bool(np.isfinite(r["lo"]) and r["lo"] < SHARE < r["hi"])
        flag = cell.get("flag")
        ok = None if (flag is None or measured is None) else (flag == measured)
        lit = cell.get("literal")
        lit_ok = None if (lit is None or measured is None) else (lit == measured)
        if measured is not None:
            if ok is None:
                undetermined += 1
            else:
                n += 1
                agree += int(ok)
            if lit_ok is not None:
                lit_n += 1
                lit_agree += int(lit_ok)
        out.append({**{k: v for k, v in cell.items() if k != "shares"}, "share_mean": r["mean"],
                    "share_lo": r["lo"], "share_hi": r["hi"], "seeds": r["n"], "measured_helps": measured,
                    "borderline": borderline, "agree": ok, "literal_agree": lit_ok})
    text = (f"regime flag vs measured benefit of M (noise share of the regret at M ≥ {SHARE}, "
            f"i.e. R(M) ≤ 2R(1)/(M + 1)): agrees in {agree} of {n} cells"
            + (f" ({undetermined} undetermined)" if undetermined else "")
            + f"; FedSEA's σ̄²/M ≥ L·K̄² read literally: {lit_agree} of {lit_n}")
    return {"cells": out, "agree": agree, "n": n, "undetermined": undetermined,
            "literal_agree": lit_agree, "literal_n": lit_n, "criterion_share": SHARE, "text": text}


#: Why a sparse sweep writes no regime check (header note and sweep.json).
SPARSE_NO_REGIME = ("the regime check (agreement.csv, regime.png) needs the linear tracker's heterogeneity terms, "
                    "which a sparse_logistic run does not compute: not written")


def sparse_columns(summaries: list[dict]) -> dict:
    """The sweep.csv columns of one sparse logistic setting, from its seeds' summaries.

    For every baseline b: ``gap_<b>`` (the main learner's cumulative loss − b's, nats; below 0: the main
    learner ahead) and for the generator's concept ``regret_concept`` (nats), each as the mean over seeds
    with ``_lo``/``_hi``, the 95 % t-interval (NaN with one seed). Raises KeyError when a summary lacks
    ``gaps`` or ``concept``.
    """
    out = {}
    series = {f"gap_{b}": [s["gaps"][b] for s in summaries] for b in summaries[0]["gaps"]}
    series["regret_concept"] = [s["concept"]["regret"] for s in summaries]
    for key, values in series.items():
        r = t_interval(values)
        out.update({key: r["mean"], f"{key}_lo": r["lo"], f"{key}_hi": r["hi"]})
    return out


def run_sweep(cfg, out: Path | None = None, console=None, live: bool = True, plots: bool | None = None,
              workers: int | None = None) -> dict:
    """Run every combination in ``cfg.sweep.parameters`` under ``cfg.seeds`` seeds.

    Parameters
    ----------
    plots : bool or None
        Draw the sweep's own figures, ``sweep.png`` and ``regime.png``
        (default True; ``--no-plots`` passes False). Each run's plots are
        drawn when this and ``cfg.output.plots`` are both true, so a sweep
        with ``output.plots: false`` (the regime examples: 180 runs) still
        writes the two figures its comparison is read from.
    workers : int or None
        Processes for the runs (default min(runs, cores); 1 runs them in this
        process).

    Writes ``config.yaml`` (the sweep) and the files listed in the module
    docstring. Returns a dict with ``dir``, ``plot`` (None without plots),
    ``rows`` (one per combination) and ``agreement`` (None when it cannot be
    measured).
    """
    root, undo = claim_run_dir(cfg, out)
    try:
        return _sweep(cfg, root, console, live, plots, workers)
    except BaseException:
        undo()                  # only what this sweep created: a pre-existing --out folder stays
        raise


def _sweep(cfg, root: Path, console, live: bool, plots: bool | None, workers: int | None) -> dict:
    from rich.progress import Progress

    from ..report.plots import plot_regime_agreement, plot_sweep, render_model_run

    sweep = cfg.sweep
    sweep_plots = True if plots is None else bool(plots)
    plots = sweep_plots and cfg.output.plots          # each run's plots
    n_seeds = cfg.seeds
    base = config_data(cfg)
    (root / "config.yaml").write_text(dump_config(cfg))
    base.pop("sweep")
    base["seeds"] = 1
    keys = list(sweep.parameters)
    combos = list(itertools.product(*(range(len(sweep.parameters[k])) for k in keys)))
    # Build and validate every combination before running any, so a bad value
    # stops the sweep at once instead of after hours of runs.
    plan = []
    for idx in combos:
        data, parts, label_parts, M = base, [], [], None
        for k, i in zip(keys, idx):
            value = sweep.parameters[k][i]
            data = apply_override(data, k, value)
            names = sweep.labels.get(k)
            text = names[i] if names else f"{k.split('.')[-1]}={_value_text(value)}"
            parts.append(_folder_part(text))
            if k == "source.clients":
                M = value
            else:
                label_parts.append(text)
        sub = parse_config({**data, "name": f"{cfg.name}-{'-'.join(parts)}"})
        plan.append((sub, "-".join(parts), ", ".join(label_parts) or cfg.name, M))
    folders = {}
    for sub, name, label, _ in plan:          # two settings in one folder would overwrite each other's run
        if name in folders:
            raise ValueError(f"sweep: the settings '{folders[name]}' and '{label}' both get the folder name "
                             f"'{name}'; give sweep.labels that differ")
        folders[name] = label
    jobs, owner = [], []
    for p, (sub, name, _, _) in enumerate(plan):
        for k in range(n_seeds):
            seeded = sub.model_copy(update={"seed": sub.seed + k})
            run_dir = root / name / f"seed-{seeded.seed}" if n_seeds > 1 else root / name
            jobs.append((seeded, run_dir, plots))
            owner.append(p)
    metric, metric_note = sweep_metric(cfg)
    sparse = cfg.learner.model == "sparse_logistic"
    notes = [metric_note] if metric_note else []
    if sparse:
        notes.append(SPARSE_NO_REGIME)
    if console is not None:           # each setting's run header: how its input was read
        for note in notes:
            console.print(f"note: {note}", style="yellow", highlight=False, soft_wrap=True)
        for sub, name, _, _ in plan:
            console.print(f"{sub.name}:", highlight=False, soft_wrap=True)
            for line in header_lines(describe_inputs(sub, build_stream(sub))):
                console.print(f"  {line}", highlight=False, soft_wrap=True)
    with Progress(console=console, disable=not live) as progress:
        task = progress.add_task(f"sweep {cfg.name}: {len(plan)} settings × {n_seeds} seed(s)", total=len(jobs))
        results = run_pool(jobs, workers=workers, on_done=lambda: progress.advance(task))
    rows, curves, per_setting = [], [], {}
    units = "nats" if sparse else "loss units"          # a sparse run's losses are BCE in nats
    for p, (sub, name, label, M) in enumerate(plan):
        idx = [i for i, o in enumerate(owner) if o == p]
        summaries = [results[i] for i in idx]
        dirs = [jobs[i][1] for i in idx]
        if n_seeds > 1:
            summarize_seeds(summaries, dirs, root / name, sub)
            if plots:
                render_model_run(root / name)
        M = M or summaries[0]["n_clients"]
        finals = [s.get(metric) for s in summaries]
        fin = t_interval(finals)
        frames = [_read_column(d, s, metric) for d, s in zip(dirs, summaries)]
        T = min(len(f) for f in frames)
        Y = np.stack([f[metric].to_numpy(dtype=float)[:T] for f in frames])
        mean_curve, band_lo, band_hi = t_band(Y)
        curve = {"label": label, "M": M, "t": frames[0]["t"].to_numpy()[:T], "regret": mean_curve,
                 "final": fin["mean"], "final_lo": fin["lo"], "final_hi": fin["hi"]}
        if n_seeds > 1:
            curve["regret_lo"], curve["regret_hi"] = band_lo, band_hi
        curves.append(curve)
        row = {"run": name, "label": label, "M": M, metric: fin["mean"], f"{metric}_lo": fin["lo"],
               f"{metric}_hi": fin["hi"], "seeds": n_seeds}
        if sparse:
            rows.append({**row, **sparse_columns(summaries), **({"metric_note": metric_note} if metric_note else {})})
            continue
        het = [s["heterogeneity"] for s in summaries]
        flags = [h.get("parallelisation_helps") for h in het]
        flag = flags[0] if len(set(flags)) == 1 else None
        lits = [h.get("literal", {}).get("holds") for h in het]
        lit = lits[0] if len(set(lits)) == 1 else None
        N = float(np.mean([h["regime"]["noise_term"] for h in het]))
        V = float(np.mean([h["regime"]["temporal_term"] + np.nan_to_num(h["regime"]["transient_term"])
                           for h in het]))
        rows.append({**row, "noise_term": N, "temporal_plus_transient": V,
                     "parallelisation_helps": flag, "literal_holds": lit,
                     "sigma2_mean": float(np.mean([h["sigma2_mean"] for h in het])),
                     "sigma2_comparator_mean": float(np.mean([h["sigma2_comparator_mean"] for h in het])),
                     "K2_mean": float(np.mean([h["K2_mean"] for h in het]))})
        per_setting.setdefault(label, {})[M] = {"finals": finals, "flag": flag, "literal": lit, "N": N, "V": V}
    pd.DataFrame(rows).to_csv(root / "sweep.csv", index=False)
    plot = root / "sweep.png" if sweep_plots else None
    if sweep_plots:
        plot_sweep(curves, plot, metric=metric, units=units)
    result = {"dir": str(root), "plot": None if plot is None else str(plot), "rows": rows, "agreement": None}
    cells = []
    for label, byM in per_setting.items():
        if 1 not in byM:
            continue
        for M, info in sorted(byM.items()):
            if M == 1:
                continue
            shares = [measured_share(r1, rm, M) for r1, rm in zip(byM[1]["finals"], info["finals"])]
            cells.append({"label": label, "M": M, "shares": shares, "flag": info["flag"], "literal": info["literal"],
                          "noise_term": info["N"], "temporal_plus_transient": info["V"],
                          "predicted_share": info["N"] / (info["N"] + info["V"])
                          if np.isfinite(info["N"] + info["V"]) and info["N"] + info["V"] > 0 else math.nan})
    if cells and (metric == "regret_dynamic" or all(np.isfinite(s) for c in cells for s in c["shares"])):
        agreement = regime_agreement(cells)
        agreement["metric"] = metric
        pd.DataFrame(agreement["cells"]).to_csv(root / "agreement.csv", index=False)
        result["agreement"] = agreement
        if sweep_plots:
            plot_regime_agreement(agreement, root / "regime.png")
            result["regime_plot"] = str(root / "regime.png")
    (root / "sweep.json").write_text(json.dumps(jsonable({"rows": rows, "agreement": result["agreement"],
                                                           "seeds": n_seeds, "metric": metric, "units": units,
                                                           "metric_source": "config" if metric_note is None
                                                           else "inferred", "notes": notes}), indent=2))
    result["notes"] = notes
    return result
