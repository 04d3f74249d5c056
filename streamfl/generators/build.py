"""The stream a config describes: ``source`` → a replayable :class:`~streamfl.generators.base.Stream`.

Every process of a run builds the same stream from the same config (streams
are deterministic for a seed): the embedded engine, and over Kafka the
producers, the workers (for shapes and step sizes) and the tracker. This
module imports only the generators, so that the Kafka roles start quickly.
"""

from __future__ import annotations

from ..config import ExperimentConfig
from . import schedules as S
from .synthetic import SyntheticStream

__all__ = ["build_stream"]


def build_stream(cfg: ExperimentConfig):
    """The stream described by ``cfg.source`` (replayable, seeded by ``cfg.seed``).

    Raises ValueError / FileNotFoundError for unknown datasets, columns or files.
    """
    src = cfg.source
    b = cfg.learner.batch_size
    if src.kind == "synthetic":
        drift = []
        for d in src.drift:
            kw = d.model_dump(exclude={"kind", "clients", "delay", "speeds"})
            schedule = S.SCHEDULES[d.kind](**kw)
            if d.kind != "adaptive":
                schedule.per_client(d.clients, d.delay, d.speeds)
            drift.append(schedule)
        change = None if src.heterogeneity_change is None else \
            S.HeterogeneityChange(**src.heterogeneity_change.model_dump())
        covariate = [S.CovariateShift(cv.at, cv.factors, cv.clients) for cv in src.covariate]
        return SyntheticStream(src.task, n_clients=src.clients, n_features=src.dim, n_steps=cfg.steps,
                               batch_size=b, noise=src.noise, heterogeneity=src.heterogeneity, radius=src.radius,
                               feature_scale=src.feature_scale, drift=drift, seed=cfg.seed,
                               heterogeneity_change=change, covariate=covariate,
                               tails=None if src.tails is None else src.tails.model_dump(),
                               adversary=src.adversary)
    if src.kind == "river_synth":
        from ..generators.river_synth import RiverSynthStream
        return RiverSynthStream(src.name, n_clients=src.clients, n_steps=cfg.steps, batch_size=b,
                                seed=cfg.seed, params=src.params, shared_concept=src.shared_concept,
                                standardize=src.standardize, standardize_label=src.standardize_label)
    if src.kind == "sparse_powerlaw":
        from ..generators.sparse_features import SparsePowerLawStream
        return SparsePowerLawStream(n_clients=src.clients, n_features=src.features, nnz=src.nnz, batch_size=b,
                                    n_steps=cfg.steps, alpha=src.alpha, hot=src.hot, weight_scale=src.weight_scale,
                                    intercept=src.intercept, drift_period=src.drift_period,
                                    drift_swaps=src.drift_swaps, seed=cfg.seed)
    if src.kind == "movielens":
        from ..generators.interactions import movielens_stream
        return movielens_stream(src.path, max_steps=cfg.steps)
    from ..generators import inject as I
    from ..generators.tabular import TableStream, load_river_dataset, load_table_file
    if src.kind == "river_dataset":
        table, label = load_river_dataset(src.name)
        label = src.label or label
    else:
        table, label = load_table_file(src.path, thousands=src.thousands), src.label
    stream = TableStream(table, label=label, features=src.features, n_clients=src.clients, split=src.split.kind,
                         client_column=src.split.column, alpha=0.5 if src.split.alpha is None else src.split.alpha, time_column=src.time_column,
                         batch_size=b, seed=cfg.seed, task=src.task, standardize=src.standardize,
                         intercept=src.intercept, max_steps=cfg.steps,
                         prior_shift=None if src.prior_shift is None else src.prior_shift.model_dump(),
                         categorical=src.categorical, standardize_label=src.standardize_label)
    if src.inject:
        makers = {"covariate_rotation": I.CovariateRotation, "covariate_scale": I.CovariateScale,
                  "label_flip": I.LabelFlip}
        injectors = []
        for k, spec in enumerate(src.inject):
            kw = spec.model_dump(exclude={"kind"})
            if kw.get("end") is None and spec.kind != "label_flip":
                kw["end"] = kw["start"]
            injectors.append(makers[spec.kind](**kw, seed=cfg.seed + k))
        stream = I.InjectedDrift(stream, injectors)
    return stream
