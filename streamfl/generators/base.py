"""The stream contract: what every data source hands to the engine.

A *stream* is the adversary's side of FedSEA's Stochastically Extended
Adversary game (FedSEA, §2 "Federated Learning in SEA environment"): at every
step t it picks a distribution D_{t,m} for each client m and reveals a sample
ξ_{t,m} ~ D_{t,m}. Here a sample is a mini-batch of ``b`` labelled feature
vectors per client.

Streams hand out :class:`Chunk` objects, each holding ``n`` consecutive steps
for all ``M`` clients at once, so that the engine never loops over clients.
Iterating a stream again replays the same chunks (streams seed themselves
inside ``__iter__``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Iterator, Literal

import numpy as np

Task = Literal["least_squares", "logistic", "softmax"]


@dataclass
class Chunk:
    """``n`` consecutive steps of a federated stream, for all clients.

    Attributes
    ----------
    t0 : int
        Steps before the chunk: its rows are the steps t = t0 + 1, …, t0 + n
        (steps count from 1, as metrics.csv's ``t``).
    X : ndarray of shape (n, M, b, d), float64
        Features. ``X[i, m]`` is client m's mini-batch at step t = ``t0 + i + 1``.
    y : ndarray of shape (n, M, b), float64
        Labels: real targets for least squares, {0, 1} for logistic, class
        indices 0..K-1 for softmax.
    mask : ndarray of shape (n, M), bool, or None
        ``False`` where a client has no sample at that step (real tables whose
        clients have streams of unequal length). ``None`` means all present.
    optimum : ndarray of shape (n, M, d), or None
        The Bayes-optimal model x*_{t,m} of each client's distribution, when
        the generator knows it (synthetic streams), else ``None``.
    scale : ndarray of shape (n, M), or None
        The feature scale s_{t,m} of each client's distribution when it
        differs between clients or over time (synthetic streams with
        per-client scales or covariate shift); ``None``: the population's.
    noise : ndarray of shape (n, M), or None
        The label-noise level σ_{t,m} when it differs between clients;
        ``None``: the population's.
    """

    t0: int
    X: np.ndarray
    y: np.ndarray
    mask: np.ndarray | None = None
    optimum: np.ndarray | None = None
    scale: np.ndarray | None = None
    noise: np.ndarray | None = None

    @property
    def n_steps(self) -> int:
        return self.X.shape[0]

    def weights(self) -> np.ndarray:
        """Per-step client weights c_{t,m}, shape (n, M), rows summing to 1.

        The network loss at step t is Σ_m c_{t,m} f(x_{t,m}, ξ_{t,m}); with every
        client present c_{t,m} = 1/M as in FedSEA's eq. (3). Steps where no
        client is present get all-zero weights.
        """
        n, M = self.X.shape[:2]
        if self.mask is None:
            return np.full((n, M), 1.0 / M)
        present = self.mask.astype(np.float64)
        count = present.sum(axis=1, keepdims=True)
        return np.divide(present, count, out=np.zeros_like(present), where=count > 0)

    def slice(self, start: int, stop: int) -> "Chunk":
        """The sub-chunk of steps ``t0+start .. t0+stop-1`` (views, no copies)."""
        return Chunk(
            t0=self.t0 + start,
            X=self.X[start:stop],
            y=self.y[start:stop],
            mask=None if self.mask is None else self.mask[start:stop],
            optimum=None if self.optimum is None else self.optimum[start:stop],
            scale=None if self.scale is None else self.scale[start:stop],
            noise=None if self.noise is None else self.noise[start:stop],
        )


class Stream(ABC):
    """A replayable federated stream of mini-batches.

    Subclasses set the attributes below in ``__init__`` and implement
    :meth:`chunks`. Iterating twice must give identical chunks.

    Attributes
    ----------
    n_clients : int
        M, the number of clients.
    n_features : int
        d, the feature dimension (including an intercept column if the source
        adds one).
    batch_size : int
        b, samples per client per step.
    n_steps : int
        T, the number of steps the stream yields.
    task : {"least_squares", "logistic", "softmax"}
        The loss the learners use on this stream.
    n_classes : int
        K for softmax, 1 otherwise.
    population : object or None
        For synthetic streams, the population model (see
        :mod:`streamfl.generators.population`) that gives F_{t,m}(x) and its
        gradient from the optimum x*_{t,m}; ``None`` for real data.
    adaptive : bool
        True when the adversary reacts to the learner's models; the engine
        then asks for one step at a time and calls :meth:`observe`.
    in_memory : bool
        True when every step's samples are held in memory (tables, River
        generators), so that reading the stream once more costs no
        generation (the run header's step-size check reads it whole).
    task_rule_ : str or None
        How the stream inferred ``task`` from its data; ``None`` when the task
        was given.
    columns_ : sequence of dict
        How each input column was read, ``{"column", "read_as", "why"}``
        (real tables and River generators; empty for generated features).
    notes_ : sequence of str
        One line per thing the stream infers, drops or skips that changes what
        is learned (rows not streamed, clients that never play, drift after
        the last step). The run header and ``summary.json`` report them.
    """

    n_clients: int
    n_features: int
    batch_size: int = 1
    n_steps: int
    task: Task
    n_classes: int = 1
    population: object | None = None
    adaptive: bool = False
    in_memory: bool = False
    task_rule_: str | None = None
    columns_: tuple = ()
    notes_: tuple = ()

    @abstractmethod
    def chunks(self, chunk_size: int = 256) -> Iterator[Chunk]:
        """Yield the stream as chunks of at most ``chunk_size`` steps, from t = 0."""

    def __iter__(self) -> Iterator[Chunk]:
        return self.chunks()

    def observe(self, models: np.ndarray) -> None:
        """Show the adversary the clients' current models, shape (M, d).

        Called by the engine before each step of an adaptive stream; a no-op
        for oblivious adversaries.
        """
