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
  then trained on. Sequential by nature: its loop over the M·b samples is
  one compiled (numba) call.
* :class:`RiverClients` — one River linear model per client with the same
  model, step and loss as the local-only learner, so results can be checked
  against the library users know. It loops over clients and samples in
  Python by design; it is an opt-in reference, not the engine.
"""

from __future__ import annotations

import math

import numpy as np

from ..aggregation import FedAvg, LocalOnly, Strategy
from ..models import StackedLinear, StepSize, loss_of_scores
from ..models.kernels import LEAST_SQUARES, LOGISTIC, SOFTMAX, sequential_sgd


#: Learners that loop over clients and samples in Python; a run that includes one is bound by it.
PER_SAMPLE_PYTHON = {
    "river": "one River model per client, a Python loop over clients and samples "
             "(about 6 µs per client-sample at d = 10, 20-50× slower than the compiled learners)",
}


def bottleneck_note(baselines) -> str | None:
    """The line the run header and live view show when a per-sample Python learner bounds the run.

    Parameters
    ----------
    baselines : iterable of str
        The run's baselines (``cfg.baselines``).

    Returns
    -------
    str or None
        ``None`` when every learner is compiled/vectorised.

    Examples
    --------
    >>> bottleneck_note(["tau1", "local", "centralized"]) is None
    True
    >>> bottleneck_note(["local", "river"])[:35]
    'bottleneck: learner river: one Rive'
    """
    slow = [name for name in baselines if name in PER_SAMPLE_PYTHON]
    if not slow:
        return None
    return "; ".join(f"bottleneck: learner {name}: {PER_SAMPLE_PYTHON[name]}; it sets this run's speed "
                     f"(drop it from baselines for engine speed)" for name in slow)


class Federated:
    """FedSEA: clients run online SGD; every τ steps the strategy averages.

    The one federated learner of the engine, for every client model
    (:class:`~streamfl.models.client_model.ClientModel`): at each step the
    clients test-then-train; every τ steps they upload
    (:meth:`~streamfl.models.client_model.ClientModel.upload`), the strategy
    aggregates and the clients download the result. Linear models upload
    their dense (M, d, K) stack (FedSEA, FedAvg); FedNCF's GMF uploads sparse
    item rows and dense weights (:class:`~streamfl.aggregation.strategy.MFFedAvg`).

    Parameters
    ----------
    clients : ClientModel
        e.g. :class:`StackedLinear` or :class:`~streamfl.models.streaming_gmf.StreamingGMF`.
    tau : int or None
        τ, the averaging period in steps; ``None`` never communicates.
    strategy : Strategy
        Defaults to :class:`FedAvg` (uniform average, FedSEA's rule).
    compressor : Compressor or None
        Compresses dense uploads (linear models only).

    Examples
    --------
    >>> import numpy as np
    >>> fed = Federated(StackedLinear(2, 1, "least_squares", StepSize("constant", eta=0.5)), tau=1)
    >>> fed.step(np.ones((2, 1, 1)), np.array([[2.0], [4.0]]), t=1)
    array([2., 8.])
    >>> fed.models[:, 0, 0]                      # (1 + 2) / 2 after the round
    array([1.5, 1.5])
    """

    def __init__(self, clients: StackedLinear, tau: int | None, strategy: Strategy | None = None,
                 compressor=None, seed: int = 0):
        self.clients = clients
        self.tau = tau
        self.strategy = strategy or (FedAvg() if tau is not None else LocalOnly())
        self.seen = np.zeros(clients.n_clients)
        self.full_steps = 0
        self.rounds = 0
        self.compressor, self.seed = compressor, seed
        self.bytes_up = 0          # cumulative payload bytes, clients → server
        self.bytes_down = 0        # cumulative payload bytes, server → clients
        self._global = clients.W[0].copy() if compressor is not None else None
        self._lengths = {}         # model shape -> float64 payload bytes

    @property
    def models(self) -> np.ndarray | None:
        """The clients' current dense models (M, d, K); ``None`` for models with embedding tables."""
        return getattr(self.clients, "W", None)

    def step(self, X, y, t, mask=None):
        losses = self.clients.test_then_train(X, y, t, mask)
        if mask is None:
            self.full_steps += 1          # counted lazily: no array work on the hot path
        else:
            self.seen += X.shape[1] * mask
        if self.tau is not None and t % self.tau == 0:
            seen = self.seen + self.full_steps * X.shape[1]
            uploaded = self._upload(seen)
            global_model = self.strategy.aggregate(uploaded, seen)
            if global_model is not None:
                self.clients.download(global_model)
                self._broadcast(global_model)
            self.seen[:] = 0
            self.full_steps = 0
            self.rounds += 1
        return losses


    def _upload(self, seen: np.ndarray) -> np.ndarray:
        """The M models the server receives this round, (M, d, K), counting the upload payloads' bytes.

        Only clients that learned from samples this round (``seen`` > 0) take part, so only their
        payloads count (the others' rows have weight 0 in the average).

        Without a compressor every client sends its model as float64 (lossless:
        the server averages exactly ``W``; all these payloads have one length, so one is encoded). With compressor C, client m sends
        C(x_m − x̄_prev), the change of its model since the last global model, with the dither key
        (seed, m + 1, round); the server decodes and averages x̄_prev + Ĉ(·).
        """
        W = self.clients.upload(seen)
        if not isinstance(W, np.ndarray):          # a ModelUpdate (sparse rows): it counts its own payload
            self.bytes_up += int(W.nbytes)
            return W
        if self.compressor is None:
            # every model has the same shape, so every float64 payload has the same length (fixed header,
            # 8 bytes per value): one payload is encoded, once per run, and counted once per client taking part
            # (the length depends on the shape only, so a diverged, non-finite model is counted the same)
            self.bytes_up += int(np.count_nonzero(seen > 0)) * self._payload_bytes(W.shape[1:])
            return W
        if not np.isfinite(W).all():
            return W          # diverged: the engine stops the run at this step with its divergence message
        from ..compression import dither_key
        c = self.compressor
        keys = [dither_key(self.seed, m + 1, self.rounds) for m in range(W.shape[0])] if c.dithered else None
        payloads = c.encode_batch(W - self._global, keys)
        self.bytes_up += sum(len(p) for p, s in zip(payloads, seen) if s > 0)
        return self._global + c.decode_batch(payloads, keys)

    def _payload_bytes(self, shape: tuple) -> int:
        """Length of the float64 payload of one model of ``shape`` (encoded once per shape, then remembered)."""
        n = self._lengths.get(shape)
        if n is None:
            from ..compression import NoCompression
            n = self._lengths[shape] = len(NoCompression("float64").encode(np.zeros(shape)))
        return n

    def _broadcast(self, global_model: np.ndarray) -> None:
        """The server sends the new global model (d, K) to each of the M clients as float64; bytes counted."""
        if not isinstance(global_model, np.ndarray):      # a GlobalUpdate: its payload goes to every client
            self.bytes_down += self.clients.n_clients * int(global_model.nbytes)
            return
        self.bytes_down += self.clients.W.shape[0] * self._payload_bytes(global_model.shape)
        if self._global is not None:
            self._global = np.array(global_model, copy=True)


class Centralized:
    """One learner on the pooled stream, sample by sample (see module doc).

    At step t it takes the pooled samples of the clients present (M·b when
    all are) one after another, each tested then trained on with step size
    η_t / (number of pooled samples). Over a step it therefore moves
    as far as one averaged FedSEA round of mini-batch steps with η_t (to first
    order), so the comparison isolates *when* information is shared, not how
    large the steps are.

    The sequential inner loop (clients, then samples, then projection onto
    the ball of radius D after every sample) is one compiled call,
    :func:`streamfl.models.kernels.sequential_sgd`; its numbers equal the
    per-sample ``StackedLinear(1, d)`` loop it replaces to 1e-12
    (tests/test_kernels.py).

    Parameters
    ----------
    n_clients, n_features : int
        M, d.
    task : {"least_squares", "logistic", "softmax"}
    step_size : StepSize
        η_t at the global step t = 1, 2, ….
    n_classes : int
        K (softmax).
    radius : float or None
        D (projection after every sample), ``None`` for none.

    Examples
    --------
    >>> import numpy as np
    >>> c = Centralized(2, 1, "least_squares", StepSize("constant", eta=1.0))
    >>> c.step(np.ones((2, 1, 1)), np.array([[2.0], [4.0]]), t=1)   # 2nd sample sees w = 1
    array([2. , 4.5])
    >>> float(c.models[0, 0, 0])                                     # 1 + (4 − 1)/2
    2.5
    """

    def __init__(self, n_clients, n_features, task, step_size: StepSize, n_classes=1, radius=None):
        self.step_size = step_size
        self.scale = 1.0
        self.model = StackedLinear(1, n_features, task, lambda t: step_size(t) * self.scale, n_classes, radius)
        self.M = n_clients
        self._kind = {"least_squares": LEAST_SQUARES, "logistic": LOGISTIC, "softmax": SOFTMAX}[task]
        self._radius = math.inf if radius is None else float(radius)
        self._all = np.ones(n_clients, dtype=np.bool_)

    @property
    def models(self):
        return np.broadcast_to(self.model.W, (self.M,) + self.model.W.shape[1:])

    def step(self, X, y, t, mask=None):
        """Test-then-train on the pooled samples in client order; returns each client's mean loss (M,)."""
        M, b, _ = X.shape
        present = M if mask is None else int(mask.sum())
        self.scale = 1.0 / (max(present, 1) * b)
        losses = np.empty(M)
        sequential_sgd(self.model.W[0], X, np.asarray(y, dtype=np.float64),
                       self._all if mask is None else np.asarray(mask, dtype=np.bool_),
                       self.step_size(t) * self.scale, self._kind, self._radius, losses)
        return losses


class _RiverSchedule:
    """A River scheduler that returns our η_t at the engine's step t.

    River's SGD asks its scheduler for the rate at the optimizer's own step
    count. That count lags the global step t when a client sits steps out
    (its table ended), and SoftmaxRegression keeps one count per class; so
    the count is ignored and η_t is taken at ``clock()``, the step being
    learned. ``clock`` is a function: River deep-copies optimizers, and a
    function is shared by the copies, not copied.
    """

    def __new__(cls, step_size, clock):
        from river import optim

        class Schedule(optim.base.Scheduler):
            def get(self, t):
                return step_size(clock())

        return Schedule()


class RiverClients:
    """A River linear model per client: River learns, our loss counts.

    A validation reference (opt-in baseline ``river``): River's own model and
    SGD must give the local-only learner's numbers. So River gets the same
    model and the same step, and its loss is computed like everyone else's:

    * **models**: ``LinearRegression`` (least squares), ``LogisticRegression``
      (logistic), ``SoftmaxRegression`` (softmax), each with ``optim.SGD``,
      no intercept (streams that want one carry a constant feature), no L2
      penalty, no gradient clipping. River's squared loss is (ŷ − y)², so its
      η is halved to step on ½(ŷ − y)². SoftmaxRegression only models the
      classes it has seen (a class seen for the first time has probability 0,
      and its log loss is clamped at −ln(1e−15) = 34.5 nats); its weight table
      is therefore filled with all K classes before the first sample, which
      makes it the K-class model started at zero that the clients run.
    * **step**: η_t at the global step t (see :class:`_RiverSchedule`). With
      b = 1, ``learn_one``. With b > 1, one step on the mini-batch mean
      gradient, like the clients: ``learn_many`` for LinearRegression and
      LogisticRegression (River's GLM mini-batch step is exactly that).
      SoftmaxRegression has no ``learn_many``; its equivalent here takes
      River's ``CrossEntropy`` gradient of every sample at the same weights,
      averages them, and lets each class's River optimizer take one step with
      the mean (``learn_one``'s update, on the mean gradient).
    * **loss**: River's raw scores (``_raw_dot_one`` / ``_raw_dot_many`` for the
      GLMs, the per-class dot products ``utils.math.dot`` for softmax) charged with
      :func:`streamfl.models.loss_of_scores`, the function the clients use:
      no probability clipping, no 34.5-nat cap.

    What remains is River's own gradient arithmetic: ``Log.gradient`` (b = 1)
    returns ±1 for a margin beyond −18 instead of ±(1 − e^(−|z|)), at most
    1.5e-8 off, and ``CrossEntropy.gradient`` clamps probabilities to
    [1e-15, 1 − 1e-15]. With ordinary scores River equals local-only SGD to
    rounding (tests/test_river_baseline.py). River has no projection, so
    :func:`streamfl.runtime.experiment.build_learners` refuses it with
    ``learner.radius``.

    Cost: a Python loop over clients and samples, O(M·b·d) dictionary
    operations per step; measured with d = 10: 6 µs per client-sample with
    ``learn_one`` (40 µs for softmax with K = 3), and about 0.4 ms per client
    and step with ``learn_many`` (River converts a DataFrame per call). It is
    not the engine.

    Parameters
    ----------
    n_clients, n_features : int
        M, d.
    task : {"least_squares", "logistic", "softmax"}
    step_size : StepSize
        η_t, indexed by the global step t = 1, 2, ….
    n_classes : int
        K (softmax).

    Examples
    --------
    >>> import numpy as np
    >>> from streamfl.models import StepSize
    >>> river = RiverClients(2, 1, "least_squares", StepSize("constant", eta=0.5))
    >>> river.step(np.ones((2, 1, 1)), np.array([[2.0], [4.0]]), t=1)
    array([2., 8.])
    >>> river.models[:, 0, 0]                     # the same step as StackedLinear's
    array([1., 2.])
    """

    def __init__(self, n_clients, n_features, task, step_size: StepSize, n_classes=1):
        from river import linear_model, optim

        self.task, self.d = task, n_features
        self.names = [f"x{i}" for i in range(n_features)]
        self.K = n_classes if task == "softmax" else 1
        self.t = 0
        clock = self._clock()
        half = StepSize(step_size.kind, step_size.eta / 2, step_size.mu * 2, step_size.t0)
        glm = dict(intercept_lr=0.0, l2=0.0, clip_gradient=float("inf"))

        def make():
            if task == "least_squares":
                return linear_model.LinearRegression(optimizer=optim.SGD(_RiverSchedule(half, clock)), **glm)
            if task == "logistic":
                return linear_model.LogisticRegression(optimizer=optim.SGD(_RiverSchedule(step_size, clock)), **glm)
            model = linear_model.SoftmaxRegression(optimizer=optim.SGD(_RiverSchedule(step_size, clock)), l2=0.0)
            for k in range(self.K):       # all K classes from the start (see the class docstring)
                model.weights[k]
                model.optimizers[k]
            return model

        self.clients = [make() for _ in range(n_clients)]

    def _clock(self):
        def now():
            return self.t
        return now

    @property
    def models(self) -> np.ndarray:
        """River's current weights, shape (M, d, K) (a copy)."""
        if self.task == "softmax":
            return np.array([[[model.weights[k].get(n, 0.0) for k in range(self.K)] for n in self.names]
                             for model in self.clients])
        return np.array([model._weights.to_numpy(self.names) for model in self.clients])[..., None]

    def step(self, X, y, t, mask=None):
        """Test-then-train every present client; returns the mini-batch mean losses (M,), 0 if absent."""
        import pandas as pd

        M, b, _ = X.shape
        self.t = t
        scores = np.zeros((M, b, self.K))
        for m, model in enumerate(self.clients):
            if mask is not None and not mask[m]:
                continue
            if self.task == "softmax":
                scores[m] = self._softmax_step(model, X[m], y[m])
                continue
            if b == 1:
                x = dict(zip(self.names, X[m, 0].tolist()))
                scores[m, 0, 0] = model._raw_dot_one(x)
                model.learn_one(x, float(y[m, 0]))
            else:
                scores[m, :, 0] = model._raw_dot_many(X[m], self.names)
                with np.errstate(over="ignore"):      # Log.gradient's exp(z) at huge z: the gradient is then 0, exactly
                    model.learn_many(pd.DataFrame(X[m], columns=self.names), pd.Series(y[m]))
        losses = loss_of_scores(self.task, scores, y).mean(axis=1)
        if mask is not None:
            losses = np.where(mask, losses, 0.0)
        return losses

    def _softmax_step(self, model, X, y):
        """One client's softmax scores (b, K) before the step, then the step (see the class docstring)."""
        from river import utils

        xs = [dict(zip(self.names, row.tolist())) for row in X]
        labels = [int(v) for v in y]
        scores = np.array([[utils.math.dot(model.weights[k], x) for k in range(self.K)] for x in xs])
        if len(xs) == 1:
            model.learn_one(xs[0], labels[0])
            return scores
        b = len(xs)
        mean = {k: dict.fromkeys(self.names, 0.0) for k in range(self.K)}
        for x, label in zip(xs, labels):
            for k, g in model.loss.gradient(y_true=label, y_pred=model.predict_proba_one(x)).items():
                row = mean[k]
                for name, xi in x.items():
                    row[name] += xi * g / b
        for k in range(self.K):
            model.weights[k] = model.optimizers[k].step(w=model.weights[k], g=mean[k])
        return scores
