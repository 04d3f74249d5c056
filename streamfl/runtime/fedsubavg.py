"""FedSubAvg vs FedAvg on a drifting sparse stream, round by round (paper 000).

Protocol of one run (N clients, rounds of τ steps):

1. round r covers steps rτ … rτ+τ−1 of every client's stream
   (:class:`~streamfl.generators.sparse_features.SparsePowerLawStream`);
2. the server samples K of the N clients uniformly without replacement;
3. each sampled client downloads the rows of the features its round data
   involve, runs τ steps of local SGD (one mini-batch of b samples per step)
   on sparse logistic regression (:func:`~streamfl.models.sparse_logistic.local_sgd`)
   and sends its sparse update (ids, deltas, counts) and its bias delta;
4. the server aggregates the rows with the rule — FedAvg (uniform; every
   client has τ·b samples) or FedSubAvg with the round's heat — and the bias
   with the plain mean (its heat is N, so both rules agree on it);
5. every ``eval_every`` rounds the global model is scored on fresh samples of
   the current distribution pooled over all clients (ROC AUC).

**Heat** (FedSubAvg's H_m): every client of the population reports which
features its data of the round involve (a 0/1 per feature; the paper obtains
these counts through secure aggregation, here they are in the clear), and
H_m counts the reporting clients. As popularity drifts, so does the heat.

The result of a run is the AUC curve and the first evaluated round whose AUC
reaches ``target_auc`` (None if never). Both rules see the same stream, the
same client samples and the same test sets (same seed).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..aggregation.sparse import apply_rows, fedavg, fedsubavg
from ..evaluation import roc_auc
from ..generators.sparse_features import SparsePowerLawStream
from ..models.sparse_logistic import local_sgd, predict_logit

RULES = ("fedavg", "fedsubavg")


@dataclass(frozen=True)
class SubAvgSettings:
    """Round protocol of the FedSubAvg experiment.

    Attributes
    ----------
    clients_per_round : int
        K.
    local_steps : int
        τ: local SGD steps per round, one mini-batch of the stream each.
    lr : float
        η, local SGD step size.
    l2 : float
        λ on the rows a mini-batch uses.
    rounds : int
        Rounds to run.
    eval_every : int
        Rounds between evaluations.
    test_per_client : int
        Fresh test samples per client at each evaluation.
    target_auc : float
        AUC whose first crossing is reported.
    """

    clients_per_round: int = 10
    local_steps: int = 5
    lr: float = 0.5
    l2: float = 0.0
    rounds: int = 200
    eval_every: int = 5
    test_per_client: int = 20
    target_auc: float = 0.75

    def __post_init__(self):
        for name in ("clients_per_round", "local_steps", "rounds", "eval_every", "test_per_client"):
            if getattr(self, name) < 1:
                raise ValueError(f"The '{name}' setting must be ≥ 1. Got {getattr(self, name)!r} instead.")
        if not (self.lr > 0 and self.l2 >= 0 and 0.5 < self.target_auc < 1):
            raise ValueError(f"Need lr > 0, l2 ≥ 0 and 0.5 < target_auc < 1. Got {self.lr!r}, {self.l2!r}, {self.target_auc!r}.")


def run_rules(stream: SparsePowerLawStream, settings: SubAvgSettings, rules=RULES, seed: int = 0) -> dict:
    """Run every rule on the same stream, client samples and test sets; returns per-rule results.

    Returns
    -------
    dict rule → {"rounds": [...], "auc": [...], "rounds_to_target": int or None, "bayes_auc": [...]}
        ``bayes_auc`` is the AUC of the true weights w* on the same test sets.

    Raises
    ------
    ValueError
        Unknown rule, K > N, or a stream too short for the rounds.
    """
    for rule in rules:
        if rule not in RULES:
            raise ValueError(f"The rule must be one of {list(RULES)}. Got {rule!r} instead.")
    s, N, F = settings, stream.n_clients, stream.n_features
    if s.clients_per_round > N:
        raise ValueError(f"clients_per_round K = {s.clients_per_round} exceeds the stream's N = {N} clients.")
    if stream.n_steps < s.rounds * s.local_steps:
        raise ValueError(f"The stream has {stream.n_steps} steps; {s.rounds} rounds of τ = {s.local_steps} need "
                         f"{s.rounds * s.local_steps}.")
    rng = np.random.default_rng([seed, 10])
    state = {rule: {"w": np.zeros((F, 1)), "b": 0.0, "rounds": [], "auc": [], "hit": None} for rule in rules}
    bayes = []
    chunks = stream.chunks(s.local_steps)
    for r in range(s.rounds):
        chunk = next(chunks)                                # (τ, N, b, nnz)
        ids, y = chunk.ids.transpose(1, 0, 2, 3), chunk.y.transpose(1, 0, 2)
        sampled = np.sort(rng.choice(N, s.clients_per_round, replace=False))
        involved = np.unique(np.repeat(np.arange(N), ids[0].size) * F + ids.reshape(-1))   # (client, feature) pairs
        heat = np.bincount(involved % F, minlength=F).astype(np.float64)
        for rule in rules:
            st = state[rule]
            update, bias_delta, _ = local_sgd(st["w"][:, 0], st["b"], ids[sampled], y[sampled], s.lr, s.l2)
            delta = fedavg(update, "uniform") if rule == "fedavg" else fedsubavg(update, heat, N)
            apply_rows(st["w"], delta)
            st["b"] += float(bias_delta.mean())
        if (r + 1) % s.eval_every == 0:
            t = (r + 1) * s.local_steps
            test_ids, test_y = stream.test_set(t, s.test_per_client, seed=seed)
            bayes.append(roc_auc(stream.intercept + stream.true_weights[test_ids].sum(axis=1), test_y))
            for rule in rules:
                st = state[rule]
                auc = roc_auc(predict_logit(st["w"][:, 0], st["b"], test_ids), test_y)
                st["rounds"].append(r + 1)
                st["auc"].append(auc)
                if st["hit"] is None and auc >= s.target_auc:
                    st["hit"] = r + 1
    return {rule: {"rounds": st["rounds"], "auc": st["auc"], "rounds_to_target": st["hit"], "bayes_auc": bayes}
            for rule, st in state.items()}
