"""Real-value tests of streamfl.generators.population.

Monte Carlo checks use 2,000,000 seeded samples per case and compare every
component with a 5-standard-error band, where the standard error is the
sample standard deviation of the per-sample quantity over √N (so a correct
implementation fails a given comparison with probability ≈ 6e-7, and the
seeds make the outcome deterministic).
"""

import re

import numpy as np
import pytest
from scipy.integrate import quad
from scipy.optimize import minimize
from scipy.special import expit

from streamfl.generators.population import LeastSquaresPopulation, LogisticPopulation

D = 5
N_MC = 2_000_000
CHUNK = 250_000
Z_BAND = 5.0

W_GENERIC = np.array([0.8, -0.5, 0.3, 1.1, -0.9])
X_GENERIC = np.array([0.3, 1.0, -0.4, 0.0, 0.6])
CASES = {
    "generic": (X_GENERIC, W_GENERIC),
    "x_zero": (np.zeros(D), W_GENERIC),
    "x_parallel_w": (-0.7 * W_GENERIC, W_GENERIC),
}


# ----------------------------------------------------------------------------- Monte Carlo
def _mc(draw, grad, seed):
    """Means and standard errors of the per-sample loss, gradient, gradient noise and Hessian.

    draw(rng, n) returns (a, f, g, h, extra) with features a [n, d], per-sample loss
    f [n], gradient g [n, d], Hessian weight h [n] (per-sample Hessian h a aᵀ) and a
    dict of further per-sample statistics (averaged the same way).
    """
    rng = np.random.default_rng(seed)
    s1, s2 = {}, {}

    def add(k, first, second):
        s1[k] = s1.get(k, 0.0) + first
        s2[k] = s2.get(k, 0.0) + second

    for _ in range(N_MC // CHUNK):
        a, f, g, h, extra = draw(rng, CHUNK)
        for k, v in extra.items():
            add(k, v.sum(axis=0), (v * v).sum(axis=0))
        dev = g - grad
        q = np.einsum("ni,ni->n", dev, dev)
        a2 = a * a
        add("loss", f.sum(), f @ f)
        add("grad", g.sum(axis=0), (g * g).sum(axis=0))
        add("noise", q.sum(), q @ q)
        add("hess", (h[:, None] * a).T @ a, ((h * h)[:, None] * a2).T @ a2)
    mean = {k: s1[k] / N_MC for k in s1}
    se = {k: np.sqrt(np.maximum(s2[k] / N_MC - mean[k] ** 2, 0.0) / (N_MC - 1)) for k in s1}
    return mean, se


def _assert_within(name, exact, mean, se):
    exact, mean, se = np.broadcast_arrays(np.asarray(exact, float), mean, se)
    # (+1e-12: statistics that are constant per sample, e.g. the logistic loss at x = 0)
    err = np.abs(exact - mean)
    assert np.all(err < Z_BAND * se + 1e-12 * (1 + np.abs(exact))), (
        f"{name}: max |exact − MC| = {err.max():.3g}, "
        f"max z = {np.max(err / np.maximum(se, 1e-300)):.2f} (SE {se.max():.3g})")


def _check_against_mc(pop, x, w, draw, seed):
    grad = pop.grad(x, w)
    mean, se = _mc(lambda rng, n: draw(rng, n, grad), grad, seed)
    _assert_within("loss", pop.loss(x, w), mean["loss"], se["loss"])
    _assert_within("grad", grad, mean["grad"], se["grad"])
    _assert_within("grad_noise", pop.grad_noise(x, w), mean["noise"], se["noise"])
    _assert_within("hessian", pop.hessian(x, w), mean["hess"], se["hess"])
    # the band is tight: the standard errors are small compared with the values tested
    assert se["noise"] < 0.01 * pop.grad_noise(x, w)
    assert se["loss"] < 0.01 * pop.loss(x, w)
    return mean, se


@pytest.mark.parametrize("case", list(CASES))
def test_least_squares_matches_monte_carlo(case):
    s, sigma = 0.8, 0.7
    pop = LeastSquaresPopulation(D, feature_scale=s, noise=sigma)
    x, w = CASES[case]

    def per_sample(rng, n, grad):
        a = s * rng.standard_normal((n, D))
        y = a @ w + sigma * rng.standard_normal(n)
        r = a @ x - y
        return a, 0.5 * r * r, a * r[:, None], np.ones(n), {}

    _check_against_mc(pop, x, w, per_sample, seed=11)


@pytest.mark.parametrize("case", list(CASES))
def test_logistic_matches_monte_carlo(case):
    s = 1.3
    pop = LogisticPopulation(D, feature_scale=s)
    x, w = CASES[case]

    def per_sample(rng, n, grad):
        a = s * rng.standard_normal((n, D))
        u, v = a @ x, a @ w
        su, sv = expit(u), expit(v)
        y = (rng.random(n) < sv).astype(float)
        sp = np.logaddexp(0.0, u)
        f = sp - y * u
        # Rao–Blackwellised versions (labels integrated out given a): same means, smaller SE
        gm = a * (su - sv)[:, None]
        rb = {"loss_rb": sp - sv * u, "grad_rb": gm,
              "noise_rb": ((su - sv) ** 2 + sv * (1 - sv)) * np.einsum("ni,ni->n", a, a)
              - 2 * gm @ grad + grad @ grad}
        return a, f, a * (su - y)[:, None], su * (1 - su), rb

    mean, se = _check_against_mc(pop, x, w, per_sample, seed=12)
    _assert_within("loss (Rao–Blackwellised)", pop.loss(x, w), mean["loss_rb"], se["loss_rb"])
    _assert_within("grad (Rao–Blackwellised)", pop.grad(x, w), mean["grad_rb"], se["grad_rb"])
    _assert_within("grad_noise (Rao–Blackwellised)", pop.grad_noise(x, w), mean["noise_rb"], se["noise_rb"])


def test_least_squares_closed_forms():
    pop = LeastSquaresPopulation(3, feature_scale=2.0, noise=0.5)
    x, w = np.array([1.0, 2.0, 2.0]), np.zeros(3)        # ‖x − w‖² = 9
    assert pop.loss(x, w) == pytest.approx(0.5 * 4 * 9 + 0.5 * 0.25)
    assert pop.grad_noise(x, w) == pytest.approx(16 * 4 * 9 + 0.25 * 4 * 3)
    np.testing.assert_array_equal(pop.hessian(x, w), 4 * np.eye(3))
    assert pop.smoothness == pop.strong_convexity == 4.0
    lg = LogisticPopulation(3, feature_scale=2.0)
    assert lg.smoothness == 1.0 and lg.strong_convexity is None and lg.dim == 3


def test_logistic_special_values():
    pop = LogisticPopulation(4, feature_scale=1.5)
    z = np.zeros(4)
    assert pop.loss(z, z) == pytest.approx(np.log(2), abs=1e-15)
    np.testing.assert_allclose(pop.hessian(z, z), 1.5 ** 2 / 4 * np.eye(4), atol=1e-15)
    # at x = w = 0 every label is a fair coin: ∇f = (1/2 − y) a, E‖∇f‖² = s² d / 4
    assert pop.grad_noise(z, z) == pytest.approx(1.5 ** 2 * 4 / 4, rel=1e-13)
    w = np.array([1.0, -2.0, 0.5, 0.0])
    np.testing.assert_array_equal(pop.grad(w, w), 0.0)


# ----------------------------------------------------------------------------- broadcasting
def test_batch_shapes_broadcast():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 1, D))
    w = rng.standard_normal((1, 3, D))
    for pop in (LeastSquaresPopulation(D), LogisticPopulation(D)):
        assert pop.loss(x, w).shape == (4, 3)
        assert pop.grad(x, w).shape == (4, 3, D)
        assert pop.grad_noise(x, w).shape == (4, 3)
        assert pop.hessian(x, w).shape == (4, 3, D, D)
        i, j = 2, 1
        assert pop.grad_noise(x, w)[i, j] == pytest.approx(pop.grad_noise(x[i, 0], w[0, j]), rel=1e-13)
        np.testing.assert_allclose(pop.grad(x, w)[i, j], pop.grad(x[i, 0], w[0, j]), rtol=1e-13)
    with pytest.raises(ValueError, match=r"shape \(\.\.\., 5\)"):
        LogisticPopulation(D).loss(np.zeros(4), np.zeros(4))


# ----------------------------------------------------------------------------- finite differences
FD_POINTS = [
    (X_GENERIC, W_GENERIC),
    (np.zeros(D), W_GENERIC),
    (-0.7 * W_GENERIC, W_GENERIC),
    (3.0 * X_GENERIC, -2.5 * W_GENERIC),       # s‖x‖ ≈ 5, s‖w‖ ≈ 5: Gauss–Hermite would be off here
    (W_GENERIC + 1e-3, W_GENERIC),
]


def _fd(fun, x, h):
    out = []
    for j in range(x.shape[-1]):
        e = np.zeros_like(x)
        e[..., j] = h
        out.append((fun(x + e) - fun(x - e)) / (2 * h))
    return np.stack(out, axis=-1)


@pytest.mark.parametrize("pop", [LeastSquaresPopulation(D, feature_scale=1.3, noise=0.4),
                                 LogisticPopulation(D, feature_scale=1.3)], ids=["ls", "logistic"])
def test_grad_and_hessian_match_finite_differences(pop):
    x = np.stack([p[0] for p in FD_POINTS])
    w = np.stack([p[1] for p in FD_POINTS])
    h = 1e-5
    fd_grad = _fd(lambda z: pop.loss(z, w), x, h)
    np.testing.assert_allclose(pop.grad(x, w), fd_grad, rtol=0, atol=1e-8)
    fd_hess = _fd(lambda z: pop.grad(z, w), x, h)            # [k, i, j] = ∂g_i/∂x_j
    np.testing.assert_allclose(pop.hessian(x, w), fd_hess, rtol=0, atol=1e-8)


def test_logistic_one_dimensional_rule_at_large_norm():
    # independent adaptive quadrature of F and ∇F (Stein-free form) at s‖x‖ = 12, s‖w‖ = 8, x ∥ w
    s = 2.0
    pop = LogisticPopulation(1, feature_scale=s)
    x, w = np.array([6.0]), np.array([4.0])
    phi = lambda z: np.exp(-0.5 * z * z) / np.sqrt(2 * np.pi)
    # u = s x z, v = s w z with the same z (d = 1)
    F = quad(lambda z: (np.logaddexp(0, s * x[0] * z) - expit(s * w[0] * z) * s * x[0] * z) * phi(z),
             -12, 12, points=[0.0], limit=500, epsabs=1e-14)[0]
    G = quad(lambda z: (expit(s * x[0] * z) - expit(s * w[0] * z)) * s * z * phi(z),
             -12, 12, points=[0.0], limit=500, epsabs=1e-14)[0]
    assert pop.loss(x, w) == pytest.approx(F, abs=1e-12)
    assert pop.grad(x, w)[0] == pytest.approx(G, abs=1e-12)


def test_logistic_grad_noise_rule_at_large_norm():
    # independent nested adaptive quadrature of E[g(u, v) ‖a‖²] in an explicit orthonormal frame
    s, d = 1.5, 3
    pop = LogisticPopulation(d, feature_scale=s)
    x, w = np.array([6.0, 1.0, 0.0]), np.array([-2.0, 3.0, 2.0])
    e1 = x / np.linalg.norm(x)
    wp = w - (w @ e1) * e1
    c21, c22 = w @ e1, np.linalg.norm(wp)
    phi = lambda z: np.exp(-0.5 * z * z) / np.sqrt(2 * np.pi)

    def g(u, v):
        su, sv = expit(u), expit(v)
        return (su - sv) ** 2 + sv * (1 - sv)

    def inner(al):
        b0 = -c21 * al / c22
        f = lambda be: g(s * np.linalg.norm(x) * al, s * (c21 * al + c22 * be)) \
            * s * s * (al * al + be * be + (d - 2)) * phi(be)
        return quad(f, -12, 12, points=[b0] if abs(b0) < 12 else None, limit=200, epsabs=1e-13)[0]

    second = quad(lambda al: inner(al) * phi(al), -12, 12, points=[0.0], limit=200, epsabs=1e-12)[0]
    gF = pop.grad(x, w)
    assert pop.grad_noise(x, w) == pytest.approx(second - gF @ gF, rel=1e-9)


# ----------------------------------------------------------------------------- minimize_mean
def _optima(rng, n, M, scale):
    return scale * rng.standard_normal((n, M, D))


@pytest.mark.parametrize("pop", [LeastSquaresPopulation(D, feature_scale=0.9, noise=0.3),
                                 LogisticPopulation(D, feature_scale=1.2)], ids=["ls", "logistic"])
def test_minimize_mean_is_stationary(pop):
    rng = np.random.default_rng(3)
    w = np.concatenate([_optima(rng, 4, 6, 0.5), _optima(rng, 4, 6, 3.0),
                        np.repeat(_optima(rng, 1, 1, 2.0), 6, axis=1),       # identical clients
                        np.zeros((1, 6, D))])                                # all optima zero
    u = pop.minimize_mean(w)
    assert u.shape == (w.shape[0], D)
    g = pop.grad(u[:, None, :], w).mean(axis=1)
    assert np.linalg.norm(g, axis=1).max() < 1e-8
    np.testing.assert_allclose(u[-2], w[-2, 0], atol=1e-8)
    np.testing.assert_array_equal(u[-1], 0.0)
    # a warm start does not change the answer
    u2 = pop.minimize_mean(w, x0=u + rng.standard_normal(u.shape))
    np.testing.assert_allclose(u2, u, atol=1e-9)


def test_logistic_minimize_mean_single_client_returns_optimum():
    pop = LogisticPopulation(D, feature_scale=0.7)
    rng = np.random.default_rng(4)
    w = np.concatenate([_optima(rng, 5, 1, 1.0), _optima(rng, 3, 1, 6.0), np.zeros((1, 1, D))])
    np.testing.assert_allclose(pop.minimize_mean(w), w[:, 0], rtol=0, atol=1e-8)


def test_logistic_minimize_mean_agrees_with_generic_solver():
    pop = LogisticPopulation(D, feature_scale=1.1)
    w = _optima(np.random.default_rng(5), 1, 4, 2.0)
    u = pop.minimize_mean(w)[0]
    res = minimize(lambda z: pop.loss(z, w[0]).mean(), np.zeros(D),
                   jac=lambda z: pop.grad(z, w[0]).mean(axis=0), method="BFGS", options={"gtol": 1e-12})
    np.testing.assert_allclose(u, res.x, atol=1e-6)
    assert pop.loss(u, w[0]).mean() <= res.fun + 1e-14


# ----------------------------------------------------------------------------- minimize_sum
def _weighted_blocks(rng, scale):
    blocks = [_optima(rng, n, 3, scale) for n in (4, 1, 6)]
    weights = [rng.random((b.shape[0], 3)) for b in blocks]
    return blocks, weights


def test_least_squares_minimize_sum_closed_form():
    pop = LeastSquaresPopulation(D, feature_scale=1.4, noise=0.6)
    blocks, weights = _weighted_blocks(np.random.default_rng(6), 1.0)
    x, value = pop.minimize_sum(blocks, weights)
    W = np.concatenate([c.ravel() for c in weights])
    Wv = np.concatenate([b.reshape(-1, D) for b in blocks])
    np.testing.assert_allclose(x, (W[:, None] * Wv).sum(0) / W.sum(), rtol=1e-13)
    direct = sum(np.sum(c * pop.loss(x, b)) for b, c in zip(blocks, weights))
    assert value == pytest.approx(direct, rel=1e-13)
    # default weights 1/M, a callable and a one-shot generator all give the same
    x1, v1 = pop.minimize_sum(blocks)
    x2, v2 = pop.minimize_sum(lambda: iter(blocks))
    x3, v3 = pop.minimize_sum(b for b in blocks)
    np.testing.assert_allclose(x1, Wv.mean(axis=0), rtol=1e-13)
    assert v1 == pytest.approx(sum(pop.loss(x1, b).mean(axis=1).sum() for b in blocks), rel=1e-13)
    np.testing.assert_array_equal(x1, x2)
    np.testing.assert_array_equal(x1, x3)
    assert v1 == v2 == v3


def test_logistic_minimize_sum_is_stationary():
    pop = LogisticPopulation(D, feature_scale=0.9)
    blocks, weights = _weighted_blocks(np.random.default_rng(7), 2.0)
    x, value = pop.minimize_sum(lambda: iter(blocks), lambda: iter(weights))
    C = sum(c.sum() for c in weights)
    g = sum(np.einsum("nm,nmd->d", c, pop.grad(x, b)) for b, c in zip(blocks, weights))
    assert np.linalg.norm(g) / C < 1e-10
    direct = sum(np.sum(c * pop.loss(x, b)) for b, c in zip(blocks, weights))
    assert value == pytest.approx(direct, rel=1e-12)
    # one step: the comparator is that step's minimiser
    w1 = blocks[1]
    x1, v1 = pop.minimize_sum([w1])
    np.testing.assert_allclose(x1, pop.minimize_mean(w1)[0], atol=1e-10)
    assert v1 == pytest.approx(pop.loss(x1, w1[0]).mean(), rel=1e-13)


# ----------------------------------------------------------------------------- constraints
def _feasible_points(rng, n, radius):
    u = rng.standard_normal((n, D))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    r = radius * rng.random(n) ** (1.0 / D)
    r[: n // 2] = radius                                     # half on the sphere, half inside
    return u * r[:, None]


@pytest.mark.parametrize("pop", [LeastSquaresPopulation(D, feature_scale=1.2, noise=0.5),
                                 LogisticPopulation(D, feature_scale=1.2)], ids=["ls", "logistic"])
def test_constrained_minimize_mean(pop):
    rng = np.random.default_rng(8)
    w = 2.0 + 0.5 * rng.standard_normal((3, 4, D))           # optima far from the origin
    radius = 1.5
    free = pop.minimize_mean(w)
    assert np.all(np.linalg.norm(free, axis=1) > radius)
    u = pop.minimize_mean(w, radius=radius)
    np.testing.assert_allclose(np.linalg.norm(u, axis=1), radius, rtol=1e-14)
    pts = _feasible_points(rng, 2000, radius)
    for t in range(w.shape[0]):
        best = pop.loss(u[t], w[t]).mean()
        others = pop.loss(pts[:, None, :], w[t][None]).mean(axis=1)
        assert best <= others.min() + 1e-14
        # KKT: −∇ points outward along u (multiplier ≥ 0)
        g = pop.grad(u[t], w[t]).mean(axis=0)
        np.testing.assert_allclose(-g / np.linalg.norm(g), u[t] / radius, atol=1e-9)
    # an inactive constraint changes nothing
    np.testing.assert_allclose(pop.minimize_mean(w, radius=100.0), free, rtol=0, atol=1e-14)


@pytest.mark.parametrize("pop", [LeastSquaresPopulation(D, feature_scale=0.8, noise=1.0),
                                 LogisticPopulation(D, feature_scale=0.8)], ids=["ls", "logistic"])
def test_constrained_minimize_sum(pop):
    rng = np.random.default_rng(9)
    blocks = [1.5 + rng.standard_normal((n, 3, D)) for n in (5, 3)]
    weights = [rng.random((b.shape[0], 3)) for b in blocks]
    radius = 1.0
    x_free, _ = pop.minimize_sum(blocks, weights)
    assert np.linalg.norm(x_free) > radius
    x, value = pop.minimize_sum(blocks, weights, radius=radius)
    assert np.linalg.norm(x) == pytest.approx(radius, rel=1e-14)
    pts = _feasible_points(rng, 2000, radius)
    others = sum(np.einsum("nm,knm->k", c, pop.loss(pts[:, None, None, :], b[None])) for b, c in zip(blocks, weights))
    assert value <= others.min() + 1e-12


# ----------------------------------------------------------------------------- validation
def test_bad_parameters_raise_sklearn_style_messages():
    msg = "The 'noise' parameter of LeastSquaresPopulation must be a float >= 0. Got -1 instead."
    with pytest.raises(ValueError, match=re.escape(msg)):
        LeastSquaresPopulation(3, noise=-1)
    with pytest.raises(ValueError, match=re.escape(
            "The 'feature_scale' parameter of LogisticPopulation must be a float > 0. Got 0 instead.")):
        LogisticPopulation(3, feature_scale=0)
    with pytest.raises(ValueError, match=re.escape(
            "The 'dim' parameter of LeastSquaresPopulation must be an int >= 1. Got 0 instead.")):
        LeastSquaresPopulation(0)
    with pytest.raises(ValueError, match=re.escape(
            "The 'dim' parameter of LogisticPopulation must be an int >= 1. Got 2.0 instead.")):
        LogisticPopulation(2.0)
    pop = LogisticPopulation(2)
    with pytest.raises(ValueError, match="radius"):
        pop.minimize_mean(np.zeros((1, 1, 2)), radius=-1.0)
    with pytest.raises(ValueError, match="fewer blocks"):
        pop.minimize_sum([np.zeros((1, 1, 2))] * 2, [np.ones((1, 1))])
    with pytest.raises(ValueError, match="empty"):
        pop.minimize_sum([])


# ----------------------------------------------------------------------------- per-point scales (richer adversary)
@pytest.mark.parametrize("cls", [LeastSquaresPopulation, LogisticPopulation], ids=["ls", "logistic"])
def test_per_point_scale_equals_a_population_of_that_scale(cls):
    rng = np.random.default_rng(21)
    x = rng.standard_normal((4, 3, D))
    w = rng.standard_normal((4, 3, D))
    s = rng.uniform(0.5, 2.5, (4, 3))
    pop = cls(D)
    for i in range(4):
        for j in range(3):
            ref = cls(D, feature_scale=float(s[i, j]))
            assert pop.loss(x, w, scale=s)[i, j] == pytest.approx(float(ref.loss(x[i, j], w[i, j])), rel=1e-13)
            np.testing.assert_allclose(pop.grad(x, w, scale=s)[i, j], ref.grad(x[i, j], w[i, j]), rtol=1e-12)
            assert pop.grad_noise(x, w, scale=s)[i, j] == pytest.approx(float(ref.grad_noise(x[i, j], w[i, j])),
                                                                       rel=1e-12)
            np.testing.assert_allclose(pop.hessian(x, w, scale=s)[i, j], ref.hessian(x[i, j], w[i, j]), rtol=1e-12,
                                       atol=1e-15)
            h = ref.hessian(x[i, j], w[i, j])
            assert pop.curvature(x, scale=s)[i, j] == pytest.approx(np.trace(h) / D, rel=1e-12)
    if cls is LeastSquaresPopulation:
        n = rng.uniform(0.1, 2.0, (4, 3))
        ref = LeastSquaresPopulation(D, feature_scale=float(s[1, 2]), noise=float(n[1, 2]))
        assert pop.loss(x, w, scale=s, noise=n)[1, 2] == pytest.approx(float(ref.loss(x[1, 2], w[1, 2])), rel=1e-13)
        assert pop.grad_noise(x, w, scale=s, noise=n)[1, 2] == pytest.approx(
            float(ref.grad_noise(x[1, 2], w[1, 2])), rel=1e-13)


@pytest.mark.parametrize("cls", [LeastSquaresPopulation, LogisticPopulation], ids=["ls", "logistic"])
def test_minimize_mean_with_per_client_scales_and_weights_is_stationary(cls):
    rng = np.random.default_rng(22)
    w = 1.5 * rng.standard_normal((5, 4, D))
    s = rng.uniform(0.4, 2.0, (5, 4))
    c = rng.random((5, 4))
    c /= c.sum(axis=1, keepdims=True)
    pop = cls(D)
    u = pop.minimize_mean(w, scale=s, weights=c)
    g = np.einsum("nm,nmd->nd", c, pop.grad(u[:, None, :], w, scale=s))
    assert np.linalg.norm(g, axis=1).max() < 1e-9
    # constrained: on the sphere, −∇ along u
    uc = pop.minimize_mean(w, radius=0.3, scale=s, weights=c)
    np.testing.assert_allclose(np.linalg.norm(uc, axis=1), 0.3, rtol=1e-12)
    gc = np.einsum("nm,nmd->nd", c, pop.grad(uc[:, None, :], w, scale=s))
    np.testing.assert_allclose(-gc / np.linalg.norm(gc, axis=1, keepdims=True), uc / 0.3, atol=1e-8)


def test_logistic_minimize_sum_per_client_with_scales():
    rng = np.random.default_rng(23)
    pop = LogisticPopulation(D)
    blocks = [1.2 * rng.standard_normal((n, 3, D)) for n in (6, 4)]
    scales = [np.where(rng.random((b.shape[0], 3)) < 0.5, 0.7, 1.9) for b in blocks]     # two distinct scales
    x, v = pop.minimize_sum(blocks, scale_blocks=scales, per_client=True)
    for m in range(3):
        wm = np.concatenate([b[:, m] for b in blocks])
        sm = np.concatenate([s[:, m] for s in scales])
        g = pop.grad(x[m], wm, scale=sm).sum(axis=0)
        assert np.linalg.norm(g) / len(wm) < 1e-10
        assert v[m] == pytest.approx(float(pop.loss(x[m], wm, scale=sm).sum()), rel=1e-12)
    xn, vn = pop.minimize_sum(blocks, scale_blocks=scales)
    W = np.concatenate(blocks)
    S = np.concatenate(scales)
    assert np.linalg.norm(pop.grad(xn, W, scale=S).mean(axis=1).sum(axis=0)) / len(W) < 1e-10
    # prefix sums: the same solutions over the first t steps
    sols = pop.minimize_prefix_sums(blocks, [3, 6, 10], scale_blocks=scales)
    for t, (xt, vt) in zip((3, 6, 10), sols):
        x2, v2 = pop.minimize_sum([W[:t]], scale_blocks=[S[:t]])
        np.testing.assert_allclose(xt, x2, atol=1e-12)
        assert vt == pytest.approx(v2, rel=1e-12)


def _mixed_scale_sums():
    """Network and per-client hindsight sums of 4 blocks: one scale, then two scales mixed, client 2 absent first."""
    pop = LogisticPopulation(4, feature_scale=1.0)
    rng = np.random.default_rng(3)
    net, per = pop.running_sums(False), pop.running_sums(True)
    for blk in range(4):
        w = rng.normal(size=(6, 5, 4))
        c = rng.uniform(0.1, 1.0, size=(6, 5))
        c[:, 2] = 0.0 if blk == 0 else c[:, 2]
        s = np.where(rng.uniform(size=(6, 5)) < 0.5, 1.0, 2.0) if blk % 2 else np.full((6, 5), 1.0)
        net.absorb(w, c, s)
        per.absorb(w, c, s)
    return net, per


def test_hindsight_sums_as_arrays_give_the_values_of_the_former_dict_of_groups():
    # The (row, scale) groups are kept as sorted arrays and solved for all rows at once (no Python
    # loop over clients: the former per-row count over a dict was O(M²), minutes at M = 10^4).
    # The numbers below were printed by the dict-based code before the change; the array-based code gave
    # them exactly. The quadratures are numpy sums since (not numba loops: another summation order), which
    # moves them by a few units in the last place, hence rel=1e-14.
    net, per = _mixed_scale_sums()
    close = lambda v: pytest.approx(v, rel=1e-14, abs=0)   # noqa: E731
    assert net.solve()[1].tolist() == close([40.66408735228035])
    assert net.solve(radius=0.1)[1].tolist() == close([40.670029510312354])
    assert per.solve()[1].tolist() == close([8.926137452270776, 9.042030967903697, 7.434586268461514,
                                             7.893255621639613, 6.776300455973642])
    assert per.solve(radius=0.1)[1].tolist() == close([8.987047021865942, 9.051866578557823, 7.460084042771855,
                                                       7.896999759302584, 7.009088616298398])
    assert per.solve()[0][3].tolist() == pytest.approx([0.06548888605976856, 0.09784116506177155,
                                                        0.0743031612588738, -0.016588354229768062], rel=1e-12)
    assert sorted(per.groups.items())[:3] == [((0, 1.0), 9.513710064586467), ((0, 2.0), 3.615076891024813),
                                              ((1, 1.0), 11.617150047537438)]


def test_hindsight_sums_per_client_equal_each_client_solved_alone():
    net, per = _mixed_scale_sums()
    x_all, v_all = per.solve()
    pop = per.population
    rng = np.random.default_rng(3)
    blocks = []
    for blk in range(4):
        w = rng.normal(size=(6, 5, 4))
        c = rng.uniform(0.1, 1.0, size=(6, 5))
        c[:, 2] = 0.0 if blk == 0 else c[:, 2]
        s = np.where(rng.uniform(size=(6, 5)) < 0.5, 1.0, 2.0) if blk % 2 else np.full((6, 5), 1.0)
        blocks.append((w, c, s))
    for m in range(5):
        alone = pop.running_sums(False)
        for w, c, s in blocks:
            alone.absorb(w[:, m:m + 1], np.ones((6, 1)) * (c[:, m:m + 1] > -1) * (c[:, m:m + 1]), s[:, m:m + 1])
        x, v = alone.solve()
        np.testing.assert_allclose(v[0], v_all[m], rtol=1e-13)
        np.testing.assert_allclose(x[0], x_all[m], rtol=1e-10, atol=1e-15)


def test_quantities_from_shared_norms_and_distances_equal_the_direct_ones():
    # The tracker computes ‖w‖ and ‖x − w‖² once per chunk and hands them to F, σ², u_t and the hindsight
    # sums; every such shortcut must give exactly what the method computes on its own.
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((6, 4, 3)), rng.standard_normal((6, 4, 3))
    s, nz = rng.uniform(0.5, 2.0, (6, 4)), rng.uniform(0.1, 1.0, (6, 4))
    ls = LeastSquaresPopulation(3, noise=0.7, kurtosis=4.5)
    d2 = ls.sqdist(x, w)
    assert np.array_equal(ls.loss_of_sqdist(d2, s, nz), ls.loss(x, w, s, nz))
    assert np.array_equal(ls.grad_noise_of_sqdist(d2, s, nz), ls.grad_noise(x, w, s, nz))
    lg = LogisticPopulation(3)
    nw = np.sqrt(np.einsum("...d,...d->...", w, w))
    assert np.array_equal(lg.minimize_mean(w, w_norm=nw), lg.minimize_mean(w))
    assert np.array_equal(lg.minimize_mean(w, scale=s, weights=s / s.sum(1, keepdims=True), w_norm=nw),
                          lg.minimize_mean(w, scale=s, weights=s / s.sum(1, keepdims=True)))
    u = rng.standard_normal((6, 3))
    ub = np.broadcast_to(u[:, None, :], w.shape)
    un = np.broadcast_to(np.sqrt(np.einsum("nd,nd->n", u, u))[:, None], (6, 4))
    assert np.array_equal(lg.curvature(ub, scale=s, x_norm=un), lg.curvature(ub, scale=s))
    a, b = lg.running_sums(per_client=True), lg.running_sums(per_client=True)
    a.absorb(w, np.ones((6, 4)), s, nw)
    b.absorb(w, np.ones((6, 4)), s)
    assert np.array_equal(a.solve()[1], b.solve()[1])
    # σ²: repeated points are computed once and remembered; the values are those of a fresh population
    xs = np.concatenate([x[:2], x[:2]])
    ws = np.concatenate([w[:2], w[:2]])
    first, again = lg.grad_noise(xs, ws), lg.grad_noise(xs, ws)
    fresh = LogisticPopulation(3).grad_noise(x[:2], w[:2])
    assert np.array_equal(first, again) and np.array_equal(first[:2], fresh) and np.array_equal(first[2:], fresh)
