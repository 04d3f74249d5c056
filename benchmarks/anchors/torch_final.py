"""Expert torch anchor, final static regret only: FedSEA on stacked client weights, the comparator by autograd.

The stream is ``anchor_common.like_stream`` (drawn with numpy: ``torch.randn`` in
float64 took 2.6× numpy's CPU for the same draws on the benchmark machine),
wrapped without a copy by ``torch.from_numpy``. All M clients learn at once
on stacked weights W (M, d), float64, under ``torch.no_grad`` (the analytic
gradient, as ``benchmarks/throughput.py`` section 4's analytic row): per step
the scores z = ⟨a, x_m⟩ of every client's current model on its mini-batch
(one ``einsum``; the loss is charged before the update), then
W ← W − (η/b) Σ_j f'(z_j) a_j, and after every τ-th step W ← mean(W).

At the end the hindsight comparator over all T·M·b samples, network weights
1/M per client and step and the mean over the mini-batch:

* logistic: the objective over every kept sample in torch, its gradient by
  autograd, minimised by scipy's L-BFGS-B with the numpy anchors' objective
  scale and tolerances (``anchor_common.LBFGS``), warm-started at the
  learners' mean model.
  ``torch.optim.LBFGS`` would do as well but imports ``torch._dynamo`` when
  built: 1.4 CPU s, against 0.44 s for ``scipy.optimize``;
* least squares: ``torch.linalg.solve`` on the sufficient statistics.

Prints one JSON line: ``regret_static``, ``cum_loss``, ``comparator_static``.

Usage::

    python benchmarks/anchors/torch_final.py --task logistic --steps 4000
"""

from __future__ import annotations

import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from anchor_common import LBFGS, emit, like_stream, parse_args  # noqa: E402

F64 = torch.float64


def run(chunks, task: str, M: int, d: int, b: int, eta: float, tau: int) -> dict:
    """FedSEA over numpy ``chunks`` ((X (n, M, b, d), y (n, M, b)) in step order) and its exact final static regret."""
    W = torch.zeros(M, d, dtype=F64)
    cum, t0 = 0.0, 0
    kept = []                                                   # logistic: every sample (rows, labels)
    A, v, e = torch.zeros(d, d, dtype=F64), torch.zeros(d, dtype=F64), 0.0
    with torch.no_grad():
        for X, y in chunks:
            X, y = torch.from_numpy(X), torch.from_numpy(y)
            n = len(X)
            Z = torch.empty(n, M, b, dtype=F64)
            for i in range(n):
                z = torch.einsum("mbd,md->mb", X[i], W)
                Z[i] = z
                r = (torch.sigmoid(z) if task == "logistic" else z) - y[i]
                W.sub_(torch.einsum("mb,mbd->md", r, X[i]), alpha=eta / b)
                if (t0 + i + 1) % tau == 0:
                    W[:] = W.mean(dim=0)
            loss = F.softplus(Z) - y * Z if task == "logistic" else 0.5 * (Z - y) ** 2
            cum += float(loss.sum()) / (M * b)
            Xf, yf = X.reshape(-1, d), y.reshape(-1)
            if task == "logistic":
                kept.append((Xf, yf))
            else:
                A += Xf.T @ Xf
                v += Xf.T @ yf
                e += float(yf @ yf)
            t0 += n
    if task == "logistic":
        from scipy.optimize import minimize

        def fun(x):                                              # the objective and its autograd gradient
            theta = torch.from_numpy(x).requires_grad_(True)
            f = sum((F.softplus(z) - yf * z).sum() for z, yf in ((Xf @ theta, yf) for Xf, yf in kept)) / (M * b)
            f.backward()
            return f.item(), theta.grad.numpy()
        comp = float(minimize(fun, W.mean(dim=0).numpy(), jac=True, method="L-BFGS-B", options=LBFGS).fun)
    else:
        x = torch.linalg.solve(A, v)
        comp = 0.5 * (e - float(v @ x)) / (M * b)
    return {"anchor": "torch_final", "task": task, "T": t0, "M": M, "d": d,
            "cum_loss": cum, "comparator_static": comp, "regret_static": cum - comp}


def main(argv=None) -> None:
    a = parse_args(__doc__.splitlines()[0], argv)
    chunks = like_stream(a.task, a.steps, a.clients, a.dim, a.batch, a.seed)
    emit(run(chunks, a.task, a.clients, a.dim, a.batch, a.eta, a.tau))


if __name__ == "__main__":
    main()
