"""HR@K and NDCG@K of a held-out item ranked against sampled negatives.

FedNCF (paper 003, §5.2) and NCF rank each user's held-out item among 100
sampled negatives and report, averaged over users, the hit ratio HR@K (is the
item in the top K?) and NDCG@K (1 / log2(rank + 1) if it is, else 0), K = 10.

Ties are broken **at random**: the held-out item's rank is 1 + (negatives
scored higher) + a uniform draw from 0..(negatives scored equal). A model
that scores every item alike thus ranks the item uniformly in 1..101 and
scores HR@10 = 10/101 ≈ 0.099 in expectation, never 1.0 (ranking the item
first among equals would reward a constant model).

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> ranks = ranks_with_random_ties(np.array([0.9, 0.1]), np.array([[0.5, 0.2, 0.95], [0.5, 0.2, 0.3]]), rng)
>>> ranks.tolist(), hit_ratio(ranks, k=2), round(ndcg(ranks, k=2), 4)
([2, 4], 0.5, 0.3155)
"""

from __future__ import annotations

import numpy as np


def ranks_with_random_ties(pos: np.ndarray, neg: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """1-based rank of each user's held-out item, ties broken uniformly at random.

    Parameters
    ----------
    pos : ndarray (U,)
        Score of each user's held-out item.
    neg : ndarray (U, n)
        Scores of the user's n negatives.
    rng : numpy Generator
        Draws the tie-breaks (seeded by the caller: same seed, same ranks).

    Returns
    -------
    ndarray (U,) int64, values in 1..n+1.

    Raises
    ------
    ValueError
        If a score is NaN (a NaN would silently rank anywhere).
    """
    pos = np.asarray(pos, dtype=np.float64)
    neg = np.asarray(neg, dtype=np.float64)
    if np.isnan(pos).any() or np.isnan(neg).any():
        raise ValueError("Ranking scores contain NaN; the model diverged or the input is broken.")
    higher = (neg > pos[:, None]).sum(axis=1)
    equal = (neg == pos[:, None]).sum(axis=1)
    return 1 + higher + rng.integers(0, equal + 1)


def hit_ratio(ranks: np.ndarray, k: int = 10) -> float:
    """HR@K: fraction of users whose held-out item ranks ≤ K."""
    return float(np.mean(np.asarray(ranks) <= k))


def ndcg(ranks: np.ndarray, k: int = 10) -> float:
    """NDCG@K with one relevant item: mean of 1/log2(rank + 1) over users, 0 beyond rank K."""
    r = np.asarray(ranks, dtype=np.float64)
    return float(np.mean(np.where(r <= k, 1.0 / np.log2(r + 1.0), 0.0)))
