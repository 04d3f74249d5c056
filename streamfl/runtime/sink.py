"""Per-step metrics streamed to disk, chunk by chunk (CSV or Parquet), and what is written at the run's end."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..regret.rows import Rows, RowsSink

if TYPE_CHECKING:            # pandas only for DataFrames handed in (parquet, other trackers), imported by them
    import pandas as pd

FLOAT_FORMAT = "%.10g"


def csv_block(frame: pd.DataFrame, header: bool) -> str | None:
    """The CSV text of ``frame`` exactly as ``frame.to_csv(index=False, float_format="%.10g")`` writes it.

    Floats are printed with ``%.10g`` and NaN as an empty field, integers with
    ``%d``, booleans as ``True``/``False``; the header (when asked) goes
    through the csv module, with its minimal quoting. The rows are formatted
    by one format string per row over the columns' Python values (no
    per-cell pandas formatter): about 40× faster than ``to_csv`` on the
    tracker's frames, byte-identical (tests/test_sink.py).

    Parameters
    ----------
    frame : DataFrame, n rows
    header : bool
        Start with the line of column names.

    Returns
    -------
    str, or None when a column is neither float, integer nor boolean (the
    caller falls back to pandas).
    """
    kinds = [dt.kind for dt in frame.dtypes]
    if any(k not in "fiub" for k in kinds):
        return None
    ints = [i for i, k in enumerate(kinds) if k in "iu"]
    exact = len(frame) > 0 and "b" not in kinds and all(
        np.abs(frame.iloc[:, i].to_numpy()).max() <= 2 ** 53 for i in ints)
    if exact:
        is_int = np.array([k in "iu" for k in kinds], bool)
        return table_csv(list(frame.columns), frame.to_numpy(dtype=np.float64), is_int, header)
    specs = [FLOAT_FORMAT if k == "f" else "%d" if k in "iu" else "%s" for k in kinds]
    out = io.StringIO()
    if header:
        csv.writer(out, lineterminator="\n").writerow([str(c) for c in frame.columns])
    n = len(frame)
    if n:
        fmt = ",".join(specs)
        lists = [frame.iloc[:, i].to_numpy().tolist() for i in range(len(kinds))]
        body = "\n".join([fmt % row for row in zip(*lists)])
        out.write(_blank_nan(body))
        out.write("\n")
    return out.getvalue()


def table_csv(names, table: np.ndarray, is_int: np.ndarray, header: bool) -> str:
    """CSV text of a float64 table (n, C): ``%.10g`` per cell (``%d`` in the ``is_int`` columns, whose
    values are integers of magnitude ≤ 2^53), NaN as an empty field; the header line of ``names`` first
    when asked (csv module quoting). Byte-identical to pandas' ``to_csv(index=False, float_format="%.10g")``
    of the same columns.

    The cells are formatted by one ``%`` over a format string for the whole
    block: Python's own float formatting, the fastest way to these exact bytes
    found (a vectorised %.10g in numpy measured no faster, and pyarrow's CSV
    writer prints shortest round-trip digits, not %.10g).
    """
    out = io.StringIO()
    if header:
        csv.writer(out, lineterminator="\n").writerow([str(c) for c in names])
    n = table.shape[0]
    if n:
        fmt = ",".join("%d" if i else FLOAT_FORMAT for i in is_int.tolist())
        body = (fmt + "\n") * n % tuple(table.ravel().tolist())
        if np.isnan(table[:, 0]).any():
            body = _blank_nan(body[:-1]) + "\n"
        elif np.isnan(table).any():               # NaN only after the first column: one pass
            body = body.replace(",nan", ",")
        out.write(body)
    return out.getvalue()


def _blank_nan(body: str) -> str:
    """NaN prints as "nan" and is the only field that can: pandas writes it as an empty field."""
    return ("\n" + body).replace(",nan", ",").replace("\nnan", "\n")[1:]


class MetricsSink(RowsSink):
    """Append the tracker's per-step rows to ``metrics.csv`` / ``metrics.parquet``.

    Memory stays constant in T: each chunk's rows are written and dropped.
    Takes a chunk as :class:`~streamfl.regret.rows.Rows` (the regret tracker's;
    no DataFrame is built for a CSV file) or as a DataFrame. CSV rows are
    formatted by :func:`table_csv` / :func:`csv_block` (byte-identical to
    pandas' ``to_csv`` with ``float_format="%.10g"``).
    """

    def __init__(self, run_dir: Path, fmt: str = "csv"):
        self.fmt = fmt
        self.path = Path(run_dir) / f"metrics.{fmt}"
        self._writer = None
        self._header = True

    def __call__(self, frame: "Rows | pd.DataFrame") -> None:
        if isinstance(frame, Rows):
            if self.fmt == "csv":
                table, is_int, exact = frame.table()
                if exact:
                    with open(self.path, "w" if self._header else "a", encoding="utf-8", newline="") as f:
                        f.write(table_csv(frame.names, table, is_int, self._header))
                    self._header = False
                    return
            frame = frame.frame()
        if self.fmt == "csv":
            text = csv_block(frame, self._header)
            if text is None:
                frame.to_csv(self.path, mode="w" if self._header else "a", header=self._header, index=False,
                             float_format=FLOAT_FORMAT)
            else:
                with open(self.path, "w" if self._header else "a", encoding="utf-8", newline="") as f:
                    f.write(text)
            self._header = False
            return
        import pyarrow as pa
        import pyarrow.parquet as pq
        table = pa.Table.from_pandas(frame, preserve_index=False)
        if self._writer is None:
            self._writer = pq.ParquetWriter(self.path, table.schema)
        self._writer.write_table(table)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def add_columns(path: Path, columns) -> None:
    """Append end-of-run columns to a finished metrics file (CSV or Parquet), rewriting it.

    Parameters
    ----------
    path : Path
        metrics.csv or metrics.parquet, n rows (one per step).
    columns : mapping name -> pandas Series of n values, in step order
    """
    import pandas as pd
    frame = pd.read_csv(path) if path.suffix == ".csv" else pd.read_parquet(path)
    for name in columns:
        frame[name] = columns[name].to_numpy()
    if path.suffix == ".csv":
        frame.to_csv(path, index=False, float_format=FLOAT_FORMAT)
    else:
        frame.to_parquet(path, index=False)


def jsonable(obj):
    """``obj`` (nested dicts, lists, tuples) as plain JSON values: numpy scalars as Python ones, NaN and ±inf as None.

    JSON has no NaN: a figure that does not exist (no comparator, no run) is
    written as ``null``. Dict keys become strings; other objects pass unchanged.

    >>> jsonable({1: [np.float64(0.5), float("nan"), np.int64(3), np.bool_(True)]})
    {'1': [0.5, None, 3, True]}
    """
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, (np.floating, float)):
        return None if not np.isfinite(obj) else float(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    return obj
