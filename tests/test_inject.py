import math

import numpy as np
import pandas as pd
import pytest

from streamfl.generators.base import Chunk, Stream
from streamfl.generators.inject import CovariateRotation, CovariateScale, InjectedDrift, LabelFlip
from streamfl.generators.tabular import TableStream


def _collect(stream, chunk_size=256):
    chunks = list(stream.chunks(chunk_size))
    X = np.concatenate([c.X for c in chunks])
    y = np.concatenate([c.y for c in chunks])
    mask = None if chunks[0].mask is None else np.concatenate([c.mask for c in chunks])
    return X, y, mask


def _tiny(label_values=(0, 1, 0, 1, 1, 0, 0, 1), n_clients=2):
    # Client 0 gets rows 0-3, client 1 rows 4-7; features (a, b, c) then the intercept.
    table = pd.DataFrame(
        {
            "a": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0],
            "b": [0.5, 0.0, -1.0, 2.0, 0.0, 1.0, 1.0, -2.0],
            "c": [0.0, 1.0, 1.0, 3.0, 2.0, 0.0, -1.0, 4.0],
            "y": list(label_values),
        }
    )
    return TableStream(table, label="y", n_clients=n_clients, standardize=False)


def test_abrupt_quarter_turn_maps_exact_vectors():
    base = _tiny()
    X0, _, _ = _collect(base)
    # pi/2 in the (a, c) plane taking a towards c: (a, b, c, 1) -> (-c, b, a, 1) from step 3 on (rows are the
    # steps t = 1, 2, …: rows 2 and 3 turn, steps 1 and 2 do not)
    drifted = InjectedDrift(base, [CovariateRotation(start=3, end=3, angle=math.pi / 2, plane=(0, 2))])
    X, y, _ = _collect(drifted)
    expected = np.array(
        [
            [[1.0, 0.5, 0.0, 1.0], [5.0, 0.0, 2.0, 1.0]],
            [[2.0, 0.0, 1.0, 1.0], [6.0, 1.0, 0.0, 1.0]],
            [[-1.0, -1.0, 3.0, 1.0], [1.0, 1.0, 7.0, 1.0]],
            [[-3.0, 2.0, 4.0, 1.0], [-4.0, -2.0, 8.0, 1.0]],
        ]
    )
    np.testing.assert_allclose(X[:, :, 0], expected, atol=1e-12)
    np.testing.assert_array_equal(X0[:2], X[:2])
    np.testing.assert_array_equal(_collect(base)[0], X0)  # the wrapped stream is not modified


def test_random_plane_rotation_is_a_rotation_of_the_non_intercept_features():
    base = _tiny()
    X0, _, _ = _collect(base)
    X, _, _ = _collect(InjectedDrift(base, [CovariateRotation(start=2, end=4, angle=1.0, seed=5)]))
    np.testing.assert_array_equal(X[..., 3], 1.0)  # intercept untouched
    np.testing.assert_allclose(np.linalg.norm(X, axis=-1), np.linalg.norm(X0, axis=-1))
    np.testing.assert_array_equal(X[:2], X0[:2])  # ramp: 0 up to step 2 (rows 0, 1)
    assert not np.allclose(X[2], X0[2])            # and half the angle at step 3
    # Inner products between samples of the same step are preserved (same rotation).
    for t in range(4):
        np.testing.assert_allclose(X[t, :, 0] @ X[t, :, 0].T, X0[t, :, 0] @ X0[t, :, 0].T)
    # With two free features the random plane is the whole (a, b) plane: angle at step 3 (row 2) is
    # 2 · (3 − 1)/4 = 1.
    table = pd.DataFrame({"a": [1.0, 0.0, 3.0], "b": [0.0, 1.0, 4.0], "y": [0, 1, 0]})
    two = TableStream(table, label="y", n_clients=1, standardize=False)
    Xr, _, _ = _collect(InjectedDrift(two, [CovariateRotation(start=1, end=5, angle=2.0, seed=1)]))
    c, s = math.cos(1.0), math.sin(1.0)
    got = Xr[2, 0, 0, :2]
    assert np.allclose(got, [c * 3 - s * 4, s * 3 + c * 4]) or np.allclose(got, [c * 3 + s * 4, -s * 3 + c * 4])


def test_covariate_scale_ramps_half_the_features():
    base = _tiny()
    X0, _, _ = _collect(base)
    X, _, _ = _collect(InjectedDrift(base, [CovariateScale(start=2, end=4, factor=5.0, features=[1])]))
    factors = np.array([1.0, 1.0, 3.0, 5.0])  # steps t = 1..4: 1 + 4 * clip((t - 2) / 2, 0, 1)
    np.testing.assert_allclose(X[..., 1], X0[..., 1] * factors[:, None, None])
    np.testing.assert_array_equal(X[..., [0, 2, 3]], X0[..., [0, 2, 3]])
    X, _, _ = _collect(InjectedDrift(base, [CovariateScale(start=1, end=1, factor=2.0, seed=3)]))
    changed = np.flatnonzero(np.any(X != X0, axis=(0, 1, 2)))
    assert len(changed) == 1 and changed[0] < 3  # max(1, 3 // 2) features, never the intercept


def test_label_flip_fraction_one_flips_exactly_the_window():
    base = _tiny()
    _, y0, _ = _collect(base)
    _, y, _ = _collect(InjectedDrift(base, [LabelFlip(start=3, end=5)]), chunk_size=3)    # steps 3 and 4
    np.testing.assert_array_equal(y[:2], y0[:2])
    np.testing.assert_array_equal(y[2:], 1 - y0[2:])

    table = pd.DataFrame({"x": np.arange(12.0), "y": ["a", "b", "c"] * 4})
    soft = TableStream(table, label="y", n_clients=2)
    _, ys0, _ = _collect(soft)
    _, ys, _ = _collect(InjectedDrift(soft, [LabelFlip(start=3, end=5)]))
    flipped = np.zeros(soft.n_steps, bool)
    flipped[2:4] = True                                                  # rows 2, 3: steps t = 3, 4
    np.testing.assert_array_equal(ys[flipped], (ys0[flipped] + 1) % 3)
    np.testing.assert_array_equal(ys[~flipped], ys0[~flipped])


def test_partial_flip_fraction_and_replay():
    rng = np.random.default_rng(0)
    table = pd.DataFrame({"a": rng.standard_normal(4000), "b": rng.standard_normal(4000),
                          "y": rng.integers(0, 2, 4000)})
    base = TableStream(table, label="y", n_clients=4, batch_size=5)
    drifted = InjectedDrift(base, [CovariateRotation(50, 100, 0.7, seed=2), CovariateScale(20, 20, 0.5, seed=4),
                                   LabelFlip(101, None, fraction=0.3, seed=9)])      # from row 100
    X1, y1, _ = _collect(drifted, 256)
    X2, y2, _ = _collect(drifted, 256)
    X3, y3, _ = _collect(drifted, 7)  # same data whatever the chunk size
    np.testing.assert_array_equal(X1, X2)
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_array_equal(X1, X3)
    np.testing.assert_array_equal(y1, y3)
    _, y0, _ = _collect(base)
    assert np.array_equal(y1[:100], y0[:100])
    share = np.mean(y1[100:] != y0[100:])  # 2000 samples: sd of the share is about 0.01
    assert abs(share - 0.3) < 0.05


def test_regression_label_flip_raises():
    table = pd.DataFrame({"x": np.arange(20.0), "y": np.linspace(0, 1, 20)})
    reg = TableStream(table, label="y", n_clients=2)
    assert reg.task == "least_squares"
    with pytest.raises(ValueError) as err:
        InjectedDrift(reg, [LabelFlip(start=3)])
    assert str(err.value) == (
        "LabelFlip needs a classification stream (task 'logistic' or 'softmax'); "
        "the wrapped stream has task 'least_squares'."
    )


def test_attributes_and_mask_are_kept():
    table = pd.DataFrame({"a": np.arange(10.0), "b": np.ones(10), "y": [0, 1] * 5})
    base = TableStream(table, label="y", n_clients=3)
    drifted = InjectedDrift(base, [CovariateRotation(1, 1, 0.3)])
    for name in ["n_clients", "n_features", "batch_size", "n_steps", "task", "n_classes", "has_intercept"]:
        assert getattr(drifted, name) == getattr(base, name)
    assert drifted.feature_names_ == base.feature_names_  # delegated
    np.testing.assert_array_equal(_collect(drifted)[2], _collect(base)[2])


def test_validation_messages():
    with pytest.raises(ValueError) as err:
        CovariateRotation(start=5, end=3, angle=1.0)
    assert str(err.value) == "The 'end' parameter of CovariateRotation must be an int >= start (5). Got 3 instead."
    with pytest.raises(ValueError, match="The 'factor' parameter of CovariateScale must be a float > 0. Got 0"):
        CovariateScale(1, 1, 0.0)
    with pytest.raises(ValueError, match=r"The 'fraction' parameter of LabelFlip must be a float > 0 and <= 1"):
        LabelFlip(1, fraction=1.5)
    for make in (lambda: CovariateRotation(0, 0, 1.0), lambda: CovariateScale(0, 2, 2.0), lambda: LabelFlip(0)):
        with pytest.raises(ValueError, match=r"'start' parameter of \w+ must be an int >= 1 \(steps count from 1"):
            make()
    one = TableStream(pd.DataFrame({"a": [1.0, 2.0], "y": [0, 1]}), label="y", n_clients=1)
    with pytest.raises(ValueError, match="CovariateRotation needs at least 2 non-intercept features; the stream has 1"):
        InjectedDrift(one, [CovariateRotation(1, 1, 1.0)])


class _KnownOptimum(Stream):
    """Least squares with y = x . w exactly, w known."""

    def __init__(self):
        rng = np.random.default_rng(1)
        self.n_clients, self.n_features, self.batch_size, self.n_steps = 2, 3, 4, 6
        self.task = "least_squares"
        self.X = rng.standard_normal((6, 2, 4, 3))
        self.w = rng.standard_normal((6, 2, 3))
        self.y = np.einsum("tmbd,tmd->tmb", self.X, self.w)

    def chunks(self, chunk_size=256):
        for t0 in range(0, self.n_steps, chunk_size):
            s = slice(t0, t0 + chunk_size)
            yield Chunk(t0, self.X[s], self.y[s], None, self.w[s])


def test_optimum_follows_covariate_drift():
    drifted = InjectedDrift(_KnownOptimum(), [CovariateRotation(1, 3, 1.2, seed=3), CovariateScale(2, 4, 3.0)])
    for chunk in drifted.chunks(2):
        np.testing.assert_allclose(np.einsum("tmbd,tmd->tmb", chunk.X, chunk.optimum), chunk.y)
    logistic = _KnownOptimum()
    logistic.task, logistic.y = "logistic", (logistic.y > 0).astype(float)
    assert all(c.optimum is None for c in InjectedDrift(logistic, [LabelFlip(3, 5)]).chunks(2))


def test_drift_injected_after_the_end_is_noted():
    base = _tiny()                                   # 4 steps: 1..4
    drifted = InjectedDrift(base, [LabelFlip(start=5000), CovariateRotation(start=2, end=9, angle=1.0),
                                   CovariateScale(start=1, end=3, factor=2.0), LabelFlip(start=4)])
    assert drifted.notes_ == [
        "label_flip starts at step 5000, after the last step (4; steps count from 1): no effect",
        "covariate_rotation ramps until step 9, after the last step (4): it reaches 29% of its full change",
    ]                                                # (4 − 2)/(9 − 2) = 29 %; a flip from step 4 is in time
    assert drifted.columns_ == base.columns_ and drifted.task_rule_ == base.task_rule_
    X, y, _ = _collect(drifted)
    y0 = _collect(base)[1]
    np.testing.assert_array_equal(y[:3], y0[:3])                 # the late flip never acts,
    np.testing.assert_array_equal(y[3], 1 - y0[3])               # the one from step 4 does
