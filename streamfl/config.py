"""Experiment configuration: one validated file describes a whole run.

Configs are YAML (or JSON) files validated once, at load, with pydantic. A
bad field raises :class:`ConfigError` whose message is one line naming the
field, what is wrong and, where there is a choice, the allowed values::

    config error: learner.tau: Input should be greater than or equal to 1 (got 0)

The default experiment (``streamfl run`` with no arguments) is
:data:`DEFAULT`; every field is documented in README.md ("Config reference").
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator


class ConfigError(ValueError):
    """A config file or field is invalid; the message is one line for the user."""


class _Model(BaseModel):
    # strict: an int field takes integers only (not true, "3" or 3.0), a float field numbers only (not true or
    # "0.5"), a bool field true/false only; floats must be finite (.inf and .nan are refused everywhere)
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


# ----------------------------------------------------------------------------- drift
# Client-specific drift (every schedule but adaptive): which clients move, how late, how fast
# (default: the shared centre). Declared after each schedule's own fields, so dumps read kind first.
_Clients = Annotated[list[Annotated[int, Field(ge=0)]] | None, Field(None)]
_Delay = Annotated[int, Field(0, ge=0)]
_Speeds = Annotated[list[float] | None, Field(None)]


class AbruptDrift(_Model):
    """Switch to a new random optimum at the given steps: ``at: [1200]`` puts the new optimum in effect from
    step t = 1,200 on (steps count from 1, as metrics.csv's t; step 1,199 still has the old one)."""
    kind: Literal["abrupt"]
    at: list[Annotated[int, Field(ge=1)]] = Field(min_length=1)
    clients: _Clients = None
    delay: _Delay = 0
    speeds: _Speeds = None


class RotationDrift(_Model):
    """Rotate the optimum by ``speed`` radians per step."""
    kind: Literal["rotation"]
    speed: float
    clients: _Clients = None
    delay: _Delay = 0
    speeds: _Speeds = None


class LinearDrift(_Model):
    """Move the optimum ``speed`` units per step along a fixed direction."""
    kind: Literal["linear"]
    speed: float
    clients: _Clients = None
    delay: _Delay = 0
    speeds: _Speeds = None


class PeriodicDrift(_Model):
    """Add amplitude·sin(2πt/period) along a fixed direction."""
    kind: Literal["periodic"]
    amplitude: float
    period: float = Field(gt=0)
    clients: _Clients = None
    delay: _Delay = 0
    speeds: _Speeds = None


class RandomWalkDrift(_Model):
    """Gaussian random walk with RMS move ``step`` units per step."""
    kind: Literal["random_walk"]
    step: float = Field(ge=0)
    clients: _Clients = None
    delay: _Delay = 0
    speeds: _Speeds = None


class AdaptiveDrift(_Model):
    """Move the optima ``budget`` units per step (RMS over clients), against FedSEA's models;
    ``target`` chooses what the budget buys (own / centre / spread / both)."""
    kind: Literal["adaptive"]
    budget: float = Field(ge=0)
    target: Literal["own", "centre", "spread", "both"] = "own"


class HeterogeneityChangeConfig(_Model):
    """ζ over time: ``ramp`` from ζ at step ``start`` to ``to`` at step ``end`` (steps count from 1), or
    ``periodic``: ζ + amplitude·sin(2π(t − 1)/period)."""
    kind: Literal["ramp", "periodic"]
    start: int = Field(0, ge=0)
    end: int = Field(0, ge=0)
    to: float = Field(0.0, ge=0)
    amplitude: float = 0.0
    period: float = Field(1.0, gt=0)


class CovariateShiftConfig(_Model):
    """Feature-scale factors in effect from the steps ``at`` on (covariate shift; steps count from 1, as
    metrics.csv's t), for all or listed clients."""
    at: list[Annotated[int, Field(ge=1)]] = Field(min_length=1)
    factors: list[Annotated[float, Field(gt=0)]] = Field(min_length=1)
    clients: list[Annotated[int, Field(ge=0)]] | None = None


class TailsConfig(_Model):
    """Heavy tails: standardised Student-t with ``df`` degrees of freedom on features, noise or both."""
    df: float = Field(gt=2)
    on: Literal["features", "noise", "both"] = "both"

    @model_validator(mode="before")
    @classmethod
    def _yaml_on_key(cls, data: Any) -> Any:
        # YAML 1.1 (PyYAML) reads an unquoted key `on` as the boolean true, so
        # `tails: {df: 5, on: noise}` arrives as {True: "noise"}: read it as `on`.
        if isinstance(data, dict) and True in data and "on" not in data:
            data = {("on" if k is True else k): v for k, v in data.items()}
        return data


Drift = Annotated[Union[AbruptDrift, RotationDrift, LinearDrift, PeriodicDrift, RandomWalkDrift, AdaptiveDrift],
                  Field(discriminator="kind")]


# ----------------------------------------------------------------------------- sources
class SyntheticSource(_Model):
    """The synthetic SEA adversary (:class:`streamfl.generators.SyntheticStream`)."""
    kind: Literal["synthetic"]
    task: Literal["least_squares", "logistic"] = "logistic"
    clients: int = Field(8, ge=1)
    dim: int = Field(10, ge=1)
    noise: Union[Annotated[float, Field(ge=0)], list[Annotated[float, Field(ge=0)]]] = 1.0
    heterogeneity: float = Field(0.5, ge=0)
    radius: float = Field(2.0, ge=0)
    feature_scale: Union[Annotated[float, Field(gt=0)], list[Annotated[float, Field(gt=0)]]] = 1.0
    drift: list[Drift] = Field(default_factory=list)
    heterogeneity_change: HeterogeneityChangeConfig | None = None
    covariate: list[CovariateShiftConfig] = Field(default_factory=list)
    tails: TailsConfig | None = None
    adversary: Literal["stochastic", "dirac"] = "stochastic"

    @model_validator(mode="after")
    def _per_client_and_task(self):
        for name in ("noise", "feature_scale"):
            v = getattr(self, name)
            if isinstance(v, list) and len(v) != self.clients:
                raise ValueError(f"source.{name}: {len(v)} values for {self.clients} clients; "
                                 f"give one value or one per client")
        for i, d in enumerate(self.drift):
            who = getattr(d, "clients", None)
            if who and max(who) >= self.clients:
                raise ValueError(f"source.drift.{i}.clients: client {max(who)} does not exist "
                                 f"(clients are 0..{self.clients - 1})")
            if d.kind == "abrupt" and d.speeds is not None:
                raise ValueError(f"source.drift.{i}.speeds: an abrupt switch has no speed; use clients and delay")
            if d.kind == "random_walk" and d.delay:
                raise ValueError(f"source.drift.{i}.delay: not supported for random_walk; use clients and speeds")
        for i, cv in enumerate(self.covariate):
            if len(cv.factors) != len(cv.at):
                raise ValueError(f"source.covariate.{i}.factors: {len(cv.factors)} factors for {len(cv.at)} steps in at")
            if cv.clients and max(cv.clients) >= self.clients:
                raise ValueError(f"source.covariate.{i}.clients: client {max(cv.clients)} does not exist")
        if self.tails is not None:
            if self.task != "least_squares":
                raise ValueError("source.tails: heavy tails keep F exact for least squares only (task: least_squares)")
            if self.tails.on != "noise" and self.tails.df <= 4:
                raise ValueError(f"source.tails.df: heavy-tailed features need df > 4 for a finite gradient "
                                 f"noise (got {self.tails.df})")
        if self.adversary == "dirac" and self.task != "least_squares":
            raise ValueError("source.adversary: the Dirac adversary is implemented for task: least_squares")
        return self


class RiverSynthSource(_Model):
    """A River synthetic generator split into per-client streams."""
    kind: Literal["river_synth"]
    name: str
    params: dict[str, Any] = Field(default_factory=dict)
    clients: int = Field(8, ge=1)
    shared_concept: bool = False
    standardize: bool = True
    standardize_label: bool = False

    @model_validator(mode="after")
    def _params(self):
        def walk(params, where):
            for key, value in params.items():
                at = f"{where}.{key}"
                if key == "seed":
                    raise ValueError(f"{at}: the generators' seeds come from the run's seed (client m gets "
                                     f"seed·1000 + m, so clients draw different samples); set the top-level seed "
                                     f"instead")
                if isinstance(value, float) and not math.isfinite(value):
                    raise ValueError(f"{at}: {value} is not a finite number")
                if (key.startswith("seed_") and value is not None
                        and not (isinstance(value, int) and not isinstance(value, bool) and value >= 0)):
                    raise ValueError(f"{at}: a seed is an integer >= 0 (got {value!r})")
                if isinstance(value, dict):
                    walk(value.get("params") or {} if "name" in value else value, at + (".params" if "name" in value else ""))
                elif isinstance(value, list):
                    for i, v in enumerate(value):
                        if isinstance(v, float) and not math.isfinite(v):
                            raise ValueError(f"{at}.{i}: {v} is not a finite number")
        walk(self.params, "source.params")
        return self


class Split(_Model):
    """How a table is split across clients."""
    kind: Literal["contiguous", "column", "dirichlet"]
    column: str | None = None
    alpha: float | None = Field(None, gt=0)      # Dirichlet α; 0.5 when kind is dirichlet and alpha is not given

    @model_validator(mode="after")
    def _column_needed(self):
        if self.kind == "column" and not self.column:
            raise ValueError("source.split.column is required when source.split.kind is 'column'")
        if self.kind != "column" and self.column is not None:
            raise ValueError(f"source.split.column: only split.kind column uses a client column (split.kind is "
                             f"{self.kind}); set kind: column or remove column")
        if self.kind != "dirichlet" and self.alpha is not None:
            raise ValueError(f"source.split.alpha: only split.kind dirichlet uses alpha (split.kind is {self.kind})")
        if self.kind == "dirichlet" and self.alpha is None:
            self.alpha = 0.5
        return self


class CovariateRotation(_Model):
    """Rotate the features by an angle ramping from 0 at step ``start`` to ``angle`` at step ``end`` (a switch at
    ``start`` without ``end``); steps count from 1, as metrics.csv's t."""
    kind: Literal["covariate_rotation"]
    start: int = Field(ge=1)
    end: int | None = None
    angle: float


class CovariateScale(_Model):
    """Scale half the features by a factor ramping from 1 at step ``start`` to ``factor`` at step ``end`` (a switch
    at ``start`` without ``end``); steps count from 1, as metrics.csv's t."""
    kind: Literal["covariate_scale"]
    start: int = Field(ge=1)
    end: int | None = None
    factor: float = Field(gt=0)


class LabelFlip(_Model):
    """Flip a ``fraction`` of the labels on the steps start ≤ t < end (to the last step without ``end``); steps
    count from 1, as metrics.csv's t."""
    kind: Literal["label_flip"]
    start: int = Field(ge=1)
    end: int | None = None
    fraction: float = Field(1.0, gt=0, le=1)


Injection = Annotated[Union[CovariateRotation, CovariateScale, LabelFlip], Field(discriminator="kind")]


class PriorShift(_Model):
    """Class-prior shift by resampling from fraction ``start`` of each client's stream."""
    start: float = Field(ge=0, le=1)
    class_weights: dict[Union[int, str], Annotated[float, Field(ge=0)]]


class TableSourceBase(_Model):
    label: str | None = None
    task: Literal["least_squares", "logistic", "softmax"] | None = None
    features: list[str] | None = None
    categorical: list[str] = Field(default_factory=list)
    time_column: str | None = None
    clients: int = Field(8, ge=1)
    split: Split = Field(default_factory=lambda: Split(kind="contiguous"))
    standardize: bool = True
    standardize_label: bool = False
    intercept: bool = True
    prior_shift: PriorShift | None = None
    inject: list[Injection] = Field(default_factory=list)

    @model_validator(mode="after")
    def _label_scaling(self):
        if len(set(self.categorical)) != len(self.categorical):
            twice = next(c for c in self.categorical if self.categorical.count(c) > 1)
            raise ValueError(f"source.categorical: column {twice!r} is listed twice")
        if self.features is not None and len(set(self.features)) != len(self.features):
            twice = next(c for c in self.features if self.features.count(c) > 1)
            raise ValueError(f"source.features: column {twice!r} is listed twice")
        roles = [("label", self.label), ("time_column", self.time_column),
                 ("split.column", self.split.column if self.split.kind == "column" else None)]
        for i, (a, col) in enumerate(roles):
            for b, other in roles[i + 1:]:
                if col is not None and col == other:
                    raise ValueError(f"source.{b}: column {col!r} is already the {a.replace('_', ' ')}; a column "
                                     f"has one role (label, time or client)")
        if self.standardize_label and self.task not in (None, "least_squares"):
            raise ValueError(f"source.standardize_label: only a least_squares label can be standardized "
                             f"(source.task is {self.task})")
        return self


class RiverDatasetSource(TableSourceBase):
    """A dataset bundled with River (Phishing, Bananas, ImageSegments, …)."""
    kind: Literal["river_dataset"]
    name: str


class FileSource(TableSourceBase):
    """A CSV or Parquet file with named feature, label, client and time columns."""
    kind: Literal["file"]
    path: Path = Field(strict=False)
    label: str
    thousands: Literal[",", "'", "_", " "] | None = None


class MovieLensSource(_Model):
    """MovieLens 100K's ``u.data`` (or its folder) as an interaction stream: each user a client, its
    interactions in timestamp order, one per step (streaming FedNCF; needs ``learner.model: gmf``)."""
    kind: Literal["movielens"]
    path: Path = Field(strict=False)


class SparsePowerLawSource(_Model):
    """Drifting power-law sparse features, one stream per client (FedSubAvg's setting, paper 000 §1;
    :class:`streamfl.generators.sparse_features.SparsePowerLawStream`; needs ``learner.model: sparse_logistic``).
    T is the top-level ``steps``, b is ``learner.batch_size``."""
    kind: Literal["sparse_powerlaw"]
    clients: int = Field(100, ge=1)              # M
    features: int = Field(2000, ge=1)            # F, rows of the table
    nnz: int = Field(5, ge=1)                    # active features per sample
    alpha: float = Field(1.0, gt=0)              # power-law exponent of the heat
    hot: int = Field(10, ge=1)                   # r0: features ranked <= r0 are involved by every client
    weight_scale: float = Field(1.0, ge=0)       # std of the true weights w*
    intercept: float = 0.0                       # b*
    drift_period: int | None = Field(100, ge=1)  # steps between popularity drift events (null: no drift)
    drift_swaps: int = Field(5, ge=0)            # rank exchanges per drift event

    @model_validator(mode="after")
    def _sizes(self):
        if not self.nnz <= self.hot <= self.features:
            raise ValueError(f"source.hot: must lie in [nnz, features] = [{self.nnz}, {self.features}] so that every "
                             f"client involves at least nnz features (got {self.hot})")
        pool = min(self.features, 4 * self.hot)
        if self.drift_period is not None and self.drift_swaps > min(pool, self.features - pool):
            raise ValueError(f"source.drift_swaps: a drift event exchanges {self.drift_swaps} of the {pool} hot "
                             f"features (ranks <= 4·hot) with as many of the {self.features - pool} others; at most "
                             f"{min(pool, self.features - pool)} (or set drift_period: null)")
        return self


Source = Annotated[Union[SyntheticSource, RiverSynthSource, RiverDatasetSource, FileSource, MovieLensSource,
                         SparsePowerLawSource],
                   Field(discriminator="kind")]


# ----------------------------------------------------------------------------- learner
class StepSizeConfig(_Model):
    """η_t: constant η, η0/√t (``inv_sqrt``) or 1/(μ(t + t0)) (``strongly_convex``)."""
    kind: Literal["constant", "inv_sqrt", "strongly_convex"] = "constant"
    eta: float = Field(0.05, gt=0)
    mu: float = Field(1.0, gt=0)
    t0: float = Field(0.0, ge=0)

    @model_validator(mode="after")
    def _usable(self):
        # η_t is largest at t = 1 and never grows, so a zero or infinite η_1 means a useless schedule
        if self.kind == "strongly_convex":
            first, rule = 1.0 / (self.mu * (1.0 + self.t0)), f"1/(mu·(1 + t0)) with mu = {self.mu:g}, t0 = {self.t0:g}"
        else:
            first, rule = self.eta, f"eta = {self.eta:g}"
        if not (0.0 < first < math.inf):
            raise ValueError(f"learner.step_size: η at step 1 is {rule} = {first:g}; choose values giving a "
                             f"finite η > 0")
        return self


class CompressionConfig(_Model):
    """Compressor for the clients' uploads (:func:`streamfl.compression.make_compressor`); b = 32: float32."""
    kind: Literal["none", "scalar", "lattice", "topk"]
    bits: int = Field(ge=1, le=32)


class GMFConfig(_Model):
    """The streaming GMF client model (FedNCF, paper 003, §3.1 and §5.2 for the defaults)."""
    dim: int = Field(12, ge=1)                   # D, embedding size
    # training negatives per arriving positive; each costs O(D) per step, and NCF's own sweep stops at 10
    negatives: int = Field(4, ge=1, le=100)
    eval_negatives: int = Field(100, ge=1)       # items each arriving positive is ranked against (HR@10)
    init_std: float = Field(0.1, gt=0)           # std of the normal initial embeddings
    item_rule: Literal["mf_fedavg", "fedavg", "simple_avg"] = "mf_fedavg"   # item-row aggregation


class SparseConfig(_Model):
    """The streaming sparse logistic client model (FedSubAvg, paper 000): the server rule of the table's rows
    and the lazy L2 penalty λ on the rows a step uses."""
    rule: Literal["fedsubavg", "fedavg"] = "fedsubavg"
    l2: float = Field(0.0, ge=0)


class LearnerConfig(_Model):
    """FedSEA's knobs (and the client model: linear, FedNCF's GMF for interaction streams, or FedSubAvg's
    sparse logistic regression for sparse-feature streams)."""
    model: Literal["linear", "gmf", "sparse_logistic"] = "linear"
    gmf: GMFConfig | None = None
    sparse: SparseConfig | None = None
    tau: int | None = Field(10, ge=1)
    step_size: StepSizeConfig = Field(default_factory=StepSizeConfig)
    batch_size: int = Field(1, ge=1)
    radius: float | None = Field(None, gt=0)
    weighting: Literal["uniform", "samples"] = "uniform"
    compression: CompressionConfig | None = None


class OutputConfig(_Model):
    dir: Path = Field(Path("runs"), strict=False)
    format: Literal["csv", "parquet"] = "csv"
    plots: bool = True
    client_columns: bool = True
    # per-client columns only up to this many clients (5 columns per client and step; above, summary.json only)
    client_columns_max: int = Field(1024, ge=0)


class TrackerConfig(_Model):
    """How the regret tracker trades live precision for speed and memory (the final values are exact)."""
    # k: exact least-squares hindsight solve every k steps (1: every step); None: 1 when d ≤ 16, else 1024
    refresh_every: int | None = Field(None, ge=1)
    memory_budget_mb: float = Field(512.0, gt=0)  # per-client d×d hindsight statistics only within this budget
    client_hindsight_max: int = Field(4096, ge=0)  # logistic/softmax: exact per-client comparators at the end up to this M
    # k: softmax (and logistic with learner.radius) live static estimate refitted on the reservoir at 16, 32, … < k
    # and every k steps
    refit_every: int = Field(1024, ge=1)
    # logistic: the recorded stream (for the certified live comparator and the exact values) stays in memory up to
    # this size; beyond, it is written to the run folder's spool and read back through memory maps
    recording_memory_mb: float = Field(2048.0, gt=0)


class SweepConfig(_Model):
    """Run the experiment once per combination of values.

    ``parameters`` maps dotted field paths (e.g. ``source.clients``) to lists of
    values; ``labels`` optionally names the values of one parameter for plots.
    ``metric`` is the regret compared; left out (``null``), it is the model's
    own (:func:`sweep_metric`: regret_expected for the linear models,
    regret_static for ``learner.model: sparse_logistic``, which tracks no other).
    """
    parameters: dict[str, Annotated[list[Any], Field(min_length=1)]] = Field(min_length=1)
    labels: dict[str, list[str]] = Field(default_factory=dict)
    metric: Literal["regret_expected", "regret_static", "regret_dynamic"] | None = None

    @model_validator(mode="after")
    def _check(self):
        for key, values in self.parameters.items():
            seen = []
            for v in values:
                if any(type(v) is type(w) and v == w for w in seen):
                    raise ValueError(f"sweep.parameters.{key}: the value {v!r} is listed twice; each value is run "
                                     f"once (use seeds for repeated runs)")
                seen.append(v)
        for key, names in self.labels.items():
            if key not in self.parameters:
                raise ValueError(f"sweep.labels.{key} names a parameter that is not swept")
            if len(names) != len(self.parameters[key]):
                raise ValueError(f"sweep.labels.{key} has {len(names)} labels for {len(self.parameters[key])} values")
        return self


#: Longest run name: the folder <name>-YYYYmmdd-HHMMSS[-k] and a sweep's sub-run names stay well under the
#: 255-byte limit of a file name on common file systems.
NAME_MAX = 100

Baseline = Literal["tau1", "local", "centralized", "river", "fedavg"]

#: Baselines of learner.model sparse_logistic when the config lists none (fedavg: the same model, sparse FedAvg).
SPARSE_BASELINES = ["tau1", "local", "fedavg"]


class ExperimentConfig(_Model):
    """A whole experiment."""
    name: str = "default"
    seed: int = Field(0, ge=0)
    steps: int | None = Field(2000, ge=1)
    source: Source = Field(default_factory=lambda: SyntheticSource.model_validate(DEFAULT_SOURCE))
    learner: LearnerConfig = Field(default_factory=LearnerConfig)
    baselines: list[Baseline] = Field(default_factory=lambda: ["tau1", "local", "centralized"])   # river: opt-in
    output: OutputConfig = Field(default_factory=OutputConfig)
    chunk_size: int = Field(256, ge=1)
    reservoir_size: int = Field(4096, ge=16)
    tracker: TrackerConfig = Field(default_factory=TrackerConfig)
    seeds: int = Field(1, ge=1)
    sweep: SweepConfig | None = None

    @field_validator("name")
    @classmethod
    def _one_path_component(cls, name: str) -> str:
        if not name or name in (".", "..") or any(c in name for c in "/\\\0"):
            raise ValueError(f"name: a run name is one folder name, without '/', '\\' or '..' (got {name!r})")
        if any(not c.isprintable() for c in name):
            bad = next(c for c in name if not c.isprintable())
            raise ValueError(f"name: a run name is one line of printable text; it holds the control character "
                             f"{bad!r}")
        if len(name) > NAME_MAX:
            raise ValueError(f"name: a run name has at most {NAME_MAX} characters (got {len(name)}: "
                             f"{name[:20]!r}…); the run folder is <name>-<timestamp>")
        return name

    @model_validator(mode="after")
    def _sweep_paths_exist(self):
        """Every swept path names a field (checked first: other messages would hide a misspelt path), and
        ``source.clients`` is swept."""
        if self.sweep is not None and self.source.kind == "movielens":
            raise ValueError("sweep: not available with source.kind movielens (a sweep compares numbers of "
                             "clients M; a MovieLens stream has one client per user); run each setting on its own")
        for key in (self.sweep.parameters if self.sweep is not None else ()):
            node, walked = self, []
            for part in key.split("."):
                if node is None or isinstance(node, dict):
                    break                     # a section left unset or a mapping (River params): checked per run
                if not isinstance(node, BaseModel):
                    what = "a list" if isinstance(node, (list, tuple)) else "a value"
                    raise ValueError(f"sweep.parameters.{key}: {'.'.join(walked)} is {what}, not a section; "
                                     f"sweep {'.'.join(walked)} itself (each swept value replaces it whole)")
                if part not in type(node).model_fields:
                    where = ".".join(walked) or "the experiment"
                    known = ", ".join(sorted(type(node).model_fields))
                    raise ValueError(f"sweep.parameters.{key}: {where} has no field {part!r} (fields: {known})")
                node = getattr(node, part)
                walked.append(part)
        if self.sweep is not None and "source.clients" not in self.sweep.parameters:
            raise ValueError("sweep.parameters must include source.clients: the comparison plot is regret against M")
        return self

    @model_validator(mode="after")
    def _model_fits_source(self):
        gmf, movielens = self.learner.model == "gmf", self.source.kind == "movielens"
        if movielens and not gmf:
            raise ValueError("learner.model: a movielens source is an interaction stream; set learner.model: gmf")
        if gmf and not movielens:
            raise ValueError(f"learner.model: gmf learns from interaction streams; set source.kind: movielens "
                             f"(source.kind is {self.source.kind})")
        sparse, powerlaw = self.learner.model == "sparse_logistic", self.source.kind == "sparse_powerlaw"
        if powerlaw and not sparse:
            raise ValueError(f"learner.model: source.kind sparse_powerlaw carries feature ids, not feature values; set "
                             f"learner.model: sparse_logistic (learner.model is {self.learner.model})")
        if sparse and not powerlaw:
            raise ValueError(f"learner.model: sparse_logistic learns from sparse feature ids; set source.kind: "
                             f"sparse_powerlaw (source.kind is {self.source.kind})")
        if self.learner.sparse is not None and not sparse:
            raise ValueError("learner.sparse: only learner.model sparse_logistic uses it; set learner.model: "
                             "sparse_logistic or remove it")
        twice = sorted({b for b in self.baselines if self.baselines.count(b) > 1})
        if twice:      # learners are keyed by name: a repeated baseline ran once while the saved config listed it twice
            raise ValueError(f"baselines: {', '.join(twice)} listed twice; each baseline runs once")
        if "fedavg" in self.baselines and not sparse:
            raise ValueError("baselines: fedavg is the sparse FedAvg rule of learner.model sparse_logistic; "
                             "drop it from baselines")
        if sparse:
            lc = self.learner
            if "baselines" not in self.model_fields_set:
                self.baselines = list(SPARSE_BASELINES)
            if lc.tau is None:
                raise ValueError("learner.tau: a sparse_logistic client keeps a round's rows; set tau (e.g. 10)")
            for field, bad in (("radius", lc.radius is not None), ("compression", lc.compression is not None)):
                if bad:
                    raise ValueError(f"learner.{field}: not available with learner.model sparse_logistic (no "
                                     f"projection, uncompressed sparse uploads); remove it")
            for name in self.baselines:
                if name in ("centralized", "river"):
                    why = ("one pooled dense model" if name == "centralized" else "River's dense linear models")
                    raise ValueError(f"baselines: {name} is not available with learner.model sparse_logistic "
                                     f"({why}, not a sparse client model); use tau1, local or fedavg")
            if "fedavg" in self.baselines and (lc.sparse or SparseConfig()).rule == "fedavg":
                raise ValueError("baselines: fedavg is already the main learner's rule (learner.sparse.rule: "
                                 "fedavg); drop it from baselines")
            if self.seeds > 1:
                raise ValueError("seeds: not available with learner.model sparse_logistic yet; run one seed per run "
                                 "(--seed)")
        if self.learner.gmf is not None and not gmf:
            raise ValueError("learner.gmf: only learner.model gmf uses it; set learner.model: gmf or remove it")
        if gmf:
            lc = self.learner
            if lc.tau is None:
                raise ValueError("learner.tau: a gmf client keeps a round's item rows; set tau (e.g. 10)")
            for field, bad in (("batch_size", lc.batch_size != 1), ("radius", lc.radius is not None),
                               ("compression", lc.compression is not None)):
                if bad:
                    raise ValueError(f"learner.{field}: not available with learner.model gmf (one interaction per "
                                     f"client and step, no projection, uncompressed sparse uploads); remove it")
        return self

    @model_validator(mode="after")
    def _river_without_radius(self):
        if "river" in self.baselines and self.learner.radius is not None:
            raise ValueError(f"baselines: river cannot be compared with learner.radius = {self.learner.radius}: "
                             f"River's models have no projection onto the ball; drop river from baselines or the "
                             f"radius")
        return self

    @model_validator(mode="after")
    def _steps_for_generators(self):
        if self.steps is None and self.source.kind in ("synthetic", "river_synth", "sparse_powerlaw"):
            raise ValueError("steps: a generator has no natural end; set steps to the number of steps T")
        if self.sweep is not None:
            src = self.source
            if self.learner.model == "sparse_logistic":
                if self.sweep.metric in ("regret_expected", "regret_dynamic"):
                    raise ValueError(f"sweep.metric: {self.sweep.metric} is not tracked by learner.model "
                                     f"sparse_logistic (only the static regret); use regret_static")
                return self
            metric = sweep_metric(self)[0]
            if metric == "regret_expected" and not (src.kind == "synthetic" and src.task == "least_squares"):
                raise ValueError("sweep.metric: regret_expected is tracked at every step only for synthetic least "
                                 "squares; use regret_dynamic (synthetic) or regret_static")
            if metric == "regret_dynamic" and src.kind != "synthetic":
                raise ValueError("sweep.metric: regret_dynamic needs a synthetic source; use regret_static")
        return self


def sweep_metric(cfg: "ExperimentConfig") -> tuple[str, str | None]:
    """The regret a sweep of ``cfg`` compares, and the note saying so when the program chose it.

    Returns ``(metric, note)``: ``sweep.metric`` when the config gives it (note None); else
    ``regret_static`` for ``learner.model: sparse_logistic`` (the only regret it tracks) with a one-line
    note for the sweep's header and summary files, else ``regret_expected`` (the documented default of the
    linear models; note None). Raises ValueError when ``cfg`` has no ``sweep`` section.
    """
    if cfg.sweep is None:
        raise ValueError("sweep_metric: the config has no sweep section")
    if cfg.sweep.metric is not None:
        return cfg.sweep.metric, None
    if cfg.learner.model == "sparse_logistic":
        return "regret_static", ("sweep.metric not given: comparing regret_static, the only regret a "
                                 "sparse_logistic run tracks (against the best fixed sparse model in hindsight)")
    return "regret_expected", None


DEFAULT_SOURCE = {"kind": "synthetic", "task": "logistic", "clients": 8, "dim": 10, "heterogeneity": 0.5,
                  "radius": 2.0, "drift": [{"kind": "rotation", "speed": 0.0005}, {"kind": "abrupt", "at": [1200]}]}


def default_config() -> ExperimentConfig:
    """The default experiment: 8 clients, logistic loss, moderate spatial
    heterogeneity, gradual drift plus one abrupt switch, τ = 10."""
    return ExperimentConfig.model_validate({
        "name": "default",
        "seed": 0,
        "steps": 2000,
        "source": DEFAULT_SOURCE,
        "learner": {"tau": 10, "step_size": {"kind": "constant", "eta": 0.05}},
    })


def _tags(union) -> tuple[str, ...]:
    """The ``kind`` values of a discriminated union of models."""
    members = get_args(get_args(union)[0])
    return tuple(get_args(m.model_fields["kind"].annotation)[0] for m in members)


_KINDS = {"source": _tags(Source), "drift": _tags(Drift), "inject": _tags(Injection)}


def _format_error(err: ValidationError) -> str:
    e = err.errors()[0]
    loc = ".".join(str(p) for p in e["loc"] if not (isinstance(p, str) and p in {
        "synthetic", "river_synth", "river_dataset", "file", "abrupt", "rotation", "linear", "periodic",
        "random_walk", "adaptive", "covariate_rotation", "covariate_scale", "label_flip",
        "sparse_powerlaw"}))
    msg = e["msg"]
    if e["type"] == "union_tag_not_found":   # a section or list item without its `kind`
        owner = [p for p in e["loc"] if isinstance(p, str)][-1]
        tags = ", ".join(_KINDS.get(owner, ()))
        return f"config error: {loc}.kind is required: one of {tags}"
    if e["type"] == "value_error":          # our own validators: the message names the field
        msg = msg.removeprefix("Value error, ")
        return f"config error: {msg}" if msg.split(":")[0].split(".")[0] in (loc.split(".")[0], "steps", "sweep") \
            else (f"config error: {loc}: {msg}" if loc else f"config error: {msg}")
    if e["type"] == "missing" and e["loc"] and e["loc"][-1] == "kind":
        kinds = {"split": "contiguous, column, dirichlet"}.get(str(e["loc"][-2]) if len(e["loc"]) > 1 else "")
        if kinds:
            return f"config error: {loc} is required: one of {kinds}"
    if e["type"] == "extra_forbidden":
        msg = "unknown field"
    # the user wrote YAML, not Python: no model or class names in the message
    msg = re.sub(r"valid dictionary or instance of \w+", "mapping of fields (key: value)", msg)
    msg = re.sub(r"valid dictionary", "mapping of fields (key: value)", msg)
    got = e.get("input")
    tail = "" if e["type"] in ("missing", "extra_forbidden") or isinstance(got, (dict, list)) else f" (got {got!r})"
    more = f" [and {len(err.errors()) - 1} more]" if len(err.errors()) > 1 else ""
    return f"config error: {loc or 'file'}: {msg}{tail}{more}"


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader with two YAML 1.2 rules it lacks.

    * Floats in YAML 1.2 form: ``1e-3``, ``2E5`` (no dot) are numbers, not the
      text ``"1e-3"`` of YAML 1.1 (the core schema's float pattern).
    * A mapping naming a key twice is refused (YAML 1.2 requires unique keys;
      PyYAML keeps the last one silently).
    """


class _Dumper(yaml.SafeDumper):
    """PyYAML's safe dumper that quotes the text :class:`_Loader` would read as a number (``name: '0E0'``)."""


_YAML12_FLOAT = re.compile(r"^[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+$")
for _cls, _base in ((_Loader, yaml.SafeLoader), (_Dumper, yaml.SafeDumper)):
    _cls.yaml_implicit_resolvers = {k: list(v) for k, v in _base.yaml_implicit_resolvers.items()}
    _cls.add_implicit_resolver("tag:yaml.org,2002:float", _YAML12_FLOAT, list("-+0123456789"))


def _mapping(loader, node, deep=False):
    seen = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            hash(key)
        except TypeError:
            continue                       # PyYAML's own error for unhashable keys follows
        if key in seen:
            line = key_node.start_mark.line + 1
            raise ConfigError(f"config error: the key {key!r} appears twice in one mapping (lines "
                              f"{seen[key]} and {line}); keep one")
        seen[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node, deep=deep)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def read_yaml(text: str):
    """Parse YAML text with :class:`_Loader` (YAML 1.2 floats, unique keys).

    >>> read_yaml("eta: 1e-3")
    {'eta': 0.001}
    """
    return yaml.load(text, Loader=_Loader)


def parse_config(data: dict) -> ExperimentConfig:
    """Validate a config mapping; raises :class:`ConfigError` with a one-line message."""
    if not isinstance(data, dict):
        raise ConfigError("config error: the file must contain a mapping of fields (name, source, learner, …)")
    try:
        return ExperimentConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_format_error(err)) from None


def load_config(path: str | Path) -> ExperimentConfig:
    """Read and validate a YAML/JSON experiment file.

    Raises
    ------
    ConfigError
        The file is missing, is not YAML, or a field is invalid.
    """
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"config error: --config {path} is a folder; give the experiment's YAML file")
    if not path.exists():
        raise ConfigError(f"config error: no such file: {path}")
    if not path.is_file():
        raise ConfigError(f"config error: --config {path} is not a regular file; give the experiment's YAML file")
    try:
        text = path.read_text(encoding="utf-8")
    except PermissionError:
        raise ConfigError(f"config error: --config {path} cannot be read (permission denied)") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config error: --config {path} is not a UTF-8 text file; give the experiment's "
                          f"YAML file") from None
    except OSError as err:
        raise ConfigError(f"config error: --config {path} cannot be read: {err.strerror or err}") from None
    try:
        data = read_yaml(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"config error: {path} is not valid YAML: {str(err).splitlines()[0]}") from None
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"config error: {path} does not hold a mapping of fields (name, source, learner, …); "
                          f"is it the experiment's YAML file?")
    cfg = parse_config(data or {})
    src = cfg.source
    if getattr(src, "kind", None) in ("file", "movielens") and not src.path.is_absolute():
        cfg = cfg.model_copy(update={"source": src.model_copy(update={"path": (path.parent / src.path).resolve()})})
    return cfg


def config_data(cfg: ExperimentConfig) -> dict:
    """``cfg`` as plain YAML-ready data (the content of a run's ``config.yaml``).

    Numbers keep their type and value (``.inf`` stays infinite, integer
    mapping keys stay integers), paths become strings, so that
    ``parse_config(config_data(cfg)) == cfg`` for every valid config.
    """
    def plain(v):
        if isinstance(v, dict):
            return {plain(k): plain(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        return str(v) if isinstance(v, Path) else v
    data = plain(cfg.model_dump(mode="python"))
    data["source"] = {"kind": data["source"].pop("kind"), **data["source"]}     # kind first, for the reader
    return data


def write_yaml(data) -> str:
    """YAML text that :func:`read_yaml` reads back to ``data`` (text such as ``'1e-3'`` is quoted).

    >>> print(write_yaml({"name": "1e-3", "eta": 0.001}), end="")
    name: '1e-3'
    eta: 0.001
    """
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True)


def dump_config(cfg: ExperimentConfig) -> str:
    """The YAML text of ``cfg`` that :func:`load_config` reads back to an equal config."""
    return write_yaml(config_data(cfg))


def apply_override(data: dict, dotted: str, value) -> dict:
    """Return a deep copy of ``data`` with ``a.b.c`` set to ``value``.

    When both the current value and ``value`` are mappings they are merged, so
    a sweep can change several fields of one section together.

    >>> apply_override({"a": {"b": 1, "c": 2}}, "a", {"c": 3})
    {'a': {'b': 1, 'c': 3}}
    """
    import copy
    out = copy.deepcopy(data)
    node = out
    keys = dotted.split(".")
    for k in keys[:-1]:
        if node.get(k) is None:              # a section left unset (e.g. learner.gmf: null) starts empty
            node[k] = {}
        node = node[k]
    old = node.get(keys[-1])
    if isinstance(old, dict) and isinstance(value, dict):
        old.update(copy.deepcopy(value))
    else:
        node[keys[-1]] = value
    return out
