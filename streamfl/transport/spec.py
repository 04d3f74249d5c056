"""What every process of a Kafka run needs to know, read from the run folder.

The orchestrator (:mod:`streamfl.runtime.kafka_run`) writes the resolved
experiment to ``<run_dir>/config.yaml``; the producer, the workers, the
aggregator and the tracker all rebuild the same (deterministic, seeded)
stream from it, so nothing but numbers travels over Kafka.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path


from ..config import ExperimentConfig, load_config
from ..models import StepSize


def read_config(path: str | Path) -> ExperimentConfig:
    """Read a run's config file as :func:`streamfl.config.load_config` does (ConfigError if invalid).

    A relative ``source.path`` is relative to the config file's folder, as
    for ``streamfl run``, so every role reads the same table.
    """
    return load_config(path)


@dataclass(frozen=True)
class LearnerSpec:
    """FedSEA's parameters as the workers need them.

    Attributes
    ----------
    n_clients, n_features, n_classes : int
        M, d and K (K = 1 unless softmax).
    n_steps : int
        T.
    task : str
    step_size : StepSize
    radius : float or None
    tau : int or None
        τ; ``None`` never averages.
    """

    n_clients: int
    n_features: int
    n_classes: int
    n_steps: int
    task: str
    step_size: StepSize
    radius: float | None
    tau: int | None

    @property
    def n_rounds(self) -> int:
        """Number of averaging rounds, ⌊T/τ⌋ (0 without averaging)."""
        return 0 if self.tau is None else self.n_steps // self.tau


def learner_spec(cfg: ExperimentConfig, stream) -> LearnerSpec:
    """The :class:`LearnerSpec` of ``cfg`` on its ``stream`` (as :func:`build_learners` builds FedSEA)."""
    lc = cfg.learner
    eta = StepSize(lc.step_size.kind, lc.step_size.eta, lc.step_size.mu, lc.step_size.t0)
    return LearnerSpec(stream.n_clients, stream.n_features, stream.n_classes, stream.n_steps, stream.task,
                       eta, lc.radius, lc.tau)


def kafka_unsupported(cfg: ExperimentConfig, stream) -> str | None:
    """Why ``cfg`` cannot run over Kafka, or ``None`` if it can."""
    if cfg.sweep is not None:
        return "sweeps are not supported over Kafka; run each configuration separately"
    if getattr(stream, "adaptive", False):
        return "adaptive drift is not supported over Kafka (the adversary would need the workers' models)"
    if cfg.learner.tau is not None and cfg.learner.weighting != "uniform":
        return "only learner.weighting: uniform is supported over Kafka"
    return None


CONFIG_HEADER = "config"      # record header carrying a config fingerprint (see config_fingerprint)


class ConfigMismatch(ValueError):
    """A record was produced from another config than this role's; one-line message."""


def config_fingerprint(cfg: ExperimentConfig, learner: bool = False) -> bytes:
    """A 16-hex-digit fingerprint of what decides a run's numbers, sent as the record header ``config``.

    Each client's DATA record of step 1 carries the stream's (seed, steps,
    source); LOSS records also the learner's settings (``learner=True``). A role started with another
    config file than the one that produced a record would otherwise compute
    silently wrong numbers (streams are regenerated from the config);
    :func:`check_fingerprint` stops it instead. Output settings and the name
    may differ between roles.
    """
    parts = {"seed": cfg.seed, "steps": cfg.steps, "source": cfg.source.model_dump(mode="json")}
    if learner:
        parts["learner"] = cfg.learner.model_dump(mode="json")
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16].encode()


def check_fingerprint(headers, want: bytes, what: str) -> None:
    """Raise :class:`ConfigMismatch` if ``headers`` carry a ``config`` fingerprint other than ``want``.

    Records without the header (replayed files, hand-made records) pass.
    """
    for key, value in headers or ():
        if key == CONFIG_HEADER and value != want:
            raise ConfigMismatch(f"{what} was produced from another config (fingerprint {value.decode(errors='replace')}, "
                                 f"this role's {want.decode()}): every role of a run must use the same config file "
                                 f"(seed, steps, source, learner); use a new --run-id for a new config")
