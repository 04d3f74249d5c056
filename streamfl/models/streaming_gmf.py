"""Streaming GMF client models: FedNCF's GMF trained online, test-then-train, for M clients at once.

Each client m is one user of an implicit-feedback stream (FedNCF, paper 003,
§3: "each user is a client"). Its model is GMF (NCF, He et al. 2017; FedNCF
§3.1): logit(m, i) = hᵀ (p_m ⊙ q_i) + b, with

* p_m (D,) — the user embedding, **private**: it never leaves the client and
  is never aggregated;
* q_i (D,) — the item embeddings, a global table (I, D). Between two rounds
  a client trains its own copy of the rows it touches (its submodel); at the
  end of a round it uploads those rows' deltas with their ids and counts, and
  the server aggregates them per item with MF-FedAvg (FedNCF §3.2–3.3);
* h (D,) and b — the prediction layer, one copy per client, averaged with
  FedAvg at the end of a round.

**A step** (:meth:`StreamingGMF.test_then_train`), for every present client,
given its arriving positive item i (``X[m, 0, 0]``):

1. *test*: the played model scores i against ``eval_negatives`` distinct items
   the user never interacts with in the whole recorded stream (the
   evaluation protocol of FedNCF §5.2, applied prequentially); the rank of i,
   ties broken at random, is the step's observation ``rank`` (HR@10 = rank ≤ 10);
2. *loss*: ``negatives`` training negatives are drawn uniformly, with
   replacement, from the items the user has **not interacted with so far**
   (a client knows its past only; i itself is excluded); the loss charged is
   the mean binary cross-entropy (nats) of the played model over the
   1 + ``negatives`` samples;
3. *train*: one SGD step with η_t on that mean loss for p_m, h_m, b_m and the
   client's copies of the touched item rows.

Random draws come from a counter-based generator (splitmix64 of seed, client,
step, purpose, counter), so they do not depend on which process holds which
client, nor on the order in which clients are visited.

Cost per step: O(M) to skip absent clients plus, per present client,
O((E + N)·D) with E eval negatives and N training negatives; one compiled
(numba) call for all clients. Memory: P, H (M, D), the table (I, D), the
per-client submodel (M, S, D) with S = τ·(1 + N) and a (M, I) bool of the
items seen so far.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..updates import GlobalUpdate, ModelUpdate, SparseRound, apply_rows
from .client_model import ClientModel

EVAL, NEGATIVE, TIE = 1, 2, 3            # purposes of the counter-based draws


@njit(cache=True)
def _mix(z):  # pragma: no cover - compiled
    """splitmix64's finaliser on a uint64."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(cache=True)
def draw(seed, client, t, purpose, counter, n):  # pragma: no cover - compiled
    """A uniform integer in [0, n) from (seed, client, step, purpose, counter); the same in every process."""
    key = _mix(np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(client))
    key = _mix(key ^ (np.uint64(t) * np.uint64(0xD1B54A32D192ED03)))
    key = _mix(key ^ (np.uint64(purpose) * np.uint64(0x8CB92BA72F3D8DD7) + np.uint64(counter)))
    return np.int64(key % np.uint64(n))


@njit(cache=True)
def _eval_negatives(seed, m, t, n_eval, ever, stamp, M, out):  # pragma: no cover - compiled
    """The n_eval distinct items client m's step-t positive is ranked against, in draw order, into ``out``.

    Items user m interacts with anywhere in the stream (``ever[m]``) are
    never drawn; ``stamp`` (I,) marks the items drawn for this (m, t). The
    same draws (seed, m, t) in the engine and for the fixed comparator.
    """
    I = ever.shape[1]
    got = 0
    c = 0
    mark = np.int64(t) * np.int64(M + 1) + m + 1
    while got < n_eval:
        j = draw(seed, m, t, EVAL, c, I)
        c += 1
        if ever[m, j] or stamp[j] == mark:
            continue
        stamp[j] = mark
        out[got] = j
        got += 1


@njit(cache=True)
def _row(m, j, Q, slot_map, slot_rows):  # pragma: no cover - compiled
    s = slot_map[m, j]
    return Q[j] if s < 0 else slot_rows[m, s]


@njit(cache=True)
def gmf_stream_step(P, Q, H, B, slot_map, slot_ids, slot_rows, slot_counts, n_slots, items, mask, ever, seen,
                    seed, t, n_neg, n_eval, eta, stamp, losses, ranks, negs):  # pragma: no cover - compiled
    """One test-then-train step of M streaming GMF clients, in place (see the module docstring).

    Parameters
    ----------
    P, H : float64 (M, D)
        User embeddings, prediction weights.
    Q : float64 (I, D)
        Global item table (read only between rounds).
    B : float64 (M,)
        Prediction biases.
    slot_map : int64 (M, I)
        Local row of item j in client m's submodel, −1 if untouched this round.
    slot_ids : int64 (M, S); slot_rows : float64 (M, S, D); slot_counts : int64 (M, S); n_slots : int64 (M,)
        The submodels: ids, current rows, samples per row, rows used.
    items : int64 (M,)
        Each client's arriving positive.
    mask : bool (M,)
    ever : bool (M, I)
        Items each user interacts with anywhere in the stream (excluded from eval negatives).
    seen : bool (M, I)
        Items each user has interacted with so far (updated here; excluded from training negatives).
    seed, t : int
    n_neg, n_eval : int
    eta : float
    stamp : int64 (I,)
        Scratch for distinct eval negatives.
    losses : float64 (M,); ranks : int64 (M,); negs : int64 (M, n_neg)
        Outputs (0, 0, −1 for absent clients).
    """
    M, D = P.shape
    I = Q.shape[0]
    n = 1 + n_neg
    g = np.empty(n)
    cand = np.empty(n, np.int64)
    evals = np.empty(n_eval, np.int64)
    gp = np.empty(D)
    gh = np.empty(D)
    for m in range(M):
        if not mask[m]:
            losses[m] = 0.0
            ranks[m] = 0
            for k in range(n_neg):
                negs[m, k] = -1
            continue
        i = items[m]
        # 1. test: rank i among n_eval distinct items the user never interacts with
        q = _row(m, i, Q, slot_map, slot_rows)
        zpos = B[m]
        for d in range(D):
            zpos += H[m, d] * P[m, d] * q[d]
        higher = 0
        equal = 0
        _eval_negatives(seed, m, t, n_eval, ever, stamp, M, evals)
        for j in evals:
            qj = _row(m, j, Q, slot_map, slot_rows)
            z = B[m]
            for d in range(D):
                z += H[m, d] * P[m, d] * qj[d]
            if z > zpos:
                higher += 1
            elif z == zpos:
                equal += 1
        ranks[m] = 1 + higher + draw(seed, m, t, TIE, 0, equal + 1)
        if zpos != zpos:                     # NaN (diverged): the worst rank, never a hit
            ranks[m] = n_eval + 1
        # 2. training negatives from the items not seen so far (i is seen from now on)
        seen[m, i] = True
        cand[0] = i
        c = 0
        for k in range(n_neg):
            while True:
                j = draw(seed, m, t, NEGATIVE, c, I)
                c += 1
                if not seen[m, j]:
                    break
            cand[1 + k] = j
            negs[m, k] = j
        # loss and gradient factors at the played model
        loss = 0.0
        gb = 0.0
        for d in range(D):
            gp[d] = 0.0
            gh[d] = 0.0
        for k in range(n):
            qj = _row(m, cand[k], Q, slot_map, slot_rows)
            z = B[m]
            for d in range(D):
                z += H[m, d] * P[m, d] * qj[d]
            y = 1.0 if k == 0 else 0.0
            loss += max(z, 0.0) - z * y + math.log1p(math.exp(-abs(z)))
            g[k] = (1.0 / (1.0 + math.exp(-z)) - y) / n
            gb += g[k]
            for d in range(D):
                gp[d] += g[k] * H[m, d] * qj[d]
                gh[d] += g[k] * P[m, d] * qj[d]
        losses[m] = loss / n
        # 3. SGD on the mean loss; item rows move in the client's submodel
        for k in range(n):
            j = cand[k]
            s = slot_map[m, j]
            if s < 0:
                s = n_slots[m]
                n_slots[m] += 1
                slot_map[m, j] = s
                slot_ids[m, s] = j
                slot_counts[m, s] = 0
                for d in range(D):
                    slot_rows[m, s, d] = Q[j, d]
            slot_counts[m, s] += 1
            for d in range(D):
                slot_rows[m, s, d] -= eta * g[k] * H[m, d] * P[m, d]
        for d in range(D):
            H[m, d] -= eta * gh[d]
            P[m, d] -= eta * gp[d]
        B[m] -= eta * gb


def check_eval_negatives(ever: np.ndarray, eval_negatives: int, user_ids=None) -> None:
    """Refuse a stream in which some user has fewer than ``eval_negatives`` items it never interacts with.

    Parameters
    ----------
    ever : bool (M, I)
        ``ever[m, i]``: user m interacts with item i somewhere in the stream.
    eval_negatives : int
        Distinct never-interacted items each arriving positive is ranked against.
    user_ids : int (M,) or None
        The data set's user ids, to name the user in the message.

    Raises
    ------
    ValueError
        Naming the first such user, its free items and ``eval_negatives``.
    """
    n_items = ever.shape[1]
    free = n_items - ever.sum(axis=1)
    if (free < eval_negatives).any():
        m = int(np.argmin(free))
        who = f"user {m}" if user_ids is None else f"user {int(user_ids[m])} (client {m})"
        raise ValueError(f"{who} interacts with all but {int(free[m])} of the {n_items} items: fewer than "
                         f"the {eval_negatives} evaluation negatives (learner.gmf.eval_negatives)")


class StreamingGMF(ClientModel):
    """M streaming GMF clients with private user embeddings and a shared item table (FedNCF GMF, paper 003).

    Parameters
    ----------
    n_clients, n_items : int
        M users, I items.
    step_size : StepSize
        η_t of the SGD step.
    ever : ndarray (M, I) bool
        Items each user interacts with in the recorded stream: never used
        as an evaluation negative.
    tau : int
        Steps per round: sizes each client's submodel (τ·(1 + negatives) rows).
    dim : int
        D, embedding size (12, FedNCF §5.2).
    negatives : int
        Training negatives per positive (4, FedNCF §5.2).
    eval_negatives : int
        Items the arriving positive is ranked against (100, FedNCF §5.2).
    init_std : float
        Standard deviation of the normal initial embeddings.
    seed : int
        Seeds the initial model and every draw.
    user_ids : ndarray (M,) or None
        The users' ids in the data file, for error messages (None: the
        client index).

    Raises
    ------
    ValueError
        If a user has fewer than ``eval_negatives`` items it never interacts
        with, or a size is < 1.

    Attributes
    ----------
    P : ndarray (M, D)    user embeddings (private)
    Q : ndarray (I, D)    global item table
    H : ndarray (M, D)    prediction weights h, per client
    B : ndarray (M,)      prediction biases b, per client
    """

    def __init__(self, n_clients: int, n_items: int, step_size, ever: np.ndarray, tau: int, dim: int = 12,
                 negatives: int = 4, eval_negatives: int = 100, init_std: float = 0.1, seed: int = 0,
                 user_ids=None):
        for name, v in (("tau", tau), ("dim", dim), ("negatives", negatives), ("eval_negatives", eval_negatives)):
            if v is None or v < 1:
                raise ValueError(f"StreamingGMF: {name} must be ≥ 1 (got {v!r})")
        ever = np.ascontiguousarray(ever, dtype=np.bool_)
        if ever.shape != (n_clients, n_items):
            raise ValueError(f"StreamingGMF: ever must be (M, I) = ({n_clients}, {n_items}); got {ever.shape}")
        check_eval_negatives(ever, eval_negatives, user_ids)
        self.n_clients, self.n_items, self.dim = n_clients, n_items, dim
        self.step_size, self.tau, self.seed = step_size, tau, seed
        self.negatives, self.eval_negatives = negatives, eval_negatives
        rng = np.random.default_rng([seed, 7])
        bound = math.sqrt(6.0 / (dim + 1))                 # Xavier uniform for the (D → 1) prediction layer
        self.P = rng.normal(0.0, init_std, (n_clients, dim))
        self.Q = rng.normal(0.0, init_std, (n_items, dim))
        self.H = np.repeat(rng.uniform(-bound, bound, (1, dim)), n_clients, axis=0)
        self.B = np.zeros(n_clients)
        S = tau * (1 + negatives)
        self.slot_map = np.full((n_clients, n_items), -1, np.int64)
        self.slot_ids = np.zeros((n_clients, S), np.int64)
        self.slot_rows = np.zeros((n_clients, S, dim))
        self.slot_counts = np.zeros((n_clients, S), np.int64)
        self.n_slots = np.zeros(n_clients, np.int64)
        self.ever = ever
        self.seen = np.zeros((n_clients, n_items), np.bool_)
        self._stamp = np.zeros(n_items, np.int64)
        self._losses = np.zeros(n_clients)
        self._ranks = np.zeros(n_clients, np.int64)
        self._negs = np.full((n_clients, negatives), -1, np.int64)
        self._all = np.ones(n_clients, np.bool_)

    def test_then_train(self, X, y, t, mask=None):
        """Test-then-train every present client on its arriving positive ``X[m, 0, 0]`` (item id).

        ``y`` is ignored (every arriving interaction is a positive). Returns the
        mean BCE (nats) of the played model over the positive and its training
        negatives, (M,), 0 for absent clients. Raises ValueError for b ≠ 1 or
        a step longer than a round's submodel allows.
        """
        if X.shape[1] != 1:
            raise ValueError(f"StreamingGMF takes one interaction per client and step (b = 1); got b = {X.shape[1]}")
        mask = self._all if mask is None else np.asarray(mask, np.bool_)
        used = self.n_slots[mask]             # only the clients that step (others may be in another round)
        if used.size and used.max() + 1 + self.negatives > self.slot_ids.shape[1]:
            raise ValueError("StreamingGMF: more steps between two rounds than tau; download a global update first")
        items = X[:, 0, 0].astype(np.int64)
        gmf_stream_step(self.P, self.Q, self.H, self.B, self.slot_map, self.slot_ids, self.slot_rows,
                        self.slot_counts, self.n_slots, items, mask,
                        self.ever, self.seen, int(self.seed), int(t), self.negatives, self.eval_negatives,
                        float(self.step_size(t)), self._stamp, self._losses, self._ranks, self._negs)
        return self._losses.copy()

    def observations(self) -> dict:
        """``rank`` (M,) of each arriving positive among the eval negatives (0: absent), ``negatives`` (M, N)."""
        return {"rank": self._ranks, "negatives": self._negs}

    def upload(self, n_samples: np.ndarray) -> ModelUpdate:
        """The round's uploads: item-row deltas with ids and counts (client-major), and h, b stacked.

        Payload bytes count, for each client with samples: 8 bytes per id, per
        count and per row value, and (D + 1)·8 for h and b.
        """
        used = np.arange(self.slot_ids.shape[1])[None, :] < self.n_slots[:, None]
        client = np.repeat(np.arange(self.n_clients), self.n_slots)
        ids = self.slot_ids[used]
        r = SparseRound(client=client, ids=ids, rows=self.slot_rows[used] - self.Q[ids], counts=self.slot_counts[used],
                        n_samples=np.asarray(n_samples, dtype=np.int64))
        taking = int(np.count_nonzero(np.asarray(n_samples) > 0))
        nbytes = ids.size * 8 * (2 + self.dim) + taking * 8 * (self.dim + 1)
        return ModelUpdate(sparse={"item": r}, dense={"h": self.H, "b": self.B[:, None]},
                           n_samples=np.asarray(n_samples), nbytes=nbytes)

    def download(self, global_model: GlobalUpdate) -> None:
        """Apply the server's item-row deltas to the table, take h and b, and empty the submodels."""
        delta = global_model.sparse.get("item")
        if delta is not None:
            apply_rows(self.Q, delta)
        if "h" in global_model.dense:
            self.H[:] = global_model.dense["h"]
            self.B[:] = global_model.dense["b"][0]
        used = np.arange(self.slot_ids.shape[1])[None, :] < self.n_slots[:, None]
        self.slot_map[np.repeat(np.arange(self.n_clients), self.n_slots), self.slot_ids[used]] = -1
        self.n_slots[:] = 0

    def scores(self, users: np.ndarray, items: np.ndarray) -> np.ndarray:
        """Logits of the clients' current models with the global table, any matching shapes (no submodels)."""
        return np.einsum("...d,...d->...", self.H[users] * self.P[users], self.Q[items]) + self.B[users]


# ---------------------------------------------------------------- the fixed comparator
@njit(cache=True)
def fixed_gmf_losses(P, Q, h, b, users, cand, out):  # pragma: no cover - compiled
    """Mean BCE (nats) of one fixed GMF on each recorded sample: ``cand[r, 0]`` the positive, the rest negatives.

    P (M, D), Q (I, D), h (D,), b float; users (R,), cand (R, 1 + N) int64; out (R,) receives the losses.
    """
    R, n = cand.shape
    D = h.shape[0]
    for r in range(R):
        u = users[r]
        loss = 0.0
        for k in range(n):
            z = b
            for d in range(D):
                z += h[d] * P[u, d] * Q[cand[r, k], d]
            y = 1.0 if k == 0 else 0.0
            loss += max(z, 0.0) - z * y + math.log1p(math.exp(-abs(z)))
        out[r] = loss / n


@njit(cache=True)
def fit_fixed_gmf(P, Q, h, b, users, cand, weights, epochs, lr, state):  # pragma: no cover - compiled
    """Full-batch Adam on Σ_r weights[r] · meanBCE_r of one fixed GMF, in place; returns the final objective.

    ``h`` (D,) and ``b`` (1,) are one shared prediction layer; P and Q every
    user's and item's row. ``state`` (float64 (2, M·D + I·D + D + 1)) holds
    Adam's moments and is kept between calls (warm starts); β = (0.9, 0.999),
    ε = 1e-8. The objective is divided by Σ weights for the step.
    """
    R, n = cand.shape
    M, D = P.shape
    I = Q.shape[0]
    total = 0.0
    for r in range(R):
        total += weights[r]
    total = max(total, 1e-300)
    nP, nQ = M * D, I * D
    grad = np.zeros(nP + nQ + D + 1)
    obj = 0.0
    b1, b2, eps = 0.9, 0.999, 1e-8
    for e in range(epochs):
        grad[:] = 0.0
        obj = 0.0
        for r in range(R):
            u = users[r]
            wr = weights[r] / total / n
            for k in range(n):
                i = cand[r, k]
                z = b[0]
                for d in range(D):
                    z += h[d] * P[u, d] * Q[i, d]
                y = 1.0 if k == 0 else 0.0
                obj += (max(z, 0.0) - z * y + math.log1p(math.exp(-abs(z)))) * wr
                g = (1.0 / (1.0 + math.exp(-z)) - y) * wr
                for d in range(D):
                    grad[u * D + d] += g * h[d] * Q[i, d]
                    grad[nP + i * D + d] += g * h[d] * P[u, d]
                    grad[nP + nQ + d] += g * P[u, d] * Q[i, d]
                grad[nP + nQ + D] += g
        state[2, 0] += 1.0
        tt = state[2, 0]
        c1 = 1.0 - b1 ** tt
        c2 = math.sqrt(1.0 - b2 ** tt)
        for j in range(grad.shape[0]):
            gj = grad[j]
            state[0, j] = b1 * state[0, j] + (1 - b1) * gj
            state[1, j] = b2 * state[1, j] + (1 - b2) * gj * gj
            step = lr / c1 * state[0, j] / (math.sqrt(state[1, j]) / c2 + eps)
            if j < nP:
                P[j // D, j % D] -= step
            elif j < nP + nQ:
                q = j - nP
                Q[q // D, q % D] -= step
            elif j < nP + nQ + D:
                h[j - nP - nQ] -= step
            else:
                b[0] -= step
    return obj * total


@njit(cache=True)
def fixed_gmf_ranks(P, Q, h, b, users, items, ts, ever, seed, n_eval, stamp, out):  # pragma: no cover - compiled
    """Prequential rank of each recorded positive under one fixed GMF, against the same eval negatives and
    tie draws as :func:`gmf_stream_step` (same seed, client, step): ``out`` (R,) receives the ranks."""
    R = users.shape[0]
    M = P.shape[0]
    D = Q.shape[1]
    evals = np.empty(n_eval, np.int64)
    for r in range(R):
        m, i, t = users[r], items[r], ts[r]
        zpos = b
        for d in range(D):
            zpos += h[d] * P[m, d] * Q[i, d]
        higher = 0
        equal = 0
        _eval_negatives(seed, m, t, n_eval, ever, stamp, M, evals)
        for j in evals:
            z = b
            for d in range(D):
                z += h[d] * P[m, d] * Q[j, d]
            if z > zpos:
                higher += 1
            elif z == zpos:
                equal += 1
        out[r] = 1 + higher + draw(seed, m, t, TIE, 0, equal + 1)
