"""Streaming sparse logistic regression: FedSubAvg's client model trained online, test-then-train, for M clients at once.

The model of FedSubAvg's experiments (paper 000, §1 and Algorithm 1): a
weight per feature in a large table w (F,) and a bias b; a sample is a set S
of active binary features (``nnz`` ids), P(y = 1) = σ(b + Σ_{f∈S} w_f), loss
ℓ = log(1 + e^z) − y z (nats). Each client m of the stream is one client of
the federation:

* w — the global table. Between two rounds a client trains its own copy of
  the rows its samples touch (its *submodel*, paper 000 §1: "updating only a
  small submodel"); at the end of a round it uploads those rows' deltas with
  their ids and the number of its samples that involved each row
  (a :class:`~streamfl.updates.SparseRound` row each), and the
  server aggregates them per row (:class:`~streamfl.aggregation.strategy.FedSubAvg`);
* b — one bias per client, dense, averaged at the end of a round.

**A step** (:meth:`StreamingSparseLogistic.test_then_train`), for every
present client, given its b samples (ids ``X[m]`` (b, nnz), labels ``y[m]``):

1. *test*: the loss charged is the mean BCE (nats) of the played model
   (the client's submodel rows where it has them, the global table
   elsewhere, its bias) over the b samples;
2. *train*: one SGD step with η_t on that mean loss, plus the lazy L2
   penalty (λ/2)‖w_f‖² on the rows the step uses (the regularisation of
   :func:`~streamfl.models.sparse_logistic.local_sgd`): for every row f
   used by the step, w_f ← w_f − η_t (Σ_{j: f∈S_j} g_j + λ w_f), with
   g_j = (σ(z_j) − y_j)/b; the bias b_m ← b_m − η_t Σ_j g_j.

Rows a client never touches are neither copied, shrunk nor uploaded, so
its upload is O(touched rows), never O(F).

Cost per step: one compiled (numba) call over the M clients, O(M·b·nnz)
time. Memory: the table (F,) and per client a (F,) int64 slot map and the
submodel (S,) rows, ids and counts with S = min(F, τ·b·nnz) rows (S = F
without rounds, τ = None: the local-only learner keeps all its rows), so
O(M·(F + S)) in all.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..updates import GlobalUpdate, ModelUpdate, SparseRound, apply_rows
from .client_model import ClientModel


@njit(cache=True)
def sparse_stream_step(w, B, slot_map, slot_ids, slot_rows, slot_counts, n_slots, ids, y, mask, eta, l2,
                       grad, mark, losses):  # pragma: no cover - compiled
    """One test-then-train step of M streaming sparse logistic clients, in place (see the module docstring).

    Parameters
    ----------
    w : float64 (F,)
        Global table (read only between rounds).
    B : float64 (M,)
        Per-client biases.
    slot_map : int64 (M, F)
        Local row of feature f in client m's submodel, −1 if untouched since the last download.
    slot_ids : int64 (M, S); slot_rows : float64 (M, S); slot_counts : int64 (M, S); n_slots : int64 (M,)
        The submodels: ids, current rows, samples per row, rows used.
    ids : int64 (M, b, nnz)
        Feature ids of the step's samples (distinct within a sample).
    y : float64 (M, b)
        Labels in {0, 1}.
    mask : bool (M,)
    eta, l2 : float
        η_t and λ.
    grad : float64 (S,); mark : bool (S,)
        Scratch (all False on entry and exit).
    losses : float64 (M,)
        Output: mean BCE (nats) of the played model, 0 for absent clients.
    """
    M, b, nnz = ids.shape
    z = np.empty(b)
    g = np.empty(b)
    touched = np.empty(b * nnz, np.int64)
    for m in range(M):
        if not mask[m]:
            losses[m] = 0.0
            continue
        # 1. test: the played model's mean BCE on the b samples
        loss = 0.0
        gb = 0.0
        for j in range(b):
            zj = B[m]
            for k in range(nnz):
                f = ids[m, j, k]
                s = slot_map[m, f]
                zj += w[f] if s < 0 else slot_rows[m, s]
            z[j] = zj
            loss += max(zj, 0.0) - zj * y[m, j] + math.log1p(math.exp(-abs(zj)))
            g[j] = (1.0 / (1.0 + math.exp(-zj)) - y[m, j]) / b
            gb += g[j]
        losses[m] = loss / b
        # 2. train: gradient per used row (copied into the submodel on first touch), lazy L2, one SGD step
        n_touched = 0
        for j in range(b):
            for k in range(nnz):
                f = ids[m, j, k]
                s = slot_map[m, f]
                if s < 0:
                    s = n_slots[m]
                    n_slots[m] += 1
                    slot_map[m, f] = s
                    slot_ids[m, s] = f
                    slot_counts[m, s] = 0
                    slot_rows[m, s] = w[f]
                if not mark[s]:
                    mark[s] = True
                    grad[s] = 0.0
                    touched[n_touched] = s
                    n_touched += 1
                grad[s] += g[j]
                slot_counts[m, s] += 1
        for i in range(n_touched):
            s = touched[i]
            slot_rows[m, s] -= eta * (grad[s] + l2 * slot_rows[m, s])
            mark[s] = False
        B[m] -= eta * gb


class StreamingSparseLogistic(ClientModel):
    """M streaming sparse logistic regression clients sharing a feature table (FedSubAvg's model, paper 000).

    Parameters
    ----------
    n_clients, n_features : int
        M clients, F rows of the table.
    step_size : StepSize
        η_t of the SGD step (a callable t → η_t).
    tau : int or None
        Steps per round: sizes each client's submodel (min(F, τ·b·nnz)
        rows). ``None``: the clients never download (local-only learner);
        each keeps up to F rows of its own.
    batch_size, nnz : int
        b samples per client and step, nnz features per sample.
    l2 : float
        λ ≥ 0 of the lazy L2 penalty on the rows a step uses.

    Raises
    ------
    ValueError
        A size < 1 or λ < 0; from :meth:`test_then_train`, ids of the wrong
        shape or out of [0, F), or more steps between two downloads than τ.

    Attributes
    ----------
    w : ndarray (F,)     global table (starts at 0)
    B : ndarray (M,)     per-client biases (start at 0)
    """

    def __init__(self, n_clients: int, n_features: int, step_size, tau: int | None, batch_size: int, nnz: int,
                 l2: float = 0.0):
        for name, v in (("n_clients", n_clients), ("n_features", n_features), ("batch_size", batch_size),
                        ("nnz", nnz)):
            if v < 1:
                raise ValueError(f"StreamingSparseLogistic: {name} must be ≥ 1 (got {v!r})")
        if tau is not None and tau < 1:
            raise ValueError(f"StreamingSparseLogistic: tau must be ≥ 1 or None (got {tau!r})")
        if not l2 >= 0:
            raise ValueError(f"StreamingSparseLogistic: l2 must be ≥ 0 (got {l2!r})")
        self.n_clients, self.n_features, self.step_size, self.tau = n_clients, n_features, step_size, tau
        self.batch_size, self.nnz, self.l2 = batch_size, nnz, float(l2)
        S = n_features if tau is None else min(n_features, tau * batch_size * nnz)
        self.w = np.zeros(n_features)
        self.B = np.zeros(n_clients)
        self.slot_map = np.full((n_clients, n_features), -1, np.int64)
        self.slot_ids = np.zeros((n_clients, S), np.int64)
        self.slot_rows = np.zeros((n_clients, S))
        self.slot_counts = np.zeros((n_clients, S), np.int64)
        self.n_slots = np.zeros(n_clients, np.int64)
        self._grad = np.zeros(S)
        self._mark = np.zeros(S, np.bool_)
        self._losses = np.zeros(n_clients)
        self._all = np.ones(n_clients, np.bool_)

    def test_then_train(self, X, y, t, mask=None):
        """Test-then-train every present client on its b samples: ``X`` (M, b, nnz) feature ids, ``y`` (M, b) in {0, 1}.

        Returns the mean BCE (nats) of the played model on the b samples,
        (M,), 0 for absent clients. Raises ValueError for ids of the wrong
        shape or outside [0, F), or a step beyond the submodel's capacity.
        """
        X = np.asarray(X)
        if X.ndim != 3 or X.shape[0] != self.n_clients or X.shape[2] != self.nnz or X.shape[1] != self.batch_size:
            raise ValueError(f"StreamingSparseLogistic: X must be feature ids (M, b, nnz) = ({self.n_clients}, "
                             f"{self.batch_size}, {self.nnz}); got {X.shape}")
        S = self.slot_ids.shape[1]
        if S < self.n_features and self.n_slots.max() + self.batch_size * self.nnz > S:   # the kernel does not check
            raise ValueError("StreamingSparseLogistic: more steps between two rounds than tau; download a global "
                             "update first")
        ids = np.ascontiguousarray(X, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.n_features):
            raise ValueError(f"StreamingSparseLogistic: feature ids must be in [0, {self.n_features}); got "
                             f"[{ids.min()}, {ids.max()}]")
        mask = self._all if mask is None else np.asarray(mask, np.bool_)
        sparse_stream_step(self.w, self.B, self.slot_map, self.slot_ids, self.slot_rows, self.slot_counts,
                           self.n_slots, ids, np.ascontiguousarray(y, dtype=np.float64), mask,
                           float(self.step_size(t)), self.l2, self._grad, self._mark, self._losses)
        return self._losses.copy()

    def upload(self, n_samples: np.ndarray) -> ModelUpdate:
        """The round's uploads: row deltas (local − global, (r, 1)) with ids and counts (client-major), biases stacked.

        ``sparse["w"]`` is a :class:`~streamfl.updates.SparseRound`
        (counts = samples of the round that involved the row), ``dense["b"]``
        the (M, 1) biases. Payload bytes count, for each client with samples,
        8 bytes per id, per count and per row value, and 8 for its bias.
        """
        used = np.arange(self.slot_ids.shape[1])[None, :] < self.n_slots[:, None]
        client = np.repeat(np.arange(self.n_clients), self.n_slots)
        ids = self.slot_ids[used]
        r = SparseRound(client=client, ids=ids, rows=(self.slot_rows[used] - self.w[ids])[:, None],
                        counts=self.slot_counts[used], n_samples=np.asarray(n_samples, dtype=np.int64))
        taking = int(np.count_nonzero(np.asarray(n_samples) > 0))
        return ModelUpdate(sparse={"w": r}, dense={"b": self.B[:, None]}, n_samples=np.asarray(n_samples),
                           nbytes=ids.size * 8 * 3 + taking * 8)

    def download(self, global_model: GlobalUpdate) -> None:
        """Apply the server's row deltas to the table, take the averaged bias, and empty the submodels."""
        delta = global_model.sparse.get("w")
        if delta is not None:
            apply_rows(self.w[:, None], delta)
        if "b" in global_model.dense:
            self.B[:] = np.asarray(global_model.dense["b"]).reshape(-1)[0]
        used = np.arange(self.slot_ids.shape[1])[None, :] < self.n_slots[:, None]
        self.slot_map[np.repeat(np.arange(self.n_clients), self.n_slots), self.slot_ids[used]] = -1
        self.n_slots[:] = 0

    def played(self, m: int) -> tuple[np.ndarray, float]:
        """Client m's current model: its table (F,) (submodel rows over the global ones) and its bias."""
        w = self.w.copy()
        n = self.n_slots[m]
        w[self.slot_ids[m, :n]] = self.slot_rows[m, :n]
        return w, float(self.B[m])
