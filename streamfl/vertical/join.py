"""Streaming join of per-party records by sample id (what the server does with the parties' streams)."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from .data import VerticalBatch


class SampleJoiner:
    """Buffers each party's feature rows and the labels until a sample id is complete.

    In vertical mode each party's stream carries its own slice keyed by sample
    id, in its own order; a sample can be learned from once all M slices and
    its label have arrived. :meth:`pop` returns the complete samples in the
    order they became complete. Cost O(1) per arriving row (a dict per id).

    Parameters
    ----------
    n_parties : int
        M.
    max_pending : int or None
        Refuse to hold more than this many incomplete ids (a party that never
        sends would otherwise grow the buffer without bound).

    Raises
    ------
    ValueError
        On an unknown party, a width that changes, an id sent twice by one
        source, or more than ``max_pending`` incomplete ids.

    Examples
    --------
    >>> j = SampleJoiner(2)
    >>> j.add(2, [7, 8], np.array([[0.7], [0.8]]))
    >>> j.add_labels([8, 7], np.array([1, 0]))
    >>> j.add(1, [8], np.array([[8.0, 8.5]]))
    >>> b = j.pop()
    >>> b.ids.tolist(), b.parts[0].tolist(), b.parts[1].tolist(), b.y.tolist(), j.pending
    ([8], [[8.0, 8.5]], [[0.8]], [1], 1)
    """

    def __init__(self, n_parties: int, max_pending: int | None = None):
        if n_parties < 1:
            raise ValueError(f"n_parties must be ≥ 1, got {n_parties}")
        self.n_parties = n_parties
        self.max_pending = max_pending
        self._pending: dict[int, dict[int, object]] = {}
        self._ready: OrderedDict[int, dict[int, object]] = OrderedDict()
        self._widths: dict[int, int] = {}

    @property
    def ready(self) -> int:
        """Complete ids waiting to be popped."""
        return len(self._ready)

    @property
    def pending(self) -> int:
        """Ids seen but still missing a slice or the label."""
        return len(self._pending)

    def add(self, party: int, ids, rows: np.ndarray) -> None:
        """Rows of party ``party`` (1..M): ids (n,), rows (n, D_m)."""
        if not 1 <= party <= self.n_parties:
            raise ValueError(f"party must be in 1..{self.n_parties}, got {party}")
        rows = np.asarray(rows)
        if rows.ndim != 2 or rows.shape[0] != len(ids):
            raise ValueError(f"party {party} sent {len(ids)} ids with rows of shape {rows.shape}")
        width = self._widths.setdefault(party, rows.shape[1])
        if rows.shape[1] != width:
            raise ValueError(f"party {party} sent rows of width {rows.shape[1]} after rows of width {width}")
        for i, row in zip(np.asarray(ids).tolist(), rows):
            self._put(party, int(i), row)

    def add_labels(self, ids, y) -> None:
        """Labels y (n,) of ids (n,)."""
        for i, label in zip(np.asarray(ids).tolist(), np.asarray(y)):
            self._put(0, int(i), label)

    def _put(self, source: int, i: int, value) -> None:
        if i in self._ready:
            raise ValueError(f"sample id {i} already complete; {'labels' if source == 0 else f'party {source}'} sent it again")
        slot = self._pending.get(i)
        if slot is None:
            if self.max_pending is not None and len(self._pending) >= self.max_pending:
                raise ValueError(f"more than {self.max_pending} sample ids wait for a missing party slice "
                                 f"or label; the oldest is {next(iter(self._pending))}")
            slot = self._pending[i] = {}
        if source in slot:
            raise ValueError(f"sample id {i} sent twice by {'labels' if source == 0 else f'party {source}'}")
        slot[source] = value
        if len(slot) == self.n_parties + 1:
            self._ready[i] = self._pending.pop(i)

    def pop(self, max_samples: int | None = None) -> VerticalBatch | None:
        """The complete samples (at most ``max_samples``, oldest first), or None if none is complete."""
        if not self._ready:
            return None
        n = len(self._ready) if max_samples is None else min(max_samples, len(self._ready))
        ids, slots = [], []
        for _ in range(n):
            i, slot = self._ready.popitem(last=False)
            ids.append(i)
            slots.append(slot)
        parts = tuple(np.stack([s[m] for s in slots]) for m in range(1, self.n_parties + 1))
        return VerticalBatch(np.array(ids, dtype=np.int64), parts, np.array([s[0] for s in slots]))
