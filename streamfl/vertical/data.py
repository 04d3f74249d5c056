"""Vertically partitioned data: every party holds a disjoint slice of the feature columns of the same samples.

A :class:`VerticalBatch` is what one C-VFL round or one streaming step
consumes: B sample ids, party m's feature slice X_m^B of shape (B, D_m) for
m = 1..M, and the B labels (C-VFL §2: the server and all parties hold the
labels). A :class:`VerticalDataset` is the same for all N samples.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class VerticalBatch:
    """B samples split by features across M parties.

    Attributes
    ----------
    ids : ndarray (B,) int64
        Sample ids (the join key).
    parts : tuple of M ndarrays, party m's of shape (B, D_m)
        The feature slices, in the order of ``ids``.
    y : ndarray (B,)
        Labels.
    """

    ids: np.ndarray
    parts: tuple[np.ndarray, ...]
    y: np.ndarray

    def __post_init__(self):
        n = len(self.ids)
        if not self.parts:
            raise ValueError("a vertical batch needs at least one party's features")
        for m, X in enumerate(self.parts, start=1):
            if X.ndim != 2 or X.shape[0] != n:
                raise ValueError(f"party {m}'s features have shape {X.shape}; expected ({n}, D_{m}) for {n} ids")
        if len(self.y) != n:
            raise ValueError(f"{len(self.y)} labels for {n} ids")

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def n_parties(self) -> int:
        return len(self.parts)

    @property
    def widths(self) -> tuple[int, ...]:
        """(D_1, …, D_M)."""
        return tuple(X.shape[1] for X in self.parts)

    def take(self, index: np.ndarray) -> "VerticalBatch":
        """The samples at positions ``index`` (any integer array), as a new batch."""
        return VerticalBatch(self.ids[index], tuple(X[index] for X in self.parts), self.y[index])


#: The whole data set is a batch of N samples.
VerticalDataset = VerticalBatch


def split_columns(X: np.ndarray, y: np.ndarray, groups: Sequence[Sequence[int]],
                  ids: np.ndarray | None = None) -> VerticalBatch:
    """Split the columns of X (N, D) into M disjoint party slices.

    Parameters
    ----------
    X : ndarray (N, D)
    y : ndarray (N,)
    groups : M lists of column indices
        Party m gets ``X[:, groups[m-1]]``. Groups must be disjoint; columns in no group are
        left out (say so where the split is reported).
    ids : ndarray (N,), default 0..N−1

    Raises
    ------
    ValueError
        If groups overlap, are empty, or name columns outside 0..D−1.

    >>> b = split_columns(np.arange(12.0).reshape(3, 4), np.array([0, 1, 0]), [[0, 1], [3]])
    >>> b.widths, b.parts[1].ravel().tolist()
    ((2, 1), [3.0, 7.0, 11.0])
    """
    X = np.asarray(X)
    seen: set[int] = set()
    for m, g in enumerate(groups, start=1):
        g = list(g)
        if not g:
            raise ValueError(f"party {m} gets no columns")
        bad = [c for c in g if not 0 <= c < X.shape[1]]
        if bad:
            raise ValueError(f"party {m}'s columns {bad} are outside 0..{X.shape[1] - 1}")
        if seen & set(g):
            raise ValueError(f"column(s) {sorted(seen & set(g))} are given to more than one party")
        seen |= set(g)
    ids = np.arange(len(X), dtype=np.int64) if ids is None else np.asarray(ids, dtype=np.int64)
    return VerticalBatch(ids, tuple(X[:, list(g)] for g in groups), np.asarray(y))


def join_by_id(parties: Sequence[tuple[np.ndarray, np.ndarray]],
               labels: tuple[np.ndarray, np.ndarray]) -> tuple[VerticalBatch, dict]:
    """Join M party tables and the labels on sample id (an inner join, in the order of the label ids).

    Parameters
    ----------
    parties : M pairs (ids (N_m,), X_m (N_m, D_m))
    labels : pair (ids (N,), y (N,))

    Returns
    -------
    batch : VerticalBatch
        The samples present in every table.
    report : dict
        ``{"joined": n, "dropped": {"labels": k_0, "party 1": k_1, …}}``: how many rows of each
        table had an id missing elsewhere and were left out (to be shown in the run header).

    Raises
    ------
    ValueError
        If a table repeats an id, or no id is common to all tables.

    >>> b, rep = join_by_id([(np.array([3, 1, 2]), np.array([[30.], [10.], [20.]])),
    ...                      (np.array([1, 3]), np.array([[1.], [3.]]))],
    ...                     (np.array([1, 2, 3]), np.array([0, 1, 1])))
    >>> b.ids.tolist(), b.parts[0].ravel().tolist(), rep["dropped"]
    ([1, 3], [10.0, 30.0], {'labels': 1, 'party 1': 1, 'party 2': 0})
    """
    tables = [("labels", *labels)] + [(f"party {m}", ids, X) for m, (ids, X) in enumerate(parties, start=1)]
    common = None
    for name, ids, _ in tables:
        ids = np.asarray(ids, dtype=np.int64)
        if len(np.unique(ids)) != len(ids):
            raise ValueError(f"{name} repeats sample ids; each id must appear once per table")
        common = set(ids.tolist()) if common is None else common & set(ids.tolist())
    lab_ids = np.asarray(labels[0], dtype=np.int64)
    keep = np.array([i for i in lab_ids.tolist() if i in common], dtype=np.int64)
    if len(keep) == 0:
        raise ValueError("no sample id is present in every party's table and the labels")
    dropped, cols = {}, []
    for name, ids, X in tables:
        ids = np.asarray(ids, dtype=np.int64)
        order = np.argsort(ids, kind="stable")
        pos = order[np.searchsorted(ids[order], keep)]
        dropped[name] = len(ids) - len(keep)
        cols.append(np.asarray(X)[pos])
    return VerticalBatch(keep, tuple(cols[1:]), cols[0]), {"joined": int(len(keep)), "dropped": dropped}
