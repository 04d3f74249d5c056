"""Population quantities of the synthetic SEA generator, in closed form.

FedSEA ("Federated Learning in SEA environment") measures a learner against
the *population* losses F_{t,m}(x) = E_{ξ ~ D_{t,m}} f(x, ξ) of the
Stochastically Extended Adversary: the expected regret of eq. (3) sums
F_t(x_t) − F_t(x*) with F_t = Σ_m c_{t,m} F_{t,m}, the dynamic regret compares
with the per-step optimum u_t = argmin F_t, and the heterogeneity constants
of the analysis (σ², ζ², K²) are built from ∇F_{t,m} and from the per-sample
gradient noise E‖∇f(x, ξ) − ∇F(x)‖² of eq. (8). This module computes these
quantities exactly for the synthetic stream of
:mod:`streamfl.generators.synthetic`.

Data model
----------
Features a ~ N(0, s² I_d) (``feature_scale`` s > 0). Client m at step t has
the Bayes-optimal model w = x*_{t,m} ∈ R^d.

* :class:`LeastSquaresPopulation`: y = a·w + σ ε, ε ~ N(0, 1),
  f(x, ξ) = ½ (a·x − y)². Everything is a quadratic in x − w:
  F(x) = ½ s² ‖x − w‖² + ½ σ², ∇F = s² (x − w), ∇²F = s² I and
  E‖∇f − ∇F‖² = s⁴ (d + 1) ‖x − w‖² + σ² s² d
  (from E[‖a‖² (a·δ)²] = s⁴ (d + 2) ‖δ‖² for Gaussian a).
* :class:`LogisticPopulation`: P(y = 1 | a) = sigmoid(a·w),
  f(x, ξ) = softplus(a·x) − y a·x. With (u, v) = (a·x, a·w), jointly
  Gaussian with covariance s² [[x·x, x·w], [x·w, w·w]], and writing
  a = B (u, v)ᵀ + r with r independent of (u, v), Gaussian integration by
  parts (Stein's lemma, E[u h(v)] = Cov(u, v) E[h'(v)] and
  E[h(a·x) a] = s² x E[h'(a·x)]) collapses F, ∇F and ∇²F to *one*-dimensional
  Gaussian expectations of the scalar τ = s‖x‖ (or s‖w‖)::

      F(x)   = A(s‖x‖) − s² (x·w) κ(s‖w‖)
      ∇F(x)  = s² (κ(s‖x‖) x − κ(s‖w‖) w)
      ∇²F(x) = s² κ(s‖x‖) (I − x̂x̂ᵀ) + s² μ₂(s‖x‖) x̂x̂ᵀ,   x̂ = x/‖x‖

  with A(τ) = E softplus(τZ), κ(τ) = E sigmoid'(τZ) and
  μ₂(τ) = E[Z² sigmoid'(τZ)], Z ~ N(0, 1) (the Hessian is
  E[sigmoid'(u) a aᵀ] with a = α x̂ + r, α = a·x̂). The gradient noise needs
  one genuinely two-dimensional expectation,
  E‖∇f‖² = s² (E[g(u, v) ρ²] + (d − 2) E[g(u, v)]), where
  g = (sigmoid(u) − sigmoid(v))² + sigmoid'(v) and ρ² = α² + β² is the
  squared norm of the standard-normal coordinates (α, β) of a/s in
  span(x, w) (when x ∥ w the unused coordinate is borrowed from the
  orthogonal complement, which leaves the formula valid for every d ≥ 1).

Quadrature
----------
Gauss–Hermite rules lose accuracy fast once s‖x‖ ≳ 2 (the sigmoid's poles at
±iπ get close to the real axis in the standard-normal variable: 64 nodes give
a relative error of ~2e-3 on κ at s‖x‖ = 5 and ~1e-1 at 10). This module
therefore uses scale-invariant trapezoidal rules in logarithmic variables,
which converge geometrically *uniformly* in s‖x‖:

* 1-D: E[h(τZ)] = ∫_0^∞ (h(τz) + h(−τz)) φ(z) dz with z = e^t,
  t ∈ [−37, log 10], step 1/8: 315 nodes; relative error ≲ 1e-14 for
  τ ∈ [0, 100] and ≲ 1e-12 up to τ = 1e4 (checked against 40-digit mpmath).
* 2-D: polar coordinates (α, β) = ρ (cos θ, sin θ); radius ρ = e^t,
  t ∈ [−9, log 9.5], step 0.15 (76 nodes; the constant part of the integrand
  is integrated exactly, so the region ρ < e^{-9} is negligible); the angle is
  split at the two lines u = 0 and v = 0 and each arc gets a tanh-sinh rule
  (step 0.1, 61 nodes per arc): 76 × 122 = 9 272 nodes, relative error
  ≲ 1e-11 for s‖x‖, s‖w‖ ≤ 30 (≲ 1e-9 at 100). The angle between x and w
  is computed with Kahan's formula, so x ∥ w, x = 0 and w = 0 need no
  special casing.

The sums are vectorised numpy over blocks of points (pairwise sums per
point, so a point's value does not depend on the points evaluated with it).
Below an argument of 1e-2 the 1-D integrands are evaluated by their Taylor
series (truncation < 1e-19 relative) instead of through e^{−u}.

Minimisers
----------
Because the features are isotropic, (1/M) Σ_m F(x, w_m) = A(s‖x‖) − s² x·b
with b = (1/M) Σ_m κ(s‖w_m‖) w_m, so every minimiser is x = ρ b/‖b‖ where ρ
solves the scalar, monotone equation ρ κ(sρ) = ‖b‖ (and ρ ≤ max_m ‖w_m‖).
The logistic ``minimize_mean``/``minimize_sum`` solve that equation by
bracketed Newton, vectorised over steps; the L2-ball constraint is then
exact: ρ ← min(ρ, radius).

Examples
--------
>>> import numpy as np
>>> ls = LeastSquaresPopulation(2, feature_scale=2.0, noise=1.0)
>>> float(ls.loss(np.array([1.0, 0.0]), np.zeros(2)))
2.5
>>> lg = LogisticPopulation(3)
>>> round(float(lg.loss(np.zeros(3), np.zeros(3))), 12)   # log 2
0.69314718056
>>> lg.grad(np.ones(3), np.ones(3))
array([0., 0., 0.])
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterator

import numpy as np

__all__ = ["LeastSquaresPopulation", "LogisticPopulation", "DiracLeastSquares"]

_SQRT_2PI = np.sqrt(2.0 * np.pi)

# ----------------------------------------------------------------------------- quadrature rules
# 1-D: nodes z_k = e^{t_k} > 0, weights h z_k φ(z_k); for even h, E[h(τZ)] = 2 Σ_k W_k h(τ z_k).
_H1 = 0.125
_T1 = np.arange(-37.0, np.log(10.0) + 1e-12, _H1)
_Z1 = np.exp(_T1)
_W1 = _H1 * _Z1 * np.exp(-0.5 * _Z1 * _Z1) / _SQRT_2PI
_W1Z2 = _W1 * _Z1 * _Z1

# 2-D polar rule, radial part: ρ = e^t, weight h ρ² e^{-ρ²/2} (the density ρ e^{-ρ²/2} dρ, dρ = ρ dt).
# Nodes with ρ < e^{-9} are dropped: the constant part ¼ of g is integrated exactly and the
# rest, g − ¼ = O(s²‖x‖² ρ²), contributes O(s²‖x‖² e^{-36}) there.
_HR = 0.15
_R2 = np.exp(np.arange(-9.0, np.log(9.5) + 1e-12, _HR))
_WR2 = _HR * _R2 * _R2 * np.exp(-0.5 * _R2 * _R2)
_WR2R2 = _WR2 * _R2 * _R2
# Angular part: tanh-sinh on (0, 1); X01 = position, Y01 = 1 − X01 (computed without cancellation).
_HT = 0.1
_S = np.arange(-3.0, 3.0 + 1e-12, _HT)
_X01 = 1.0 / (1.0 + np.exp(-np.pi * np.sinh(_S)))
_Y01 = 1.0 / (1.0 + np.exp(np.pi * np.sinh(_S)))
_W01 = _HT * np.pi * np.cosh(_S) * _X01 * _Y01

_SIG1, _LOG1PEXP = 0, 1  # kernels of _radial_sum: sigmoid'(u), log(1 + e^{-u})
_SERIES = 1e-2           # below this argument the 1-D kernels use their Taylor series
_ROWS = 512              # points per block of the 1-D rule (a block's (rows, 315) arrays stay in cache)


def _h(u: np.ndarray, kernel: int) -> np.ndarray:
    """The 1-D integrand at u ≥ 0 (any shape): sigmoid'(u) = e^{-u} / (1 + e^{-u})² (``_SIG1``) or
    log(1 + e^{-u}) (``_LOG1PEXP``), without overflow.

    Below 1e-2 the Taylor series: ¼ − u²/16 + u⁴/96 − 17u⁶/11520 (truncation < 1e-19 relative) and
    log 2 − u/2 + u²/8 − u⁴/192 + u⁶/2880 (< 1e-20 relative).
    """
    e = np.exp(-u)
    if kernel == _SIG1:
        out = e / ((1.0 + e) * (1.0 + e))
    else:
        out = np.log1p(e)
    small = u < _SERIES
    if small.any():
        us = u[small]
        v = us * us
        out[small] = (0.25 - v * (1.0 / 16.0 - v * (1.0 / 96.0 - v * (17.0 / 11520.0))) if kernel == _SIG1 else
                      math.log(2.0) - 0.5 * us + v * (1.0 / 8.0 - v * (1.0 / 192.0 - v * (1.0 / 2880.0))))
    return out


def _radial_sum(tau, kernel, *weights):
    """Σ_k w_k h(τ z_k) for every τ ≥ 0 and each weight vector w (1-D rule, nodes z_k = _Z1; h is
    sigmoid'(u) for kernel ``_SIG1`` and log(1 + e^{-u}) for ``_LOG1PEXP``, see :func:`_h`).

    tau : float64 (n,); weights : float64 (315,) each (_W1 or _W1Z2). Returns one float64 (n,) per weight
    vector. Each τ's sum depends on that τ only (blocks of rows, a pairwise sum per row), so a value does
    not depend on which other points are evaluated with it.
    """
    outs = [np.empty(tau.size) for _ in weights]
    for i0 in range(0, tau.size, _ROWS):
        i1 = min(tau.size, i0 + _ROWS)
        H = _h(tau[i0:i1, None] * _Z1[None, :], kernel)
        for out, w in zip(outs, weights):
            out[i0:i1] = (H * w).sum(axis=1)
    return outs


_UNIQUE_FROM = 64   # from this many points, the quadrature runs once per distinct τ


def _radial(tau, kernel, *weights):
    """:func:`_radial_sum` for τ of any shape: one float64 array of τ's shape per weight vector.

    The quadrature (315 nodes per point) runs once per *distinct* τ: the
    tracker evaluates κ at every client optimum of every step, and optima
    that share a norm (a stationary stream, a rotation, abrupt drift between
    fixed points) share τ. Bit-identical to evaluating every point; the
    extra sort costs O(n log n), small against 315 kernel calls per point.
    """
    tau = np.asarray(tau, dtype=np.float64)
    flat = tau.ravel()
    if flat.size < _UNIQUE_FROM:
        return [v.reshape(tau.shape) for v in _radial_sum(flat, kernel, *weights)]
    if flat[0] == flat.min() == flat.max():       # one value (a stationary stream): no sort
        return [np.full(tau.shape, v[0]) for v in _radial_sum(flat[:1], kernel, *weights)]
    u, inv = np.unique(flat, return_inverse=True)
    inv = inv.reshape(-1)
    return [v[inv].reshape(tau.shape) for v in _radial_sum(u, kernel, *weights)]


def _kappa(tau: np.ndarray) -> np.ndarray:
    """κ(τ) = E sigmoid'(τZ), Z ~ N(0, 1), τ ≥ 0; κ(0) = 1/4, κ(τ) ~ 1/(τ√(2π))."""
    return 2.0 * _radial(tau, _SIG1, _W1)[0]


def _kappa_mu2(tau: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(κ(τ), μ₂(τ)) = (E σ'(τZ), E[Z² σ'(τZ)]), τ ≥ 0; both are 1/4 at τ = 0.

    μ₂ = κ + τ κ'(τ) is the curvature of F along x; computing it directly
    (rather than as κ + τ² E σ‴(τZ)) avoids a cancellation at large τ.
    """
    k, m = _radial(tau, _SIG1, _W1, _W1Z2)
    return 2.0 * k, 2.0 * m


def _softplus_mean(tau: np.ndarray) -> np.ndarray:
    """A(τ) = E softplus(τZ) = τ/√(2π) + E log1p(e^{−τ|Z|}), τ ≥ 0; A(0) = log 2."""
    tau = np.asarray(tau, dtype=np.float64)
    return tau / _SQRT_2PI + 2.0 * _radial(tau, _LOG1PEXP, _W1)[0]


BLOCK_BYTES = 1 << 19     # per block of rows in (n, M, d) computations: 0.5 MB, so temporaries stay in cache


def row_blocks(n: int, row_bytes: int) -> list[tuple[int, int]]:
    """(start, stop) of consecutive blocks of the n rows (steps) of an array whose rows hold ``row_bytes``.

    Computations over (n, M, d) arrays that are elementwise, or reduce over M or d only, give the same
    numbers block by block; blocks of about :data:`BLOCK_BYTES` keep their temporaries in cache instead
    of writing and reading an n·M·d array per operation.

    >>> row_blocks(10, 1 << 18)
    [(0, 2), (2, 4), (4, 6), (6, 8), (8, 10)]
    """
    step = max(1, BLOCK_BYTES // max(1, int(row_bytes)))
    return [(i, min(n, i + step)) for i in range(0, n, step)]


def _norm(x: np.ndarray) -> np.ndarray:
    return np.sqrt(np.einsum("...i,...i->...", x, x))


def _unit(x: np.ndarray, n: np.ndarray) -> np.ndarray:
    """x/‖x‖, and 0 where x = 0."""
    nn = n[..., None]
    return np.divide(x, nn, out=np.zeros_like(x), where=nn > 0)


def _angle(x: np.ndarray, w: np.ndarray, nx: np.ndarray, nw: np.ndarray) -> np.ndarray:
    """Angle between x and w in [0, π] (Kahan's formula, accurate near 0 and π); 0 if either is 0."""
    xh, wh = _unit(x, nx), _unit(w, nw)
    phi = 2.0 * np.arctan2(_norm(xh - wh), _norm(xh + wh))
    return np.where((nx > 0) & (nw > 0), phi, 0.0)


_POINTS = 16              # points per block of the 2-D rule ((points, 2, 61, 76) arrays of 1.2 MB)


def _polar_g_moments(tx, tw, phi):
    """E[g] and E[g ρ²] for g = (σ(u) − σ(v))² + σ'(v), u = tx α, v = tw (cos φ α + sin φ β).

    tx, tw, phi are 1-D float64 arrays of equal length; (α, β) ~ N(0, I_2), ρ² = α² + β².
    With t = tanh(·/2), g = ¼ (1 + t_u (t_u − 2 t_v)); the constant ¼ is
    integrated exactly (E 1 = 1, E ρ² = 2), the rest by the polar rule.
    g is even in (α, β), so the half-plane θ ∈ [−π/2, π/2) with ρ > 0
    suffices; the angle is split at θ = ±π/2 (u = 0) and θ = φ − π/2 (v = 0):
    arc 1 is θ = −π/2 + φ X01 (weight φ W01/π), arc 2 θ = π/2 − (π − φ) Y01
    (weight (π − φ) W01/π). Along a ray at angle θ, f_k = t_u (t_u − 2 t_v)
    with t_u = tanh(½ tx cos θ ρ_k), t_v = tanh(½ tw cos(θ − φ) ρ_k).
    Vectorised over points, rays and radii; every point's sums depend on that
    point only. Returns two float64 arrays of the input length.
    """
    n = tx.size
    eg, egr = np.empty(n), np.empty(n)
    for i0 in range(0, n, _POINTS):
        i1 = min(n, i0 + _POINTS)
        a, b, p = 0.5 * tx[i0:i1, None], 0.5 * tw[i0:i1, None], phi[i0:i1, None]
        q = np.pi - p
        cu = np.stack([a * np.sin(p * _X01), a * np.sin(q * _Y01)], axis=1)      # (P, 2 arcs, 61 rays)
        cv = np.stack([-b * np.sin(p * _Y01), b * np.sin(q * _X01)], axis=1)
        tu = np.tanh(cu[..., None] * _R2)                                       # (P, 2, 61, 76 radii)
        f = tu * (tu - 2.0 * np.tanh(cv[..., None] * _R2))
        f0, f2 = (f * _WR2).sum(axis=-1), (f * _WR2R2).sum(axis=-1)             # radial sums (P, 2, 61)
        s0 = ((p * f0[:, 0] + q * f0[:, 1]) * _W01).sum(axis=-1)
        s2 = ((p * f2[:, 0] + q * f2[:, 1]) * _W01).sum(axis=-1)
        eg[i0:i1] = 0.25 * (1.0 + s0 / np.pi)
        egr[i0:i1] = 0.25 * (2.0 + s2 / np.pi)
    return eg, egr


# ----------------------------------------------------------------------------- validation helpers
def _check_int(cls: str, name: str, value, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ValueError(f"The '{name}' parameter of {cls} must be an int >= {low}. Got {value!r} instead.")
    return int(value)


def _check_float(cls: str, name: str, value, strict: bool) -> float:
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and np.isfinite(value)
    ok = ok and (value > 0 if strict else value >= 0)
    if not ok:
        raise ValueError(f"The '{name}' parameter of {cls} must be a float {'>' if strict else '>='} 0. "
                         f"Got {value!r} instead.")
    return float(value)


def _check_radius(radius) -> float | None:
    if radius is None:
        return None
    if isinstance(radius, bool) or not isinstance(radius, numbers.Real) or not radius >= 0 or not np.isfinite(radius):
        raise ValueError(f"The 'radius' parameter must be None or a float >= 0. Got {radius!r} instead.")
    return float(radius)


def _project(x: np.ndarray, radius: float | None) -> np.ndarray:
    """Euclidean projection of the rows of x onto the ball ‖x‖ ≤ radius."""
    if radius is None:
        return x
    n = _norm(x)[..., None]
    scale = np.divide(radius, n, out=np.ones_like(n), where=n > radius)
    return x * scale


def _blocks(w_blocks, weights_blocks, dim: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yield (w [n, M, d], c [n, M]) pairs from the flexible block arguments."""
    def source(obj):
        if callable(obj):
            obj = obj()
        if isinstance(obj, np.ndarray) and obj.ndim == 3:
            return iter([obj])
        return iter(obj)

    ws = source(w_blocks)
    cs = None if weights_blocks is None else source(weights_blocks)
    count = 0
    for w in ws:
        w = np.asarray(w, dtype=np.float64)
        if w.ndim != 3 or w.shape[-1] != dim:
            raise ValueError(f"Every block of w_blocks must have shape (n, M, {dim}). Got {w.shape} instead.")
        if not np.isfinite(w).all():
            raise ValueError("w_blocks contains non-finite values.")
        if cs is None:
            c = np.full(w.shape[:2], 1.0 / w.shape[1]) if w.shape[1] else np.zeros(w.shape[:2])
        else:
            try:
                c = next(cs)
            except StopIteration:
                raise ValueError("weights_blocks has fewer blocks than w_blocks.") from None
            c = np.broadcast_to(np.asarray(c, dtype=np.float64), w.shape[:2])
            if not (np.isfinite(c).all() and (c >= 0).all()):
                raise ValueError("weights_blocks must contain finite weights >= 0.")
        count += 1
        yield w, c
    if cs is not None and next(cs, None) is not None:
        raise ValueError("weights_blocks has more blocks than w_blocks.")
    if count == 0:
        raise ValueError("w_blocks is empty.")


class _Population:
    """Shared plumbing: parameters, shape checks."""

    _name = "_Population"

    _curvature_max = 1.0      # sup of the Hessian's eigenvalues per unit s²
    #: whether ``grad_coefficients`` (∇F = α x − β w) ignores ‖x‖ and ‖w‖ (callers may then skip the norms)
    norm_free_gradient = False

    def __init__(self, dim, feature_scale, max_feature_scale=None):
        self._dim = _check_int(self._name, "dim", dim, 1)
        self.feature_scale = _check_float(self._name, "feature_scale", feature_scale, strict=True)
        self.max_feature_scale = self.feature_scale if max_feature_scale is None else \
            _check_float(self._name, "max_feature_scale", max_feature_scale, strict=True)

    @property
    def dim(self) -> int:
        """int: the model dimension d."""
        return self._dim

    def _s(self, scale):
        """The feature scale: ``feature_scale`` or the per-point array ``scale``."""
        return self.feature_scale if scale is None else np.asarray(scale, dtype=np.float64)

    @property
    def smoothness(self) -> float:
        """float: L, the Lipschitz constant of ∇F over every client and step
        (from the largest feature scale the stream uses)."""
        return self._curvature_max * self.max_feature_scale ** 2

    def _check_xw(self, x, w):
        """x and w as float64 arrays of shapes (..., d) that broadcast together (not broadcast)."""
        x = np.asarray(x, dtype=np.float64)
        w = np.asarray(w, dtype=np.float64)
        d = self._dim
        if x.ndim == 0 or x.shape[-1] != d or w.ndim == 0 or w.shape[-1] != d:
            raise ValueError(f"x and w must have shape (..., {d}). Got {x.shape} and {w.shape} instead.")
        np.broadcast_shapes(x.shape, w.shape)
        return x, w

    def _xw(self, x, w):
        x, w = self._check_xw(x, w)
        shape = np.broadcast_shapes(x.shape, w.shape)
        return np.broadcast_to(x, shape), np.broadcast_to(w, shape)

    def _w3(self, w, x0):
        w = np.asarray(w, dtype=np.float64)
        if w.ndim != 3 or w.shape[-1] != self._dim or w.shape[1] < 1:
            raise ValueError(f"w must have shape (n, M, {self._dim}) with M >= 1. Got {w.shape} instead.")
        if not np.isfinite(w).all():
            raise ValueError("w contains non-finite values.")
        if x0 is not None:
            x0 = np.asarray(x0, dtype=np.float64)
            if x0.shape != (w.shape[0], self._dim):
                raise ValueError(f"x0 must have shape ({w.shape[0]}, {self._dim}). Got {x0.shape} instead.")
        return w, x0

    def __repr__(self):
        return f"{type(self).__name__}(dim={self._dim}, feature_scale={self.feature_scale!r})"


# ============================================================================= least squares
class LeastSquaresPopulation(_Population):
    """Population of the linear-regression SEA client.

    Data: a = s z with z ∈ R^d of independent, zero-mean, unit-variance
    coordinates (standard normal by default; Student-t for heavy tails, see
    ``kurtosis``), y = a·w + σ ε with ε zero-mean, unit-variance and
    independent of a; per-sample loss f(x, ξ) = ½ (a·x − y)². The population
    loss depends only on the second moments, so it is the isotropic quadratic
    F(x) = ½ s² ‖x − w‖² + ½ σ² (units: squared label units) whatever the
    tails; its sums over clients and steps are the terms of FedSEA's
    expected regret (eq. (3)).

    Every method accepts per-point ``scale`` (s) and ``noise`` (σ) arrays
    that broadcast against x[..., 0], for adversaries whose clients differ in
    feature scale or label noise, or whose feature scale moves over time
    (covariate shift); ``None`` uses the constructor's values.

    Parameters
    ----------
    dim : int
        Model dimension d ≥ 1.
    feature_scale : float, default 1.0
        Feature standard deviation s > 0 (feature units per coordinate).
    noise : float, default 1.0
        Label-noise standard deviation σ ≥ 0 (label units).
    kurtosis : float, default 3.0
        E z_j⁴ of a standardised feature coordinate (3 for Gaussian features,
        3(ν − 2)/(ν − 4) for Student-t with ν > 4 degrees of freedom). It
        enters the gradient noise only.
    max_feature_scale : float, optional
        The largest feature scale any client uses at any step (sets L);
        default ``feature_scale``.

    Attributes
    ----------
    feature_scale, noise, kurtosis : float
        s, σ and E z⁴ as given.

    Raises
    ------
    ValueError
        If a parameter is out of range, e.g. "The 'noise' parameter of
        LeastSquaresPopulation must be a float >= 0. Got -1 instead."

    Notes
    -----
    Source: FedSEA, "Federated Learning in SEA environment" — eq. (3)
    (expected regret) and eq. (8) (gradient-noise σ² definition). With
    δ = x − w, ∇f = a (a·δ − σ ε) and, for independent coordinates,
    E[‖a‖² (a·δ)²] = s⁴ (E z⁴ + d − 1) ‖δ‖², so
    E‖∇f − ∇F‖² = s⁴ (E z⁴ + d − 2) ‖δ‖² + σ² s² d
    (= s⁴ (d + 1) ‖δ‖² + σ² s² d for Gaussian features). L = μ = s².

    Examples
    --------
    >>> import numpy as np
    >>> p = LeastSquaresPopulation(3, feature_scale=1.0, noise=0.5)
    >>> x, w = np.array([1.0, 0.0, 0.0]), np.zeros(3)
    >>> float(p.loss(x, w)), p.grad(x, w).tolist(), float(p.grad_noise(x, w))
    (0.625, [1.0, 0.0, 0.0], 4.75)
    >>> float(p.loss(x, w, scale=2.0, noise=0.0))     # ½ s² ‖x − w‖²
    2.0
    """

    _name = "LeastSquaresPopulation"
    norm_free_gradient = True          # ∇F(x) = s²(x − w)

    def __init__(self, dim: int, feature_scale: float = 1.0, noise: float = 1.0, kurtosis: float = 3.0,
                 max_feature_scale: float | None = None):
        super().__init__(dim, feature_scale, max_feature_scale)
        self.noise = _check_float(self._name, "noise", noise, strict=False)
        self.kurtosis = _check_float(self._name, "kurtosis", kurtosis, strict=True)

    def __repr__(self):
        return f"{super().__repr__()[:-1]}, noise={self.noise!r})"

    def _n(self, noise):
        return self.noise if noise is None else np.asarray(noise, dtype=np.float64)

    @property
    def strong_convexity(self) -> float:
        """float: μ = s², the strong-convexity modulus of F (at the base feature scale)."""
        return self.feature_scale ** 2

    def loss(self, x, w, scale=None, noise=None) -> np.ndarray:
        """Population loss F(x) = ½ s² ‖x − w‖² + ½ σ².

        Parameters
        ----------
        x, w : array_like, shape (..., d)
            Model and client optimum x*_{t,m}; leading dimensions broadcast.
        scale, noise : array_like, shape (...), optional
            Per-point s and σ.

        Returns
        -------
        ndarray, shape (...)
            F(x) in squared label units (a term of FedSEA eq. (3)).

        Raises
        ------
        ValueError
            If the last axis of x or w is not d.
        """
        return self.loss_of_sqdist(self.sqdist(x, w), scale, noise)

    def sqdist(self, x, w) -> np.ndarray:
        """‖x − w‖² (leading dimensions broadcast), the one quantity :meth:`loss` and :meth:`grad_noise` need.

        Computing it once lets a caller that wants both (the tracker: F and σ² at the same points) make one
        pass over the (…, d) arrays instead of two; the values are the same.

        Raises
        ------
        ValueError
            If the last axis of x or w is not d.
        """
        x, w = self._xw(x, w)
        if x.ndim != 3:
            dl = x - w
            return np.einsum("...i,...i->...", dl, dl)
        # (n, M, d): a few steps at a time, the difference in one reused buffer that stays in cache
        n, M, d = x.shape
        out = np.empty((n, M))
        buf = None
        for i, j in row_blocks(n, M * d * 8):
            if buf is None:
                buf = np.empty((j - i, M, d))
            dl = np.subtract(x[i:j], w[i:j], out=buf[:j - i])
            out[i:j] = np.einsum("...i,...i->...", dl, dl)
        return out

    def loss_of_sqdist(self, sqdist, scale=None, noise=None) -> np.ndarray:
        """F = ½ s² ‖x − w‖² + ½ σ² from ``sqdist`` = ‖x − w‖² (:meth:`sqdist`); shape of the broadcast inputs."""
        s, n = self._s(scale), self._n(noise)
        return 0.5 * s ** 2 * sqdist + 0.5 * n ** 2

    def grad(self, x, w, scale=None) -> np.ndarray:
        """Population gradient ∇F(x) = s² (x − w).

        Parameters
        ----------
        x, w : array_like, shape (..., d)
        scale : array_like, shape (...), optional

        Returns
        -------
        ndarray, shape (..., d)

        Raises
        ------
        ValueError
            If the last axis of x or w is not d.
        """
        x, w = self._xw(x, w)
        s = self._s(scale)
        return (s ** 2 if scale is None else (s ** 2)[..., None]) * (x - w)

    def grad_coefficients(self, x_norm, w_norm, scale=None):
        """(α, β) with ∇F(x) = α x − β w: here α = β = s².

        Parameters
        ----------
        x_norm, w_norm : ndarray (...) — ‖x‖ and ‖w‖ (unused: the gradient is linear).
        scale : ndarray (...) or None — per-point feature scale.

        Returns
        -------
        two float64 ndarrays of the broadcast shape of the inputs.
        """
        s2 = np.broadcast_to(np.square(self._s(scale)), np.broadcast_shapes(np.shape(x_norm), np.shape(w_norm)))
        return s2, s2

    def grad_noise(self, x, w, scale=None, noise=None) -> np.ndarray:
        """Per-sample gradient noise E‖∇f(x, ξ) − ∇F(x)‖² (FedSEA eq. (8)).

        Equals s⁴ (E z⁴ + d − 2) ‖x − w‖² + σ² s² d (s⁴ (d + 1) ‖x − w‖² +
        σ² s² d for Gaussian features). For a mini-batch of b samples divide
        by b.

        Parameters
        ----------
        x, w : array_like, shape (..., d)
        scale, noise : array_like, shape (...), optional

        Returns
        -------
        ndarray, shape (...)
            Squared gradient units.

        Raises
        ------
        ValueError
            If the last axis of x or w is not d.
        """
        return self.grad_noise_of_sqdist(self.sqdist(x, w), scale, noise)

    def grad_noise_of_sqdist(self, sqdist, scale=None, noise=None) -> np.ndarray:
        """The gradient noise of :meth:`grad_noise` from ``sqdist`` = ‖x − w‖² (:meth:`sqdist`)."""
        s2, d, n = self._s(scale) ** 2, self._dim, self._n(noise)
        return s2 * s2 * (self.kurtosis + d - 2) * sqdist + n ** 2 * s2 * d

    def hessian(self, x, w, scale=None) -> np.ndarray:
        """Population Hessian ∇²F(x) = s² I.

        Parameters
        ----------
        x, w : array_like, shape (..., d)
        scale : array_like, shape (...), optional

        Returns
        -------
        ndarray, shape (..., d, d)

        Raises
        ------
        ValueError
            If the last axis of x or w is not d.
        """
        x, _ = self._xw(x, w)
        d = self._dim
        out = np.zeros(x.shape[:-1] + (d, d))
        s2 = self._s(scale) ** 2
        out[..., np.arange(d), np.arange(d)] = s2 if scale is None else np.broadcast_to(s2, x.shape[:-1])[..., None]
        return out

    def curvature(self, x, scale=None, x_norm=None) -> np.ndarray:
        """Mean eigenvalue of ∇²F at x, tr(∇²F(x))/d = s² (loss units per squared model unit).

        Parameters
        ----------
        x : array_like, shape (..., d)
        scale : array_like, shape (...), optional
        x_norm : ignored (the curvature of a quadratic does not depend on x); accepted as the logistic's.

        Returns
        -------
        ndarray, shape (...)
        """
        x = np.asarray(x, dtype=np.float64)
        return np.broadcast_to(self._s(scale) ** 2, x.shape[:-1]).astype(np.float64)

    def minimize_mean(self, w, x0=None, radius=None, scale=None, weights=None, w_norm=None) -> np.ndarray:
        """Per-step optimum u_t = argmin_{‖x‖ ≤ radius} Σ_m c_m F(x, w[t, m]).

        A sum of isotropic quadratics is ½ (Σ c s²) ‖x − w̄‖² + const with
        w̄ = Σ c s² w / Σ c s², so the minimiser is w̄ projected onto the ball
        (exact).

        Parameters
        ----------
        w : array_like, shape (n, M, d)
            Client optima of n steps.
        x0 : array_like, shape (n, d), optional
            Ignored (closed form); accepted for API symmetry.
        radius : float, optional
            L2-ball radius D ≥ 0; ``None`` for no constraint.
        scale : array_like, shape (n, M), optional
            Per-client feature scales s_{t,m}.
        weights : array_like, shape (n, M), optional
            Client weights c_{t,m} ≥ 0 (default 1/M).
        w_norm : ignored (closed form); accepted as the logistic's.

        Returns
        -------
        ndarray, shape (n, d)

        Raises
        ------
        ValueError
            On a bad shape, non-finite w, or negative radius.
        """
        radius = _check_radius(radius)
        w, _ = self._w3(w, x0)
        if scale is None and weights is None:
            return _project(w.mean(axis=1), radius)
        c = np.full(w.shape[:2], 1.0 / w.shape[1]) if weights is None else np.asarray(weights, dtype=np.float64)
        k = c * np.broadcast_to(self._s(scale) ** 2, w.shape[:2])
        tot = k.sum(axis=1, keepdims=True)
        mean = np.einsum("nm,nmd->nd", np.divide(k, tot, out=np.zeros_like(k), where=tot > 0), w)
        return _project(mean, radius)

    def minimize_sum(self, w_blocks, weights_blocks=None, radius=None) -> tuple[np.ndarray, float]:
        """Hindsight comparator argmin_{‖x‖ ≤ radius} Σ_t Σ_m c_{t,m} F(x, w_{t,m}).

        One pass over the blocks, accumulating Σc, the weighted mean of the
        optima and their weighted scatter with Chan's pairwise update (no
        cancellation). The minimiser is the weighted mean of the optima,
        projected onto the ball. This is the comparator x* of FedSEA's
        expected regret (eq. (3)). (Base feature scale and noise; the
        tracker keeps its own running sums for per-client scales.)

        Parameters
        ----------
        w_blocks : iterable of array_like (n_i, M, d), or callable returning one
            Client optima, block by block (a single ndarray of shape
            (n, M, d) is one block).
        weights_blocks : iterable of array_like (n_i, M), or callable, optional
            c_{t,m} ≥ 0 for the matching blocks (broadcastable); default 1/M.
        radius : float, optional
            L2-ball radius D ≥ 0; ``None`` for no constraint.

        Returns
        -------
        x : ndarray, shape (d,)
        value : float
            Σ_t Σ_m c_{t,m} F(x, w_{t,m}) (squared label units).

        Raises
        ------
        ValueError
            On empty input, mismatched block counts or shapes, negative or
            all-zero weights, non-finite values, or a negative radius.
        """
        radius = _check_radius(radius)
        d = self._dim
        W, mean, S = 0.0, np.zeros(d), 0.0
        for w, c in _blocks(w_blocks, weights_blocks, d):
            Wb = float(c.sum())
            if Wb <= 0:
                continue
            mb = np.einsum("nm,nmd->d", c, w) / Wb
            dev = w - mb
            Sb = float(np.einsum("nm,nmd,nmd->", c, dev, dev))
            delta = mb - mean
            tot = W + Wb
            S += Sb + float(delta @ delta) * W * Wb / tot
            mean = mean + delta * (Wb / tot)
            W = tot
        if W <= 0:
            raise ValueError("The total weight Σ c_{t,m} must be > 0.")
        x = _project(mean, radius)
        dx = x - mean
        value = 0.5 * self.feature_scale ** 2 * (S + W * float(dx @ dx)) + 0.5 * self.noise ** 2 * W
        return x, float(value)


# ============================================================================= logistic
class LogisticPopulation(_Population):
    """Population of the Gaussian logistic-regression SEA client.

    Data: a ~ N(0, s² I_d), y ∈ {0, 1} with P(y = 1 | a) = sigmoid(a·w);
    per-sample loss f(x, ξ) = softplus(a·x) − y a·x (nats). All quantities
    are computed by exact Gaussian quadrature (see the module docstring for
    the rules and their accuracy): F, ∇F and ∇²F through one-dimensional
    expectations after Gaussian integration by parts, the gradient noise by a
    two-dimensional polar rule in the (u, v) = (a·x, a·w) plane.

    Parameters
    ----------
    dim : int
        Model dimension d ≥ 1.
    feature_scale : float, default 1.0
        Feature standard deviation s > 0.

    Attributes
    ----------
    feature_scale : float

    Raises
    ------
    ValueError
        If a parameter is out of range, e.g. "The 'feature_scale' parameter
        of LogisticPopulation must be a float > 0. Got 0 instead."

    Notes
    -----
    Source: FedSEA, "Federated Learning in SEA environment" — eq. (3)
    (expected regret) and eq. (8) (gradient-noise definition). L = s²/4;
    F is strictly but not uniformly strongly convex, so μ is ``None``.

    Examples
    --------
    >>> import numpy as np
    >>> p = LogisticPopulation(2)
    >>> w = np.array([[[1.0, 0.5]]])
    >>> np.allclose(p.minimize_mean(w), w[:, 0], atol=1e-12)
    True
    """

    _name = "LogisticPopulation"

    def __init__(self, dim: int, feature_scale: float = 1.0, max_feature_scale: float | None = None):
        super().__init__(dim, feature_scale, max_feature_scale)
        self._memo = {}             # (s‖x‖, s‖w‖, φ) -> 2-D moments (see _g_moments)

    _curvature_max = 0.25    # sigmoid' ≤ 1/4: L = s²/4

    @property
    def strong_convexity(self):
        """None: F has no uniform strong-convexity modulus on R^d."""
        return None

    def loss(self, x, w, scale=None) -> np.ndarray:
        """Population loss F(x) = E[softplus(a·x) − sigmoid(a·w) a·x].

        Computed as A(s‖x‖) − s² (x·w) κ(s‖w‖) (Stein's lemma), 1-D quadrature.

        Parameters
        ----------
        x, w : array_like, shape (..., d)
            Model and client optimum; leading dimensions broadcast.
        scale : array_like, shape (...), optional
            Per-point feature scale s (default ``feature_scale``).

        Returns
        -------
        ndarray, shape (...)
            F(x) in nats (a term of FedSEA eq. (3)); F(w) is the label entropy.

        Raises
        ------
        ValueError
            If the last axis of x or w is not d.
        """
        x, w = self._check_xw(x, w)        # quadratures once per distinct x and w, then broadcast
        s = self._s(scale)
        return _softplus_mean(s * _norm(x)) - s * s * np.einsum("...i,...i->...", x, w) * _kappa(s * _norm(w))

    def grad(self, x, w, scale=None) -> np.ndarray:
        """Population gradient ∇F(x) = s² (κ(s‖x‖) x − κ(s‖w‖) w).

        Parameters
        ----------
        x, w : array_like, shape (..., d)
        scale : array_like, shape (...), optional

        Returns
        -------
        ndarray, shape (..., d)
            Zero exactly at x = w.

        Raises
        ------
        ValueError
            If the last axis of x or w is not d.
        """
        x, w = self._check_xw(x, w)        # quadratures once per distinct x and w, then broadcast
        s = self._s(scale)
        s = s if scale is None else s[..., None]
        kx = _kappa(s * _norm(x)[..., None])
        kw = _kappa(s * _norm(w)[..., None])
        return s * s * (kx * x - kw * w)

    def grad_coefficients(self, x_norm, w_norm, scale=None):
        """(α, β) with ∇F(x) = α x − β w: α = s² κ(s‖x‖), β = s² κ(s‖w‖) (see :meth:`grad`).

        Parameters
        ----------
        x_norm, w_norm : ndarray (...) — ‖x‖ and ‖w‖, broadcastable.
        scale : ndarray (...) or None — per-point feature scale s.

        Returns
        -------
        two float64 ndarrays (α of x_norm's shape broadcast with scale, β of w_norm's).
        """
        s = self._s(scale)
        return s * s * _kappa(s * np.asarray(x_norm, float)), s * s * _kappa(s * np.asarray(w_norm, float))

    def grad_noise(self, x, w, scale=None) -> np.ndarray:
        """Per-sample gradient noise E‖∇f(x, ξ) − ∇F(x)‖² (FedSEA eq. (8)).

        E‖∇f‖² = E[g(u, v) ‖a‖²] with g = (σ(u) − σ(v))² + σ(v)(1 − σ(v))
        (the conditional second moment of σ(u) − y), evaluated with the 2-D
        polar rule; ‖∇F‖² is subtracted. For a mini-batch of b samples divide
        by b.

        Parameters
        ----------
        x, w : array_like, shape (..., d)
        scale : array_like, shape (...), optional

        Returns
        -------
        ndarray, shape (...)
            Squared gradient units (nats² per squared model unit).

        Raises
        ------
        ValueError
            If the last axis of x or w is not d.
        """
        x, w = self._xw(x, w)
        d = self._dim
        s = np.broadcast_to(self._s(scale), x.shape[:-1])
        nx, nw = _norm(x), _norm(w)
        phi = _angle(x, w, nx, nw)
        eg, egr = self._g_moments((s * nx).reshape(-1), (s * nw).reshape(-1), phi.reshape(-1))
        second = (s * s).reshape(-1) * (egr + (d - 2) * eg)
        g = self.grad(x, w, scale)
        return second.reshape(nx.shape) - np.einsum("...i,...i->...", g, g)

    _MEMO_SIZE = 4096           # (s‖x‖, s‖w‖, φ) triples whose 2-D moments are kept

    def _g_moments(self, tx, tw, phi):
        """:func:`_polar_g_moments` once per distinct (s‖x‖, s‖w‖, φ), remembering the last few thousand.

        The 2-D rule costs 9,272 nodes per point. The points repeat: the
        comparator u_t is the same for every client sharing an optimum, and on
        a stationary stream the same at every step. Each distinct point is
        computed once, and a point seen before is not computed again
        (bit-identical: the same computation of the same point).
        """
        memo = self._memo
        pts = np.stack([tx, tw, phi], axis=1)
        u, inv = np.unique(pts, axis=0, return_inverse=True)
        keys = [tuple(r) for r in u.tolist()]
        todo = [i for i, k in enumerate(keys) if k not in memo]
        if todo:
            eg, egr = _polar_g_moments(np.ascontiguousarray(u[todo, 0]), np.ascontiguousarray(u[todo, 1]),
                                       np.ascontiguousarray(u[todo, 2]))
            if len(memo) + len(todo) > self._MEMO_SIZE:
                memo.clear()
            for j, i in enumerate(todo):
                memo[keys[i]] = (eg[j], egr[j])
        vals = np.array([memo[k] for k in keys]).reshape(len(keys), 2)
        inv = inv.reshape(-1)
        return vals[inv, 0], vals[inv, 1]

    def hessian(self, x, w, scale=None) -> np.ndarray:
        """Population Hessian ∇²F(x) = s² κ(s‖x‖) (I − x̂x̂ᵀ) + s² μ₂(s‖x‖) x̂x̂ᵀ.

        Independent of w. Eigenvalues: s² κ (multiplicity d − 1, ⟂ x) and
        s² μ₂ along x, where κ(τ) = E σ'(τZ) and μ₂(τ) = E[Z² σ'(τZ)],
        Z ~ N(0, 1); all in (0, s²/4]. (E[σ'(u) a aᵀ] with a = α x̂ + r.)

        Parameters
        ----------
        x, w : array_like, shape (..., d)
        scale : array_like, shape (...), optional

        Returns
        -------
        ndarray, shape (..., d, d)

        Raises
        ------
        ValueError
            If the last axis of x or w is not d.
        """
        x, _ = self._xw(x, w)
        d = self._dim
        s = np.broadcast_to(self._s(scale), x.shape[:-1])
        nx = _norm(x)
        kap, mu2 = _kappa_mu2(s * nx)
        xh = _unit(x, nx)
        out = (s * s * (mu2 - kap))[..., None, None] * xh[..., :, None] * xh[..., None, :]
        out[..., np.arange(d), np.arange(d)] += (s * s * kap)[..., None]
        return out

    def curvature(self, x, scale=None, x_norm=None) -> np.ndarray:
        """Mean eigenvalue of ∇²F at x: s² (μ₂(s‖x‖) + (d − 1) κ(s‖x‖)) / d.

        Parameters
        ----------
        x : array_like, shape (..., d)
        scale : array_like, shape (...), optional
        x_norm : array_like, shape (...), optional
            ‖x‖ if the caller has it (e.g. one norm per step for a model broadcast over the clients).

        Returns
        -------
        ndarray, shape (...)
            Nats per squared model unit; in (0, s²/4].
        """
        x = np.asarray(x, dtype=np.float64)
        s = np.broadcast_to(self._s(scale), x.shape[:-1])
        kap, mu2 = _kappa_mu2(s * (_norm(x) if x_norm is None else x_norm))
        return s * s * (mu2 + (self._dim - 1) * kap) / self._dim

    # ------------------------------------------------------------------ minimisers
    @staticmethod
    def _psi(rho, S, C):
        """ψ(ρ)_r = Σ_k C_rk s_rk² ρ_r κ(s_rk ρ_r) and ψ'(ρ)_r = Σ_k C_rk s_rk² μ₂(s_rk ρ_r) > 0.

        The radial derivative of Σ_k C_k A(s_k ρ) (A' (τ) = τ κ(τ) by Stein's lemma);
        rho (r,), S and C (r, K) with C ≥ 0.
        """
        k, mu2 = _kappa_mu2(S * rho[:, None])
        w = C * S * S
        return np.sum(w * rho[:, None] * k, axis=1), np.sum(w * mu2, axis=1)

    def _solve_radius(self, target, S, C, hi, rho0, what):
        """Solve ψ(ρ) = target on [0, hi] by bracketed Newton (vectorised over rows).

        target, hi, rho0 : arrays (r,); S, C : arrays (r, K) of feature scales and
        weights (ψ as in :meth:`_psi`), with ψ(hi) ≥ target up to rounding.
        Raises RuntimeError naming the rows (``what``) whose gradient
        |ψ(ρ) − target| / Σ_k C_rk is not < 1e-10 after 100 iterations.
        """
        lo = np.zeros_like(target)
        hi = hi.astype(np.float64).copy()
        rho = np.clip(rho0, lo, hi)
        active = target > 0
        rho[~active] = 0.0
        for _ in range(100):
            if not active.any():
                break
            idx = np.flatnonzero(active)
            p, dp = self._psi(rho[idx], S[idx], C[idx])
            res = p - target[idx]
            below = res < 0
            lo[idx] = np.where(below, rho[idx], lo[idx])
            hi[idx] = np.where(below, hi[idx], rho[idx])
            new = rho[idx] - np.divide(res, dp, out=np.full_like(res, np.inf), where=dp > 0)
            bad = ~((new > lo[idx]) & (new < hi[idx]))
            new = np.where(bad, 0.5 * (lo[idx] + hi[idx]), new)
            done = (res == 0) | (np.abs(new - rho[idx]) <= 4 * np.finfo(float).eps * np.maximum(rho[idx], 1e-300)) \
                | (hi[idx] - lo[idx] <= 4 * np.finfo(float).eps * hi[idx])
            rho[idx] = np.where(res == 0, rho[idx], new)
            active[idx[done]] = False
        total = np.maximum(C.sum(axis=1), 1e-300)
        gnorm = np.abs(self._psi(rho, S, C)[0] - target) / total
        failed = np.flatnonzero(~(gnorm < 1e-10))
        if failed.size:
            raise RuntimeError(f"LogisticPopulation: Newton did not reach gradient norm < 1e-10 at {what} "
                               f"{failed[:10].tolist()} (gradient norm {gnorm[failed[:10]].tolist()}).")
        return rho

    def minimize_mean(self, w, x0=None, radius=None, scale=None, weights=None, w_norm=None) -> np.ndarray:
        """Per-step optimum u_t = argmin_{‖x‖ ≤ radius} Σ_m c_m F(x, w[t, m]).

        The weighted loss is Σ_m c_m A(s_m‖x‖) − x·b with
        b = Σ_m c_m s_m² κ(s_m‖w_m‖) w_m, so u_t = ρ b/‖b‖ where ρ solves
        Σ_m c_m s_m² ρ κ(s_m ρ) = ‖b‖ (strictly increasing left side, root in
        [0, max_m ‖w_m‖]); solved by bracketed Newton vectorised over steps to
        gradient norm < 1e-10. With a radius the constrained optimum is
        exactly min(ρ, radius) b/‖b‖ (the loss is convex in ‖x‖ along b).
        This is the dynamic-regret comparator of FedSEA.

        Parameters
        ----------
        w : array_like, shape (n, M, d)
            Client optima of n steps.
        x0 : array_like, shape (n, d), optional
            Warm start; only ‖x0‖ is used, as the initial ρ.
        radius : float, optional
            L2-ball radius D ≥ 0; ``None`` for no constraint.
        scale : array_like, shape (n, M), optional
            Per-client feature scales s_{t,m} (default ``feature_scale``).
        weights : array_like, shape (n, M), optional
            Client weights c_{t,m} ≥ 0 (default 1/M).
        w_norm : array_like, shape (n, M), optional
            ‖w[t, m]‖ if the caller has it (the tracker computes it once per chunk).

        Returns
        -------
        ndarray, shape (n, d)

        Raises
        ------
        ValueError
            On a bad shape, non-finite w, or negative radius.
        RuntimeError
            If Newton does not converge within 100 iterations; the message
            names the offending steps (row indices).
        """
        radius = _check_radius(radius)
        w, x0 = self._w3(w, x0)
        n, M = w.shape[:2]
        c = np.full((n, M), 1.0 / M) if weights is None else np.broadcast_to(np.asarray(weights, float), (n, M))
        s = np.broadcast_to(self._s(scale), (n, M))
        nw = _norm(w) if w_norm is None else w_norm
        k = _kappa(s * nw)
        b = np.einsum("nm,nmd->nd", c * s * s * k, w)
        nb = _norm(b)
        if scale is None:     # one scale: ψ collapses to one term per step
            S, C = np.full((n, 1), self.feature_scale), c.sum(axis=1, keepdims=True)
        else:
            S, C = s, c
        rho0 = nb / np.maximum(np.einsum("nm,nm->n", c * s * s, k), 1e-300) if x0 is None else _norm(x0)
        rho = self._solve_radius(nb, S, C, nw.max(axis=1), rho0, "step(s)")
        if radius is not None:
            rho = np.minimum(rho, radius)
        return _unit(b, nb) * rho[:, None]

    def minimize_sum(self, w_blocks, weights_blocks=None, radius=None, scale_blocks=None,
                     per_client: bool = False):
        """Hindsight comparator argmin_{‖x‖ ≤ radius} Σ_t Σ_m c_{t,m} F_{t,m}(x).

        One pass over the blocks accumulates, for every distinct feature scale
        s, C_s = Σ c and the vector B = Σ c s² κ(s‖w‖) w, and max ‖w‖; the
        objective is Σ_s C_s A(s‖x‖) − x·B, minimised as in
        :meth:`minimize_mean` (scalar bracketed Newton, exact projection).
        This is the comparator x* of FedSEA's expected regret (eq. (3)).
        The cost of a Newton step grows with the number of distinct scales
        (1 without ``scale_blocks``; piecewise-constant covariate shifts
        give a few per client).

        Parameters
        ----------
        w_blocks : iterable of array_like (n_i, M, d), or callable returning one
            Client optima, block by block (a single ndarray of shape
            (n, M, d) is one block). Only one pass is made.
        weights_blocks : iterable of array_like (n_i, M), or callable, optional
            c_{t,m} ≥ 0 for the matching blocks (broadcastable); default 1/M
            (1 with ``per_client``).
        radius : float, optional
            L2-ball radius D ≥ 0; ``None`` for no constraint.
        scale_blocks : iterable of array_like (n_i, M), or callable, optional
            Per-client feature scales for the matching blocks.
        per_client : bool
            Solve one problem per client m (Σ_t c_{t,m} F_{t,m}) instead of
            the network's; returns x (M, d) and value (M,).

        Returns
        -------
        x : ndarray, shape (d,) (or (M, d))
        value : float (or ndarray (M,))
            Σ_t Σ_m c_{t,m} F(x, w_{t,m}) in nats.

        Raises
        ------
        ValueError
            On empty input, mismatched block counts or shapes, negative or
            all-zero weights, non-finite values, or a negative radius.
        RuntimeError
            If the Newton iteration does not converge (gradient norm per unit
            weight not < 1e-10).
        """
        radius = _check_radius(radius)
        res = self._prefix_solutions(w_blocks, weights_blocks, radius, scale_blocks, per_client, None)
        x, value = res[-1]
        if per_client:
            return x, value
        return x[0], float(value[0])

    def minimize_prefix_sums(self, w_blocks, steps, weights_blocks=None, radius=None, scale_blocks=None):
        """:meth:`minimize_sum` over the first ``t`` steps, for every ``t`` in ``steps``, in one pass.

        Used for the expected-regret comparator at checkpoints: the running
        sums of :meth:`minimize_sum` are snapshotted where the step count
        reaches each t, then one scalar Newton solve per t.

        Parameters
        ----------
        w_blocks, weights_blocks, radius, scale_blocks
            As in :meth:`minimize_sum`.
        steps : sequence of int
            Increasing step counts t ≥ 1.

        Returns
        -------
        list of (x (d,), value float), one per t.

        Raises
        ------
        ValueError, RuntimeError
            As :meth:`minimize_sum`.
        """
        radius = _check_radius(radius)
        return [(x[0], float(v[0])) for x, v in
                self._prefix_solutions(w_blocks, weights_blocks, radius, scale_blocks, False, list(steps))]

    def running_sums(self, per_client: bool = False) -> "HindsightSums":
        """Running sums of :meth:`minimize_sum`'s objective, to absorb block by block and solve at any time."""
        return HindsightSums(self, per_client)

    def _prefix_solutions(self, w_blocks, weights_blocks, radius, scale_blocks, per_client, steps):
        d = self._dim
        scales = None if scale_blocks is None else iter(scale_blocks() if callable(scale_blocks) else scale_blocks)
        sums = HindsightSums(self, per_client)
        snaps, done = [], 0
        pending = None if steps is None else list(steps)

        def absorb(w, c, s):
            if per_client and weights_blocks is None:
                c = np.ones_like(c)             # each client alone: weight 1 per step
            sums.absorb(w, c, s)

        for w, c in _blocks(w_blocks, weights_blocks, d):
            s = np.broadcast_to(self.feature_scale if scales is None else np.asarray(next(scales), float), w.shape[:2])
            start = 0
            while pending and done + (w.shape[0] - start) >= pending[0]:
                cut = start + pending[0] - done
                if cut > start:
                    absorb(w[start:cut], c[start:cut], s[start:cut])
                done += cut - start
                start = cut
                snaps.append(sums.snapshot())
                pending.pop(0)
            if start < w.shape[0]:
                absorb(w[start:], c[start:], s[start:])
                done += w.shape[0] - start
        if steps is None:
            snaps.append(sums.snapshot())
        elif pending:
            raise ValueError(f"minimize_prefix_sums: the blocks hold {done} steps, fewer than {pending[0]}.")
        return [self._solve_groups(*snap, radius) for snap in snaps]

    def _solve_groups(self, B, groups, top, radius):
        """Solve the hindsight problem of every row at once from its sums (:class:`HindsightSums`).

        B (rows, d); groups = (row (G,) int, scale (G,), C (G,)) sorted by
        (row, scale); top (rows,). Each row's distinct scales fill one row of
        (rows, K) matrices S, C (K = most scales of any row; unused entries
        S = 1, C = 0), then one bracketed Newton solve vectorised over rows.
        """
        rows = B.shape[0]
        g_row, g_scale, g_c = groups
        counts = np.bincount(g_row, minlength=rows)
        K = max(1, int(counts.max(initial=0)))
        first = np.cumsum(counts) - counts
        pos = np.arange(len(g_row)) - first[g_row]
        S, C = np.ones((rows, K)), np.zeros((rows, K))
        S[g_row, pos], C[g_row, pos] = g_scale, g_c
        total = C.sum(axis=1)
        if np.any(total <= 0):
            raise ValueError("The total weight Σ c_{t,m} must be > 0.")
        nb = _norm(B)
        rho0 = nb / np.maximum(0.25 * np.sum(C * S * S, axis=1), 1e-300)
        rho = self._solve_radius(nb, S, C, top, rho0, "the hindsight problem")
        if radius is not None:
            rho = np.minimum(rho, radius)
        x = _unit(B, nb) * rho[:, None]
        value = np.sum(C * _softplus_mean(S * rho[:, None]), axis=1) - np.einsum("rd,rd->r", x, B)
        return x, value


class HindsightSums:
    """The running sums behind :meth:`LogisticPopulation.minimize_sum`, absorbed block by block.

    For every row (the network, or each client with ``per_client``) and
    distinct feature scale s: C_s = Σ c; per row B = Σ c s² κ(s‖w‖) w and
    max ‖w‖ over the positive weights. The hindsight comparator of the steps
    absorbed so far is then one scalar Newton solve (:meth:`solve`). Memory
    O(rows · d), constant in T: the tracker absorbs each chunk's optima as
    they arrive instead of recording them for the end of the run.

    Parameters
    ----------
    population : LogisticPopulation
    per_client : bool
        One row per client (M rows, fixed by the first block) instead of one.
    """

    def __init__(self, population, per_client: bool = False):
        self.population, self.per_client = population, per_client
        # the groups (row, scale) -> C as three arrays sorted by (row, scale): no Python loop over rows
        self.g_row = np.zeros(0, np.int64)
        self.g_scale = np.zeros(0)
        self.g_c = np.zeros(0)
        self.B = self.top = None

    @property
    def groups(self) -> dict:
        """{(row, scale): C} of the absorbed steps (a view for inspection; O(rows) Python objects)."""
        return {(int(r), float(sv)): float(v) for r, sv, v in zip(self.g_row, self.g_scale, self.g_c)}

    def absorb(self, w, c, s, w_norm=None) -> None:
        """Add a block: w (n, M, d) optima, c (n, M) weights ≥ 0, s (n, M) feature scales
        (w_norm (n, M): ‖w‖ if the caller has it).

        Cost O(n M d) plus a sort of the (row, scale) groups when the block
        brings a new one; no Python loop over clients.
        """
        d = self.population.dim
        M = w.shape[1]
        per_client = self.per_client
        if self.B is None:
            rows = M if per_client else 1
            self.B, self.top = np.zeros((rows, d)), np.zeros(rows)
        B, top = self.B, self.top
        nw = _norm(w) if w_norm is None else w_norm
        coef = c * s * s * _kappa(s * nw)
        if per_client:
            B += np.einsum("nm,nmd->md", coef, w)
        else:
            B[0] += np.einsum("nm,nmd->d", coef, w)
        live = c > 0
        if per_client:
            top[:] = np.maximum(top, np.max(np.where(live, nw, -np.inf), axis=0))
        elif live.any():
            top[0] = max(top[0], float(nw[live].max()))
        s0 = s.flat[0] if s.size else 0.0
        if s.size and s0 == s.min() == s.max():        # one scale in the block: C per row, no sort
            sums = c.sum(axis=0) if per_client else np.array([c.sum()])
            k_row, k_scale = np.arange(len(sums), dtype=np.int64), np.full(len(sums), float(s0))
        else:
            row = np.broadcast_to(np.arange(M) if per_client else np.zeros(M, int), w.shape[:2])
            keys, inv = np.unique(np.stack([row.ravel(), s.ravel()]), axis=1, return_inverse=True)
            sums = np.bincount(inv.ravel(), weights=c.ravel(), minlength=keys.shape[1])
            k_row, k_scale = keys[0].astype(np.int64), keys[1].astype(np.float64)
        self._merge(k_row, k_scale, np.asarray(sums, dtype=np.float64))

    def _merge(self, k_row, k_scale, sums) -> None:
        """C[(row, scale)] += sums for the given groups (sorted by (row, scale)); new groups inserted in order."""
        if len(k_row) == len(self.g_row) and np.array_equal(k_row, self.g_row) and np.array_equal(k_scale, self.g_scale):
            self.g_c = self.g_c + sums                  # the same groups as before (the usual case)
            return
        rows = np.concatenate([self.g_row, k_row])
        scales = np.concatenate([self.g_scale, k_scale])
        keys, inv = np.unique(np.stack([rows.astype(np.float64), scales]), axis=1, return_inverse=True)
        # bincount adds in index order from 0.0: the old C first, then the block's (as C_old + C_new)
        self.g_c = np.bincount(inv.ravel(), weights=np.concatenate([self.g_c, sums]), minlength=keys.shape[1])
        self.g_row, self.g_scale = keys[0].astype(np.int64), keys[1].copy()

    def snapshot(self):
        """A copy of the sums, to solve later (:meth:`solve`)."""
        return self.B.copy(), (self.g_row.copy(), self.g_scale.copy(), self.g_c.copy()), self.top.copy()

    def solve(self, radius=None, snapshot=None):
        """(x (rows, d), value (rows,)): the comparator of the absorbed steps (or of a snapshot)."""
        snap = self.snapshot() if snapshot is None else snapshot
        return self.population._solve_groups(*snap, _check_radius(radius))


# ============================================================================= Dirac
class DiracLeastSquares:
    """The population of the Dirac (point-mass) least-squares adversary.

    The adversary reveals D_{t,m} = δ_{ξ_{t,m}}, so F_{t,m}(x) = f(x, ξ_{t,m})
    = (1/b) Σ_i ½ (a_i·x − y_i)² is the realised loss itself: there is no
    gradient noise (σ_t² = 0), the expected regret of FedSEA's eq. (3) equals
    the realised static regret, and the per-step optimum u_t minimises the
    pooled quadratic of step t. This recovers the classical adversarial
    online-learning setting inside SEA (the introduction of FedSEA; Sachs et
    al., 2022). The tracker computes every quantity from the samples
    (:mod:`streamfl.regret.tracker`); this object only marks the stream.

    Parameters
    ----------
    dim : int
        d ≥ 1.

    Examples
    --------
    >>> DiracLeastSquares(3).dirac
    True
    """

    dirac = True
    smoothness = None            # per-step λ_max(A_t) varies; the tracker estimates L from the features
    strong_convexity = None

    def __init__(self, dim: int):
        self._dim = _check_int("DiracLeastSquares", "dim", dim, 1)

    @property
    def dim(self) -> int:
        """int: the model dimension d."""
        return self._dim

    def __repr__(self):
        return f"DiracLeastSquares(dim={self._dim})"
