"""Heterogeneity sweeps: the same experiment over a grid of settings, one comparison plot."""

from __future__ import annotations

import itertools
from pathlib import Path

import pandas as pd

from ..config import apply_override, config_data, parse_config
from ..generators.build import build_stream
from .experiment import new_run_dir, run_experiment
from .header import describe_inputs, header_lines


def _folder_part(text: str) -> str:
    """A sweep value or label as part of one folder name (no separators, no spaces)."""
    for ch in ("/", "\\", " ", "\0"):
        text = text.replace(ch, "_")
    return text.replace("=", "-")


def run_sweep(cfg, out: Path | None = None, console=None, live: bool = True) -> dict:
    """Run every combination in ``cfg.sweep.parameters``; write ``sweep.csv`` and
    ``sweep.png`` into the sweep folder and one run folder per combination.

    Returns a dict with ``dir``, ``plot``, ``rows`` (final metric per run).
    """
    from rich.progress import Progress

    from ..report.plots import plot_sweep

    sweep = cfg.sweep
    root = Path(out) if out else new_run_dir(cfg)
    root.mkdir(parents=True, exist_ok=True)
    base = config_data(cfg)
    base.pop("sweep")
    keys = list(sweep.parameters)
    combos = list(itertools.product(*(range(len(sweep.parameters[k])) for k in keys)))
    rows, curves = [], []
    # Build and validate every combination before running any, so a bad value
    # stops the sweep at once instead of after hours of runs.
    plan = []
    for idx in combos:
        data, parts, label_parts, M = base, [], [], None
        for k, i in zip(keys, idx):
            value = sweep.parameters[k][i]
            data = apply_override(data, k, value)
            names = sweep.labels.get(k)
            text = names[i] if names else f"{k.split('.')[-1]}={value}"
            parts.append(_folder_part(text))
            if k == "source.clients":
                M = value
            else:
                label_parts.append(text)
        sub = parse_config({**data, "name": f"{cfg.name}-{'-'.join(parts)}"})
        plan.append((sub, parts, label_parts, M))
    with Progress(console=console, disable=not live) as progress:
        task = progress.add_task(f"sweep {cfg.name}", total=len(combos))
        for sub, parts, label_parts, M in plan:
            stream = build_stream(sub)
            if console is not None:
                console.print(f"{sub.name}:", highlight=False, soft_wrap=True)
                for line in header_lines(describe_inputs(sub, stream)):
                    console.print(f"  {line}", highlight=False, soft_wrap=True)
            summary = run_experiment(sub, root / "-".join(parts), plots=False, stream=stream)
            df = pd.read_csv(root / "-".join(parts) / summary["metrics_file"], usecols=["t", sweep.metric]) \
                if summary["metrics_file"].endswith(".csv") else \
                pd.read_parquet(root / "-".join(parts) / summary["metrics_file"], columns=["t", sweep.metric])
            final = summary.get(sweep.metric)
            M = M or summary["n_clients"]
            label = ", ".join(label_parts) or cfg.name
            rows.append({"run": "-".join(parts), "label": label, "M": M, sweep.metric: final,
                         "sigma2_mean": summary["heterogeneity"]["sigma2_mean"],
                         "K2_mean": summary["heterogeneity"]["K2_mean"],
                         "parallelisation_helps": summary["heterogeneity"]["parallelisation_helps"]})
            curves.append({"label": label, "M": M, "t": df["t"].to_numpy(), "regret": df[sweep.metric].to_numpy(),
                           "final": final})
            progress.advance(task)
    pd.DataFrame(rows).to_csv(root / "sweep.csv", index=False)
    plot = root / "sweep.png"
    plot_sweep(curves, plot, metric=sweep.metric)
    return {"dir": str(root), "plot": str(plot), "rows": rows}
