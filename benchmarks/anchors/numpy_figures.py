"""Expert numpy/scipy anchor, the same final figures as ``streamfl run``: what a user writes to get them.

The stream and FedSEA of ``numpy_final.py`` (imported from it), and then the
figures streamfl's summary and metrics file carry for the static comparator:

* ``regret_static``: the exact final static regret (network weights 1/M per
  client and step, mean over the mini-batch);
* ``static_checkpoints``: the exact static regret at streamfl's 16
  checkpoints t (``anchor_common.checkpoints``), the comparator solved on the steps
  1..t;
* ``client_regret_static``: each client alone against its own best fixed
  model in hindsight (weight 1 per step): Σ_t mean_b f(x_{t,m}, ξ_{t,m,b}) −
  min_x Σ_t mean_b f(x, ξ_{t,m,b});
* ``metrics.csv`` in ``--out`` (default: the current folder), one row per
  step: ``t``, ``loss`` (network loss (1/M) Σ_m f(x_{t,m}, ξ_{t,m})),
  ``cum_loss``, ``client<m>_cum_loss``; floats as ``%.10g`` (as streamfl's).

Logistic: every sample is kept in memory; the checkpoint comparators by
L-BFGS-B on each prefix, each warm-started at the previous one; each client
by L-BFGS-B on its own rows (gathered once), warm-started at the network
comparator. Least squares: per-client sufficient statistics A_m = Σ_t mean_b
a aᵀ, v_m, e_m (nothing kept), the network's being their mean; the
checkpoints are solved when the stream reaches them, the clients at the end
in one batched solve.

Prints one JSON line with the figures above, ``cum_loss`` and the metrics file's path.

Usage::

    python benchmarks/anchors/numpy_figures.py --task logistic --steps 4000 [--out DIR]
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from anchor_common import (blocks_of, checkpoints, emit, like_stream, logistic_hindsight, parse_args,  # noqa: E402
                    quadratic_min)
from numpy_final import client_losses, learn  # noqa: E402


def prefix(kept: list, t: int) -> list:
    """Steps 1..t of the kept chunks [(X, y), …], as views."""
    out, have = [], 0
    for X, y in kept:
        if have >= t:
            break
        k = min(len(X), t - have)
        out.append((X[:k], y[:k]))
        have += k
    return out


def run(chunks, task: str, T: int, M: int, d: int, b: int, eta: float, tau: int, out: str = ".") -> dict:
    """FedSEA over ``chunks`` ((X (n, M, b, d), y (n, M, b)), T steps in order) and its exact static figures."""
    marks = checkpoints(T)
    W = np.zeros((M, d))
    L = np.empty((T, M))                                      # every client's loss at every step
    kept = []                                                 # logistic: the chunks, in order
    A, v, e = np.zeros((M, d, d)), np.zeros((M, d)), np.zeros(M)   # least squares: per-client sums
    tmp = np.empty((M, d, d)) if task == "least_squares" else None
    ls_comp = {}                                              # least squares: network comparator at the marks
    t0 = 0
    for X, y in chunks:
        n = len(X)
        L[t0:t0 + n] = client_losses(task, learn(W, X, y, task, eta, tau, t0), y)
        if task == "logistic":
            kept.append((X, y))
        else:
            cuts = [0] + [int(t) - t0 for t in marks if t0 < t < t0 + n] + [n]
            for s, s1 in zip(cuts[:-1], cuts[1:]):            # the chunk, split at the checkpoints
                Xm = X[s:s1].transpose(1, 0, 2, 3).reshape(M, -1, d)     # (M, steps·b, d), a view for b = 1
                ym = y[s:s1].transpose(1, 0, 2).reshape(M, -1)
                A += np.matmul(Xm.transpose(0, 2, 1), Xm, out=tmp)       # no fresh (M, d, d) per segment
                v += np.matmul(Xm.transpose(0, 2, 1), ym[..., None])[..., 0]
                e += np.einsum("mn,mn->m", ym, ym)
                if t0 + s1 in marks:                          # network: weight 1/(M b) per sample
                    w = 1.0 / (M * b)
                    ls_comp[t0 + s1] = float(quadratic_min(w * A.sum(0), w * v.sum(0), w * e.sum(),
                                                            (t0 + s1) * M * b >= d)[0])
        t0 += n
    cum = np.cumsum(L.sum(axis=1) / M)                        # network cumulative loss after each step
    client_cum = L.sum(axis=0)

    if task == "logistic":
        comp, x = {}, None
        for t in marks:                                       # prefixes 1..t, warm-started in order
            blocks = [blk for X, y in prefix(kept, t) for blk in blocks_of(X.reshape(-1, d), y.reshape(-1))]
            x, comp[t] = logistic_hindsight(blocks, d, 1.0 / (M * b), x0=x)
        client_comp = np.empty(M)
        for m in range(M):                                    # each client on its own rows (one gather)
            Xm = np.concatenate([X[:, m] for X, _ in kept]).reshape(-1, d)
            ym = np.concatenate([y[:, m] for _, y in kept]).reshape(-1)
            _, client_comp[m] = logistic_hindsight(blocks_of(Xm, ym), d, 1.0 / b, x0=x)
    else:
        comp = ls_comp
        client_comp, _ = quadratic_min(A / b, v / b, e / b, T * b >= d)       # each client: weight 1/b

    client_regret = client_cum - client_comp
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "metrics.csv")
    table = np.column_stack([np.arange(1, T + 1), L.sum(axis=1) / M, cum, np.cumsum(L, axis=0)])
    np.savetxt(path, table, fmt=["%d"] + ["%.10g"] * (M + 2), delimiter=",", comments="",
               header=",".join(["t", "loss", "cum_loss"] + [f"client{m}_cum_loss" for m in range(M)]))
    return {"anchor": "numpy_figures", "task": task, "T": T, "M": M, "d": d, "cum_loss": float(cum[-1]),
            "comparator_static": comp[T], "regret_static": float(cum[-1] - comp[T]),
            "static_checkpoints": [(int(t), float(cum[t - 1] - comp[t])) for t in marks],
            "client_regret_static": client_regret.tolist(), "metrics_file": path}


def main(argv=None) -> None:
    a = parse_args(__doc__.splitlines()[0], argv)
    chunks = like_stream(a.task, a.steps, a.clients, a.dim, a.batch, a.seed)
    emit(run(chunks, a.task, a.steps, a.clients, a.dim, a.batch, a.eta, a.tau, a.out or "."))


if __name__ == "__main__":
    main()
