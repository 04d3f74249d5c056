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

    s = TableStream(table, label="flag", features=["colour"], categorical=["colour"], n_clients=1,
                    standardize=False, intercept=False)
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
    assert str(err.value) == ("Column 'x' has 1 missing values (first at row 3; a CSV's empty cells and NA, N/A, n/a, "
                              "null, NaN, None are missing); drop or impute them before streaming.")
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


# --------------------------------------------------------------------------- how columns are read


def _stray_text_table():
    # The file: x2 holds one text cell among numbers (as pandas reads it from a CSV: all text).
    return pd.DataFrame({"x1": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], "x2": ["2", "abc", "4", "5", "6", "7"],
                         "y": [0, 1, 0, 1, 0, 1]})


def test_text_in_a_named_numeric_feature_is_refused_with_its_row():
    with pytest.raises(ValueError) as err:
        TableStream(_stray_text_table(), label="y", features=["x1", "x2"])
    assert str(err.value) == ("Feature column 'x2' holds numbers with text among them (1 text cell, row 2: 'abc'); "
                              "fix or remove those rows, or list it in categorical to one-hot encode its values.")
    colour = pd.DataFrame({"c": ["red", "blue", "red"], "y": [0, 1, 0]})
    with pytest.raises(ValueError) as err:
        TableStream(colour, label="y", features=["c"])
    assert str(err.value) == ("Feature column 'c' holds text (row 1: 'red'); list it in categorical to one-hot "
                              "encode it, or leave it out of features.")


def test_default_features_drop_text_columns_and_say_why():
    s = TableStream(_stray_text_table(), label="y", n_clients=2, standardize=False)
    assert s.feature_names_ == ["x1", "intercept"] and s.n_features == 2      # never 8 one-hot columns
    assert s.ignored_columns_ == ["x2"]
    assert s.columns_ == [
        {"column": "x1", "read_as": "number", "why": "numbers"},
        {"column": "x2", "read_as": "dropped",
         "why": "numbers with text among them (1 text cell, row 2: 'abc'); fix or remove those rows"},
        {"column": "y", "read_as": "label", "why": "2 classes, numbered in sorted order: 0 → 0 (3 rows), 1 → 1 "
                                                    "(3 rows); class 1 (1) is the positive class"},
    ]


def test_placeholders_and_thousands_separators_in_a_csv(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text('a,q,price,y\n1,3,"1,170.3",0\n2,?,"2,000",1\n3,5,950,0\n4,6,"1,001.5",1\n')
    table = load_table_file(path)
    s = TableStream(table, label="y", n_clients=1, standardize=False)
    assert s.feature_names_ == ["a", "intercept"]
    assert [(c["column"], c["read_as"], c["why"]) for c in s.columns_[1:3]] == [
        ("q", "dropped", "numbers with text among them (1 text cell, row 2: '?'); fix or remove those rows"),
        ("price", "dropped", "numbers written with thousands separators (row 1: '1,170.3'); "
                             "set source.thousands: ','"),
    ]
    with pytest.raises(ValueError) as err:
        TableStream(table, label="y", features=["price"])
    assert str(err.value) == ("Feature column 'price' holds numbers written with thousands separators "
                              "(row 1: '1,170.3'); set source.thousands: ','.")
    s = TableStream(load_table_file(path, thousands=","), label="y", features=["price"], n_clients=1,
                    standardize=False, intercept=False)
    X, _, _, _ = _collect(s)
    np.testing.assert_array_equal(X[:, 0, 0, 0], [1170.3, 2000.0, 950.0, 1001.5])
    table.to_parquet(tmp_path / "t.parquet")
    with pytest.raises(ValueError, match="thousands applies to CSV files only"):
        load_table_file(tmp_path / "t.parquet", thousands=",")


def test_categorical_columns_are_one_hot_over_sorted_values():
    table = pd.DataFrame({"x": [1.0, 2.0, 3.0, 4.0], "city": ["Oslo", "Bergen", "oslo", "Bergen"],
                          "code": [30, 4, 4, 100], "y": [0, 1, 0, 1]})
    s = TableStream(table, label="y", categorical=["city", "code"], n_clients=1, standardize=False,
                    intercept=False)
    assert s.feature_names_ == ["x", "city=Bergen", "city=Oslo", "city=oslo", "code=4", "code=30", "code=100"]
    X, _, _, _ = _collect(s)
    np.testing.assert_array_equal(X[:, 0, 0], [[1, 0, 1, 0, 0, 1, 0], [2, 1, 0, 0, 1, 0, 0],
                                               [3, 0, 0, 1, 1, 0, 0], [4, 1, 0, 0, 0, 0, 1]])
    assert s.columns_[1] == {"column": "city", "read_as": "category",
                             "why": "one-hot over its 3 sorted values ('Bergen', 'Oslo', 'oslo')"}
    with pytest.raises(ValueError) as err:
        TableStream(table, label="y", features=["x"], categorical=["city"])
    assert str(err.value) == "Column 'city' is categorical but not in features; add it to features."
    with pytest.raises(ValueError, match="Column 'y' is the label, client or time column and cannot be categorical"):
        TableStream(table, label="y", categorical=["y"])


def test_time_column_text_must_be_iso_dates():
    table = pd.DataFrame({"when": ["2024-03-02", "2024-03-01T12:00", "2024-02-29"], "x": [1.0, 2.0, 3.0],
                          "y": [0, 1, 0]})
    s = TableStream(table, label="y", time_column="when", n_clients=1, standardize=False, intercept=False)
    X, _, _, _ = _collect(s)
    np.testing.assert_array_equal(X[:, 0, 0, 0], [3.0, 2.0, 1.0])
    assert s.columns_[0] == {"column": "when", "read_as": "time",
                             "why": "orders the rows (ISO-8601 text read as UTC datetimes, ascending; ties keep "
                                    "table order)"}
    with pytest.raises(ValueError) as err:
        TableStream(table.assign(when=["2024-03-02", "1/3/2024", "2024-02-29"]), label="y", time_column="when")
    assert str(err.value) == ("Time column 'when' holds text that is not an ISO-8601 date or time (row 2: "
                              "'1/3/2024'); write times as numbers or as YYYY-MM-DD[THH:MM:SS].")


def test_a_label_of_numbers_with_a_stray_text_cell_is_refused():
    table = pd.DataFrame({"x": np.arange(6.0), "y": ["0", "1", "?", "1", "0", "1"]})
    with pytest.raises(ValueError) as err:
        TableStream(table, label="y")
    assert str(err.value) == ("Label column 'y' holds numbers with text among them (1 text cell, row 3: '?'); "
                              "fix or remove those rows.")


# --------------------------------------------------------------------------- task


def test_task_inference_says_its_rule_and_a_given_task_is_kept():
    table = pd.DataFrame({"x": np.arange(6.0), "y": [0.5, 1.5, 2.5, 0.5, 1.5, 2.5]})
    s = TableStream(table, label="y")
    assert s.task == "least_squares"           # not a 3-class softmax: 0.5 is no class label
    assert s.task_rule_ == ("label 'y' holds numbers that are not whole (e.g. 0.5), so a regression target "
                            "→ least_squares")
    s = TableStream(table.assign(y=[3, 1, 2, 3, 1, 2]), label="y")
    assert (s.task, s.n_classes) == ("softmax", 3)
    assert s.task_rule_ == "label 'y' holds 3 distinct whole numbers (at most 10), so classes → softmax"
    s = TableStream(table.assign(y=[3, 1, 2, 3, 1, 2]), label="y", task="least_squares")
    assert s.task == "least_squares" and s.task_rule_ is None
    assert TableStream(table.assign(y=np.arange(6) % 2 == 0), label="y").task_rule_ == \
        "label 'y' holds booleans, so 2 classes → logistic"


def test_standardize_label_z_scores_a_regression_target():
    table = pd.DataFrame({"x": [0.0, 1.0, 2.0, 3.0], "y": [100.0, 200.0, 300.0, 400.0]})
    s = TableStream(table, label="y", task="least_squares", standardize_label=True, n_clients=1)
    _, y, _, _ = _collect(s)
    sd = math.sqrt(12500.0)                    # population standard deviation of 100..400
    np.testing.assert_allclose(y[:, 0, 0], [-150 / sd, -50 / sd, 50 / sd, 150 / sd], rtol=1e-15)
    assert (s.label_mean_, s.label_scale_) == (250.0, pytest.approx(sd, rel=1e-15))
    assert s.columns_[1]["why"] == ("regression target, 4 values from 100 to 400, z-scored with mean 250 and "
                                    "standard deviation 111.8")
    with pytest.raises(ValueError) as err:
        TableStream(table.assign(y=[0, 1, 0, 1]), label="y", standardize_label=True)
    assert str(err.value) == ("standardize_label needs a least_squares label; label 'y' is read as classes "
                              "(label 'y' holds 2 distinct whole numbers (at most 10), so classes).")


# --------------------------------------------------------------------------- rows and clients left out


def test_incomplete_batches_and_idle_clients_are_counted_and_noted():
    table = pd.DataFrame({"x": np.arange(5.0), "y": [0, 1, 0, 1, 0]})
    s = TableStream(table, label="y", n_clients=1, batch_size=2)
    assert (s.n_steps, s.n_dropped_, s.n_rows_) == (2, 1, 5)      # 5 rows, b = 2: 4 streamed
    assert s.notes_ == ["1 row not streamed: the last mini-batch of 1 client had fewer than b = 2 rows (only full "
                        "mini-batches are streamed)"]

    big = pd.DataFrame({"x": np.arange(200.0), "y": np.arange(200) % 2})
    s = TableStream(big, label="y", n_clients=300)
    assert s.idle_clients_ == list(range(200, 300))
    assert s.notes_ == ["100 of 300 clients have no rows (200 rows in 300 contiguous blocks) and never play: "
                        "clients 200, 201, 202, 203, 204, 205, 206, 207, ... (92 more)"]

    s = TableStream(big, label="y", n_clients=4, split="dirichlet", alpha=0.1, seed=1)
    assert [len(r) for r in s.client_rows_] == [0, 0, 0, 200] and s.idle_clients_ == [0, 1, 2]
    assert s.notes_ == ["3 of 4 clients have no rows (Dirichlet label skew, alpha = 0.1) and never play: "
                        "clients 0, 1, 2"]

    s = TableStream(big, label="y", n_clients=2, batch_size=3, max_steps=10)
    assert (s.n_dropped_, s.n_truncated_) == (2, 138)                # 100 rows each: 33 batches + 1 row
    assert s.notes_[1] == "138 rows after step 10 not streamed (steps caps the stream at T = 10)"

    s = TableStream(_client_table(), label="y", split="column", client_column="client", time_column="t",
                    batch_size=4)
    assert (s.n_steps, s.n_dropped_, s.idle_clients_) == (1, 3, ["b"])
    assert s.notes_ == ["1 client with fewer rows than b = 4 never plays: b (3 rows)",
                        "3 rows not streamed: the last mini-batch of 1 client had fewer than b = 4 rows (only full "
                        "mini-batches are streamed)"]
    assert s.columns_[0] == {"column": "client", "read_as": "client",
                             "why": "client ids, one client per distinct value (2 clients, sorted)"}


def test_replay_paces_by_the_time_column_as_the_stream_orders_it(tmp_path):
    # `streamfl replay --file` reads the time column the same way: ISO-8601 text as UTC seconds since the epoch
    from producers.replay import step_times
    from streamfl.config import parse_config
    from streamfl.generators.build import build_stream

    path = tmp_path / "t.csv"
    path.write_text("when,x,y\n1970-01-01T00:01:00,1,0\n1970-01-01T00:00:10,2,1\n1970-01-01T00:00:30+00:00,3,0\n")
    cfg = parse_config({"steps": None, "source": {"kind": "file", "path": str(path), "label": "y", "clients": 1,
                                                  "time_column": "when", "standardize": False}})
    stream = build_stream(cfg)
    X, _, _, _ = _collect(stream)
    np.testing.assert_array_equal(X[:, 0, 0, 0], [2.0, 3.0, 1.0])
    np.testing.assert_array_equal(step_times(cfg, stream), [10.0, 30.0, 60.0])


# ---- second new-user break test: values exactly right or refused ---------------------------------------------
def test_thousands_separators_read_exactly_or_refused(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text('a,b,name\n"1,170.3",1,"Smith, J"\n"12,000",2,x\n-5.5,3,y\n"-1,234,567",4,z\n')
    table = load_table_file(path, thousands=",")
    assert table["a"].tolist() == [1170.3, 12000.0, -5.5, -1234567.0]
    assert table["name"].tolist() == ["Smith, J", "x", "y", "z"]          # text with commas stays text
    assert load_table_file(path)["a"].tolist() == ["1,170.3", "12,000", "-5.5", "-1,234,567"]   # not declared
    for cell in ["1,2345", "0,001", "1,,000", "1,000,"]:     # pandas' own option reads these as 12345, 1, 1000, 1000
        path.write_text(f'a,b\n"1,170.3",1\n"{cell}",2\n')
        with pytest.raises(ValueError) as err:
            load_table_file(path, thousands=",")
        assert str(err.value) == (f"Column 'a' row 2: '{cell}' is not a number with thousands separator ',' (a first "
                                  f"group of 1-3 digits, then groups of exactly 3); fix the cell or remove "
                                  f"source.thousands.")
    with pytest.raises(ValueError) as err:
        load_table_file(path, thousands=".")
    assert str(err.value) == ("thousands must be one of ',', \"'\", '_', ' ' (got '.'); a '.' or a digit would change "
                              "the numbers' values.")


def test_duplicate_csv_header_is_refused(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("x1,x1,y\n1,2,0\n")
    with pytest.raises(ValueError) as err:
        load_table_file(path)
    assert str(err.value) == f"'{path}' names the column 'x1' 2 times in its header; give every column its own name."


def test_overflowing_standardisation_and_inf_cells_are_named():
    table = pd.DataFrame({"x1": [1e308, -1e308, 1e308, -1e308], "x2": [1.0, 2, 3, 4], "y": [0.5, 1.5, 2.5, 3.7]})
    with pytest.raises(ValueError) as err:
        TableStream(table, label="y", n_clients=1)
    assert str(err.value) == ("Feature 'x1' cannot be standardised: its values are so large that its mean or standard "
                              "deviation overflows float64 (mean 0, standard deviation inf, largest magnitude 1e+308); "
                              "rescale the column (other units) before streaming.")
    with pytest.raises(ValueError) as err:
        TableStream(table.assign(x1=[1.0, 2, 3, 4], x2=[1.0, math.inf, 3, -math.inf]), label="y", n_clients=1)
    assert str(err.value) == ("Column 'x2' has 2 infinite values (first at row 2: inf); drop or clip them before "
                              "streaming.")
    with pytest.raises(ValueError) as err:
        TableStream(table.assign(x1=[1.0, 2, 3, 4], x2=["1", "2", "3", "-inf"]), label="y", n_clients=1)
    assert str(err.value) == ("Column 'x2' has 1 infinite value (first at row 4: '-inf'); drop or clip them before "
                              "streaming.")


def test_label_statistics_and_class_numbers_in_the_columns_report():
    table = pd.DataFrame({"x": [1.0, 2, 3, 4, 5], "y": ["no", "yes", "yes", "no", "yes"]})
    s = TableStream(table, label="y", n_clients=1)
    assert s.columns_[1]["why"] == ("2 classes, numbered in sorted order: 'no' → 0 (2 rows), 'yes' → 1 (3 rows); "
                                    "class 1 ('yes') is the positive class")
    s = TableStream(table.assign(y=[0.5, 1.5, 2.5, 3.5, 4.5]), label="y", n_clients=1)
    assert s.columns_[1]["why"] == ("regression target, 5 values from 0.5 to 4.5 in its own units (mean 2.5, "
                                    "standard deviation 1.414)")


def test_dates_as_text_in_a_feature_get_the_iso_hint():
    table = pd.DataFrame({"x": [1.0, 2], "day": ["2024-01-01", "2024-01-02"], "y": [0, 1]})
    with pytest.raises(ValueError) as err:
        TableStream(table, label="y", features=["x", "day"], n_clients=1)
    assert str(err.value) == ("Feature column 'day' holds dates as text (row 1: '2024-01-01'); a CSV's dates are read "
                              "only in source.time_column (as ISO-8601 YYYY-MM-DD[THH:MM:SS]); as a feature, convert "
                              "them to numbers (e.g. days) first.")


def test_a_stream_larger_than_memory_is_refused_before_allocating(monkeypatch):
    monkeypatch.setattr(tabular, "available_memory", lambda: 100)
    table = pd.DataFrame({"x": [1.0, 2, 3, 4], "y": [0.5, 1.5, 2.5, 3.5]})
    with pytest.raises(ValueError) as err:
        TableStream(table, label="y", n_clients=2)
    assert str(err.value) == ("The stream needs 128 bytes of memory (T = 2 steps × M = 2 clients × b = 1 × d = 2 "
                              "features, 8 bytes each) and 100 bytes is free; use fewer rows or features, or a "
                              "smaller table.")
