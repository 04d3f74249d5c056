"""The richer SEA adversary: every family does what it says, and F stays exact.

Each family is checked on the generated data (optima, sample moments) and,
where it changes F, by recomputing a regret independently from the
recorded models with scipy.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize

from streamfl.generators.population import LeastSquaresPopulation, LogisticPopulation
from streamfl.generators.schedules import (Abrupt, Adaptive, CovariateShift, HeterogeneityChange, Linear,
                                           RandomWalk)
from streamfl.generators.synthetic import SyntheticStream
from streamfl.models import StackedLinear, StepSize
from streamfl.regret import RegretTracker
from streamfl.runtime.engine import run_stream
from streamfl.runtime.learners import Federated


def _optima(stream):
    return np.concatenate([c.optimum for c in stream.chunks(64)])


def _run(stream, eta=0.05, tau=5):
    step = StepSize("constant", eta=eta)
    models, chunks = [], []

    class Capture(RegretTracker):
        def update(self, chunk, losses, m):
            models.append(m[..., 0].copy())
            chunks.append(chunk)
            return super().update(chunk, losses, m)

    tracker = Capture(stream, "fedsea", ["fedsea"], step_size=step, tau=tau, client_columns=False)
    learner = Federated(StackedLinear(stream.n_clients, stream.n_features, stream.task, step), tau)
    run_stream(stream, {"fedsea": learner}, tracker, "fedsea", chunk_size=64)
    return tracker, np.concatenate(models), chunks


# ----------------------------------------------------------------------------- client-specific drift
def test_only_the_listed_clients_drift_at_their_speeds():
    stream = SyntheticStream("least_squares", n_clients=3, n_features=2, n_steps=50, heterogeneity=0.5,
                             drift=[Linear(0.1).per_client(clients=[1, 2], speeds=[1.0, 3.0])], seed=0)
    w = _optima(stream)
    np.testing.assert_array_equal(w[:, 0], np.broadcast_to(w[0, 0], w[:, 0].shape))       # client 0 still
    moved = np.linalg.norm(w - w[0], axis=-1)
    np.testing.assert_allclose(moved[:, 1], 0.1 * np.arange(50), atol=1e-12)
    np.testing.assert_allclose(moved[:, 2], 0.3 * np.arange(50), atol=1e-12)


def test_clients_switch_at_their_own_times():
    """Abrupt switch at step 10 with delay 5: client m has its new optimum from step t = 10 + 5m on
    (steps counted from 1, as metrics.csv's t: row i of the stream is step i + 1)."""
    stream = SyntheticStream("least_squares", n_clients=3, n_features=2, n_steps=40,
                             drift=[Abrupt([10]).per_client(delay=5)], seed=1)
    w = _optima(stream)
    for m in range(3):
        changes = np.flatnonzero(np.any(np.diff(w[:, m], axis=0) != 0, axis=1)) + 1     # rows that differ
        assert (changes + 1).tolist() == [10 + 5 * m]                                  # … as steps t
    assert np.allclose(w[-1, 0], w[-1, 2])            # every client ends on the same new optimum (ζ = 0)


def test_client_drift_keeps_the_dynamic_regret_exact():
    stream = SyntheticStream("least_squares", n_clients=3, n_features=2, n_steps=120, batch_size=2, noise=0.3,
                             drift=[RandomWalk(0.05).per_client(clients=[0]), Abrupt([60]).per_client(delay=10)],
                             seed=2)
    tracker, x, chunks = _run(stream)
    w = np.concatenate([c.optimum for c in chunks])
    F = lambda v, w: 0.5 * np.sum((v - w) ** 2, axis=-1) + 0.5 * 0.3**2   # noqa: E731
    xbar = x.mean(axis=1)
    dyn = np.sum(F(xbar[:, None], w).mean(axis=1) - F(w.mean(axis=1)[:, None], w).mean(axis=1))
    assert tracker.state.regret["dynamic"] == pytest.approx(dyn, rel=1e-10)


# ----------------------------------------------------------------------------- per-client noise and scales
def test_per_client_noise_and_feature_scales_in_the_data():
    scales, noises = [0.5, 1.0, 2.0], [0.1, 1.0, 3.0]
    stream = SyntheticStream("least_squares", n_clients=3, n_features=4, n_steps=4000, batch_size=4,
                             noise=noises, feature_scale=scales, heterogeneity=0.5, seed=3)
    X = np.concatenate([c.X for c in stream.chunks(1000)])
    y = np.concatenate([c.y for c in stream.chunks(1000)])
    w = _optima(stream)
    for m in range(3):
        assert X[:, m].std() == pytest.approx(scales[m], rel=0.01)
        resid = y[:, m] - np.einsum("tbd,td->tb", X[:, m], w[:, m])
        assert resid.std() == pytest.approx(noises[m], rel=0.01)
    c = next(stream.chunks(10))
    np.testing.assert_array_equal(c.scale, np.broadcast_to(scales, (10, 3)))
    np.testing.assert_array_equal(c.noise, np.broadcast_to(noises, (10, 3)))
    assert stream.population.smoothness == pytest.approx(4.0)           # the largest s²


# ----------------------------------------------------------------------------- covariate shift
def test_covariate_shift_moves_the_features_and_keeps_the_logistic_regrets_exact():
    """The feature scale of client 1 triples from step t = 30 on (row 29); F(x) = A(s‖x‖) − s² (x·w) κ(s‖w‖)
    with that s.

    Expected regret against a scipy minimisation of Σ_t F_t, dynamic regret
    against a scipy minimisation of each step's F_t.
    """
    M, d, T = 2, 2, 60
    stream = SyntheticStream("logistic", n_clients=M, n_features=d, n_steps=T, batch_size=2, heterogeneity=0.4,
                             radius=1.5, covariate=[CovariateShift(at=[30], factors=[3.0], clients=[1])], seed=4)
    X = np.concatenate([c.X for c in stream.chunks(64)])
    assert X[:29, 1].std() == pytest.approx(1.0, rel=0.25) and X[29:, 1].std() == pytest.approx(3.0, rel=0.25)
    tracker, x, chunks = _run(stream, eta=0.1)
    out = tracker.finalize()
    w = np.concatenate([c.optimum for c in chunks])
    s = np.concatenate([c.scale for c in chunks])
    assert s[28, 1] == 1.0 and s[29, 1] == 3.0 and np.all(s[:, 0] == 1.0)     # steps t = 29 and t = 30
    pop = LogisticPopulation(d)

    def total(v):
        return float(pop.loss(v, w, scale=s).mean(axis=1).sum())

    res = minimize(total, np.zeros(d), jac=lambda v: pop.grad(v, w, scale=s).mean(axis=1).sum(axis=0),
                   method="BFGS", options={"gtol": 1e-12})
    played = float(pop.loss(x, w, scale=s).mean(axis=1).sum())
    assert out["regret_expected"] == pytest.approx(played - res.fun, abs=1e-7)
    dyn = 0.0
    for t in range(T):
        r = minimize(lambda v: float(pop.loss(v, w[t], scale=s[t]).mean()), np.zeros(d),
                     jac=lambda v: pop.grad(v, w[t], scale=s[t]).mean(axis=0), method="BFGS", options={"gtol": 1e-12})
        dyn += float(pop.loss(x[t].mean(axis=0), w[t], scale=s[t]).mean()) - r.fun
    assert out["regret_dynamic"] == pytest.approx(dyn, abs=1e-7)


# ----------------------------------------------------------------------------- ζ_t
def test_time_varying_spatial_heterogeneity():
    change = HeterogeneityChange("ramp", start=10, end=30, to=2.0)
    stream = SyntheticStream("least_squares", n_clients=5, n_features=3, n_steps=40, heterogeneity=0.5,
                             heterogeneity_change=change, seed=5)
    w = _optima(stream)
    rms = np.sqrt(np.mean(np.sum((w - w.mean(axis=1, keepdims=True)) ** 2, axis=-1), axis=1))
    t = np.arange(1, 41)                                         # the steps, counted from 1
    expected = np.clip(0.5 + 1.5 * (t - 10) / 20, 0.5, 2.0)      # ζ at step 10, 2.0 from step 30 on
    np.testing.assert_allclose(rms, expected, rtol=1e-12)


# ----------------------------------------------------------------------------- heavy tails
def test_heavy_tailed_features_change_the_noise_not_F():
    """Student-t features (ν = 6, E z⁴ = 6): F is unchanged, E‖∇f − ∇F‖² = s⁴(E z⁴ + d − 2)‖δ‖² + σ²s²d.

    Monte Carlo with 10⁶ seeded samples, 5-standard-error bands.
    """
    d, s, sigma, nu = 3, 1.3, 0.7, 6.0
    pop = LeastSquaresPopulation(d, feature_scale=s, noise=sigma, kurtosis=3 * (nu - 2) / (nu - 4))
    x, w = np.array([0.4, -0.2, 0.9]), np.array([-0.3, 0.5, 0.1])
    rng = np.random.default_rng(7)
    N = 1_000_000
    a = s * rng.standard_t(nu, (N, d)) * np.sqrt((nu - 2) / nu)
    eps = rng.standard_t(nu, N) * np.sqrt((nu - 2) / nu)
    y = a @ w + sigma * eps
    r = a @ x - y
    loss = 0.5 * r * r
    g = a * r[:, None]
    q = np.sum((g - pop.grad(x, w)) ** 2, axis=1)
    assert loss.mean() == pytest.approx(float(pop.loss(x, w)), abs=5 * loss.std() / np.sqrt(N))
    assert q.mean() == pytest.approx(float(pop.grad_noise(x, w)), abs=5 * q.std() / np.sqrt(N))
    gauss = LeastSquaresPopulation(d, feature_scale=s, noise=sigma)
    assert pop.grad_noise(x, w) > gauss.grad_noise(x, w) and pop.loss(x, w) == gauss.loss(x, w)
    stream = SyntheticStream("least_squares", n_clients=2, n_features=d, n_steps=20000, feature_scale=s,
                             tails={"df": nu, "on": "features"}, seed=8)
    Z = np.concatenate([c.X for c in stream.chunks(5000)]).ravel() / s
    assert np.mean(Z**4) == pytest.approx(6.0, rel=0.15)
    assert stream.population.kurtosis == pytest.approx(6.0)


# ----------------------------------------------------------------------------- Dirac
def test_dirac_adversary_parallelisation_does_not_help():
    """Point masses, identical for every client (ζ = 0): M clients are one learner.

    The regret per client is the same for M = 1, 4, 16 (to rounding), there
    is no gradient noise, eq. (3) equals the realised static regret, and the
    regime condition says so (noise term 0).
    """
    res = {}
    for M in (1, 4, 16):
        stream = SyntheticStream("least_squares", n_clients=M, n_features=4, n_steps=400, batch_size=2, noise=0.5,
                                 heterogeneity=0.0, radius=1.0, drift=[RandomWalk(0.05)], adversary="dirac", seed=9)
        tracker, x, chunks = _run(stream, eta=0.1, tau=10)
        out = tracker.finalize()
        res[M] = out
        assert np.all(chunks[0].X == chunks[0].X[:, :1])
        h = out["heterogeneity"]
        assert h["sigma2_mean"] == 0.0 and h["sigma2_comparator_mean"] == 0.0
        assert h["parallelisation_helps"] is False and h["regime"]["noise_term"] == 0.0
        assert out["regret_expected"] == out["regret_static"]
        # b = 2 < d = 4 samples per step: the per-step optimum fits them exactly (loss 0)
        assert out["regret_dynamic"] == pytest.approx(tracker.cum_virtual, rel=1e-9)
    for key in ("regret_static", "regret_expected", "regret_dynamic"):
        assert res[4][key] == pytest.approx(res[1][key], rel=1e-9)
        assert res[16][key] == pytest.approx(res[1][key], rel=1e-9)


@pytest.mark.parametrize("d, radius", [(8, None), (8, 0.3), (4, 0.3)])
def test_dirac_dynamic_regret_equals_eigendecomposition_minima(d, radius):
    """The per-step minima of the Dirac dynamic comparators (network: M b rows; each client: b rows) equal
    quadratic_min's on the d × d sums, whether they go through the rows' Gram (M b < d) or Cholesky (M b ≥ d),
    with and without the ball."""
    from streamfl.regret.comparators import quadratic_min
    M, b = 3, 2
    stream = SyntheticStream("least_squares", n_clients=M, n_features=d, n_steps=60, batch_size=b, noise=0.5,
                             heterogeneity=0.5, drift=[RandomWalk(0.05)], adversary="dirac", seed=4)
    chunks = []

    class Capture(RegretTracker):
        def update(self, chunk, losses, m):
            chunks.append(chunk)
            return super().update(chunk, losses, m)

    step = StepSize("constant", eta=0.1)
    tracker = Capture(stream, "fedsea", ["fedsea"], radius=radius, step_size=step, tau=5, client_columns=False)
    learner = Federated(StackedLinear(M, d, "least_squares", step, radius=radius), 5)
    run_stream(stream, {"fedsea": learner}, tracker, "fedsea", chunk_size=16)
    out = tracker.finalize()
    X = np.concatenate([ch.X for ch in chunks])
    y = np.concatenate([ch.y for ch in chunks])
    A = np.einsum("nmbd,nmbe->nmde", X, X) / b
    v = np.einsum("nmbd,nmb->nmd", X, y) / b
    e = np.einsum("nmb,nmb->nm", y, y) / b
    net = quadratic_min(A.mean(axis=1), v.mean(axis=1), e.mean(axis=1), radius)
    np.testing.assert_allclose(out["regret_dynamic"], tracker.cum_virtual - net.sum(), rtol=1e-10)
    own = quadratic_min(A, v, e, radius).sum(axis=0)
    np.testing.assert_allclose(out["client_regret"]["dynamic"], tracker.client_cum - own, rtol=1e-10)


# ----------------------------------------------------------------------------- adaptive adversary
def test_adaptive_directions_against_an_independent_computation():
    rng = np.random.default_rng(10)
    opt, models = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    own = (opt - models) / np.linalg.norm(opt - models, axis=1, keepdims=True)
    centre = (opt.mean(0) - models.mean(0)) / np.linalg.norm(opt.mean(0) - models.mean(0))
    spread = own - own.mean(0)
    spread /= np.sqrt(np.mean(np.sum(spread**2, axis=1)))
    expect = {"own": 0.2 * own, "centre": 0.2 * np.tile(centre, (4, 1)), "spread": 0.2 * spread,
              "both": 0.2 / np.sqrt(2) * (np.tile(centre, (4, 1)) + spread)}
    for target, value in expect.items():
        a = Adaptive(0.2, target)
        a.reset(np.random.default_rng(0), 3)
        move = a.move(opt, models)
        np.testing.assert_allclose(move, value, rtol=1e-12, atol=1e-15)
        assert np.sqrt(np.mean(np.sum(move**2, axis=1))) == pytest.approx(0.2, rel=1e-12)   # RMS budget
    # through the stream: the optimum of step t+1 moves by that step's push
    stream = SyntheticStream("least_squares", n_clients=4, n_features=3, n_steps=3, heterogeneity=0.5,
                             drift=[Adaptive(0.2, "own")], seed=1)
    gen = stream.chunks()
    first = next(gen).optimum[0]
    stream.observe(models)
    second = next(gen).optimum[0]
    away = (first - models) / np.linalg.norm(first - models, axis=1, keepdims=True)
    np.testing.assert_allclose(second - first, 0.2 * away, rtol=1e-12)


def test_adaptive_budget_moves_the_statistic_it_is_spent_on():
    """centre → temporal drift K² only; spread → spatial ζ² only (K² = 0 for least squares); both → both.

    ζ = 0 at the start; budget 0.02 per step. Measured (T = 600): centre
    K̄² = 4.0e-4 (= budget², s = 1), ζ̄² = 0; spread K̄² = 1e-31 (rounding),
    ζ̄² = 47.1; both K̄² = 2.0e-4, ζ̄² = 23.2; own (the default, each client
    away from its own model): ζ̄² = 32.5 and K̄² = 5.8e-5, 15 % of budget² —
    its budget mostly spreads the clients apart.
    """
    stats = {}
    for target in ("centre", "spread", "both", "own"):
        stream = SyntheticStream("least_squares", n_clients=4, n_features=3, n_steps=600, batch_size=2,
                                 heterogeneity=0.0, radius=1.0, drift=[Adaptive(0.02, target)], seed=11)
        tracker, _, _ = _run(stream, eta=0.05)
        h = tracker.heterogeneity_summary()
        stats[target] = (h["zeta2_mean"], h["K2_mean"])
    assert stats["centre"][0] < 1e-20 and stats["centre"][1] == pytest.approx(0.02**2, rel=1e-6)
    assert stats["spread"][1] < 1e-20 and stats["spread"][0] > 1.0
    assert stats["both"][0] > 0.1 and stats["both"][1] == pytest.approx(0.02**2 / 2, rel=1e-6)
    own_zeta, own_K = stats["own"]
    assert own_zeta > 10 and own_K < 0.25 * 0.02**2
