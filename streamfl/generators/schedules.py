"""Temporal drift schedules: how the adversary moves the optimum over time.

The synthetic adversary (:class:`~streamfl.generators.synthetic.SyntheticStream`)
places client m's optimum at x*_{t,m} = c_t + ζ δ_m. A schedule moves the
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

>>> import numpy as np
>>> s = Linear(speed=0.5)
>>> s.reset(np.random.default_rng(0), dim=2)
>>> s.displacement(np.array([0, 2])).round(3).shape
(2, 2)
"""

from __future__ import annotations

import numpy as np


def _unit(rng: np.random.Generator, dim: int) -> np.ndarray:
    v = rng.standard_normal(dim)
    return v / np.linalg.norm(v)


class Schedule:
    """Base class. ``reset`` is called at the start of every replay."""

    order = 3

    def reset(self, rng: np.random.Generator, dim: int, c0: np.ndarray | None = None) -> None:
        self.rng, self.dim = rng, dim


class Abrupt(Schedule):
    """Abrupt switches: at each step in ``at`` the centre jumps to a new random
    point with the same norm as the initial centre.

    Parameters
    ----------
    at : list of int
        Steps (0-based) at which the distribution switches.
    """

    order = 1

    def __init__(self, at: list[int]):
        if not at or any(int(a) < 0 for a in at):
            raise ValueError(f"The 'at' parameter of Abrupt must be a non-empty list of steps >= 0. Got {at!r} instead.")
        self.at = sorted(int(a) for a in at)

    def reset(self, rng, dim, c0=None):
        super().reset(rng, dim)
        c0 = np.zeros(dim) if c0 is None else c0
        r = np.linalg.norm(c0)
        self.centres = np.stack([c0] + [r * _unit(rng, dim) for _ in self.at])

    def base(self, ts: np.ndarray) -> np.ndarray:
        """Base centre at steps ``ts`` (n,), shape (n, d)."""
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
        """Rotate centres ``c`` (n, d) by angle speed·t, shape (n, d)."""
        th = self.speed * ts
        a, b = c @ self.u, c @ self.v
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
        return np.outer(self.speed * ts, self.direction)


class Periodic(Schedule):
    """Periodic drift: A·sin(2π t / P) along a fixed random direction."""

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
        # Steps arrive in order; move for every t > 0.
        moves = self.rng.standard_normal((len(ts), self.dim)) * (self.step / np.sqrt(self.dim))
        moves[ts == 0] = 0.0
        path = self.position + np.cumsum(moves, axis=0)
        self.position = path[-1].copy()
        return path


class Adaptive(Schedule):
    """Adaptive adversary: before each step it sees every client's model x_{t,m}
    and moves that client's optimum ``budget`` units directly away from it.

    This makes the stream step-by-step (it depends on the learner)."""

    order = 4

    def __init__(self, budget: float):
        if not budget >= 0:
            raise ValueError(f"The 'budget' parameter of Adaptive must be a float >= 0. Got {budget!r} instead.")
        self.budget = float(budget)

    def move(self, optima: np.ndarray, models: np.ndarray) -> np.ndarray:
        """Per-client displacement, shape (M, d), for optima and models (M, d)."""
        diff = optima - models
        norm = np.linalg.norm(diff, axis=1, keepdims=True)
        fallback = np.broadcast_to(_unit(self.rng, self.dim), diff.shape)
        direction = np.where(norm > 1e-12, diff / np.maximum(norm, 1e-300), fallback)
        return self.budget * direction


SCHEDULES = {
    "abrupt": Abrupt,
    "rotation": Rotation,
    "linear": Linear,
    "periodic": Periodic,
    "random_walk": RandomWalk,
    "adaptive": Adaptive,
}
