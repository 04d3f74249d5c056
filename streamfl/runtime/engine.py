"""The engine loop: where a sample enters and is handed to the learners.

:func:`run_stream` pulls chunks from the stream (the sample *enters* here),
gives each step's mini-batches to every learner (test-then-train, in
:mod:`streamfl.runtime.learners`; the models are *averaged* by the
:mod:`streamfl.aggregation` strategy every τ steps) and passes the chunk's
losses and played models to the regret tracker (where the loss is
*counted*, :mod:`streamfl.regret.tracker`).

The only Python loop is over steps; each step is a few batched numpy
operations over all M clients.
"""

from __future__ import annotations

import os
import time
from typing import Callable

import numpy as np


MAIN = "fedsea"        # the name of the main learner (FedSEA) in losses, summaries and metrics
FIRST_STEP_STAMP = "STREAMFL_FIRST_STEP_STAMP"   # env: a file to receive time.time() when step 1 starts


class DivergenceError(ValueError):
    """A learner's loss became inf or NaN; the message names the learner and step."""


def divergence_message(learner: str, t: int) -> str:
    """The one-line explanation of a learner whose loss became inf or NaN at step t (both modes use it)."""
    return (f"learner '{learner}' diverged at step t={t} (its loss is inf or NaN); "
            f"lower learner.step_size.eta, use a decaying step size, or set learner.radius")


def run_stream(stream, learners: dict, tracker, main: str, chunk_size: int = 256,
               on_chunk: Callable | None = None) -> None:
    """Run every learner over the stream, test-then-train, and track regret.

    Parameters
    ----------
    stream : Stream
    learners : dict name -> learner
        Each has ``step(X (M,b,d), y (M,b), t, mask) -> (M,)`` and ``models``
        (the dense (M, d, K) models, or ``None`` for client models with
        embedding tables, :mod:`streamfl.models.client_model`).
    tracker : RegretTracker or RankingTracker
        Receives ``update(chunk, losses, played)``; ``played`` holds the main
        learner's models before each step, (n, M, d, K), or ``None`` when the
        tracker sets ``wants_models = False``. A tracker that names
        per-client observations in ``observes`` (e.g. ``("rank",)``) also gets
        ``observed={name: (n, M, ...)}``, read from the main learner's client model
        after each step (:meth:`~streamfl.models.client_model.ClientModel.observations`).
    main : str
        The learner whose played models go to the tracker.
    chunk_size : int
        Steps per chunk (memory/latency trade-off; results do not depend on it).
    on_chunk : callable(tracker) or None
        Called after every chunk (live view, progress).

    If the environment variable ``STREAMFL_FIRST_STEP_STAMP`` names a file,
    the wall-clock time (``time.time()``, s) at which the first chunk is
    handed to the learners and the process's CPU time so far
    (``time.process_time()``, s) are written there, separated by a space:
    the start-up benchmark reads them.

    Raises
    ------
    DivergenceError
        When any learner's loss becomes inf or NaN (too large a step size).
    """
    M = stream.n_clients
    counted = hasattr(learners[main], "bytes_up")      # FedSEA counts its payload bytes (cumulative)
    wants_models = getattr(tracker, "wants_models", True)
    observes = tuple(getattr(tracker, "observes", ()))
    stamp = os.environ.get(FIRST_STEP_STAMP)
    for chunk in stream.chunks(chunk_size):
        if stamp:                    # start-up measurement (benchmarks/throughput.py): wall clock at step 1
            with open(stamp, "w") as fh:
                fh.write(f"{time.time()!r} {time.process_time()!r}")
            stamp = None
        n = chunk.n_steps
        losses = {name: np.empty((n, M)) for name in learners}
        up, down = np.zeros(n, np.int64), np.zeros(n, np.int64)
        played = np.empty((n,) + learners[main].models.shape) if wants_models else None
        observed = {}
        with np.errstate(over="ignore", invalid="ignore"):   # divergence is reported below, once
            for i in range(n):
                t = chunk.t0 + i + 1
                X, y = chunk.X[i], chunk.y[i]
                mask = None if chunk.mask is None else chunk.mask[i]
                if wants_models:
                    played[i] = learners[main].models
                for name, learner in learners.items():
                    losses[name][i] = learner.step(X, y, t, mask)
                if observes:
                    seen = learners[main].clients.observations()
                    for key in observes:
                        if key not in observed:          # (n, M, ...) in the observation's own dtype
                            observed[key] = np.zeros((n,) + seen[key].shape, seen[key].dtype)
                        observed[key][i] = seen[key]
                if counted:
                    up[i], down[i] = learners[main].bytes_up, learners[main].bytes_down
                if stream.adaptive:
                    stream.observe(learners[main].models[..., 0])
        for name, value in losses.items():
            bad = ~np.isfinite(value).all(axis=1)
            if bad.any():
                t = chunk.t0 + int(np.argmax(bad)) + 1
                raise DivergenceError(divergence_message(name, t))
        if counted and hasattr(tracker, "count_bytes"):
            tracker.count_bytes(up, down)
        if observes:
            tracker.update(chunk, losses, played, observed=observed)
        else:
            tracker.update(chunk, losses, played)
        if on_chunk is not None:
            on_chunk(tracker)
