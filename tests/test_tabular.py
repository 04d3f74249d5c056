import math
import urllib.request

import numpy as np
import pandas as pd
import pytest

from streamfl.generators import tabular
from streamfl.generators.tabular import TableStream, load_river_dataset, load_table_file, river_dataset_names


def _collect(stream, chunk_size=256):
    chunks = list(stream.chunks(chunk_size))
    X = np.concatenate([c.X for c in chunks])
    y = np.concatenate([c.y for c in chunks])
    mask = None if chunks[0].mask is None else np.concatenate([c.mask for c in chunks])
    return X, y, mask, [c.t0 for c in chunks]


# --------------------------------------------------------------------------- River datasets


def test_bundled_names_are_offline_single_target_datasets():
    names = river_dataset_names()
    for expected in ["Bananas", "ChickWeights", "ImageSegments", "Phishing", "Shuttle", "TrumpApproval", "WaterFlow"]:
        assert expected in names
    for remote_or_multi_output in ["Elec2", "Higgs", "CreditCard", "SolarFlare", "Yeast"]:
        assert remote_or_multi_output not in names


def test_phishing_loads_offline(monkeypatch, tmp_path):
    def no_network(*args, **kwargs):
        raise AssertionError("tried to download")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    monkeypatch.setenv("RIVER_DATA", str(tmp_path))
    tabular._load_river.cache_clear()
    table, label = load_river_dataset("phishing")  # case-insensitive
    assert label == "is_phishing"
    assert table.shape == (1250, 10)  # River documents 1,250 samples and 9 features
    assert table[label].dtype == bool
    assert int(table[label].sum()) == 548
    assert list(tmp_path.iterdir()) == []

    stream = TableStream(table, label=label, n_clients=5)
    assert (stream.task, stream.n_classes, stream.n_features) == ("logistic", 1, 10)
    assert stream.n_steps == 250 and next(stream.chunks()).mask is None
    assert list(stream.classes_) == [False, True]


def test_regression_datasets_have_float_labels():
    table, label = load_river_dataset("ChickWeights")
    assert label == "weight" and table[label].dtype == np.float64 and len(table) == 578
    stream = TableStream(table, label=label, split="column", client_column="diet", time_column="time")
    assert stream.task == "least_squares" and stream.n_clients == 4
    assert stream.feature_names_ == ["chick", "intercept"]


def test_unknown_dataset_message():
    with pytest.raises(ValueError) as err:
        load_river_dataset("Elec2")
    assert str(err.value).startswith("Unknown River dataset 'Elec2'; the bundled ones are: ")
    assert "Phishing" in str(err.value)


# --------------------------------------------------------------------------- splits


def _client_table():
    return pd.DataFrame(
        {
            "client": ["b", "a", "b", "a", "a", "b", "a"],
            "t": [3, 1, 0, 2, 0, 1, 3],
            "x": [10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0],
            "y": [0, 1, 1, 0, 1, 0, 1],
        }
    )


def test_column_split_exact_arrays():
    # Ordered by t (stable): rows 2(b) 4(a) 1(a) 5(b) 3(a) 0(b) 6(a).
    # Client "a": rows 4, 1, 3, 6 -> x 50, 20, 40, 70; client "b": rows 2, 5, 0 -> x 30, 60, 10.
    s = TableStream(_client_table(), label="y", split="column", client_column="client", time_column="t",
                    n_clients=8, standardize=False, intercept=False)
    assert (s.n_clients, s.n_steps, s.n_features, s.batch_size) == (2, 4, 1, 1)
    assert list(s.client_ids_) == ["a", "b"]
    assert s.feature_names_ == ["x"]  # client and time columns are never features
    X, y, mask, _ = _collect(s)
    assert X.shape == (4, 2, 1, 1) and y.shape == (4, 2, 1)
    np.testing.assert_array_equal(X[:, :, 0, 0], [[50, 30], [20, 60], [40, 10], [70, 0]])
    np.testing.assert_array_equal(y[:, :, 0], [[1, 1], [1, 0], [0, 0], [1, 0]])
    np.testing.assert_array_equal(mask, [[True, True], [True, True], [True, True], [True, False]])
    assert s.n_dropped_ == 0


def test_column_split_with_batches_drops_incomplete_tail():
    s = TableStream(_client_table(), label="y", split="column", client_column="client", time_column="t",
                    batch_size=2, standardize=False, intercept=False)
    X, y, mask, _ = _collect(s)
    assert s.n_steps == 2 and s.n_dropped_ == 1  # client b's third row (x=10) has no partner
    np.testing.assert_array_equal(X[..., 0], [[[50, 20], [30, 60]], [[40, 70], [0, 0]]])
    np.testing.assert_array_equal(mask, [[True, True], [True, False]])


def test_contiguous_split_of_ten_rows_into_three_clients():
    table = pd.DataFrame({"x": np.arange(10.0), "y": np.arange(10.0) * 1.5})
    s = TableStream(table, label="y", n_clients=3, standardize=False, intercept=False, task="least_squares")
    X, y, mask, _ = _collect(s)
    assert s.n_steps == 4
    np.testing.assert_array_equal(X[:, :, 0, 0].T, [[0, 1, 2, 3], [4, 5, 6, 0], [7, 8, 9, 0]])
    np.testing.assert_array_equal(y[:, :, 0].T, [[0, 1.5, 3, 4.5], [6, 7.5, 9, 0], [10.5, 12, 13.5, 0]])
    np.testing.assert_array_equal(mask.T, [[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 0]])
    assert [list(r) for r in s.client_rows_] == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]


def _three_class_table(n=3000, seed=42):
    rng = np.random.default_rng(seed)
    y = rng.permutation(np.repeat([0, 1, 2], [n // 2, 3 * n // 10, n // 5]))
    return pd.DataFrame({"x": rng.standard_normal(n), "y": y}), y


def test_dirichlet_split_is_deterministic_and_a_partition():
    table, _ = _three_class_table()
    a = TableStream(table, label="y", n_clients=5, split="dirichlet", alpha=0.5, seed=7)
    b = TableStream(table, label="y", n_clients=5, split="dirichlet", alpha=0.5, seed=7)
    c = TableStream(table, label="y", n_clients=5, split="dirichlet", alpha=0.5, seed=8)
    for ra, rb in zip(a.client_rows_, b.client_rows_):
        np.testing.assert_array_equal(ra, rb)
        assert np.all(np.diff(ra) > 0)  # each client keeps stream order
    assert any(len(ra) != len(rc) or np.any(ra != rc) for ra, rc in zip(a.client_rows_, c.client_rows_))
    np.testing.assert_array_equal(np.sort(np.concatenate(a.client_rows_)), np.arange(len(table)))
    np.testing.assert_array_equal(_collect(a)[0], _collect(b)[0])


def test_dirichlet_alpha_controls_label_skew():
    table, y = _three_class_table()
    glob = np.bincount(y) / len(y)
    for seed in range(5):
        tiny = TableStream(table, label="y", n_clients=5, split="dirichlet", alpha=1e-3, seed=seed)
        held = np.array([np.bincount(y[r], minlength=3) for r in tiny.client_rows_])  # (M, K)
        # Each class lands (almost) entirely on one client ...
        assert np.all(held.max(axis=0) / held.sum(axis=0) >= 0.99)
        huge = TableStream(table, label="y", n_clients=5, split="dirichlet", alpha=1e3, seed=seed)
        for r in huge.client_rows_:
            # ... while with a large alpha every client gets the global mix (+-0.04; observed <= 0.02).
            assert np.abs(np.bincount(y[r], minlength=3) / len(r) - glob).max() < 0.04
    # ... so clients are single-class unless two classes pick the same client (seed 0: none do).
    tiny = TableStream(table, label="y", n_clients=5, split="dirichlet", alpha=1e-3, seed=0)
    for r in tiny.client_rows_:
        if len(r):
            assert np.bincount(y[r]).max() / len(r) == 1.0


def test_dirichlet_regression_uses_quantile_bins():
    rng = np.random.default_rng(0)
    table = pd.DataFrame({"x": rng.standard_normal(500), "y": rng.standard_normal(500)})
    s = TableStream(table, label="y", n_clients=4, split="dirichlet", alpha=1e-3)
    assert s.task == "least_squares"
    np.testing.assert_array_equal(np.sort(np.concatenate(s.client_rows_)), np.arange(500))


# --------------------------------------------------------------------------- features and labels


def test_task_inference_encoding_standardisation():
    table = pd.DataFrame(
        {
            "num": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
            "flag": [True, False, True, False, True, False],
            "const": [3.0] * 6,
            "colour": ["red", "blue", "red", "green", "blue", "red"],
            "kind": ["b", "a", "c", "a", "b", "c"],
        }
    )
    s = TableStream(table, label="kind", n_clients=1)
    assert s.task == "softmax" and s.n_classes == 3 and list(s.classes_) == ["a", "b", "c"]
    assert s.feature_names_ == ["num", "flag", "const", "intercept"] and s.ignored_columns_ == ["colour"]
    X, y, mask, _ = _collect(s)
    assert mask is None
    np.testing.assert_array_equal(y[:, 0, 0], [1, 0, 2, 0, 1, 2])
    flat = X[:, 0, 0]
    np.testing.assert_allclose(flat[:, :2].mean(axis=0), 0, atol=1e-12)
    np.testing.assert_allclose(flat[:, :2].std(axis=0), 1)
    np.testing.assert_array_equal(flat[:, 2], 0)  # constant column: std taken as 1
    np.testing.assert_array_equal(flat[:, 3], 1)  # intercept last

    s = TableStream(table, label="flag", features=["colour"], n_clients=1, standardize=False, intercept=False)
    assert s.task == "logistic" and s.feature_names_ == ["colour=blue", "colour=green", "colour=red"]
    X, y, _, _ = _collect(s)
    np.testing.assert_array_equal(X[:3, 0, 0], [[0, 0, 1], [1, 0, 0], [0, 0, 1]])
    np.testing.assert_array_equal(y[:, 0, 0], [1, 0, 1, 0, 1, 0])  # classes [False, True]

    s = TableStream(table, label="num", n_clients=1, task="least_squares", max_steps=4)
    assert s.n_steps == 4 and s.n_truncated_ == 2


def test_many_valued_label_is_regression():
    table = pd.DataFrame({"x": np.arange(30.0), "y": np.arange(30) % 11})
    assert TableStream(table, label="y").task == "least_squares"
    assert TableStream(table.assign(y=np.arange(30) % 10), label="y").task == "softmax"


def test_error_messages():
    table = pd.DataFrame({"x": [1.0, 2.0, np.nan], "y": [0, 1, 0]})
    with pytest.raises(ValueError) as err:
        TableStream(table, label="nope")
    assert str(err.value) == "Unknown label column 'nope'; the table has columns 'x', 'y'."
    with pytest.raises(ValueError) as err:
        TableStream(table, label="y", features=["x", "z"])
    assert str(err.value) == "Unknown feature column 'z'; the table has columns 'x', 'y'."
    with pytest.raises(ValueError) as err:
        TableStream(table, label="y")
    assert str(err.value) == "Column 'x' has 1 missing values; drop or impute them before streaming."
    with pytest.raises(ValueError) as err:
        TableStream(table, label="y", alpha=-1)
    assert str(err.value) == "The 'alpha' parameter of TableStream must be a float > 0. Got -1 instead."
    with pytest.raises(ValueError, match="The 'split' parameter of TableStream must be one of"):
        TableStream(table, label="y", split="random")
    with pytest.raises(ValueError, match="split='column' needs client_column"):
        TableStream(table.fillna(0), label="y", split="column")
    with pytest.raises(ValueError, match="single class"):
        TableStream(table.fillna(0).assign(y=1), label="y")


# --------------------------------------------------------------------------- files and replay


def test_csv_and_parquet_round_trip(tmp_path):
    table = pd.DataFrame(
        {"a": [1.5, -2.0, 3.25], "n": [1, 2, 3], "s": ["u", "v", "w"], "flag": [True, False, True]}
    )
    for name in ["t.csv", "t.parquet", "t.pq"]:
        path = tmp_path / name
        if name.endswith(".csv"):
            table.to_csv(path, index=False)
        else:
            table.to_parquet(path, index=False)
        pd.testing.assert_frame_equal(load_table_file(path), table)
        pd.testing.assert_frame_equal(load_table_file(str(path)), table)
    with pytest.raises(ValueError, match=r"Unsupported table file '.*t\.json'; use a \.csv"):
        load_table_file(tmp_path / "t.json")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_table_file(tmp_path / "missing.csv")
    (tmp_path / "bad.parquet").write_text("not parquet")
    with pytest.raises(ValueError, match="Could not read .* as Parquet"):
        load_table_file(tmp_path / "bad.parquet")


def test_replay_is_identical_and_chunking_invariant():
    table, _ = _three_class_table(n=1000)
    s = TableStream(table, label="y", n_clients=4, split="dirichlet", alpha=0.3, batch_size=3,
                    prior_shift={"start": 0.5, "class_weights": {2: 4.0}})
    X1, y1, m1, t1 = _collect(s, 7)
    X2, y2, m2, t2 = _collect(s, 7)
    X3, y3, m3, _ = _collect(s, 1000)
    assert t1 == list(range(0, s.n_steps, 7))
    for a, b, c in [(X1, X2, X3), (y1, y2, y3), (m1, m2, m3)]:
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)
    chunk = next(s.chunks())
    with pytest.raises(ValueError):
        chunk.X[0, 0, 0, 0] = 1.0  # read-only views keep replays identical


# --------------------------------------------------------------------------- prior shift


def test_prior_shift_reaches_expected_class_proportion():
    n = 20_000
    rng = np.random.default_rng(3)
    y = (rng.random(n) < 0.3).astype(int)
    table = pd.DataFrame({"x": rng.standard_normal(n), "y": y})
    w = 3.0
    s = TableStream(table, label="y", n_clients=2, prior_shift={"start": 0.5, "class_weights": {"1": w}}, seed=11)
    _, ys, mask, _ = _collect(s)
    assert mask is None and s.n_steps == n // 2  # lengths unchanged
    for m in range(2):
        rows = np.arange(m * n // 2, (m + 1) * n // 2)
        k0 = math.floor(0.5 * len(rows))
        head, tail = ys[:k0, m, 0], ys[k0:, m, 0]
        np.testing.assert_array_equal(head, y[rows[:k0]])  # before `start`: untouched
        p = y[rows[k0:]].mean()  # original share of class 1 in the resampled part
        expected = p * w / (p * w + (1 - p))  # proportional to proportion x weight, about 0.56
        # The tail is len(tail) i.i.d. draws, so its class-1 share is Binomial(n, expected)/n:
        # 4 standard deviations (about 0.028 here) bound it with probability > 0.9999.
        tol = 4 * math.sqrt(expected * (1 - expected) / len(tail))
        assert abs(tail.mean() - expected) < tol
        assert abs(tail.mean() - p) > 5 * tol  # and the shift is real (0.27 here)
        assert np.all(np.diff(s.client_rows_[m]) >= 0)  # resampled rows stay in stream order


def test_prior_shift_validation():
    table = pd.DataFrame({"x": np.arange(20.0), "y": [0, 1] * 10})
    with pytest.raises(ValueError) as err:
        TableStream(table, label="y", prior_shift={"start": 0.5, "class_weights": {5: 2.0}})
    assert str(err.value) == "prior_shift names class 5, which is not in the label; the classes are 0, 1."
    with pytest.raises(ValueError, match="The 'prior_shift' parameter of TableStream must be a dict"):
        TableStream(table, label="y", prior_shift={"begin": 0.5, "class_weights": {1: 2.0}})
    with pytest.raises(ValueError, match="The 'start' parameter of prior_shift must be a float >= 0 and <= 1"):
        TableStream(table, label="y", prior_shift={"start": 1.5, "class_weights": {1: 2.0}})
    with pytest.raises(ValueError, match="prior_shift needs a classification task"):
        TableStream(table, label="x", prior_shift={"start": 0.5, "class_weights": {1: 2.0}})
