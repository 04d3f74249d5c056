"""River anchor, final static regret only: one River linear model per client, averaged every τ steps.

What a River user writes for FedSEA: one ``river.linear_model.LogisticRegression``
(or ``LinearRegression``) per client with plain SGD at the constant step η
(``optim.SGD``), no intercept, no L2 penalty, no gradient clipping. Per step
and client, for each sample of the mini-batch (b = 1 in the benchmark): the
loss of the current model from ``predict_proba_one`` (−log p(y)) or
``predict_one`` (½(ŷ − y)²), then ``learn_one``. River's squared loss is
(ŷ − y)², so its η is halved to step on ½(ŷ − y)². After every τ-th step
every client's weights are replaced by the mean weights (River has no
setter: the models' ``_weights`` are rebuilt from the mean). The samples
come from ``anchor_common.like_stream`` (numpy), a row becoming ``dict(zip(range(d), row))``.

River has no batch solver, so the hindsight comparator over all T·M·b
samples (network weights 1/M, mean over the mini-batch) is scipy's, as in
``numpy_final.py``: L-BFGS-B on the kept samples (logistic), the sufficient
statistics in closed form (least squares).

Prints one JSON line: ``regret_static``, ``cum_loss``, ``comparator_static``.

Usage::

    python benchmarks/anchors/river_final.py --task logistic --steps 4000
"""

from __future__ import annotations

import math
import os
import sys

import numpy as np
from river import linear_model, optim, utils

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from anchor_common import blocks_of, emit, like_stream, logistic_hindsight, parse_args, quadratic_min  # noqa: E402


def run(chunks, task: str, M: int, d: int, b: int, eta: float, tau: int) -> dict:
    """FedSEA with River models over ``chunks`` ((X (n, M, b, d), y (n, M, b)) in step order); exact final static regret.

    Raises ValueError for b ≠ 1 (FedSEA's mini-batch step is one mean-gradient step: River's
    ``learn_many``, not the ``learn_one`` per sample written here).
    """
    if b != 1:
        raise ValueError(f"the River anchor learns one sample per client and step (b = 1); got b = {b}")
    glm = dict(intercept_lr=0.0, l2=0.0, clip_gradient=float("inf"))
    if task == "logistic":
        models = [linear_model.LogisticRegression(optimizer=optim.SGD(eta), **glm) for _ in range(M)]
    else:
        models = [linear_model.LinearRegression(optimizer=optim.SGD(eta / 2), **glm) for _ in range(M)]
    keys = range(d)
    cum, t0 = 0.0, 0
    kept = []
    A, v, e = np.zeros((d, d)), np.zeros(d), 0.0
    for X, y in chunks:
        for i in range(len(X)):
            rows, labels = X[i].tolist(), y[i].tolist()
            step = 0.0
            for model, (row,), (label,) in zip(models, rows, labels):
                x = dict(zip(keys, row))
                if task == "logistic":
                    p = model.predict_proba_one(x)[True]
                    step -= math.log(p if label else 1.0 - p)
                else:
                    step += 0.5 * (model.predict_one(x) - label) ** 2
                model.learn_one(x, label)
            cum += step / M
            if (t0 + i + 1) % tau == 0:
                mean = np.mean([model._weights.to_numpy(keys) for model in models], axis=0)
                for model in models:
                    model._weights = utils.VectorDict(dict(zip(keys, mean.tolist())))
        Xf, yf = X.reshape(-1, d), y.reshape(-1)
        if task == "logistic":
            kept += blocks_of(Xf, yf)
        else:
            A += Xf.T @ Xf
            v += Xf.T @ yf
            e += yf @ yf
        t0 += len(X)
    w = 1.0 / M
    if task == "logistic":
        x0 = np.mean([model._weights.to_numpy(keys) for model in models], axis=0)
        _, comp = logistic_hindsight(kept, d, w, x0=x0)
    else:
        comp = float(quadratic_min(w * A, w * v, w * e, t0 * M >= d)[0])
    return {"anchor": "river_final", "task": task, "T": t0, "M": M, "d": d,
            "cum_loss": cum, "comparator_static": comp, "regret_static": cum - comp}


def main(argv=None) -> None:
    a = parse_args(__doc__.splitlines()[0], argv)
    if a.batch != 1:
        sys.exit(f"river_final.py: --batch must be 1 (one learn_one per client and step); got {a.batch}")
    chunks = like_stream(a.task, a.steps, a.clients, a.dim, a.batch, a.seed)
    emit(run(chunks, a.task, a.clients, a.dim, a.batch, a.eta, a.tau))


if __name__ == "__main__":
    main()
