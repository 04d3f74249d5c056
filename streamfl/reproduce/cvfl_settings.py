"""What defines the C-VFL reproduction (:mod:`streamfl.reproduce.cvfl`): its settings and the compressors' labels.

Apart from the runner so that the runner and its figures
(:mod:`streamfl.reproduce.cvfl_plots`) both import it and not each other.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

COMPRESSORS = ("scalar", "lattice", "topk")
LABELS = {"scalar": "scalar quantizer", "lattice": "hexagonal lattice VQ", "topk": "top-k", "none": "no compression"}


@dataclass(frozen=True)
class Settings:
    """Everything that defines the reproduction (written to summary.json).

    Attributes
    ----------
    seeds : int
        Runs per configuration (seeds 0..seeds−1: model initialisation, mini-batch order, dither).
    epochs : int
        Epochs of the compression grid.
    local_iterations : int
        Q of the compression grid.
    lr, batch_size : float, int
        η (constant) and B.
    embedding, hidden : int
        P_m (each party's embedding size) and the hidden width of the party models.
    bits : tuple of int
        b values of the grid (b = 32 is always added as the baseline).
    compressors : tuple of str
    target : float
        Target test accuracy for bytes-to-target and time-to-target.
    evals_per_epoch : int
    q_values, latencies_ms : tuples
        The Q/latency table's rows and columns.
    q_compressor, q_bits : str, int
        The compressor of the Q/latency table.
    q_max_epochs : int
        Cap on the Q/latency runs (a run that misses the target by then is reported as not reaching it).
    workers : int
        Processes running the jobs.
    """

    seeds: int = 5
    epochs: int = 15
    local_iterations: int = 10
    lr: float = 0.1
    batch_size: int = 64
    embedding: int = 16
    hidden: int = 32
    bits: tuple[int, ...] = (2, 3, 4)
    compressors: tuple[str, ...] = COMPRESSORS
    target: float = 0.90
    evals_per_epoch: int = 4
    q_values: tuple[int, ...] = (1, 10, 25)
    latencies_ms: tuple[float, ...] = (1.0, 10.0, 50.0, 200.0)
    q_compressor: str = "lattice"
    q_bits: int = 3
    q_max_epochs: int = 30
    workers: int = field(default_factory=lambda: min(2, os.cpu_count() or 1))

    def check(self) -> None:
        """Refuse settings that cannot run, naming the field."""
        for name in ("seeds", "epochs", "local_iterations", "batch_size", "embedding", "hidden",
                     "evals_per_epoch", "q_max_epochs", "workers"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be ≥ 1, got {getattr(self, name)}")
        if not 0 < self.target <= 1:
            raise ValueError(f"target must be an accuracy in (0, 1], got {self.target}")
        bad = [c for c in self.compressors if c not in COMPRESSORS]
        if bad or self.q_compressor not in COMPRESSORS:
            raise ValueError(f"compressors must be among {', '.join(COMPRESSORS)}; got {bad or self.q_compressor}")
        if any(not 1 <= b <= 8 for b in self.bits) or not 1 <= self.q_bits <= 8:
            raise ValueError(f"bits must be in 1..8 (b = 32 is the baseline), got {self.bits} and q_bits {self.q_bits}")
