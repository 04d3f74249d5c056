"""Drivers for C-VFL: round-based training by epochs, and the streaming (prequential) variant."""

from __future__ import annotations

from typing import Iterable, Iterator

import numpy as np

from .cvfl import CVFL, RoundReport
from .data import VerticalBatch


def train_epochs(model: CVFL, data: VerticalBatch, *, epochs: int, batch_size: int, seed: int = 0,
                 test: VerticalBatch | None = None, evals_per_epoch: int = 1,
                 stop_at_accuracy: float | None = None) -> list[dict]:
    """Round-based C-VFL: each epoch is one shuffled pass over ``data`` in rounds of ``batch_size`` samples.

    Algorithm 1 line 4 samples the round's mini-batch at random; here the
    mini-batches of an epoch are a random partition of the N samples (the last
    one smaller when B does not divide N), so an epoch is ⌈N/B⌉ rounds and
    ⌈N/B⌉·Q local iterations, whatever Q: bytes per epoch do not depend on Q,
    computation grows with it.

    Parameters
    ----------
    model : CVFL
    data : VerticalBatch
        Training samples.
    epochs : int
    batch_size : int
        B.
    seed : int
        Seeds the mini-batch order.
    test : VerticalBatch, optional
        Evaluated (uncompressed global model, see :meth:`CVFL.evaluate`) before
        training and ``evals_per_epoch`` times per epoch, evenly spaced (at most after every round).
    stop_at_accuracy : float, optional
        Stop at the first evaluation whose test accuracy reaches this value.

    Returns
    -------
    list of dict
        One row per evaluation: ``epoch`` (fractional), ``round``, ``iterations``,
        ``bytes_up``, ``bytes_down``, ``bytes`` (their sum; cumulative),
        ``compute_seconds`` and ``cpu_seconds`` (measured wall and CPU time in :meth:`CVFL.step`,
        cumulative, evaluation excluded),
        ``train_loss`` (mean prequential loss of the rounds since the previous row),
        ``test_loss`` and ``test_accuracy`` (NaN without ``test``).

    Raises
    ------
    ValueError
        If epochs < 1, batch_size < 1, or evals_per_epoch < 1.
    """
    if epochs < 1 or batch_size < 1 or evals_per_epoch < 1:
        raise ValueError(f"epochs, batch_size and evals_per_epoch must be ≥ 1; got {epochs}, {batch_size}, "
                         f"{evals_per_epoch}")
    rng = np.random.default_rng(seed)
    n = len(data)
    per_epoch = -(-n // batch_size)
    evals = min(evals_per_epoch, per_epoch)
    marks = {round((k + 1) * per_epoch / evals) for k in range(evals)}
    rows, compute, cpu, losses = [], 0.0, 0.0, []

    def record(epoch: float) -> bool:
        ev = model.evaluate(test) if test is not None else {"loss": float("nan"), "accuracy": float("nan")}
        rows.append({"epoch": epoch, "round": model.round, "iterations": model.round * model.Q,
                     "bytes_up": model.wire.bytes_up, "bytes_down": model.wire.bytes_down,
                     "bytes": model.wire.bytes_up + model.wire.bytes_down, "compute_seconds": compute, "cpu_seconds": cpu,
                     "train_loss": float(np.mean(losses)) if losses else float("nan"),
                     "test_loss": ev["loss"], "test_accuracy": ev["accuracy"]})
        losses.clear()
        return stop_at_accuracy is not None and ev["accuracy"] >= stop_at_accuracy

    if record(0.0):
        return rows
    for e in range(epochs):
        order = rng.permutation(n)
        for k in range(per_epoch):
            report = model.step(data.take(order[k * batch_size:(k + 1) * batch_size]))
            compute += report.compute_seconds
            cpu += report.cpu_seconds
            losses.append(report.loss)
            if k + 1 in marks and record(e + (k + 1) / per_epoch):
                return rows
    return rows


def stream_batches(data: VerticalBatch, batch_size: int) -> Iterator[VerticalBatch]:
    """``data`` in its own order, ``batch_size`` samples at a time (the last batch may be smaller)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be ≥ 1, got {batch_size}")
    for start in range(0, len(data), batch_size):
        yield data.take(np.arange(start, min(start + batch_size, len(data))))


def prequential(model: CVFL, batches: Iterable[VerticalBatch]) -> Iterator[RoundReport]:
    """Streaming C-VFL: each arriving batch is first scored, then learned from (one round of Algorithm 1).

    Each report's ``sample_losses`` are the arriving samples' losses under the
    model trained on everything before them (prequential, test-then-train);
    ``bytes_up_total``/``bytes_down_total`` are the cumulative bytes so far.
    One step per batch, so a stream of (sample id, per-party slices, label),
    e.g. from a :class:`~streamfl.vertical.join.SampleJoiner`, drives it one step at a time.

    >>> import torch
    >>> from torch import nn
    >>> from streamfl.vertical import ConcatFusion, split_columns, tanh_embedding
    >>> _ = torch.manual_seed(0)
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(2000, 4)); y = (X.sum(axis=1) > 0).astype(int)
    >>> data = split_columns(X, y, [[0, 1], [2, 3]])
    >>> model = CVFL([tanh_embedding(2, 2) for _ in range(2)], ConcatFusion(nn.Linear(4, 2)), lr=0.5)
    >>> losses = [r.loss for r in prequential(model, stream_batches(data, 20))]
    >>> round(float(np.mean(losses[:10])), 2), round(float(np.mean(losses[-10:])), 2)
    (0.58, 0.14)
    """
    for batch in batches:
        yield model.step(batch)
