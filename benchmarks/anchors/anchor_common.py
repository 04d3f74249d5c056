"""What the expert anchors share: the stream they draw, the exact comparators, the command line.

The anchors (``numpy_final.py``, ``numpy_figures.py``, ``torch_final.py``,
``river_final.py``) are the scripts a user would write instead of
``streamfl run`` for one experiment: a stationary synthetic linear-model
stream (ζ = 0, no drift, stochastic adversary), M clients running FedSEA
(local SGD with constant step size η, test-then-train, every τ steps all
client models replaced by their mean), and the static regret against the
best fixed model in hindsight, solved exactly at the end.

This module imports numpy only; scipy is imported by the functions that use
it, so an anchor pays for what it calls.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

ETA = {"logistic": 0.05, "least_squares": 0.005}     # the benchmark's step sizes (η·d = 5 and 0.5)
LBFGS = {"maxiter": 2000, "gtol": 1e-10, "ftol": 1e-15}   # "exact": stop at the rounding of the objective
CHUNK_BYTES = 16 << 20                                # features drawn at a time ...
CHUNK_STEPS = 64                                      # ... but at least this many steps (per-client Gram products
                                                      # of fewer rows ran at half the speed at M = 2,048)
BLOCK_ROWS = 4096                                     # rows per objective block: 3.3 MB at d = 100 (cache)


def like_stream(task: str, T: int, M: int, d: int, b: int = 1, seed: int = 0, radius: float = 2.0,
                noise: float = 1.0, chunk: int | None = None):
    """The synthetic stream, chunk by chunk: (X (n, M, b, d), y (n, M, b)) for n ≤ ``chunk`` steps.

    Features a ~ N(0, I_d); one optimum x* of norm ``radius`` for every client
    and step (no heterogeneity, no drift); labels y ~ Bernoulli(σ(a·x*))
    (logistic) or y = a·x* + ``noise``·ε, ε ~ N(0, 1) (least squares).
    Three independent generators from ``SeedSequence(seed)`` (optimum,
    features, labels), so these are also the very draws of streamfl's
    synthetic source with ``heterogeneity: 0``, ``drift: []`` (its defaults
    ``radius: 2``, ``noise: 1``); least-squares labels equal streamfl's to
    rounding (the order of the sum a·x*). The draws do not depend on ``chunk``.

    chunk : steps per chunk; default ``CHUNK_BYTES`` of features, at least
        ``CHUNK_STEPS`` steps (327 steps at M = 64, d = 100; 64 at M = 2,048).
    """
    chunk = chunk or max(CHUNK_STEPS, CHUNK_BYTES // (M * b * d * 8))
    init, rng_x, rng_y = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(3))
    opt = init.standard_normal(d)
    opt *= radius / np.linalg.norm(opt)
    for t0 in range(0, T, chunk):
        n = min(chunk, T - t0)
        X = rng_x.standard_normal((n, M, b, d))
        z = X @ opt
        if task == "logistic":
            from scipy.special import expit
            y = (rng_y.random((n, M, b)) < expit(z)).astype(np.float64)
        else:
            y = z + noise * rng_y.standard_normal((n, M, b))
        yield X, y


def checkpoints(T: int) -> np.ndarray:
    """streamfl's checkpoint grid: 16 geometric steps up to T (``RegretTracker``), unique, ending at T."""
    return np.unique(np.geomspace(max(1, T / 2**15), T, 16).astype(int))


def logistic_loss(z: np.ndarray, y: np.ndarray) -> np.ndarray:
    """log(1 + e^z) − y z, elementwise (no overflow)."""
    return np.logaddexp(0.0, z) - y * z


def blocks_of(X: np.ndarray, y: np.ndarray, rows: int = BLOCK_ROWS) -> list:
    """(X (N, d), y (N,)) as views of ``rows`` rows each (objective passes that stay in cache)."""
    return [(X[i:i + rows], y[i:i + rows]) for i in range(0, len(y), rows)]


def logistic_hindsight(blocks: list, d: int, weight: float = 1.0, x0: np.ndarray | None = None):
    """min_x weight · Σ_i (log(1 + e^{a_i·x}) − y_i a_i·x) over the rows of ``blocks``, by L-BFGS-B.

    blocks : list of (X (n, d), y (n,)); weight : the weight of every sample
    (1/(M b) for the network comparator, 1/b for one client); x0 : warm start
    (default 0). Exact analytic gradient weight · Σ_i (σ(a_i·x) − y_i) a_i.
    Stops (``LBFGS``, the tolerances of streamfl's end-of-run solve) at a
    largest gradient component of 1e-10 or when a step lowers f by less than
    1e-15 of |f|, i.e. at the rounding of f. Returns (x (d,), minimum).
    """
    from scipy.optimize import minimize
    from scipy.special import expit

    def fun(x):
        f, g = 0.0, np.zeros(d)
        for Xb, yb in blocks:
            z = Xb @ x
            f += np.sum(logistic_loss(z, yb))
            g += Xb.T @ (expit(z) - yb)
        return weight * f, weight * g

    res = minimize(fun, np.zeros(d) if x0 is None else x0, jac=True, method="L-BFGS-B", options=LBFGS)
    return res.x, float(res.fun)


def quadratic_min(A: np.ndarray, v: np.ndarray, e: np.ndarray, full_rank: bool = True):
    """min_x ½ xᵀAx − vᵀx + ½e for A (..., d, d) positive semi-definite, v (..., d), e (...), batched.

    The least-squares comparator from its sufficient statistics A = Σ w a aᵀ,
    v = Σ w a y, e = Σ w y² (f = ½(a·x − y)²). ``full_rank`` (A summed over
    at least d samples): x = A⁻¹v, one LAPACK solve per matrix. Otherwise
    (fewer samples than features: the samples can be interpolated) the
    minimum-norm minimiser in A's eigenbasis, eigenvalues below 1e-10 λ_max
    dropped. Minimum ½(e − vᵀx). Returns (minimum (...), x (..., d)).
    """
    if full_rank:
        x = np.linalg.solve(A, v[..., None])[..., 0]
    else:
        lam, Q = np.linalg.eigh(A)
        vt = np.einsum("...dk,...d->...k", Q, v)
        keep = lam > 1e-10 * lam[..., -1:]
        x = np.einsum("...dk,...k->...d", Q, np.where(keep, vt / np.where(keep, lam, 1.0), 0.0))
    return 0.5 * (e - np.sum(v * x, axis=-1)), x


def parse_args(description: str, argv=None) -> argparse.Namespace:
    """The anchors' common options (the benchmark's experiment by default)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--task", default="logistic", choices=["logistic", "least_squares"])
    p.add_argument("--steps", type=int, default=4000, help="T")
    p.add_argument("--clients", type=int, default=64, help="M")
    p.add_argument("--dim", type=int, default=100, help="d")
    p.add_argument("--batch", type=int, default=1, help="b, samples per client and step")
    p.add_argument("--tau", type=int, default=10, help="averaging period τ")
    p.add_argument("--eta", type=float, default=None, help="constant step size η (default 0.05 logistic, "
                                                            "0.005 least squares)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="folder for the per-step metrics file (anchors that write one)")
    a = p.parse_args(argv)
    a.eta = ETA[a.task] if a.eta is None else a.eta
    return a


def emit(figures: dict) -> None:
    """Print the anchor's figures as one JSON line (the last line of its output)."""
    sys.stdout.write(json.dumps(figures) + "\n")
