"""Build an experiment from its config and run it into a run folder.

A run folder holds ``config.yaml`` (the resolved config), ``metrics.csv`` (or
``.parquet``; one row per step, written chunk by chunk), ``summary.json`` and
``plots/*.png``.
"""

from __future__ import annotations

import json
import shutil
import time
from datetime import datetime
from pathlib import Path

import numpy as np
import yaml

from ..config import ExperimentConfig
from ..generators.build import build_stream
from ..models import StackedLinear, StepSize
from ..aggregation import FedAvg
from ..regret import RegretTracker
from .engine import MAIN, run_stream
from .learners import Centralized, Federated, RiverClients
from .sink import MetricsSink



def build_learners(cfg: ExperimentConfig, stream) -> dict:
    """FedSEA plus the configured baselines, all on the same stream."""
    lc = cfg.learner
    eta = StepSize(lc.step_size.kind, lc.step_size.eta, lc.step_size.mu, lc.step_size.t0)
    M, d, task, K = stream.n_clients, stream.n_features, stream.task, stream.n_classes

    def clients():
        return StackedLinear(M, d, task, eta, K, lc.radius)

    learners = {MAIN: Federated(clients(), lc.tau, FedAvg(lc.weighting) if lc.tau else None)}
    for name in cfg.baselines:
        if name == "tau1":
            learners[name] = Federated(clients(), 1, FedAvg(lc.weighting))
        elif name == "local":
            learners[name] = Federated(clients(), None)
        elif name == "centralized":
            learners[name] = Centralized(M, d, task, eta, K, lc.radius)
        elif name == "river":
            learners[name] = RiverClients(M, d, task, eta, K)
    return learners


def tracker_learner(cfg: ExperimentConfig) -> dict:
    """The main learner's η_t and τ, which the tracker's regime condition needs (both modes use it)."""
    lc = cfg.learner
    return {"step_size": StepSize(lc.step_size.kind, lc.step_size.eta, lc.step_size.mu, lc.step_size.t0),
            "tau": lc.tau}


def new_run_dir(cfg: ExperimentConfig, root: Path | None = None) -> Path:
    root = Path(root or cfg.output.dir)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    path = root / f"{cfg.name}-{stamp}"
    k = 1
    while path.exists():
        k += 1
        path = root / f"{cfg.name}-{stamp}-{k}"
    path.mkdir(parents=True)
    return path


def run_experiment(cfg: ExperimentConfig, run_dir: Path | None = None, on_chunk=None, plots: bool | None = None) -> dict:
    """Run one experiment end to end; return the summary dict.

    Parameters
    ----------
    cfg : ExperimentConfig
    run_dir : Path or None
        Where to write; a fresh ``<output.dir>/<name>-<timestamp>`` by default.
    on_chunk : callable(tracker, stream) or None
        Live-view hook, called after every chunk.
    plots : bool or None
        Override ``cfg.output.plots``.
    """
    run_dir = Path(run_dir) if run_dir else new_run_dir(cfg)
    fresh = not run_dir.exists() or not any(run_dir.iterdir())
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        return _run(cfg, run_dir, on_chunk, plots)
    except BaseException:
        if fresh:                 # a failed run leaves no half-written folder behind
            shutil.rmtree(run_dir, ignore_errors=True)
        raise


def _run(cfg: ExperimentConfig, run_dir: Path, on_chunk, plots) -> dict:
    stream = build_stream(cfg)
    learners = build_learners(cfg, stream)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(json.loads(cfg.model_dump_json()), sort_keys=False))
    sink = MetricsSink(run_dir, cfg.output.format)
    tracker = RegretTracker(stream, MAIN, list(learners), radius=cfg.learner.radius, sink=sink,
                            spool_dir=str(run_dir / "spool"), reservoir_size=cfg.reservoir_size, seed=cfg.seed,
                            client_columns=cfg.output.client_columns, **tracker_learner(cfg))
    started = time.perf_counter()
    hook = (lambda tr: on_chunk(tr, stream)) if on_chunk else None
    run_stream(stream, learners, tracker, MAIN, cfg.chunk_size, hook)
    elapsed = time.perf_counter() - started
    sink.close()
    summary = tracker.finalize()
    summary.update({
        "main": MAIN, "n_clients": stream.n_clients, "n_features": stream.n_features, "task": stream.task,
        "n_steps": tracker.state.t, "tau": cfg.learner.tau, "rounds": learners[MAIN].rounds,
        "elapsed_seconds": elapsed, "samples_per_second": tracker.state.samples / max(elapsed, 1e-9),
        "config": json.loads(cfg.model_dump_json()), "run_dir": str(run_dir),
        "metrics_file": sink.path.name,
    })
    summary["gaps"] = {name: summary["cum_loss"][MAIN] - v for name, v in summary["cum_loss"].items() if name != MAIN}
    (run_dir / "summary.json").write_text(json.dumps(_jsonable(summary), indent=2))
    if cfg.output.plots if plots is None else plots:
        from ..report.plots import render_run
        summary["plots"] = [str(p) for p in render_run(run_dir)]
    return summary


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (np.floating, float)):
        return None if not np.isfinite(obj) else float(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    return obj
