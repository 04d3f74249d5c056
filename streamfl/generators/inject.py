"""Drift injected into any stream (semi-synthetic drift).

Real tables rarely drift on cue. :class:`InjectedDrift` wraps a stream and
applies *injectors* to every chunk it yields, at known steps, so that
learners can be measured on real features with a drift of known time, speed
and kind:

* :class:`CovariateRotation` — covariate shift by rotating the features in a
  2-D plane;
* :class:`CovariateScale` — covariate shift by rescaling half the features;
* :class:`LabelFlip` — concept drift by flipping labels.

Injectors are vectorised over the chunk's steps and depend only on the global
step and their seed, so a stream gives the same data whatever the chunk size
and on every replay.

Steps count from 1, as metrics.csv's ``t`` and the plots' time axes do: an
injection with ``start: 2000`` first acts at step t = 2,000 (step 1,999 is
untouched); a ramp reaches its full change at t = ``end``; a label flip acts
on the steps start ≤ t < end.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Iterator, Sequence

import numpy as np

from streamfl.generators.base import Chunk, Stream
from streamfl.generators.tabular import _check_float, _check_int, _param_error

__all__ = ["Injector", "CovariateRotation", "CovariateScale", "LabelFlip", "InjectedDrift"]

_MASK64 = (1 << 64) - 1


def _hash_uniform(seed: int, index: np.ndarray) -> np.ndarray:
    """Uniform [0, 1) numbers that are a pure function of (seed, index) (SplitMix64)."""
    key = np.uint64((seed * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) & _MASK64)
    z = index.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + key
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * 2.0**-53


def _free_features(stream: Stream) -> np.ndarray:
    """Indices of the features an injector may touch (all but a trailing intercept)."""
    d = stream.n_features
    return np.arange(d - 1 if getattr(stream, "has_intercept", False) else d)


class Injector(ABC):
    """Base class of drift injectors.

    Subclasses implement ``_prepare`` (draw their random choices for a given
    stream, at wrap time), ``_apply`` (modify a chunk's copied arrays in place)
    and ``_transform_optimum``.
    """

    start: int

    def _ramp(self, t: np.ndarray) -> np.ndarray:
        """0 before step ``start``, linear to 1 at step ``end``, 1 afterwards; a switch if end == start
        (t counts from 1)."""
        if self.end == self.start:
            return (t >= self.start).astype(np.float64)
        return np.clip((t - self.start) / (self.end - self.start), 0.0, 1.0)

    @abstractmethod
    def _prepare(self, stream: Stream) -> dict: ...

    @abstractmethod
    def _active(self, first: int, last: int) -> bool:
        """Whether the injector changes anything on the steps first .. last (counted from 1, inclusive)."""

    @abstractmethod
    def _apply(self, state: dict, t: np.ndarray, X: np.ndarray, y: np.ndarray) -> None: ...

    def _transform_optimum(self, state: dict, t: np.ndarray, optimum: np.ndarray) -> np.ndarray | None:
        return optimum

    changes_features = True
    kind: str            # the injector's name in a config's source.inject

    def _late(self, n_steps: int) -> str | None:
        """A one-line note if this injector starts, or ends its ramp, after the last step of ``n_steps``."""
        name = self.kind
        if self.start > n_steps:
            return (f"{name} starts at step {self.start}, after the last step ({n_steps}; steps count from 1): "
                    f"no effect")
        end = getattr(self, "end", None)
        if self.changes_features and end is not None and end > n_steps:   # a ramp (label flips switch)
            share = float(self._ramp(np.array([n_steps]))[0])
            return (f"{name} ramps until step {end}, after the last step ({n_steps}): it reaches "
                    f"{share:.0%} of its full change")
        return None

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


def _check_window(owner: str, start, end, allow_none_end: bool = False) -> tuple[int, int | None]:
    start = _check_int(start, "start", owner, 1, "an int >= 1 (steps count from 1, as metrics.csv's t)")
    if end is None and allow_none_end:
        return start, None
    what = f"an int >= start ({start})" + (" or None" if allow_none_end else "")
    end = _check_int(end, "end", owner, start, what)
    return start, end


class CovariateRotation(Injector):
    """Rotate the features in a 2-D plane by an angle ramping from 0 to ``angle``.

    The rotation angle at step t is ``angle · clip((t − start)/(end − start), 0, 1)``
    (a switch at ``start`` when ``end == start``) and stays at ``angle`` after
    ``end``. The plane is spanned by two orthonormal directions u, v drawn at
    random (seeded) among the non-intercept features, and the rotation takes
    u towards v: x ↦ x + (cos θ − 1)(⟨x,u⟩u + ⟨x,v⟩v) + sin θ (⟨x,u⟩v − ⟨x,v⟩u).
    Norms are preserved, and so is a linear model's fit once its parameter is
    rotated the same way (which is how the stream's ``optimum`` is updated).

    Parameters
    ----------
    start : int
        ≥ 1, first step of the ramp (steps count from 1); the angle is 0 up to
        this step and, for ``end == start``, the full angle from it on.
    end : int
        ≥ start, step at which the full angle is reached.
    angle : float
        Final angle in radians (finite).
    seed : int
        ≥ 0, seeds the choice of plane.
    plane : tuple of two ints or None
        Rotate in the coordinate plane of these two feature indices instead,
        taking feature ``plane[0]`` towards ``plane[1]``; neither may be the
        intercept.

    Raises
    ------
    ValueError
        For invalid parameters, or (when wrapped) a stream with fewer than 2
        non-intercept features or a ``plane`` index out of range.

    Examples
    --------
    >>> import numpy as np
    >>> rot = CovariateRotation(start=1, end=1, angle=np.pi / 2, plane=(0, 1))
    >>> rot
    CovariateRotation(start=1, end=1, angle=1.5707963267948966, seed=0, plane=(0, 1))
    """

    kind = "covariate_rotation"

    def __init__(self, start: int, end: int, angle: float, seed: int = 0, plane: tuple[int, int] | None = None):
        owner = "CovariateRotation"
        self.start, self.end = _check_window(owner, start, end)
        self.angle = _check_float(angle, "angle", owner)
        self.seed = _check_int(seed, "seed", owner, 0)
        if plane is not None:
            ok = isinstance(plane, (tuple, list)) and len(plane) == 2
            if ok:
                try:
                    plane = tuple(_check_int(i, "plane", owner, 0) for i in plane)
                except ValueError:
                    ok = False
            if not ok or plane[0] == plane[1]:
                raise _param_error("plane", owner, "a pair of two distinct feature indices >= 0 or None", plane)
        self.plane = plane

    def _prepare(self, stream: Stream) -> dict:
        free = _free_features(stream)
        if len(free) < 2:
            raise ValueError(
                f"CovariateRotation needs at least 2 non-intercept features; the stream has {len(free)}."
            )
        d = stream.n_features
        u, v = np.zeros(d), np.zeros(d)
        if self.plane is not None:
            for i in self.plane:
                if i >= len(free):
                    raise ValueError(
                        f"CovariateRotation plane index {i} is out of range; the non-intercept features are "
                        f"0..{len(free) - 1}."
                    )
            u[self.plane[0]], v[self.plane[1]] = 1.0, 1.0
        else:
            q, _ = np.linalg.qr(np.random.default_rng(self.seed).standard_normal((len(free), 2)))
            u[free], v[free] = q[:, 0], q[:, 1]
        return {"u": u, "v": v}

    def _active(self, first: int, last: int) -> bool:
        return self.angle != 0 and last >= self.start

    def _rotate(self, state: dict, theta: np.ndarray, Z: np.ndarray) -> None:
        """Rotate Z (..., d) in place; theta broadcasts against Z[..., 0]."""
        u, v = state["u"], state["v"]
        # a reduction per row, not BLAS (whose rounding varies with the number of rows, i.e. the chunk size)
        a, c = (Z * u).sum(axis=-1)[..., None], (Z * v).sum(axis=-1)[..., None]
        cos, sin = np.cos(theta)[..., None], np.sin(theta)[..., None]
        Z += (cos - 1.0) * (a * u + c * v) + sin * (a * v - c * u)

    def _apply(self, state, t, X, y) -> None:
        theta = (self.angle * self._ramp(t))[:, None, None]
        self._rotate(state, theta, X)

    def _transform_optimum(self, state, t, optimum):
        out = optimum.copy()
        self._rotate(state, (self.angle * self._ramp(t))[:, None], out)
        return out


class CovariateScale(Injector):
    """Multiply a random half of the features by a factor ramping from 1 to ``factor``.

    At step t the chosen features are multiplied by
    ``1 + (factor − 1) · clip((t − start)/(end − start), 0, 1)`` (a switch at
    ``start`` when ``end == start``). The chosen features are ``max(1, d'//2)``
    of the d' non-intercept features, drawn without replacement (seeded).

    Parameters
    ----------
    start : int
        ≥ 1, first step of the ramp (steps count from 1); the factor is 1 up
        to this step and, for ``end == start``, ``factor`` from it on.
    end : int
        ≥ start, step at which the full factor is reached.
    factor : float
        > 0, final multiplier.
    seed : int
        ≥ 0, seeds the choice of features.
    features : list of int or None
        Scale these feature indices instead (not the intercept).

    Raises
    ------
    ValueError
        For invalid parameters or (when wrapped) feature indices out of range.

    Examples
    --------
    >>> CovariateScale(start=10, end=20, factor=3.0).factor
    3.0
    """

    kind = "covariate_scale"

    def __init__(self, start: int, end: int, factor: float, seed: int = 0, features: Sequence[int] | None = None):
        owner = "CovariateScale"
        self.start, self.end = _check_window(owner, start, end)
        self.factor = _check_float(factor, "factor", owner, gt=0)
        self.seed = _check_int(seed, "seed", owner, 0)
        if features is not None:
            what = "a non-empty list of distinct feature indices >= 0 or None"
            if isinstance(features, (str, bytes)) or not isinstance(features, Sequence) or not features:
                raise _param_error("features", owner, what, features)
            try:
                features = [_check_int(i, "features", owner, 0) for i in features]
            except ValueError:
                raise _param_error("features", owner, what, features) from None
            if len(set(features)) != len(features):
                raise _param_error("features", owner, what, features)
        self.features = features

    def _prepare(self, stream: Stream) -> dict:
        free = _free_features(stream)
        if len(free) == 0:
            raise ValueError("CovariateScale needs at least 1 non-intercept feature; the stream has 0.")
        if self.features is not None:
            bad = [i for i in self.features if i >= len(free)]
            if bad:
                raise ValueError(
                    f"CovariateScale feature index {bad[0]} is out of range; the non-intercept features are "
                    f"0..{len(free) - 1}."
                )
            idx = np.array(sorted(self.features))
        else:
            k = max(1, len(free) // 2)
            idx = np.sort(np.random.default_rng(self.seed).choice(free, size=k, replace=False))
        return {"idx": idx}

    def _active(self, first: int, last: int) -> bool:
        return self.factor != 1 and last >= self.start

    def _scale(self, t: np.ndarray) -> np.ndarray:
        return 1.0 + (self.factor - 1.0) * self._ramp(t)

    def _apply(self, state, t, X, y) -> None:
        X[..., state["idx"]] *= self._scale(t)[:, None, None, None]

    def _transform_optimum(self, state, t, optimum):
        out = optimum.copy()
        out[..., state["idx"]] /= self._scale(t)[:, None, None]
        return out


class LabelFlip(Injector):
    """Flip a fraction of the labels on steps ``start ≤ t < end`` (concept drift).

    Logistic labels become 1 − y; softmax class c becomes (c + 1) mod K. A
    sample (t, m, i) is flipped when a uniform number that depends only on
    ``seed`` and the sample's position is below ``fraction``, so the same
    samples flip whatever the chunk size.

    Parameters
    ----------
    start : int
        ≥ 1, first flipped step (steps count from 1).
    end : int or None
        > start, first step no longer flipped; ``None`` flips to the end.
    fraction : float
        In (0, 1], expected share of samples flipped.
    seed : int
        ≥ 0.

    Raises
    ------
    ValueError
        For invalid parameters, or (when wrapped) a regression stream.

    Examples
    --------
    >>> LabelFlip(start=100, end=200, fraction=0.5)
    LabelFlip(start=100, end=200, fraction=0.5, seed=0)
    """

    changes_features = False

    kind = "label_flip"

    def __init__(self, start: int, end: int | None = None, fraction: float = 1.0, seed: int = 0):
        owner = "LabelFlip"
        self.start = _check_int(start, "start", owner, 1, "an int >= 1 (steps count from 1, as metrics.csv's t)")
        if end is not None:
            end = _check_int(end, "end", owner, self.start + 1, f"an int > start ({self.start}) or None")
        self.end = end
        self.fraction = _check_float(fraction, "fraction", owner, gt=0, le=1)
        self.seed = _check_int(seed, "seed", owner, 0)

    def _prepare(self, stream: Stream) -> dict:
        if stream.task not in ("logistic", "softmax"):
            raise ValueError(
                f"LabelFlip needs a classification stream (task 'logistic' or 'softmax'); "
                f"the wrapped stream has task {stream.task!r}."
            )
        return {"task": stream.task, "K": stream.n_classes, "M": stream.n_clients, "b": stream.batch_size}

    def _active(self, first: int, last: int) -> bool:
        return last >= self.start and (self.end is None or first < self.end)

    def _apply(self, state, t, X, y) -> None:
        on = t >= self.start
        if self.end is not None:
            on &= t < self.end
        flip = np.broadcast_to(on[:, None, None], y.shape)
        if self.fraction < 1.0:
            M, b = state["M"], state["b"]
            # the sample's position in the stream (step t − 1 counted from 0, client, sample): which samples
            # flip depends on the sample only
            index = ((t[:, None, None] - 1) * M + np.arange(M)[:, None]) * b + np.arange(b)
            flip = flip & (_hash_uniform(self.seed, index) < self.fraction)
        flipped = 1.0 - y if state["task"] == "logistic" else np.mod(y + 1.0, state["K"])
        np.copyto(y, flipped, where=flip)


class InjectedDrift(Stream):
    """A stream with drift injected into another stream's chunks.

    Every chunk of the wrapped stream is copied (only when an injector acts
    on it) and passed through the injectors in order. All attributes of the
    wrapped stream are kept (``n_clients``, ``n_features``, ``batch_size``,
    ``n_steps``, ``task``, ``n_classes``, ``adaptive``, and through attribute
    delegation anything else, e.g. ``has_intercept`` or ``classes_``); chunk
    masks are passed through.

    Parameters
    ----------
    stream : Stream
        The stream to perturb.
    injectors : list of Injector
        Applied in order; random choices (planes, features) are drawn here,
        when wrapping, from each injector's own seed.

    Attributes
    ----------
    population : None
        The wrapped stream's population model no longer describes the
        perturbed data, so it is dropped.
    notes_ : list of str
        The wrapped stream's notes, plus one per injector that starts after
        the last step (no effect) or whose ramp ends after it (partial change).

    Notes
    -----
    Known optima (synthetic streams, shape (n, M, d)) are transformed along
    with the covariates: rotated like the features, or divided by the scale
    factor, which keeps them Bayes-optimal for linear models. With any
    :class:`LabelFlip` the optimum is no longer known and chunks carry
    ``optimum=None``.

    Raises
    ------
    ValueError
        If an injector does not fit the stream (see each injector).

    Examples
    --------
    >>> import numpy as np, pandas as pd
    >>> from streamfl.generators.tabular import TableStream
    >>> table = pd.DataFrame({"a": [1.0, 2.0, 3.0, 4.0], "b": [0.0, 0.0, 1.0, 1.0], "y": [0, 1, 0, 1]})
    >>> base = TableStream(table, label="y", n_clients=1, standardize=False)
    >>> drifted = InjectedDrift(base, [CovariateRotation(2, 2, np.pi / 2, plane=(0, 1)), LabelFlip(3)])
    >>> chunk = next(drifted.chunks())
    >>> chunk.X[:, 0, 0].round(12) + 0.0  # rows are steps t = 1..4; (a, b, 1) -> (-b, a, 1) from step 2
    array([[ 1.,  0.,  1.],
           [ 0.,  2.,  1.],
           [-1.,  3.,  1.],
           [-1.,  4.,  1.]])
    >>> chunk.y[:, 0, 0]  # labels flipped from step 3
    array([0., 1., 1., 0.])
    """

    def __init__(self, stream: Stream, injectors: Sequence[Injector]):
        if not isinstance(stream, Stream):
            raise _param_error("stream", "InjectedDrift", "a Stream", type(stream).__name__)
        if isinstance(injectors, Injector):
            injectors = [injectors]
        if not isinstance(injectors, Sequence) or not all(isinstance(i, Injector) for i in injectors):
            raise _param_error("injectors", "InjectedDrift", "a list of Injector objects", injectors)
        self.stream = stream
        self.injectors = list(injectors)
        self._states = [inj._prepare(stream) for inj in self.injectors]
        self._known_optimum = not any(isinstance(i, LabelFlip) for i in self.injectors)
        self.n_clients = stream.n_clients
        self.n_features = stream.n_features
        self.batch_size = stream.batch_size
        self.n_steps = stream.n_steps
        self.task = stream.task
        self.n_classes = stream.n_classes
        self.adaptive = stream.adaptive
        self.in_memory = stream.in_memory
        self.has_intercept = getattr(stream, "has_intercept", False)
        self.population = None
        self.task_rule_ = stream.task_rule_
        self.columns_ = stream.columns_
        self.notes_ = list(stream.notes_) + [n for n in (i._late(stream.n_steps) for i in self.injectors) if n]

    def __getattr__(self, name):
        # Only called for attributes not found normally: delegate to the wrapped stream.
        if name == "stream":
            raise AttributeError(name)
        return getattr(self.stream, name)

    def observe(self, models: np.ndarray) -> None:
        """Forward the clients' models to the wrapped (possibly adaptive) stream."""
        self.stream.observe(models)

    def chunks(self, chunk_size: int = 256) -> Iterator[Chunk]:
        """Yield the wrapped stream's chunks with the drift applied."""
        for chunk in self.stream.chunks(chunk_size):
            t0, n = chunk.t0, chunk.n_steps
            active = [(inj, st) for inj, st in zip(self.injectors, self._states) if inj._active(t0 + 1, t0 + n)]
            X, y, optimum = chunk.X, chunk.y, chunk.optimum
            if active:
                t = np.arange(t0 + 1, t0 + n + 1)             # the chunk's steps, counted from 1
                if any(inj.changes_features for inj, _ in active):
                    X = np.array(X, dtype=np.float64, copy=True)
                if any(not inj.changes_features for inj, _ in active):
                    y = np.array(y, dtype=np.float64, copy=True)
                for inj, st in active:
                    inj._apply(st, t, X, y)
                    if optimum is not None and self._known_optimum and inj.changes_features:
                        optimum = inj._transform_optimum(st, t, optimum) if optimum.ndim == 3 else None
            if not self._known_optimum:
                optimum = None
            yield Chunk(t0=t0, X=X, y=y, mask=chunk.mask, optimum=optimum)
