"""Live estimates of the quantities in FedSEA's regret bounds.

FedSEA (§2 "Spatial and Temporal Heterogeneity", §3.1, eq. (8) and Theorem 1)
bounds the regret with, at step t and point x,

* gradient noise   σ_t² = (1/M) Σ_m E‖∇f(x, ξ) − ∇F_{t,m}(x)‖²      (eq. (8)),
* spatial          ζ_t² = (1/M) Σ_m ‖∇F_{t,m}(x) − ∇F_t(x)‖²,
* temporal         K_t² = ‖∇F_t(x) − ∇F_{t−1}(x)‖²,

with F_t = (1/M) Σ_m F_{t,m}; all three are squared gradient norms (units:
loss² per squared model unit, e.g. nats² per squared model unit). σ_t² is
the noise of the mini-batch gradient the clients use (per-sample noise / b).

Where they are evaluated (the paper's text leaves the point open; these are
our choices):

* ``sigma2``: at the played points x_{t,m} (client m's noise at its own
  model). For least squares this includes the multiplicative part
  s⁴ (d + 1) ‖x − x*‖²/b, which grows with the learner's own error;
* ``sigma2_comparator``: at the comparator u_t = argmin F_t (synthetic
  streams only): the noise floor the learner cannot remove, the "σ² at the
  optimum" of local-SGD analyses (Koloskova et al., 2020, cited by FedSEA
  Remark 1). The regime condition (:mod:`streamfl.regret.regime`) uses this
  one when it exists;
* ``zeta2``, ``K2``: at the virtual average x̄_t = (1/M) Σ_m x_{t,m}.

Two estimators:

* :func:`population_estimates` — exact, from the generator's population model
  (closed form for least squares, quadrature for logistic).
* :func:`empirical_estimates` — for real data, from stochastic gradients;
  every estimate is *unbiased* per step (it may be negative: only what is
  displayed is clipped at 0, never what is averaged), see its docstring.

:class:`RunningMean` averages the per-step values and gives a standard error
(batch means, so serially correlated series are not overconfident) and the
maximum (σ²_max, K²_max of FedSEA's Theorem 2).
"""

from __future__ import annotations

import math

import numpy as np

from ..generators.population import row_blocks
from ..models.losses import get_loss


def running_sum(start, values) -> np.ndarray:
    """Running totals start + v_1, (start + v_1) + v_2, … along the first axis, added one step at a time.

    ``start`` : float or ndarray of ``values[0]``'s shape (the total before
    the chunk); ``values`` : ndarray (n, ...). Returns an ndarray of
    ``values``' shape (float64).

    ``start + np.cumsum(values)`` adds the chunk's values first and the
    carried total last, so its rounding depends on where the chunks end;
    here every step adds its value to the total of the step before, as a
    run of one-step chunks does: the totals are bit-identical whatever the
    chunk size (what ``chunk_size`` must not change, see the README).

    >>> v = np.array([0.1, 0.2, 0.3])
    >>> bool(np.array_equal(running_sum(running_sum(1.0, v[:1])[-1], v[1:]), running_sum(1.0, v)[1:]))
    True
    """
    values = np.asarray(values, dtype=np.float64)
    n = len(values)
    out = np.empty((n + 1,) + values.shape[1:])
    out[0] = start
    out[1:] = values
    if values.ndim <= 2:
        np.cumsum(out, axis=0, out=out)           # add.accumulate: sequential along the steps
    else:
        # row by row: numpy's accumulate along the first axis of an (n, M, d) array strides by M·d floats
        for i in range(1, n + 1):
            np.add(out[i - 1], out[i], out=out[i])
    return out[1:]


class RunningMean:
    """Streaming mean, standard error and maximum of a per-step series.

    The standard error is the batch-means estimate: steps are grouped into
    consecutive blocks of ``block`` steps (fixed in absolute step numbers)
    and SE = sd(block means)/√k over the k blocks (weighted by their
    counts). For an independent series it agrees with sd/√n; for a serially
    correlated one (population values along a trajectory) it does not
    pretend to be more precise than it is. NaN values are skipped. Totals
    are added one step at a time (:func:`running_sum`), so the mean, SE and
    maxima are bit-identical whatever the chunks the series arrives in.

    Parameters
    ----------
    block : int
        Steps per block (≥ 1); the tracker uses ⌈T/32⌉.

    Examples
    --------
    >>> r = RunningMean(block=2)
    >>> r.update(np.array([1.0, 3.0, np.nan, 5.0, 7.0]), np.arange(1, 6))
    >>> r.mean, r.count, r.max_step
    (4.0, 4, 7.0)
    """

    def __init__(self, block: int = 1):
        self.block = max(1, int(block))
        self.total = 0.0
        self.count = 0
        self.max_step = -math.inf
        self._sums: dict[int, float] = {}
        self._counts: dict[int, int] = {}

    def update(self, values: np.ndarray, steps: np.ndarray) -> None:
        """Absorb ``values`` (n,) observed at 1-based ``steps`` (n,)."""
        values = np.asarray(values, dtype=np.float64)
        ok = np.isfinite(values)
        if not ok.any():
            return
        v, t = values[ok], np.asarray(steps)[ok]
        self.total = float(running_sum(self.total, v)[-1])
        self.count += int(ok.sum())
        self.max_step = max(self.max_step, float(v.max()))
        ids = (t - 1) // self.block
        for i in np.unique(ids):
            sel = ids == i
            self._sums[int(i)] = float(running_sum(self._sums.get(int(i), 0.0), v[sel])[-1])
            self._counts[int(i)] = self._counts.get(int(i), 0) + int(sel.sum())

    def prefix_means(self, values: np.ndarray) -> np.ndarray:
        """The running mean after each step of a chunk not absorbed yet: ndarray (n,), NaN before any finite value.

        ``values`` (n,) are the chunk's per-step values (NaN skipped, as in
        :meth:`update`); entry i is the mean over every step so far up to
        and including step i of the chunk, bit-identical to :attr:`mean`
        after absorbing the chunk one step at a time. Call it before
        :meth:`update`.

        >>> r = RunningMean()
        >>> r.update(np.array([2.0]), np.array([1]))
        >>> r.prefix_means(np.array([4.0, np.nan, 6.0])).tolist()
        [3.0, 3.0, 4.0]
        """
        values = np.asarray(values, dtype=np.float64)
        ok = np.isfinite(values)
        tot = running_sum(self.total, np.where(ok, values, 0.0))     # + 0.0 leaves a total unchanged
        cnt = self.count + np.cumsum(ok)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(cnt > 0, tot / np.maximum(cnt, 1), np.nan)

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else math.nan

    @property
    def se(self) -> float:
        """Batch-means standard error of :attr:`mean` (NaN with fewer than 2 blocks)."""
        k = len(self._counts)
        if k < 2:
            return math.nan
        n = np.array([self._counts[i] for i in sorted(self._counts)], dtype=float)
        m = np.array([self._sums[i] for i in sorted(self._sums)]) / n
        w = n / n.sum()
        with np.errstate(over="ignore", invalid="ignore"):
            mbar = float(w @ m)
            var = k / (k - 1) * float(np.sum(w * w * (m - mbar) ** 2))
        return float(math.sqrt(var)) if var >= 0 else math.nan

    @property
    def max_block(self) -> float:
        """The largest block mean (a maximum that noisy per-step estimates do not inflate)."""
        if not self._counts:
            return math.nan
        return max(self._sums[i] / self._counts[i] for i in self._counts)


def population_estimates(population, models, average, optima, previous_optima, batch_size, steps=None,
                         noise_every=1, comparator=None, scale=None, noise=None, previous_scale=None,
                         noise_clients=None, optima_norm=None, sqdist=None):
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
        Evaluate the noise only where t is a multiple of this (NaN elsewhere;
        the running means are over the evaluated steps). The logistic noise
        needs a 2-D quadrature per (x, x*) pair, so the tracker uses every
        M-th step.
    comparator : ndarray (n, d) or None
        u_t; when given, ``sigma2_comparator`` is the noise there.
    scale, noise : ndarray (n, M) or None
        Per-client feature scales s_{t,m} and label noise σ_{t,m}.
    previous_scale : ndarray (M,) or None
        s_{t0−1,m} (for K² at the chunk's first step).
    noise_clients : int or None
        k: evaluate the noise on k rotating clients only (at the j-th evaluated
        step t = j·noise_every, clients (j k + i) mod M, i < k), so that every
        client is visited in turn; the value is their mean, an estimate of the
        mean over all M clients. None (or k ≥ M): every client.
    optima_norm : ndarray (n, M) or None
        ‖x*_{t,m}‖ if the caller has it (the tracker computes it once per chunk).
    sqdist : dict or None
        For populations with ``grad_noise_of_sqdist`` (least squares): ``{"models": ‖x_{t,m} − x*_{t,m}‖²,
        "comparator": ‖u_t − x*_{t,m}‖²}`` (n, M) if the caller has them (the tracker's F needs the same);
        used when every client and step is evaluated.

    Returns
    -------
    dict of ndarray (n,): ``sigma2``, ``sigma2_comparator`` (NaN without a
    comparator), ``zeta2``, ``K2`` (NaN at the very first step).
    """
    n, M = optima.shape[:2]
    rows = np.arange(n) if steps is None or noise_every == 1 else np.flatnonzero(steps % noise_every == 0)
    sub = None
    if noise_clients is not None and noise_clients < M and len(rows):
        j = (np.asarray(steps)[rows] // noise_every) if steps is not None else rows
        sub = (j[:, None] * noise_clients + np.arange(noise_clients)) % M          # (rows, k)

    every = len(rows) == n and sub is None          # all steps, all clients: no copies of the (n, M, d) arrays
    sqdist = sqdist or {}

    def pick(a):
        if every:
            return a
        a = a[rows]
        return a if sub is None else np.take_along_axis(a, sub.reshape(sub.shape + (1,) * (a.ndim - 2)), axis=1)

    def noise_at(points, key):
        out = np.full(n, np.nan)
        if len(rows):
            sc = None if scale is None else pick(scale)
            nk = {} if noise is None else {"noise": pick(noise)}
            if every and key in sqdist and hasattr(population, "grad_noise_of_sqdist"):
                g = population.grad_noise_of_sqdist(sqdist[key], scale=sc, **nk)
            else:
                pts = pick(np.broadcast_to(points, optima.shape))
                g = population.grad_noise(pts, pick(optima), scale=sc, **nk)
            out[rows] = g.mean(axis=1) / batch_size
        return out

    sigma2 = noise_at(models, "models")
    sigma2_comp = noise_at(np.broadcast_to(comparator[:, None, :], optima.shape), "comparator") \
        if comparator is not None else np.full(n, np.nan)
    if hasattr(population, "grad_coefficients"):
        zeta2, K2 = _spreads(population, average, optima, previous_optima, scale, previous_scale, optima_norm)
    else:
        g = population.grad(average[:, None, :], optima, scale=scale)
        gbar = g.mean(axis=1)
        zeta2 = np.sum((g - gbar[:, None, :]) ** 2, axis=-1).mean(axis=1)
        if previous_optima is None:
            prev = np.concatenate([optima[:1], optima[:-1]])
            pscale = None if scale is None else np.concatenate([scale[:1], scale[:-1]])
        else:
            prev = np.concatenate([previous_optima[None], optima[:-1]])
            pscale = None if scale is None else np.concatenate([previous_scale[None], scale[:-1]])
        gprev = population.grad(average[:, None, :], prev, scale=pscale).mean(axis=1)
        K2 = np.sum((gbar - gprev) ** 2, axis=-1)
    if previous_optima is None:
        K2[0] = np.nan
    return {"sigma2": sigma2, "sigma2_comparator": sigma2_comp, "zeta2": zeta2, "K2": K2}


def _spreads(population, average, optima, previous_optima, scale, previous_scale, w_norm=None):
    """ζ_t² and K_t² at x̄_t from gradients of the form ∇F_{t,m}(x) = α_{t,m} x − β_{t,m} w_{t,m}.

    With ā = mean_m α, b̄_t = mean_m β w (so ∇F_t(x̄) = ā x̄ − b̄_t), e_m = α_m − ā
    and D_m = β_m w_m − b̄_t:

    * ζ² = mean_m ‖e_m x̄ − D_m‖² = mean_m (e_m² ‖x̄‖² − 2 e_m D_m·x̄ + ‖D_m‖²);
    * K² = ‖(ā_t − ā'_t) x̄_t − (b̄_t − b̄_{t−1})‖², ā'_t the mean α of step t − 1's
      clients (their scales) at x̄_t; b̄_{t−1} is step t − 1's b̄, shifted,
      not recomputed.

    Same values as the gradients written out (up to rounding), without an
    (n, M, d) gradient array per term and without evaluating the previous
    step's optima a second time. With one feature scale e = 0 and ā = ā'.
    Returns two ndarrays (n,) (K² is computed at the first step too; the
    caller sets it to NaN at t = 1). ``w_norm`` (n, M): ‖w‖ if the caller has
    it; not computed for a population whose gradient does not need it
    (``norm_free_gradient``).
    """
    n, M, d = optima.shape
    nx = np.sqrt(np.einsum("nd,nd->n", average, average))                     # (n,)
    if w_norm is not None:
        nw = w_norm
    elif population.norm_free_gradient:
        nw = np.broadcast_to(0.0, (n, M))                                    # only its shape is used
    else:
        nw = np.sqrt(np.einsum("nmd,nmd->nm", optima, optima))                # (n, M)
    # With one feature scale (scale None) α_{t,m} = s² κ(s‖x̄_t‖) is the same for every client: e = 0 and
    # ā' = ā, so α is not needed (its quadrature at every step's ‖x̄_t‖ is skipped: zeros stand in for ‖x̄‖)
    one_scale = scale is None
    alpha, beta = population.grad_coefficients(np.zeros((n, 1)) if one_scale else nx[:, None], nw, scale=scale)
    alpha = np.broadcast_to(alpha, (n, M))
    beta = np.broadcast_to(beta, (n, M))
    abar = alpha.mean(axis=1)
    e = alpha - abar[:, None]
    spread = not one_scale and np.any(e)
    bbar = np.empty((n, d))                                                   # b̄_t
    DD, De = np.empty((n, M)), (np.empty((n, M)) if spread else None)        # ‖D_m‖², D_m·x̄
    for i, j in row_blocks(n, M * d * 8):      # a few steps at a time: the (·, M, d) temporaries stay in cache
        bw = beta[i:j, :, None] * optima[i:j]
        bbar[i:j] = bw.mean(axis=1)
        D = bw - bbar[i:j, None, :]
        DD[i:j] = np.einsum("nmd,nmd->nm", D, D)
        if spread:
            De[i:j] = np.einsum("nmd,nd->nm", D, average[i:j])
    zeta2 = DD.mean(axis=1)
    if spread:
        zeta2 = zeta2 + (e * e).mean(axis=1) * nx * nx - 2.0 * (e * De).mean(axis=1)
    if previous_optima is None:
        first = bbar[:1]
        pscale = None if scale is None else np.concatenate([scale[:1], scale[:-1]])
    else:
        pn = np.sqrt(np.einsum("md,md->m", previous_optima, previous_optima))
        ps = None if previous_scale is None else previous_scale
        _, pb = population.grad_coefficients(0.0, pn, scale=ps)
        first = (pb[:, None] * previous_optima).mean(axis=0)[None]
        pscale = None if scale is None else np.concatenate([previous_scale[None], scale[:-1]])
    diff = bbar - np.concatenate([first, bbar[:-1]])                         # b̄_t − b̄_{t−1}
    if pscale is not None:
        aprev = np.broadcast_to(population.grad_coefficients(nx[:, None], nw, scale=pscale)[0], (n, M)).mean(axis=1)
        diff = diff - (abar - aprev)[:, None] * average
    K2 = np.einsum("nd,nd->n", diff, diff)
    return zeta2, K2


def _scores(task, points, X):
    n, M, b, d = X.shape
    K = points.shape[-1]
    get_loss(task)                      # validates the task name
    return np.einsum("nid,ndk->nik", X.reshape(n, M * b, d), points).reshape(n, M, b, K)


def client_losses(task, points, X, y):
    """Mini-batch mean loss per client at one model per step: the ``loss`` of
    :func:`client_gradients` (same arithmetic, same values), without the gradients.

    points : (n, d, K); X : (n, M, b, d); y : (n, M, b). Returns (n, M). Cost O(n M b d K).
    """
    z = _scores(task, points, X)
    if task == "least_squares":
        r = z[..., 0] - y
        per_loss = 0.5 * r * r
    elif task == "logistic":
        zz = z[..., 0]
        per_loss = np.logaddexp(0.0, zz) - y * zz
    else:
        zmax = z.max(axis=-1, keepdims=True)
        e = np.exp(z - zmax)
        yi = y.astype(np.int64)
        per_loss = (np.log(e.sum(axis=-1)) + zmax[..., 0]) - np.take_along_axis(z, yi[..., None], -1)[..., 0]
    return per_loss.mean(axis=2)


def client_gradients(task, points, X, y):
    """Mini-batch gradient, within-batch variance, loss and Hessian trace per client at given points.

    Parameters
    ----------
    task : str
    points : ndarray (n, d, K) — one model per step, evaluated on every client's batch.
    X : (n, M, b, d); y : (n, M, b).

    Returns
    -------
    g : ndarray (n, M, d·K) — mini-batch mean gradient;
    v : ndarray (n, M) — unbiased variance of g: within-batch sample
        variance of the per-sample gradients / b (NaN if b = 1);
    loss : ndarray (n, M) — mini-batch mean loss;
    hess : ndarray (n, M) — mini-batch mean of the per-sample Hessian trace
        (‖a‖² for least squares, σ'(z)‖a‖² for logistic,
        ‖a‖² Σ_k p_k(1 − p_k) for softmax).

    Cost O(n M b d K).
    """
    n, M, b, d = X.shape
    K = points.shape[-1]
    z = _scores(task, points, X)
    if task == "least_squares":
        r = z[..., 0] - y
        per_loss = 0.5 * r * r
        coef = r[..., None]
        h = np.ones((n, M, b))
    elif task == "logistic":
        zz = z[..., 0]
        p = 1.0 / (1.0 + np.exp(-np.clip(zz, -700, 700)))
        per_loss = np.logaddexp(0.0, zz) - y * zz
        coef = (p - y)[..., None]
        h = p * (1 - p)
    else:
        zmax = z.max(axis=-1, keepdims=True)
        e = np.exp(z - zmax)
        p = e / e.sum(axis=-1, keepdims=True)
        yi = y.astype(np.int64)
        per_loss = (np.log(e.sum(axis=-1)) + zmax[..., 0]) - np.take_along_axis(z, yi[..., None], -1)[..., 0]
        coef = p.copy()
        np.put_along_axis(coef, yi[..., None], np.take_along_axis(coef, yi[..., None], -1) - 1.0, -1)
        h = np.sum(p * (1 - p), axis=-1)
    # per-sample gradient a ⊗ coef, flattened (d·K)
    gs = (X[..., :, None] * coef[..., None, :]).reshape(n, M, b, d * K)
    gm = gs.mean(axis=2)
    if b >= 2:
        v = np.sum((gs - gm[:, :, None]) ** 2, axis=(2, 3)) / (b - 1) / b
    else:
        v = np.full((n, M), np.nan)
    a2 = np.einsum("nmbd,nmbd->nmb", X, X)
    hess = np.mean(h * a2, axis=2)
    return gm, v, per_loss.mean(axis=2), hess


def empirical_estimates(task, average, X, y, c, previous=None, noise_free: bool = False):
    """Unbiased stochastic-gradient estimates of σ_t², ζ_t², K_t² (real data).

    With g_{t,m}(x) the mini-batch gradient of client m and v_{t,m}(x) the
    within-batch sample variance of its per-sample gradients divided by b
    (an unbiased estimate of Var g_{t,m}(x)), weights c_{t,m} (Σ_m c = 1)
    and ḡ_t = Σ_m c_m g_{t,m}:

    * σ̂_t² = Σ_m c_m v_{t,m}(x̄_t) — unbiased for Σ_m c_m σ²_{t,m}/b;
    * ζ̂_t² = Σ_m c_m ‖g_{t,m} − ḡ_t‖² − Σ_m c_m (1 − c_m) v_{t,m}, at x̄_t.
      E Σ c‖g_m − ḡ‖² = ζ_t² + Σ_m c_m (1 − c_m) Var g_m (with c = 1/M:
      (1 − 1/M) σ_t²), so the difference is unbiased;
    * K̂_t² = ‖ḡ_t(x̄_{t−1}) − ḡ_{t−1}(x̄_{t−1})‖² − Σ_m c_{t,m}² v_{t,m}(x̄_{t−1})
      − Σ_m c_{t−1,m}² v_{t−1,m}(x̄_{t−1}). Both mini-batches are evaluated
      at x̄_{t−1}, the average model played at step t − 1, which was fixed
      before either batch was drawn — at x̄_t the batch of step t − 1 would
      already have been learnt from, which biases the difference.

    The estimates are *not* clipped: a per-step value can be negative, and
    only the running mean (which is unbiased) is clipped for display. With
    b = 1 the within-batch variance does not exist: σ̂² is NaN and ζ̂², K̂²
    are the raw (upward-biased) spreads; the tracker reports that.

    With ``noise_free`` (the Dirac adversary: every F_{t,m} is the revealed
    loss itself, so there is no sampling noise) σ̂² = 0 and ζ̂², K̂² are the
    exact spreads, without corrections.

    Parameters
    ----------
    task : str
    average : ndarray (n, d, K) — x̄_t
    X : (n, M, b, d); y : (n, M, b); c : (n, M) client weights
    previous : dict or None
        State of the step before the chunk: ``average`` (d, K) = x̄_{t0},
        ``gbar`` (d·K,) = ḡ_{t0}(x̄_{t0}), ``var`` = Σ c² v at step t0;
        ``None`` at t = 1.

    Returns
    -------
    est : dict of ndarray (n,)
        ``sigma2``, ``zeta2``, ``K2`` (NaN at t = 1), ``virtual_loss``
        (Σ_m c_m f(x̄_t, ξ_{t,m})), ``curvature`` (Σ_m c_m of the mean
        per-sample Hessian trace at x̄_t divided by d, or by d·(K − 1) for
        softmax, whose Hessian is zero along the d directions 1 ⊗ a: the
        mean Hessian eigenvalue over the directions the model moves in).
    state : dict — ``previous`` for the next chunk.

    Cost: two gradient evaluations of every mini-batch, O(n M b d K).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((3, 2, 4, 2)); y = rng.standard_normal((3, 2, 4))
    >>> est, state = empirical_estimates("least_squares", np.zeros((3, 2, 1)), X, y, np.full((3, 2), 0.5))
    >>> sorted(est), bool(np.isnan(est["K2"][0]))
    (['K2', 'curvature', 'sigma2', 'virtual_loss', 'zeta2'], True)
    """
    n, M, b, d = X.shape
    # the mean eigenvalue over the directions the model can move in: softmax's
    # Hessian (diag p − ppᵀ) ⊗ aaᵀ is 0 along 1 ⊗ a (adding one vector to every
    # class column changes no probability; no gradient has a component there),
    # so it has d·(K − 1) eigenvalues that are not structurally zero, not d·K
    K = average.shape[-1]
    dK = d * (K - 1 if task == "softmax" and K > 1 else K)
    g, v, loss, hess = client_gradients(task, average, X, y)
    gbar = np.einsum("nm,nmp->np", c, g)
    have_var = b >= 2 and not noise_free
    sigma2 = np.einsum("nm,nm->n", c, v) if have_var else np.full(n, 0.0 if noise_free else np.nan)
    spread = np.einsum("nm,nm->n", c, np.sum((g - gbar[:, None]) ** 2, axis=-1))
    zeta2 = spread - np.einsum("nm,nm->n", c * (1 - c), v) if have_var else spread
    var = np.einsum("nm,nm->n", c * c, v) if have_var else np.zeros(n)
    # K²: batch t and batch t−1 at x̄_{t−1}
    if previous is None:
        prev_avg = np.concatenate([average[:1], average[:-1]])
        prev_g = np.concatenate([gbar[:1], gbar[:-1]])
        prev_var = np.concatenate([var[:1], var[:-1]])
    else:
        prev_avg = np.concatenate([previous["average"][None], average[:-1]])
        prev_g = np.concatenate([previous["gbar"][None], gbar[:-1]])
        prev_var = np.concatenate([np.atleast_1d(previous["var"]), var[:-1]])
    gx, vx, _, _ = client_gradients(task, prev_avg, X, y)
    vx = vx if have_var else np.zeros_like(vx)
    gxbar = np.einsum("nm,nmp->np", c, gx)
    raw = np.sum((gxbar - prev_g) ** 2, axis=-1)
    K2 = raw - np.einsum("nm,nm->n", c * c, vx) - prev_var if have_var else raw
    if previous is None:
        K2[0] = np.nan
    est = {"sigma2": sigma2, "zeta2": zeta2, "K2": K2,
           "virtual_loss": np.einsum("nm,nm->n", c, loss),
           "curvature": np.einsum("nm,nm->n", c, hess) / dK}
    state = {"average": average[-1].copy(), "gbar": gbar[-1].copy(), "var": float(var[-1])}
    return est, state
