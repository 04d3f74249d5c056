"""Strategies: pluggable server rules deciding how client models are combined.

A strategy has one hook, :meth:`Strategy.aggregate`, called at the end of every
round (every τ steps). Returning ``None`` keeps the clients' models as they are.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from ..updates import GlobalUpdate
from .functions import weighted_average


class Strategy(ABC):
    """Server-side aggregation rule (cf. Flower's ``Strategy``)."""

    @abstractmethod
    def aggregate(self, W: np.ndarray, n_samples: np.ndarray) -> np.ndarray | None:
        """Combine client models.

        Parameters
        ----------
        W : ndarray (M, d, K)
            Client models at the end of the round.
        n_samples : ndarray (M,)
            Samples each client learned from during the round.

        Returns
        -------
        ndarray (d, K) or None
            The global model to broadcast, or ``None`` to leave clients alone.
        """


class FedAvg(Strategy):
    """Average the client models and broadcast (FedSEA Algorithm 1; FedAvg).

    Parameters
    ----------
    weighting : {"uniform", "samples"}
        ``uniform`` is FedSEA's (1/M) Σ_m x_{t,m}; ``samples`` weighs each
        client by the samples it saw in the round (FedAvg).

    Clients that saw no sample in the round (their stream has ended or not
    begun: real tables of unequal length) do not take part: the average is
    over the participating clients (partial participation, as in FedAvg), so
    stale models do not drag the global model. A round in which no client saw
    a sample keeps the current models. With every client present this is
    exactly FedSEA's average.

    >>> import numpy as np
    >>> FedAvg().aggregate(np.array([[[0.0]], [[2.0]]]), np.array([1, 1]))
    array([[1.]])
    >>> FedAvg().aggregate(np.array([[[0.0]], [[2.0]], [[9.0]]]), np.array([1, 1, 0]))   # client 2 sat out
    array([[1.]])
    """

    def __init__(self, weighting: str = "uniform"):
        if weighting not in ("uniform", "samples"):
            raise ValueError(f"The 'weighting' parameter of FedAvg must be 'uniform' or 'samples'. Got {weighting!r} instead.")
        self.weighting = weighting

    def aggregate(self, W, n_samples):
        taking_part = np.asarray(n_samples) > 0
        if not taking_part.any():
            return None
        if self.weighting == "uniform":
            return weighted_average(W) if taking_part.all() else weighted_average(W, taking_part.astype(np.float64))
        return weighted_average(W, n_samples)


class LocalOnly(Strategy):
    """No communication: every client keeps its own model (the local-only baseline)."""

    def aggregate(self, W, n_samples):
        return None


class MFFedAvg(Strategy):
    """FedNCF's server rule for a model with embedding tables (paper 003, §3.2–3.3).

    Sparse tables (item embeddings): each touched row averaged over the
    clients that updated it in the round (MF-FedAvg,
    :func:`~streamfl.aggregation.sparse.mf_fedavg`), or, for comparison,
    ``fedavg`` by samples / ``simple_avg`` (FedNCF's other two rules).
    Dense weights (h, b): FedAvg over the clients that took part
    (``weighting`` uniform or by samples), as :class:`FedAvg`.

    ``aggregate`` takes a :class:`~streamfl.updates.ModelUpdate`
    and returns a :class:`~streamfl.updates.GlobalUpdate` (the
    global deltas of the sparse tables and the new dense weights), or
    ``None`` when no client saw a sample in the round.

    >>> import numpy as np
    >>> from streamfl.updates import ModelUpdate, SparseRound
    >>> r = SparseRound(client=np.array([0]), ids=np.array([5]), rows=np.array([[0.007]]),
    ...                 counts=np.array([1]), n_samples=np.array([150, 170]))
    >>> u = ModelUpdate(sparse={"item": r}, dense={"h": np.array([[1.0], [3.0]])}, n_samples=np.array([150, 170]))
    >>> g = MFFedAvg().aggregate(u, u.n_samples)
    >>> float(g.sparse["item"].rows[0, 0]), g.dense["h"].tolist()     # the item moves as its one user moved it
    (0.007, [2.0])
    """

    RULES = ("mf_fedavg", "fedavg", "simple_avg")

    def __init__(self, weighting: str = "uniform", rule: str = "mf_fedavg"):
        if weighting not in ("uniform", "samples"):
            raise ValueError(f"The 'weighting' parameter of MFFedAvg must be 'uniform' or 'samples'. Got {weighting!r} instead.")
        if rule not in self.RULES:
            raise ValueError(f"The 'rule' parameter of MFFedAvg must be one of {list(self.RULES)}. Got {rule!r} instead.")
        self.weighting, self.rule = weighting, rule

    def aggregate(self, update, n_samples):
        from .sparse import fedavg, mf_fedavg, simple_avg
        n = np.asarray(n_samples)
        taking_part = n > 0
        if not taking_part.any():
            return None
        out = GlobalUpdate()
        for name, r in update.sparse.items():
            if self.rule == "mf_fedavg":
                out.sparse[name] = mf_fedavg(r)
            else:        # FedNCF's other rules average over the clients of the round (those that took part)
                sub = type(r)(client=np.cumsum(taking_part)[r.client] - 1, ids=r.ids, rows=r.rows, counts=r.counts,
                              n_samples=np.asarray(r.n_samples)[taking_part])
                out.sparse[name] = fedavg(sub, "samples") if self.rule == "fedavg" else simple_avg(sub)
        w = taking_part.astype(np.float64) if self.weighting == "uniform" else n.astype(np.float64)
        for name, W in update.dense.items():
            out.dense[name] = weighted_average(W, w)
        out.nbytes = sum(8 * (v.ids.size * (1 + v.rows.shape[1])) for v in out.sparse.values()) + \
            sum(8 * v.size for v in out.dense.values())
        return out


class FedSubAvg(Strategy):
    """FedSubAvg's server rule for streaming sparse models (paper 000, Algorithm 1), or sparse FedAvg to compare.

    ``aggregate`` takes a :class:`~streamfl.updates.ModelUpdate`
    (the sparse table's rows per client and the dense weights stacked) and
    returns a :class:`~streamfl.updates.GlobalUpdate`, or
    ``None`` when no client saw a sample in the round.

    Sparse tables, rule ``fedsubavg``: :func:`~streamfl.aggregation.sparse.fedsubavg`
    with the heat H_m = the number of clients of the population whose data
    involve row m in this round, i.e. whose upload carries row m (paper 000,
    §3: a feature's heat is the number of clients involving it; the paper
    counts it under secure aggregation, here the server counts the rows in
    the clear). In a streaming round every client that saw a sample takes
    part, so the population is those K = N clients (the M clients of the
    stream when all are present); with full participation the per-row
    correction N/(K·H_m) = 1/H_m makes the rule exactly the mean over the
    involving clients (it equals :func:`~streamfl.aggregation.sparse.mf_fedavg`).
    Rule ``fedavg``: sparse FedAvg, uniform: Σ_i Δ_{i,m} / K, so a row
    involved by H_m of the K clients moves H_m/K as far (the dilution FedSubAvg
    removes, paper 000 §1).

    Dense weights (the bias): the plain mean over the clients that took part
    (its heat is K, so both rules agree on it).

    Parameters
    ----------
    rule : {"fedsubavg", "fedavg"}

    Raises
    ------
    ValueError
        Unknown ``rule``.

    Two clients, one moves row 5 by 0.007, the other never touches it:
    FedSubAvg moves the row as its one involving client moved it, FedAvg
    half as far.

    >>> import numpy as np
    >>> from streamfl.updates import ModelUpdate, SparseRound
    >>> r = SparseRound(client=np.array([0]), ids=np.array([5]), rows=np.array([[0.007]]),
    ...                 counts=np.array([1]), n_samples=np.array([8, 8]))
    >>> u = ModelUpdate(sparse={"w": r}, dense={"b": np.array([[1.0], [3.0]])}, n_samples=np.array([8, 8]))
    >>> g = FedSubAvg().aggregate(u, u.n_samples)
    >>> float(g.sparse["w"].rows[0, 0]), g.dense["b"].tolist()
    (0.007, [2.0])
    >>> float(FedSubAvg("fedavg").aggregate(u, u.n_samples).sparse["w"].rows[0, 0])
    0.0035
    """

    RULES = ("fedsubavg", "fedavg")

    def __init__(self, rule: str = "fedsubavg"):
        if rule not in self.RULES:
            raise ValueError(f"The 'rule' parameter of FedSubAvg must be one of {list(self.RULES)}. Got {rule!r} instead.")
        self.rule = rule

    def aggregate(self, update, n_samples):
        from .sparse import fedavg, fedsubavg
        n = np.asarray(n_samples)
        taking_part = n > 0
        if not taking_part.any():
            return None
        K = int(taking_part.sum())
        out = GlobalUpdate()
        for name, r in update.sparse.items():
            # the round's clients only (K of them), renumbered 0..K−1
            sub = type(r)(client=np.cumsum(taking_part)[r.client] - 1, ids=r.ids, rows=r.rows, counts=r.counts,
                          n_samples=np.asarray(r.n_samples)[taking_part])
            if self.rule == "fedavg":
                out.sparse[name] = fedavg(sub, "uniform")
            else:
                n_rows = int(r.ids.max()) + 1 if r.ids.size else 0
                heat = np.bincount(sub.ids, minlength=n_rows).astype(np.float64)   # clients involving each row
                out.sparse[name] = fedsubavg(sub, heat, population=K)
        for name, W in update.dense.items():
            out.dense[name] = weighted_average(W, taking_part.astype(np.float64))
        out.nbytes = sum(8 * (v.ids.size * (1 + v.rows.shape[1])) for v in out.sparse.values()) + \
            sum(8 * v.size for v in out.dense.values())
        return out
