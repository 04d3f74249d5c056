"""River's synthetic generators as federated streams.

:class:`RiverSynthStream` turns any generator of :mod:`river.datasets.synth`
(Hyperplane, SEA, RandomRBFDrift, FriedmanDrift, ConceptDriftStream, Agrawal,
Mixed, ...) into M client streams. Drift comes from the generator itself
(Hyperplane's ``mag_change``, RandomRBFDrift's ``change_speed``,
ConceptDriftStream's ``position``/``width``, FriedmanDrift's ``position``...).
River generators are pure Python, so all T·M·b samples are drawn once in the
constructor and converted to arrays; iterating only slices them.
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
from typing import Iterator

import numpy as np

from streamfl.generators.base import Chunk, Stream
from streamfl.generators.tabular import _check_bool, _check_choice, _check_int, _frozen, _param_error

__all__ = ["river_synth_names", "RiverSynthStream"]

_TASKS = ("least_squares", "logistic", "softmax")
_SEED_MOD = 2**32  # some River generators seed numpy's RandomState, which needs seeds < 2**32


@functools.lru_cache(maxsize=1)
def _synth_classes() -> dict[str, type]:
    from river.datasets import base, synth

    single_output = {base.REG, base.BINARY_CLF, base.MULTI_CLF}
    found = {}
    for name in synth.__all__:
        cls = getattr(synth, name, None)
        if not (isinstance(cls, type) and issubclass(cls, base.SyntheticDataset)):
            continue
        try:
            task = cls().task
        except Exception:  # pragma: no cover - a generator needing arguments
            continue
        if task in single_output:
            found[name] = cls
    return dict(sorted(found.items()))


def river_synth_names() -> list[str]:
    """Names of the single-output generators in :mod:`river.datasets.synth`.

    Multi-output generators (``Logical``) are left out.

    Examples
    --------
    >>> "Hyperplane" in river_synth_names(), "Logical" in river_synth_names()
    (True, False)
    """
    return list(_synth_classes())


def _seed_params(cls: type) -> list[str]:
    return [p for p in inspect.signature(cls).parameters if p == "seed" or p.startswith("seed_")]


def _effective(cls: type, params: dict) -> dict:
    """``params`` completed with the generator's defaults for the arguments not given."""
    out = {k: p.default for k, p in inspect.signature(cls).parameters.items() if p.default is not inspect.Parameter.empty}
    out.update(params)
    return out


def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not _is_bool(v)


_EXP_MAX = 709.0     # math.exp(x) overflows for x > 709.78


def _check_params(cls: type, params: dict) -> None:
    """Refuse, before drawing, parameter values River accepts but then fails on while drawing."""
    name, p = cls.__name__, _effective(cls, params)
    bad = None
    if name == "ConceptDriftStream":
        if not (_is_int(p.get("position")) and p["position"] >= 0):
            bad = f"position must be an int >= 0 (the sample at the middle of the change); got {p.get('position')!r}"
        elif p.get("alpha") is None and not (_is_int(p.get("width")) and p["width"] >= 1):
            bad = f"width must be an int >= 1 (the number of samples the change takes); got {p.get('width')!r}"
        else:
            a = p.get("alpha")
            width = p["width"] if a is None else (max(1, int(1 / math.tan(a * math.pi / 180)))
                                                  if isinstance(a, numbers.Real) and 0 < a <= 90 else None)
            if width is not None and 4.0 * p["position"] / width > _EXP_MAX:
                need = math.ceil(4.0 * p["position"] / _EXP_MAX)
                bad = (f"width {width} is too narrow for position {p['position']}: River draws the new concept with "
                       f"probability 1/(1 + exp(4·(position − i)/width)), which overflows for 4·position/width > "
                       f"{_EXP_MAX:g}; use width >= {need}")
    elif name == "Hyperplane":
        nf, nd = p.get("n_features"), p.get("n_drift_features")
        if _is_int(nf) and _is_int(nd) and not 0 <= nd <= nf:
            bad = f"n_drift_features must be between 0 and n_features ({nf}); got {nd!r}"
    if bad:
        raise ValueError(f"Invalid params for river.datasets.synth.{name}: {bad}.")


def _plain_error(err: Exception) -> str:
    """River's message in words, without Python's exception class name (e.g. ``math range error`` → overflow)."""
    text = " ".join(str(err).split()) or "no message"
    what = {OverflowError: "a number overflowed", ZeroDivisionError: "a division by zero",
            IndexError: "an index out of range", MemoryError: "out of memory"}
    for kind, words in what.items():
        if isinstance(err, kind):
            return f"{words} ({text})"
    return text


def _signature(name: str, params: dict) -> str:
    """``Name(k=v, ...)`` for messages; nested generators shown by their spec."""
    return f"{name}(" + ", ".join(f"{k}={v!r}" for k, v in sorted(params.items())) + ")"


def _build(cls: type, params: dict, seed: int):
    """Instantiate ``cls(**params)`` with every seed parameter the user did not fix set to ``seed``.

    Nested generators (River ``SyntheticDataset`` instances, or
    ``{"name": ..., "params": {...}}`` dicts — e.g. ConceptDriftStream's
    ``stream``/``drift_stream``) are rebuilt with their own derived seeds.
    """
    from river.datasets import base

    kwargs = {}
    for j, (key, value) in enumerate(sorted(params.items())):
        sub_seed = (seed + 1_000_003 * (j + 1)) % _SEED_MOD
        if isinstance(value, base.SyntheticDataset):
            value = _build(type(value), {k: v for k, v in value._get_params().items()
                                         if not (k == "seed" or k.startswith("seed_")) or v is not None}, sub_seed)
        elif isinstance(value, dict) and set(value) <= {"name", "params"} and "name" in value:
            sub_cls = _lookup(value["name"])
            value = _build(sub_cls, dict(value.get("params") or {}), sub_seed)
        kwargs[key] = value
    for p in _seed_params(cls):
        kwargs.setdefault(p, seed)
    _check_params(cls, kwargs)
    try:
        return cls(**kwargs)
    except Exception as err:            # River raises many types for bad arguments
        raise ValueError(f"Invalid params for river.datasets.synth.{cls.__name__}: {err}") from err


def _lookup(name) -> type:
    classes = _synth_classes()
    if isinstance(name, str):
        if name in classes:
            return classes[name]
        matches = [n for n in classes if n.lower() == name.lower()]
        if len(matches) == 1:
            return classes[matches[0]]
    raise ValueError(f"Unknown River generator {name!r}; valid names are: {', '.join(classes)}.")


def _is_bool(v) -> bool:
    return isinstance(v, (bool, np.bool_))


def _sorted(values) -> list:
    try:
        return sorted(values)
    except TypeError:
        return sorted(values, key=str)


class RiverSynthStream(Stream):
    """M client streams drawn from a River synthetic generator.

    Parameters
    ----------
    name : str
        Class name in :mod:`river.datasets.synth` (case-insensitive), e.g.
        "Hyperplane", "SEA", "RandomRBFDrift", "FriedmanDrift",
        "ConceptDriftStream", "Agrawal", "Mixed" (see
        :func:`river_synth_names`).
    n_clients : int
        M ≥ 1.
    n_steps : int
        T ≥ 1.
    batch_size : int
        b ≥ 1 samples per client per step.
    seed : int
        ≥ 0. Client m's generator gets seed ``seed * 1000 + m`` for every seed
        parameter (``seed``, ``seed_model``, ``seed_sample``, ``seed_tree``)
        not fixed in ``params``.
    params : dict or None
        Constructor keyword arguments of the generator. Fixing a seed
        parameter here shares it across clients: e.g. RandomRBF with
        ``{"seed_model": 7}`` gives every client the same concept with its own
        samples. Nested generators (ConceptDriftStream's ``stream`` and
        ``drift_stream``) may be River instances or ``{"name": ..., "params":
        {...}}`` dicts; they are rebuilt per client with derived seeds.
    shared_concept : bool
        If True, a single generator (seed ``seed * 1000``) is drawn T·M·b
        times and the samples are dealt round-robin: client m gets samples
        m, m + M, m + 2M, ... So all clients share the concept and its drift
        but see different samples. Note that River's drift positions count
        samples of one generator, so a drift at River position P happens at
        step ≈ P / b per client by default but at step ≈ P / (M·b) here
        (``notes_`` gives the exact step).
    intercept : bool
        Append a constant-1 feature last (``has_intercept``).
    standardize : bool
        z-score every feature with the mean and standard deviation of all
        drawn samples (default), so generators whose features come in large
        units (Agrawal's salaries) are usable with the same step sizes.
    task : {"least_squares", "logistic", "softmax"} or None
        ``None`` infers it from the labels (``task_rule_`` says how): float
        → "least_squares"; boolean or 2 classes → "logistic"; more classes →
        "softmax".
    standardize_label : bool
        Z-score a least-squares label with the mean and standard deviation
        of all drawn labels (ddof=0), so losses are in units of the label's
        standard deviation squared. Refused for classification.

    Attributes
    ----------
    n_clients, n_features, batch_size, n_steps, task, n_classes
        See :class:`~streamfl.generators.base.Stream`.
    has_intercept : bool
    classes_ : list or None
        Original label values; class k is encoded as k. For integer labels of
        a generator that declares ``n_classes`` this is ``range(n_classes)``,
        otherwise the sorted labels seen. ``None`` for regression.
    feature_names_ : list of str
        Feature keys in the order of the first sample (keys first seen later
        are appended). Boolean features become 0/1; features with non-numeric
        values (strings) are one-hot encoded over the sorted values seen in
        the samples drawn, as ``"key=value"``.
    client_seeds_ : list of int
        The seed each client's generator got.
    task_rule_ : str or None
        How the task was inferred from the labels (``None`` when given).
    columns_ : list of dict
        How each feature key (and the label, as column "y") was read:
        ``{"column", "read_as", "why"}``, ``read_as`` "number", "category" or
        "label".
    notes_ : list of str
        The step t (counted from 1, as metrics.csv's) at which River's drift
        ``position`` takes effect (River counts a generator's samples: from 1
        in ConceptDriftStream, from 0 in FriedmanDrift; a step draws b samples
        per client, M·b from a shared generator), and drift positions that fall
        after the last sample drawn, so that the stream does not drift there.
    label_mean_, label_scale_ : float
        The label's standardisation (0 and 1 unless ``standardize_label``).

    Raises
    ------
    ValueError
        For an unknown generator name (listing valid names), params the
        generator rejects (with River's message; ConceptDriftStream's
        ``position`` ≥ 0 and ``width`` ≥ 1 and Hyperplane's
        ``n_drift_features`` ≤ ``n_features`` are checked before drawing), any
        error River raises while drawing (one line naming the generator, its
        params and River's message), a generator that runs out of samples, a
        sample missing a feature, or a task that does not fit the labels.

    Examples
    --------
    >>> stream = RiverSynthStream("Hyperplane", n_clients=2, n_steps=5, params={"n_features": 3})
    >>> stream.task, stream.n_features, stream.feature_names_
    ('logistic', 4, ['0', '1', '2', 'intercept'])
    >>> chunk = next(stream.chunks())
    >>> chunk.X.shape, chunk.y.shape
    ((5, 2, 1, 4), (5, 2, 1))
    """

    in_memory = True          # every step's samples are built when the stream is made

    def __init__(
        self,
        name: str,
        *,
        n_clients: int = 8,
        n_steps: int = 1000,
        batch_size: int = 1,
        seed: int = 0,
        params: dict | None = None,
        shared_concept: bool = False,
        intercept: bool = True,
        task: str | None = None,
        standardize: bool = True,
        standardize_label: bool = False,
    ):
        owner = "RiverSynthStream"
        cls = _lookup(name)
        M = _check_int(n_clients, "n_clients", owner, 1)
        T = _check_int(n_steps, "n_steps", owner, 1)
        b = _check_int(batch_size, "batch_size", owner, 1)
        seed = _check_int(seed, "seed", owner, 0)
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise _param_error("params", owner, "a dict of constructor arguments or None", params)
        shared_concept = _check_bool(shared_concept, "shared_concept", owner)
        intercept = _check_bool(intercept, "intercept", owner)
        standardize = _check_bool(standardize, "standardize", owner)
        standardize_label = _check_bool(standardize_label, "standardize_label", owner)
        task = _check_choice(task, "task", owner, _TASKS, allow_none=True)

        # ---- draw samples ----------------------------------------------------
        per_gen = T * b * (M if shared_concept else 1)
        seeds = [(seed * 1000 + m) % _SEED_MOD for m in range(1 if shared_concept else M)]
        samples = []
        for s in seeds:
            gen = _build(cls, params, s)
            try:
                got = list(gen.take(per_gen))
            except Exception as err:    # River's own failure; say which generator and settings
                raise ValueError(f"River generator {_signature(cls.__name__, params)} failed while drawing samples: "
                                 f"{_plain_error(err)}") from None
            if len(got) < per_gen:
                raise ValueError(
                    f"River generator {cls.__name__} produced only {len(got)} samples but {per_gen} are needed; "
                    f"lower n_steps or raise the generator's n_samples."
                )
            samples.extend(got)
        declared_classes = getattr(gen, "n_classes", None)

        # ---- features --------------------------------------------------------
        keys = list(dict.fromkeys(k for x, _ in samples for k in x))
        columns, names, report = [], [], []
        for key in keys:
            try:
                values = [x[key] for x, _ in samples]
            except KeyError:
                raise ValueError(f"Some samples of {cls.__name__} lack feature {key!r}; cannot build arrays.") from None
            if all(isinstance(v, numbers.Real) for v in values):  # bools included
                columns.append(np.asarray(values, dtype=np.float64)[:, None])
                names.append(str(key))
                why = "booleans, as 0/1" if all(_is_bool(v) for v in values) else "numbers"
                report.append({"column": str(key), "read_as": "number", "why": why})
            else:   # the generator emits nominal values (text) for this feature
                cats = _sorted(set(values))
                code = {c: i for i, c in enumerate(cats)}
                columns.append(np.eye(len(cats))[[code[v] for v in values]])
                names.extend(f"{key}={c}" for c in cats)
                report.append({"column": str(key), "read_as": "category",
                               "why": f"the generator's nominal values, one-hot over the {len(cats)} seen (sorted)"})
        if standardize and columns:
            # z-score with the statistics of all drawn samples (River's features
            # come in their own units, e.g. salaries of order 1e5)
            raw = np.concatenate(columns, axis=1)
            std = raw.std(axis=0)
            columns = [(raw - raw.mean(axis=0)) / np.where(std > 0, std, 1.0)]
        if intercept:
            columns.append(np.ones((len(samples), 1)))
            names.append("intercept")
        Xflat = np.concatenate(columns, axis=1) if columns else np.zeros((len(samples), 0))
        if Xflat.shape[1] == 0:
            raise ValueError(f"River generator {cls.__name__} produced no features.")

        # ---- labels ----------------------------------------------------------
        labels = [y for _, y in samples]
        kind = self._label_kind(labels, cls.__name__)
        rule = None
        if task is None:
            task = "least_squares" if kind == "float" else None
            rule = {"float": "labels are real numbers, so a regression target", "bool": "labels are booleans",
                    "int": "labels are integers, so classes"}.get(kind, "labels are text, so classes")
        if task == "least_squares":
            if kind == "other":
                raise ValueError(f"{cls.__name__}'s labels are not numeric, so task='least_squares' does not fit.")
            yflat = np.asarray(labels, dtype=np.float64)
            classes, n_classes = None, 1
            label_mean, label_scale = 0.0, 1.0
            if standardize_label:
                label_mean, label_scale = float(yflat.mean()), float(yflat.std()) or 1.0
                yflat = (yflat - label_mean) / label_scale
            raw = np.asarray(labels, dtype=np.float64)
            report.append({"column": "y", "read_as": "label", "why": (
                f"regression target, {len(raw)} values from {raw.min():.4g} to {raw.max():.4g}" + (
                    f", z-scored with mean {label_mean:.4g} and standard deviation {label_scale:.4g}"
                    if standardize_label else f" in its own units (mean {yflat.mean():.4g}, standard deviation "
                                              f"{yflat.std():.4g})"))})
        else:
            if standardize_label:
                raise ValueError(f"standardize_label needs a least_squares label; {cls.__name__}'s labels are "
                                 f"classes.")
            label_mean, label_scale = 0.0, 1.0
            if kind == "float":
                raise ValueError(f"{cls.__name__}'s labels are real numbers; use task='least_squares'.")
            seen = _sorted(set(labels))
            if kind == "bool":
                classes = [False, True]
            elif kind == "int" and isinstance(declared_classes, int) and declared_classes >= 2 and \
                    all(0 <= v < declared_classes for v in seen):
                classes = list(range(declared_classes))
            else:
                classes = seen
            K = len(classes)
            if K < 2:
                raise ValueError(f"{cls.__name__} produced a single class ({classes[0]!r}); a classifier needs two.")
            if task is None:
                task = "logistic" if K == 2 else "softmax"
            elif task == "logistic" and K != 2:
                raise ValueError(f"task='logistic' needs 2 classes but {cls.__name__} has {K}.")
            code = {c: i for i, c in enumerate(classes)}
            yflat = np.asarray([code[v] for v in labels], dtype=np.float64)
            n_classes = K if task == "softmax" else 1
            counts = np.bincount(yflat.astype(np.int64), minlength=K)
            shown = ", ".join(f"{c!r} → {k} ({counts[k]} sample{'s' if counts[k] != 1 else ''})"
                              for k, c in enumerate(classes[:8])) + (f", ... ({K - 8} more)" if K > 8 else "")
            report.append({"column": "y", "read_as": "label",
                           "why": f"{K} classes, numbered in sorted order: {shown}"
                                  + (f"; class 1 ({classes[1]!r}) is the positive class" if task == "logistic" else "")})
        if rule is not None:
            rule += f" → {task}"

        # ---- drift the stream is too short to reach ---------------------------
        notes = []
        position = _effective(cls, params).get("position")
        # River counts a generator's samples from 1 in ConceptDriftStream (the change is centred on sample
        # `position`) and from 0 in FriedmanDrift (sample `position` is the first of the new concept). With k
        # samples per step (b per client, or M·b from the one shared generator), sample i (counted from 1) is
        # drawn at step t = ⌈i / k⌉, steps counted from 1 as metrics.csv's t
        first = 0 if cls.__name__ == "FriedmanDrift" else 1
        late = [p for p in (position if isinstance(position, (tuple, list)) else [position])
                if _is_int(p) and p + 1 - first > per_gen]
        inside = [p for p in (position if isinstance(position, (tuple, list)) else [position])
                  if _is_int(p) and p + 1 - first <= per_gen]
        k = b * (M if shared_concept else 1)
        per = "client" if not shared_concept else "run (one generator shared by all clients)"
        if inside and cls.__name__ == "ConceptDriftStream":
            w = _effective(cls, params).get("width")
            step = max(1, -(-inside[0] // k))
            notes.append(f"ConceptDriftStream: position {inside[0]} and width {w} count samples of each {per}'s "
                         f"generator from 1 ({k} per step), so the change is centred at step t = {step:,} "
                         f"(steps count from 1, as metrics.csv's t)")
        if inside and cls.__name__ == "FriedmanDrift":
            steps = ", ".join(f"{p // k + 1:,}" for p in inside)
            notes.append(f"FriedmanDrift: position {', '.join(map(str, inside))} counts samples of each {per}'s "
                         f"generator from 0 ({k} per step), so the drift acts from step t = {steps} "
                         f"(steps count from 1, as metrics.csv's t)")
        if late:
            last = per_gen - 1 + first                      # the last sample drawn, in River's count
            notes.append(f"{cls.__name__}'s drift position{'s' if len(late) > 1 else ''} "
                         f"{', '.join(map(str, late))} {'come' if len(late) > 1 else 'comes'} after sample "
                         f"{last}, the last one each generator draws (T·b{'·M' if shared_concept else ''} = "
                         f"{per_gen} samples, counted from {first} by River): no drift there")

        # ---- arrays ----------------------------------------------------------
        d = Xflat.shape[1]
        if shared_concept:  # sample s = (t·b + i)·M + m
            X = Xflat.reshape(T, b, M, d).transpose(0, 2, 1, 3)
            y = yflat.reshape(T, b, M).transpose(0, 2, 1)
        else:  # client-major: sample s = m·T·b + t·b + i
            X = Xflat.reshape(M, T, b, d).transpose(1, 0, 2, 3)
            y = yflat.reshape(M, T, b).transpose(1, 0, 2)

        self.name = cls.__name__
        self.params = params
        self.n_clients = M
        self.n_features = d
        self.batch_size = b
        self.n_steps = T
        self.task = task
        self.n_classes = n_classes
        self.has_intercept = intercept
        self.shared_concept = shared_concept
        self.classes_ = classes
        self.feature_names_ = names
        self.client_seeds_ = seeds * M if shared_concept else seeds
        self.task_rule_ = rule
        self.columns_ = report
        self.notes_ = notes
        self.label_mean_, self.label_scale_ = label_mean, label_scale
        self._X = _frozen(np.ascontiguousarray(X))
        self._y = _frozen(np.ascontiguousarray(y))

    @staticmethod
    def _label_kind(labels, name) -> str:
        if any(isinstance(v, dict) for v in labels):
            raise ValueError(f"River generator {name} is multi-output; only single-output generators are supported.")
        if all(_is_bool(v) for v in labels):
            return "bool"
        if all(isinstance(v, numbers.Integral) and not _is_bool(v) for v in labels):
            return "int"
        if all(isinstance(v, numbers.Real) for v in labels):
            return "float"
        return "other"

    def chunks(self, chunk_size: int = 256) -> Iterator[Chunk]:
        """Yield the stream in chunks of at most ``chunk_size`` steps (read-only views)."""
        chunk_size = _check_int(chunk_size, "chunk_size", "RiverSynthStream.chunks", 1)
        for t0 in range(0, self.n_steps, chunk_size):
            t1 = min(t0 + chunk_size, self.n_steps)
            yield Chunk(t0=t0, X=self._X[t0:t1], y=self._y[t0:t1])
