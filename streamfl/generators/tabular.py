"""Real tables replayed as federated streams.

A table (a :class:`pandas.DataFrame`, a CSV/Parquet file or one of the small
datasets bundled inside River's wheel) is put in stream order, split over
``M`` clients and cut into mini-batches of ``b`` rows: step ``k`` of client
``m`` is that client's ``k``-th block of ``b`` rows. Replaying a table is the
usual way to benchmark online learners on real data (prequential,
test-then-train evaluation); FedSEA's adversary here is simply the order of
the data, plus whatever drift :mod:`streamfl.generators.inject` or
``prior_shift`` adds on top.

Everything is computed once in :class:`TableStream`'s constructor; iterating
only slices the precomputed arrays, so replays are identical.
"""

from __future__ import annotations

import functools
import math
import numbers
import os
import re
from collections import Counter
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import pandas as pd

from streamfl.generators.base import Chunk, Stream

__all__ = ["river_dataset_names", "load_river_dataset", "load_table_file", "time_values", "TableStream"]

_TASKS = ("least_squares", "logistic", "softmax")
_SPLITS = ("contiguous", "dirichlet", "column")

#: Target names of River's bundled datasets (River only names them inside
#: ``__iter__``); datasets not listed here get a label column called "target".
_RIVER_LABELS = {
    "AirlinePassengers": "passengers",
    "Bananas": "label",
    "ChickWeights": "weight",
    "ImageSegments": "category",
    "Phishing": "is_phishing",
    "SP500Stocks": "next_day_return",
    "Shuttle": "anomaly",
    "TrumpApproval": "five_thirty_eight",
    "WaterFlow": "Water flow [l/s]",
}


# --------------------------------------------------------------------------- #
# Parameter validation (shared with inject.py and river_synth.py)
# --------------------------------------------------------------------------- #


def _param_error(name: str, owner: str, what: str, value) -> ValueError:
    return ValueError(f"The '{name}' parameter of {owner} must be {what}. Got {value!r} instead.")


def _check_int(value, name: str, owner: str, low: int | None = None, what: str | None = None) -> int:
    ok = isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))
    if ok and low is not None:
        ok = value >= low
    if not ok:
        raise _param_error(name, owner, what or (f"an int >= {low}" if low is not None else "an int"), value)
    return int(value)


def _check_float(
    value, name: str, owner: str, *, gt: float | None = None, ge: float | None = None, le: float | None = None,
    what: str | None = None,
) -> float:
    ok = isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)) and math.isfinite(value)
    if ok and gt is not None:
        ok = value > gt
    if ok and ge is not None:
        ok = value >= ge
    if ok and le is not None:
        ok = value <= le
    if not ok:
        if what is None:
            bounds = [f"> {gt:g}" if gt is not None else None, f">= {ge:g}" if ge is not None else None,
                      f"<= {le:g}" if le is not None else None]
            bounds = [b for b in bounds if b]
            what = "a float" + (" " + " and ".join(bounds) if bounds else "")
        raise _param_error(name, owner, what, value)
    return float(value)


def _check_bool(value, name: str, owner: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise _param_error(name, owner, "a bool", value)
    return bool(value)


def _check_choice(value, name: str, owner: str, choices: Sequence[str], allow_none: bool = False):
    if (value is None and allow_none) or (isinstance(value, str) and value in choices):
        return value
    what = "one of " + ", ".join(repr(c) for c in choices) + (" or None" if allow_none else "")
    raise _param_error(name, owner, what, value)


def _frozen(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


# --------------------------------------------------------------------------- #
# Loading tables
# --------------------------------------------------------------------------- #


@functools.lru_cache(maxsize=1)
def _river_bundled() -> dict[str, type]:
    from river import datasets
    from river.datasets import base

    single_output = {base.REG, base.BINARY_CLF, base.MULTI_CLF}
    found = {}
    for name in datasets.__all__:
        cls = getattr(datasets, name, None)
        if not (isinstance(cls, type) and issubclass(cls, base.FileDataset)) or issubclass(cls, base.RemoteDataset):
            continue
        try:
            ds = cls()
        except Exception:  # pragma: no cover - a dataset needing arguments
            continue
        if ds.task in single_output and os.path.isfile(ds.path):
            found[name] = cls
    return dict(sorted(found.items()))


def river_dataset_names() -> list[str]:
    """Names of the single-target River datasets whose data ship inside River's wheel.

    These load offline (no download). They are found by inspecting
    :mod:`river.datasets`: subclasses of ``FileDataset`` that are not
    ``RemoteDataset`` and whose file exists in the installed package.
    Multi-output datasets (``SolarFlare``, ``Yeast``) are left out because the
    engine learns a single target.

    Returns
    -------
    list of str
        Sorted class names of :mod:`river.datasets`.

    Examples
    --------
    >>> names = river_dataset_names()
    >>> "Phishing" in names, "Elec2" in names
    (True, False)
    """
    return list(_river_bundled())


@functools.lru_cache(maxsize=16)
def _load_river(name: str) -> tuple[pd.DataFrame, str]:
    from river.datasets import base

    cls = _river_bundled()[name]
    ds = cls()
    label = _RIVER_LABELS.get(name, "target")
    xs, ys = [], []
    for x, y in ds:
        xs.append(x)
        ys.append(y)
    table = pd.DataFrame.from_records(xs)
    table.columns = [str(c) for c in table.columns]
    if label in table.columns:  # pragma: no cover - defensive
        raise RuntimeError(f"River dataset {name} already has a column named {label!r}.")
    for col in table.columns:
        if table[col].dtype == object and len(table) and hasattr(table[col].iloc[0], "tzinfo"):
            # Datetimes with mixed UTC offsets (e.g. WaterFlow across DST) come back as objects.
            table[col] = pd.to_datetime(table[col], utc=True)
    target = pd.Series(ys, name=label)
    if ds.task == base.REG:
        target = target.astype(np.float64)
    table[label] = target.to_numpy()
    return table, label


def load_river_dataset(name: str) -> tuple[pd.DataFrame, str]:
    """Load one of River's bundled datasets as a table, in River's own order.

    Parameters
    ----------
    name : str
        One of :func:`river_dataset_names` (matched case-insensitively).

    Returns
    -------
    table : DataFrame
        One row per sample, feature columns as River names them (converted to
        ``str``) plus the label column. Regression labels are float64; date
        features are ``datetime64`` columns.
    label : str
        Name of the label column.

    Raises
    ------
    ValueError
        If ``name`` is not a bundled dataset.

    Examples
    --------
    >>> table, label = load_river_dataset("Phishing")
    >>> table.shape, label
    ((1250, 10), 'is_phishing')
    """
    names = river_dataset_names()
    matches = [n for n in names if isinstance(name, str) and n.lower() == name.lower()]
    if not matches:
        raise ValueError(f"Unknown River dataset {name!r}; the bundled ones are: {', '.join(names)}.")
    table, label = _load_river(matches[0])
    return table.copy(), label


def load_table_file(path: str | os.PathLike, thousands: str | None = None) -> pd.DataFrame:
    """Read a table from a CSV (``.csv``, ``.csv.gz``) or Parquet (``.parquet``, ``.pq``) file.

    Columns are typed by the file: Parquet's own types, or for CSV pandas'
    reading (a column is numeric only if every cell is a number; empty cells
    and pandas' missing-value markers such as NA, N/A, n/a, null, NaN, None
    are missing values).

    Parameters
    ----------
    path : str or path-like
    thousands : str or None
        CSV only: the thousands separator inside numbers (e.g. ``","`` reads
        ``"1,170.3"`` as 1170.3; such cells must be quoted in the file).

    Returns
    -------
    DataFrame

    Raises
    ------
    FileNotFoundError
        If the file does not exist.
    ValueError
        If the suffix is not one of the above, the file cannot be parsed, or
        ``thousands`` is given for a Parquet file.

    Examples
    --------
    >>> load_table_file("data.xlsx")
    Traceback (most recent call last):
    ...
    ValueError: Unsupported table file 'data.xlsx'; use a .csv, .csv.gz, .parquet or .pq file.
    """
    p = Path(path)
    name = p.name.lower()
    if name.endswith((".csv", ".csv.gz")):
        kind = "CSV"
    elif name.endswith((".parquet", ".pq")):
        kind = "Parquet"
    else:
        raise ValueError(f"Unsupported table file {str(path)!r}; use a .csv, .csv.gz, .parquet or .pq file.")
    if not p.is_file():
        raise FileNotFoundError(f"Table file {str(path)!r} does not exist.")
    if thousands is not None and kind != "CSV":
        raise ValueError(f"thousands applies to CSV files only; {str(path)!r} is a Parquet file with typed columns.")
    if thousands is not None and thousands not in THOUSANDS:
        raise ValueError(f"thousands must be one of {', '.join(repr(t) for t in THOUSANDS)} (got {thousands!r}); "
                         f"a '.' or a digit would change the numbers' values.")
    check_fits_memory(p)
    try:
        if kind == "CSV":
            header = pd.read_csv(p, nrows=1, header=None)
            names = [str(v) for v in header.iloc[0].tolist()] if len(header) else []
            counts = Counter(names)                  # one pass (names.count per name was O(d²) on wide tables)
            twice = [n for n in counts if counts[n] > 1]
            if twice:
                raise _DuplicateHeader(f"{str(path)!r} names the column {twice[0]!r} {counts[twice[0]]} times in "
                                       f"its header; give every column its own name.")
            table = pd.read_csv(p)
        else:
            table = pd.read_parquet(p)
    except _DuplicateHeader as err:
        raise ValueError(str(err)) from None
    except MemoryError:
        raise MemoryError(f"{str(path)!r} does not fit in memory ({_gb(p.stat().st_size)} on disk); a file source "
                          f"is read whole: use a smaller extract.") from None
    except Exception as err:  # parse errors come in many types
        raise ValueError(f"Could not read {str(path)!r} as {kind}: {err}") from err
    if thousands is not None:
        table = _read_thousands(table, thousands)
    return table


class _DuplicateHeader(ValueError):
    pass


#: Thousands separators ``source.thousands`` accepts: none of them can be part of a plain number.
THOUSANDS = (",", "'", "_", " ")


def _gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{int(n)} bytes"


def available_memory() -> int | None:
    """Bytes of memory available to this process now (Linux: MemAvailable), or None if unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def check_fits_memory(path: Path) -> None:
    """Refuse, before reading, a table file larger than the memory available.

    A table is read whole and then copied into the stream's (T, M, b, d)
    arrays, so a file needs about as much memory as its size on disk (more
    for compressed CSV and Parquet). Raises ``ValueError`` (one line with
    both sizes) when the file is larger than half the available memory.
    """
    size = path.stat().st_size
    if path.name.lower().endswith((".gz", ".parquet", ".pq")):
        size *= 5                         # compressed: a few times larger once read
    free = available_memory()
    if free is not None and size > free / 2:
        raise ValueError(f"{str(path)!r} is too large for the memory available: reading it needs about {_gb(size)} "
                         f"and {_gb(free)} is free; a file source is read whole into memory, so use a smaller "
                         f"extract or a machine with more memory.")


def _read_thousands(table: pd.DataFrame, sep: str) -> pd.DataFrame:
    """Text columns of numbers written with thousands separator ``sep`` → numbers, exactly or not at all.

    A cell holding ``sep`` is a number only if its digit groups are right:
    a first group of 1–3 digits not starting with 0, then groups of exactly
    3 (``1,170.3``, ``-12,000``); pandas' own ``thousands`` option would read
    ``1,2345`` as 12345 and ``0,001`` as 1. A column whose cells are all
    numbers apart from badly grouped ones is refused (``ValueError`` naming
    the column, the row counted from 1 and the cell); text columns (cells
    with letters) are left as they are.
    """
    q = re.escape(sep)
    grouped = re.compile(rf"^\s*[+-]?[1-9]\d{{0,2}}(?:{q}\d{{3}})+(?:\.\d*)?(?:[eE][+-]?\d+)?\s*$")
    numeric = re.compile(rf"^\s*[+-]?[\d{q}.]+(?:[eE][+-]?\d+)?\s*$")
    out = table.copy()
    for col in table.columns:
        s = table[col]
        if not (pd.api.types.is_object_dtype(s) or pd.api.types.is_string_dtype(s)):
            continue
        text = s.map(lambda v: isinstance(v, str))
        cells = s[text].astype(str)
        with_sep = cells.str.contains(sep, regex=False)
        if not with_sep.any():
            continue
        if not cells.str.match(numeric).all():
            continue                                   # text with separators in it (names, addresses)
        as_text = s.where(text, "").astype(str)
        bad = (text & as_text.str.contains(sep, regex=False) & ~as_text.str.match(grouped)).to_numpy()
        if bad.any():
            pos = int(np.flatnonzero(bad)[0])
            raise ValueError(f"Column {col!r} row {pos + 1}: {_cell(s.iloc[pos])} is not a number with thousands "
                             f"separator {sep!r} (a first group of 1-3 digits, then groups of exactly 3); fix the cell "
                             f"or remove source.thousands.")
        numbers = pd.to_numeric(s.where(~text, s[text].astype(str).str.replace(sep, "", regex=False)),
                                errors="coerce")
        if (numbers.notna() | s.isna()).all():
            out[col] = numbers.astype(np.float64)
    return out


# --------------------------------------------------------------------------- #
# TableStream
# --------------------------------------------------------------------------- #


def _columns_hint(columns) -> str:
    cols = list(columns)
    shown = ", ".join(repr(c) for c in cols[:20])
    return shown + (f", ... ({len(cols) - 20} more)" if len(cols) > 20 else "")


def _sorted_values(values) -> list:
    uniq = list(dict.fromkeys(values))
    try:
        return sorted(uniq)
    except TypeError:
        return sorted(uniq, key=str)


_THOUSANDS = re.compile(r"^\s*[+-]?\d{1,3}(?:,\d{3})+(?:\.\d*)?\s*$")


def _is_number(col: pd.Series) -> bool:
    return (pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col)
            and not pd.api.types.is_complex_dtype(col))


def _is_time(col: pd.Series) -> bool:
    return pd.api.types.is_datetime64_any_dtype(col) or pd.api.types.is_timedelta64_dtype(col)


def _plain(value):
    """A numpy scalar as the Python value (for reports and JSON)."""
    return value.item() if isinstance(value, np.generic) else value


def _cell(value) -> str:
    text = repr(_plain(value))
    return text if len(text) <= 32 else text[:29] + "..."


def _read_text(col: pd.Series) -> tuple[str, str, pd.Series | None]:
    """How a column of text (or mixed objects) reads as numbers.

    Returns ``(kind, detail, numbers)``: ``kind`` is "number" when every
    present cell parses as a number (``numbers`` holds them), "thousands"
    when the cells that do not parse are numbers with thousands separators,
    "stray" when most cells are numbers but some are other text, "text"
    otherwise. ``detail`` names the first offending cell by its row,
    counted from 1 in table order (for a CSV file: the header is line 1, row
    r is line r + 1).
    """
    present = col.notna().to_numpy()
    try:
        numbers = pd.to_numeric(col, errors="coerce")
        parsed = numbers.notna().to_numpy()
    except (TypeError, ValueError):     # cells pandas cannot even try (lists, dicts)
        numbers, parsed = None, np.zeros(len(col), dtype=bool)
    text = present & ~parsed
    if not text.any():
        return "number", "", numbers.astype(np.float64)
    first = int(np.flatnonzero(text)[0])
    n_text, n_num = int(text.sum()), int((present & parsed).sum())
    where = f"row {first + 1}: {_cell(col.iloc[first])}"
    if all(isinstance(v, str) and _THOUSANDS.match(v) for v in col[text]):
        return "thousands", where, None
    if n_num <= n_text:
        return "text", where, None
    return "stray", f"{n_text} text cell{'s' if n_text > 1 else ''}, {where}", None


_DATE = re.compile(r"^\s*\d{1,4}[-/.]\d{1,2}[-/.]\d{1,4}(?:[ T]\d{1,2}:\d{2}(?::\d{2}(?:\.\d*)?)?)?\s*$")


def _text_problem(kind: str, detail: str) -> str:
    """Why a text column cannot be a numeric feature, and how to fix it (one phrase)."""
    if kind == "text" and _DATE.match(detail.split(": ", 1)[-1].strip("'\"")):
        return (f"dates as text ({detail}); a CSV's dates are read only in source.time_column (as ISO-8601 "
                f"YYYY-MM-DD[THH:MM:SS]); as a feature, convert them to numbers (e.g. days) first")
    if kind == "thousands":
        return f"numbers written with thousands separators ({detail}); set source.thousands: ','"
    if kind == "stray":
        return f"numbers with text among them ({detail}); fix or remove those rows"
    return f"text ({detail}); list it in categorical to one-hot encode it"


def _one_hot(col: pd.Series) -> tuple[np.ndarray, list[str], list]:
    """A categorical column → (n, K) one-hot float array, the K names ``"col=value"``, the K values.

    The categories are the column's distinct values in sorted order
    (numbers ascending, text by code point; mixed types by their text).
    """
    categories = _sorted_values(col.tolist())
    onehot = pd.get_dummies(pd.Categorical(col, categories=categories), prefix=str(col.name), prefix_sep="=",
                            dtype=np.float64)
    return onehot.to_numpy(), [str(c) for c in onehot.columns], categories


def time_values(col: pd.Series) -> pd.Series:
    """The values a time column orders rows by: numbers, datetimes, or ISO-8601 text parsed as UTC datetimes.

    Raises
    ------
    ValueError
        For booleans, or text that is not an ISO-8601 date or time (naming the
        first such row, counted from 1).

    Examples
    --------
    >>> time_values(pd.Series(["2024-03-01", "2024-02-29T12:00"], name="day")).dt.day.tolist()
    [1, 29]
    >>> time_values(pd.Series(["2024-03-01", "1/3/2024"], name="day"))
    Traceback (most recent call last):
    ...
    ValueError: Time column 'day' holds text that is not an ISO-8601 date or time (row 2: '1/3/2024'); write times as numbers or as YYYY-MM-DD[THH:MM:SS].
    """
    name = col.name
    if _is_number(col) or _is_time(col):
        return col
    if pd.api.types.is_bool_dtype(col):
        raise ValueError(f"Time column {name!r} holds booleans; it needs numbers or dates.")
    parsed = pd.to_datetime(col, utc=True, format="ISO8601", errors="coerce")
    bad = (parsed.isna() & col.notna()).to_numpy()
    if bad.any():
        r = int(np.flatnonzero(bad)[0])
        raise ValueError(f"Time column {name!r} holds text that is not an ISO-8601 date or time "
                         f"(row {r + 1}: {_cell(col.iloc[r])}); write times as numbers or as YYYY-MM-DD[THH:MM:SS].")
    return parsed


def _column_entry(column, read_as: str, why: str) -> dict:
    return {"column": str(column), "read_as": read_as, "why": why}


class TableStream(Stream):
    """A table replayed as a federated stream of mini-batches.

    Rows are put in stream order (by ``time_column`` if given, else table
    order), split over clients, and each client's rows are cut, in stream
    order, into mini-batches of ``batch_size`` rows: step ``k`` of client
    ``m`` is its ``k``-th batch.

    Parameters
    ----------
    table : DataFrame
        The data, at most a few hundred thousand rows (the full arrays are
        materialised in memory).
    label : str
        The label column.
    features : list of str or None
        Feature columns. ``None`` takes every numeric, boolean, datetime or
        ``categorical`` column other than the label, client and time columns;
        the other (text) columns are dropped and listed, with the reason, in
        ``columns_`` and ``ignored_columns_``. Numbers are used as they are,
        booleans become 0/1, datetimes days since the column's earliest value,
        durations days, and text whose every cell is a number those numbers.
        A named feature holding other text is refused (``ValueError`` naming
        the column, the first offending row and its value) unless it is
        listed in ``categorical``: text is never one-hot encoded unasked.
    categorical : list of str or None
        Columns to one-hot encode, one column ``"name=value"`` per distinct
        value in sorted order (numbers ascending, text by code point; mixed
        types by their text), with :func:`pandas.get_dummies`. With named
        ``features`` each must be among them.
    n_clients : int
        M ≥ 1 for the "contiguous" and "dirichlet" splits; ignored by "column".
    split : {"contiguous", "dirichlet", "column"}
        * "contiguous": M contiguous blocks of the ordered stream with sizes
          differing by at most one (earlier clients get the extra rows, as in
          :func:`numpy.array_split`).
        * "dirichlet": label skew (Hsu et al., 2019). For each class c the
          rows of c are shuffled and dealt to clients in proportions
          p_c ~ Dir(α·1_M). Regression labels are first binned into 10
          quantile bins. Small α gives single-class clients, large α gives
          every client the global class mix. Some clients may get no rows.
        * "column": natural clients, one per distinct value of
          ``client_column``, ordered by sorted value (``client_ids_``).
    client_column : str or None
        Client-id column for ``split="column"``. Never used as a feature.
    alpha : float
        α > 0, Dirichlet concentration (``split="dirichlet"`` only).
    time_column : str or None
        Column to order rows by (stable sort, so ties keep table order).
        Never used as a feature.
    batch_size : int
        b ≥ 1 rows per client per step.
    seed : int
        ≥ 0. Seeds the Dirichlet split and the ``prior_shift`` resampling.
    task : {"least_squares", "logistic", "softmax"} or None
        ``None`` infers it from the label, and says how in ``task_rule_``: a
        numeric label with a value that is not a whole number, or with more
        than 10 distinct whole numbers, is "least_squares"; any other label
        (booleans, text, at most 10 distinct whole numbers) is a class, with
        2 classes "logistic" and more "softmax".
    standardize_label : bool
        Z-score a least-squares label with its whole-table mean and standard
        deviation (ddof=0; 1 if constant), so losses are in units of the
        label's standard deviation squared (``label_mean_``,
        ``label_scale_``). Refused for classification.
    standardize : bool
        Z-score every encoded feature with the mean and standard deviation
        (ddof=0) of the **whole table** — a look-ahead that is standard in
        replay benchmarks; constant columns get standard deviation 1.
    intercept : bool
        Append a constant-1 column as the last feature (``has_intercept``).
    max_steps : int or None
        Cap on T.
    prior_shift : dict or None
        Semi-synthetic class-prior drift, classification only:
        ``{"start": s, "class_weights": {class: w, ...}}`` with s in [0, 1]
        and weights w ≥ 0 (classes not listed keep weight 1; classes may be
        given as their string form, e.g. ``"1"`` for ``1``). From position
        ``floor(s · n_m)`` of each client's row sequence on, that client's
        rows are replaced by draws with replacement from those same rows,
        each drawn with probability ∝ the weight of its class, so the class
        proportions become proportional to (original proportion × weight).
        Draws are put back in stream order and the client's length is
        unchanged. A client whose remaining rows all have weight 0 is left
        as is.

    Attributes
    ----------
    n_clients, n_features, batch_size, n_steps, task, n_classes
        See :class:`~streamfl.generators.base.Stream`.
    has_intercept : bool
    classes_ : ndarray or None
        Original class values, sorted; class ``k`` is encoded as label ``k``
        (for logistic, ``classes_[1]`` is label 1). ``None`` for regression.
    feature_names_ : list of str
        Names of the d features (``"intercept"`` last if added).
    ignored_columns_ : list of str
        Text columns dropped because ``features=None``.
    columns_ : list of dict
        How each column of the table was read, in table order:
        ``{"column", "read_as", "why"}`` with ``read_as`` one of "number",
        "time", "category", "label", "client", "dropped" (default features
        only) or "unused" (not in the named features).
    task_rule_ : str or None
        How the task was inferred (``None`` when ``task`` was given).
    notes_ : list of str
        One line per thing the stream leaves out: clients with no rows or
        fewer than b, rows of incomplete last mini-batches, rows beyond
        ``max_steps``.
    idle_clients_ : list
        Ids of clients that never play (no full mini-batch).
    n_rows_ : int
        Rows in the table.
    label_mean_, label_scale_ : float
        The label's standardisation (0 and 1 unless ``standardize_label``).
    client_ids_ : ndarray
        Client ids (sorted values of ``client_column``), or ``arange(M)``.
    client_rows_ : list of ndarray
        Per client, the positions (in the time-ordered table) of its rows in
        stream order, after ``prior_shift``, before batching.
    n_dropped_ : int
        Rows not streamed because a client's last batch was incomplete
        (fewer than b rows): only full batches are streamed, so that every
        step's loss is a mean over exactly b samples. Always 0 when b = 1.
    n_truncated_ : int
        Rows beyond ``max_steps``.
    mean_, scale_ : ndarray of shape (d_raw,)
        Standardisation statistics (zeros / ones when ``standardize=False``).

    Notes
    -----
    T = max_m floor(n_m / b), the longest client's number of full batches
    (capped by ``max_steps``), where n_m is client m's number of rows.
    A client whose batches have run out is masked ``False`` at later steps and
    its X, y there are zeros; ``mask`` is ``None`` when every client is
    present at every step.

    Raises
    ------
    ValueError
        For invalid parameters, unknown columns, missing or infinite values,
        named features holding text (not listed in ``categorical``), a label
        of numbers with text among them, a time column that is neither
        numbers, datetimes nor ISO-8601 text, a single-class label, or a
        table too short for one batch. Rows are counted from 1 in table
        order (row r of a CSV file is line r + 1).

    Examples
    --------
    >>> import pandas as pd
    >>> table = pd.DataFrame({"x": [0.0, 1.0, 2.0, 3.0, 4.0, 5.0], "y": [0, 1, 0, 1, 1, 0]})
    >>> stream = TableStream(table, label="y", n_clients=2, standardize=False)
    >>> stream.task, stream.n_steps, stream.n_features, stream.feature_names_
    ('logistic', 3, 2, ['x', 'intercept'])
    >>> chunk = next(stream.chunks())
    >>> chunk.X[0, :, 0]  # step 0: client 0 sees row 0, client 1 sees row 3
    array([[0., 1.],
           [3., 1.]])
    >>> chunk.y[:, 1, 0]  # client 1's labels
    array([1., 1., 0.])
    """

    in_memory = True          # every step's samples are built when the stream is made

    def __init__(
        self,
        table: pd.DataFrame,
        *,
        label: str,
        features: Sequence[str] | None = None,
        n_clients: int = 8,
        split: str = "contiguous",
        client_column: str | None = None,
        alpha: float = 0.5,
        time_column: str | None = None,
        batch_size: int = 1,
        seed: int = 0,
        task: str | None = None,
        standardize: bool = True,
        intercept: bool = True,
        max_steps: int | None = None,
        prior_shift: dict | None = None,
        categorical: Sequence[str] | None = None,
        standardize_label: bool = False,
    ):
        owner = "TableStream"
        if not isinstance(table, pd.DataFrame):
            raise _param_error("table", owner, "a pandas DataFrame", type(table).__name__)
        n_clients = _check_int(n_clients, "n_clients", owner, 1)
        split = _check_choice(split, "split", owner, _SPLITS)
        alpha = _check_float(alpha, "alpha", owner, gt=0)
        batch_size = _check_int(batch_size, "batch_size", owner, 1)
        seed = _check_int(seed, "seed", owner, 0)
        task = _check_choice(task, "task", owner, _TASKS, allow_none=True)
        standardize = _check_bool(standardize, "standardize", owner)
        intercept = _check_bool(intercept, "intercept", owner)
        standardize_label = _check_bool(standardize_label, "standardize_label", owner)
        if max_steps is not None:
            max_steps = _check_int(max_steps, "max_steps", owner, 1, "an int >= 1 or None")
        if prior_shift is not None and not isinstance(prior_shift, dict):
            raise _param_error("prior_shift", owner, "a dict with keys 'start' and 'class_weights', or None",
                               prior_shift)

        # ---- columns ---------------------------------------------------------
        def need(col, role):
            try:
                known = col in table.columns
            except TypeError:  # unhashable
                known = False
            if not known:
                raise ValueError(
                    f"Unknown {role} column {col!r}; the table has columns {_columns_hint(table.columns)}."
                )

        need(label, "label")
        if split == "column" and client_column is None:
            raise ValueError("split='column' needs client_column, the name of the column holding client ids.")
        if client_column is not None:
            need(client_column, "client")
        if time_column is not None:
            need(time_column, "time")
        reserved = {label, client_column, time_column} - {None}
        if categorical is None:
            categorical = []
        if isinstance(categorical, str) or not hasattr(categorical, "__iter__"):
            raise _param_error("categorical", owner, "a list of column names or None", categorical)
        categorical = list(categorical)
        for col in categorical:
            need(col, "categorical")
            if col in reserved:
                raise ValueError(f"Column {col!r} is the label, client or time column and cannot be categorical.")
        if features is not None:
            if isinstance(features, str) or not hasattr(features, "__iter__") or len(list(features)) == 0:
                raise _param_error("features", owner, "a non-empty list of column names or None", features)
            features = list(features)
            for col in features:
                need(col, "feature")
                if col in reserved:
                    raise ValueError(f"Column {col!r} is the label, client or time column and cannot be a feature.")
            if len(set(features)) != len(features):
                raise ValueError(f"The feature list {features!r} names a column more than once.")
            for col in categorical:
                if col not in features:
                    raise ValueError(f"Column {col!r} is categorical but not in features; add it to features.")

        # How each feature column is read: number, time, category, or (default features only) dropped.
        report: dict = {}           # column -> entry, reported in table order
        readers: dict = {}          # feature column -> ("number" | "time" | "category", numbers or None)
        for col in (table.columns if features is None else features):
            if col in reserved:
                continue
            s = table[col]
            if features is not None and col not in features:
                continue
            if col in categorical:
                readers[col] = ("category", None)
            elif pd.api.types.is_bool_dtype(s):
                readers[col] = ("number", None)
                report[col] = _column_entry(col, "number", "booleans, as 0/1")
            elif _is_number(s):
                readers[col] = ("number", None)
                report[col] = _column_entry(col, "number", "numbers")
            elif _is_time(s):
                readers[col] = ("time", None)
                what = "datetimes, as days since the earliest" if pd.api.types.is_datetime64_any_dtype(s) \
                    else "durations, as days since the shortest"
                report[col] = _column_entry(col, "time", what)
            else:
                kind, detail, numbers = ("text", "complex numbers", None) if pd.api.types.is_complex_dtype(s) \
                    else _read_text(s)
                if kind == "number":
                    readers[col] = ("number", numbers)
                    report[col] = _column_entry(col, "number", "numbers stored as text")
                elif features is None:
                    report[col] = _column_entry(col, "dropped", _text_problem(kind, detail) if detail !=
                                                "complex numbers" else "complex numbers")
                elif kind == "text" and "dates as text" in _text_problem(kind, detail):
                    raise ValueError(f"Feature column {col!r} holds {_text_problem(kind, detail)}.")
                elif kind == "text":
                    raise ValueError(f"Feature column {col!r} holds text ({detail}); list it in categorical to "
                                     f"one-hot encode it, or leave it out of features.")
                else:
                    raise ValueError(f"Feature column {col!r} holds {_text_problem(kind, detail)}" + (
                        ", or list it in categorical to one-hot encode its values." if kind == "stray" else "."))
        if not readers:
            raise ValueError(
                f"The table has no numeric feature columns besides {sorted(map(str, reserved))}; "
                f"pass features=[...] to choose some (text columns need to be listed in categorical)."
            )
        features = list(readers)
        ignored = [str(c) for c, e in report.items() if e["read_as"] == "dropped"]
        used = list(dict.fromkeys([*features, label, *(c for c in (client_column, time_column) if c)]))
        for col in used:
            missing = table[col].isna().to_numpy()
            if missing.any():
                raise ValueError(f"Column {col!r} has {int(missing.sum())} missing values (first at row "
                                 f"{int(np.flatnonzero(missing)[0]) + 1}; a CSV's empty cells and NA, N/A, n/a, null, "
                                 f"NaN, None are missing); drop or impute them before streaming.")
            kind_numbers = readers.get(col, (None, None))
            if col in readers and kind_numbers[0] != "number":
                continue
            values = kind_numbers[1] if kind_numbers[1] is not None else table[col]
            if not _is_number(values):
                continue
            infinite = np.isinf(values.to_numpy(dtype=np.float64))
            if infinite.any():
                r = int(np.flatnonzero(infinite)[0])
                role = "Label column" if col == label else "Column"
                raise ValueError(f"{role} {col!r} has {int(infinite.sum())} infinite value"
                                 f"{'s' if infinite.sum() > 1 else ''} (first at row {r + 1}: "
                                 f"{_cell(table[col].iloc[r])}); drop or clip them before streaming.")

        # ---- stream order ----------------------------------------------------
        data = table[used].reset_index(drop=True)
        if time_column is not None:
            key = time_values(data[time_column]).reset_index(drop=True)
            data = data.iloc[np.argsort(key.to_numpy(), kind="stable")].reset_index(drop=True)
        n_rows = len(data)
        if n_rows == 0:
            raise ValueError("The table has no rows.")

        # ---- features --------------------------------------------------------
        blocks, names = [], []
        for col in features:
            kind, numbers = readers[col]
            c = data[col]
            if kind == "category":
                block, block_names, cats = _one_hot(c)
                shown = ", ".join(_cell(v) for v in cats[:8]) + (", ..." if len(cats) > 8 else "")
                report[col] = _column_entry(col, "category", f"one-hot over its {len(cats)} sorted values ({shown})")
            elif kind == "time":
                days = (c - c.min()) / pd.Timedelta(days=1)
                block, block_names = days.to_numpy(dtype=np.float64)[:, None], [str(col)]
            else:
                values = (c if numbers is None else pd.to_numeric(c)).to_numpy(dtype=np.float64)
                block, block_names = values[:, None], [str(col)]
            blocks.append(block)
            names.extend(block_names)
        Xraw = np.concatenate(blocks, axis=1)
        if standardize:
            with np.errstate(over="ignore", invalid="ignore"):
                mean = Xraw.mean(axis=0)
                scale = Xraw.std(axis=0)
                scale[scale == 0] = 1.0
                Xraw = (Xraw - mean) / scale
            broken = ~(np.isfinite(mean) & np.isfinite(scale) & np.isfinite(Xraw).all(axis=0))
            if broken.any():
                j = int(np.flatnonzero(broken)[0])
                raise ValueError(f"Feature {names[j]!r} cannot be standardised: its values are so large that its "
                                 f"mean or standard deviation overflows float64 (mean {mean[j]:g}, standard deviation "
                                 f"{scale[j]:g}, largest magnitude {np.abs(np.concatenate(blocks, axis=1)[:, j]).max():g}"
                                 f"); rescale the column (other units) before streaming.")
        else:
            mean, scale = np.zeros(Xraw.shape[1]), np.ones(Xraw.shape[1])
        if intercept:
            Xraw = np.concatenate([Xraw, np.ones((n_rows, 1))], axis=1)
            names.append("intercept")

        # ---- label -----------------------------------------------------------
        ycol = data[label]
        is_bool = pd.api.types.is_bool_dtype(ycol)
        if _is_time(ycol):
            raise ValueError(f"Label column {label!r} holds dates or durations; a label needs numbers or classes.")
        if not (is_bool or _is_number(ycol)):
            kind, detail, numbers = _read_text(table[label])
            if kind == "number":
                ycol = pd.to_numeric(ycol)
            elif kind != "text":
                raise ValueError(f"Label column {label!r} holds {_text_problem(kind, detail)}.")
        is_num = _is_number(ycol)
        rule = None
        if task is None:
            if is_bool:
                task, rule = "classification", f"label {label!r} holds booleans, so 2 classes"
            elif not is_num:
                task, rule = "classification", f"label {label!r} holds text, so classes"
            else:
                values = ycol.to_numpy(dtype=np.float64)
                whole = np.isfinite(values) & (values == np.round(values))
                n_values = int(ycol.nunique())
                if not whole.all():
                    r = int(np.flatnonzero(~whole)[0])
                    task, rule = "least_squares", (f"label {label!r} holds numbers that are not whole "
                                                   f"(e.g. {_cell(ycol.iloc[r])}), so a regression target")
                elif n_values > 10:
                    task, rule = "least_squares", (f"label {label!r} holds {n_values} distinct whole numbers "
                                                   f"(more than 10), so a regression target")
                else:
                    task, rule = "classification", (f"label {label!r} holds {n_values} distinct whole numbers "
                                                    f"(at most 10), so classes")
        label_mean, label_scale = 0.0, 1.0
        if task == "least_squares":
            if not (is_num or is_bool):
                raise ValueError(f"Label column {label!r} is not numeric, so it cannot be used with task='least_squares'.")
            yall = ycol.to_numpy(dtype=np.float64)
            if not np.isfinite(yall).all():
                raise ValueError(f"Label column {label!r} has {int((~np.isfinite(yall)).sum())} infinite values.")
            low, high = yall.min(), yall.max()
            if standardize_label:
                label_mean, label_scale = float(yall.mean()), float(yall.std())
                label_scale = label_scale if label_scale > 0 else 1.0
                yall = (yall - label_mean) / label_scale
            classes, n_classes = None, 1
            why = (f"regression target, {len(yall)} values from {low:.4g} to {high:.4g}"
                   + (f", z-scored with mean {label_mean:.4g} and standard deviation {label_scale:.4g}"
                      if standardize_label else f" in its own units (mean {yall.mean():.4g}, standard deviation "
                                                f"{yall.std():.4g})"))
        else:
            if standardize_label:
                raise ValueError(f"standardize_label needs a least_squares label; label {label!r} is read as classes"
                                 + (f" ({rule})" if rule else "") + ".")
            classes = _sorted_values(ycol.tolist())
            K = len(classes)
            if K < 2:
                raise ValueError(f"Label column {label!r} has a single class ({classes[0]!r}); a classifier needs two or more.")
            if task == "classification":
                task = "logistic" if K == 2 else "softmax"
            elif task == "logistic" and K != 2:
                raise ValueError(f"task='logistic' needs 2 classes but label column {label!r} has {K}.")
            yall = pd.Categorical(ycol, categories=classes).codes.astype(np.float64)
            n_classes = K if task == "softmax" else 1
            counts = np.bincount(yall.astype(np.int64), minlength=K)
            shown = ", ".join(f"{_cell(v)} → {k} ({counts[k]} row{'s' if counts[k] != 1 else ''})" for k, v in enumerate(classes[:8])) \
                + (f", ... ({K - 8} more)" if K > 8 else "")
            why = f"{K} classes, numbered in sorted order: {shown}" + (
                f"; class 1 ({_cell(classes[1])}) is the positive class" if task == "logistic" else "")
            classes = np.asarray(classes)
        if rule is not None:
            rule += f" → {task}"
        report[label] = _column_entry(label, "label", why)

        # ---- split -----------------------------------------------------------
        rng_split = np.random.default_rng([seed, 0])
        positions = np.arange(n_rows)
        if split == "contiguous":
            client_rows = np.array_split(positions, n_clients)
            client_ids = np.arange(n_clients)
        elif split == "column":
            ids = _sorted_values(data[client_column].tolist())
            codes = pd.Categorical(data[client_column], categories=ids).codes
            order = np.argsort(codes, kind="stable")
            client_rows = np.split(order, np.cumsum(np.bincount(codes, minlength=len(ids)))[:-1])
            client_ids = np.asarray(ids)
            n_clients = len(ids)
        else:
            if task == "least_squares":
                strata = pd.qcut(yall, q=10, labels=False, duplicates="drop").astype(np.int64)
            else:
                strata = yall.astype(np.int64)
            parts: list[list[np.ndarray]] = [[] for _ in range(n_clients)]
            for c in np.unique(strata):
                idx = positions[strata == c]
                rng_split.shuffle(idx)
                p = rng_split.dirichlet(np.full(n_clients, alpha))
                cuts = (np.cumsum(p) * len(idx)).astype(np.int64)[:-1]
                for m, part in enumerate(np.split(idx, cuts)):
                    parts[m].append(part)
            client_rows = [np.sort(np.concatenate(p)) for p in parts]
            client_ids = np.arange(n_clients)

        # ---- prior shift -----------------------------------------------------
        if prior_shift is not None:
            client_rows = self._prior_shift(prior_shift, client_rows, yall, classes, task, seed)

        # ---- batching --------------------------------------------------------
        b = batch_size
        lengths = np.array([len(r) for r in client_rows])
        full = lengths // b
        T = int(full.max())
        n_dropped = int((lengths - full * b).sum())
        if max_steps is not None and max_steps < T:
            T = max_steps
        if T == 0:
            raise ValueError(f"No client has a full batch of {b} rows; lower batch_size or use fewer clients.")
        steps = np.minimum(full, T)
        n_truncated = int(((full - steps) * b).sum())
        M = n_clients
        need = T * M * b * (Xraw.shape[1] + 2) * 8
        free = available_memory()
        if free is not None and need > free:
            raise ValueError(f"The stream needs {_gb(need)} of memory (T = {T} steps × M = {M} clients × b = {b} × "
                             f"d = {Xraw.shape[1]} features, 8 bytes each) and {_gb(free)} is free; use fewer rows or "
                             f"features, or a smaller table.")
        index = np.zeros((T, M, b), dtype=np.int64)
        mask = np.zeros((T, M), dtype=bool)
        for m, rows in enumerate(client_rows):
            k = int(steps[m])
            index[:k, m] = rows[: k * b].reshape(k, b)
            mask[:k, m] = True
        X = Xraw[index]
        y = yall[index]
        X[~mask] = 0.0
        y[~mask] = 0.0

        # ---- what was read, dropped and skipped ------------------------------
        def some(ids) -> str:
            shown = ", ".join(str(v) for v in ids[:8])
            return shown + (f", ... ({len(ids) - 8} more)" if len(ids) > 8 else "")

        notes = []
        empty = [_plain(client_ids[m]) for m in range(M) if lengths[m] == 0]
        if empty:
            why = {"contiguous": f"{n_rows} rows in {M} contiguous blocks",
                   "dirichlet": f"Dirichlet label skew, alpha = {alpha:g}"}.get(split, split)
            notes.append(f"{len(empty)} of {M} clients {'have' if len(empty) > 1 else 'has'} no rows ({why}) and "
                         f"never play{'s' if len(empty) == 1 else ''}: client{'s' if len(empty) > 1 else ''} "
                         f"{some(empty)}")
        short = [m for m in range(M) if 0 < lengths[m] < b]
        if short:
            notes.append(f"{len(short)} client{'s' if len(short) > 1 else ''} with fewer rows than b = {b} never "
                         f"play{'s' if len(short) == 1 else ''}: "
                         + some([f"{_plain(client_ids[m])} ({lengths[m]} rows)" for m in short]))
        if n_dropped:
            k = int(((lengths % b) > 0).sum())
            notes.append(f"{n_dropped} row{'s' if n_dropped > 1 else ''} not streamed: the last mini-batch of {k} "
                         f"client{'s' if k > 1 else ''} had fewer than b = {b} rows (only full mini-batches are "
                         f"streamed)")
        if n_truncated:
            notes.append(f"{n_truncated} rows after step {T} not streamed (steps caps the stream at T = {T})")
        columns = []
        for col in table.columns:
            if col in report:
                columns.append(report[col])
            elif col == client_column:
                columns.append(_column_entry(col, "client", f"client ids, one client per distinct value "
                                                            f"({len(client_ids)} clients, sorted)"))
            elif col == time_column:
                what = "numbers" if _is_number(table[col]) else "datetimes" if _is_time(table[col]) \
                    else "ISO-8601 text read as UTC datetimes"
                columns.append(_column_entry(col, "time", f"orders the rows ({what}, ascending; ties keep table "
                                                          f"order)"))
            else:
                columns.append(_column_entry(col, "unused", "not in features"))

        # ---- attributes ------------------------------------------------------
        self.n_clients = M
        self.n_features = Xraw.shape[1]
        self.batch_size = b
        self.n_steps = T
        self.task = task
        self.n_classes = n_classes
        self.has_intercept = intercept
        self.classes_ = classes
        self.feature_names_ = names
        self.ignored_columns_ = ignored
        self.client_ids_ = client_ids
        self.client_rows_ = client_rows
        self.n_rows_ = n_rows
        self.n_dropped_ = n_dropped
        self.n_truncated_ = n_truncated
        self.idle_clients_ = [_plain(client_ids[m]) for m in range(M) if steps[m] == 0]
        self.mean_, self.scale_ = mean, scale
        self.label_mean_, self.label_scale_ = label_mean, label_scale
        self.task_rule_ = rule
        self.columns_ = columns
        self.notes_ = notes
        self._X = _frozen(X)
        self._y = _frozen(y)
        self._mask = None if mask.all() else _frozen(mask)

    @staticmethod
    def _prior_shift(spec, client_rows, yall, classes, task, seed):
        owner = "TableStream"
        what = "a dict {'start': float in [0, 1], 'class_weights': {class: weight >= 0}}"
        if task == "least_squares":
            raise ValueError("prior_shift needs a classification task; the label here is a regression target.")
        if set(spec) != {"start", "class_weights"}:
            raise _param_error("prior_shift", owner, what, spec)
        start = _check_float(spec["start"], "start", "prior_shift", ge=0, le=1)
        weights_in = spec["class_weights"]
        if not isinstance(weights_in, dict) or not weights_in:
            raise _param_error("prior_shift", owner, what, spec)
        lookup = {c: k for k, c in enumerate(classes.tolist())}
        by_str = {str(c): k for k, c in enumerate(classes.tolist())}
        weights = np.ones(len(classes))
        for c, w in weights_in.items():
            k = lookup.get(c, by_str.get(str(c)))
            if k is None:
                raise ValueError(
                    f"prior_shift names class {c!r}, which is not in the label; the classes are "
                    f"{', '.join(repr(v) for v in classes.tolist())}."
                )
            weights[k] = _check_float(w, f"class_weights[{c!r}]", "prior_shift", ge=0)
        rng = np.random.default_rng([seed, 1])
        out = []
        for rows in client_rows:
            k0 = int(math.floor(start * len(rows)))
            tail = rows[k0:]
            w = weights[yall[tail].astype(np.int64)]
            if len(tail) == 0 or w.sum() == 0:
                out.append(rows)
                continue
            draws = np.sort(rng.choice(tail, size=len(tail), replace=True, p=w / w.sum()))
            out.append(np.concatenate([rows[:k0], draws]))
        return out

    def chunks(self, chunk_size: int = 256) -> Iterator[Chunk]:
        """Yield the stream in chunks of at most ``chunk_size`` steps (read-only views).

        Raises
        ------
        ValueError
            If ``chunk_size`` is not an int ≥ 1.
        """
        chunk_size = _check_int(chunk_size, "chunk_size", "TableStream.chunks", 1)
        for t0 in range(0, self.n_steps, chunk_size):
            t1 = min(t0 + chunk_size, self.n_steps)
            yield Chunk(
                t0=t0,
                X=self._X[t0:t1],
                y=self._y[t0:t1],
                mask=None if self._mask is None else self._mask[t0:t1],
            )
