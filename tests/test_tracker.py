import numpy as np
import pytest

from streamfl.generators.base import Chunk, Stream
from streamfl.models import StackedLinear, StepSize
from streamfl.regret import RegretTracker
from streamfl.runtime.engine import run_stream
from streamfl.runtime.learners import Federated


class Fixed(Stream):
    """Two clients, d = 1, features all ones, labels given."""

    def __init__(self, y, task="least_squares"):
        self.y = np.asarray(y, dtype=float)
        self.n_steps, self.n_clients = self.y.shape
        self.n_features, self.batch_size, self.task = 1, 1, task

    def chunks(self, chunk_size=256):
        for t0 in range(0, self.n_steps, chunk_size):
            y = self.y[t0:t0 + chunk_size]
            yield Chunk(t0, np.ones(y.shape + (1, 1)), y[..., None])


def run(stream, tau=1, eta=0.5):
    learners = {"fedsea": Federated(StackedLinear(stream.n_clients, 1, stream.task, StepSize("constant", eta=eta)), tau)}
    rows = []
    tracker = RegretTracker(stream, "fedsea", ["fedsea"], sink=rows.append)
    run_stream(stream, learners, tracker, "fedsea")
    return tracker, rows


def test_regret_equals_hand_computed_value():
    # t=1: x=0, losses ½·2² and ½·4² → network loss 5; SGD gives 1 and 2, averaged to 1.5.
    # t=2: losses ½·1.5² and ½·0.5² → 0.625; cumulative 5.625.
    # best fixed x: mean of {2, 4} = 3 after t=1 (loss 0.5); mean of {2, 4, 0, 2} = 2 after t=2 (loss 2).
    tracker, rows = run(Fixed([[2, 4], [0, 2]]))
    frame = rows[0]
    np.testing.assert_allclose(frame["cum_loss"], [5.0, 5.625])
    np.testing.assert_allclose(frame["comparator_static"], [0.5, 2.0])
    np.testing.assert_allclose(frame["regret_static"], [4.5, 3.625])
    # client 0 alone: losses 2 then 1.125; best fixed x = 1 → ½(1 + 1) = 1
    np.testing.assert_allclose(frame["client0_regret_static"], [2.0 - 0.0, 3.125 - 1.0])
    assert tracker.finalize()["regret_static"] == pytest.approx(3.625)


def test_local_only_never_averages():
    # τ = None: client models stay 1 and 2 after step 1 → losses ½·1², ½·0² at step 2.
    stream = Fixed([[2, 4], [0, 2]])
    learners = {"fedsea": Federated(StackedLinear(2, 1, "least_squares", StepSize("constant", eta=0.5)), None)}
    rows = []
    run_stream(stream, learners, RegretTracker(stream, "fedsea", ["fedsea"], sink=rows.append), "fedsea")
    np.testing.assert_allclose(rows[0]["loss"], [5.0, 0.25])


def test_logistic_exact_comparator_at_the_end():
    y = np.array([[1, 0], [1, 1], [0, 1], [1, 1]], dtype=float)
    tracker, rows = run(Fixed(y, "logistic"), eta=0.3)
    out = tracker.finalize()
    # features are all ones: the best fixed logit is log(p/(1-p)) with p = 6/8
    p = 6 / 8
    best = -(p * np.log(p) + (1 - p) * np.log(1 - p)) * 4
    assert out["comparator_static"] == pytest.approx(best, rel=1e-8)
    assert out["regret_static"] == pytest.approx(rows[0]["cum_loss"].iloc[-1] - best, rel=1e-8)


# ----------------------------------------------------------------------------- radius, decomposition, per client
from scipy.optimize import minimize  # noqa: E402

from streamfl.generators.population import LogisticPopulation  # noqa: E402
from streamfl.generators.schedules import RandomWalk  # noqa: E402
from streamfl.generators.synthetic import SyntheticStream  # noqa: E402
from streamfl.regret.comparators import solve_hindsight  # noqa: E402


class Capture(RegretTracker):
    """Keeps the played models and the chunks (for independent recomputation)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.models, self.chunks = [], []

    def update(self, chunk, losses, models):
        self.models.append(models[..., 0].copy())
        self.chunks.append(chunk)
        return super().update(chunk, losses, models)


def _run_capture(stream, eta=0.05, tau=5, radius=None, chunk=97):
    step = StepSize("constant", eta=eta)
    learner = Federated(StackedLinear(stream.n_clients, stream.n_features, stream.task, step, radius=radius), tau)
    rows = []
    tr = Capture(stream, "fedsea", ["fedsea"], radius=radius, sink=rows.append, step_size=step, tau=tau)
    run_stream(stream, {"fedsea": learner}, tr, "fedsea", chunk_size=chunk)
    import pandas as pd
    return tr, pd.concat(rows, ignore_index=True), tr.finalize()


def _ball_min(fun, x0, radius, jac=None):
    """min_{‖x‖ ≤ radius} fun by scipy's trust-constr (an algorithm the tracker does not use)."""
    from scipy.optimize import NonlinearConstraint
    con = NonlinearConstraint(lambda x: x @ x, -np.inf, radius**2, jac=lambda x: 2 * x)
    res = minimize(fun, x0, jac=jac, method="trust-constr", constraints=[con],
                   options={"gtol": 1e-12, "xtol": 1e-14, "maxiter": 5000})
    return res.x, float(res.fun)


@pytest.mark.filterwarnings("ignore:delta_grad == 0.0")       # trust-constr on an exact quadratic
def test_least_squares_with_a_radius_against_a_constrained_solver():
    """Static, expected and dynamic regret with the comparator set ‖x‖ ≤ D, recomputed independently."""
    M, d, b, s, sigma, D = 3, 3, 2, 1.2, 0.4, 0.5
    stream = SyntheticStream("least_squares", n_clients=M, n_features=d, n_steps=300, batch_size=b, noise=sigma,
                             heterogeneity=0.6, radius=2.0, feature_scale=s, drift=[RandomWalk(0.05)], seed=4)
    tr, frame, out = _run_capture(stream, radius=D)
    X = np.concatenate([c.X for c in tr.chunks])
    y = np.concatenate([c.y for c in tr.chunks])
    W = np.concatenate([c.optimum for c in tr.chunks])
    x = np.concatenate(tr.models)
    assert np.all(np.linalg.norm(x, axis=-1) <= D + 1e-12)
    A, Y = X.reshape(-1, d), y.reshape(-1)
    _, static = _ball_min(lambda v: 0.5 * np.sum((A @ v - Y) ** 2) / (M * b), np.zeros(d), D,
                          jac=lambda v: A.T @ (A @ v - Y) / (M * b))
    assert out["comparator_static"] == pytest.approx(static, rel=1e-7)
    F = lambda v, w: 0.5 * s**2 * np.sum((v - w) ** 2, axis=-1) + 0.5 * sigma**2   # noqa: E731
    # F is isotropic, so min over the ball of Σ_t F_t is at the projection of the mean optimum (exact);
    # trust-constr stopped 1.6e-4 above that minimum (expected regret 9.865009 against the exact 9.865169)
    wbar = W.reshape(-1, d).mean(axis=0)
    comp = F(wbar * min(1.0, D / np.linalg.norm(wbar)), W).mean(axis=1).sum()
    assert np.linalg.norm(wbar) > D                                   # the radius binds
    assert out["regret_expected"] == pytest.approx(F(x, W).mean(axis=1).sum() - comp, rel=1e-10)
    u = W.mean(axis=1)
    u = u * np.minimum(1, D / np.linalg.norm(u, axis=1, keepdims=True))
    xbar = x.mean(axis=1)
    dyn = np.sum(F(xbar[:, None], W).mean(axis=1) - F(u[:, None], W).mean(axis=1))
    assert out["regret_dynamic"] == pytest.approx(dyn, rel=1e-10)


def test_logistic_with_a_radius_uses_the_constrained_solver():
    """The unconstrained hindsight optimum is outside ‖x‖ ≤ D: solve_hindsight's SLSQP branch.

    Checked against scipy's trust-constr on the recorded stream, for the
    network and for each client, and the expected regret against a
    constrained solve of Σ_t F_t.
    """
    M, d, D = 2, 3, 0.4
    stream = SyntheticStream("logistic", n_clients=M, n_features=d, n_steps=400, batch_size=2,
                             heterogeneity=0.3, radius=3.0, feature_scale=1.0, seed=2)
    tr, frame, out = _run_capture(stream, eta=0.1, radius=D)
    X = np.concatenate([c.X for c in tr.chunks])
    y = np.concatenate([c.y for c in tr.chunks])
    W = np.concatenate([c.optimum for c in tr.chunks])
    x = np.concatenate(tr.models)

    def logloss(v, A, Y, w):
        z = A @ v
        return float(np.sum(w * (np.logaddexp(0, z) - Y * z))), A.T @ (w * (1 / (1 + np.exp(-z)) - Y))

    A, Y = X.reshape(-1, d), y.reshape(-1)
    w = np.full(len(Y), 1 / (M * 2))
    free, _ = solve_hindsight("logistic", lambda: [(A, Y, w)], (d, 1))
    assert np.linalg.norm(free) > 2 * D                       # the constraint is active
    _, ref = _ball_min(lambda v: logloss(v, A, Y, w)[0], np.zeros(d), D, jac=lambda v: logloss(v, A, Y, w)[1])
    assert out["comparator_static"] == pytest.approx(ref, rel=1e-7)
    for m in range(M):
        Am, Ym = X[:, m].reshape(-1, d), y[:, m].reshape(-1)
        wm = np.full(len(Ym), 0.5)
        _, refm = _ball_min(lambda v: logloss(v, Am, Ym, wm)[0], np.zeros(d), D,
                            jac=lambda v: logloss(v, Am, Ym, wm)[1])
        cum_m = frame[f"client{m}_cum_loss"].iloc[-1]
        assert out["client_regret"]["static"][m] == pytest.approx(cum_m - refm, rel=1e-6)
    pop = LogisticPopulation(d)
    # the population comparator is solved by Newton on ‖x‖ in the tracker: check it with SLSQP
    res = minimize(lambda v: float(pop.loss(v, W).mean(axis=1).sum()), np.zeros(d),
                   jac=lambda v: pop.grad(v, W).mean(axis=1).sum(axis=0), method="SLSQP",
                   constraints=[{"type": "ineq", "fun": lambda v: D**2 - v @ v, "jac": lambda v: -2 * v}],
                   options={"ftol": 1e-15, "maxiter": 1000})
    comp = float(res.fun)
    played = float(pop.loss(x, W).mean(axis=1).sum())
    assert out["regret_expected"] == pytest.approx(played - comp, rel=1e-7)
    # the decomposition is an identity: eq. (3) = virtual average + consensus part
    assert out["regret_expected"] == pytest.approx(out["regret_expected_virtual"] + out["consensus_part_expected"],
                                                   rel=1e-10)
    virtual = float(pop.loss(x.mean(axis=1)[:, None], W).mean(axis=1).sum())
    assert out["regret_expected_virtual"] == pytest.approx(virtual - comp, rel=1e-7)


def test_consensus_part_equals_the_bound_weight_for_isotropic_least_squares():
    """ζ = 0, F = ½ s²‖x − w‖²: (1/M) Σ F(x_m) − F(x̄) = (s²/2)(1/M) Σ ‖x_m − x̄‖² exactly (L = s²)."""
    stream = SyntheticStream("least_squares", n_clients=4, n_features=3, n_steps=500, batch_size=1, noise=1.0,
                             heterogeneity=0.0, radius=1.0, feature_scale=1.7, seed=0)
    tr, frame, out = _run_capture(stream, eta=0.05, tau=10)
    assert out["consensus_part_expected"] > 0
    assert out["consensus_part_expected"] == pytest.approx(out["consensus_bound"], rel=1e-10)
    x = np.concatenate(tr.models)
    C = np.sum((x - x.mean(axis=1, keepdims=True)) ** 2, axis=-1).mean(axis=1)
    np.testing.assert_allclose(frame["consensus"], C, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(frame["regret_expected"], frame["regret_expected_virtual"] + frame["consensus_part_expected"],
                               rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(frame["regret_static"], frame["regret_static_virtual"]
                               + frame["cum_loss"] - frame["cum_loss_virtual"], rtol=1e-10, atol=1e-10)


def test_per_client_expected_and_dynamic_regret_against_closed_forms():
    """Each client alone: Σ_t F_{t,m}(x_{t,m}) − min_x Σ_t F_{t,m}(x) and − Σ_t F_{t,m}(x*_{t,m}).

    With per-client feature scales and noise (the richer adversary), so that
    the weights s_m² enter the comparator.
    """
    M, d = 3, 2
    scales, noises = [0.8, 1.0, 1.6], [0.2, 0.5, 1.0]
    stream = SyntheticStream("least_squares", n_clients=M, n_features=d, n_steps=250, batch_size=2,
                             noise=noises, feature_scale=scales, heterogeneity=0.7, radius=1.0,
                             drift=[RandomWalk(0.03)], seed=6)
    tr, frame, out = _run_capture(stream, eta=0.05)
    W = np.concatenate([c.optimum for c in tr.chunks])
    x = np.concatenate(tr.models)
    s2, n2 = np.array(scales) ** 2, np.array(noises) ** 2
    F = 0.5 * s2 * np.sum((x - W) ** 2, axis=-1) + 0.5 * n2                  # (T, M)
    best = W.mean(axis=0)                                                    # each client's own hindsight optimum
    comp = 0.5 * s2 * np.sum((W - best) ** 2, axis=-1).sum(axis=0) + 0.5 * n2 * len(W)
    np.testing.assert_allclose(out["client_regret"]["expected"], F.sum(axis=0) - comp, rtol=1e-9)
    np.testing.assert_allclose(out["client_regret"]["dynamic"], F.sum(axis=0) - 0.5 * n2 * len(W), rtol=1e-9)
    for m in range(M):
        assert frame[f"client{m}_regret_expected"].iloc[-1] == pytest.approx(out["client_regret"]["expected"][m])
    # network: weights c s² in the comparator (the mean of the optima weighted by s_m²)
    xs = np.einsum("m,tmd->d", s2, W) / (len(W) * s2.sum())
    netcomp = np.sum((0.5 * s2 * np.sum((xs - W) ** 2, axis=-1) + 0.5 * n2).mean(axis=1))
    assert out["regret_expected"] == pytest.approx(F.mean(axis=1).sum() - netcomp, rel=1e-9)
    spread = out["client_regret_spread"]["dynamic"]
    assert spread["min"] <= spread["median"] <= spread["max"]


# ----------------------------------------------------------------------------- per-client static, all clients at once
from streamfl.regret import tracker as tracker_module  # noqa: E402
from streamfl.regret.comparators import solve_hindsight_clients  # noqa: E402


def test_batched_client_newton_equals_one_lbfgs_solve_per_client():
    # 6 clients, 40 steps, b = 2, d = 3; client 4 absent half the time (weight 0), client 5 separable
    # (all labels 1 on a half-space: no finite minimiser; both solvers stop where the gradient is below
    # 1e-10, at a loss within 1e-8 of the infimum 0)
    rng = np.random.default_rng(11)
    n, M, b, d = 40, 6, 2, 3
    X = rng.normal(size=(n, M, b, d))
    y = (rng.uniform(size=(n, M, b)) < 0.6).astype(float)
    X[:, 5, :, 0] = np.abs(X[:, 5, :, 0]) + 0.1
    y[:, 5] = 1.0
    w = np.full((n, M, b), 1.0 / b)
    w[::2, 4] = 0.0
    x, value, ok = solve_hindsight_clients(lambda: iter([(X[:25], y[:25], w[:25]), (X[25:], y[25:], w[25:])]),
                                           M, d)
    assert ok.all()
    for m in range(6):
        xm, vm = solve_hindsight("logistic", lambda: [(X[:, m].reshape(-1, d), y[:, m].reshape(-1),
                                                       w[:, m].reshape(-1))], (d, 1))
        if m == 5:
            assert 0 < value[m] < 1e-8 and 0 < vm < 1e-8
            continue
        assert value[m] == pytest.approx(vm, rel=1e-12)
        np.testing.assert_allclose(x[m], xm, atol=1e-7)


@pytest.mark.parametrize("radius", [None, 0.05])
def test_tracker_per_client_static_batched_solvers_agree(monkeypatch, radius):
    # the same run's per-client exact static regrets by batched damped Newton (d ≤ 32) and by batched
    # preconditioned L-BFGS (the path for larger d); with a small radius every client falls back to the
    # one-by-one solver
    stream = lambda: SyntheticStream("logistic", n_clients=7, n_features=3, n_steps=60, batch_size=2,  # noqa: E731
                                     heterogeneity=0.5, seed=4)
    _, _, newton = _run_capture(stream(), radius=radius)
    monkeypatch.setattr(tracker_module, "CLIENT_NEWTON_MAX_DIM", 0)
    _, _, lbfgs = _run_capture(stream(), radius=radius)
    np.testing.assert_allclose(newton["client_regret"]["static"], lbfgs["client_regret"]["static"], rtol=1e-10)
    settled = 0 if radius else 7
    assert newton["client_regret_static_method"] == (
        f"exact: all clients at once by damped Newton (logistic, d ≤ 32) for {settled} clients, L-BFGS one "
        f"client at a time for {7 - settled}")
    assert lbfgs["client_regret_static_method"] == (
        f"exact: all clients at once by preconditioned L-BFGS (logistic, d > 0) for {settled} clients, L-BFGS one "
        f"client at a time for {7 - settled}")


@pytest.mark.parametrize("precond", ["clients", None])
def test_batched_client_lbfgs_equals_one_lbfgs_solve_per_client(precond):
    # 6 clients, 300 steps, b = 2, d = 20 (not separable); client 4 absent half the time
    from streamfl.regret.bracket import solve_clients
    rng = np.random.default_rng(12)
    n, M, b, d = 300, 6, 2, 20
    truth = rng.normal(size=d) / np.sqrt(d)
    X = rng.normal(size=(n, M, b, d))
    y = (rng.uniform(size=(n, M, b)) < 1 / (1 + np.exp(-X @ truth))).astype(float)
    w = np.full((n, M, b), 1.0 / b)
    w[::2, 4] = 0.0
    x, value, ok = solve_clients(lambda: iter([(X[:90], y[:90], w[:90]), (X[90:], y[90:], w[90:])]), M, d,
                                 precond=precond)
    assert ok.all()
    for m in range(M):
        xm, vm = solve_hindsight("logistic", lambda: [(X[:, m].reshape(-1, d), y[:, m].reshape(-1),
                                                       w[:, m].reshape(-1))], (d, 1))
        assert value[m] == pytest.approx(vm, rel=1e-11)
        np.testing.assert_allclose(x[m], xm, atol=1e-5)


def test_batched_client_newton_passes_near_the_minimum():
    # 64 clients, 512 samples each, d = 10, started at 0: 8 passes over the data. Near the minimum the
    # predicted decrease falls below the rounding of f; Armijo on f alone then kept halving the step
    # (28 passes on this problem) until a gradient happened to fall below 1e-10
    rng = np.random.default_rng(5)
    n, M, b, d = 512, 64, 1, 10
    truth = rng.normal(size=(M, d)) * 0.5
    X = rng.normal(size=(n, M, b, d))
    y = (rng.uniform(size=(n, M, b)) < 1 / (1 + np.exp(-np.einsum("nmbd,md->nmb", X, truth)))).astype(float)
    w = np.ones((n, M, b))
    calls = [0]

    def blocks():
        calls[0] += 1
        yield X, y, w
    x, value, ok = solve_hindsight_clients(blocks, M, d)
    assert ok.all() and calls[0] == 8
    m = 17
    _, vm = solve_hindsight("logistic", lambda: [(X[:, m, 0], y[:, m, 0], w[:, m, 0])], (d, 1))
    assert value[m] == pytest.approx(vm, rel=1e-12)


def test_running_sum_is_the_same_whatever_the_chunks():
    # totals carried across chunks as start + cumsum(chunk) rounded differently with each chunk size (the
    # gaps to the baselines differed in their 12th digit between chunk_size 7 and 256)
    from streamfl.regret.heterogeneity import running_sum
    rng = np.random.default_rng(5)
    for shape in ((41,), (41, 4), (41, 4, 3)):
        a = rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 4, shape)
        start = rng.standard_normal(shape[1:]) * 1e3
        whole = running_sum(start, a)
        assert whole.shape == a.shape
        stepwise, total = [], start
        for i in range(len(a)):                      # one step at a time, as chunk_size 1 adds them
            total = total + a[i]
            stepwise.append(total)
        np.testing.assert_array_equal(whole, np.array(stepwise))
        for cut in (1, 7, 40):
            head = running_sum(start, a[:cut])
            np.testing.assert_array_equal(np.concatenate([head, running_sum(head[-1], a[cut:])]), whole)
    assert running_sum(0.0, np.empty(0)).shape == (0,)


@pytest.mark.parametrize("radius", [None, 0.4, 50.0])
def test_client_expected_comparator_from_the_norm_of_the_sums_equals_the_minimiser(radius):
    # each client's least-squares comparator min_{‖x‖≤D} ½ s0² Σ k ‖x − w‖² + ½ Σ σ² is taken from
    # ‖Σ k w‖² alone (no (n, M, d) running sums); it must equal the value at the explicit minimiser
    rng = np.random.default_rng(5)
    n, M, d = 7, 4, 3
    w = rng.standard_normal((n, M, d)) + 0.3
    k = rng.uniform(0.5, 2.0, (n, M))
    Kc, Kw = np.cumsum(k, axis=0), np.cumsum(k[..., None] * w, axis=0)
    Kww, Kn = np.cumsum(k * np.sum(w * w, axis=-1), axis=0), np.cumsum(rng.uniform(0, 1, (n, M)), axis=0)
    tr = RegretTracker(Fixed(np.zeros((2, 2))), "fedsea", ["fedsea"], radius=radius)
    got = tr._ls_client_comparator(Kc, np.sum(Kw * Kw, axis=-1), Kww, Kn, 1.7)
    xhat = Kw / Kc[..., None]
    if radius is not None:
        xhat *= np.minimum(1.0, radius / np.linalg.norm(xhat, axis=-1))[..., None]
    # ½ s0² Σ_s k_s ‖x̂ − w_s‖² written out step by step
    want = np.empty((n, M))
    for t in range(n):
        dist = np.sum(k[:t + 1, :, None] * (xhat[t][None] - w[:t + 1]) ** 2, axis=(0, 2))
        want[t] = 0.5 * 1.7 ** 2 * dist + 0.5 * Kn[t]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    if radius == 0.4:
        assert (np.linalg.norm(Kw / Kc[..., None], axis=-1) > radius).mean() > 0.5    # the ball binds mostly


def test_one_blas_thread_limits_scipys_blas_too():
    # scipy.linalg bundles its own OpenBLAS; the controller made before it was loaded did not limit it, and
    # the bracket's triangular solves spun a second thread (3.5 ms per call instead of 0.1)
    import subprocess
    import sys
    code = ("from streamfl.regret.tracker import one_blas_thread\n"
            "with one_blas_thread():\n"
            "    import scipy.linalg\n"
            "    from threadpoolctl import threadpool_info\n"
            "    print(sorted({i['num_threads'] for i in threadpool_info() if i['user_api'] == 'blas'}))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**__import__("os").environ, "OPENBLAS_NUM_THREADS": "2"})
    assert out.stdout.strip() == "[1]"
