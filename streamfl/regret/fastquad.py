"""Fast evaluation of the logistic population's softplus mean A(τ) and of κ(τ) for the tracker.

The population (:class:`streamfl.generators.population.LogisticPopulation`)
computes F(x) = A(s‖x‖) − s² (x·w) κ(s‖w‖) with A(τ) = E softplus(τZ),
κ(τ) = E sigmoid'(τZ), Z ~ N(0, 1), each by a 315-node quadrature. The
tracker needs A at every played model of every step (n·M distinct values per
chunk), which made the quadrature most of a run's time. Here:

* :func:`softplus_mean` interpolates G(τ) = A(τ) − τ/√(2π) (the quadrature's
  own radial part) by *quintic Hermite* interpolation on a grid of step
  h = 1/128 over [0, 64], from the exact values G, G' = τκ(τ) − 1/√(2π) and
  G'' = μ₂(τ) (Stein's lemma: A' = τκ, A'' = μ₂) computed once by the same
  quadrature. The interpolation error is below h⁶ max|G⁽⁶⁾| / 46080 ≈ 1e-17
  (measured against the quadrature: < 3e-16 absolute on 10⁶ random τ, see
  ``tests/test_tracker_refresh.py``); τ > 64 falls back to the quadrature;
* :func:`kappa_unique` evaluates κ once per distinct τ (optima under a
  rotation or abrupt drift keep their norms, so a chunk has few distinct
  values) — bit-identical to the population's κ.

Cost: the grid (8,193 τ, three quadratures each) is computed once per
process, segment by segment as the run's τ reach them (about 0.1 s for all
of it, a few ms for the few segments a run usually needs); then O(1) per
evaluated point.
"""

from __future__ import annotations

import numpy as np

from ..generators.population import _SQRT_2PI, _kappa, _kappa_mu2, _softplus_mean

_H = 1.0 / 128.0
_TMAX = 64.0
_SEG = 64                                   # grid nodes per segment, computed when first needed
_NODES = int(round(_TMAX / _H)) + 1         # 8,193 nodes τ = 0, h, …, 64
_GRID = None


def _grid(index: np.ndarray | None = None):
    """(G, G', G'') on the grid τ_j = j h, the segments holding the nodes ``index`` (and the next node)
    computed if they were not yet (all of them when ``index`` is None).

    A segment is computed once per process, by the same quadrature whatever
    else is computed with it, so a node's value never depends on which τ a
    run happened to need first. A run whose models keep s‖x‖ ≤ 3 computes 6
    of the 129 segments.
    """
    global _GRID
    if _GRID is None:
        _GRID = (np.zeros(_NODES), np.zeros(_NODES), np.zeros(_NODES), np.zeros((_NODES + _SEG - 1) // _SEG, bool))
    g, g1, g2, done = _GRID
    need = np.zeros(len(done), bool)
    if index is None:
        need[:] = True
    else:
        need[index // _SEG] = True
        need[np.minimum(index + 1, _NODES - 1) // _SEG] = True
    todo = np.flatnonzero(need & ~done)
    if todo.size:
        j = (todo[:, None] * _SEG + np.arange(_SEG)).ravel()
        j = j[j < _NODES]
        tau = j * _H
        k, mu2 = _kappa_mu2(tau)
        g[j] = _softplus_mean(tau) - tau / _SQRT_2PI
        g1[j] = tau * k - 1.0 / _SQRT_2PI
        g2[j] = mu2
        done[todo] = True
    return g, g1, g2


def softplus_mean(tau: np.ndarray) -> np.ndarray:
    """A(τ) = E softplus(τZ) for τ ≥ 0 of any shape (nats; agrees with the quadrature to ~1e-16).

    Quintic Hermite interpolation of A(τ) − τ/√(2π) on [0, 64]; the
    quadrature beyond. Returns float64 of τ's shape.
    """
    tau = np.asarray(tau, dtype=np.float64)
    flat = tau.ravel()
    inside = flat < _TMAX
    x = flat[inside] / _H
    i = np.minimum(x.astype(np.int64), _NODES - 2)
    g, g1, g2 = _grid(i)
    t = x - i
    h = _H
    # quintic Hermite basis on [0, 1]
    t2 = t * t
    t3 = t2 * t
    t4 = t3 * t
    t5 = t4 * t
    h0 = 1 - 10 * t3 + 15 * t4 - 6 * t5
    h1 = t - 6 * t3 + 8 * t4 - 3 * t5
    h2 = 0.5 * (t2 - 3 * t3 + 3 * t4 - t5)
    h3 = 0.5 * (t3 - 2 * t4 + t5)
    h4 = -4 * t3 + 7 * t4 - 3 * t5
    h5 = 10 * t3 - 15 * t4 + 6 * t5
    val = (h0 * g[i] + h5 * g[i + 1] + h * (h1 * g1[i] + h4 * g1[i + 1])
           + h * h * (h2 * g2[i] + h3 * g2[i + 1]))
    out = np.empty_like(flat)
    out[inside] = val + flat[inside] / _SQRT_2PI
    if not inside.all():
        out[~inside] = _softplus_mean(flat[~inside])
    return out.reshape(tau.shape)


def kappa_unique(tau: np.ndarray) -> np.ndarray:
    """κ(τ) of the population, evaluated once per distinct τ (bit-identical; any shape)."""
    tau = np.asarray(tau, dtype=np.float64)
    u, inv = np.unique(tau.ravel(), return_inverse=True)
    return _kappa(u)[inv].reshape(tau.shape)
