"""FedNCF's round-based protocol on implicit feedback (paper 003, §3 and §5).

One **aggregation round**: the server picks K users (clients); each receives
the global item embeddings and network weights, trains locally (its own user
embedding never leaves it) for E local epochs of Adam (SparseAdam for the
embedding rows, see :class:`NCFSettings`) over its positives and freshly
sampled negatives, and sends back its item-table update — the rows
of the items it trained on, as a sparse update — and its network weights.
The server aggregates the item rows with a per-row rule and the network
weights with a weighted average:

==========  ================================  ================================
rule        item embeddings                   network weights
==========  ================================  ================================
mf_fedavg   per item, mean over the users     FedAvg (by local training size)
            who updated it (MF-FedAvg)
fedavg      FedAvg by local training size     FedAvg (by local training size)
simple_avg  non-weighted mean over the K      non-weighted mean
==========  ================================  ================================

A **global round** is one pass over all users: a random permutation of the
users cut into rounds of K (the last round may be smaller), so every user
trains once per global round (§4: "we refer to the pass over all
participants as global round"). Evaluation (HR@10, NDCG@10 against 100
sampled negatives, ties broken at random) runs after every global round, each
user scored with its own user embedding and the global item and network
weights.

The K clients of a round train at once: ``trainer="compiled"`` in one numba
call (:mod:`streamfl.models.gmf_kernel` for GMF, :mod:`streamfl.models.ncf_kernel`
for MLP and NeuMF; float64), ``"batched"`` or ``"vmap"`` over stacked torch
parameters (:func:`~streamfl.models.stacked_torch.train_stacked`);
``trainer="loop"`` trains them one after another with ``torch.optim.Adam``
(same numbers up to float32 rounding; timings in ``docs/fedncf.md``).

Each client downloads only the item rows it trains on in the round (its
submodel: its positives and sampled negatives) and sends back their deltas
(:class:`Submodels`), so a round costs O(Σ_k n_k · E · (1 + P_k/B)) for
training (n_k samples per epoch of client k, E local epochs, B the batch,
P_k its submodel's parameters) and O(touched rows) for the item aggregation,
independent of the number of items.

Centralized NCF (the upper bound) is the same model and training code with
one client holding every user; ItemPop (the lower bound) scores an item by
its training interactions.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np
import torch

from ..aggregation import weighted_average
from ..aggregation.sparse import SparseRound, apply_rows, fedavg, mf_fedavg, simple_avg
from ..evaluation import hit_ratio, ndcg, ranks_with_random_ties
from ..generators.movielens import ImplicitData
from ..models import ncf
from ..models.gmf_kernel import train_gmf_compiled
from ..models.ncf_kernel import train_ncf_compiled
from ..models.stacked_torch import LocalSchedule, train_loop, train_stacked

RULES = ("mf_fedavg", "fedavg", "simple_avg")
TRAINERS = ("compiled", "batched", "vmap", "loop")


@dataclass(frozen=True)
class NCFSettings:
    """Hyper-parameters of FedNCF §5.2 (defaults) and of this reproduction.

    Attributes
    ----------
    model : {"gmf", "mlp", "neumf"}
    dim : int
        D = 12.
    layers : tuple of int
        (48, 24, 12, 6).
    negatives : int
        Sampled negatives per positive, 4 (redrawn every local epoch).
    lr : float
        Adam's η, 1e-3.
    local_epochs : int
        E = 2.
    clients_per_round : int
        K = 20 (the paper's choice for MovieLens 100K).
    batch_size : int
        B, local mini-batch size. The paper does not give it; 8 (see
        docs/fedncf.md: with B = 64 federated GMF stays near the popularity
        ranking for tens of global rounds, because a client's user embedding
        takes only 2·⌈n/B⌉ Adam steps per global round).
    global_rounds : int
        Passes over all users (400 in the paper; see docs/fedncf.md for ours).
    centralized_batch_size : int
        Mini-batch of the centralized upper bound.
    embedding_adam : {"sparse", "dense"}
        How user and item embeddings follow Adam: ``sparse`` is
        ``torch.optim.SparseAdam`` (only the rows of a mini-batch move; what
        ``nn.Embedding(sparse=True)`` trains with), ``dense`` is
        ``torch.optim.Adam`` on the whole table (rows keep moving on momentum
        after their last use). Network weights always use Adam. See
        docs/fedncf.md for why ``sparse`` is the default.
    """

    model: str = "gmf"
    dim: int = 12
    layers: tuple = (48, 24, 12, 6)
    negatives: int = 4
    lr: float = 1e-3
    local_epochs: int = 2
    clients_per_round: int = 20
    batch_size: int = 8
    global_rounds: int = 20
    centralized_batch_size: int = 256
    embedding_adam: str = "sparse"

    def __post_init__(self):
        if self.model not in ("gmf", "mlp", "neumf"):
            raise ValueError(f"The 'model' setting must be one of ['gmf', 'mlp', 'neumf']. Got {self.model!r} instead.")
        for name in ("dim", "negatives", "local_epochs", "clients_per_round", "batch_size", "centralized_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"The '{name}' setting must be ≥ 1. Got {getattr(self, name)!r} instead.")
        if self.embedding_adam not in ("sparse", "dense"):
            raise ValueError(f"The 'embedding_adam' setting must be 'sparse' or 'dense'. Got {self.embedding_adam!r} instead.")
        if self.global_rounds < 0 or not self.lr > 0:
            raise ValueError(f"global_rounds must be ≥ 0 and lr > 0. Got {self.global_rounds!r} and {self.lr!r}.")


# ---------------------------------------------------------------- local data, vectorised over clients
@dataclass
class RoundSamples:
    """Every local training sample of a round's K clients (all local epochs), in step order.

    Attributes
    ----------
    owner : ndarray (n,)
        Client index 0 ≤ k < K.
    step, col : ndarray (n,)
        The client's local step and the sample's position in that mini-batch.
    items : ndarray (n,)
        Item id.
    labels : ndarray (n,) float32
        1 for a positive, 0 for a sampled negative.
    sizes : ndarray (K,)
        n_k, samples per client per epoch (FedAvg's weight).
    """

    owner: np.ndarray
    step: np.ndarray
    col: np.ndarray
    items: np.ndarray
    labels: np.ndarray
    sizes: np.ndarray


def round_samples(data: ImplicitData, users: np.ndarray, negatives: int, batch: int, epochs: int,
                  rng: np.random.Generator) -> RoundSamples:
    """The local mini-batches of K clients (client k = user ``users[k]``) for one round.

    In every epoch client k holds its training positives plus ``negatives``
    freshly sampled negatives per positive (never an item the user
    interacted with, the held-out one included), shuffled, cut into
    mini-batches of ``batch`` (the last one partial); its epochs follow each
    other, so it takes ``epochs · ⌈n_k / batch⌉`` steps. Vectorised over
    clients: one draw of all negatives and one shuffle per epoch.
    """
    K = len(users)
    counts = np.diff(data.train_ptr)[users]
    owner_pos = np.repeat(np.arange(K), counts)
    start = np.r_[0, np.cumsum(counts)[:-1]]
    pos = data.train_items[data.train_ptr[users][owner_pos] + np.arange(owner_pos.size) - start[owner_pos]]
    sizes = counts * (1 + negatives)
    per_epoch = -(-sizes // batch)
    parts = []
    for e in range(epochs):
        neg = data.sample_negatives(users[owner_pos], negatives, rng).ravel()
        owner = np.r_[owner_pos, np.repeat(owner_pos, negatives)]
        items = np.r_[pos, neg]
        labels = np.r_[np.ones(pos.size, np.float32), np.zeros(neg.size, np.float32)]
        order = np.lexsort((rng.random(owner.size), owner))           # shuffle within each client
        owner, items, labels = owner[order], items[order], labels[order]
        slot = np.arange(owner.size) - np.r_[0, np.cumsum(sizes)[:-1]][owner]
        parts.append((owner, e * per_epoch[owner] + slot // batch, slot % batch, items, labels))
    owner, step, col, items, labels = (np.concatenate(x) for x in zip(*parts))
    return RoundSamples(owner=owner, step=step, col=col, items=items, labels=labels, sizes=sizes)


@dataclass
class Submodels:
    """Each client's submodel of an item table: the rows of the items it trains on in the round.

    A client downloads only these rows (FedSubAvg's submodel, paper 000 §1),
    trains them, and sends back their deltas: its sparse update. Rows are
    client-major, ids ascending within a client.

    Attributes
    ----------
    client, ids, counts : ndarray (r,)
        Client, item id and number of the client's samples using the item.
    local : ndarray (n,)
        Local row (0 ≤ local < U_k) of every sample's item in its client's submodel.
    index : ndarray (K, U_max)
        Global item id of each local row (0 for padding rows, which no sample uses).
    slot : ndarray (r,)
        Local row of each (client, id) pair.
    """

    client: np.ndarray
    ids: np.ndarray
    counts: np.ndarray
    local: np.ndarray
    index: np.ndarray
    slot: np.ndarray


def submodels(owner: np.ndarray, items: np.ndarray, K: int, n_items: int) -> Submodels:
    """Map every (client, item) of a round to the client's local submodel row (vectorised, O(n log n))."""
    key, inverse, counts = np.unique(owner.astype(np.int64) * n_items + items, return_inverse=True, return_counts=True)
    client, ids = key // n_items, key % n_items
    first = np.searchsorted(client, np.arange(K))
    slot = np.arange(key.size) - first[client]
    width = int(slot.max()) + 1 if key.size else 1
    index = np.zeros((K, width), np.int64)
    index[client, slot] = ids
    return Submodels(client=client, ids=ids, counts=counts, local=slot[inverse.ravel()], index=index, slot=slot)


# ---------------------------------------------------------------- evaluation
def evaluate(model: torch.nn.Module, data: ImplicitData, rng: np.random.Generator, k: int = 10) -> dict:
    """HR@k and NDCG@k of ``model`` (all users) on the held-out items against the test negatives."""
    users = torch.arange(data.n_users)
    cand = torch.from_numpy(np.concatenate([data.test_items[:, None], data.test_negatives], axis=1))
    with torch.no_grad():
        scores = model(users[:, None].expand_as(cand).reshape(-1), cand.reshape(-1)).reshape(cand.shape).double().numpy()
    ranks = ranks_with_random_ties(scores[:, 0], scores[:, 1:], rng)
    return {"hr": hit_ratio(ranks, k), "ndcg": ndcg(ranks, k)}


def item_pop(data: ImplicitData, seed: int = 0, k: int = 10) -> dict:
    """ItemPop: score = training interactions of the item, same for every user (NCF's lower bound)."""
    pop = data.item_popularity().astype(np.float64)
    ranks = ranks_with_random_ties(pop[data.test_items], pop[data.test_negatives], np.random.default_rng(seed))
    return {"hr": hit_ratio(ranks, k), "ndcg": ndcg(ranks, k)}


# ---------------------------------------------------------------- federated
class FederatedNCF:
    """FedNCF on one data set: global item/network weights, client-held user embeddings.

    Parameters
    ----------
    data : ImplicitData
    settings : NCFSettings
    rule : {"mf_fedavg", "fedavg", "simple_avg"}
    seed : int
        Seeds the initial model, client sampling, negatives, shuffling and tie-breaks.
    trainer : {"compiled", "batched", "vmap", "loop"}
        How the round's clients train: ``compiled`` with the numba kernel of
        the model (:mod:`streamfl.models.gmf_kernel`,
        :mod:`streamfl.models.ncf_kernel`), the others with
        :mod:`streamfl.models.stacked_torch`.
    init : torch.nn.Module or None
        A full model (all users) to start from (e.g. a NeuMF built from a
        federated GMF and MLP); its user tables become the clients' user embeddings.

    Attributes
    ----------
    model : torch.nn.Module
        The full model holding the current global item and network weights
        and, in its user tables, each client's own user embedding (kept here
        for the simulation; they never enter an aggregation).
    history : list of dict
        One entry per global round: HR@10, NDCG@10, mean local loss, seconds.
    """

    def __init__(self, data: ImplicitData, settings: NCFSettings, rule: str = "mf_fedavg", seed: int = 0,
                 trainer: str = "batched", init: torch.nn.Module | None = None):
        if rule not in RULES:
            raise ValueError(f"The 'rule' parameter must be one of {list(RULES)}. Got {rule!r} instead.")
        if trainer not in TRAINERS:
            raise ValueError(f"The 'trainer' parameter must be one of {list(TRAINERS)}. Got {trainer!r} instead.")
        self.data, self.s, self.rule, self.seed, self.trainer = data, settings, rule, seed, trainer
        gen = torch.Generator().manual_seed(seed)
        self.model = init if init is not None else ncf.build(settings.model, data.n_users, data.n_items,
                                                             settings.dim, settings.layers, gen)
        self.client = ncf.build(settings.model, 1, data.n_items, settings.dim, settings.layers)   # shape template
        self._sparse = {**{n: 0 for n in self.model.user_tables}, **{n: 1 for n in self.model.item_tables}}
        self.rng = np.random.default_rng(seed)
        self.eval_rng = np.random.default_rng([seed, 1])
        self.history: list[dict] = []
        self.rounds = 0
        self.train_seconds = 0.0

    def _aggregate_dense(self, stacked: torch.Tensor, n_samples: np.ndarray) -> torch.Tensor:
        w = None if self.rule == "simple_avg" else n_samples.astype(np.float64)
        return torch.from_numpy(weighted_average(stacked.double().numpy(), w)).to(stacked.dtype)

    def _aggregate_items(self, r: SparseRound):
        if self.rule == "mf_fedavg":
            return mf_fedavg(r)
        return fedavg(r, "samples") if self.rule == "fedavg" else simple_avg(r)

    def client_params(self, users: np.ndarray, sub: Submodels) -> dict:
        """What the round's K clients start from, stacked with the client axis first.

        Each client's own user row (K, 1, D) per user table, its submodel's item rows (the client
        downloads only those; ``sub.index``, shape (K, U, D)) per item table, and a copy of the global
        network weights (K, ...) per dense parameter; copies, so training leaves the global model alone.
        """
        m = self.model
        K = len(users)
        state = dict(m.named_parameters())
        params = {}
        for name, t in self.client.named_parameters():
            if name in m.user_tables:
                params[name] = state[name].detach()[torch.from_numpy(users)][:, None, :].clone()
            elif name in m.item_tables:
                params[name] = state[name].detach()[torch.from_numpy(sub.index)].clone()
            else:
                params[name] = state[name].detach().unsqueeze(0).expand(K, *t.shape).clone()
        return params

    def run_round(self, users: np.ndarray) -> float:
        """One aggregation round with the clients ``users``; returns their mean local loss."""
        m, s = self.model, self.s
        K = len(users)
        state = dict(m.named_parameters())
        rs = round_samples(self.data, users, s.negatives, s.batch_size, s.local_epochs, self.rng)
        sub = submodels(rs.owner, rs.items, K, self.data.n_items)
        params = self.client_params(users, sub)
        schedule = LocalSchedule.from_samples(K, s.batch_size, rs.owner, rs.step, rs.col,
                                              (np.zeros_like(rs.owner), sub.local), rs.labels)
        sparse = self._sparse if s.embedding_adam == "sparse" else None
        if self.trainer == "loop":
            new, losses = train_loop(self.client, params, schedule, s.lr, sparse=sparse)
        elif self.trainer == "compiled" and s.model == "gmf":
            new, losses = train_gmf_compiled(params, schedule, s.lr, lazy=sparse is not None)
        elif self.trainer == "compiled":
            new, losses = train_ncf_compiled(params, schedule, s.lr, lazy=sparse is not None, model=s.model)
        else:
            new, losses = train_stacked(self.client, params, schedule, s.lr, method=self.trainer, sparse=sparse)
        with torch.no_grad():
            for name in params:
                if name in m.user_tables:                      # stays on the client
                    state[name][torch.from_numpy(users)] = new[name][:, 0, :]
                elif name in m.item_tables:
                    g = state[name].detach().double().numpy()
                    trained = new[name].double().numpy()[sub.client, sub.slot]
                    r = SparseRound(client=sub.client, ids=sub.ids, rows=trained - g[sub.ids], counts=sub.counts,
                                    n_samples=rs.sizes.astype(np.int64))
                    state[name].copy_(torch.from_numpy(apply_rows(g, self._aggregate_items(r))))
                else:
                    state[name].copy_(self._aggregate_dense(new[name], rs.sizes))
        self.rounds += 1
        return float(losses.mean())

    def run(self, global_rounds: int | None = None, on_round: Callable[[dict], None] | None = None) -> list[dict]:
        """Train for ``global_rounds`` passes over all users, evaluating after each; returns the history."""
        K = self.s.clients_per_round
        for _ in range(self.s.global_rounds if global_rounds is None else global_rounds):
            t0 = time.perf_counter()
            perm = self.rng.permutation(self.data.n_users)
            losses = [self.run_round(perm[i:i + K]) for i in range(0, len(perm), K)]
            self.train_seconds += time.perf_counter() - t0
            entry = {"global_round": len(self.history) + 1, "aggregation_rounds": self.rounds,
                     "loss": float(np.mean(losses)), "seconds": self.train_seconds,
                     **evaluate(self.model, self.data, self.eval_rng)}
            self.history.append(entry)
            if on_round:
                on_round(entry)
        return self.history


# ---------------------------------------------------------------- centralized
class CentralizedNCF:
    """The same model trained on the pooled data (one client holding every user): the upper bound.

    An epoch is one pass over all training positives with freshly sampled
    negatives, shuffled, in mini-batches of ``settings.centralized_batch_size``,
    Adam (same η; SparseAdam for the embeddings when
    ``settings.embedding_adam == "sparse"``, as the clients), state kept across
    epochs. Same model, data, negatives and evaluation code as the federated runs.
    """

    def __init__(self, data: ImplicitData, settings: NCFSettings, seed: int = 0, init: torch.nn.Module | None = None):
        self.data, self.s, self.seed = data, settings, seed
        gen = torch.Generator().manual_seed(seed)
        self.model = init if init is not None else ncf.build(settings.model, data.n_users, data.n_items,
                                                             settings.dim, settings.layers, gen)
        self.rng = np.random.default_rng(seed)
        self.eval_rng = np.random.default_rng([seed, 1])
        self.history: list[dict] = []
        self.train_seconds = 0.0
        tables = set(self.model.user_tables) | set(self.model.item_tables)
        named = dict(self.model.named_parameters())
        if settings.embedding_adam == "sparse":
            self.model.sparse_grad = True
            self._opts = [torch.optim.SparseAdam([named[n] for n in sorted(tables)], lr=settings.lr),
                          torch.optim.Adam([p for n, p in named.items() if n not in tables], lr=settings.lr)]
        else:
            self._opts = [torch.optim.Adam(self.model.parameters(), lr=settings.lr)]

    def run(self, epochs: int, on_round: Callable[[dict], None] | None = None) -> list[dict]:
        """Train ``epochs`` epochs (Adam state kept across epochs), evaluating after each."""
        d, B = self.data, self.s.centralized_batch_size
        users = d.train_users
        for _ in range(epochs):
            t0 = time.perf_counter()
            neg = d.sample_negatives(users, self.s.negatives, self.rng).ravel()
            u = np.r_[users, np.repeat(users, self.s.negatives)]
            i = np.r_[d.train_items, neg]
            y = np.r_[np.ones(users.size, np.float32), np.zeros(neg.size, np.float32)]
            order = self.rng.permutation(u.size)
            tu, ti, ty = (torch.from_numpy(np.ascontiguousarray(a[order])) for a in (u, i, y))
            total = 0.0
            for j in range(0, u.size, B):
                for opt in self._opts:
                    opt.zero_grad()
                loss = torch.nn.functional.binary_cross_entropy_with_logits(self.model(tu[j:j + B], ti[j:j + B]),
                                                                            ty[j:j + B])
                loss.backward()
                for opt in self._opts:
                    opt.step()
                total += float(loss.detach()) * min(B, u.size - j)
            self.train_seconds += time.perf_counter() - t0
            entry = {"epoch": len(self.history) + 1, "loss": total / u.size, "seconds": self.train_seconds,
                     **evaluate(self.model, d, self.eval_rng)}
            self.history.append(entry)
            if on_round:
                on_round(entry)
        return self.history


def settings_dict(s: NCFSettings) -> dict:
    """The settings as plain JSON-able values."""
    out = asdict(s)
    out["layers"] = list(s.layers)
    return out
