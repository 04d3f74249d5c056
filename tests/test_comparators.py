import numpy as np
from scipy.optimize import minimize

import pytest

from streamfl.regret.comparators import (LeastSquaresHindsight, quadratic_min, quadratic_min_cholesky,
                                        quadratic_min_rows, solve_hindsight, weighted_loss_and_grad)


def test_least_squares_hindsight_equals_numpy_lstsq_at_every_step():
    rng = np.random.default_rng(3)
    n, M, b, d = 40, 3, 2, 4
    X = rng.standard_normal((n, M, b, d))
    y = rng.standard_normal((n, M, b))
    c = np.full((n, M), 1 / M)
    h = LeastSquaresHindsight(M, d)
    net1, cl1 = h.update(X[:25], y[:25], c[:25], np.ones((25, M), bool))
    net2, cl2 = h.update(X[25:], y[25:], c[25:], np.ones((15, M), bool))
    net = np.concatenate([net1, net2])
    for t in [1, 2, 10, 25, 40]:
        A = X[:t].reshape(-1, d)
        # network weight of every sample: (1/M)(1/b)
        w = np.sqrt(1 / (M * b))
        sol, *_ = np.linalg.lstsq(A * w, y[:t].reshape(-1) * w, rcond=None)
        value = 0.5 * np.sum(((A @ sol) - y[:t].reshape(-1)) ** 2) / (M * b)
        np.testing.assert_allclose(net[t - 1], value, rtol=1e-9, atol=1e-12)
    # client 1 alone, weight 1 per step (1/b per sample)
    A, yy = X[:, 1].reshape(-1, d), y[:, 1].reshape(-1)
    sol, *_ = np.linalg.lstsq(A, yy, rcond=None)
    np.testing.assert_allclose(cl2[-1, 1], 0.5 * np.sum((A @ sol - yy) ** 2) / b, rtol=1e-9)


def test_quadratic_min_with_ball_matches_a_constrained_solver():
    rng = np.random.default_rng(1)
    B = rng.standard_normal((6, 3))
    A = B.T @ B
    v = A @ np.array([3.0, -2.0, 1.0])
    e = 5.0
    got = quadratic_min(A[None], v[None], np.array([e]), radius=1.0)[0]
    res = minimize(lambda x: 0.5 * x @ A @ x - v @ x + 0.5 * e, np.zeros(3), method="SLSQP",
                   constraints=[{"type": "ineq", "fun": lambda x: 1.0 - x @ x}], options={"ftol": 1e-14})
    np.testing.assert_allclose(got, res.fun, rtol=1e-7)
    # inside the ball: the unconstrained value ½e − ½ vᵀA⁻¹v
    np.testing.assert_allclose(quadratic_min(A[None], v[None], np.array([e]))[0],
                               0.5 * e - 0.5 * v @ np.linalg.solve(A, v), rtol=1e-10)


def test_rows_and_cholesky_solves_equal_the_eigendecomposition():
    # the cheaper exact solves give quadratic_min's minimum and minimum-norm minimiser: few rows (n < d,
    # rank-deficient), an all-zero matrix, full rank, a singular full-size matrix, with and without the ball
    rng = np.random.default_rng(1)
    d = 12
    for n, solver in ((5, "rows"), (11, "rows"), (40, "cholesky")):
        for radius in (None, 0.3, 100.0):
            B = rng.standard_normal((4, n, d))
            z = rng.standard_normal((4, n))
            B[2], z[2] = 0.0, 0.0                          # a client with no weight yet
            if solver == "cholesky":
                B[3, :, 5] = 0.0                           # singular: falls back to the eigendecomposition
            A = B.transpose(0, 2, 1) @ B
            v = np.einsum("gnd,gn->gd", B, z)
            e = np.sum(z * z, axis=1) + 0.1
            want, x_want = quadratic_min(A, v, e, radius, return_x=True)
            got, x_got = (quadratic_min_rows(B, z, e, radius) if solver == "rows"
                          else quadratic_min_cholesky(A, v, e, radius))
            np.testing.assert_allclose(got, want, rtol=1e-11)
            np.testing.assert_allclose(x_got, x_want, rtol=1e-10, atol=1e-12)
            assert np.all(x_got[2] == 0.0)


def test_compiled_softmax_objective_equals_the_numpy_formula():
    # loss Σ w (logsumexp(z) − z_y) and gradient Xᵀ((softmax(z) − e_y) w), z = XW, written out with numpy;
    # scores up to ±60 (logsumexp must not overflow), more rows than one block of the kernel
    rng = np.random.default_rng(4)
    N, d, K = 5000, 7, 4
    X = rng.standard_normal((N, d)) * 3
    y = rng.integers(0, K, N).astype(float)
    w = rng.random(N)
    W = rng.standard_normal((d, K)) * 4
    z = X @ W
    zmax = z.max(axis=1, keepdims=True)
    lse = zmax[:, 0] + np.log(np.exp(z - zmax).sum(axis=1))
    rows, yi = np.arange(N), y.astype(int)
    p = np.exp(z - lse[:, None])
    p[rows, yi] -= 1.0
    f, g = weighted_loss_and_grad("softmax", W.ravel(), (d, K), X, y, w)
    np.testing.assert_allclose(f, w @ (lse - z[rows, yi]), rtol=1e-13)
    np.testing.assert_allclose(g, (X.T @ (p * w[:, None])).ravel(), rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match=r"class labels must lie in 0..3; got 0..4"):
        weighted_loss_and_grad("softmax", W.ravel(), (d, K), X, np.where(y == 1, 4.0, y), w)


def test_solve_hindsight_logistic_is_stationary():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 3))
    y = (rng.random(300) < 0.5).astype(float)
    w = np.full(300, 1 / 300)
    x, value = solve_hindsight("logistic", lambda: [(X, y, w)], (3, 1))
    z = X @ x
    grad = X.T @ ((1 / (1 + np.exp(-z)) - y) * w)
    assert np.linalg.norm(grad) < 1e-7
    np.testing.assert_allclose(value, np.sum(w * (np.logaddexp(0, z) - y * z)), rtol=1e-10)


def test_least_squares_hindsight_same_values_with_and_without_the_first_rows():
    # the clients' first rows (fewer than d) only make the exact solves cheaper: same comparators either way
    rng = np.random.default_rng(6)
    n, M, b, d = 30, 3, 1, 8
    X, y = rng.standard_normal((n, M, b, d)), rng.standard_normal((n, M, b))
    c, present = np.full((n, M), 1 / M), np.ones((n, M), bool)
    present[3:9, 1] = False
    c = np.where(present, c, 0.0)
    outs = [LeastSquaresHindsight(M, d, radius=0.8, refresh_every=4, keep_rows=keep).update(X, y, c, present)
            for keep in (True, False)]
    np.testing.assert_allclose(outs[0][0], outs[1][0], rtol=1e-10)
    np.testing.assert_allclose(outs[0][1], outs[1][1], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("radius", [None, 0.3])
def test_row_space_comparator_equals_the_d_by_d_one_on_wide_data(radius):
    # wide data: the clients keep fewer rows than features all run (18 < 40), the network's rows pass d at
    # step 7 (42 > 40: A formed from the rows then); clients absent at some steps, unequal network weights,
    # two chunks. Row space against A and v from the start: values after every step and the minimisers
    rng = np.random.default_rng(11)
    n, M, b, d = 9, 3, 2, 40
    X, y = rng.standard_normal((n, M, b, d)), rng.standard_normal((n, M, b))
    present = np.ones((n, M), bool)
    present[2:4, 1] = False
    present[5, 0] = False
    c = np.where(present, 1.0 / present.sum(axis=1, keepdims=True), 0.0)
    wide = LeastSquaresHindsight(M, d, radius, row_space=True)
    square = LeastSquaresHindsight(M, d, radius, row_space=False, keep_rows=False)
    assert (wide.net.in_rows, wide.clients.in_rows, square.net.in_rows, square.clients.in_rows) == (
        True, True, False, False)
    nets = []
    for part in (slice(0, 4), slice(4, n)):
        args = X[part], y[part], c[part], present[part]
        (net_w, cl_w), (net_s, cl_s) = wide.update(*args), square.update(*args)
        np.testing.assert_allclose(net_w, net_s, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(cl_w, cl_s, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(wide.x, square.x, rtol=1e-8, atol=1e-10)
        nets.append(net_w)
    assert not wide.net.in_rows and wide.clients.in_rows          # the network switched, the clients did not
    net = np.concatenate(nets)
    if radius is None:
        # against numpy: the network's rows √(c/b) a, √(c/b) y up to step t (0 while they interpolate)
        for t in (3, 6, 7, 9):
            w = np.sqrt(np.repeat(c[:t, :, None], b, axis=2) / b).reshape(-1)
            A, z = X[:t].reshape(-1, d) * w[:, None], y[:t].reshape(-1) * w
            sol, *_ = np.linalg.lstsq(A, z, rcond=None)
            np.testing.assert_allclose(net[t - 1], 0.5 * np.sum((A @ sol - z) ** 2), rtol=1e-9, atol=1e-12)
        assert net[5] == pytest.approx(0.0, abs=1e-12) and net[8] > 0.1
    else:
        assert np.all(np.linalg.norm(wide.x, axis=1) <= radius * (1 + 1e-12))
    # λ_max of A from the rows' Gram and from A
    assert wide.clients.lam_max() == pytest.approx(np.linalg.eigvalsh(square.clients.A)[:, -1], rel=1e-12)
    assert wide.net.lam_max()[0] == pytest.approx(np.linalg.eigvalsh(square.net.A[0])[-1], rel=1e-12)


def test_row_space_is_the_default_above_128_features_only():
    assert not LeastSquaresHindsight(2, 128).row_space and LeastSquaresHindsight(2, 129).row_space
    # a wide network with rows of weight 0 (absent clients) keeps only the others
    h = LeastSquaresHindsight(2, 200, per_client=False)
    X = np.ones((1, 2, 3, 200))
    h.update(X, np.ones((1, 2, 3)), np.array([[1.0, 0.0]]), np.array([[True, False]]))
    assert h.net.B.shape == (1, 3, 200) and h.net.K.shape == (1, 3, 3) and h.net.A is None


def test_row_space_lower_bound_between_refreshes_equals_the_d_by_d_one():
    # warm steps 17..29 with the network's 34..58 rows still fewer than d = 80: the Lagrangian lower bound
    # through the rows' Gram (Woodbury) equals the d × d factor's when the ball binds (ν > 0); with ν = 0,
    # A_r is singular and the bound is −∞ (no d × d factorisation attempted)
    rng = np.random.default_rng(12)
    n, M, b, d = 30, 2, 1, 80
    X, y = rng.standard_normal((n, M, b, d)), rng.standard_normal((n, M, b))
    c, present = np.full((n, M), 1 / M), np.ones((n, M), bool)
    kw = dict(refresh_every=1024, extra=[30])
    wide = LeastSquaresHindsight(M, d, 0.2, row_space=True, **kw)
    square = LeastSquaresHindsight(M, d, 0.2, row_space=False, keep_rows=False, **kw)
    (net_w, _), (net_s, _) = wide.update(X, y, c, present), square.update(X, y, c, present)
    assert wide.net.in_rows and wide._bound_rows is not None and square._bound_chol is not None
    np.testing.assert_allclose(net_w, net_s, rtol=1e-10)
    warm = ~wide.network_exact
    assert warm.sum() == 13 and np.all(np.isfinite(wide.network_lower))
    np.testing.assert_allclose(wide.network_lower, square.network_lower, rtol=1e-9)
    np.testing.assert_allclose(wide.network_estimate, square.network_estimate, rtol=1e-9)
    assert np.all(wide.network_lower[warm] < net_w[warm])
    free = LeastSquaresHindsight(M, d, None, row_space=True, **kw)
    free.update(X, y, c, present)
    assert np.all(free.network_lower[warm] == -np.inf)
    assert np.all(np.abs(free.network_lower[~warm]) < 1e-12)                 # exact: 0, the rows interpolate
