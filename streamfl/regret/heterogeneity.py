"""Live estimates of the quantities in FedSEA's regret bounds.

FedSEA (§2 "Spatial and Temporal Heterogeneity", §3.1, eq. (8) and Theorem 1)
bounds the regret with, at step t and point x,

* gradient noise   σ_t² = (1/M) Σ_m E‖∇f(x, ξ) − ∇F_{t,m}(x)‖²,
* spatial          ζ_t² = (1/M) Σ_m ‖∇F_{t,m}(x) − ∇F_t(x)‖²,
* temporal         K_t² = ‖∇F_t(x) − ∇F_{t−1}(x)‖²,

with F_t = (1/M) Σ_m F_{t,m}. Parallelisation helps when σ̄²/M ≥ L·K̄²
(the discussion after Theorem 1).

We evaluate them at the played points: σ_t² at each client's model x_{t,m},
ζ_t² and K_t² at the virtual average x̄_t = (1/M) Σ_m x_{t,m}. σ_t² is the
noise of the mini-batch gradient the clients use (per-sample noise / b).

Two estimators:

* :func:`population_estimates` — exact, from the generator's population model
  (closed form for least squares, quadrature for logistic).
* :func:`empirical_estimates` — for real data, from stochastic gradients at
  x̄_t: σ̂² is the within-mini-batch sample variance / b (needs b ≥ 2,
  else NaN); ζ̂² is the spread of the client gradients minus its noise part
  (1 − 1/M)·σ̂² (when σ̂² is unknown the raw spread is reported, an upper
  estimate); K̂² is ‖ḡ_t(x̄_t) − ḡ_{t−1}(x̄_t)‖² minus its noise part 2σ̂²/M.
  Negative values after the correction are clipped to 0.
"""

from __future__ import annotations

import numpy as np

from ..models.losses import get_loss


def population_estimates(population, models, average, optima, previous_optima, batch_size, steps=None,
                         noise_every=1):
    """Exact σ_t², ζ_t², K_t² for a chunk of synthetic steps.

    Parameters
    ----------
    population : LeastSquaresPopulation or LogisticPopulation
    models : ndarray (n, M, d) — x_{t,m}
    average : ndarray (n, d) — x̄_t
    optima : ndarray (n, M, d) — x*_{t,m}
    previous_optima : ndarray (M, d) or None — x*_{t0−1,m}; None at t = 1.
    batch_size : int — b.
    steps : ndarray (n,) of int or None — the steps t of the chunk.
    noise_every : int
        Evaluate σ_t² only where t is a multiple of this (NaN elsewhere; the
        running mean σ̄² is over the evaluated steps). The logistic noise needs
        a 2-D quadrature per (x, x*) pair, so the tracker uses every M-th step.

    Returns
    -------
    sigma2, zeta2, K2 : ndarray (n,) each (K2 is NaN at the very first step).
    """
    n = optima.shape[0]
    rows = np.arange(n) if steps is None or noise_every == 1 else np.flatnonzero(steps % noise_every == 0)
    sigma2 = np.full(n, np.nan)
    if len(rows):
        sigma2[rows] = population.grad_noise(models[rows], optima[rows]).mean(axis=1) / batch_size
    g = population.grad(average[:, None, :], optima)
    gbar = g.mean(axis=1)
    zeta2 = np.sum((g - gbar[:, None, :]) ** 2, axis=-1).mean(axis=1)
    if previous_optima is None:
        prev = np.concatenate([optima[:1], optima[:-1]])
    else:
        prev = np.concatenate([previous_optima[None], optima[:-1]])
    gprev = population.grad(average[:, None, :], prev).mean(axis=1)
    K2 = np.sum((gbar - gprev) ** 2, axis=-1)
    if previous_optima is None:
        K2[0] = np.nan
    return sigma2, zeta2, K2


def _client_gradients(task, average, X, y):
    """Mini-batch gradient per client at x̄_t, and within-batch variance.

    average (n, d, K); X (n, M, b, d); y (n, M, b) → g (n, M, d*K), s2 (n, M)."""
    n, M, b, d = X.shape
    K = average.shape[-1]
    loss_fn = get_loss(task)
    W = np.broadcast_to(average[:, None, None], (n, M, b, d, K)).reshape(-1, d, K)
    _, g = loss_fn(W, X.reshape(-1, 1, d), y.reshape(-1, 1))
    g = g.reshape(n, M, b, d * K)
    gm = g.mean(axis=2)
    if b >= 2:
        s2 = np.sum((g - gm[:, :, None]) ** 2, axis=(2, 3)) / (b - 1) / b
    else:
        s2 = np.full((n, M), np.nan)
    return gm, s2


def empirical_estimates(task, average, X, y, c, previous):
    """Stochastic-gradient estimates of σ_t², ζ_t², K_t² (see module docstring).

    Parameters
    ----------
    task : str
    average : ndarray (n, d, K) — x̄_t
    X : (n, M, b, d); y : (n, M, b); c : (n, M) client weights
    previous : tuple (X (M, b, d), y (M, b), c (M,)) of step t0−1, or None.

    Returns
    -------
    sigma2, zeta2, K2 : ndarray (n,)
    """
    g, s2 = _client_gradients(task, average, X, y)
    M = X.shape[1]
    gbar = np.einsum("nm,nmp->np", c, g)
    sigma2 = np.einsum("nm,nm->n", c, s2) if X.shape[2] >= 2 else np.full(len(c), np.nan)
    spread = np.einsum("nm,nm->n", c, np.sum((g - gbar[:, None]) ** 2, axis=-1))
    zeta2 = np.where(np.isfinite(sigma2), np.maximum(spread - (1 - 1 / M) * np.nan_to_num(sigma2), 0.0), spread)
    if previous is None:
        Xp = np.concatenate([X[:1], X[:-1]]); yp = np.concatenate([y[:1], y[:-1]]); cp = np.concatenate([c[:1], c[:-1]])
    else:
        Xp = np.concatenate([previous[0][None], X[:-1]]); yp = np.concatenate([previous[1][None], y[:-1]])
        cp = np.concatenate([previous[2][None], c[:-1]])
    gp, s2p = _client_gradients(task, average, Xp, yp)
    gpbar = np.einsum("nm,nmp->np", cp, gp)
    raw = np.sum((gbar - gpbar) ** 2, axis=-1)
    sigma2p = np.einsum("nm,nm->n", cp, s2p) if X.shape[2] >= 2 else np.full(len(c), np.nan)
    K2 = np.where(np.isfinite(sigma2), np.maximum(raw - (np.nan_to_num(sigma2) + np.nan_to_num(sigma2p)) / M, 0.0), raw)
    if previous is None:
        K2[0] = np.nan
    return sigma2, zeta2, K2
