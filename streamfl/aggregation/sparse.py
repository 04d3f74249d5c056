"""Aggregation rules for sparse updates: only the rows a client touched travel.

A model with a large embedding table (items of a recommender, hashed
features of a click model) is updated by each client only at the rows its
data involves (FedSubAvg, paper 000, §1: "each client's local data tend to
interact with part of features, updating only a small submodel"). A client's
*update* of such a table is therefore sparse: the ids of the rows it touched,
the change of those rows, and how many of its samples involved each row.

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

from dataclasses import dataclass
from typing import Sequence

import numpy as np

WEIGHTINGS = ("uniform", "samples")


@dataclass(frozen=True)
class SparseUpdate:
    """One client's update of one table, restricted to the rows it touched.

    Attributes
    ----------
    ids : ndarray (n,) int64
        Distinct row ids, 0 ≤ id < table rows.
    rows : ndarray (n, k) float64
        Δ at those rows (local row after training minus the global row).
    counts : ndarray (n,) int64
        How many of the client's samples in the round involved each row (≥ 0).
    n_samples : int
        Samples the client learned from in the round (FedAvg's n_i, ≥ 0).
    """

    ids: np.ndarray
    rows: np.ndarray
    counts: np.ndarray
    n_samples: int


@dataclass(frozen=True)
class SparseRows:
    """Rows of a table by id: a global delta, or a table's rows to send.

    Attributes
    ----------
    ids : ndarray (u,) int64, sorted and distinct
    rows : ndarray (u, k) float64
    """

    ids: np.ndarray
    rows: np.ndarray


@dataclass(frozen=True)
class SparseRound:
    """The sparse updates of the K clients of one round, concatenated.

    Row j of the round belongs to client ``client[j]``; the rows of one client
    need not be contiguous. This is the layout the rules work on: every rule
    is a few vectorised operations over the n rows, with no loop over
    clients.

    Attributes
    ----------
    client : ndarray (n,) int64
        Index 0 ≤ i < K of the client each row comes from.
    ids : ndarray (n,) int64
        Row ids (distinct within one client).
    rows : ndarray (n, k) float64
        Deltas Δ_{i,m}.
    counts : ndarray (n,) int64
        Samples of client i that involved row m.
    n_samples : ndarray (K,) int64
        n_i, samples each client learned from in the round. Clients with no
        touched row still count in K (they were sampled and sent nothing).

    Raises
    ------
    ValueError
        From :meth:`validate`: inconsistent shapes, negative ids, counts or
        sample counts, client indices out of range, or a row id repeated
        within one client.
    """

    client: np.ndarray
    ids: np.ndarray
    rows: np.ndarray
    counts: np.ndarray
    n_samples: np.ndarray

    @property
    def n_clients(self) -> int:
        """K, the clients of the round."""
        return int(self.n_samples.shape[0])

    @property
    def width(self) -> int:
        """k, the width of a row."""
        return int(self.rows.shape[1])

    @classmethod
    def from_updates(cls, updates: Sequence[SparseUpdate], width: int | None = None) -> "SparseRound":
        """Concatenate per-client updates (client i = position in ``updates``); validated.

        ``width`` is needed only when every update is empty.
        """
        if not updates and width is None:
            raise ValueError("An empty round needs its row width: pass width=k.")
        k = width if width is not None else np.asarray(updates[0].rows).shape[1]
        lengths = np.array([len(u.ids) for u in updates], dtype=np.int64)
        cat = (lambda xs, dt: np.concatenate(xs).astype(dt, copy=False)) if updates else (lambda xs, dt: np.zeros(0, dt))
        out = cls(client=np.repeat(np.arange(len(updates), dtype=np.int64), lengths),
                  ids=cat([np.asarray(u.ids) for u in updates], np.int64),
                  rows=(np.concatenate([np.asarray(u.rows, dtype=np.float64).reshape(-1, k) for u in updates])
                        if updates else np.zeros((0, k))),
                  counts=cat([np.asarray(u.counts) for u in updates], np.int64),
                  n_samples=np.array([u.n_samples for u in updates], dtype=np.int64))
        out.validate()
        return out

    def updates(self) -> list[SparseUpdate]:
        """Split back into one :class:`SparseUpdate` per client (for transport; loops over clients)."""
        order = np.argsort(self.client, kind="stable")
        bounds = np.searchsorted(self.client[order], np.arange(self.n_clients + 1))
        return [SparseUpdate(ids=self.ids[order[a:b]], rows=self.rows[order[a:b]], counts=self.counts[order[a:b]],
                             n_samples=int(self.n_samples[i]))
                for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:]))]

    def validate(self, n_rows: int | None = None) -> "SparseRound":
        """Check shapes and ranges (once per round, not per sample); return self.

        Raises
        ------
        ValueError
            Naming the field and the offending value.
        """
        n = self.ids.shape[0]
        if self.ids.ndim != 1 or self.client.shape != (n,) or self.counts.shape != (n,):
            raise ValueError(f"A sparse round's client, ids and counts must all be (n,); got {self.client.shape}, "
                             f"{self.ids.shape}, {self.counts.shape}.")
        if self.rows.ndim != 2 or self.rows.shape[0] != n:
            raise ValueError(f"A sparse round's rows must be (n, k) = ({n}, k); got {self.rows.shape}.")
        if self.n_samples.ndim != 1 or (self.n_samples < 0).any():
            raise ValueError(f"n_samples must be (K,) and ≥ 0; got {self.n_samples!r}.")
        if n == 0:
            return self
        if self.ids.min() < 0 or (n_rows is not None and self.ids.max() >= n_rows):
            bad = self.ids[(self.ids < 0) | (self.ids >= (n_rows if n_rows is not None else np.inf))][0]
            raise ValueError(f"Row id {int(bad)} is outside the table (0 ≤ id < {n_rows if n_rows is not None else '∞'}).")
        if self.client.min() < 0 or self.client.max() >= self.n_clients:
            raise ValueError(f"Client indices must be in [0, {self.n_clients}); got {int(self.client.min())}.."
                             f"{int(self.client.max())}.")
        if (self.counts < 0).any():
            raise ValueError(f"Row counts must be ≥ 0; got {int(self.counts.min())}.")
        order = np.lexsort((self.ids, self.client))
        c, i = self.client[order], self.ids[order]
        dup = np.flatnonzero((c[1:] == c[:-1]) & (i[1:] == i[:-1]))
        if dup.size:
            raise ValueError(f"Client {int(c[dup[0]])} sends row {int(i[dup[0]])} twice; "
                             "a sparse update carries each touched row once.")
        return self


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


def apply_rows(table: np.ndarray, delta: SparseRows, scale: float = 1.0) -> np.ndarray:
    """x̄[ids] += scale · Δ̄, **in place** on the server's table; returns it. O(touched rows).

    Parameters
    ----------
    table : ndarray (n_rows, k)
    delta : SparseRows
        A rule's result (distinct ids, so plain fancy-index assignment is exact).
    scale : float
        Server learning rate (1 = plain averaging).

    >>> t = np.zeros((4, 1))
    >>> apply_rows(t, SparseRows(np.array([2]), np.array([[0.5]]))).ravel()
    array([0. , 0. , 0.5, 0. ])
    """
    if delta.ids.shape[0]:
        table[delta.ids] += scale * delta.rows if scale != 1.0 else delta.rows
    return table
