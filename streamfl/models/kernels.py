"""Test-then-train steps for scalar-output linear models: vectorised (the clients) and compiled (one model).

:func:`sgd_step` runs a whole step of FedSEA's local update (Algorithm 1,
the clients' online SGD) for every client at once: for each client m the
mini-batch loss of the current model, then x_{t+1/2,m} = x_{t,m} − η_t ∇f.
It is a handful of numpy operations over all M clients (about 20 µs per
step at M = 64, d = 100, b = 1): as fast as a compiled loop at these sizes,
without loading a compiler (numba's import and cache loading cost ~0.7 s of
every run's start-up, more than the loop itself over 30,000 steps).
The results equal :mod:`streamfl.models.losses` to rounding (tests/test_kernels.py).

:func:`sequential_sgd` — the centralized baseline's sample-by-sample loop,
sequential by nature — stays compiled (numba, imported at its first call).

Losses: ``LEAST_SQUARES`` ½(a·x − y)², ``LOGISTIC`` log(1 + e^z) − y z,
``SOFTMAX`` logsumexp(z) − z_y (the centralized baseline's kernel only).
"""

from __future__ import annotations

import math

import numpy as np

LEAST_SQUARES, LOGISTIC, SOFTMAX = 0, 1, 2


def sgd_step(W, X, y, mask, eta, kind, out):
    """Test-then-train for all clients, in place.

    Parameters
    ----------
    W : float64 (M, d, 1) — client models, updated in place.
    X : float64 (M, b, d); y : float64 (M, b)
    mask : bool (M,) or None — clients without a sample this step are skipped (None: all present).
    eta : float — η_t.
    kind : int — ``LEAST_SQUARES`` or ``LOGISTIC``.
    out : float64 (M,) — receives each client's mini-batch mean loss (0 if masked).

    The logistic loss is logaddexp(0, z) − y z and its residual σ(z) − y
    takes σ from scipy's expit (no overflow at any z).

    Examples
    --------
    >>> W = np.zeros((2, 1, 1)); out = np.empty(2)
    >>> sgd_step(W, np.ones((2, 1, 1)), np.array([[2.0], [4.0]]), None, 0.5, LEAST_SQUARES, out)
    >>> out.tolist(), W[:, 0, 0].tolist()
    ([2.0, 8.0], [1.0, 2.0])
    """
    if mask is not None and not mask.all():
        idx = np.flatnonzero(mask)
        out[:] = 0.0
        if idx.size:
            Wi = W[idx]
            out[idx] = _step(Wi[:, :, 0], X[idx], y[idx], eta, kind)
            W[idx] = Wi
        return
    out[:] = _step(W[:, :, 0], X, y, eta, kind)


def _step(w, X, y, eta, kind):
    """One step on the (m, d) view ``w`` of the present clients' models (updated in place); returns the losses."""
    b = X.shape[1]
    if b == 1:
        x = X[:, 0, :]
        z = np.vecdot(x, w)
        y = y[:, 0]
    else:
        z = np.vecdot(X, w[:, None, :])
    if kind == LEAST_SQUARES:
        r = z - y
        loss = 0.5 * r * r
    else:
        loss = np.logaddexp(0.0, z) - y * z                 # log(1 + e^z) − y z, stable at any z
        r = _expit()(z) - y                                  # σ(z) − y
    if b == 1:
        w -= (eta * r)[:, None] * x
        return loss
    w -= (eta / b) * np.einsum("mb,mbd->md", r, X)
    return loss.sum(axis=1) / b


_EXPIT = []


def _expit():
    """scipy.special.expit (σ(z) = 1/(1 + e^{−z}), without overflow), imported at the first logistic step."""
    if not _EXPIT:
        from scipy.special import expit
        _EXPIT.append(expit)
    return _EXPIT[0]


_SEQUENTIAL = []   # the compiled sequential_sgd, made (loaded from numba's cache) at its first call


def sequential_sgd(w, X, y, mask, eta, kind, radius, out):
    """:func:`_sequential_sgd` compiled by numba (imported here, at the first call: only the centralized
    baseline needs it)."""
    if not _SEQUENTIAL:
        from numba import njit
        _SEQUENTIAL.append(njit(cache=True, fastmath={"reassoc", "contract", "nsz", "arcp"})(_sequential_sgd))
    return _SEQUENTIAL[0](w, X, y, mask, eta, kind, radius, out)


def _sequential_sgd(w, X, y, mask, eta, kind, radius, out):
    """Test-then-train one model on the pooled samples of a step, one after another, in place.

    The centralized baseline's step (see :class:`streamfl.runtime.learners.Centralized`):
    for client m = 0..M−1 (skipping masked ones) and sample j = 0..b−1, in that
    order, record f(w, ξ_{m,j}) and then take w ← Π_D(w − η ∇f(w, ξ_{m,j})).
    Sequential by nature (each sample sees the model the previous one left),
    so the loop is compiled rather than vectorised.

    Parameters
    ----------
    w : float64 (d, K) — the single model, updated in place (K = 1 unless softmax).
    X : float64 (M, b, d); y : float64 (M, b) (class indices 0..K−1 for softmax).
    mask : bool (M,) — clients without a sample this step are skipped.
    eta : float — the per-sample step, η_t / (present clients · b).
    kind : int — ``LEAST_SQUARES``, ``LOGISTIC`` or ``SOFTMAX``.
    radius : float — D of the L2 ball (over all d·K entries); ``inf`` for none.
    out : float64 (M,) — receives each client's mean loss over its b samples (0 if masked).

    Losses: ½(a·w − y)², log(1 + e^z) − y z, logsumexp(z) − z_y (natural log),
    the formulas of :mod:`streamfl.models.losses`.
    """
    M, b, d = X.shape
    K = w.shape[1]
    z = np.empty(K)
    r = np.empty(K)
    for m in range(M):
        out[m] = 0.0
        if not mask[m]:
            continue
        total = 0.0
        for j in range(b):
            for c in range(K):
                s = 0.0
                for k in range(d):
                    s += X[m, j, k] * w[k, c]
                z[c] = s
            if kind == LEAST_SQUARES:
                r[0] = z[0] - y[m, j]
                total += 0.5 * r[0] * r[0]
            elif kind == LOGISTIC:
                if z[0] >= 0:
                    e = math.exp(-z[0])
                    total += z[0] + math.log1p(e) - y[m, j] * z[0]
                    r[0] = 1.0 / (1.0 + e) - y[m, j]
                else:
                    e = math.exp(z[0])
                    total += math.log1p(e) - y[m, j] * z[0]
                    r[0] = e / (1.0 + e) - y[m, j]
            else:
                label = int(y[m, j])
                top = z[0]
                for c in range(1, K):
                    if z[c] > top:
                        top = z[c]
                norm = 0.0
                for c in range(K):
                    r[c] = math.exp(z[c] - top)
                    norm += r[c]
                total += top + math.log(norm) - z[label]
                for c in range(K):
                    r[c] = r[c] / norm
                r[label] -= 1.0
            for k in range(d):
                for c in range(K):
                    w[k, c] -= eta * r[c] * X[m, j, k]
            if radius < math.inf:
                sq = 0.0
                for k in range(d):
                    for c in range(K):
                        sq += w[k, c] * w[k, c]
                scale = min(1.0, radius / max(math.sqrt(sq), 1e-300))
                for k in range(d):
                    for c in range(K):
                        w[k, c] *= scale
        out[m] = total / b
