"""The synthetic Stochastically Extended Adversary (SEA) stream.

FedSEA (§2, "Federated Learning in SEA environment"): at every step t the
adversary picks a distribution D_{t,m} for every client m, and client m sees
ξ_{t,m} ~ D_{t,m}. Here D_{t,m} is a linear model with features
a = s_{t,m} z, z of independent zero-mean unit-variance coordinates
(standard normal, or Student-t for heavy tails), whose Bayes-optimal
parameter is

    x*_{t,m} = c_{t,m} + ζ_t δ_m,

* c_{t,m} — the centre, moved over time by the drift schedules (temporal
  heterogeneity; :mod:`streamfl.generators.schedules`); ‖c_0‖ = ``radius``.
  A schedule moves the centre shared by all clients, or, with ``clients``,
  ``delay`` or ``speeds``, selected clients at their own times and speeds;
* δ_m — fixed client offsets, centred across clients and scaled so that
  (1/M) Σ_m ‖δ_m‖² = 1, so ζ_t (``heterogeneity``, optionally moved over
  time by ``heterogeneity_change``) is the root-mean-square distance of the
  client optima from their mean (spatial heterogeneity). For least squares
  with equal feature scales FedSEA's ζ_t (eq. (6)) then equals s² ζ_t exactly;
* s_{t,m} — the feature scale: ``feature_scale`` (one value, or one per
  client) times the covariate-shift factor of ``covariate`` at step t.

Labels: least squares y = a·x* + σ_m ε (ε standard normal or standardised
Student-t; ``noise`` σ, one value or one per client); logistic
y ~ Bernoulli(sigmoid(a·x*)) — the label noise is set by ‖x*‖ and σ is not
used.

Every variant keeps the population loss F_{t,m} known in closed form (or
by exact quadrature), so expected and dynamic regret stay exact
(:mod:`streamfl.generators.population`):

* per-client and time-varying feature scales enter F as s_{t,m};
* heavy tails (least squares only) change only fourth moments, hence the
  gradient noise σ², never F;
* the Dirac adversary (``adversary="dirac"``, least squares only) reveals
  point masses: D_{t,m} = δ_{ξ_{t,m}}, so F_{t,m} = f(·, ξ_{t,m}) and σ² = 0.
  The points are drawn with common random numbers, so clients with the same
  optimum, scale and noise receive the same sample — with ζ = 0 every client
  sees the same loss at every step, the classical adversarial OFL worst case
  in which parallelisation cannot help (Patel et al., 2023).

The stream knows x*_{t,m}, s_{t,m}, σ_m and F and exposes them in each
:class:`~streamfl.generators.base.Chunk` (``optimum``, ``scale``, ``noise``).
"""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np

from .base import Chunk, Stream
from .population import DiracLeastSquares, LeastSquaresPopulation, LogisticPopulation
from .schedules import Abrupt, Adaptive, CovariateShift, HeterogeneityChange, RandomWalk, Rotation, Schedule


def _check(name: str, value, ok: bool, what: str):
    if not ok:
        raise ValueError(f"The '{name}' parameter of SyntheticStream must be {what}. Got {value!r} instead.")


def _per_client(name: str, value, M: int, strict: bool) -> np.ndarray:
    """A scalar or one value per client, as an array (M,)."""
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim == 0:
        arr = np.full(M, float(arr))
    ok = arr.shape == (M,) and np.all(np.isfinite(arr)) and np.all(arr > 0 if strict else arr >= 0)
    _check(name, value, bool(ok), f"a float {'>' if strict else '>='} 0 or a list of {M} such floats (one per client)")
    return arr


class SyntheticStream(Stream):
    """Drifting, heterogeneous linear-model streams for M clients.

    Parameters
    ----------
    task : {"least_squares", "logistic"}
    n_clients : int
        M ≥ 1.
    n_features : int
        d ≥ 1.
    n_steps : int
        T ≥ 1.
    batch_size : int
        b ≥ 1 samples per client per step.
    noise : float or sequence of M floats
        σ ≥ 0, label-noise standard deviation (least squares only), one value
        or one per client.
    heterogeneity : float
        ζ ≥ 0, RMS distance of client optima from their mean (model units).
    radius : float
        ‖c_0‖ ≥ 0, norm of the initial centre of the optima.
    feature_scale : float or sequence of M floats
        s > 0, standard deviation of each feature, one value or one per client.
    drift : sequence of Schedule
        Temporal drift; empty means a stationary adversary.
    seed : int
        Seeds everything; the same seed replays the same stream.
    heterogeneity_change : HeterogeneityChange or None
        Moves ζ over time (ζ_t).
    covariate : sequence of CovariateShift
        Feature-scale changes (covariate shift); factors multiply.
    tails : dict or None
        ``{"df": ν, "on": "features" | "noise" | "both"}``: standardised
        Student-t features (ν > 4) and/or label noise (ν > 2); least squares
        only.
    adversary : {"stochastic", "dirac"}
        ``dirac`` reveals point masses (see the module docstring); least
        squares only.

    Raises
    ------
    ValueError
        For out-of-range parameters, heavy tails or a Dirac adversary with
        the logistic task, or a drift schedule naming a client that does
        not exist.

    Attributes
    ----------
    notes_ : list of str
        Abrupt drift steps after ``n_steps`` (they have no effect).

    Steps count from 1 (metrics.csv's ``t``); chunk row i holds step
    t = ``t0`` + i + 1. A drift at step a is in effect from step a on (see
    :mod:`~streamfl.generators.schedules`).

    Examples
    --------
    >>> from streamfl.generators.schedules import Abrupt
    >>> s = SyntheticStream("least_squares", n_clients=3, n_features=2, n_steps=5,
    ...                     drift=[Abrupt([3])], seed=1)
    >>> c = next(s.chunks())
    >>> c.X.shape, c.y.shape, c.optimum.shape
    ((5, 3, 1, 2), (5, 3, 1), (5, 3, 2))
    >>> bool((c.optimum[1] == c.optimum[0]).all()), bool((c.optimum[2] == c.optimum[1]).all())   # t = 2, t = 3
    (True, False)
    >>> d = SyntheticStream("least_squares", n_clients=3, n_features=2, n_steps=5, adversary="dirac", seed=1)
    >>> c = next(d.chunks())
    >>> bool((c.X[:, 0] == c.X[:, 2]).all() and (c.y[:, 0] == c.y[:, 2]).all())   # ζ = 0: one loss for all
    True
    """

    def __init__(self, task: str = "logistic", *, n_clients: int = 8, n_features: int = 10,
                 n_steps: int = 1000, batch_size: int = 1, noise=1.0,
                 heterogeneity: float = 0.0, radius: float = 1.0, feature_scale=1.0,
                 drift: Sequence[Schedule] = (), seed: int = 0,
                 heterogeneity_change: HeterogeneityChange | None = None,
                 covariate: Sequence[CovariateShift] = (), tails: dict | None = None,
                 adversary: str = "stochastic"):
        _check("task", task, task in ("least_squares", "logistic"), "'least_squares' or 'logistic'")
        for name, v in (("n_clients", n_clients), ("n_features", n_features), ("n_steps", n_steps), ("batch_size", batch_size)):
            _check(name, v, isinstance(v, (int, np.integer)) and v >= 1, "an int >= 1")
        for name, v in (("heterogeneity", heterogeneity), ("radius", radius)):
            _check(name, v, np.isfinite(v) and v >= 0, "a float >= 0")
        _check("adversary", adversary, adversary in ("stochastic", "dirac"), "'stochastic' or 'dirac'")
        M = n_clients
        self.noises = _per_client("noise", noise, M, strict=False)
        self.scales = _per_client("feature_scale", feature_scale, M, strict=True)
        if tails is not None:
            _check("tails", tails, task == "least_squares",
                   "None for the logistic task (heavy tails keep F exact for least squares only)")
            on, df = tails.get("on", "both"), float(tails.get("df", 0))
            _check("tails", tails, on in ("features", "noise", "both") and df > (4 if on != "noise" else 2),
                   "{'df': ν, 'on': 'features'|'noise'|'both'} with ν > 4 for features (finite gradient noise), "
                   "ν > 2 for noise")
            tails = {"df": df, "on": on}
        _check("adversary", adversary, adversary == "stochastic" or task == "least_squares",
               "'stochastic' for the logistic task (the Dirac adversary is implemented for least squares)")
        self.task = task
        self.n_clients, self.n_features, self.n_steps, self.batch_size = n_clients, n_features, n_steps, batch_size
        self.noise = float(self.noises[0]) if np.all(self.noises == self.noises[0]) else self.noises.tolist()
        self.feature_scale = float(self.scales[0]) if np.all(self.scales == self.scales[0]) else self.scales.tolist()
        self.heterogeneity, self.radius = heterogeneity, radius
        self.drift = sorted(drift, key=lambda s: s.order)
        for s in self.drift:
            if s.client_specific:
                s.client_factors(M)                # validates client indices and speeds now
                if isinstance(s, RandomWalk) and s.delay:
                    raise ValueError("RandomWalk: 'delay' is not supported (use 'clients' and 'speeds').")
                if isinstance(s, Abrupt) and s.speeds is not None:
                    raise ValueError("Abrupt: 'speeds' has no meaning for a jump (use 'clients' and 'delay').")
        self.heterogeneity_change = heterogeneity_change
        self.covariate = list(covariate)
        for cv in self.covariate:
            cv.factor(np.zeros(1, int), M)        # validates client indices
        self.tails, self.adversary = tails, adversary
        self.seed = seed
        self.adaptive = any(isinstance(s, Adaptive) for s in self.drift)
        late = [a for s in self.drift if isinstance(s, Abrupt) for a in s.at if a > n_steps]
        self.notes_ = [f"abrupt drift at step{'s' if len(late) > 1 else ''} {', '.join(map(str, late))} "
                       f"{'come' if len(late) > 1 else 'comes'} after the last step ({n_steps}; steps count "
                       f"from 1): no effect"] if late else []
        self.n_classes = 1
        self._scaled = bool(self.covariate) or not np.all(self.scales == self.scales[0])
        self._noisy = task == "least_squares" and not np.all(self.noises == self.noises[0])
        s0, smax = float(self.scales[0]), float(self.scales.max() * np.prod([c.max_factor for c in self.covariate]))
        kurtosis = 3.0
        if tails is not None and tails["on"] != "noise":
            kurtosis = 3.0 * (tails["df"] - 2) / (tails["df"] - 4)
        if adversary == "dirac":
            self.population = DiracLeastSquares(n_features)
        elif task == "least_squares":
            self.population = LeastSquaresPopulation(n_features, feature_scale=s0, noise=float(self.noises[0]),
                                                     kurtosis=kurtosis, max_feature_scale=smax)
        else:
            self.population = LogisticPopulation(n_features, feature_scale=s0, max_feature_scale=smax)
        self._models = None

    def observe(self, models: np.ndarray) -> None:
        self._models = np.asarray(models).reshape(self.n_clients, self.n_features)

    def _centres(self, ts: np.ndarray, c0: np.ndarray) -> np.ndarray:
        """Centres c_{t,m}, shape (n, M, d) (or (n, 1, d) when no schedule is client-specific).

        ``ts`` (n,) are the elapsed steps e = t − 1 of steps t = 1..T: continuous schedules take e, abrupt
        switches compare their ``at`` with t = e + 1 (:mod:`~streamfl.generators.schedules`).
        """
        M = self.n_clients
        shared = not any(s.client_specific for s in self.drift)
        c = np.tile(c0, (len(ts), 1))[:, None, :]
        if not shared:
            c = np.repeat(c, M, axis=1)
        for s in self.drift:
            if isinstance(s, Adaptive):
                continue
            if not s.client_specific:
                if isinstance(s, Abrupt):
                    c = np.broadcast_to(s.base(ts + 1)[:, None, :], c.shape).copy()
                elif isinstance(s, Rotation):
                    n, k, d = c.shape
                    c = s.rotate(np.repeat(ts, k), c.reshape(-1, d)).reshape(n, k, d)
                else:
                    c = c + s.displacement(ts)[:, None, :]
                continue
            sel, mult = s.client_factors(M)
            local = np.maximum(ts[:, None] - s.delay * np.arange(M)[None, :], 0)      # (n, M) client time
            n, _, d = c.shape
            if isinstance(s, Abrupt):
                # client m switches at t = at + delay·m: its own step is t − delay·m (before its first step,
                # the initial centre)
                base = s.base((ts[:, None] + 1 - s.delay * np.arange(M)[None, :]).ravel()).reshape(n, M, d)
                c = np.where(sel[None, :, None], base, c)
            elif isinstance(s, Rotation):
                rot = s.rotate((local * mult[None, :]).ravel(), c.reshape(-1, d)).reshape(n, M, d)
                c = np.where(sel[None, :, None], rot, c)
            elif isinstance(s, RandomWalk):
                c = c + (sel * mult)[None, :, None] * s.displacement(ts)[:, None, :]
            else:
                disp = s.displacement(local.ravel()).reshape(n, M, d)
                c = c + (sel * mult)[None, :, None] * disp
        return c

    def chunks(self, chunk_size: int = 256) -> Iterator[Chunk]:
        M, d, b = self.n_clients, self.n_features, self.batch_size
        init, rng_x, rng_y, *rng_s = [np.random.default_rng(s) for s in
                                       np.random.SeedSequence(self.seed).spawn(3 + len(self.drift))]
        c0 = init.standard_normal(d)
        c0 *= self.radius / np.linalg.norm(c0)
        delta = init.standard_normal((M, d))
        if M > 1:
            delta -= delta.mean(axis=0)
            delta /= np.sqrt(np.mean(np.sum(delta**2, axis=1)))
        else:
            delta[:] = 0.0
        for s, r in zip(self.drift, rng_s):
            s.reset(r, d, c0)
        adaptive = next((s for s in self.drift if isinstance(s, Adaptive)), None)
        push = np.zeros((M, d))
        previous = None
        step = 1 if adaptive else chunk_size
        dirac = self.adversary == "dirac"
        tails = self.tails or {}
        for t0 in range(0, self.n_steps, step):
            n = min(step, self.n_steps - t0)
            ts = np.arange(t0, t0 + n)                # elapsed steps e = t − 1 of the chunk's steps t
            if self.heterogeneity_change is None:
                offsets = (self.heterogeneity * delta)[None]
            else:
                offsets = self.heterogeneity_change.zeta(ts + 1, self.heterogeneity)[:, None, None] * delta[None]
            optimum = self._centres(ts, c0) + offsets
            if adaptive is not None:
                if previous is not None and self._models is not None:
                    push += adaptive.move(previous, self._models)
                optimum = optimum + push
                previous = optimum[0]
            optimum = np.broadcast_to(optimum, (n, M, d)).copy() if optimum.shape[:2] != (n, M) else optimum
            scale = np.broadcast_to(self.scales, (n, M)).copy()
            for cv in self.covariate:
                scale = scale * cv.factor(ts + 1, M)
            shape = (n, 1 if dirac else M, b, d)
            if tails.get("on") in ("features", "both"):
                nu = tails["df"]
                Z = rng_x.standard_t(nu, shape) * np.sqrt((nu - 2) / nu)
            else:
                Z = rng_x.standard_normal(shape)
            if dirac:
                Z = np.broadcast_to(Z, (n, M, b, d))
            if self._scaled:
                X = Z * scale[..., None, None]
            elif float(self.scales[0]) == 1.0:
                X = Z                                  # a · 1 = a exactly: no pass over the chunk's features
            elif dirac:
                X = Z * float(self.scales[0])
            else:
                Z *= float(self.scales[0])             # in place: the same products, no second (n, M, b, d) array
                X = Z
            z = np.einsum("nmbd,nmd->nmb", X, optimum)
            if self.task == "least_squares":
                eshape = (n, 1 if dirac else M, b)
                if tails.get("on") in ("noise", "both"):
                    nu = tails["df"]
                    eps = rng_y.standard_t(nu, eshape) * np.sqrt((nu - 2) / nu)
                else:
                    eps = rng_y.standard_normal(eshape)
                y = z + (self.noises[None, :, None] if self._noisy else float(self.noises[0])) * eps
            else:
                from scipy.special import expit     # here: a least-squares stream never imports scipy.special
                y = (rng_y.random((n, M, b)) < expit(z)).astype(np.float64)
            yield Chunk(t0=t0, X=np.ascontiguousarray(X), y=y, optimum=None if dirac else optimum,
                        scale=scale if self._scaled and not dirac else None,
                        noise=np.broadcast_to(self.noises, (n, M)).copy() if self._noisy and not dirac else None)
