"""Learners run side by side on the same stream: FedSEA and its baselines.

Every learner has one method, ``step(X, y, t, mask) -> losses (M,)``, doing
test-then-train for all clients at step t, and a ``models`` attribute with
the clients' current models, shape (M, d, K).

* :class:`Federated` — FedSEA (Algorithm 1): local online SGD on every client,
  and every τ steps the strategy averages and broadcasts the models. With
  τ = 1 it is the "τ = 1" baseline; with the :class:`LocalOnly` strategy it is
  the local-only baseline.
* :class:`Centralized` — one model on the pooled stream: at step t it sees the
  M·b samples of all clients one after another (client order), each tested
  then trained on. Sequential by nature, so it loops over the M·b samples.
* :class:`RiverClients` — one River linear model per client, ``learn_one``
  per sample, so results can be checked against the library users know. It
  loops over clients and samples in Python by design; it is a reference,
  not the engine.
"""

from __future__ import annotations

import numpy as np

from ..aggregation import FedAvg, LocalOnly, Strategy
from ..models import StackedLinear, StepSize, get_loss, project_l2_ball


class Federated:
    """FedSEA: clients run online SGD; every τ steps the strategy averages.

    Parameters
    ----------
    clients : StackedLinear
    tau : int or None
        τ, the averaging period in steps; ``None`` never communicates.
    strategy : Strategy
        Defaults to :class:`FedAvg` (uniform average, FedSEA's rule).

    Examples
    --------
    >>> import numpy as np
    >>> fed = Federated(StackedLinear(2, 1, "least_squares", StepSize("constant", eta=0.5)), tau=1)
    >>> fed.step(np.ones((2, 1, 1)), np.array([[2.0], [4.0]]), t=1)
    array([2., 8.])
    >>> fed.models[:, 0, 0]                      # (1 + 2) / 2 after the round
    array([1.5, 1.5])
    """

    def __init__(self, clients: StackedLinear, tau: int | None, strategy: Strategy | None = None):
        self.clients = clients
        self.tau = tau
        self.strategy = strategy or (FedAvg() if tau is not None else LocalOnly())
        self.seen = np.zeros(clients.W.shape[0])
        self.full_steps = 0
        self.rounds = 0

    @property
    def models(self) -> np.ndarray:
        return self.clients.W

    def step(self, X, y, t, mask=None):
        losses = self.clients.test_then_train(X, y, t, mask)
        if mask is None:
            self.full_steps += 1          # counted lazily: no array work on the hot path
        else:
            self.seen += X.shape[1] * mask
        if self.tau is not None and t % self.tau == 0:
            seen = self.seen + self.full_steps * X.shape[1]
            global_model = self.strategy.aggregate(self.clients.W, seen)
            if global_model is not None:
                self.clients.W[:] = global_model
            self.seen[:] = 0
            self.full_steps = 0
            self.rounds += 1
        return losses


class Centralized:
    """One learner on the pooled stream, sample by sample (see module doc).

    At step t it takes the pooled samples of the clients present (M·b when
    all are) one after another, each tested then trained on with step size
    η_t / (number of pooled samples). Over a step it therefore moves
    as far as one averaged FedSEA round of mini-batch steps with η_t (to first
    order), so the comparison isolates *when* information is shared, not how
    large the steps are.
    """

    def __init__(self, n_clients, n_features, task, step_size: StepSize, n_classes=1, radius=None):
        self.step_size = step_size
        self.scale = 1.0
        self.model = StackedLinear(1, n_features, task, lambda t: step_size(t) * self.scale, n_classes, radius)
        self.M = n_clients

    @property
    def models(self):
        return np.broadcast_to(self.model.W, (self.M,) + self.model.W.shape[1:])

    def step(self, X, y, t, mask=None):
        M, b, _ = X.shape
        losses = np.zeros(M)
        present = M if mask is None else int(mask.sum())
        self.scale = 1.0 / (max(present, 1) * b)
        for m in range(M):
            if mask is not None and not mask[m]:
                continue
            for j in range(b):
                losses[m] += self.model.test_then_train(X[m:m + 1, j:j + 1], y[m:m + 1, j:j + 1], t)[0]
        return losses / b


class _RiverSchedule:
    """Adapter giving River's SGD our η_t (River counts steps from 0)."""

    def __new__(cls, step_size):
        from river import optim

        class Schedule(optim.base.Scheduler):
            def get(self, t):
                return step_size(t + 1)

        return Schedule()


class RiverClients:
    """A River linear model per client, trained with ``learn_one``.

    Least squares uses ``LinearRegression`` (River's squared loss is
    (ŷ − y)², so its step is halved to match ½(ŷ − y)²), logistic uses
    ``LogisticRegression``, softmax ``SoftmaxRegression``; no intercept
    (streams that want one carry a constant feature) and no L2 penalty.
    Projection is not applied. With b > 1 River takes b sequential steps.
    """

    def __init__(self, n_clients, n_features, task, step_size: StepSize, n_classes=1):
        from river import linear_model, optim

        self.task, self.d = task, n_features
        self.names = [f"x{i}" for i in range(n_features)]
        self.loss_fn = get_loss(task)
        self.n_classes = n_classes
        half = StepSize(step_size.kind, step_size.eta / 2, step_size.mu * 2, step_size.t0)

        def make():
            if task == "least_squares":
                return linear_model.LinearRegression(optimizer=optim.SGD(_RiverSchedule(half)), intercept_lr=0.0, l2=0.0)
            if task == "logistic":
                return linear_model.LogisticRegression(optimizer=optim.SGD(_RiverSchedule(step_size)), intercept_lr=0.0, l2=0.0)
            return linear_model.SoftmaxRegression(optimizer=optim.SGD(_RiverSchedule(step_size)), l2=0.0)

        self.clients = [make() for _ in range(n_clients)]

    def _loss(self, model, x, y):
        if self.task == "least_squares":
            return 0.5 * (model.predict_one(x) - y) ** 2
        proba = model.predict_proba_one(x)
        if self.task == "logistic":
            p = proba.get(True, 0.5)
            p = min(max(p, 1e-15), 1 - 1e-15)
            return -np.log(p) if y == 1 else -np.log(1 - p)
        p = proba.get(int(y), 0.0) if proba else 1.0 / max(self.n_classes, 1)
        return -np.log(max(p, 1e-15))

    def step(self, X, y, t, mask=None):
        M, b, _ = X.shape
        losses = np.zeros(M)
        for m, model in enumerate(self.clients):
            if mask is not None and not mask[m]:
                continue
            for j in range(b):
                x = dict(zip(self.names, X[m, j].tolist()))
                target = float(y[m, j]) if self.task == "least_squares" else (bool(y[m, j]) if self.task == "logistic" else int(y[m, j]))
                losses[m] += self._loss(model, x, target)
                model.learn_one(x, target)
        return losses / b
