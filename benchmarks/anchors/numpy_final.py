"""Expert numpy/scipy anchor, final static regret only: what a user writes instead of ``streamfl run``.

It draws the synthetic stream (``anchor_common.like_stream``: a ~ N(0, I_d), one
optimum of norm 2, ζ = 0, no drift), runs FedSEA vectorised over the M
clients (per step: the scores of every client's current model on its
mini-batch, which give the loss suffered *before* the update, then one SGD
step W ← W − (η/b) Σ_j f'(z_j) a_j; after every τ-th step every client takes
the mean model), and at the end solves the hindsight comparator exactly:

    regret = Σ_t (1/M) Σ_m mean_b f(x_{t,m}, ξ_{t,m,b}) − min_x Σ_t (1/M) Σ_m mean_b f(x, ξ_{t,m,b})

over all T·M·b samples: logistic f = log(1 + e^{a·x}) − y a·x by L-BFGS-B
with the analytic gradient (the samples are kept in memory, evaluated in
cache-sized blocks, warm start at the learners' mean model); least squares
f = ½(a·x − y)² in closed form from the sufficient statistics
A = Σ a aᵀ, v = Σ a y, e = Σ y² (nothing kept).

Prints one JSON line: ``regret_static``, ``cum_loss``, ``comparator_static``.

Usage::

    python benchmarks/anchors/numpy_final.py --task logistic --steps 4000 [--clients 64 --dim 100 --tau 10]
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from anchor_common import blocks_of, emit, like_stream, logistic_hindsight, logistic_loss, parse_args, quadratic_min  # noqa: E402


def learn(W: np.ndarray, X: np.ndarray, y: np.ndarray, task: str, eta: float, tau: int, t0: int) -> np.ndarray:
    """FedSEA over one chunk of steps t0+1..t0+n, test-then-train; W (M, d) is updated in place.

    X (n, M, b, d), y (n, M, b). Returns the scores z = a·x_{t,m} of the
    models played (before each update), (n, M, b). The loss derivative is
    f'(z) = σ(z) − y (logistic) or z − y (least squares).
    """
    if task == "logistic":
        from scipy.special import expit          # here: a least-squares run needs no scipy at all
    n, M, b, d = X.shape
    Z = np.empty((n, M, b))
    for i in range(n):
        z = np.einsum("mbd,md->mb", X[i], W, out=Z[i])
        r = expit(z) if task == "logistic" else z.copy()
        r -= y[i]
        r *= eta / b
        W -= np.einsum("mb,mbd->md", r, X[i])
        if (t0 + i + 1) % tau == 0:
            W[:] = W.mean(axis=0)
    return Z


def client_losses(task: str, Z: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Each client's mini-batch mean loss from its scores: (n, M, b) → (n, M)."""
    loss = logistic_loss(Z, y) if task == "logistic" else 0.5 * (Z - y) ** 2
    return loss.mean(axis=2)


def run(chunks, task: str, M: int, d: int, b: int, eta: float, tau: int) -> dict:
    """FedSEA over ``chunks`` ((X (n, M, b, d), y (n, M, b)) in step order) and its exact final static regret."""
    W = np.zeros((M, d))
    cum, t0 = 0.0, 0
    kept = []                                         # logistic: every sample, as (rows, labels) blocks
    A, v, e = np.zeros((d, d)), np.zeros(d), 0.0      # least squares: sufficient statistics
    for X, y in chunks:
        Z = learn(W, X, y, task, eta, tau, t0)
        cum += client_losses(task, Z, y).sum() / M
        Xf, yf = X.reshape(-1, d), y.reshape(-1)
        if task == "logistic":
            kept += blocks_of(Xf, yf)
        else:
            A += Xf.T @ Xf
            v += Xf.T @ yf
            e += yf @ yf
        t0 += len(X)
    w = 1.0 / (M * b)                                 # network weight of a sample: 1/M per client, mean over b
    if task == "logistic":
        _, comp = logistic_hindsight(kept, d, w, x0=W.mean(axis=0))
    else:
        comp, _ = quadratic_min(w * A, w * v, w * e, t0 * M * b >= d)
        comp = float(comp)
    return {"anchor": "numpy_final", "task": task, "T": t0, "M": M, "d": d,
            "cum_loss": cum, "comparator_static": comp, "regret_static": cum - comp}


def main(argv=None) -> None:
    a = parse_args(__doc__.splitlines()[0], argv)
    chunks = like_stream(a.task, a.steps, a.clients, a.dim, a.batch, a.seed)
    emit(run(chunks, a.task, a.clients, a.dim, a.batch, a.eta, a.tau))


if __name__ == "__main__":
    main()
