"""The updates that travel between clients and server: what client models upload and what aggregation returns.

Client models (:mod:`streamfl.models`) build and apply these records, and
aggregation rules (:mod:`streamfl.aggregation`) read and return them; both
import this module and neither imports the other.

* Dense models upload an ndarray (M, ...) of the M clients' models and get
  one model back; no type is needed.
* A table whose clients touch few rows (item embeddings, hashed features)
  travels as sparse rows: a client's :class:`SparseUpdate`, the round's
  :class:`SparseRound` (every client's rows concatenated), and the rules'
  result, :class:`SparseRows`, applied to the server's table by :func:`apply_rows`.
* A model with such tables and dense weights uploads a :class:`ModelUpdate`
  and takes a :class:`GlobalUpdate`.

Conventions: ``rows`` are **deltas** Δ_{i,m} = x_{i,m} − x̄_m, the client's row
after local training minus the global row it started from (an untouched row
has Δ = 0 and is not sent); a rule's result is the global delta Δ̄ at the
rows some client touched, with sorted distinct ids, and the new global table
is x̄ + Δ̄ (:func:`apply_rows`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np


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


@dataclass
class ModelUpdate:
    """One round's upload of M clients whose model has embedding tables.

    Attributes
    ----------
    sparse : dict name -> SparseRound
        For every aggregated embedding table, the rows each client touched
        this round (client index, row ids, deltas = local row − global row,
        samples per row; :class:`SparseRound`).
    dense : dict name -> ndarray (M, ...)
        Stacked dense weights (e.g. the prediction layer), aggregated by a
        weighted average.
    n_samples : ndarray (M,)
        Samples each client learned from during the round.
    nbytes : int
        Payload bytes of the round's uploads (float64 rows and weights,
        int64 ids and counts) of the clients that took part.
    """

    sparse: dict
    dense: dict
    n_samples: np.ndarray
    nbytes: int = 0


@dataclass
class GlobalUpdate:
    """The server's answer to a :class:`ModelUpdate`: global deltas of sparse tables and new dense weights.

    Attributes
    ----------
    sparse : dict name -> SparseRows
        The global delta at the rows some client touched (sorted ids).
    dense : dict name -> ndarray
        The aggregated dense weights (one model, no client axis).
    nbytes : int
        Payload bytes of the broadcast (to every client).
    """

    sparse: dict = field(default_factory=dict)
    dense: dict = field(default_factory=dict)
    nbytes: int = 0
