"""Aggregation rules for sparse updates: only the rows a client touched travel.

A model with a large embedding table (items of a recommender, hashed
features of a click model) is updated by each client only at the rows its
data involves (FedSubAvg, paper 000, §1: "each client's local data tend to
interact with part of features, updating only a small submodel"). A client's
*update* of such a table is therefore sparse: the ids of the rows it touched,
the change of those rows, and how many of its samples involved each row.

The records (:class:`SparseUpdate`, :class:`SparseRound`, :class:`SparseRows`) and
:func:`apply_rows` are defined in :mod:`streamfl.updates`, which client models share.

Conventions (fixed once, for every rule here):

* ``rows`` are **deltas** Δ_{i,m} = x_{i,m} − x̄_m: the client's row after local
  training minus the global row it started from. A row the client did not
  touch has Δ = 0 and is not sent.
* Every rule returns the **global delta** Δ̄ at the rows that some client
  touched, as :class:`SparseRows` with sorted, distinct ids; the new global
  table is x̄ + Δ̄ (:func:`apply_rows`). Untouched rows are not visited.
* Cost: O(n log n) time and O(n·k) memory for n = touched rows summed over
  the round's clients and k the row width, independent of the table size
  (one sort of the ids, one segmented sum). ``benchmarks/sparse_aggregation.py``
  measures it.
* An empty round (no client, or no touched row) gives an empty result: the
  global table stays as it is (cf. :class:`~streamfl.aggregation.FedAvg`).

Rules (K = clients of the round, p_i their FedAvg weights):

=====================  ==========================================================  =====================================
rule                   global delta of row m                                       source
=====================  ==========================================================  =====================================
:func:`fedavg`         Σ_i p_i Δ_{i,m}, p_i = n_i / Σ_j n_j (or 1/K, uniform)      McMahan et al. 2017; FedNCF eq. (1)
:func:`simple_avg`     (1/K) Σ_i Δ_{i,m}                                            FedNCF §5.3 ("non-weighted")
:func:`mf_fedavg`      (1/|C_m|) Σ_{i∈C_m} Δ_{i,m}, C_m = clients that touched m   FedNCF §3.3 (MF-SecAvg, plain)
:func:`fedsubavg`      (N / (K H_m)) Σ_i w_i Δ_{i,m}, H_m = Σ_{i involving m} w_i  FedSubAvg (paper 000), Algorithm 1
=====================  ==========================================================  =====================================

FedNCF's two-client example (paper 003, §3.2): an item row at 0.04, client P1
(150 interactions) moves it to 0.047, client P2 (170 interactions) never
touches it. FedAvg by samples gives 0.0433, SimpleAvg 0.0435, and the per-item
rule 0.047:

>>> import numpy as np
>>> p1 = SparseUpdate(ids=np.array([0]), rows=np.array([[0.007]]), counts=np.array([1]), n_samples=150)
>>> p2 = SparseUpdate(ids=np.array([], dtype=np.int64), rows=np.zeros((0, 1)), counts=np.array([], dtype=np.int64), n_samples=170)
>>> r = SparseRound.from_updates([p1, p2])
>>> [round(0.04 + float(rule(r).rows[0, 0]), 5) for rule in (fedavg, simple_avg, mf_fedavg)]
[0.04328, 0.0435, 0.047]
"""

from __future__ import annotations

import numpy as np

from ..updates import SparseRound, SparseRows, SparseUpdate, apply_rows  # noqa: F401  (also imported from here)

WEIGHTINGS = ("uniform", "samples")


def segment_sum(ids: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sum ``values`` over equal ``ids``: (sorted distinct ids (u,), sums (u, ...)).

    O(n log n) for n ids (one stable sort, one ``np.add.reduceat``); never
    allocates anything of the table's size.

    >>> segment_sum(np.array([5, 2, 5]), np.array([1.0, 2.0, 3.0]))
    (array([2, 5]), array([2., 4.]))
    """
    if ids.shape[0] == 0:
        return ids.astype(np.int64), values[:0].astype(np.float64)
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    starts = np.flatnonzero(np.r_[True, sorted_ids[1:] != sorted_ids[:-1]])
    return sorted_ids[starts], np.add.reduceat(values[order], starts, axis=0)


def _client_weights(r: SparseRound, weighting: str) -> np.ndarray:
    if weighting not in WEIGHTINGS:
        raise ValueError(f"The 'weighting' parameter must be one of {list(WEIGHTINGS)}. Got {weighting!r} instead.")
    return np.ones(r.n_clients) if weighting == "uniform" else r.n_samples.astype(np.float64)


def _empty(r: SparseRound) -> SparseRows:
    return SparseRows(ids=np.zeros(0, np.int64), rows=np.zeros((0, r.width)))


def fedavg(r: SparseRound, weighting: str = "samples") -> SparseRows:
    """FedAvg on sparse updates: Δ̄_m = Σ_i p_i Δ_{i,m} over the K clients of the round.

    p_i = n_i / Σ_j n_j (``samples``, FedAvg as in McMahan et al. 2017 and
    FedNCF paper 003 eq. (1)) or 1/K (``uniform``). A client that did not
    touch row m contributes Δ_{i,m} = 0, which is exactly what dense FedAvg
    averages in: the result equals dense FedAvg on the full tables, at
    O(touched rows) cost.

    Parameters
    ----------
    r : SparseRound
    weighting : {"samples", "uniform"}

    Returns
    -------
    SparseRows
        Global delta at every touched row; empty if no client took part
        (K = 0, or Σ n_i = 0 with ``samples``).

    Raises
    ------
    ValueError
        Unknown ``weighting``.

    >>> r = SparseRound.from_updates([
    ...     SparseUpdate(np.array([3]), np.array([[1.0]]), np.array([1]), n_samples=3),
    ...     SparseUpdate(np.array([3, 7]), np.array([[2.0], [4.0]]), np.array([1, 1]), n_samples=1)])
    >>> fedavg(r).ids, fedavg(r).rows.ravel()         # row 3: (3·1 + 1·2)/4, row 7: 1·4/4
    (array([3, 7]), array([1.25, 1.  ]))
    """
    w = _client_weights(r, weighting)
    total = w.sum()
    if r.n_clients == 0 or total <= 0:
        return _empty(r)
    ids, sums = segment_sum(r.ids, r.rows * (w / total)[r.client, None])
    return SparseRows(ids=ids, rows=sums)


def simple_avg(r: SparseRound) -> SparseRows:
    """SimpleAvg: the non-weighted mean (1/K) Σ_i Δ_{i,m} (FedNCF, paper 003, §5.3).

    Identical to :func:`fedavg` with ``weighting="uniform"`` (FedSEA's average);
    kept under the paper's name because FedNCF compares the two.
    """
    return fedavg(r, "uniform")


def mf_fedavg(r: SparseRound, weighting: str = "clients") -> SparseRows:
    """MF-FedAvg for an embedding table: each row averaged over the clients that touched it.

    Δ̄_m = (1/|C_m|) Σ_{i∈C_m} Δ_{i,m}, with C_m the clients of the round whose
    update carries row m (FedNCF, paper 003, §3.2–3.3: the item profile is
    aggregated "based on the number of users who updated each item"; MF-SecAvg
    without the masks). The dense network weights of the same model are
    averaged with :func:`~streamfl.aggregation.weighted_average` by samples
    (FedAvg), as the paper does.

    Parameters
    ----------
    r : SparseRound
    weighting : {"clients", "row_samples"}
        ``clients`` is the paper's rule. ``row_samples`` weighs client i's row
        by its count c_{i,m} (samples that involved m): Σ c_{i,m} Δ_{i,m} / Σ c_{i,m}.

    Raises
    ------
    ValueError
        Unknown ``weighting``, or every count of a row is 0 with ``row_samples``.

    >>> r = SparseRound.from_updates([
    ...     SparseUpdate(np.array([3]), np.array([[1.0]]), np.array([5]), n_samples=9),
    ...     SparseUpdate(np.array([3, 7]), np.array([[2.0], [4.0]]), np.array([1, 2]), n_samples=1)])
    >>> mf_fedavg(r).rows.ravel(), mf_fedavg(r, "row_samples").rows.ravel()
    (array([1.5, 4. ]), array([1.16666667, 4.        ]))
    """
    if weighting not in ("clients", "row_samples"):
        raise ValueError(f"The 'weighting' parameter of mf_fedavg must be 'clients' or 'row_samples'. "
                         f"Got {weighting!r} instead.")
    if r.ids.shape[0] == 0:
        return _empty(r)
    w = np.ones(r.ids.shape[0]) if weighting == "clients" else r.counts.astype(np.float64)
    ids, sums = segment_sum(r.ids, np.concatenate([r.rows * w[:, None], w[:, None]], axis=1))
    if (sums[:, -1] <= 0).any():
        raise ValueError(f"Row {int(ids[sums[:, -1] <= 0][0])} has zero total count; with weighting='row_samples' "
                         "every touched row needs a positive count.")
    return SparseRows(ids=ids, rows=sums[:, :-1] / sums[:, -1:])


def row_heat(r: SparseRound, n_rows: int, weighting: str = "uniform") -> np.ndarray:
    """Heat of every row: H_m = Σ_{i involving m} w_i, shape (n_rows,).

    FedSubAvg (paper 000, §3) measures a feature's heat by the number of
    clients whose data involve it (w_i = 1); with ``samples`` each client
    counts with its sample count n_i (the weighting of the authors' code,
    ``coef_statistic.py``: total samples over the samples of the involving
    clients). ``r`` holds the *whole population's* report of touched rows
    (rows themselves are not used), so this is O(n + n_rows) and is done once
    per period, not per round.
    """
    w = _client_weights(r, weighting)
    return np.bincount(r.ids, weights=w[r.client], minlength=n_rows).astype(np.float64)


def fedsubavg(r: SparseRound, heat: np.ndarray, population: int, weighting: str = "uniform") -> SparseRows:
    """FedSubAvg: each row's update rescaled by the inverse of its heat.

    Δ̄_m = (N / (K H_m)) Σ_{i∈S} w_i Δ_{i,m},   H_m = Σ_{i∈P, i involves m} w_i,

    for a round of K clients S sampled uniformly (without replacement) from a
    population P of N clients, with w_i = 1 (``uniform``: H_m = n_m, the number
    of clients involving m, and the coefficient N/(K n_m) of paper 000,
    Algorithm 1) or w_i = n_i (``samples``).

    Unbiasedness (the property that defines FedSubAvg, paper 000, abstract:
    "the expectation of the global update of each model parameter is equal
    to the average of the local updates of the clients who involve it"): each
    client is in S with probability K/N, and Δ_{i,m} = 0 for clients not
    involving m, so

        E[Δ̄_m] = (N / (K H_m)) Σ_{i∈P} (K/N) w_i Δ_{i,m} = Σ_{i involving m} w_i Δ_{i,m} / H_m,

    the w-weighted mean of the involving clients' updates. FedAvg's
    expectation is the same mean times H_m / Σ_{i∈P} w_i: a cold row (small
    H_m) moves that much slower (paper 000, §1). With full participation
    (S = P) the rule is exactly the mean over the involving clients; with
    ``heat`` counted over the round's own clients and N = K it equals
    :func:`mf_fedavg`.

    Parameters
    ----------
    r : SparseRound
        The K sampled clients' updates.
    heat : ndarray (n_rows,) float
        H_m over the population (:func:`row_heat`); only the touched rows are read.
    population : int
        N ≥ K, the clients the round was sampled from.
    weighting : {"uniform", "samples"}
        Must match the weighting ``heat`` was computed with.

    Raises
    ------
    ValueError
        Unknown ``weighting``; N < K; a touched row whose heat is ≤ 0 (the
        heat must count every client that involves the row).

    >>> r = SparseRound.from_updates([
    ...     SparseUpdate(np.array([0, 1]), np.array([[1.0], [1.0]]), np.array([1, 1]), n_samples=1),
    ...     SparseUpdate(np.array([0]), np.array([[3.0]]), np.array([1]), n_samples=1)])
    >>> heat = np.array([4.0, 1.0])          # of N = 8 clients, 4 involve row 0 and 1 involves row 1
    >>> fedsubavg(r, heat, population=8).rows.ravel()     # row 0: 8/(2·4)·(1+3), row 1: 8/(2·1)·1
    array([4., 4.])
    """
    w = _client_weights(r, weighting)
    K = r.n_clients
    if population < K:
        raise ValueError(f"FedSubAvg's population N = {population} is smaller than the round's K = {K} clients.")
    if K == 0 or r.ids.shape[0] == 0:
        return _empty(r)
    ids, sums = segment_sum(r.ids, r.rows * w[r.client, None])
    h = np.asarray(heat, dtype=np.float64)[ids]
    if (h <= 0).any():
        raise ValueError(f"Row {int(ids[h <= 0][0])} was touched in the round but its heat is {float(h[h <= 0][0])}; "
                         "the heat must count every client of the population that involves the row.")
    return SparseRows(ids=ids, rows=sums * (population / (K * h))[:, None])
