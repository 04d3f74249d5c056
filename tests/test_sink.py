"""The metrics CSV writer: byte-identical to pandas' to_csv, chunk by chunk."""

import numpy as np
import pandas as pd

from streamfl.runtime.sink import MetricsSink, csv_block


def _frame(n, seed):
    rng = np.random.default_rng(seed)
    f = rng.standard_normal(n) * 10.0 ** rng.integers(-320, 300, n)
    f[::7] = np.nan
    f[1::11] = np.inf
    f[2::13] = -np.inf
    f[3::17] = -0.0
    return pd.DataFrame({
        "t": np.arange(1, n + 1), "loss": rng.random(n), "wild": f,
        "all_nan": np.full(n, np.nan), "bytes_up": rng.integers(0, 2 ** 40, n),
        "flag": rng.random(n) > 0.5, "small": np.float32(rng.standard_normal(n)),
        "a,b": np.round(rng.standard_normal(n), 3), "ints_as_float": np.arange(n, dtype=float) * 1e6})


def test_block_equals_pandas_to_csv():
    for seed, n in ((0, 1), (1, 300), (2, 0)):
        full = _frame(n, seed)
        # with a boolean column (column by column) and without (one float block, integers < 2^53)
        nan_first = full[["wild", "t", "loss", "all_nan", "small"]]        # NaN in the first column too
        for frame in (full, full.drop(columns="flag"), full.drop(columns="flag").assign(big=2 ** 60 + 1), nan_first):
            for header in (True, False):
                want = frame.to_csv(index=False, header=header, float_format="%.10g")
                assert csv_block(frame, header) == want


def test_file_equals_pandas_chunk_by_chunk(tmp_path):
    frames = [_frame(n, s) for s, n in ((3, 256), (4, 256), (5, 17))]
    sink = MetricsSink(tmp_path)
    for fr in frames:
        sink(fr)
    sink.close()
    ref = tmp_path / "ref.csv"
    for i, fr in enumerate(frames):
        fr.to_csv(ref, mode="w" if i == 0 else "a", header=i == 0, index=False, float_format="%.10g")
    assert (tmp_path / "metrics.csv").read_bytes() == ref.read_bytes()


def test_other_dtypes_fall_back_to_pandas(tmp_path):
    frame = pd.DataFrame({"t": [1, 2], "name": ["a", None]})
    assert csv_block(frame, True) is None
    sink = MetricsSink(tmp_path)
    sink(frame)
    assert (tmp_path / "metrics.csv").read_text() == "t,name\n1,a\n2,\n"


def test_rows_frame_equals_dataframe_of_its_columns():
    from streamfl.regret.rows import Rows
    rng = np.random.default_rng(7)
    n = 5
    cols = {"t": np.arange(1, n + 1), "loss": rng.random(n), "nan": np.full(n, np.nan),
            **{f"client{m}_cum_loss": rng.random(n) for m in range(3)},
            "bytes_up": np.arange(n) * 10, "f32": rng.random(n).astype(np.float32), "last": rng.random(n)}
    rows = Rows(n)
    rows.add_columns(cols)
    got, want = rows.frame(), pd.DataFrame(cols)
    pd.testing.assert_frame_equal(got, want)
    assert list(got.columns) == list(cols)
    assert csv_block(got, True) == want.to_csv(index=False, float_format="%.10g")


def test_rows_with_column_groups_write_what_pandas_writes(tmp_path):
    """A chunk handed to the sink as Rows (groups of per-client columns, an integer step column, NaN and ±inf,
    huge and tiny values) gives the file pandas' to_csv gives for the same columns, chunk by chunk."""
    from streamfl.regret.rows import Rows
    rng = np.random.default_rng(3)
    sink = MetricsSink(tmp_path)
    ref = tmp_path / "ref.csv"
    for i, n in enumerate((7, 4)):
        rows = Rows(n)
        wild = rng.standard_normal(n) * 10.0 ** rng.integers(-320, 300, n)
        wild[0], wild[1] = np.nan, -np.inf
        rows.add_columns({"t": np.arange(1, n + 1) + 7 * i, "wild": wild})
        group = rng.standard_normal((n, 6)) * 1e3
        group[2, 3] = np.nan
        rows.add_group([f"client{m}_{k}" for m in range(3) for k in ("a", "b")], group)
        rows.add("bytes_up", np.arange(n, dtype=np.int64) * 2 ** 40)
        assert rows.last()["t"] == 7 * i + n and rows["client2_b"].tolist() == group[:, 5].tolist()
        sink(rows)
        rows.frame().to_csv(ref, mode="w" if i == 0 else "a", header=i == 0, index=False, float_format="%.10g")
    sink.close()
    assert (tmp_path / "metrics.csv").read_bytes() == ref.read_bytes()
