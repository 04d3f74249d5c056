"""The certified live static comparator of logistic runs (streamfl/regret/bracket.py)."""

import numpy as np
import pandas as pd
import pytest

from pathlib import Path

from streamfl.config import load_config
from streamfl.generators.schedules import Abrupt, Rotation
from streamfl.generators.synthetic import SyntheticStream
from streamfl.regret.bracket import LogisticBracket, psi_minus, psi_plus, sc_lower_gap
from streamfl.regret.comparators import solve_hindsight
from streamfl.runtime.experiment import run_experiment


def test_psi_functions_match_their_definitions():
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 40
    r = [0.0, 1e-6, 1e-3, 0.5, 2.0, 30.0]
    exact_minus = [0.5] + [float((mpmath.exp(-mpmath.mpf(x)) + x - 1) / mpmath.mpf(x) ** 2) for x in r[1:]]
    exact_plus = [0.5] + [float((mpmath.exp(mpmath.mpf(x)) - x - 1) / mpmath.mpf(x) ** 2) for x in r[1:]]
    np.testing.assert_allclose(psi_minus(np.array(r)), exact_minus, rtol=1e-12)
    np.testing.assert_allclose(psi_plus(np.array(r)), exact_plus, rtol=1e-12)
    assert np.isinf(psi_plus(np.array([800.0]))[0])


@pytest.mark.parametrize("kappa", [0.0, 0.3, 2.0])
def test_lower_gap_is_the_smallest_certified_radius(kappa):
    lam = np.array([0.0, 0.01, 0.1, 0.3, 0.45, 0.49, 3.0])
    gap = sc_lower_gap(lam, kappa)
    for l, g in zip(lam, gap):
        if kappa * l >= 1:
            assert np.isinf(g)
            continue
        if l == 0:
            assert g == 0
            continue
        nu = 4 * g / l                                   # gap = λν/4
        assert nu * psi_minus(np.array(kappa * nu)) >= l                    # a valid radius
        assert (0.999 * nu) * psi_minus(np.array(kappa * 0.999 * nu)) < l  # and the smallest, to 0.1 %
    assert sc_lower_gap(np.array([0.2]), 0.0)[0] == pytest.approx(0.02)     # the quadratic model's λ²/2


def _drifting(T=600, M=4, d=5, b=1, seed=0):
    return SyntheticStream("logistic", n_clients=M, n_features=d, n_steps=T, batch_size=b, heterogeneity=0.5,
                           radius=2.0, drift=[Rotation(0.002), Abrupt([T // 2])], seed=seed)


def _run_bracket(stream, chunk, exact_steps=(), **kw):
    br = LogisticBracket(stream.n_features, exact_steps=exact_steps, **kw)
    outs = [br.update(ch.X, ch.y, ch.weights(), t0=ch.t0) for ch in stream.chunks(chunk)]
    return br, {k: np.concatenate([o[k] for o in outs]) for k in outs[0]}


def _exact(stream, ts):
    chunks = list(stream.chunks(256))
    X = np.concatenate([c.X for c in chunks])
    y = np.concatenate([c.y for c in chunks])
    c = np.concatenate([c.weights() for c in chunks])
    d = X.shape[-1]
    out, x = {}, None
    for t in ts:
        x, out[t] = solve_hindsight("logistic", lambda: [(X[:t].reshape(-1, d), y[:t].reshape(-1),
                                                          c[:t].reshape(-1))], (d, 1), x0=x)
    return out


def test_bracket_holds_the_exact_comparator_at_every_checked_step_through_an_abrupt_drift():
    stream = _drifting()
    ts = [1, 2, 7, 20, 64, 150, 299, 300, 301, 310, 350, 450, 599, 600]
    br, out = _run_bracket(stream, 64, exact_steps=[600])
    truth = _exact(stream, ts)
    for t in ts:
        lo, hi, est = out["lower"][t - 1], out["upper"][t - 1], out["estimate"][t - 1]
        assert lo - 1e-9 <= truth[t] <= hi + 1e-9, t
        assert lo <= est <= hi
    # past the first steps the interval is narrow: the live value is right to well under a nat
    late = np.arange(100, 600)
    assert np.median(out["upper"][late] - out["lower"][late]) < 0.1
    assert out["exact"][-1] == pytest.approx(truth[600], rel=1e-11)
    assert np.isnan(out["exact"][:-1]).all()


def test_bracket_values_do_not_depend_on_chunking():
    stream = _drifting(T=400)
    _, a = _run_bracket(stream, 256, exact_steps=[100, 400])
    _, b = _run_bracket(stream, 7, exact_steps=[100, 400])
    _, c = _run_bracket(stream, 1, exact_steps=[100, 400])
    for key in ("estimate", "lower", "upper", "exact"):
        np.testing.assert_allclose(a[key], b[key], rtol=1e-10, atol=1e-12, err_msg=key)
        np.testing.assert_allclose(a[key], c[key], rtol=1e-10, atol=1e-12, err_msg=key)


def test_spilled_recording_gives_the_same_values(tmp_path):
    stream = _drifting(T=300)
    _, mem = _run_bracket(stream, 64, exact_steps=[300])
    br, disk = _run_bracket(stream, 64, exact_steps=[300], memory_mb=1e-6, spool_dir=str(tmp_path / "rec"))
    assert len(br.rec.files) == len(br.rec.blocks) >= 1  # every page went to a file
    for key in ("estimate", "lower", "upper", "exact"):
        np.testing.assert_allclose(mem[key], disk[key], rtol=1e-12, atol=1e-12, err_msg=key)
    br.rec.close()
    assert not (tmp_path / "rec").exists()


def test_separable_first_rows_do_not_strand_the_centre():
    # d = 10 with 8 rows a step: the first steps are separable (no finite minimiser); the centre first runs
    # off along the separating direction and must come back once the rows stop being separable
    stream = SyntheticStream("logistic", n_clients=8, n_features=10, n_steps=80, batch_size=1, radius=2.0, seed=0)
    br, out = _run_bracket(stream, 80, exact_steps=[1, 2, 3, 5, 8, 13, 80])
    truth = _exact(stream, [3, 5, 13, 40, 80])
    for t, v in truth.items():
        assert out["lower"][t - 1] - 1e-8 <= v <= out["upper"][t - 1] + 1e-8
    assert out["upper"][79] - out["lower"][79] < 1e-8 and out["upper"][59] - out["lower"][59] < 6.0
    assert out["exact"][-1] == pytest.approx(truth[80], rel=1e-10)


def test_default_run_live_static_regret_has_the_exact_sign_and_bounds(tmp_path):
    # the default experiment: the live static regret was +38.9 at T while the exact value was −155.8 (the
    # reservoir's estimate was extrapolated linearly from its last refit, before the abrupt switch); the
    # switch now acts at the step it names (t = 1,200, not 1,201), hence −155.9129
    cfg = load_config(Path(__file__).parent.parent / "examples" / "default.yaml")
    s = run_experiment(cfg, tmp_path / "run", plots=False)
    df = pd.read_csv(tmp_path / "run" / "metrics.csv")
    assert s["regret_static"] == pytest.approx(-155.9129, abs=5e-5)
    last = df.iloc[-1]                                   # metrics.csv holds 10 significant digits
    assert last["regret_static"] == pytest.approx(s["regret_static"], rel=1e-9)
    assert last["regret_static_live"] == pytest.approx(s["regret_static"], rel=1e-9)
    assert last["regret_static_lower"] - 1e-6 <= s["regret_static"] <= last["regret_static_upper"] + 1e-6
    # at every step the live estimate lies in its certified interval, and the interval is narrow
    assert (df["regret_static_lower"] <= df["regret_static_live"] + 1e-6).all()
    assert (df["regret_static_live"] <= df["regret_static_upper"] + 1e-6).all()
    width = df["regret_static_upper"] - df["regret_static_lower"]
    assert width.iloc[100:].quantile(0.9) < 1.0
    # the exact values at the checkpoints lie in the interval of their step
    ck = df[df["regret_static"].notna()]
    assert len(ck) == len(s["static_checkpoints"]) >= 12
    assert (ck["regret_static_lower"] <= ck["regret_static"] + 1e-6).all()
    assert (ck["regret_static"] <= ck["regret_static_upper"] + 1e-6).all()
    # after the switch at t = 1,200 the static regret falls below zero, live as well as exact
    assert (df.loc[df["t"] >= 1400, "regret_static_live"] < 0).all()


def test_softmax_live_comparator_never_exceeds_the_origins_loss(tmp_path):
    # a separable first step sent the last exact minimiser far out: its loss on the next steps was thousands of
    # nats (live static regret −8,129 at t = 3 while the cumulative loss was 4.1); the origin's loss
    # W_t·log K bounds the comparator too
    from streamfl.config import parse_config
    cfg = parse_config({"name": "smx", "steps": 300, "source": {"kind": "river_synth", "name": "RandomRBF",
                        "clients": 4, "params": {"n_classes": 4, "n_features": 6, "n_centroids": 5}},
                        "learner": {"batch_size": 2, "tau": 5}, "baselines": [], "output": {"plots": False}})
    s = run_experiment(cfg, tmp_path / "r", plots=False)
    df = pd.read_csv(tmp_path / "r" / "metrics.csv")
    assert s["task"] == "softmax"
    w = np.arange(1, len(df) + 1)                        # network weight 1 per step (every client present)
    assert (df["comparator_static_live"] <= w * np.log(4) + 1e-9).all()
    assert (df["regret_static_live"] >= df["cum_loss"] - w * np.log(4) - 1e-9).all()
    assert (df["regret_static_lower"] <= df["regret_static_live"] + 1e-9).all()
    exact = df["regret_static"].notna()
    assert (df.loc[exact, "regret_static_lower"] <= df.loc[exact, "regret_static"] + 1e-7).all()


def test_radius_comparator_is_a_feasible_kkt_point():
    # SLSQP's minimiser was a little outside the ball: the "exact" comparator 5e-5 nats below the true one
    rng = np.random.default_rng(0)
    N, d = 3000, 10
    X = rng.standard_normal((N, d))
    y = (rng.random(N) < 1 / (1 + np.exp(-X @ (2 * rng.standard_normal(d))))).astype(float)
    w = np.full(N, 1 / 8)
    x, v = solve_hindsight("logistic", lambda: [(X, y, w)], (d, 1), radius=1.0)
    assert np.linalg.norm(x) <= 1.0 + 1e-12
    from streamfl.regret.comparators import weighted_loss_and_grad
    f, g = weighted_loss_and_grad("logistic", x, (d, 1), X, y, w)
    lam = -(g @ x) / (x @ x)
    assert lam > 0 and np.linalg.norm(g + lam * x) < 1e-7 * np.linalg.norm(g)
    assert f == pytest.approx(v, rel=1e-15)
    # no feasible point does better: the value at random points of the ball's boundary near x is above it
    for _ in range(20):
        z = x + 1e-3 * rng.standard_normal(d)
        z /= np.linalg.norm(z)
        assert weighted_loss_and_grad("logistic", z, (d, 1), X, y, w)[0] >= v - 1e-12


def test_wide_logistic_rows_fewer_than_features_give_comparator_zero_live():
    # 60 rows of 200 features: any labels are separable, the comparator is 0 at every step; the live value
    # was F_t(0) between checkpoints (a sawtooth between the truth and 0)
    rng = np.random.default_rng(3)
    n, M, b, d = 15, 4, 1, 200
    X = rng.standard_normal((n, M, b, d))
    y = (rng.random((n, M, b)) < 0.5).astype(float)
    br = LogisticBracket(d, exact_steps=[15])
    out = br.update(X, y, np.full((n, M), 0.25), t0=0)
    assert np.all(out["upper"] == 0.0) and np.all(out["lower"] == 0.0) and np.all(out["estimate"] == 0.0)
