"""Compiled test-then-train kernels for scalar-output linear models.

One call runs a whole step of FedSEA's local update (Algorithm 1, the
clients' online SGD) for every client: for each client m it computes the
mini-batch loss of the current model, then x_{t+1/2,m} = x_{t,m} − η_t ∇f.
The loops over clients, samples and features are compiled by numba, so a
step costs a few microseconds instead of a dozen numpy calls; the results
equal :mod:`streamfl.models.losses` to rounding (see tests/test_kernels.py).

Losses: ``LEAST_SQUARES`` ½(a·x − y)², ``LOGISTIC`` log(1 + e^z) − y z.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

LEAST_SQUARES, LOGISTIC = 0, 1


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
