"""Heterogeneity sweeps: the same experiment over a grid of settings, one comparison plot."""

from __future__ import annotations

import itertools
from pathlib import Path

import pandas as pd

from ..config import apply_override, config_data, dump_config, parse_config
from ..generators.build import build_stream
from .experiment import new_run_dir, run_experiment
from .header import describe_inputs, header_lines


def _folder_part(text: str) -> str:
    """A sweep value or label as part of one folder name (no separators, no spaces)."""
    for ch in ("/", "\\", " ", "\0"):
        text = text.replace(ch, "_")
    return text.replace("=", "-")


def run_sweep(cfg, out: Path | None = None, console=None, live: bool = True, plots: bool | None = None) -> dict:
    """Run every combination in ``cfg.sweep.parameters``; write ``config.yaml``
    (the sweep), ``sweep.csv``, one run folder per combination and, with plots,
    ``sweep.png`` and each run's plots.

    Parameters
    ----------
    plots : bool or None
        Override ``cfg.output.plots``.

    Returns a dict with ``dir``, ``plot`` (None without plots), ``rows``
    (final metric per run).
    """
    from rich.progress import Progress

    from ..report.plots import render_sweep

    sweep = cfg.sweep
    plots = cfg.output.plots if plots is None else plots
    root = Path(out) if out else new_run_dir(cfg)
    root.mkdir(parents=True, exist_ok=True)
    base = config_data(cfg)
    (root / "config.yaml").write_text(dump_config(cfg))
    base.pop("sweep")
    keys = list(sweep.parameters)
    combos = list(itertools.product(*(range(len(sweep.parameters[k])) for k in keys)))
    rows = []
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
            run_dir = root / "-".join(parts)
            stream = build_stream(sub)
            if console is not None:
                console.print(f"{sub.name}:", highlight=False, soft_wrap=True)
                for line in header_lines(describe_inputs(sub, stream)):
                    console.print(f"  {line}", highlight=False, soft_wrap=True)
            summary = run_experiment(sub, run_dir, plots=plots, stream=stream)
            final = summary.get(sweep.metric)
            M = M or summary["n_clients"]
            label = ", ".join(label_parts) or cfg.name
            rows.append({"run": "-".join(parts), "label": label, "M": M, sweep.metric: final,
                         "sigma2_mean": summary["heterogeneity"]["sigma2_mean"],
                         "K2_mean": summary["heterogeneity"]["K2_mean"],
                         "parallelisation_helps": summary["heterogeneity"]["parallelisation_helps"]})
            progress.advance(task)
    pd.DataFrame(rows).to_csv(root / "sweep.csv", index=False)
    plot = render_sweep(root) if plots else None
    return {"dir": str(root), "plot": None if plot is None else str(plot), "rows": rows}
