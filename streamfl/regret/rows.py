"""One chunk of per-step rows as a table of columns, without pandas.

The regret tracker produces a few hundred columns per chunk (64 clients × 5
per-client columns at M = 64). Building a pandas DataFrame for every chunk,
and importing pandas at all (~0.3 s of start-up), cost more than the rest of
the bookkeeping, while the metrics file only needs the numbers in order.
:class:`Rows` keeps them as one float64 block (n, C) with the column names
and which columns hold integers; :meth:`Rows.frame` gives the DataFrame when
one is wanted. Sinks that take a :class:`Rows` directly subclass
:class:`RowsSink` (the metrics file, :class:`streamfl.runtime.sink.MetricsSink`);
any other sink callable receives ``rows.frame()``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd


class Rows:
    """n per-step rows of named columns, in insertion order.

    Columns are 1-D arrays of n values (``add``, ``add_columns``) or groups of
    columns given as one (n, k) float64 array (``add_group``: the per-client
    columns, copied once instead of column by column). Float64 columns go to
    one (n, F) block; other columns (the integer step ``t``, byte counts) are
    kept as given.

    Examples
    --------
    >>> r = Rows(2)
    >>> r.add_columns({"t": np.array([1, 2]), "loss": np.array([0.5, 0.25])})
    >>> r.add_group(["c0", "c1"], np.array([[1.0, 2.0], [3.0, 4.0]]))
    >>> r.names, r["c1"].tolist(), r.last()["t"]
    (['t', 'loss', 'c0', 'c1'], [2.0, 4.0], 2)
    """

    def __init__(self, n: int):
        self.n = int(n)
        self.names: list[str] = []
        self._parts: list = []          # (first column index, (n, k) float64 array) in order
        self._others: dict = {}         # column index -> 1-D array that is not float64 (n,)
        self._width = 0                 # float columns so far
        self._float_at: dict = {}       # column index -> (part, column within the part)

    def add(self, name: str, values) -> None:
        """Append one column of n values."""
        a = np.asarray(values)
        i = len(self.names)
        if a.dtype == np.float64 and a.shape == (self.n,):
            self._float_at[i] = (len(self._parts), 0)
            self._parts.append((i, a[:, None]))
        else:
            self._others[i] = a
        self.names.append(str(name))

    def add_columns(self, cols: dict) -> None:
        """Append the columns of a dict {name: n values}, in its order."""
        for name, values in cols.items():
            self.add(name, values)

    def add_group(self, names, values: np.ndarray) -> None:
        """Append k float64 columns from one (n, k) array (column j is named ``names[j]``)."""
        names = list(names)
        values = np.asarray(values, dtype=np.float64)
        if values.shape != (self.n, len(names)):
            raise ValueError(f"Rows.add_group: values of shape {values.shape}, expected {(self.n, len(names))}")
        i = len(self.names)
        for j in range(len(names)):
            self._float_at[i + j] = (len(self._parts), j)
        self._parts.append((i, values))
        self.names.extend(names)

    def __len__(self) -> int:
        return self.n

    @property
    def columns(self) -> list[str]:
        return list(self.names)

    def __getitem__(self, name: str) -> np.ndarray:
        """The column ``name`` (n,)."""
        i = self.names.index(name)
        if i in self._others:
            return self._others[i]
        p, j = self._float_at[i]
        return self._parts[p][1][:, j]

    def last(self) -> dict:
        """{name: value at the last row} (Python scalars)."""
        if not self.n:
            return {}
        out = {}
        for i, name in enumerate(self.names):
            if i in self._others:
                out[name] = self._others[i][-1].item()
            else:
                p, j = self._float_at[i]
                out[name] = float(self._parts[p][1][-1, j])
        return out

    def table(self):
        """(float64 (n, C) of every column, bool (C,) integer columns, bool: every integer ≤ 2^53 in magnitude).

        Integer columns are converted to float64 (exact when the third item is True).
        """
        C = len(self.names)
        out = np.empty((self.n, C))
        is_int = np.zeros(C, bool)
        exact = True
        for i0, block in self._parts:
            out[:, i0:i0 + block.shape[1]] = block
        for i, a in self._others.items():
            kind = a.dtype.kind
            if kind in "iu":
                is_int[i] = True
                exact = exact and (not len(a) or int(np.abs(a).max()) <= 2 ** 53)
            elif kind != "f":
                exact = False
            out[:, i] = a.astype(np.float64) if kind in "iuf" else np.nan
        return out, is_int, exact

    def frame(self) -> "pd.DataFrame":
        """The rows as a DataFrame: ``pd.DataFrame`` of the columns (same names, order and dtypes)."""
        import pandas as pd     # here: a run that writes its metrics file from Rows never imports pandas
        floats = [i for i in range(len(self.names)) if i not in self._others]
        if len(floats) < 2:
            return pd.DataFrame({name: self[name] for name in self.names})
        block = np.empty((self.n, len(floats)))
        pos = 0
        for _, part in self._parts:
            block[:, pos:pos + part.shape[1]] = part
            pos += part.shape[1]
        frame = pd.DataFrame(block, columns=[self.names[i] for i in floats], copy=False)
        for i in sorted(self._others):
            frame.insert(i, self.names[i], self._others[i])
        return frame


class RowsSink:
    """A sink that takes a chunk's :class:`Rows` as they are (no DataFrame built for it).

    Subclasses implement ``__call__(rows)``; they may also receive DataFrames
    (trackers that build their own frames). A tracker hands any other sink
    callable ``rows.frame()``.
    """

    def __call__(self, rows) -> None:  # pragma: no cover - interface
        raise NotImplementedError


def deliver(sink, rows: Rows) -> None:
    """Hand ``rows`` to ``sink``: as they are to a :class:`RowsSink`, as a DataFrame to any other callable."""
    if sink is None:
        return
    sink(rows if isinstance(sink, RowsSink) else rows.frame())
