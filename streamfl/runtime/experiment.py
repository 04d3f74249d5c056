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

from ..config import ExperimentConfig, dump_config
from ..generators.build import build_stream
from ..models import StackedLinear, StepSize
from ..aggregation import FedAvg
from ..regret import RegretTracker
from .allocator import keep_freed_memory
from .chunks import chunk_note, effective_chunk_size
from .engine import MAIN, run_stream
from .folders import check_folder, make_dir
from .header import describe_inputs
from .learners import Centralized, Federated, RiverClients, bottleneck_note
from .sink import MetricsSink, add_columns, jsonable



def build_learners(cfg: ExperimentConfig, stream) -> dict:
    """FedSEA plus the configured baselines, all on the same stream.

    Raises
    ------
    ValueError
        For the ``river`` baseline with ``learner.radius``: River's models
        have no projection, so they would not be the local-only learner.
    """
    lc = cfg.learner
    eta = StepSize(lc.step_size.kind, lc.step_size.eta, lc.step_size.mu, lc.step_size.t0)
    M, d, task, K = stream.n_clients, stream.n_features, stream.task, stream.n_classes

    def clients():
        return StackedLinear(M, d, task, eta, K, lc.radius)

    from ..transport.spec import upload_compressor
    compressor = upload_compressor(cfg)        # None without learner.compression; the Kafka roles use the same
    learners = {MAIN: Federated(clients(), lc.tau, FedAvg(lc.weighting) if lc.tau else None, compressor, cfg.seed)}
    for name in cfg.baselines:
        if name == "tau1":
            learners[name] = Federated(clients(), 1, FedAvg(lc.weighting))
        elif name == "local":
            learners[name] = Federated(clients(), None)
        elif name == "centralized":
            learners[name] = Centralized(M, d, task, eta, K, lc.radius)
        elif name == "river":            # with learner.radius refused by the config (River has no projection)
            learners[name] = RiverClients(M, d, task, eta, K)
    return learners


def check_learners(cfg: ExperimentConfig, stream) -> None:
    """The checks of the learners against the stream, made before the run header is printed.

    Raises
    ------
    ValueError
        A streaming GMF run whose stream leaves some user fewer never-interacted items than
        ``learner.gmf.eval_negatives`` (:func:`~streamfl.models.streaming_gmf.check_eval_negatives`).
    """
    if cfg.learner.model == "gmf":
        from ..config import GMFConfig
        from ..models.streaming_gmf import check_eval_negatives
        check_eval_negatives(stream.ever, (cfg.learner.gmf or GMFConfig()).eval_negatives,
                             getattr(stream, "user_ids", None))


def build_gmf_clients(cfg: ExperimentConfig, stream, tau: int):
    """The M :class:`~streamfl.models.streaming_gmf.StreamingGMF` clients of ``cfg`` with round length ``tau``:
    the same initial model and draws in every process that builds them (embedded engine, Kafka workers,
    tracker)."""
    from ..config import GMFConfig
    from ..models.streaming_gmf import StreamingGMF
    lc = cfg.learner
    g = lc.gmf or GMFConfig()
    eta = StepSize(lc.step_size.kind, lc.step_size.eta, lc.step_size.mu, lc.step_size.t0)
    return StreamingGMF(stream.n_clients, stream.n_items, eta, stream.ever, tau, g.dim, g.negatives,
                        g.eval_negatives, g.init_std, cfg.seed, user_ids=getattr(stream, "user_ids", None))


def gmf_strategy(cfg: ExperimentConfig):
    """The server rule of a streaming GMF run (:class:`~streamfl.aggregation.MFFedAvg`; embedded and aggregator)."""
    from ..aggregation import MFFedAvg
    from ..config import GMFConfig
    return MFFedAvg(cfg.learner.weighting, (cfg.learner.gmf or GMFConfig()).item_rule)


def build_gmf_learners(cfg: ExperimentConfig, stream) -> dict:
    """Streaming FedNCF GMF learners (:class:`~streamfl.models.streaming_gmf.StreamingGMF` clients in the
    engine's one :class:`Federated` learner, :class:`~streamfl.aggregation.MFFedAvg` server): the main
    learner with τ = ``learner.tau`` and, if listed in ``baselines``, ``tau1`` (a round every step).
    Every learner draws the same negatives (same seed)."""
    lc = cfg.learner
    learners = {MAIN: Federated(build_gmf_clients(cfg, stream, lc.tau), lc.tau, gmf_strategy(cfg))}
    if "tau1" in cfg.baselines:
        learners["tau1"] = Federated(build_gmf_clients(cfg, stream, 1), 1, gmf_strategy(cfg))
    return learners


def sparse_strategy(cfg: ExperimentConfig, rule: str | None = None):
    """The server rule of a streaming sparse logistic run (:class:`~streamfl.aggregation.FedSubAvg` with
    ``learner.sparse.rule``, or ``rule`` if given)."""
    from ..aggregation import FedSubAvg
    from ..config import SparseConfig
    return FedSubAvg(rule or (cfg.learner.sparse or SparseConfig()).rule)


def build_sparse_learners(cfg: ExperimentConfig, stream) -> dict:
    """Streaming sparse logistic learners (:class:`~streamfl.models.streaming_sparse.StreamingSparseLogistic`
    clients in the engine's :class:`Federated` learner, :class:`~streamfl.aggregation.FedSubAvg` server): the
    main learner (τ = ``learner.tau``, rule ``learner.sparse.rule``) and, if listed in ``baselines``, ``tau1``
    (a round every step, same rule), ``local`` (never communicates) and ``fedavg`` (τ, sparse FedAvg uniform).
    Every learner starts from the zero model (w = 0, b = 0)."""
    from ..config import SparseConfig
    from ..models.streaming_sparse import StreamingSparseLogistic
    lc = cfg.learner
    sp = lc.sparse or SparseConfig()
    eta = StepSize(lc.step_size.kind, lc.step_size.eta, lc.step_size.mu, lc.step_size.t0)

    def clients(tau):
        return StreamingSparseLogistic(stream.n_clients, stream.n_features, eta, tau, stream.batch_size,
                                       stream.nnz, sp.l2)

    learners = {MAIN: Federated(clients(lc.tau), lc.tau, sparse_strategy(cfg))}
    for name in cfg.baselines:
        if name == "tau1":
            learners[name] = Federated(clients(1), 1, sparse_strategy(cfg))
        elif name == "local":
            learners[name] = Federated(clients(None), None)
        elif name == "fedavg":
            learners[name] = Federated(clients(lc.tau), lc.tau, sparse_strategy(cfg, "fedavg"))
    return learners


def tracker_learner(cfg: ExperimentConfig) -> dict:
    """The main learner's η_t and τ, which the tracker's regime condition needs (both modes use it)."""
    lc = cfg.learner
    return {"step_size": StepSize(lc.step_size.kind, lc.step_size.eta, lc.step_size.mu, lc.step_size.t0),
            "tau": lc.tau}


def new_run_dir(cfg: ExperimentConfig, root: Path | None = None) -> Path:
    """Create and return a fresh ``<root>/<name>-<timestamp>[-k]`` folder (absolute path).

    ``root`` defaults to ``cfg.output.dir``; a relative one is relative to the current folder.

    Raises
    ------
    FileExistsError
        ``output.dir`` is an existing file or cannot be created (one line).
    """
    root = Path(root or cfg.output.dir)
    make_dir(root, "output.dir")          # the error names the folder as the user wrote it
    root = root.resolve()
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    path = root / f"{cfg.name}-{stamp}"
    k = 1
    while path.exists():
        k += 1
        path = root / f"{cfg.name}-{stamp}-{k}"
    make_dir(path, "output.dir")
    return path


def claim_run_dir(cfg: ExperimentConfig, run_dir: Path | None = None):
    """Create a run's folder; return ``(path, undo)``, ``undo()`` removing what this call created.

    ``path`` is ``run_dir`` (relative to the current folder), or a new
    ``<output.dir>/<name>-<timestamp>``; it is returned absolute. ``undo``
    deletes what the run created and nothing else: the folder if this call
    created it, else only the entries that were not there before (a
    pre-existing ``--out`` folder stays, with whatever the user had in it),
    then the parent folders this call had to create, as long as they are
    empty: a failed run leaves the disk as it found it.
    """
    if run_dir:
        check_folder(Path(run_dir), "--out")    # the error names the folder as the user wrote it
    target = Path(run_dir if run_dir else cfg.output.dir).resolve()
    top = None                      # the top-most folder of target's path that does not exist yet
    p = target
    while not p.exists():
        top, p = p, p.parent
    path = target if run_dir else new_run_dir(cfg)
    existed = bool(run_dir) and path.is_dir()        # new_run_dir has just created its folder
    before = set(path.iterdir()) if existed else set()
    make_dir(path, "--out")

    def undo() -> None:
        if not existed:
            shutil.rmtree(path, ignore_errors=True)
        else:                             # the user's folder: remove only what the run put there
            for entry in set(path.iterdir()) - before:
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
        if top is not None:
            p = path.parent
            while p.is_relative_to(top):
                try:
                    p.rmdir()             # only if empty: another run may have put its folder there meanwhile
                except OSError:
                    break
                p = p.parent

    return path, undo


def run_experiment(cfg: ExperimentConfig, run_dir: Path | None = None, on_chunk=None, plots: bool | None = None,
                   stream=None) -> dict:
    """Run one experiment end to end; return the summary dict.

    Parameters
    ----------
    cfg : ExperimentConfig
    run_dir : Path or None
        Where to write; a fresh ``<output.dir>/<name>-<timestamp>`` by default
        (see :func:`claim_run_dir`; removed again if the run fails).
    on_chunk : callable(tracker, stream) or None
        Live-view hook, called after every chunk.
    plots : bool or None
        Override ``cfg.output.plots``.
    stream : Stream or None
        ``build_stream(cfg)`` if the caller has built it already (streams
        replay identically).
    """
    run_dir, undo = claim_run_dir(cfg, run_dir)
    try:
        return _run(cfg, run_dir, on_chunk, plots, stream)
    except BaseException:
        undo()                    # a failed run leaves no half-written folder behind
        raise


def _run(cfg: ExperimentConfig, run_dir: Path, on_chunk, plots, stream=None) -> dict:
    keep_freed_memory()            # per-chunk temporaries reused, not page-faulted in again (glibc; see allocator)
    stream = build_stream(cfg) if stream is None else stream
    if cfg.learner.model == "gmf":
        return _run_gmf(cfg, run_dir, on_chunk, plots, stream)
    if cfg.learner.model == "sparse_logistic":
        return _run_sparse(cfg, run_dir, on_chunk, plots, stream)
    learners = build_learners(cfg, stream)
    (run_dir / "config.yaml").write_text(dump_config(cfg))
    sink = MetricsSink(run_dir, cfg.output.format)
    tracker = RegretTracker(stream, MAIN, list(learners), radius=cfg.learner.radius, sink=sink,
                            spool_dir=str(run_dir / "spool"), reservoir_size=cfg.reservoir_size, seed=cfg.seed,
                            client_columns=cfg.output.client_columns,
                            client_columns_max=cfg.output.client_columns_max, **tracker_learner(cfg),
                            **cfg.tracker.model_dump())
    chunk = effective_chunk_size(cfg.chunk_size, stream)
    if chunk < min(cfg.chunk_size, stream.n_steps):      # a chunk never holds more than T steps anyway
        tracker.notes.append(chunk_note(cfg.chunk_size, chunk))
    started = time.perf_counter()
    hook = (lambda tr: on_chunk(tr, stream)) if on_chunk else None
    run_stream(stream, learners, tracker, MAIN, chunk, hook)
    elapsed = time.perf_counter() - started
    sink.close()
    summary = tracker.finalize()
    summary.update({
        "main": MAIN, "n_clients": stream.n_clients, "n_features": stream.n_features, "task": stream.task,
        "n_steps": tracker.state.t, "tau": cfg.learner.tau, "rounds": learners[MAIN].rounds,
        "elapsed_seconds": elapsed, "samples_per_second": tracker.state.samples / max(elapsed, 1e-9),
        "config": json.loads(cfg.model_dump_json()), "run_dir": str(run_dir),
        "metrics_file": sink.path.name, "inputs": describe_inputs(cfg, stream), "chunk_size_used": chunk,
        "bottleneck": bottleneck_note(cfg.baselines),
    })
    summary["gaps"] = {name: summary["cum_loss"][MAIN] - v for name, v in summary["cum_loss"].items() if name != MAIN}
    (run_dir / "summary.json").write_text(json.dumps(jsonable(summary), indent=2))
    if cfg.output.plots if plots is None else plots:
        from ..report.plots import render_run
        summary["plots"] = [str(p) for p in render_run(run_dir)]
    return summary


def _drive(cfg: ExperimentConfig, run_dir: Path, on_chunk, stream, learners: dict, make_tracker):
    """Run a client-model experiment whose tracker fits its comparator offline (GMF, sparse logistic).

    Writes ``config.yaml``, streams every learner through :func:`run_stream` into the metrics file, then
    finalizes the tracker and adds its static columns. Returns ``(tracker, summary, elapsed wall s,
    engine CPU s without the comparator's fits, sink)``.
    """
    (run_dir / "config.yaml").write_text(dump_config(cfg))
    sink = MetricsSink(run_dir, cfg.output.format)
    tracker = make_tracker(sink)
    started = time.perf_counter()
    cpu = time.process_time()
    hook = (lambda tr: on_chunk(tr, stream)) if on_chunk else None
    run_stream(stream, learners, tracker, MAIN, cfg.chunk_size, hook)
    elapsed = time.perf_counter() - started
    engine_cpu = time.process_time() - cpu - tracker.fit_seconds
    sink.close()
    summary = tracker.finalize()
    add_columns(sink.path, tracker.static_columns)
    return tracker, summary, elapsed, engine_cpu, sink


def _run_gmf(cfg: ExperimentConfig, run_dir: Path, on_chunk, plots, stream) -> dict:
    """A streaming FedNCF run: the same engine loop, the ranking tracker (:mod:`streamfl.regret.ranking`)."""
    from ..regret.ranking import RankingTracker
    learners = build_gmf_learners(cfg, stream)
    tracker, summary, elapsed, engine_cpu, sink = _drive(
        cfg, run_dir, on_chunk, stream, learners,
        lambda sink: RankingTracker(stream, MAIN, list(learners), learners[MAIN].clients, sink=sink))
    summary.update({
        "main": MAIN, "model": "gmf", "n_clients": stream.n_clients, "n_items": stream.n_items,
        "task": "bce (implicit feedback)", "n_steps": tracker.state.t, "tau": cfg.learner.tau,
        "rounds": learners[MAIN].rounds, "elapsed_seconds": elapsed,
        "engine_cpu_seconds": engine_cpu,
        "samples_per_second": tracker.interactions / max(elapsed, 1e-9),
        "bytes_up": learners[MAIN].bytes_up, "bytes_down": learners[MAIN].bytes_down,
        "config": json.loads(cfg.model_dump_json()), "run_dir": str(run_dir),
        "metrics_file": sink.path.name, "inputs": describe_inputs(cfg, stream), "chunk_size_used": cfg.chunk_size,
        "bottleneck": None,
    })
    summary["gaps"] = {name: summary["cum_loss"][MAIN] - v for name, v in summary["cum_loss"].items() if name != MAIN}
    (run_dir / "summary.json").write_text(json.dumps(jsonable(summary), indent=2))
    if cfg.output.plots if plots is None else plots:
        from ..report.plots import render_ranking_run
        summary["plots"] = [str(p) for p in render_ranking_run(run_dir)]
    return summary


def _run_sparse(cfg: ExperimentConfig, run_dir: Path, on_chunk, plots, stream) -> dict:
    """A streaming FedSubAvg run: the same engine loop, the sparse tracker (:mod:`streamfl.regret.sparse`)."""
    from ..config import SparseConfig
    from ..regret.sparse import SparseRegretTracker
    learners = build_sparse_learners(cfg, stream)
    tracker, summary, elapsed, engine_cpu, sink = _drive(
        cfg, run_dir, on_chunk, stream, learners, lambda sink: SparseRegretTracker(stream, MAIN, list(learners), sink=sink))
    sp = cfg.learner.sparse or SparseConfig()
    summary.update({
        "main": MAIN, "model": "sparse_logistic", "rule": sp.rule, "l2": sp.l2,
        "n_clients": stream.n_clients, "n_features": stream.n_features, "nnz": stream.nnz,
        "batch_size": stream.batch_size, "task": "logistic", "n_steps": tracker.state.t,
        "tau": cfg.learner.tau, "rounds": learners[MAIN].rounds, "elapsed_seconds": elapsed,
        "engine_cpu_seconds": engine_cpu, "samples_per_second": tracker.samples / max(elapsed, 1e-9),
        "bytes_up": learners[MAIN].bytes_up, "bytes_down": learners[MAIN].bytes_down,
        "learners": {name: {"tau": lr.tau, "rule": None if lr.tau is None else lr.strategy.rule,
                            "rounds": lr.rounds, "bytes_up": lr.bytes_up, "bytes_down": lr.bytes_down,
                            "cum_loss": summary["cum_loss"][name]} for name, lr in learners.items()},
        "config": json.loads(cfg.model_dump_json()), "run_dir": str(run_dir),
        "metrics_file": sink.path.name, "inputs": describe_inputs(cfg, stream), "chunk_size_used": cfg.chunk_size,
        "bottleneck": None,
    })
    # what the run decided (the header's notes) and what the tracker found (printed after the summary)
    summary["tracker_notes"] = list(tracker.notes)
    summary["notes"] = summary["inputs"]["notes"] + list(tracker.notes)
    summary["gaps"] = {name: summary["cum_loss"][MAIN] - v for name, v in summary["cum_loss"].items() if name != MAIN}
    (run_dir / "summary.json").write_text(json.dumps(jsonable(summary), indent=2))
    if cfg.output.plots if plots is None else plots:
        from ..report.plots import render_sparse_run
        summary["plots"] = [str(p) for p in render_sparse_run(run_dir)]
    return summary


# the former private names, still imported by consumers/tracker.py (the Kafka tracker role)
_add_columns, _jsonable = add_columns, jsonable
