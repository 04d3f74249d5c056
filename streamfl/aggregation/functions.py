"""Aggregation rules as pure functions over stacked client models.

Each function takes the client models ``W`` of shape (M, ...) and returns the
aggregated model of shape (...); nothing is mutated. This is where models are
*averaged*: :func:`weighted_average` is FedSEA's server step (Algorithm 1: every
τ steps the server averages the local models and broadcasts the average) and
FedAvg's (McMahan et al., 2017).

>>> import numpy as np
>>> weighted_average(np.array([[1.0], [3.0]]))
array([2.])
>>> weighted_average(np.array([[1.0], [3.0]]), np.array([3.0, 1.0]))
array([1.5])
"""

from __future__ import annotations

import numpy as np


def weighted_average(W: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Σ_m p_m W[m] with p = weights / Σ weights (uniform when ``weights`` is None).

    Parameters
    ----------
    W : ndarray (M, ...)
    weights : ndarray (M,) of non-negative floats, or None

    Raises
    ------
    ValueError
        If the weights are negative, not finite, or sum to zero.
    """
    if weights is None:
        return W.mean(axis=0)
    weights = np.asarray(weights, dtype=np.float64)
    total = weights.sum()
    if not np.all(np.isfinite(weights)) or np.any(weights < 0) or total <= 0:
        raise ValueError(f"Aggregation weights must be finite, non-negative and not all zero. Got {weights!r}.")
    return np.tensordot(weights / total, W, axes=1)
