"""Temporal drift schedules: how the adversary moves the optimum over time.

The synthetic adversary (:class:`~streamfl.generators.synthetic.SyntheticStream`)
places client m's optimum at x*_{t,m} = c_t + ζ_t δ_m. A schedule moves the
centre c_t (units: model-parameter units, per step). Schedules compose in a
fixed order, so a list of them is unambiguous:

1. ``abrupt`` replaces the base centre by a fresh random point of the same
   norm at each switch step;
2. ``rotation`` rotates the centre in a fixed random 2-D plane;
3. ``linear``, ``periodic`` and ``random_walk`` add displacements;
4. ``adaptive`` moves every client's optimum away from that client's current
   model (it needs the learner's models, so the stream becomes step-by-step).

Every schedule draws from its own seeded generator, so the path is identical
for every chunking of the stream and on every replay.

Steps count from 1, as the rows of metrics.csv and the plots' time axes do
(t = 1..T). A step the user names is the first step the change is in effect:
``abrupt`` with ``at: [1200]`` gives the new optimum to step t = 1,200 and
every later step (t = 1,199 still has the old one); a covariate shift ``at``
and a heterogeneity ramp's ``start``/``end`` likewise. Continuous motions
(``rotation``, ``linear``, ``periodic``, ``random_walk``) are functions of
the steps elapsed since the first, e = t − 1, so step 1 sees the initial
optimum and step t has moved by e steps' worth (their methods take e). A
client with ``delay`` δ runs a schedule δ·m steps late: client m switches at
t = at + δ·m and its elapsed time is max(t − 1 − δ·m, 0).

Client-specific drift: every schedule but ``adaptive`` takes ``clients`` (the
client indices it moves; default all), ``delay`` (client m runs the schedule
``delay``·m steps late, so clients drift at different times) and ``speeds``
(a per-client multiplier of the motion: of the speed for ``linear`` and
``rotation``, of the amplitude for ``periodic``, of the step for
``random_walk``). A schedule with any of them moves each selected client's
optimum instead of the shared centre; the population loss stays exact because
it only needs the optima. ``random_walk`` accepts no ``delay`` and ``abrupt``
no ``speeds``.

>>> import numpy as np
>>> s = Linear(speed=0.5)
>>> s.reset(np.random.default_rng(0), dim=2)
>>> s.displacement(np.array([0, 2])).round(3).shape      # elapsed steps e = t − 1
(2, 2)
"""

from __future__ import annotations

import numpy as np


def _unit(rng: np.random.Generator, dim: int) -> np.ndarray:
    v = rng.standard_normal(dim)
    return v / np.linalg.norm(v)


class Schedule:
    """Base class. ``reset`` is called at the start of every replay.

    ``clients``, ``delay`` and ``speeds`` (see the module docstring) are set
    by :meth:`per_client`; by default a schedule moves the shared centre.
    """

    order = 3
    clients: list[int] | None = None
    delay: int = 0
    speeds: list[float] | None = None

    def reset(self, rng: np.random.Generator, dim: int, c0: np.ndarray | None = None) -> None:
        self.rng, self.dim = rng, dim

    def per_client(self, clients=None, delay: int = 0, speeds=None) -> "Schedule":
        """Make the schedule client-specific; returns ``self``.

        Parameters
        ----------
        clients : list of int or None
            Client indices (0-based) the schedule moves; ``None`` = all.
        delay : int
            Client m sees the schedule at step t − delay·m (≥ 0).
        speeds : list of float or None
            One multiplier per client index (length M) or per listed client.

        Raises
        ------
        ValueError
            For a negative delay, a negative or repeated client index, or a
            non-finite speed.
        """
        name = type(self).__name__
        if clients is not None and (len(set(clients)) != len(clients) or any(int(c) < 0 for c in clients)):
            raise ValueError(f"The 'clients' parameter of {name} must list distinct client indices >= 0. "
                             f"Got {clients!r} instead.")
        if not (isinstance(delay, (int, np.integer)) and delay >= 0):
            raise ValueError(f"The 'delay' parameter of {name} must be an int >= 0. Got {delay!r} instead.")
        if speeds is not None and not np.all(np.isfinite(np.asarray(speeds, dtype=float))):
            raise ValueError(f"The 'speeds' parameter of {name} must be finite floats. Got {speeds!r} instead.")
        self.clients = None if clients is None else [int(c) for c in clients]
        self.delay = int(delay)
        self.speeds = None if speeds is None else [float(v) for v in speeds]
        return self

    @property
    def client_specific(self) -> bool:
        """True when the schedule moves clients individually (not the shared centre)."""
        return self.clients is not None or self.delay > 0 or self.speeds is not None

    def client_factors(self, n_clients: int) -> tuple[np.ndarray, np.ndarray]:
        """(selected (M,) bool, multiplier (M,) float) for M clients.

        Raises ValueError when a listed client does not exist or ``speeds`` has
        the wrong length.
        """
        name = type(self).__name__
        selected = np.ones(n_clients, bool)
        if self.clients is not None:
            if max(self.clients) >= n_clients:
                raise ValueError(f"{name}: client index {max(self.clients)} does not exist "
                                 f"(there are {n_clients} clients, 0..{n_clients - 1}).")
            selected[:] = False
            selected[self.clients] = True
        mult = np.ones(n_clients)
        if self.speeds is not None:
            if len(self.speeds) == n_clients:
                mult[:] = self.speeds
            elif self.clients is not None and len(self.speeds) == len(self.clients):
                mult[self.clients] = self.speeds
            else:
                raise ValueError(f"{name}: 'speeds' has {len(self.speeds)} values; give one per client "
                                 f"({n_clients}) or one per listed client.")
        return selected, mult


class Abrupt(Schedule):
    """Abrupt switches: at each step in ``at`` the centre jumps to a new random
    point with the same norm as the initial centre.

    Parameters
    ----------
    at : list of int
        Steps t ≥ 1 (counted from 1, as metrics.csv's ``t``) from which each new
        centre is in effect: with ``at=[1200]`` steps 1..1199 have the initial
        centre and steps 1200..T the new one.

    Examples
    --------
    >>> a = Abrupt([3])
    >>> a.reset(np.random.default_rng(0), dim=2, c0=np.array([1.0, 0.0]))
    >>> c = a.base(np.array([1, 2, 3, 4]))                  # steps t
    >>> bool((c[1] == c[0]).all()), bool((c[2] == c[1]).all()), bool((c[3] == c[2]).all())
    (True, False, True)
    """

    order = 1

    def __init__(self, at: list[int]):
        if not at or any(int(a) < 1 for a in at):
            raise ValueError(f"The 'at' parameter of Abrupt must be a non-empty list of steps >= 1 (steps count "
                             f"from 1, as metrics.csv's t). Got {at!r} instead.")
        self.at = sorted(int(a) for a in at)

    def reset(self, rng, dim, c0=None):
        super().reset(rng, dim)
        c0 = np.zeros(dim) if c0 is None else c0
        r = np.linalg.norm(c0)
        self.centres = np.stack([c0] + [r * _unit(rng, dim) for _ in self.at])

    def base(self, ts: np.ndarray) -> np.ndarray:
        """Base centre at steps ``ts`` (n,) counted from 1 (the last switch with at ≤ t), shape (n, d)."""
        return self.centres[np.searchsorted(np.asarray(self.at), ts, side="right")]


class Rotation(Schedule):
    """Gradual rotation of the centre by ``speed`` radians per step in a fixed
    random plane through the origin (the norm of the centre is preserved)."""

    order = 2

    def __init__(self, speed: float):
        if not np.isfinite(speed):
            raise ValueError(f"The 'speed' parameter of Rotation must be a finite float. Got {speed!r} instead.")
        self.speed = float(speed)

    def reset(self, rng, dim, c0=None):
        super().reset(rng, dim)
        if dim < 2:
            raise ValueError("Rotation drift needs a feature dimension of at least 2.")
        u = _unit(rng, dim)
        v = rng.standard_normal(dim)
        v -= (v @ u) * u
        self.u, self.v = u, v / np.linalg.norm(v)

    def rotate(self, ts: np.ndarray, c: np.ndarray) -> np.ndarray:
        """Rotate centres ``c`` (n, d) by angle speed·e after ``ts`` = e = t − 1 elapsed steps, shape (n, d)."""
        th = self.speed * ts
        # row by row (a reduction per row), not a matrix-vector product: BLAS rounds a row differently
        # with the number of rows, and the centres must not depend on how many steps a chunk holds
        a, b = (c * self.u).sum(axis=-1), (c * self.v).sum(axis=-1)
        cos, sin = np.cos(th), np.sin(th)
        na, nb = cos * a - sin * b, sin * a + cos * b
        return c + np.outer(na - a, self.u) + np.outer(nb - b, self.v)


class Linear(Schedule):
    """Linear motion: the centre moves ``speed`` units per step along a fixed
    random direction."""

    def __init__(self, speed: float):
        if not np.isfinite(speed):
            raise ValueError(f"The 'speed' parameter of Linear must be a finite float. Got {speed!r} instead.")
        self.speed = float(speed)

    def reset(self, rng, dim, c0=None):
        super().reset(rng, dim)
        self.direction = _unit(rng, dim)

    def displacement(self, ts: np.ndarray) -> np.ndarray:
        """speed·e along the direction after ``ts`` = e = t − 1 elapsed steps, shape (n, d)."""
        return np.outer(self.speed * ts, self.direction)


class Periodic(Schedule):
    """Periodic drift: A·sin(2π e / P) along a fixed random direction, e = t − 1 the elapsed steps."""

    def __init__(self, amplitude: float, period: float):
        if not period > 0:
            raise ValueError(f"The 'period' parameter of Periodic must be a float > 0. Got {period!r} instead.")
        self.amplitude, self.period = float(amplitude), float(period)

    def reset(self, rng, dim, c0=None):
        super().reset(rng, dim)
        self.direction = _unit(rng, dim)

    def displacement(self, ts: np.ndarray) -> np.ndarray:
        return np.outer(self.amplitude * np.sin(2 * np.pi * ts / self.period), self.direction)


class RandomWalk(Schedule):
    """Gaussian random walk: each step adds N(0, (step²/d) I), so the expected
    squared move per step is step²."""

    def __init__(self, step: float):
        if not step >= 0:
            raise ValueError(f"The 'step' parameter of RandomWalk must be a float >= 0. Got {step!r} instead.")
        self.step = float(step)

    def reset(self, rng, dim, c0=None):
        super().reset(rng, dim)
        self.position = np.zeros(dim)

    def displacement(self, ts: np.ndarray) -> np.ndarray:
        """The walk's position after ``ts`` = e = t − 1 elapsed steps (in order), shape (n, d)."""
        # Steps arrive in order; move for every e > 0 (step 1 is the start).
        moves = self.rng.standard_normal((len(ts), self.dim)) * (self.step / np.sqrt(self.dim))
        moves[ts == 0] = 0.0
        # added to the last position one step at a time: the same path whatever the chunk size
        path = np.cumsum(np.concatenate([self.position[None], moves]), axis=0)[1:]
        self.position = path[-1].copy()
        return path


class Adaptive(Schedule):
    """Adaptive adversary: before each step it sees every client's model x_{t,m}
    (FedSEA's, the main learner's: the baselines run on the stream tuned
    against FedSEA) and moves the optima by ``budget`` units per client and
    step (root mean square over clients).

    ``target`` chooses what the budget buys:

    * ``own`` (default): each client's optimum moves directly away from that
      client's own model, u_m = (x*_m − x_m)/‖x*_m − x_m‖. Between rounds
      the client models differ, so most of this budget spreads the clients
      apart (spatial heterogeneity ζ²) rather than moving their mean;
    * ``centre``: every optimum moves by the same vector, away from the
      average model: budget·(x̄* − x̄)/‖x̄* − x̄‖ — pure temporal drift (K²),
      the spread of the optima is unchanged;
    * ``spread``: the centred part of the ``own`` directions, u_m − ū,
      rescaled to RMS budget — the mean optimum does not move (for least
      squares K_t² = 0 from this part), only ζ² grows;
    * ``both``: ``centre`` and ``spread`` with budget/√2 each (RMS budget).

    This makes the stream step-by-step (it depends on the learner).

    Examples
    --------
    >>> import numpy as np
    >>> a = Adaptive(1.0, target="centre")
    >>> a.reset(np.random.default_rng(0), dim=2)
    >>> a.move(np.array([[1.0, 0.0], [3.0, 0.0]]), np.zeros((2, 2))).tolist()
    [[1.0, 0.0], [1.0, 0.0]]
    """

    order = 4
    TARGETS = ("own", "centre", "spread", "both")

    def __init__(self, budget: float, target: str = "own"):
        if not budget >= 0:
            raise ValueError(f"The 'budget' parameter of Adaptive must be a float >= 0. Got {budget!r} instead.")
        if target not in self.TARGETS:
            raise ValueError(f"The 'target' parameter of Adaptive must be one of {self.TARGETS}. Got {target!r} instead.")
        self.budget = float(budget)
        self.target = target

    def _away(self, diff: np.ndarray) -> np.ndarray:
        norm = np.linalg.norm(diff, axis=-1, keepdims=True)
        fallback = np.broadcast_to(_unit(self.rng, self.dim), diff.shape)
        return np.where(norm > 1e-12, diff / np.maximum(norm, 1e-300), fallback)

    def move(self, optima: np.ndarray, models: np.ndarray) -> np.ndarray:
        """Per-client displacement, shape (M, d), for optima and models (M, d)."""
        if self.target == "own":
            return self.budget * self._away(optima - models)
        out = np.zeros_like(optima)
        share = self.budget if self.target != "both" else self.budget / np.sqrt(2.0)
        if self.target in ("centre", "both"):
            out += share * self._away(optima.mean(axis=0) - models.mean(axis=0))[None, :]
        if self.target in ("spread", "both"):
            own = self._away(optima - models)
            spread = own - own.mean(axis=0)
            rms = np.sqrt(np.mean(np.sum(spread * spread, axis=1)))
            if rms > 1e-12:
                out += share * spread / rms
        return out


class HeterogeneityChange:
    """Time-varying spatial heterogeneity: ζ_t = ζ · h(t) ≥ 0.

    * ``ramp``: h goes linearly from 1 at step ``start`` to ``to``/ζ at step
      ``end`` (constant before and after), i.e. ζ_t moves from ζ at
      t = ``start`` to ``to`` at t = ``end``; with ``end == start`` ζ_t is
      ``to`` from t = ``start`` on;
    * ``periodic``: ζ_t = max(0, ζ + amplitude · sin(2π (t − 1) / period)).

    Steps t count from 1, as metrics.csv's ``t``.

    Parameters
    ----------
    kind : {"ramp", "periodic"}
    start, end : int
    to : float
        ζ at ``end`` (ramp), model units, ≥ 0.
    amplitude, period : float

    Examples
    --------
    >>> h = HeterogeneityChange("ramp", start=1, end=11, to=2.0)
    >>> h.zeta(np.array([1, 6, 11, 21]), 1.0).tolist()
    [1.0, 1.5, 2.0, 2.0]
    """

    def __init__(self, kind: str, start: int = 0, end: int = 0, to: float = 0.0, amplitude: float = 0.0,
                 period: float = 1.0):
        if kind not in ("ramp", "periodic"):
            raise ValueError(f"The 'kind' parameter of HeterogeneityChange must be 'ramp' or 'periodic'. Got {kind!r} instead.")
        if kind == "ramp" and not (0 <= start <= end and to >= 0):
            raise ValueError(f"HeterogeneityChange ramp needs 0 <= start <= end and to >= 0. Got start={start}, end={end}, to={to}.")
        if kind == "periodic" and not period > 0:
            raise ValueError(f"The 'period' parameter of HeterogeneityChange must be > 0. Got {period!r} instead.")
        self.kind, self.start, self.end, self.to = kind, int(start), int(end), float(to)
        self.amplitude, self.period = float(amplitude), float(period)

    def zeta(self, ts: np.ndarray, zeta: float) -> np.ndarray:
        """ζ_t at steps ``ts`` (n,), counted from 1, for base ζ, shape (n,)."""
        ts = np.asarray(ts, dtype=np.float64)
        if self.kind == "ramp":
            frac = np.clip((ts - self.start) / max(self.end - self.start, 1), 0.0, 1.0)
            if self.end == self.start:
                frac = (ts >= self.start).astype(np.float64)
            return zeta + (self.to - zeta) * frac
        return np.maximum(0.0, zeta + self.amplitude * np.sin(2 * np.pi * (ts - 1) / self.period))


class CovariateShift:
    """Covariate shift: the clients' feature scale jumps by ``factors`` at the steps ``at``.

    Features become a = s_m f_{t,m} z: the feature distribution moves while
    P(y | a) (the optimum) does not. F stays exact (F(x) = ½ (s f)² ‖x − w‖²
    + ½ σ² for least squares, the Stein form of the logistic loss with scale
    s f); piecewise-constant factors keep the logistic hindsight comparator
    to a few distinct scales.

    Parameters
    ----------
    at : list of int
        Steps t ≥ 1 (counted from 1, as metrics.csv's ``t``) from which each
        factor is in effect.
    factors : list of float
        The factor from each step of ``at`` on (> 0; 1 before the first).
    clients : list of int or None
        Clients affected (default all).

    Examples
    --------
    >>> c = CovariateShift(at=[3], factors=[3.0], clients=[1])
    >>> c.factor(np.arange(1, 5), 2).tolist()                # steps t = 1..4
    [[1.0, 1.0], [1.0, 1.0], [1.0, 3.0], [1.0, 3.0]]
    """

    def __init__(self, at: list[int], factors: list[float], clients: list[int] | None = None):
        if not at or len(at) != len(factors):
            raise ValueError(f"CovariateShift needs as many 'factors' as 'at' steps (at least one). Got at={at!r}, factors={factors!r}.")
        if any(int(a) < 1 for a in at) or list(at) != sorted(at):
            raise ValueError(f"The 'at' parameter of CovariateShift must be increasing steps >= 1 (steps count from 1, "
                             f"as metrics.csv's t). Got {at!r} instead.")
        if not all(np.isfinite(f) and f > 0 for f in factors):
            raise ValueError(f"The 'factors' parameter of CovariateShift must be floats > 0. Got {factors!r} instead.")
        self.at = [int(a) for a in at]
        self.factors = [1.0] + [float(f) for f in factors]
        self.clients = None if clients is None else [int(c) for c in clients]

    def factor(self, ts: np.ndarray, n_clients: int) -> np.ndarray:
        """Feature-scale multipliers at steps ``ts`` (counted from 1), shape (n, M)."""
        f = np.asarray(self.factors)[np.searchsorted(np.asarray(self.at), ts, side="right")]
        out = np.ones((len(ts), n_clients))
        cols = slice(None) if self.clients is None else self.clients
        if self.clients is not None and max(self.clients) >= n_clients:
            raise ValueError(f"CovariateShift: client index {max(self.clients)} does not exist "
                             f"(there are {n_clients} clients).")
        out[:, cols] = f[:, None]
        return out

    @property
    def max_factor(self) -> float:
        return max(self.factors)


SCHEDULES = {
    "abrupt": Abrupt,
    "rotation": Rotation,
    "linear": Linear,
    "periodic": Periodic,
    "random_walk": RandomWalk,
    "adaptive": Adaptive,
}
