"""Strategies: pluggable server rules deciding how client models are combined.

A strategy has one hook, :meth:`Strategy.aggregate`, called at the end of every
round (every τ steps). Returning ``None`` keeps the clients' models as they are.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from .functions import weighted_average


class Strategy(ABC):
    """Server-side aggregation rule (cf. Flower's ``Strategy``)."""

    @abstractmethod
    def aggregate(self, W: np.ndarray, n_samples: np.ndarray) -> np.ndarray | None:
        """Combine client models.

        Parameters
        ----------
        W : ndarray (M, d, K)
            Client models at the end of the round.
        n_samples : ndarray (M,)
            Samples each client learned from during the round.

        Returns
        -------
        ndarray (d, K) or None
            The global model to broadcast, or ``None`` to leave clients alone.
        """


class FedAvg(Strategy):
    """Average the client models and broadcast (FedSEA Algorithm 1; FedAvg).

    Parameters
    ----------
    weighting : {"uniform", "samples"}
        ``uniform`` is FedSEA's (1/M) Σ_m x_{t,m}; ``samples`` weighs each
        client by the samples it saw in the round (FedAvg).

    Clients that saw no sample in the round (their stream has ended or not
    begun: real tables of unequal length) do not take part: the average is
    over the participating clients (partial participation, as in FedAvg), so
    stale models do not drag the global model. A round in which no client saw
    a sample keeps the current models. With every client present this is
    exactly FedSEA's average.

    >>> import numpy as np
    >>> FedAvg().aggregate(np.array([[[0.0]], [[2.0]]]), np.array([1, 1]))
    array([[1.]])
    >>> FedAvg().aggregate(np.array([[[0.0]], [[2.0]], [[9.0]]]), np.array([1, 1, 0]))   # client 2 sat out
    array([[1.]])
    """

    def __init__(self, weighting: str = "uniform"):
        if weighting not in ("uniform", "samples"):
            raise ValueError(f"The 'weighting' parameter of FedAvg must be 'uniform' or 'samples'. Got {weighting!r} instead.")
        self.weighting = weighting

    def aggregate(self, W, n_samples):
        taking_part = np.asarray(n_samples) > 0
        if not taking_part.any():
            return None
        if self.weighting == "uniform":
            return weighted_average(W) if taking_part.all() else weighted_average(W, taking_part.astype(np.float64))
        return weighted_average(W, n_samples)


class LocalOnly(Strategy):
    """No communication: every client keeps its own model (the local-only baseline)."""

    def aggregate(self, W, n_samples):
        return None
