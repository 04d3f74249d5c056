"""Names the plots and the command line give a run's learners (no plotting library imported)."""

from __future__ import annotations

from typing import Mapping


def main_label(summary: Mapping | None) -> str:
    """How plots and the CLI name a run's main learner: FedSEA, FedNCF (streaming GMF), FedSubAvg or FedAvg
    (streaming sparse logistic, by ``learner.sparse.rule``).

    >>> main_label({"model": "sparse_logistic", "rule": "fedsubavg"}), main_label(None)
    ('FedSubAvg', 'FedSEA')
    """
    summary = summary or {}
    model = summary.get("model")
    if model == "gmf":
        return "FedNCF"
    if model == "sparse_logistic":
        return "FedSubAvg" if summary.get("rule") == "fedsubavg" else "FedAvg"
    return "FedSEA"
