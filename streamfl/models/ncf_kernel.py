"""Compiled local training of K MLP or NeuMF clients: one call per aggregation round.

The fast path of federated MLP and NeuMF (FedNCF, paper 003, §3.1 for the
models, §5.2 for the training: Adam, η = 1e-3, mini-batch BCE on positives
and sampled negatives). It computes what
:func:`streamfl.models.stacked_torch.train_stacked` computes for
:class:`~streamfl.models.ncf.MLP` and :class:`~streamfl.models.ncf.NeuMF`
clients — mini-batch BCE, torch's Adam for the network weights and
``torch.optim.SparseAdam`` (``lazy``) or ``torch.optim.Adam`` for the
embeddings, fresh optimiser state per call — with a hand-written forward and
backward pass through the ReLU tower, the loops over clients, steps, samples
and rows compiled by numba (in float64). The GMF counterpart is
:mod:`streamfl.models.gmf_kernel`. ``tests/test_ncf_kernel.py`` checks this
kernel against torch autograd with ``torch.optim.Adam``/``SparseAdam``
(float64, to 1e-12) and against ``train_stacked`` (float32 and float64);
``tests/test_ncf.py`` checks both kernels against the per-client torch loop.

**One kernel for both models.** A client's parameters are packed as

* ``Pu`` (D_g + E,): its user embedding, the GMF part p^G (D_g entries, none
  for MLP) followed by the MLP part p^M (E = layers[0]/2 entries);
* ``Q`` (U, D_g + E): its item submodel, rows laid out the same way
  ([q^G_i; q^M_i]); the GMF and MLP tables share their row index (the
  sample's item), so SparseAdam's "rows of the mini-batch" and dense Adam's
  "rows used so far" are the same rows for both, and Adam, being elementwise,
  treats the concatenated row as the two tables;
* ``theta`` (T,): the dense weights, flat: for each tower layer l its W_l
  (out_l, in_l) row-major then b_l (out_l), then the prediction layer's h
  (D_g + L) and b (L = layers[-1]).

The logit (:mod:`streamfl.models.ncf`) is z = hᵀ [p^G ⊙ q^G_i ; x_L] + b with
x_0 = [p^M; q^M_i] and x_l = ReLU(W_l x_{l−1} + b_l): MLP is D_g = 0, NeuMF
the GMF part first, exactly as ``NeuMF.forward`` concatenates them.

**Work per step.** The B samples of a step go through each layer side by
side (activations stored sample-innermost, so the inner loops run over the
batch). The user half of x_0 is the same for every sample of a step, so the
user columns of W_0 (out_1 × E) are applied once per step and their
gradient is one outer product with the step's summed δ. Summation order
differs from torch's, so results agree to float64 rounding, not bit for bit.

Cost per client step, B the batch, D_g the GMF size, E = layers[0]/2,
F = Σ_l in_l·out_l the tower's weights (1,512 for FedNCF's (48, 24, 12, 6),
of which E·out_1 = 576 act on the user half): O(B · (F − E·out_1 + D_g + L)
+ E·out_1) for forward and backward, O(T + D_g + E) for Adam on the dense
weights and the user row, plus O(B · (D_g + E)) for the item rows (lazy) or
O(R · (D_g + E)) (dense, R the rows used so far; rows never used have zero
gradient and moments, which Adam leaves unchanged, so they are skipped).
Adam on the T dense weights at every step does not shrink with B (about a
third of the kernel's time on ML-100K at B = 8).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

MODELS = ("mlp", "neumf")
B1, B2, EPS = 0.9, 0.999, 1e-8                  # torch's Adam and SparseAdam defaults


@njit(cache=True)
def _adam(p, g, m, v, step, bc2):  # pragma: no cover - compiled
    """torch.optim.Adam on vectors, in place: step = η/(1 − β₁ᵗ), bc2 = √(1 − β₂ᵗ); zeroes g."""
    for d in range(p.shape[0]):
        m[d] += (1 - B1) * (g[d] - m[d])
        v[d] = B2 * v[d] + (1 - B2) * g[d] * g[d]
        p[d] -= step * m[d] / (math.sqrt(v[d]) / bc2 + EPS)
        g[d] = 0.0


@njit(cache=True)
def _sparse_adam(p, g, m, v, sparse_step):  # pragma: no cover - compiled
    """torch.optim.SparseAdam on one row, in place: sparse_step = η √(1 − β₂ᵗ)/(1 − β₁ᵗ); zeroes g."""
    for d in range(p.shape[0]):
        m[d] += (g[d] - m[d]) * (1 - B1)
        v[d] += (g[d] * g[d] - v[d]) * (1 - B2)
        p[d] -= sparse_step * m[d] / (math.sqrt(v[d]) + EPS)
        g[d] = 0.0


@njit(cache=True, fastmath={"reassoc", "contract"})
def ncf_local_training(Pu, Q, theta, sizes, dg, items, labels, w, n_steps, lr, lazy, losses):  # pragma: no cover - compiled
    """Local Adam training of K MLP (``dg`` = 0) or NeuMF clients, in place.

    Parameters
    ----------
    Pu : float64 (K, D_g + E)
        Each client's user embedding: GMF part, then MLP part (module doc).
    Q : float64 (K, U, D_g + E)
        Each client's item submodel, rows laid out as ``Pu``.
    theta : float64 (K, T)
        Dense weights, flat: per tower layer W_l (row-major) then b_l, then
        h (D_g + L), then b; T = Σ_l (in_l + 1)·out_l + D_g + L + 1.
    sizes : int64 (n_layers + 1,)
        The tower's sizes (FedNCF: 48, 24, 12, 6); sizes[0] = 2E.
    dg : int
        D_g, the GMF part's embedding size (0: MLP).
    items : int64 (K, S, B)
        Local row (into Q[k]) of each sample of client k's step j.
    labels, w : float64 (K, S, B)
        Labels in {0, 1}; w = 1 for a real sample, 0 for padding.
    n_steps : int64 (K,)
        Steps of each client.
    lr : float
        Adam's η (β = (0.9, 0.999), ε = 1e-8: torch's defaults).
    lazy : bool
        True: the embeddings (user and item rows) follow
        ``torch.optim.SparseAdam`` (only the rows of the step's mini-batch move;
        the user row is in every mini-batch); False: dense Adam
        (``torch.optim.Adam``). The dense weights always use Adam.
    losses : float64 (K,)
        Receives each client's mean mini-batch loss over its steps (nats).
    """
    K, U, De = Q.shape
    T = theta.shape[1]
    Bt = items.shape[2]
    nl = sizes.shape[0] - 1
    E = sizes[0] // 2
    L = sizes[nl]
    woff = np.empty(nl, np.int64)            # W_l and b_l in theta
    boff = np.empty(nl, np.int64)
    aoff = np.empty(nl + 1, np.int64)        # x_l in the activation buffer
    off = 0
    a_total = 0
    for l in range(nl):
        woff[l] = off
        off += sizes[l + 1] * sizes[l]
        boff[l] = off
        off += sizes[l + 1]
        aoff[l] = a_total
        a_total += sizes[l]
    aoff[nl] = a_total
    a_total += L
    hoff = off
    bias_off = hoff + dg + L
    x = np.zeros((a_total, Bt))              # activations x_0 … x_L of the step's samples (sample innermost)
    delta = np.zeros((a_total, Bt))          # ∂loss/∂x_l (then ∂loss/∂(pre-activation))
    gz = np.zeros(Bt)                        # ∂loss/∂z per sample
    top = aoff[nl]
    for k in range(K):
        mU = np.zeros(De)
        vU = np.zeros(De)
        gU = np.zeros(De)
        mT = np.zeros(T)
        vT = np.zeros(T)
        gT = np.zeros(T)
        mQ = np.zeros((U, De))
        vQ = np.zeros((U, De))
        gQ = np.zeros((U, De))
        seen = np.zeros(U, np.bool_)
        rows = np.empty(U, np.int64)
        n_rows = 0
        mark = np.full(U, -1, np.int64)
        batch_rows = np.empty(Bt, np.int64)
        p = Pu[k]
        q = Q[k]
        th = theta[k]
        total = 0.0
        for j in range(n_steps[k]):
            nw = 0.0
            for s in range(Bt):
                nw += w[k, j, s]
            nw = max(nw, 1.0)
            n_batch = 0
            for s in range(Bt):                   # the step's rows; x_0's item half (padding: any row, g = 0)
                i = items[k, j, s]
                if w[k, j, s] != 0.0:
                    if not seen[i]:
                        seen[i] = True
                        rows[n_rows] = i
                        n_rows += 1
                    if mark[i] != j:
                        mark[i] = j
                        batch_rows[n_batch] = i
                        n_batch += 1
                for e in range(E):
                    x[E + e, s] = q[i, dg + e]
            # forward, the B samples side by side: x_l = ReLU(W_l x_{l-1} + b_l); x_0 = [p^M; q^M_i], whose
            # user half is the same for every sample of the step, so W_0's user columns act once per step
            for l in range(nl):
                n_in, a_in, a_out = sizes[l], aoff[l], aoff[l + 1]
                c0 = E if l == 0 else 0
                for o in range(sizes[l + 1]):
                    base = woff[l] + o * n_in
                    a = th[boff[l] + o]
                    for c in range(c0):
                        a += th[base + c] * p[dg + c]
                    for s in range(Bt):
                        x[a_out + o, s] = a
                    for c in range(c0, n_in):
                        wv = th[base + c]
                        for s in range(Bt):
                            x[a_out + o, s] += wv * x[a_in + c, s]
                    for s in range(Bt):
                        if x[a_out + o, s] < 0.0:
                            x[a_out + o, s] = 0.0
            loss = 0.0
            for s in range(Bt):
                i = items[k, j, s]
                z = th[bias_off]
                for d in range(dg):
                    z += th[hoff + d] * p[d] * q[i, d]
                for o in range(L):
                    z += th[hoff + dg + o] * x[top + o, s]
                y = labels[k, j, s]
                loss += (max(z, 0.0) - z * y + math.log1p(math.exp(-abs(z)))) * w[k, j, s]
                gz[s] = (1.0 / (1.0 + math.exp(-z)) - y) * w[k, j, s] / nw
            # backward: prediction layer (GMF part per sample), then the tower top down
            for s in range(Bt):
                g = gz[s]
                if w[k, j, s] == 0.0:
                    continue
                i = items[k, j, s]
                gT[bias_off] += g
                for d in range(dg):
                    gT[hoff + d] += g * p[d] * q[i, d]
                    gU[d] += g * th[hoff + d] * q[i, d]
                    gQ[i, d] += g * th[hoff + d] * p[d]
            for o in range(L):
                hv = th[hoff + dg + o]
                acc = 0.0
                for s in range(Bt):
                    acc += gz[s] * x[top + o, s]
                    delta[top + o, s] = gz[s] * hv if x[top + o, s] > 0.0 else 0.0
                gT[hoff + dg + o] += acc
            for l in range(nl - 1, -1, -1):        # ReLU's derivative: 1 where its output is > 0, as torch
                n_in, a_in, a_out = sizes[l], aoff[l], aoff[l + 1]
                c0 = E if l == 0 else 0
                for c in range(c0, n_in):
                    for s in range(Bt):
                        delta[a_in + c, s] = 0.0
                for o in range(sizes[l + 1]):
                    base = woff[l] + o * n_in
                    sd = 0.0
                    for s in range(Bt):
                        sd += delta[a_out + o, s]
                    gT[boff[l] + o] += sd
                    for c in range(c0):             # the user half of x_0: one sum over the step's samples
                        gT[base + c] += sd * p[dg + c]
                        gU[dg + c] += th[base + c] * sd
                    for c in range(c0, n_in):
                        wv = th[base + c]
                        acc = 0.0
                        for s in range(Bt):
                            acc += delta[a_out + o, s] * x[a_in + c, s]
                            delta[a_in + c, s] += wv * delta[a_out + o, s]
                        gT[base + c] += acc
                if l > 0:
                    for c in range(n_in):
                        for s in range(Bt):
                            if x[a_in + c, s] <= 0.0:
                                delta[a_in + c, s] = 0.0
            for s in range(Bt):
                if w[k, j, s] != 0.0:
                    i = items[k, j, s]
                    for e in range(E):
                        gQ[i, dg + e] += delta[E + e, s]
            total += loss / nw
            t = j + 1
            step = lr / (1.0 - B1 ** t)
            bc2 = math.sqrt(1.0 - B2 ** t)
            _adam(th, gT, mT, vT, step, bc2)
            if lazy:                              # SparseAdam: the user row and the mini-batch's item rows
                sparse_step = lr * bc2 / (1.0 - B1 ** t)
                _sparse_adam(p, gU, mU, vU, sparse_step)
                for r in range(n_batch):
                    i = batch_rows[r]
                    _sparse_adam(q[i], gQ[i], mQ[i], vQ[i], sparse_step)
            else:                                 # Adam on every row used so far
                _adam(p, gU, mU, vU, step, bc2)
                for r in range(n_rows):
                    i = rows[r]
                    _adam(q[i], gQ[i], mQ[i], vQ[i], step, bc2)
        losses[k] = total / max(n_steps[k], 1)


def _names(model: str, n_layers: int) -> tuple[list[str], list[str], list[str]]:
    """(user tables, item tables, dense weights) of ``model``, in the kernel's packing order."""
    pre = "mlp." if model == "neumf" else ""
    gmf = ["gmf."] if model == "neumf" else []
    tower = [f"{pre}tower.{l}.{kind}" for l in range(n_layers) for kind in ("weight", "bias")]
    return ([f"{g}user.weight" for g in gmf] + [f"{pre}user.weight"],
            [f"{g}item.weight" for g in gmf] + [f"{pre}item.weight"], tower + ["out.weight", "out.bias"])


def train_ncf_compiled(params: dict, schedule, lr: float = 1e-3, lazy: bool = True, model: str = "mlp"):
    """:func:`~streamfl.models.stacked_torch.train_stacked` for MLP or NeuMF clients, compiled.

    Parameters
    ----------
    params : dict name → torch tensor (K, ...)
        The clients' stacked parameters, named as the module's
        (:mod:`streamfl.models.ncf`): for MLP ``user.weight`` (K, 1, E),
        ``item.weight`` (K, U, E), ``tower.l.weight`` (K, out_l, in_l),
        ``tower.l.bias`` (K, out_l), ``out.weight`` (K, 1, L), ``out.bias``
        (K, 1); for NeuMF ``gmf.user.weight`` (K, 1, D), ``gmf.item.weight``
        (K, U, D), the MLP's under ``mlp.``, and ``out.weight`` (K, 1, D + L).
        Not modified.
    schedule : LocalSchedule
        Inputs (users, local item rows), labels, w, n_steps.
    lr : float
        Adam's η.
    lazy : bool
        As in :func:`ncf_local_training` (``train_stacked`` with ``sparse``
        naming every user table at input 0 and every item table at input 1).
    model : {"mlp", "neumf"}

    Returns
    -------
    (dict name → tensor (K, ...), tensor (K,))
        The trained parameters (same names, shapes and dtype as ``params``;
        the arithmetic is float64) and each client's mean loss.

    Raises
    ------
    ValueError
        Unknown ``model``, or ``params`` not named as that model's parameters.
    """
    import torch

    if model not in MODELS:
        raise ValueError(f"The 'model' parameter must be one of {list(MODELS)}. Got {model!r} instead.")
    pre = "mlp." if model == "neumf" else ""
    n_layers = sum(1 for n in params if n.startswith(f"{pre}tower.") and n.endswith(".weight"))
    users, item_tables, dense = _names(model, n_layers)
    if set(params) != set(users + item_tables + dense) or n_layers == 0:
        raise ValueError(f"params do not name a {model!r} model's parameters: got {sorted(params)}.")
    K = params[item_tables[0]].shape[0]
    sizes = np.array([params[f"{pre}tower.0.weight"].shape[2]]
                     + [params[f"{pre}tower.{l}.weight"].shape[1] for l in range(n_layers)], np.int64)
    dg = params["gmf.user.weight"].shape[2] if model == "neumf" else 0
    Pu = np.concatenate([params[n][:, 0, :].double().numpy() for n in users], axis=1)
    Q = np.concatenate([params[n].double().numpy() for n in item_tables], axis=2)
    theta = np.concatenate([params[n].double().numpy().reshape(K, -1) for n in dense], axis=1)
    losses = np.zeros(K)
    ncf_local_training(Pu, Q, theta, sizes, dg, schedule.inputs[1].numpy(), schedule.labels.double().numpy(),
                       schedule.w.double().numpy(), schedule.n_steps.astype(np.int64), float(lr), bool(lazy), losses)
    dt = params[item_tables[0]].dtype
    out = {}
    widths = [params[n].shape[2] for n in users]
    for n_user, n_item, a, b in zip(users, item_tables, np.cumsum([0] + widths[:-1]), np.cumsum(widths)):
        out[n_user] = torch.from_numpy(Pu[:, None, a:b].copy()).to(dt)
        out[n_item] = torch.from_numpy(Q[:, :, a:b].copy()).to(dt)
    off = 0
    for n in dense:
        size = int(np.prod(params[n].shape[1:]))
        out[n] = torch.from_numpy(theta[:, off:off + size].reshape(params[n].shape).copy()).to(dt)
        off += size
    return {n: out[n] for n in params}, torch.from_numpy(losses).float()
