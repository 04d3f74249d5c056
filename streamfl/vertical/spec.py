"""A vertical (C-VFL) streaming run described by one config file, and its embedded execution.

The config (YAML or JSON, validated with pydantic; a bad field is a one-line
:class:`~streamfl.config.ConfigError`)::

    kind: vertical
    seed: 0                  # model initialisation, stream order, dither keys
    dataset: digits          # scikit-learn's 8×8 digits, one 4×4 quadrant per party (M = 4)
    samples: 400             # the stream: the first `samples` training samples in a seeded order (null: all 1,437)
    batch_size: 32           # B, samples per round (the last round may be smaller)
    local_iterations: 10     # Q
    lr: 0.1                  # η, constant
    embedding: 16            # P_m
    hidden: 32               # hidden width of the party models (0: none)
    compressor: {kind: scalar, bits: 2}          # C_m on the embeddings, range (−1, 1); top-k per vector
    server_compressor: {kind: scalar, bits: 2}   # C_0 on θ_0, scaled by max |θ_0|; default: as `compressor`

The streaming variant of C-VFL runs on it: each batch of B arriving samples is
scored by the server before the round (prequential loss), then learned from
with one round of Algorithm 1. :func:`run_embedded` runs it in one process;
:mod:`streamfl.runtime.vertical_kafka` runs it with one process per party and a
server over Kafka, with the same numbers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal, Optional

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..config import ConfigError


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class CompressorSpec(_Model):
    """A compressor by name (:func:`~streamfl.compression.make_compressor`); b = 32 means uncompressed float32."""
    kind: Literal["none", "scalar", "lattice", "topk"] = "none"
    bits: int = Field(32, ge=1, le=32)


class VerticalConfig(_Model):
    """A streaming C-VFL run (see the module docstring for every field)."""
    kind: Literal["vertical"] = "vertical"
    seed: int = Field(0, ge=0)
    dataset: Literal["digits"] = "digits"
    samples: Optional[int] = Field(None, ge=1)
    batch_size: int = Field(32, ge=1)
    local_iterations: int = Field(10, ge=1)
    lr: float = Field(0.1, gt=0)
    embedding: int = Field(16, ge=1)
    hidden: int = Field(32, ge=0)
    compressor: CompressorSpec = CompressorSpec()
    server_compressor: Optional[CompressorSpec] = None


def _one_line(e: ValidationError) -> str:
    err = e.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "config"
    return f"config error: {where}: {err['msg']} (got {err.get('input')!r})"


def load_vertical_config(path: Path | str) -> VerticalConfig:
    """Read and validate a vertical config file; :class:`ConfigError` (one line) when it is wrong."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"config error: cannot read {path}: {e.strerror or e}") from None
    try:
        raw = yaml.safe_load(text) if path.suffix != ".json" else json.loads(text)
    except Exception as e:
        raise ConfigError(f"config error: {path} is not valid YAML/JSON ({type(e).__name__})") from None
    return vertical_config(raw)


def vertical_config(raw) -> VerticalConfig:
    """Validate a dict as a :class:`VerticalConfig` (:class:`ConfigError` with one line otherwise)."""
    if not isinstance(raw, dict):
        raise ConfigError("config error: a vertical config must be a mapping of fields")
    try:
        return VerticalConfig.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(_one_line(e)) from None


def is_vertical(path: Path | str) -> bool:
    """Whether a config file declares ``kind: vertical`` (False if it cannot be read: the caller reports that)."""
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except Exception:
        return False
    return isinstance(raw, dict) and raw.get("kind") == "vertical"


def stream_data(cfg: VerticalConfig):
    """The run's stream: a VerticalBatch of N samples in arrival order, and the number of classes K."""
    from .datasets import digits_quadrants
    train, _ = digits_quadrants()
    order = np.random.default_rng(cfg.seed).permutation(len(train))
    if cfg.samples is not None:
        if cfg.samples > len(train):
            raise ConfigError(f"config error: samples: the digits stream has {len(train)} training samples, "
                              f"got {cfg.samples}")
        order = order[:cfg.samples]
    return train.take(order), 10


def compressors(cfg: VerticalConfig):
    """(C_m, C_0): embeddings on range (−1, 1) (top-k per vector); θ_0 scaled by max |θ_0| (top-k over θ_0)."""
    from ..compression import make_compressor
    spec0 = cfg.server_compressor or cfg.compressor
    return (make_compressor(cfg.compressor.kind, cfg.compressor.bits, range=(-1.0, 1.0), axis=-1),
            make_compressor(spec0.kind, spec0.bits, range=None, axis=None))


def resolved_compressors(cfg: VerticalConfig, n_parties: int = 4, n_classes: int = 10) -> dict:
    """What each compressor of the run really is, for the run header and summary.json.

    ``{"embeddings": {...}, "server": {...}}``, each with ``kind``, ``bits``,
    ``components`` (P: the embedding size for C_m; the fusion layer's
    E·M·K + K weights for C_0, :func:`initial_models`) and ``from`` (which
    config field it comes from: ``server_compressor`` falls back to
    ``compressor`` when not given). Top-k adds ``k`` = max(1, ⌊P·b/32⌋), at
    most P, and a ``note`` when ⌊P·b/32⌋ = 0 was raised to 1.
    """
    from ..compression import TopK
    out = {}
    p0 = cfg.embedding * n_parties * n_classes + n_classes
    for name, spec, where, p in (
            ("embeddings", cfg.compressor, "compressor", cfg.embedding),
            ("server", cfg.server_compressor or cfg.compressor,
             "server_compressor" if cfg.server_compressor is not None else "compressor (server_compressor not given)",
             p0)):
        entry = {"kind": spec.kind, "bits": spec.bits, "components": p, "from": where}
        if spec.kind == "topk":
            entry["k"] = TopK(spec.bits).k(p)            # the k the compressor keeps
            if p * spec.bits // 32 == 0:
                entry["note"] = f"top-k: ⌊P·b/32⌋ = ⌊{p}·{spec.bits}/32⌋ = 0, raised to k = 1"
        out[name] = entry
    return out


def compressor_lines(resolved: dict) -> list[str]:
    """One header line per compressor of :func:`resolved_compressors` (what is sent, and from which field)."""
    lines = []
    for name, label in (("embeddings", "embeddings C_m"), ("server", "server model C_0")):
        e = resolved[name]
        k = f", k = {e['k']} of {e['components']}" if "k" in e else f", {e['components']} components"
        lines.append(f"{label}: {e['kind']} b = {e['bits']}{k} (from {e['from']})"
                     + (f"; {e['note']}" if "note" in e else ""))
    return lines


def initial_models(cfg: VerticalConfig, widths, n_classes: int):
    """The M party models and the server model, initialised from ``cfg.seed`` (the same in every process)."""
    import torch
    from torch import nn

    from .models import ConcatFusion, tanh_embedding
    torch.manual_seed(cfg.seed)
    parties = [tanh_embedding(w, cfg.embedding, cfg.hidden or None) for w in widths]
    server = ConcatFusion(nn.Linear(cfg.embedding * len(widths), n_classes))
    return parties, server


def round_row(r: int, n: int, losses: np.ndarray, bytes_up: int, bytes_down: int, cum_loss: float) -> dict:
    """One row of metrics.csv: round, samples so far, mean prequential loss, cumulative loss and bytes."""
    return {"round": r, "samples": n, "loss": float(np.mean(losses)), "cumulative_loss": cum_loss,
            "bytes_up": int(bytes_up), "bytes_down": int(bytes_down)}


def run_embedded(cfg: VerticalConfig, on_round=None) -> list[dict]:
    """The streaming C-VFL run in one process: one metrics row per round (see :func:`round_row`).

    ``on_round(row)``, if given, is called after every round (the live view).
    """
    import torch

    from .cvfl import CVFL
    from .train import prequential, stream_batches
    torch.set_num_threads(1)
    data, K = stream_data(cfg)
    parties, server = initial_models(cfg, data.widths, K)
    cm, c0 = compressors(cfg)
    model = CVFL(parties, server, local_iterations=cfg.local_iterations, lr=cfg.lr, compressor=cm,
                 server_compressor=c0, seed=cfg.seed)
    rows, n, cum = [], 0, 0.0
    for rep in prequential(model, stream_batches(data, cfg.batch_size)):
        n += len(rep.sample_losses)
        cum += float(rep.sample_losses.sum())
        rows.append(round_row(rep.round, n, rep.sample_losses, rep.bytes_up_total, rep.bytes_down_total, cum))
        if on_round is not None:
            on_round(rows[-1])
    return rows


def write_results(out: Path, cfg: VerticalConfig, rows: list[dict], mode: str, extra: dict | None = None) -> dict:
    """metrics.csv (one row per round) and summary.json in ``out``; returns the summary."""
    import pandas as pd
    out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(out / "metrics.csv", index=False)
    last = rows[-1] if rows else {}
    summary = {"mode": mode, "config": cfg.model_dump(), "rounds": len(rows), "samples": last.get("samples", 0),
               "mean_loss": last.get("cumulative_loss", float("nan")) / max(last.get("samples", 0), 1),
               "cumulative_loss": last.get("cumulative_loss"), "bytes_up": last.get("bytes_up", 0),
               "bytes_down": last.get("bytes_down", 0), "compressors": resolved_compressors(cfg), **(extra or {})}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary
