"""The synthetic Stochastically Extended Adversary (SEA) stream.

FedSEA (§2, "Federated Learning in SEA environment"): at every step t the
adversary picks a distribution D_{t,m} for every client m, and client m sees
ξ_{t,m} ~ D_{t,m}. Here D_{t,m} is a linear model with Gaussian features,
a ~ N(0, s² I_d), whose Bayes-optimal parameter is

    x*_{t,m} = c_t + ζ δ_m,

* c_t — the centre, moved over time by the drift schedules (temporal
  heterogeneity; :mod:`streamfl.generators.schedules`); ‖c_0‖ = ``radius``;
* δ_m — fixed client offsets, centred across clients and scaled so that
  (1/M) Σ_m ‖δ_m‖² = 1, so ``heterogeneity`` ζ is the root-mean-square
  distance of the client optima from their mean (spatial heterogeneity). For
  least squares FedSEA's ζ_t (eq. (6)) then equals s² ζ exactly.

Labels: least squares y = a·x* + σ ε with ε ~ N(0, 1) (``noise`` σ);
logistic y ~ Bernoulli(sigmoid(a·x*)) — the label noise is set by ‖x*‖ and
σ is not used.

The stream knows x*_{t,m} and the population loss F_{t,m}
(:mod:`streamfl.generators.population`) and exposes both.
"""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np
from scipy.special import expit

from .base import Chunk, Stream
from .population import LeastSquaresPopulation, LogisticPopulation
from .schedules import Abrupt, Adaptive, Rotation, Schedule


def _check(name: str, value, ok: bool, what: str):
    if not ok:
        raise ValueError(f"The '{name}' parameter of SyntheticStream must be {what}. Got {value!r} instead.")


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
    noise : float
        σ ≥ 0, label-noise standard deviation (least squares only).
    heterogeneity : float
        ζ ≥ 0, RMS distance of client optima from their mean (model units).
    radius : float
        ‖c_0‖ ≥ 0, norm of the initial centre of the optima.
    feature_scale : float
        s > 0, standard deviation of each feature.
    drift : sequence of Schedule
        Temporal drift; empty means a stationary adversary.
    seed : int
        Seeds everything; the same seed replays the same stream.

    Attributes
    ----------
    notes_ : list of str
        Abrupt drift steps at or after ``n_steps`` (they have no effect).

    Examples
    --------
    >>> from streamfl.generators.schedules import Abrupt
    >>> s = SyntheticStream("least_squares", n_clients=3, n_features=2, n_steps=5,
    ...                     drift=[Abrupt([2])], seed=1)
    >>> c = next(s.chunks())
    >>> c.X.shape, c.y.shape, c.optimum.shape
    ((5, 3, 1, 2), (5, 3, 1), (5, 3, 2))
    >>> bool((c.optimum[1] == c.optimum[0]).all()), bool((c.optimum[2] == c.optimum[1]).all())
    (True, False)
    """

    def __init__(self, task: str = "logistic", *, n_clients: int = 8, n_features: int = 10,
                 n_steps: int = 1000, batch_size: int = 1, noise: float = 1.0,
                 heterogeneity: float = 0.0, radius: float = 1.0, feature_scale: float = 1.0,
                 drift: Sequence[Schedule] = (), seed: int = 0):
        _check("task", task, task in ("least_squares", "logistic"), "'least_squares' or 'logistic'")
        for name, v in (("n_clients", n_clients), ("n_features", n_features), ("n_steps", n_steps), ("batch_size", batch_size)):
            _check(name, v, isinstance(v, (int, np.integer)) and v >= 1, "an int >= 1")
        for name, v in (("noise", noise), ("heterogeneity", heterogeneity), ("radius", radius)):
            _check(name, v, np.isfinite(v) and v >= 0, "a float >= 0")
        _check("feature_scale", feature_scale, np.isfinite(feature_scale) and feature_scale > 0, "a float > 0")
        self.task = task
        self.n_clients, self.n_features, self.n_steps, self.batch_size = n_clients, n_features, n_steps, batch_size
        self.noise, self.heterogeneity, self.radius, self.feature_scale = noise, heterogeneity, radius, feature_scale
        self.drift = sorted(drift, key=lambda s: s.order)
        self.seed = seed
        self.adaptive = any(isinstance(s, Adaptive) for s in self.drift)
        late = [a for s in self.drift if isinstance(s, Abrupt) for a in s.at if a >= n_steps]
        self.notes_ = [f"abrupt drift at step{'s' if len(late) > 1 else ''} {', '.join(map(str, late))} "
                       f"{'come' if len(late) > 1 else 'comes'} after the last step ({n_steps - 1}; steps count "
                       f"from 0): no effect"] if late else []
        self.n_classes = 1
        if task == "least_squares":
            self.population = LeastSquaresPopulation(n_features, feature_scale=feature_scale, noise=noise)
        else:
            self.population = LogisticPopulation(n_features, feature_scale=feature_scale)
        self._models = None

    def observe(self, models: np.ndarray) -> None:
        self._models = np.asarray(models).reshape(self.n_clients, self.n_features)

    def _centres(self, ts: np.ndarray, c0: np.ndarray) -> np.ndarray:
        c = np.tile(c0, (len(ts), 1))
        for s in self.drift:
            if isinstance(s, Abrupt):
                c = s.base(ts)
            elif isinstance(s, Rotation):
                c = s.rotate(ts, c)
            elif not isinstance(s, Adaptive):
                c = c + s.displacement(ts)
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
        offsets = self.heterogeneity * delta
        for s, r in zip(self.drift, rng_s):
            s.reset(r, d, c0)
        adaptive = next((s for s in self.drift if isinstance(s, Adaptive)), None)
        push = np.zeros((M, d))
        previous = None
        step = 1 if adaptive else chunk_size
        for t0 in range(0, self.n_steps, step):
            n = min(step, self.n_steps - t0)
            ts = np.arange(t0, t0 + n)
            optimum = self._centres(ts, c0)[:, None, :] + offsets
            if adaptive is not None:
                if previous is not None and self._models is not None:
                    push += adaptive.move(previous, self._models)
                optimum = optimum + push
                previous = optimum[0]
            X = self.feature_scale * rng_x.standard_normal((n, M, b, d))
            z = np.einsum("nmbd,nmd->nmb", X, optimum)
            if self.task == "least_squares":
                y = z + self.noise * rng_y.standard_normal((n, M, b))
            else:
                y = (rng_y.random((n, M, b)) < expit(z)).astype(np.float64)
            yield Chunk(t0=t0, X=X, y=y, optimum=optimum)
