"""Compiled local training of K GMF clients: one call per aggregation round.

The fast path of federated GMF (FedNCF, paper 003). It computes exactly what
:func:`streamfl.models.stacked_torch.train_stacked` computes for
:class:`~streamfl.models.ncf.GMF` clients — mini-batch BCE, torch's Adam for
h and b and SparseAdam (``lazy``) or Adam for the embeddings, fresh
optimiser state per round — but the loops over clients,
steps, samples and rows are compiled by numba (in float64), so a round costs
its arithmetic only, without the per-step overhead of a torch call.
``tests/test_ncf.py`` checks the two agree.

With dense Adam, rows of a client's item submodel that no sample has used
yet have zero gradient and zero moments, so Adam leaves them unchanged; the
kernel skips them, which changes nothing but the cost. Cost per client
step: O(B·D) lazy; O(B·D + R·D) dense, R the rows used so far.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


@njit(cache=True)
def gmf_local_training(P, Q, H, bias, items, labels, w, n_steps, lr, lazy, losses):  # pragma: no cover - compiled
    """Local Adam training of K GMF clients, in place.

    Parameters
    ----------
    P : float64 (K, D)
        Each client's user embedding p.
    Q : float64 (K, U, D)
        Each client's item submodel (rows of the items it trains on).
    H : float64 (K, D)
        Prediction weights h.
    bias : float64 (K,)
        Prediction bias b.
    items : int64 (K, S, B)
        Local row (into Q[k]) of each sample of client k's step j.
    labels, w : float64 (K, S, B)
        Labels in {0, 1}; w = 1 for a real sample, 0 for padding.
    n_steps : int64 (K,)
        Steps of each client.
    lr : float
        Adam's η (β = (0.9, 0.999), ε = 1e-8: torch's defaults).
    lazy : bool
        True: the embeddings (user and item rows) follow ``torch.optim.SparseAdam``
        (only the rows of the step's mini-batch move); False: dense Adam on
        every row (``torch.optim.Adam``). h and b always use Adam.
    losses : float64 (K,)
        Receives each client's mean mini-batch loss over its steps (nats).
    """
    b1, b2, eps = 0.9, 0.999, 1e-8
    K, U, D = Q.shape
    Bt = items.shape[2]
    for k in range(K):
        mP = np.zeros(D)
        vP = np.zeros(D)
        mH = np.zeros(D)
        vH = np.zeros(D)
        mQ = np.zeros((U, D))
        vQ = np.zeros((U, D))
        gQ = np.zeros((U, D))
        gP = np.zeros(D)
        gH = np.zeros(D)
        mb = 0.0
        vb = 0.0
        seen = np.zeros(U, np.bool_)
        rows = np.empty(U, np.int64)
        n_rows = 0
        mark = np.full(U, -1, np.int64)
        batch_rows = np.empty(Bt, np.int64)
        total = 0.0
        for j in range(n_steps[k]):
            nw = 0.0
            for s in range(Bt):
                nw += w[k, j, s]
            nw = max(nw, 1.0)
            gP[:] = 0.0
            gH[:] = 0.0
            gb = 0.0
            loss = 0.0
            n_batch = 0
            for s in range(Bt):
                if w[k, j, s] == 0.0:
                    continue
                i = items[k, j, s]
                if not seen[i]:
                    seen[i] = True
                    rows[n_rows] = i
                    n_rows += 1
                if mark[i] != j:
                    mark[i] = j
                    batch_rows[n_batch] = i
                    n_batch += 1
                z = bias[k]
                for d in range(D):
                    z += H[k, d] * P[k, d] * Q[k, i, d]
                y = labels[k, j, s]
                loss += (max(z, 0.0) - z * y + math.log1p(math.exp(-abs(z)))) * w[k, j, s]
                g = (1.0 / (1.0 + math.exp(-z)) - y) * w[k, j, s] / nw
                gb += g
                for d in range(D):
                    gH[d] += g * P[k, d] * Q[k, i, d]
                    gP[d] += g * H[k, d] * Q[k, i, d]
                    gQ[i, d] += g * H[k, d] * P[k, d]
            total += loss / nw
            t = j + 1
            step = lr / (1.0 - b1 ** t)
            bc2 = math.sqrt(1.0 - b2 ** t)
            sparse_step = lr * bc2 / (1.0 - b1 ** t)
            for d in range(D):
                if lazy:                         # SparseAdam; the user row is in every mini-batch
                    mP[d] += (gP[d] - mP[d]) * (1 - b1)
                    vP[d] += (gP[d] * gP[d] - vP[d]) * (1 - b2)
                    P[k, d] -= sparse_step * mP[d] / (math.sqrt(vP[d]) + eps)
                else:
                    mP[d] += (1 - b1) * (gP[d] - mP[d])
                    vP[d] = b2 * vP[d] + (1 - b2) * gP[d] * gP[d]
                    P[k, d] -= step * mP[d] / (math.sqrt(vP[d]) / bc2 + eps)
                mH[d] += (1 - b1) * (gH[d] - mH[d])
                vH[d] = b2 * vH[d] + (1 - b2) * gH[d] * gH[d]
                H[k, d] -= step * mH[d] / (math.sqrt(vH[d]) / bc2 + eps)
            mb += (1 - b1) * (gb - mb)
            vb = b2 * vb + (1 - b2) * gb * gb
            bias[k] -= step * mb / (math.sqrt(vb) / bc2 + eps)
            if lazy:
                for r in range(n_batch):
                    i = batch_rows[r]
                    for d in range(D):
                        g = gQ[i, d]
                        mQ[i, d] += (g - mQ[i, d]) * (1 - b1)
                        vQ[i, d] += (g * g - vQ[i, d]) * (1 - b2)
                        Q[k, i, d] -= sparse_step * mQ[i, d] / (math.sqrt(vQ[i, d]) + eps)
                        gQ[i, d] = 0.0
                continue
            for r in range(n_rows):
                i = rows[r]
                for d in range(D):
                    g = gQ[i, d]
                    mQ[i, d] += (1 - b1) * (g - mQ[i, d])
                    vQ[i, d] = b2 * vQ[i, d] + (1 - b2) * g * g
                    Q[k, i, d] -= step * mQ[i, d] / (math.sqrt(vQ[i, d]) / bc2 + eps)
                    gQ[i, d] = 0.0
        losses[k] = total / max(n_steps[k], 1)


def train_gmf_compiled(params: dict, schedule, lr: float = 1e-3, lazy: bool = True):
    """:func:`~streamfl.models.stacked_torch.train_stacked` for GMF clients, compiled.

    Same arguments and results (``params`` stacked torch tensors named as
    :class:`~streamfl.models.ncf.GMF`'s parameters: ``user.weight`` (K, 1, D),
    ``item.weight`` (K, U, D), ``out.weight`` (K, 1, D), ``out.bias`` (K, 1)),
    except that the arithmetic is float64 (results are cast back to the
    input dtype). ``lazy`` as in :func:`gmf_local_training` (``train_stacked``
    with ``sparse={"user.weight": 0, "item.weight": 1}``).
    """
    import torch

    P = params["user.weight"][:, 0, :].double().numpy().copy()
    Q = params["item.weight"].double().numpy().copy()
    H = params["out.weight"][:, 0, :].double().numpy().copy()
    b = params["out.bias"][:, 0].double().numpy().copy()
    losses = np.zeros(P.shape[0])
    gmf_local_training(P, Q, H, b, schedule.inputs[1].numpy(), schedule.labels.double().numpy(),
                       schedule.w.double().numpy(), schedule.n_steps.astype(np.int64), float(lr), bool(lazy), losses)
    dt = params["item.weight"].dtype
    out = {"user.weight": torch.from_numpy(P[:, None, :]).to(dt), "item.weight": torch.from_numpy(Q).to(dt),
           "out.weight": torch.from_numpy(H[:, None, :]).to(dt), "out.bias": torch.from_numpy(b[:, None]).to(dt)}
    return out, torch.from_numpy(losses).float()
