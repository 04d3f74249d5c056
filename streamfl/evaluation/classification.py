"""Binary classification metrics for streams evaluated on held-out samples."""

from __future__ import annotations

import numpy as np
from scipy.stats import rankdata


def roc_auc(scores: np.ndarray, y: np.ndarray) -> float:
    """Area under the ROC curve: P(score of a random positive > score of a random negative), ties count ½.

    Computed from ranks (Mann–Whitney U): AUC = (R₊ − n₊(n₊+1)/2) / (n₊ n₋), R₊
    the sum of the positives' ranks (ties get their average rank). O(n log n).

    Raises
    ------
    ValueError
        If ``y`` holds only one class (the AUC is undefined) or scores are NaN.

    >>> roc_auc(np.array([0.1, 0.4, 0.35, 0.8]), np.array([0, 0, 1, 1]))
    0.75
    >>> roc_auc(np.zeros(4), np.array([0, 1, 0, 1]))          # a constant score: chance
    0.5
    """
    s = np.asarray(scores, dtype=np.float64).ravel()
    y = np.asarray(y).ravel().astype(bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        raise ValueError(f"The AUC needs both classes; got {n_pos} positive and {n_neg} negative label(s).")
    if np.isnan(s).any():
        raise ValueError("Scores contain NaN; the AUC is undefined.")
    ranks = rankdata(s)
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))
