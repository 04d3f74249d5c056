"""Sparse logistic regression clients: local SGD on a submodel, a sparse update out.

The client model of FedSubAvg's experiments (paper 000): a weight per
feature in a large table w (F,) plus a dense bias b; a sample is a set of
active (binary) features S, P(y = 1) = σ(b + Σ_{f∈S} w_f), loss
log(1 + e^z) − y z (nats). A client's data involve a few features, so it
downloads only those rows (its submodel), runs local SGD on them, and sends
back their deltas with ids and counts
(:class:`~streamfl.updates.SparseRound`).

L2: the penalty (λ/2)‖w_f‖² is applied to the rows a mini-batch uses (the
"lazy" regularisation of sparse models), so rows a client never touches are
not shrunk, stay out of its update and are left unchanged by every rule
(tests/test_sparse_aggregation.py, the L2 example).

:func:`local_sgd` trains the K sampled clients of a round at once: their
submodels are stacked as (K, U) arrays (U the largest submodel) and every
step is a handful of vectorised numpy operations over all K clients — no
loop over clients. Cost per step O(K·b·nnz + K·U).

>>> import numpy as np
>>> ids = np.array([[[[0, 1]]]])            # 1 client, 1 step, 1 sample with features 0 and 1
>>> upd, bias_delta, loss = local_sgd(np.zeros(3), 0.0, ids, np.array([[[1.0]]]), lr=1.0)
>>> upd.ids.tolist(), upd.rows.ravel().tolist(), bias_delta.tolist()     # z = 0: gradient σ(0) − 1 = −½
([0, 1], [0.5, 0.5], [0.5])
"""

from __future__ import annotations

import numpy as np

from ..updates import SparseRound


def local_sgd(w: np.ndarray, bias: float, ids: np.ndarray, y: np.ndarray, lr: float, l2: float = 0.0):
    """Local SGD of K clients from the global model; returns their sparse updates.

    Parameters
    ----------
    w : ndarray (F,)
        Global feature weights (not modified).
    bias : float
        Global bias.
    ids : ndarray (K, τ, b, nnz) int
        Feature ids of client k's samples at its local step s.
    y : ndarray (K, τ, b)
        Labels in {0, 1}.
    lr : float
        η, constant local step size.
    l2 : float
        λ ≥ 0, L2 penalty on the rows each mini-batch uses.

    Returns
    -------
    update : SparseRound
        Client k's rows: the features it used, Δ = local − global (shape (r, 1)),
        counts = samples using the feature; n_samples = τ·b.
    bias_delta : ndarray (K,)
        Each client's local bias minus the global bias (dense).
    losses : ndarray (K,)
        Mean training loss before each step (nats).
    """
    K, T, b, nnz = ids.shape
    F = w.shape[0]
    owner = np.repeat(np.arange(K), T * b * nnz)
    key, inverse, counts = np.unique(owner * F + ids.ravel(), return_inverse=True, return_counts=True)
    client, feat = key // F, key % F
    slot = np.arange(key.size) - np.searchsorted(client, np.arange(K))[client]
    U = int(slot.max()) + 1 if key.size else 1
    local = np.zeros((K, U))
    local[client, slot] = w[feat]
    start = local.copy()
    lid = (slot[inverse.ravel()] + np.repeat(np.arange(K), T * b * nnz) * U).reshape(K, T, b, nnz)
    flat = local.reshape(-1)
    bk = np.full(K, float(bias))
    losses = np.zeros(K)
    for s in range(T):
        idx = lid[:, s]                                      # (K, b, nnz) flat indices into local
        z = bk[:, None] + flat[idx].sum(axis=2)              # (K, b)
        ys = y[:, s]
        losses += (np.logaddexp(0.0, z) - ys * z).mean(axis=1)
        g = (1.0 / (1.0 + np.exp(-z)) - ys) / b               # dloss/dz of the mini-batch mean
        grad = np.bincount(idx.ravel(), weights=np.repeat(g.ravel(), nnz), minlength=K * U)
        if l2 > 0:
            used = np.zeros(K * U, bool)
            used[idx.ravel()] = True
            grad += l2 * flat * used
        flat -= lr * grad
        bk -= lr * g.sum(axis=1)
    rows = (local - start)[client, slot][:, None]
    update = SparseRound(client=client, ids=feat, rows=rows, counts=counts,
                         n_samples=np.full(K, T * b, np.int64))
    return update, bk - bias, losses / T


def predict_logit(w: np.ndarray, bias: float, ids: np.ndarray) -> np.ndarray:
    """z = b + Σ_{f∈S} w_f for samples ``ids`` (..., nnz) → (...)."""
    return bias + w[ids].sum(axis=-1)
