"""K clients of one torch architecture trained at once over stacked parameters.

The neural counterpart of :class:`~streamfl.models.linear.StackedLinear`:
every parameter of the K client models lives in one tensor with a leading
client axis (K, ...), and one local step of all clients is one batched
forward and backward pass plus one vectorised Adam step. Two ways to run the
batched pass (both without a Python loop over clients):

* ``batched`` — the module itself broadcasts over the client axis (the NCF
  models do: :func:`streamfl.models.ncf.lookup`, :func:`~streamfl.models.ncf.dense`);
  it is called once through ``torch.func.functional_call`` with the stacked
  parameters, the K clients' mean losses are summed, and autograd gives each
  client the gradient of its own loss (the clients' parameters are disjoint);
* ``vmap`` — any module: ``torch.vmap(torch.func.grad_and_value(loss))`` over
  the client axis, the module run per client by ``functional_call``.

:func:`train_loop` is the per-client reference (one ``torch.optim.Adam`` per
client, one client after another); ``benchmarks/fedncf.py --compare-trainers``
times the three.

**Schedule.** Client k takes ``n_steps[k]`` local steps (its epochs' mini-batches
back to back); a partial batch is padded with weight w = 0. Clients are
trained in order of decreasing ``n_steps``, so at step j the clients still
training are a prefix of the stack: the step works on views of the first
a_j clients, with no masking and no work for clients that are done. All
clients still training have taken j steps, so Adam's bias corrections are
one scalar per step.

**Adam** is torch's (``torch.optim.Adam`` defaults: β = (0.9, 0.999), ε = 1e-8,
no weight decay; its functional form with the fused kernel, applied to the
views of the clients still training). Parameters named in ``sparse``
(embedding tables) follow ``torch.optim.SparseAdam`` instead: only the rows
the step's mini-batch uses update their moments and values (the "lazy"
Adam of sparse embeddings, what ``nn.Embedding(sparse=True)`` with
``SparseAdam`` computes). Optimiser state is fresh for each call: clients start each round's
local training with fresh optimiser state (FedNCF, paper 003, §3: clients
receive the global model and train locally).

Costs: a step costs O(a_j · B) for the forward/backward pass plus
O(a_j · P) for Adam (P = parameters per client); a round costs the sum over
its steps, i.e. O(Σ_k n_k (B + P)) — the work of the clients alone, without
padding to the slowest client.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.adam import adam

Params = dict[str, torch.Tensor]
METHODS = ("batched", "vmap")


def bce_loss(logits: torch.Tensor, labels: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Weighted mean binary cross entropy over the last axis: Σ w·BCE / max(Σ w, 1), shape (...) (nats)."""
    per = F.binary_cross_entropy_with_logits(logits, labels, reduction="none")
    return (per * w).sum(-1) / w.sum(-1).clamp(min=1.0)


@dataclass
class LocalSchedule:
    """The local mini-batches of K clients for one round.

    Attributes
    ----------
    inputs : tuple of tensors (K, S, B)
        Module inputs of client k at its step j: ``x[k, j]`` for x in inputs.
    labels : tensor (K, S, B) float32
    w : tensor (K, S, B) float32
        1 for a real sample, 0 for padding.
    n_steps : ndarray (K,) int64
        Steps of each client (S = max n_steps); steps ≥ n_steps[k] are empty.
    """

    inputs: tuple
    labels: torch.Tensor
    w: torch.Tensor
    n_steps: np.ndarray

    @classmethod
    def from_samples(cls, K: int, batch: int, owner: np.ndarray, step: np.ndarray, slot: np.ndarray,
                     inputs: tuple[np.ndarray, ...], labels: np.ndarray) -> "LocalSchedule":
        """Place every sample (client ``owner``, step ``step``, position ``slot`` < B) into padded tensors.

        All arrays have shape (n,); positions must be distinct per (owner, step).
        """
        n_steps = np.zeros(K, np.int64)
        if owner.size:
            np.maximum.at(n_steps, owner, step + 1)
        S = int(n_steps.max()) if K else 0
        def place(values, dtype):
            out = np.zeros((K, S, batch), dtype)
            out[owner, step, slot] = values
            return torch.from_numpy(out)
        return cls(inputs=tuple(place(x, np.int64) for x in inputs), labels=place(labels, np.float32),
                   w=place(np.ones(owner.size, np.float32), np.float32), n_steps=n_steps)


def stack(params: Mapping[str, torch.Tensor], K: int) -> Params:
    """K copies of one model's parameters, each of shape (K, ...) (contiguous, detached)."""
    return {k: v.detach().unsqueeze(0).expand(K, *v.shape).clone() for k, v in params.items()}


@torch.no_grad()
def _sparse_adam_rows(p: torch.Tensor, g: torch.Tensor, m: torch.Tensor, v: torch.Tensor, rows: torch.Tensor,
                      t: int, lr: float, betas=(0.9, 0.999), eps: float = 1e-8) -> None:
    """``torch.optim.SparseAdam``'s update of the rows marked in ``rows`` (a, N), in place on (a, N, D) views."""
    b1, b2 = betas
    r = rows.unsqueeze(-1)
    m.copy_(torch.where(r, m + (g - m) * (1 - b1), m))
    v.copy_(torch.where(r, v + (g * g - v) * (1 - b2), v))
    step = lr * (1 - b2 ** t) ** 0.5 / (1 - b1 ** t)
    p.sub_(torch.where(r, step * m / (v.sqrt() + eps), torch.zeros((), dtype=p.dtype)))


def _rows_used(index: torch.Tensor, w: torch.Tensor, n_rows: int) -> torch.Tensor:
    """(a, n_rows) bool: rows that a real sample (w > 0) of each client's mini-batch (a, B) uses."""
    idx = torch.where(w > 0, index, torch.full_like(index, n_rows))
    used = torch.zeros(index.shape[0], n_rows + 1, dtype=torch.bool)
    used.scatter_(1, idx, True)
    return used[:, :n_rows]


@torch.no_grad()
def _adam_step(P: Params, grads: Params, M: Params, V: Params, a: int, t: int, lr: float) -> None:
    """One Adam step of the first ``a`` clients, all at their step t (torch's fused Adam kernel, in place)."""
    names = list(P)
    if not names:
        return
    # the fused kernel walks p and its gradient in memory order: the gradient must share p's (contiguous) layout
    adam([P[k][:a] for k in names], [grads[k].contiguous() for k in names], [M[k][:a] for k in names],
         [V[k][:a] for k in names], [], [torch.tensor(float(t - 1)) for _ in names], fused=True,
         amsgrad=False, beta1=0.9, beta2=0.999, lr=lr, weight_decay=0.0, eps=1e-8, maximize=False)


def train_stacked(module: nn.Module, params: Params, schedule: LocalSchedule, lr: float = 1e-3,
                  method: str = "batched", loss: Callable = bce_loss,
                  sparse: Mapping[str, int] | None = None) -> tuple[Params, torch.Tensor]:
    """Local training of K clients at once (see module doc); returns (new params (K, ...), mean loss (K,)).

    Parameters
    ----------
    module : nn.Module
        The shared architecture (its own parameter values are not used). With
        ``batched`` its forward must broadcast over a leading client axis.
    params : dict name → tensor (K, ...)
        Every parameter the loss depends on, stacked; not modified.
    schedule : LocalSchedule
    lr : float
        Adam's η.
    method : {"batched", "vmap"}
    loss : callable (logits (..., B), labels, w) → per-client loss (...)
    sparse : dict name → input position, or None
        Embedding tables updated by SparseAdam; the value says which of the
        schedule's inputs indexes the table's rows (e.g. ``{"item.weight": 1}``).

    Returns
    -------
    params : dict name → tensor (K, ...)
    losses : tensor (K,)
        Mean training loss over each client's steps (0 for a client without steps).

    Raises
    ------
    ValueError
        Unknown ``method``.
    """
    if method not in METHODS:
        raise ValueError(f"The 'method' parameter must be one of {list(METHODS)}. Got {method!r} instead.")
    K = schedule.n_steps.shape[0]
    sparse = dict(sparse or {})
    order = np.argsort(-schedule.n_steps, kind="stable")
    steps_sorted = schedule.n_steps[order]
    idx = torch.from_numpy(order)
    P = {k: v.index_select(0, idx).clone() for k, v in params.items()}
    M = {k: torch.zeros_like(v) for k, v in P.items()}
    V = {k: torch.zeros_like(v) for k, v in P.items()}
    xs = tuple(x.index_select(0, idx) for x in schedule.inputs)
    ys, ws = schedule.labels.index_select(0, idx), schedule.w.index_select(0, idx)
    total = torch.zeros(K)
    if method == "vmap":
        def client_loss(p, inputs, labels, w):
            return loss(torch.func.functional_call(module, p, inputs), labels, w)
        grad_fn = torch.vmap(torch.func.grad_and_value(client_loss))
    for j in range(int(steps_sorted[0]) if K else 0):
        a = int(np.count_nonzero(steps_sorted > j))
        inputs = tuple(x[:a, j] for x in xs)
        if method == "batched":
            leaves = {k: v[:a].detach().requires_grad_(True) for k, v in P.items()}
            values = loss(torch.func.functional_call(module, leaves, inputs), ys[:a, j], ws[:a, j])
            grads = dict(zip(leaves, torch.autograd.grad(values.sum(), list(leaves.values()))))
        else:
            grads, values = grad_fn({k: v[:a] for k, v in P.items()}, inputs, ys[:a, j], ws[:a, j])
        _adam_step({k: P[k] for k in P if k not in sparse}, grads, M, V, a, j + 1, lr)
        for k, pos in sparse.items():
            rows = _rows_used(inputs[pos], ws[:a, j], P[k].shape[1])
            _sparse_adam_rows(P[k][:a], grads[k], M[k][:a], V[k][:a], rows, j + 1, lr)
        total[:a] += values.detach()
    inverse = torch.from_numpy(np.argsort(order))
    out = {k: v.index_select(0, inverse) for k, v in P.items()}
    return out, total.index_select(0, inverse) / torch.from_numpy(np.maximum(schedule.n_steps, 1)).float()


def train_loop(module: nn.Module, params: Params, schedule: LocalSchedule, lr: float = 1e-3,
               loss: Callable = bce_loss, sparse: Mapping[str, int] | None = None) -> tuple[Params, torch.Tensor]:
    """The same local training one client after another, each with its own torch optimisers.

    The reference for :func:`train_stacked` and its timing baseline: same
    arguments (no ``method``) and results; padding is dropped, so each client
    computes exactly what it would alone. Dense parameters use
    ``torch.optim.Adam``; the tables in ``sparse`` get ``torch.optim.SparseAdam``
    with the sparse gradient of the rows the mini-batch uses.
    """
    K = schedule.n_steps.shape[0]
    sparse = dict(sparse or {})
    out = {k: v.clone() for k, v in params.items()}
    losses = torch.zeros(K)
    for c in range(K):
        p = {k: v[c].clone().requires_grad_(True) for k, v in params.items()}
        opts = [torch.optim.Adam([p[k] for k in p if k not in sparse], lr=lr)] if len(sparse) < len(p) else []
        if sparse:
            opts.append(torch.optim.SparseAdam([p[k] for k in sparse], lr=lr))
        total = 0.0
        for j in range(int(schedule.n_steps[c])):
            keep = schedule.w[c, j] > 0
            for opt in opts:
                opt.zero_grad()
            inputs = tuple(x[c, j][keep] for x in schedule.inputs)
            value = loss(torch.func.functional_call(module, p, inputs), schedule.labels[c, j][keep],
                         schedule.w[c, j][keep])
            value.backward()
            for k, pos in sparse.items():               # the rows of the batch, as a sparse gradient
                rows = torch.unique(inputs[pos])
                p[k].grad = torch.sparse_coo_tensor(rows[None], p[k].grad[rows], p[k].shape, check_invariants=False)
            for opt in opts:
                opt.step()
            total += float(value.detach())
        for k in out:
            out[k][c] = p[k].detach()
        losses[c] = total / max(int(schedule.n_steps[c]), 1)
    return out, losses
