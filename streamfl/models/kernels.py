"""Compiled test-then-train kernels for scalar-output linear models.

One call runs a whole step of FedSEA's local update (Algorithm 1, the
clients' online SGD) for every client: for each client m it computes the
mini-batch loss of the current model, then x_{t+1/2,m} = x_{t,m} − η_t ∇f.
The loops over clients, samples and features are compiled by numba, so a
step costs a few microseconds instead of a dozen numpy calls; the results
equal :mod:`streamfl.models.losses` to rounding (see tests/test_kernels.py).

Losses: ``LEAST_SQUARES`` ½(a·x − y)², ``LOGISTIC`` log(1 + e^z) − y z,
``SOFTMAX`` logsumexp(z) − z_y (the centralized baseline's kernel only).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

LEAST_SQUARES, LOGISTIC, SOFTMAX = 0, 1, 2


@njit(cache=True, fastmath={"reassoc", "contract", "nsz", "arcp"})
def sgd_step(W, X, y, mask, eta, kind, out):
    """Test-then-train for all clients, in place.

    Parameters
    ----------
    W : float64 (M, d, 1) — client models, updated in place.
    X : float64 (M, b, d); y : float64 (M, b)
    mask : bool (M,) — clients without a sample this step are skipped.
    eta : float — η_t.
    kind : int — ``LEAST_SQUARES`` or ``LOGISTIC``.
    out : float64 (M,) — receives each client's mini-batch mean loss (0 if masked).
    """
    M, b, d = X.shape
    g = np.empty(d)
    for m in range(M):
        if not mask[m]:
            out[m] = 0.0
            continue
        for k in range(d):
            g[k] = 0.0
        total = 0.0
        for j in range(b):
            z = 0.0
            for k in range(d):
                z += X[m, j, k] * W[m, k, 0]
            if kind == LEAST_SQUARES:
                r = z - y[m, j]
                total += 0.5 * r * r
            else:
                # log(1 + e^z) − y z, stably; r = sigmoid(z) − y
                if z >= 0:
                    e = math.exp(-z)
                    total += z + math.log1p(e) - y[m, j] * z
                    r = 1.0 / (1.0 + e) - y[m, j]
                else:
                    e = math.exp(z)
                    total += math.log1p(e) - y[m, j] * z
                    r = e / (1.0 + e) - y[m, j]
            if b == 1:  # one sample: update in the same pass
                step = eta * r
                for k in range(d):
                    W[m, k, 0] -= step * X[m, 0, k]
            else:
                for k in range(d):
                    g[k] += r * X[m, j, k]
        out[m] = total / b
        if b > 1:
            step = eta / b
            for k in range(d):
                W[m, k, 0] -= step * g[k]


@njit(cache=True, fastmath={"reassoc", "contract", "nsz", "arcp"})
def sequential_sgd(w, X, y, mask, eta, kind, radius, out):
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
