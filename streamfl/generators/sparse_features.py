"""Per-client streams of sparse categorical features with hot and cold features, drifting.

FedSubAvg's setting (paper 000, §1): the global model has a large sparse
table (one weight per hashed or categorical feature); each client's data
involve only part of the features; and features differ in *heat* — the
number of clients whose data involve them: hot features are shared by most
clients, cold ones by a few.

Generative model (all seeded; ``F`` features, ``M`` clients):

* **Heat** of the feature at popularity rank r (1 = hottest) is
  h(r) = min(1, (r₀ / r)^α), r₀ = ``hot``: the fraction of clients involving
  the feature, a power law in the rank (features ranked ≤ r₀ are involved
  by every client).
* **Involvement**: client m involves feature f at step t iff
  u_{m,f} < h(rank_t(f)), with u_{m,f} ~ U(0, 1) drawn once. A feature that
  heats up is joined by more clients (those with the smallest u), so the
  clients' feature sets change consistently as popularity drifts.
* **Drift of popularity**: every ``drift_period`` steps, ``drift_swaps``
  random pairs (a feature ranked ≤ ``hot_pool``, a feature ranked below)
  exchange ranks: hot features cool down and cold ones heat up.
* **Samples**: client m's sample at step t has ``nnz`` distinct features drawn
  uniformly from the features it involves at t (binary features), and label
  y ~ Bernoulli(σ(b* + Σ_{f in sample} w*_f)), w*_f ~ N(0, ``weight_scale``²)
  fixed, b* = ``intercept``. The concept (w*, b*) is shared by all clients and
  does not drift; what drifts is which features each client's data involve.

Chunks are :class:`SparseChunk`: the dense :class:`~streamfl.generators.base.Chunk`
would need a (n, M, b, F) feature array; a sparse chunk carries the nnz
feature ids of each sample instead (shape (n, M, b, nnz)), the rest of the
stream contract is the same (``t0``, ``y``, ``mask``, replayable, seeded inside
:meth:`SparsePowerLawStream.chunks`).

>>> s = SparsePowerLawStream(n_clients=3, n_features=50, nnz=4, batch_size=2, n_steps=5, seed=1)
>>> c = next(s.chunks(5))
>>> c.ids.shape, c.y.shape
((5, 3, 2, 4), (5, 3, 2))
>>> bool((c.ids == next(s.chunks(5)).ids).all())          # replays the same stream
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np


@dataclass
class SparseChunk:
    """``n`` consecutive steps of a sparse federated stream, for all M clients.

    Attributes
    ----------
    t0 : int
        First step of the chunk (0-based).
    ids : ndarray (n, M, b, nnz) int64
        Feature ids of each sample (distinct within a sample).
    y : ndarray (n, M, b) float64
        Labels in {0, 1}.
    mask : None
        Every client has a sample at every step (kept for the stream contract).
    """

    t0: int
    ids: np.ndarray
    y: np.ndarray
    mask: np.ndarray | None = None

    @property
    def n_steps(self) -> int:
        return self.ids.shape[0]

    @property
    def X(self) -> np.ndarray:
        """The feature ids (n, M, b, nnz) int64 under the engine's name (``chunk.X[i]`` is step i's (M, b, nnz)).

        No dense (n, M, b, F) array is ever built: a sparse client model
        (:class:`~streamfl.models.streaming_sparse.StreamingSparseLogistic`)
        reads ids, not feature values.
        """
        return self.ids

    def weights(self) -> np.ndarray:
        """Per-step client weights c_{t,m} = 1/M, shape (n, M) (every client is present at every step)."""
        return np.full(self.ids.shape[:2], 1.0 / self.ids.shape[1])


class SparsePowerLawStream:
    """Drifting power-law sparse features, one stream per client (see module doc).

    Parameters
    ----------
    n_clients : int
        M.
    n_features : int
        F, the table size.
    nnz : int
        Features per sample.
    batch_size : int
        b, samples per client per step.
    n_steps : int
        T.
    alpha : float
        Power-law exponent α of the heat.
    hot : int
        r₀: features ranked ≤ r₀ are involved by every client (≥ nnz, so every
        client has at least nnz features).
    weight_scale : float
        Standard deviation of the true weights w*.
    intercept : float
        b*.
    drift_period : int or None
        P, steps between popularity drift events (None: no drift): the k-th
        event follows step k·P and is in effect from step t = k·P + 1 (steps
        counted from 1, as metrics.csv's t).
    drift_swaps : int
        Rank exchanges per drift event.
    hot_pool : int or None
        Ranks ≤ hot_pool count as hot for the exchanges (default 4·r₀).
    seed : int

    Attributes
    ----------
    task : str
        "logistic".
    true_weights : ndarray (F,)
        w*.

    Raises
    ------
    ValueError
        Naming the parameter, if a size is < 1, hot < nnz or hot > F.
    """

    task = "logistic"
    kind = "sparse"          # the run header and the runner tell a sparse-feature stream by this
    adaptive = False         # the engine never feeds the learners' models back (no adaptive adversary)

    def __init__(self, n_clients: int = 100, n_features: int = 2000, nnz: int = 5, batch_size: int = 8,
                 n_steps: int = 1000, alpha: float = 1.0, hot: int = 10, weight_scale: float = 1.0,
                 intercept: float = 0.0, drift_period: int | None = 100, drift_swaps: int = 5,
                 hot_pool: int | None = None, seed: int = 0):
        for name in ("n_clients", "n_features", "nnz", "batch_size", "n_steps"):
            if locals()[name] < 1:
                raise ValueError(f"The '{name}' parameter of SparsePowerLawStream must be ≥ 1. Got {locals()[name]!r} instead.")
        if not nnz <= hot <= n_features:
            raise ValueError(f"The 'hot' parameter of SparsePowerLawStream must be in [nnz, n_features] = [{nnz}, {n_features}]. Got {hot!r} instead.")
        if drift_period is not None and drift_period < 1:
            raise ValueError(f"The 'drift_period' parameter must be ≥ 1 or None. Got {drift_period!r} instead.")
        self.n_clients, self.n_features, self.nnz, self.batch_size = n_clients, n_features, nnz, batch_size
        self.n_steps, self.alpha, self.hot, self.weight_scale = n_steps, alpha, hot, weight_scale
        self.intercept, self.drift_period, self.drift_swaps, self.seed = intercept, drift_period, drift_swaps, seed
        self.hot_pool = min(n_features, 4 * hot) if hot_pool is None else hot_pool
        rng = np.random.default_rng([seed, 0])
        self.true_weights = rng.normal(0.0, weight_scale, n_features)
        self._u = rng.random((n_clients, n_features))
        self._rank0 = rng.permutation(n_features)          # rank (0-based) of each feature at t = 0

    # ------------------------------------------------------------ popularity
    def heat_of_rank(self) -> np.ndarray:
        """h(r) for ranks r = 1..F, shape (F,)."""
        r = np.arange(1, self.n_features + 1, dtype=np.float64)
        return np.minimum(1.0, (self.hot / r) ** self.alpha)

    def ranks_at(self, t: int) -> np.ndarray:
        """0-based popularity rank of every feature at step t, shape (F,) (replays the drift from t = 0)."""
        rank = self._rank0.copy()
        if self.drift_period is None:
            return rank
        rng = np.random.default_rng([self.seed, 1])
        for _ in range(t // self.drift_period):
            self._drift(rank, rng)
        return rank

    def _drift(self, rank: np.ndarray, rng: np.random.Generator) -> None:
        by_rank = np.argsort(rank)
        hot = by_rank[rng.choice(self.hot_pool, self.drift_swaps, replace=False)]
        cold = by_rank[self.hot_pool + rng.choice(self.n_features - self.hot_pool, self.drift_swaps, replace=False)]
        rank[hot], rank[cold] = rank[cold], rank[hot].copy()

    def involvement(self, rank: np.ndarray) -> np.ndarray:
        """(M, F) bool: which features each client involves under the ranks ``rank``."""
        return self._u < self.heat_of_rank()[rank][None, :]

    # ------------------------------------------------------------ samples
    @staticmethod
    def _features(involved: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each client's involved features, padded: (M, width) ids and (M,) counts."""
        counts = involved.sum(axis=1)
        width = int(counts.max())
        return np.argsort(~involved, axis=1, kind="stable")[:, :width], counts

    def _draw(self, feats: tuple[np.ndarray, np.ndarray], n: int, rng: np.random.Generator):
        """n samples per client from ``_features(...)``: ids (M, n, nnz), y (M, n)."""
        feats, counts = feats
        M, width = feats.shape
        keys = rng.random((M, n, width))
        keys[np.broadcast_to(np.arange(width)[None, None, :] >= counts[:, None, None], keys.shape)] = np.inf
        pick = np.argpartition(keys, self.nnz - 1, axis=2)[:, :, :self.nnz]
        ids = np.take_along_axis(feats[:, None, :], pick, axis=2)
        z = self.intercept + self.true_weights[ids].sum(axis=2)
        y = (rng.random((M, n)) < 1.0 / (1.0 + np.exp(-z))).astype(np.float64)
        return ids, y

    def chunks(self, chunk_size: int = 64) -> Iterator[SparseChunk]:
        """Yield the stream in chunks of at most ``chunk_size`` steps, from t = 0 (same seed, same chunks).

        Cost per step: O(M·b·F_m) for F_m the most features a client involves;
        O(M·F log F) at each drift event.
        """
        rng = np.random.default_rng([self.seed, 2])
        drift_rng = np.random.default_rng([self.seed, 1])
        rank = self._rank0.copy()
        feats = self._features(self.involvement(rank))
        M, b = self.n_clients, self.batch_size
        for t0 in range(0, self.n_steps, chunk_size):
            n = min(chunk_size, self.n_steps - t0)
            ids = np.empty((n, M, b, self.nnz), np.int64)
            y = np.empty((n, M, b))
            for i in range(n):
                t = t0 + i
                if self.drift_period is not None and t > 0 and t % self.drift_period == 0:
                    self._drift(rank, drift_rng)
                    feats = self._features(self.involvement(rank))
                ids[i], y[i] = self._draw(feats, b, rng)
            yield SparseChunk(t0=t0, ids=ids, y=y)

    def __iter__(self) -> Iterator[SparseChunk]:
        return self.chunks()

    def test_set(self, t: int, per_client: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Fresh samples from every client's distribution at step t, pooled: ids (M·n, nnz), y (M·n,)."""
        ids, y = self._draw(self._features(self.involvement(self.ranks_at(t))), per_client,
                            np.random.default_rng([self.seed, 3, seed, t]))
        return ids.reshape(-1, self.nnz), y.reshape(-1)
