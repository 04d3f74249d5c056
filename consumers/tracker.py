"""The regret tracker over Kafka: consumes LOSS records and writes the run folder.

Workers publish, per step, their clients' losses and played models. The
tracker reassembles them into the (n, M) losses and (n, M, d, K) played models
of each chunk, regenerates the chunk's data (X, y, mask, optimum) from the run
config — streams are deterministic given config and seed, so nothing but the
learners' numbers has to travel — and feeds
:meth:`streamfl.regret.RegretTracker.update` chunk by chunk, exactly as the
embedded engine does. The run folder is the embedded one: ``config.yaml``,
``metrics.csv``/``.parquet``, ``summary.json`` and ``plots/``.

Only the FedSEA learner runs over Kafka (no baselines).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

import numpy as np

from streamfl.regret import RegretTracker
from streamfl.runtime.experiment import MAIN, _jsonable
from streamfl.runtime.sink import MetricsSink
from streamfl.transport.format import FormatError, Loss, decode
from streamfl.transport.topics import Topics, make_reader


class TrackerError(RuntimeError):
    """The tracker cannot continue; one-line message."""


class LossAssembler:
    """Reassembles per-worker LOSS messages into whole steps.

    Parameters
    ----------
    n_clients, n_features, n_classes : int
        M, d, K.

    Steps may arrive in any order and interleaved across workers; a client
    reported twice for the same step is an error (two workers own it).
    """

    def __init__(self, n_clients: int, n_features: int, n_classes: int = 1):
        self.M, self.d, self.K = n_clients, n_features, n_classes
        self.steps: dict[int, list] = {}

    def add(self, msg: Loss) -> None:
        """Store one LOSS message.

        Raises
        ------
        TrackerError
            Unknown client id, wrong model shape, or a client reported twice.
        """
        ids = msg.clients
        if ids.size and (ids.min() < 0 or ids.max() >= self.M):
            raise TrackerError(f"LOSS from worker {msg.worker} at step {msg.t} names clients {ids.tolist()} (M = {self.M})")
        if msg.played.shape[1:] != (self.d, self.K):
            raise TrackerError(f"LOSS from worker {msg.worker} at step {msg.t}: models {msg.played.shape[1:]}, "
                               f"expected ({self.d}, {self.K})")
        slot = self.steps.get(msg.t)
        if slot is None:
            slot = self.steps[msg.t] = [np.zeros(self.M), np.zeros((self.M, self.d, self.K)), np.zeros(self.M, bool)]
        if slot[2][ids].any() or len(np.unique(ids)) != len(ids):
            raise TrackerError(f"step {msg.t}: clients {ids[slot[2][ids]].tolist()} reported twice "
                               f"(by worker {msg.worker} and another)")
        slot[0][ids], slot[1][ids], slot[2][ids] = msg.losses, msg.played, True

    def complete(self, t: int) -> bool:
        slot = self.steps.get(t)
        return slot is not None and bool(slot[2].all())

    def missing(self, t: int) -> list[int]:
        slot = self.steps.get(t)
        return list(range(self.M)) if slot is None else np.flatnonzero(~slot[2]).tolist()

    def take(self, t0: int, n: int):
        """Remove and return steps t0+1 … t0+n: losses (n, M), played (n, M, d, K)."""
        slots = [self.steps.pop(t) for t in range(t0 + 1, t0 + n + 1)]
        return np.stack([s[0] for s in slots]), np.stack([s[1] for s in slots])


def track(cfg, stream, bootstrap: str, run_id: str, run_dir: Path, on_chunk: Callable | None = None,
          check: Callable[[], None] | None = None, timeout: float = 60.0, plots: bool | None = None,
          extra: dict | None = None) -> dict:
    """Consume the run's LOSS topic until step T and write the run folder.

    Parameters
    ----------
    cfg : ExperimentConfig
    stream : Stream
        ``build_stream(cfg)``: regenerated locally for X, y, mask, optimum.
    bootstrap, run_id : str
    run_dir : Path
        Must exist and hold ``config.yaml``.
    on_chunk : callable(tracker, stream) or None
        Live-view hook, after every chunk.
    check : callable() or None
        Called while waiting; raise from it to abort (e.g. a worker died).
    timeout : float
        Seconds without any LOSS record before :class:`TrackerError`.
    plots : bool or None
        Override ``cfg.output.plots``.
    extra : dict or None
        Added to ``summary.json`` (transport details).

    Returns
    -------
    dict
        The summary, with the same keys as :func:`streamfl.runtime.experiment.run_experiment`.
    """
    run_dir = Path(run_dir)
    M = stream.n_clients
    K = stream.n_classes if stream.task == "softmax" else 1
    sink = MetricsSink(run_dir, cfg.output.format)
    tracker = RegretTracker(stream, MAIN, [MAIN], radius=cfg.learner.radius, sink=sink,
                            spool_dir=str(run_dir / "spool"), reservoir_size=cfg.reservoir_size, seed=cfg.seed,
                            client_columns=cfg.output.client_columns)
    assembler = LossAssembler(M, stream.n_features, K)
    reader = make_reader(bootstrap, f"streamfl-{run_id}-tracker", Topics(run_id).loss)
    started = time.perf_counter()
    try:
        last = time.monotonic()
        for chunk in stream.chunks(cfg.chunk_size):
            n = chunk.n_steps
            while not all(assembler.complete(t) for t in range(chunk.t0 + 1, chunk.t0 + n + 1)):
                got = False
                for records in reader.poll(timeout_ms=100).values():
                    for rec in records:
                        try:
                            msg = decode(rec.value)
                        except FormatError as e:
                            raise TrackerError(f"malformed LOSS record at offset {rec.offset}: {e}") from None
                        if not isinstance(msg, Loss):
                            raise TrackerError(f"a {type(msg).__name__} record on the loss topic (offset {rec.offset})")
                        assembler.add(msg)
                        got = True
                if got:
                    last = time.monotonic()
                if check is not None:
                    check()
                if time.monotonic() - last > timeout:
                    t = next(t for t in range(chunk.t0 + 1, chunk.t0 + n + 1) if not assembler.complete(t))
                    raise TrackerError(f"no LOSS record for {timeout:.0f} s; step {t} still lacks clients "
                                       f"{assembler.missing(t)}")
            losses, played = assembler.take(chunk.t0, n)
            tracker.update(chunk, {MAIN: losses}, played)
            if on_chunk is not None:
                on_chunk(tracker, stream)
    finally:
        reader.close()
        sink.close()
    elapsed = time.perf_counter() - started
    summary = tracker.finalize()
    tau = cfg.learner.tau
    summary.update({
        "main": MAIN, "n_clients": M, "n_features": stream.n_features, "task": stream.task,
        "n_steps": tracker.state.t, "tau": tau, "rounds": 0 if tau is None else tracker.state.t // tau,
        "elapsed_seconds": elapsed, "samples_per_second": tracker.state.samples / max(elapsed, 1e-9),
        "config": json.loads(cfg.model_dump_json()), "run_dir": str(run_dir), "metrics_file": sink.path.name,
        "gaps": {},
    })
    if extra:
        summary.update(extra)
    (run_dir / "summary.json").write_text(json.dumps(_jsonable(summary), indent=2))
    if cfg.output.plots if plots is None else plots:
        from streamfl.report.plots import render_run
        summary["plots"] = [str(p) for p in render_run(run_dir)]
    return summary
