"""The tracker of streaming sparse logistic regression: cumulative loss, static regret against the best fixed
sparse model in hindsight, and the loss of the generator's true concept.

For a streaming FedSubAvg run (:class:`~streamfl.models.streaming_sparse.StreamingSparseLogistic`
through the engine, paper 000's model) it counts, step by step:

* the **cumulative loss** of every learner with the engine's network weights
  c_{t,m} (1/present clients, every client present: 1/M):
  Σ_{s≤t} Σ_m c_{s,m} f_{s,m}, f the mean BCE (nats) of client m's played
  model over its b samples of step s; the gaps to the baselines;
* the **static regret** against the best fixed sparse logistic model in
  hindsight, u* = argmin_u Σ_t Σ_m c_{t,m} (1/b) Σ_j ℓ(u; x_{t,m,j}, y_{t,m,j})
  over one table (F,) and one bias (the same loss the learners are charged,
  without the learners' L2 penalty). The loss is convex, so u* is computed:
  trust-region Newton-CG (scipy's ``trust-ncg``) on the recorded stream, with
  the exact gradient and Hessian-vector products (compiled passes over the
  recorded feature ids, per-sample weights c_{t,m}/b), until the gradient's
  Euclidean norm is ≤ ``tol`` (nats per unit of weight): "exact to gradient
  norm ≤ tol". Where
  the infimum is not attained (a feature whose samples all carry one label
  drives u_f to ±∞) the fitted model's loss lies above the infimum by about
  the size of its gradient on those rows. Live: refitted, warm-started, at
  the end of every chunk on the stream so far (``comparator_live``,
  ``regret_live``); at the end: charged step by step (``comparator_static``,
  ``regret_static``, rewritten into the metrics file by :meth:`finalize`);
* the loss of the **true concept** (w*, b*) of the generator on the same
  samples (``concept_loss``, ``regret_concept``): a second comparator, fixed
  before the stream is drawn (the noise in the labels makes it lose
  Σ c·H(σ(z*)) per step on average).

Memory: the recorded feature ids, O(T·M·b·nnz) int32, labels O(T·M·b) int8
and weights O(T·M) float64, kept in memory (the example: 1000 × 100 × 8 × 5
ids, 16 MB), preallocated for the stream's T steps; a refit adds
O(T·M·b) float64 (weights and per-sample losses).
"""

from __future__ import annotations

import math
import time

import numpy as np
import pandas as pd
from numba import njit

from .tracker import LiveState, close_chunk, loss_columns

TOL = 1e-6


def comparator_method(tol: float) -> str:
    """The label of the comparator in the summary, the header and the plots."""
    return (f"best fixed sparse logistic model in hindsight (table and bias), fitted offline on the recorded stream "
            f"by Newton-CG: exact to gradient norm <= {tol:g}")


def _bce(z: np.ndarray, y: np.ndarray) -> np.ndarray:
    """log(1 + e^z) − y z, elementwise (nats), stable for large |z|."""
    return np.logaddexp(0.0, z) - y * z


@njit(cache=True)
def fixed_objective(theta, ids, y, w, grad, per):  # pragma: no cover - compiled
    """Σ_r w_r ℓ(θ; ids_r, y_r) of one fixed sparse logistic model, its gradient into ``grad`` and the
    per-sample weighted losses into ``per``.

    theta (F + 1,) — the table, then the bias; ids (R, nnz) int32; y (R,) int8 in {0, 1}; w (R,) float64
    weights; grad (F + 1,), per (R,) outputs. One pass, O(R·nnz).
    """
    R, nnz = ids.shape
    F = theta.shape[0] - 1
    grad[:] = 0.0
    total = 0.0
    for r in range(R):
        z = theta[F]
        for k in range(nnz):
            z += theta[ids[r, k]]
        yr = float(y[r])
        loss = w[r] * (max(z, 0.0) - z * yr + math.log1p(math.exp(-abs(z))))
        per[r] = loss
        total += loss
        g = w[r] * (1.0 / (1.0 + math.exp(-z)) - yr)
        for k in range(nnz):
            grad[ids[r, k]] += g
        grad[F] += g
    return total


@njit(cache=True)
def fixed_hessp(theta, v, ids, w, out):  # pragma: no cover - compiled
    """The Hessian of :func:`fixed_objective` at θ times v, into ``out`` (F + 1,): Xᵀ diag(w σ(1−σ)) X v."""
    R, nnz = ids.shape
    F = theta.shape[0] - 1
    out[:] = 0.0
    for r in range(R):
        z = theta[F]
        xv = v[F]
        for k in range(nnz):
            z += theta[ids[r, k]]
            xv += v[ids[r, k]]
        p = 1.0 / (1.0 + math.exp(-z))
        h = w[r] * p * (1.0 - p) * xv
        for k in range(nnz):
            out[ids[r, k]] += h
        out[F] += h


class SparseRegretTracker:
    """Counts losses and the static regret of streaming sparse logistic learners (see the module docstring).

    Parameters
    ----------
    stream : SparsePowerLawStream
        Gives M, F and the true concept (``true_weights``, ``intercept``).
    main : str
        The learner whose regret is tracked.
    learners : list of str
    sink : callable(DataFrame) or None
        Receives each chunk's per-step rows.
    tol : float
        Gradient-norm tolerance of the comparator (Euclidean norm of the
        gradient of its cumulative loss, nats per unit of weight).
    live : bool
        Refit the comparator at every chunk end (warm-started).

    Raises
    ------
    ValueError
        ``tol`` ≤ 0.
    """

    wants_models = False

    def __init__(self, stream, main: str, learners: list[str], sink=None, tol: float = TOL, live: bool = True):
        if not tol > 0:
            raise ValueError(f"SparseRegretTracker: tol must be > 0 (got {tol!r})")
        self.M, self.F, self.main, self.learners, self.sink = stream.n_clients, stream.n_features, main, list(learners), sink
        self.true_w, self.true_b = np.asarray(stream.true_weights, np.float64), float(stream.intercept)
        self.tol, self.live = float(tol), bool(live)
        self.cum = {name: 0.0 for name in self.learners}
        self.concept_cum = 0.0
        self.state = LiveState()
        self.notes = []
        self.samples = 0
        self.client_loss = np.zeros(self.M)
        T, M, b, nnz = stream.n_steps, stream.n_clients, stream.batch_size, stream.nnz
        self._ids = np.empty((T, M, b, nnz), np.int32)    # the recorded stream, filled chunk by chunk
        self._y = np.empty((T, M, b), np.int8)
        self._c = np.empty((T, M))
        self._T = 0
        self.theta = np.zeros(self.F + 1)          # the comparator (table, bias), warm start of every refit
        self.fit = {}
        self.fit_seconds = 0.0
        self.comparator_method = self.static_method = comparator_method(self.tol)
        self.rows = []

    # ------------------------------------------------------------------ per chunk
    def update(self, chunk, losses: dict, models=None) -> pd.DataFrame:
        """Count one chunk; returns its per-step rows (``t``, ``loss``, ``cum_loss``, ``cum_loss_<b>``, ``gap_<b>``,
        ``concept_loss``, ``regret_concept``, ``comparator_live``, ``regret_live``)."""
        n = chunk.n_steps
        c = chunk.weights()
        ts = chunk.t0 + 1 + np.arange(n)
        cols = {"t": ts}
        cum = loss_columns(cols, c, losses, self.learners, self.main, self.cum)[1]
        ids, y = chunk.ids, chunk.y
        concept = _bce(self.true_b + self.true_w[ids].sum(axis=-1), y).mean(axis=-1)       # (n, M)
        concept_cum = self.concept_cum + np.cumsum((c * concept).sum(axis=1))
        self.concept_cum = float(concept_cum[-1])
        cols["concept_loss"] = concept_cum
        cols["regret_concept"] = cum[self.main] - concept_cum
        self.client_loss += (c * losses[self.main]).sum(axis=0)
        self.samples += int(y.size)
        t0 = chunk.t0
        self._ids[t0:t0 + n] = ids
        self._y[t0:t0 + n] = y
        self._c[t0:t0 + n] = c
        self._T = t0 + n                           # steps recorded so far
        frame = close_chunk(self, cols, cum[self.main], ts, self._fit() if self.live else None, self.samples)
        self.state.regret["concept"] = float(cum[self.main][-1] - concept_cum[-1])
        return frame

    def count_bytes(self, up: np.ndarray, down: np.ndarray) -> None:
        """Cumulative bytes up and down after the chunk's last step (the live view shows them)."""
        self.state.bytes_up, self.state.bytes_down = int(up[-1]), int(down[-1])

    # ------------------------------------------------------------------ comparator
    def recorded(self):
        """The recorded stream so far, one row per sample: feature ids (R, nnz) int32, labels (R,) int8,
        weights c_{t,m}/b (R,), step (R,, 1-based) and client (R,) (views where possible, no copies of the ids)."""
        T = self._T
        M, b, nnz = self._ids.shape[1:]
        R = T * M * b
        w = np.repeat(self._c[:T].reshape(T * M) / b, b)
        step = np.repeat(np.arange(1, T + 1), M * b)
        client = np.tile(np.repeat(np.arange(M), b), T)
        return self._ids[:T].reshape(R, nnz), self._y[:T].reshape(R), w, step, client

    def _fit(self) -> float:
        """Fit the comparator (warm-started) on the stream so far; returns its weighted loss Σ c f (nats)."""
        from scipy.optimize import minimize
        started = time.process_time()
        ids, y, w, _, _ = self.recorded()
        grad, per, hv = np.empty(self.F + 1), np.empty(ids.shape[0]), np.empty(self.F + 1)

        def fun(theta):
            value = fixed_objective(theta, ids, y, w, grad, per)
            return value, grad.copy()

        def hessp(theta, v):
            fixed_hessp(theta, np.ascontiguousarray(v), ids, w, hv)
            return hv.copy()

        out = minimize(fun, self.theta, jac=True, hessp=hessp, method="trust-ncg",
                       options={"gtol": self.tol, "maxiter": 500})
        self.theta = out.x
        value, g = fun(self.theta)
        norm = float(np.linalg.norm(g))
        self.fit = {"grad_norm": norm, "iterations": self.fit.get("iterations", 0) + int(out.nit),
                    "hessian_products": self.fit.get("hessian_products", 0) + int(out.nhev),
                    "converged": bool(norm <= self.tol), "samples": int(y.size)}
        self.fit_seconds += time.process_time() - started
        return value

    def one_label_features(self, ids: np.ndarray, y: np.ndarray) -> int:
        """How many features occur in the recorded samples with one label only (ids (R, nnz), y (R,)).

        For such a feature the loss keeps falling as its weight goes to ±∞, so no
        best fixed model attains the infimum; the count goes into the summary.
        """
        flat = ids.reshape(-1)
        pos = np.bincount(flat, weights=np.repeat(y.astype(np.float64), ids.shape[1]), minlength=self.F)
        seen = np.bincount(flat, minlength=self.F)
        return int(np.count_nonzero((seen > 0) & ((pos == 0) | (pos == seen))))

    def finalize(self) -> dict:
        """Fit the comparator on the whole stream (warm-started), charge it step by step; the summary's figures."""
        self._fit()
        ids, y, w, step, client = self.recorded()
        per = np.empty(y.size)
        fixed_objective(self.theta, ids, y, w, np.empty(self.F + 1), per)
        T = int(self.state.t)
        comp = np.cumsum(np.bincount(step - 1, weights=per, minlength=T))
        cum_main = np.concatenate([f["cum_loss"] for f in self.rows])
        regret = self.cum[self.main] - float(comp[-1])
        self.state.regret = {"static": regret, "concept": self.cum[self.main] - self.concept_cum}
        self.state.comparator = float(comp[-1])
        self.static_columns = pd.DataFrame({"comparator_static": comp, "regret_static": cum_main - comp})
        if not self.fit["converged"]:
            self.notes.append(f"the comparator stopped at gradient norm {self.fit['grad_norm']:.3g} > tol "
                              f"{self.tol:g}: its loss is an upper bound, the static regret a lower bound")
        one_label = self.one_label_features(ids, y)
        if one_label:
            self.notes.append(f"{one_label} feature(s) appear only in samples of one label: the best fixed model's "
                              f"weights for them are unbounded (the infimum is not attained); the comparator stops "
                              f"at gradient norm {self.fit['grad_norm']:.2g}, and along each such weight the loss "
                              f"left above the infimum is about the size of its gradient, so the comparator's loss "
                              f"is within about {self.fit['grad_norm'] * math.sqrt(max(one_label, 1)):.2g} nats of "
                              f"the infimum")
        client_comp = np.bincount(client, weights=per, minlength=self.M)
        return {
            "cum_loss": dict(self.cum),
            # with c = 1/M at every step, Σ_t Σ_m c f / T is the mean BCE per sample
            "avg_loss_per_sample": {name: v / max(T, 1) for name, v in self.cum.items()},
            "samples": self.samples,
            "regret_static": regret,
            "regret_static_method": self.comparator_method,
            "regret_static_is_estimate": False,
            "comparator": {"loss": float(comp[-1]), "method": self.comparator_method, "tol": self.tol,
                           **self.fit, "bias": float(self.theta[-1]),
                           "nonzero_rows": int(np.count_nonzero(self.theta[:-1])),
                           "one_label_features": one_label,
                           "cpu_seconds": self.fit_seconds},
            "concept": {"loss": self.concept_cum, "regret": self.cum[self.main] - self.concept_cum,
                        "method": "the generator's true concept (w*, b*), charged on the same samples"},
            "regret_over_sqrt_T": regret / math.sqrt(max(T, 1)),
            "client_cum_loss": self.client_loss.tolist(),
            "client_regret": (self.client_loss - client_comp).tolist(),
            "regret_expected": None, "regret_expected_method": "not tracked for the sparse model",
            "regret_dynamic": None, "regret_dynamic_method": "not tracked for the sparse model",
            "notes": list(self.notes),
        }
