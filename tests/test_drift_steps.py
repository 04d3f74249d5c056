"""Drift acts at the step the config names, counted from 1 as metrics.csv's t and the plots' markers.

Row i of a stream's chunks is step t = t0 + i + 1. For every kind of schedule
these tests read the chunk's optimum (or its scale, features or labels) at
t − 1 and t and check where the change is, at several chunk sizes (the change
inside a chunk and on a chunk's first row).
"""

import numpy as np
import pandas as pd
import pytest

from streamfl.config import ConfigError, parse_config
from streamfl.generators.inject import CovariateRotation, CovariateScale, InjectedDrift, LabelFlip
from streamfl.generators.schedules import (Abrupt, CovariateShift, HeterogeneityChange, Linear, Periodic, RandomWalk,
                                           Rotation)
from streamfl.generators.synthetic import SyntheticStream
from streamfl.generators.tabular import TableStream
from streamfl.report.plots import _abrupt_steps, _injected_windows

CHUNKS = (1, 4, 5, 256)          # with a change at t = 6: inside a chunk, and on a chunk's first row (4 + 1, 5 + 1)


def _rows(stream, chunk_size, name="optimum"):
    """The chunks' ``name`` arrays, stacked: row i is step t = i + 1."""
    return np.concatenate([getattr(c, name) for c in stream.chunks(chunk_size)])


def _at(rows, t):
    """The value at step t (counted from 1)."""
    return rows[t - 1]


def _synthetic(drift=(), **kw):
    args = dict(n_clients=3, n_features=4, n_steps=12, heterogeneity=0.3, seed=7)
    args.update(kw)
    return SyntheticStream("least_squares", drift=list(drift), **args)


@pytest.mark.parametrize("chunk", CHUNKS)
def test_abrupt_at_6_is_in_effect_from_step_6(chunk):
    w = _rows(_synthetic([Abrupt([6])]), chunk)
    assert np.array_equal(_at(w, 5), _at(w, 1))              # steps 1..5: the initial optimum
    assert not np.allclose(_at(w, 6), _at(w, 5))             # the switch is at t = 6
    assert np.array_equal(_at(w, 12), _at(w, 6))             # and holds


@pytest.mark.parametrize("chunk", CHUNKS)
def test_abrupt_with_delay_switches_client_m_at_at_plus_delay_m(chunk):
    w = _rows(_synthetic([Abrupt([4]).per_client(delay=2)]), chunk)
    for m in range(3):
        t = 4 + 2 * m
        assert np.array_equal(w[t - 2, m], w[0, m]) and not np.allclose(w[t - 1, m], w[t - 2, m]), m


@pytest.mark.parametrize("chunk", CHUNKS)
def test_covariate_shift_at_6_scales_the_features_from_step_6(chunk):
    s = _synthetic(covariate=[CovariateShift(at=[6], factors=[3.0], clients=[1])])
    scale = _rows(s, chunk, "scale")
    assert _at(scale, 5).tolist() == [1.0, 1.0, 1.0] and _at(scale, 6).tolist() == [1.0, 3.0, 1.0]


@pytest.mark.parametrize("chunk", CHUNKS)
def test_heterogeneity_ramp_starts_at_step_start_and_ends_at_step_end(chunk):
    s = _synthetic(heterogeneity=0.5, heterogeneity_change=HeterogeneityChange("ramp", start=4, end=8, to=1.5))
    w = _rows(s, chunk)
    rms = np.sqrt(np.mean(np.sum((w - w.mean(axis=1, keepdims=True)) ** 2, axis=-1), axis=1))
    assert _at(rms, 4) == pytest.approx(0.5, rel=1e-12) and _at(rms, 3) == pytest.approx(0.5, rel=1e-12)
    assert _at(rms, 5) == pytest.approx(0.75, rel=1e-12)      # a quarter of the way at t = 5
    assert _at(rms, 8) == pytest.approx(1.5, rel=1e-12) and _at(rms, 7) == pytest.approx(1.25, rel=1e-12)


@pytest.mark.parametrize("chunk", CHUNKS)
def test_continuous_schedules_start_from_the_initial_optimum_at_step_1(chunk):
    # rotation, linear, periodic and random walk move with the elapsed steps t − 1: step 1 has the initial
    # optimum (the stream without drift), step 2 has moved by one step
    still = _rows(_synthetic(), chunk)
    for drift in (Rotation(0.3), Linear(0.2), Periodic(1.0, period=8), RandomWalk(0.5)):
        w = _rows(_synthetic([drift]), chunk)
        assert np.allclose(_at(w, 1), _at(still, 1), atol=1e-15), drift
        assert not np.allclose(_at(w, 2), _at(w, 1)), drift
    w = _rows(_synthetic([Linear(0.2)]), chunk)
    c = w.mean(axis=1)                                        # the centre (the offsets average to zero)
    assert np.linalg.norm(_at(c, 6) - _at(c, 1)) == pytest.approx(0.2 * 5, rel=1e-12)
    rot = Rotation(0.3)
    w = _rows(_synthetic([rot], heterogeneity=0.0), chunk)
    angle = np.arctan2(w[:, 0] @ rot.v, w[:, 0] @ rot.u)     # the centre's angle in the rotation's plane
    assert _at(angle, 6) - _at(angle, 1) == pytest.approx(0.3 * 5, rel=1e-12)


def _table(n=10):
    rng = np.random.default_rng(2)
    return TableStream(pd.DataFrame({"a": rng.standard_normal(n), "b": rng.standard_normal(n),
                                     "y": [0, 1] * (n // 2)}), label="y", n_clients=1, standardize=False)


@pytest.mark.parametrize("chunk", CHUNKS)
def test_injected_switches_act_from_step_start(chunk):
    base = _table()
    X0 = _rows(base, chunk, "X")
    for injector in (CovariateRotation(6, 6, 0.9, plane=(0, 1)), CovariateScale(6, 6, 3.0, features=[0])):
        X = _rows(InjectedDrift(base, [injector]), chunk, "X")
        assert np.array_equal(X[:5], X0[:5]), injector        # steps 1..5 untouched
        assert not np.allclose(_at(X, 6), _at(X0, 6)), injector


@pytest.mark.parametrize("chunk", CHUNKS)
def test_injected_ramp_reaches_the_full_change_at_step_end(chunk):
    base = _table()
    X0, X = _rows(base, chunk, "X"), _rows(InjectedDrift(base, [CovariateScale(4, 8, 5.0, features=[0])]), chunk, "X")
    factor = X[..., 0] / X0[..., 0]
    assert _at(factor, 4) == pytest.approx(1.0) and _at(factor, 6) == pytest.approx(3.0)
    assert _at(factor, 8) == pytest.approx(5.0) and _at(factor, 10) == pytest.approx(5.0)


@pytest.mark.parametrize("chunk", CHUNKS)
def test_label_flip_acts_on_steps_start_to_end_minus_1(chunk):
    base = _table()
    y0, y = _rows(base, chunk, "y"), _rows(InjectedDrift(base, [LabelFlip(6, 8)]), chunk, "y")
    flipped = [t for t in range(1, 11) if not np.array_equal(_at(y, t), _at(y0, t))]
    assert flipped == [6, 7]


def test_config_refuses_step_0_and_plots_mark_the_named_step():
    for drift in ({"kind": "abrupt", "at": [0]},):
        with pytest.raises(ConfigError, match="greater than or equal to 1"):
            parse_config({"source": {"kind": "synthetic", "drift": [drift]}})
    summary = {"config": {"source": {"drift": [{"kind": "abrupt", "at": [1200]}],
                                     "inject": [{"kind": "covariate_scale", "start": 50, "end": 60, "factor": 2.0}]}}}
    assert _abrupt_steps(summary) == [1200]
    assert _injected_windows(summary)[0][:2] == (50.0, 60.0)


def test_default_run_switches_at_step_1200():
    from streamfl.config import default_config
    from streamfl.generators.build import build_stream
    cfg = default_config()
    assert [d.at for d in cfg.source.drift if d.kind == "abrupt"] == [[1200]]
    stream = build_stream(cfg.model_copy(update={"steps": 1210}))
    w = np.concatenate([c.optimum for c in stream.chunks(600)])
    # rotation moves the optimum a little every step; the switch is the one big jump, between t = 1199 and 1200
    jumps = np.linalg.norm(np.diff(w, axis=0), axis=-1).max(axis=1)
    assert int(np.argmax(jumps)) + 2 == 1200 and jumps.max() > 100 * np.median(jumps)
