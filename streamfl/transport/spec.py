"""What every process of a Kafka run needs to know, read from the run folder.

The orchestrator (:mod:`streamfl.runtime.kafka_run`) writes the resolved
experiment to ``<run_dir>/config.yaml``; the producer, the workers, the
aggregator and the tracker all rebuild the same (deterministic, seeded)
stream from it, so nothing but numbers travels over Kafka.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from typing import TYPE_CHECKING

if TYPE_CHECKING:      # spec is imported by every role, the aggregator too: it stays free of numpy and pydantic
    from ..config import ExperimentConfig
    from ..models import StepSize


def read_config(path: str | Path) -> ExperimentConfig:
    """Read a role's config file (``--config``, or a run folder's ``config.yaml``) as ``streamfl run`` does.

    Same rules as :func:`streamfl.config.load_config`, so every role of a run
    reads the same table: a relative ``source.path`` is relative to the config
    file's folder, whatever the role's working directory.

    Raises
    ------
    ConfigError
        The file is missing, is not YAML, or a field is invalid.
    """
    from ..config import load_config
    return load_config(path)


def code_origin(role_file: str) -> str:
    """Where a role process imported its code from, for the first line of its log.

    ``role_file`` is the role module's ``__file__``; the answer names it and
    the folder of the ``streamfl`` package, e.g. ``/venv/.../site-packages/
    consumers/worker.py, streamfl from /venv/.../site-packages/streamfl``.
    """
    import streamfl
    return f"{Path(role_file).resolve()}, streamfl from {Path(streamfl.__file__).resolve().parent}"


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
    from ..models import StepSize
    lc = cfg.learner
    eta = StepSize(lc.step_size.kind, lc.step_size.eta, lc.step_size.mu, lc.step_size.t0)
    return LearnerSpec(stream.n_clients, stream.n_features, stream.n_classes, stream.n_steps, stream.task,
                       eta, lc.radius, lc.tau)


#: Why a streaming sparse logistic run (FedSubAvg) is refused over Kafka (``run --broker`` and every role).
SPARSE_OVER_KAFKA = ("--broker: learner.model sparse_logistic runs embedded only for now (its sparse uploads have no "
                     "Kafka wire format yet); run without --broker")


def kafka_unsupported(cfg: ExperimentConfig, stream) -> str | None:
    """Why ``cfg`` cannot run over Kafka, or ``None`` if it can."""
    if cfg.learner.model == "sparse_logistic":
        return SPARSE_OVER_KAFKA
    if cfg.sweep is not None:
        return "sweeps are not supported over Kafka; run each configuration separately"
    if getattr(stream, "adaptive", False):
        return "adaptive drift is not supported over Kafka (the adversary would need the workers' models)"
    if cfg.learner.tau is not None and cfg.learner.weighting != "uniform":
        return "only learner.weighting: uniform is supported over Kafka"
    return None


def upload_compressor(cfg: ExperimentConfig):
    """The compressor of the clients' uploads that ``cfg.learner.compression`` names, or ``None``.

    One definition for the embedded engine, the Kafka workers (encode) and
    the aggregator (decode), so both sides of the wire use the same
    compressor: model updates are unbounded, so the quantizers scale each
    payload by its max |update| (the scale travels in the payload) and top-k
    keeps the k largest of the whole update (see
    :func:`streamfl.compression.make_compressor`).
    """
    comp = cfg.learner.compression
    if comp is None:
        return None
    from ..compression import make_compressor
    return make_compressor(comp.kind, comp.bits, range=None, axis=None)


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
    may differ between roles. A ``file`` source counts by the SHA-256 of the
    table's bytes, not by its path, so roles on machines that keep the table
    in different folders agree, and roles reading different tables do not.
    """
    source = cfg.source.model_dump(mode="json")
    if source.get("kind") == "file":                 # the table's content, not where this machine keeps it
        source["path"] = _file_digest(cfg.source.path)
    parts = {"seed": cfg.seed, "steps": cfg.steps, "source": source}
    if learner:
        parts["learner"] = cfg.learner.model_dump(mode="json")
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16].encode()


def _file_digest(path: Path) -> str:
    """``sha256:<hex>`` of a file's bytes (the path itself if it cannot be read: the role fails on it later)."""
    try:
        st = os.stat(path)
    except OSError:
        return str(path)
    return _digest(str(Path(path).resolve()), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _digest(path: str, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return "sha256:" + h.hexdigest()


def check_fingerprint(headers, want: bytes, what: str) -> None:
    """Raise :class:`ConfigMismatch` if ``headers`` carry a ``config`` fingerprint other than ``want``.

    Records without the header (replayed files, hand-made records) pass.
    """
    for key, value in headers or ():
        if key == CONFIG_HEADER and value != want:
            raise ConfigMismatch(f"{what} was produced from another config (fingerprint {value.decode(errors='replace')}, "
                                 f"this role's {want.decode()}): every role of a run must use the same config file "
                                 f"(seed, steps, source, learner); use a new --run-id for a new config")
