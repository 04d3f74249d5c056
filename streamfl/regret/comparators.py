"""Hindsight comparators: min over a fixed model of the cumulative loss.

* :class:`LeastSquaresHindsight` — exact at every step for the squared loss,
  from running sufficient statistics (A = Σ c a aᵀ/b, v = Σ c a y/b,
  e = Σ c y²/b); memory O(G d²), constant in T.
* :class:`ReservoirHindsight` — the live estimate for the logistic and softmax
  losses: a weighted reservoir of R samples (Efraimidis & Spirakis, 2006),
  each kept with the loss the learner incurred on it. After every chunk the
  comparator model x̂ is refitted on the reservoir, and the regret is
  estimated as (Σ weights so far) × (reservoir mean of [learner loss − f(x̂, ξ)]).
  Pairing the two losses on the same samples cancels most of the sampling
  noise (a control variate); fitting and evaluating on the same reservoir
  makes the estimate slightly optimistic for the comparator. The exact value
  comes from :func:`solve_hindsight` at the end of the run.
* :func:`solve_hindsight` — the exact comparator on a recorded stream, by a
  convex solver (L-BFGS; SLSQP for the L2-ball constraint).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, types
from scipy.optimize import minimize
from scipy.special import softmax

from ..models.losses import get_loss


def quadratic_min(A: np.ndarray, v: np.ndarray, e: np.ndarray, radius: float | None = None) -> np.ndarray:
    """min_{‖x‖ ≤ radius} ½ xᵀAx − vᵀx + ½ e, batched.

    Parameters
    ----------
    A : ndarray (..., d, d), symmetric positive semi-definite
    v : ndarray (..., d), in the range of A
    e : ndarray (...)
    radius : float or None
        The L2-ball radius D; ``None`` for no constraint. On the boundary the
        multiplier ν solving ‖(A + νI)⁻¹v‖ = D is found by bisection.

    Returns
    -------
    ndarray (...)
        The minimum value (for least squares: the comparator's cumulative loss).
    """
    lam, Q = np.linalg.eigh(A)
    vt = np.einsum("...dk,...d->...k", Q, v)
    tol = 1e-10 * np.maximum(lam[..., -1:], 1e-300)
    keep = lam > tol
    safe = np.where(keep, lam, 1.0)
    xt = np.where(keep, vt / safe, 0.0)
    value = 0.5 * e - 0.5 * np.sum(xt * vt, axis=-1)
    if radius is None:
        return value
    outside = np.sum(xt**2, axis=-1) > radius**2
    if not np.any(outside):
        return value
    lo_, vt_, keep_ = lam[outside], vt[outside], keep[outside]
    lo = np.zeros(lo_.shape[0])
    hi = np.sqrt(np.sum(vt_**2, axis=-1)) / radius + 1.0
    for _ in range(200):
        nu = 0.5 * (lo + hi)
        xn = np.where(keep_, vt_ / (lo_ + nu[:, None]), 0.0)
        big = np.sum(xn**2, axis=-1) > radius**2
        lo, hi = np.where(big, nu, lo), np.where(big, hi, nu)
    xn = np.where(keep_, vt_ / (lo_ + hi[:, None]), 0.0)
    value = value.copy()
    value[outside] = 0.5 * np.sum(lo_ * xn**2, axis=-1) - np.sum(vt_ * xn, axis=-1) + 0.5 * e[outside]
    return value


class LeastSquaresHindsight:
    """Exact best-fixed-model comparator for the squared loss, at every step.

    Tracks G groups at once (group 0: the network with weights c_{t,m};
    groups 1..M: each client alone with weight 1 per step it is present).

    Parameters
    ----------
    n_clients, n_features : int
    radius : float or None
        Comparator set X = {‖x‖ ≤ radius}.

    Examples
    --------
    >>> import numpy as np
    >>> h = LeastSquaresHindsight(1, 1)
    >>> X = np.array([1.0, 1.0]).reshape(2, 1, 1, 1); y = np.array([1.0, 3.0]).reshape(2, 1, 1)
    >>> net, clients = h.update(X, y, np.ones((2, 1)), np.ones((2, 1), bool))
    >>> net            # best fixed x is 2: ½(1-2)² + ½(3-2)² = 1 after step 2
    array([0., 1.])
    """

    def __init__(self, n_clients: int, n_features: int, radius: float | None = None):
        G, d = n_clients + 1, n_features
        self.radius = radius
        self.A = np.zeros((G, d, d))
        self.v = np.zeros((G, d))
        self.e = np.zeros(G)

    def update(self, X, y, c, present):
        """Absorb a chunk; return the comparator loss after each step.

        Parameters
        ----------
        X : (n, M, b, d); y : (n, M, b); c : (n, M) network weights;
        present : (n, M) bool.

        Returns
        -------
        network : ndarray (n,)
        clients : ndarray (n, M)
        """
        b = X.shape[2]
        p = present / b
        # per client (weight 1 per step present), then the network (weights c_{t,m})
        Ac = np.einsum("nm,nmbd,nmbe->nmde", p, X, X)
        vc = np.einsum("nm,nmbd,nmb->nmd", p, X, y)
        ec = np.einsum("nm,nmb->nm", p, y * y)
        cw = np.divide(c, present, out=np.zeros_like(c), where=present)
        A = np.concatenate([np.einsum("nm,nmde->nde", cw, Ac)[:, None], Ac], axis=1)
        v = np.concatenate([np.einsum("nm,nmd->nd", cw, vc)[:, None], vc], axis=1)
        e = np.concatenate([np.einsum("nm,nm->n", cw, ec)[:, None], ec], axis=1)
        A = self.A + np.cumsum(A, axis=0)
        v = self.v + np.cumsum(v, axis=0)
        e = self.e + np.cumsum(e, axis=0)
        self.A, self.v, self.e = A[-1].copy(), v[-1].copy(), e[-1].copy()
        value = quadratic_min(A, v, e, self.radius)
        return value[:, 0], value[:, 1:]


_BLOCK = 4096  # rows per partial sum in _weighted_logistic
_F64_1 = types.Array(types.float64, 1, "C", readonly=True)   # writable arrays convert to these
_F64_2 = types.Array(types.float64, 2, "C", readonly=True)


@njit(types.Tuple((types.float64, types.float64[::1]))(_F64_1, _F64_2, _F64_1, _F64_1),
      cache=True, fastmath={"reassoc", "contract", "nsz", "arcp"}, error_model="numpy")
def _weighted_logistic(theta, X, y, w):
    """Σ_i w_i (log(1 + e^{z_i}) − y_i z_i), z_i = x_i·θ, and its gradient Σ_i w_i (σ(z_i) − y_i) x_i.

    One pass over the rows of X. Each loss is the sum of the non-negative
    terms log1p(e^{−|z|}) + (1 − y) max(z, 0) + y max(−z, 0) (no overflow, no
    cancellation for y ∈ [0, 1]). The weighted losses of a block of ``_BLOCK``
    rows are buffered and summed by a vectorised (multi-accumulator) loop and
    the gradient is accumulated per block, so the rounding stays at the level
    of BLAS.
    theta : float64 (d,); X : float64 (N, d); y, w : float64 (N,), C-contiguous.
    Returns (float, float64 (d,)).
    """
    N, d = X.shape
    total, grad = 0.0, np.zeros(d)
    losses, part = np.empty(_BLOCK), np.empty(d)
    for i0 in range(0, N, _BLOCK):
        m = min(N - i0, _BLOCK)
        for k in range(d):
            part[k] = 0.0
        for j in range(m):
            i = i0 + j
            z = 0.0
            for k in range(d):
                z += X[i, k] * theta[k]
            e = math.exp(-abs(z))
            losses[j] = w[i] * (math.log1p(e) + (1.0 - y[i]) * max(z, 0.0) + y[i] * max(-z, 0.0))
            r = w[i] * ((1.0 if z >= 0 else e) / (1.0 + e) - y[i])
            for k in range(d):
                part[k] += r * X[i, k]
        block = 0.0
        for j in range(m):
            block += losses[j]
        total += block
        for k in range(d):
            grad[k] += part[k]
    return total, grad


def weighted_loss_and_grad(task: str, theta: np.ndarray, shape, X: np.ndarray, y: np.ndarray, w: np.ndarray):
    """Σ_i w_i f(θ, x_i, y_i) and its gradient, for a flat parameter vector.

    X : (N, d); y : (N,); w : (N,); shape : (d, K). The logistic loss is one
    compiled pass over X (:func:`_weighted_logistic`).
    """
    if task == "logistic":
        return _weighted_logistic(*(np.ascontiguousarray(a, dtype=np.float64) for a in (theta, X, y, w)))
    loss_fn = get_loss(task)
    W = theta.reshape(shape)[None]
    loss, _ = loss_fn(W, X[None], y[None], with_grad=False)
    scores = X @ W[0]
    if task == "least_squares":
        r = (scores[:, 0] - y) * w
        grad = (X.T @ r)[:, None]
    else:
        p = softmax(scores, axis=1)
        p[np.arange(len(y)), y.astype(np.int64)] -= 1.0
        grad = X.T @ (p * w[:, None])
    return float(np.dot(w, loss[0])), grad.ravel()


def solve_hindsight(task: str, blocks, shape, radius: float | None = None, x0: np.ndarray | None = None):
    """Exact min_{x ∈ X} Σ_i w_i f(x, ξ_i) over a recorded stream.

    Parameters
    ----------
    task : str
    blocks : callable returning an iterable of (X (N, d), y (N,), w (N,))
        Called once per objective evaluation, so the stream may live on disk.
    shape : tuple (d, K)
    radius : float or None
    x0 : ndarray (d*K,) or None — warm start.

    Returns
    -------
    x : ndarray (d*K,)
    value : float

    Raises
    ------
    RuntimeError
        If the solver fails to converge.
    """

    def fun(theta):
        total, grad = 0.0, np.zeros_like(theta)
        for X, y, w in blocks():
            f, g = weighted_loss_and_grad(task, theta, shape, X, y, w)
            total += f
            grad += g
        return total, grad

    theta0 = np.zeros(int(np.prod(shape))) if x0 is None else x0
    res = minimize(fun, theta0, jac=True, method="L-BFGS-B", options={"maxiter": 2000, "gtol": 1e-10, "ftol": 1e-15})
    x, value = res.x, float(res.fun)
    if radius is not None and np.linalg.norm(x) > radius:
        x0c = x * (radius / np.linalg.norm(x))
        res = minimize(fun, x0c, jac=True, method="SLSQP",
                       constraints=[{"type": "ineq", "fun": lambda th: radius**2 - th @ th, "jac": lambda th: -2 * th}],
                       options={"maxiter": 1000, "ftol": 1e-14})
        x, value = res.x, float(res.fun)
    if not np.isfinite(value):
        raise RuntimeError(f"The hindsight comparator solver failed: {res.message}")
    return x, value


class ReservoirHindsight:
    """Live estimate of the hindsight comparator for non-quadratic losses.

    Parameters
    ----------
    task : {"logistic", "softmax"}
    shape : tuple (d, K)
    size : int
        R, the reservoir size (samples kept; memory O(R d)).
    radius : float or None
    seed : int
    """

    def __init__(self, task: str, shape, size: int = 4096, radius: float | None = None, seed: int = 0):
        self.task, self.shape, self.size, self.radius = task, shape, size, radius
        self.rng = np.random.default_rng(seed)
        d = shape[0]
        self.X = np.empty((0, d))
        self.y = np.empty(0)
        self.keys = np.empty(0)
        self.theta = np.zeros(int(np.prod(shape)))
        self.lo = np.empty(0)
        self.mean_gap = np.nan
        self.total_weight = 0.0
        self.total_loss = 0.0

    def update(self, X, y, c, learner_loss, refit: bool = True):
        """Absorb steps; return the estimated comparator loss after each step.

        Parameters
        ----------
        X : (n, M, b, d); y : (n, M, b); c : (n, M) network weights;
        learner_loss : (n, M) the learner's mini-batch loss f(x_{t,m}, ξ_{t,m}).
        refit : bool
            Refit x̂ on the reservoir after absorbing these steps.

        Returns
        -------
        ndarray (n,): Σ_{s≤t} Σ_m c f(x_{s,m}, ξ_{s,m}) minus the estimated regret,
        using the latest fit made *before* these steps (NaN before the first fit).
        """
        n, M, b, d = X.shape
        w = np.repeat((c / b)[..., None], b, axis=2).reshape(-1)
        lo = np.repeat(learner_loss[..., None], b, axis=2).reshape(-1)
        cum_w = self.total_weight + np.cumsum(c.sum(axis=1))
        cum_l = self.total_loss + np.cumsum(np.einsum("nm,nm->n", c, learner_loss))
        self.total_weight, self.total_loss = cum_w[-1], cum_l[-1]
        estimate = cum_l - cum_w * self.mean_gap
        keep = w > 0
        keys = self.rng.random(w.shape)[keep] ** (1.0 / w[keep])
        allk = np.concatenate([self.keys, keys])
        top = np.argsort(-allk, kind="stable")[: self.size]
        self.X = np.concatenate([self.X, X.reshape(-1, d)[keep]])[top]
        self.y = np.concatenate([self.y, y.reshape(-1)[keep]])[top]
        self.lo = np.concatenate([self.lo, lo[keep]])[top]
        self.keys = allk[top]
        if refit and len(self.y):
            uw = np.full(len(self.y), 1.0 / len(self.y))
            self.theta, mean_comp = solve_hindsight(
                self.task, lambda: [(self.X, self.y, uw)], self.shape, self.radius, x0=self.theta)
            self.mean_gap = float(np.mean(self.lo)) - mean_comp
        return estimate


def refit_points(t0: int, n: int, every: int = 256) -> list[int]:
    """Offsets (1..n) inside steps t0+1..t0+n after which the reservoir is refitted.

    Refits happen at steps 16, 32, 64, 128 and then every ``every`` steps, on
    absolute step numbers, so the live estimate does not depend on chunking.

    >>> refit_points(0, 300)
    [16, 32, 64, 128, 256, 300]
    >>> refit_points(300, 300)
    [212, 300]
    """
    marks = [t for t in (16, 32, 64, 128) if t0 < t <= t0 + n]
    first = max(every, (t0 // every + 1) * every)
    marks += list(range(first, t0 + n + 1, every))
    points = sorted(m - t0 for m in set(marks))
    if not points or points[-1] != n:
        points.append(n)             # close the segment; refit only at real marks
    return points
