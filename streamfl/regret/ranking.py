"""The tracker of streaming recommenders: prequential HR@10, cumulative BCE and its regret (estimate).

For a streaming FedNCF run (:class:`~streamfl.models.streaming_gmf.StreamingGMF`
through the engine) it counts, step by step:

* the **cumulative BCE loss** of every learner, with the engine's network
  weights c_{t,m} (1/present clients): Σ_{s≤t} Σ_m c_{s,m} f(x_{s,m}, ξ_{s,m}),
  f the mean BCE over the arriving positive and its training negatives; the
  gaps to the baselines; and the mean loss per interaction;
* **prequential HR@10**: each arriving positive ranked by the played model
  against 100 items the user never interacts with, ties broken at random (a
  constant model scores about 10/101, never 1); the per-step rate and the
  pooled rate over all positives so far;
* the **static regret against an estimated comparator**. GMF is not
  convex, so the best fixed model in hindsight cannot be computed; the
  comparator is the fixed GMF of the same architecture (every user's and
  item's embedding, one prediction layer) found by training offline, with
  full-batch Adam, on the recorded stream: the same positives and the same
  training negatives the learner was charged on, weighted as the network
  loss. Its loss is an upper bound on the true minimum, so the regret
  reported is an **estimate** (a lower bound on the regret against the true
  best fixed model, if the optimiser falls short of it). Live: refitted,
  warm-started, at the end of every chunk on the stream so far
  (``comparator_live`` / ``regret_live``, at chunk ends); at the end: fitted on
  the whole stream and then charged step by step (``comparator_static``,
  ``regret_static``, rewritten into the metrics file by :meth:`finalize`).

Memory: the recorded samples, O(interactions · (1 + negatives)) int64, kept
in memory (ML-100K: 100,000 × 5).
"""

from __future__ import annotations

import math
import time

import numpy as np
import pandas as pd

from ..models.streaming_gmf import fit_fixed_gmf, fixed_gmf_losses, fixed_gmf_ranks
from .tracker import LiveState, close_chunk, loss_columns

COMPARATOR = ("estimate: the fixed GMF (same architecture) trained offline by full-batch Adam on the recorded "
              "stream (its positives and training negatives); GMF is non-convex, so the true best fixed model "
              "is unknown")


class RankingTracker:
    """Counts losses, prequential HR@10 and the estimated regret of streaming GMF learners.

    Parameters
    ----------
    stream : InteractionStream
    main : str
        The learner whose regret is tracked.
    learners : list of str
    model : StreamingGMF
        The main learner's client model (its initial weights start the
        comparator; its seed and evaluation negatives are reused).
    sink : callable(DataFrame) or None
    k : int
        HR@k (10).
    live_epochs, final_epochs : int
        Adam epochs of the comparator per chunk (warm start) and at the end.
    lr : float
        Adam's η for the comparator.
    """

    wants_models = False
    observes = ("rank", "negatives")

    def __init__(self, stream, main: str, learners: list[str], model, sink=None, k: int = 10,
                 live_epochs: int = 100, final_epochs: int = 600, lr: float = 0.02):
        self.M, self.main, self.learners, self.sink, self.k = stream.n_clients, main, list(learners), sink, k
        self.stream, self.model = stream, model
        self.cum = {name: 0.0 for name in self.learners}
        self.state = LiveState()
        self.notes = []
        self.hits = 0
        self.interactions = 0
        self.loss_sum = 0.0
        self.client_loss = np.zeros(self.M)                  # per client: Σ_t c_tm f_tm of the main learner
        self.client_count = np.zeros(self.M, np.int64)       # its interactions so far
        self.client_hits = np.zeros(self.M, np.int64)        # its positives ranked in the top k
        self.live_epochs, self.final_epochs, self.lr = int(live_epochs), int(final_epochs), float(lr)
        self._users, self._items, self._ts, self._neg, self._w, self._step = [], [], [], [], [], []
        self.P, self.Q = model.P.copy(), model.Q.copy()
        self.h, self.b = model.H[0].copy(), model.B[:1].copy()
        self._adam = np.zeros((3, self.P.size + self.Q.size + self.h.size + 1))
        self.comparator_method = COMPARATOR
        self.static_method = COMPARATOR
        self.rows = []
        self.fit_seconds = 0.0

    # ------------------------------------------------------------------ per chunk
    def update(self, chunk, losses: dict, models=None, observed: dict | None = None) -> pd.DataFrame:
        """Count one chunk; returns its per-step rows (``t``, ``loss``, ``cum_loss``, ``interactions``,
        ``hr10``, ``cum_hr10``, ``avg_loss``, ``cum_loss_<b>``, ``gap_<b>``, ``comparator_live``,
        ``regret_live``)."""
        n = chunk.n_steps
        c = chunk.weights()
        present = chunk.mask
        ts = chunk.t0 + 1 + np.arange(n)
        cols = {"t": ts}
        cum = loss_columns(cols, c, losses, self.learners, self.main, self.cum)[1]
        ranks = observed["rank"]
        count = present.sum(axis=1)
        hits = ((ranks <= self.k) & present).sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            cols["interactions"] = count
            cols[f"hr{self.k}"] = np.where(count > 0, hits / np.maximum(count, 1), np.nan)
            cum_hits, cum_count = self.hits + np.cumsum(hits), self.interactions + np.cumsum(count)
            cols[f"cum_hr{self.k}"] = cum_hits / np.maximum(cum_count, 1)
            loss_sum = self.loss_sum + np.cumsum((losses[self.main] * present).sum(axis=1))
            cols["avg_loss"] = loss_sum / np.maximum(cum_count, 1)
        self.hits, self.interactions, self.loss_sum = int(cum_hits[-1]), int(cum_count[-1]), float(loss_sum[-1])
        self.client_loss += np.where(present, c * losses[self.main], 0.0).sum(axis=0)
        self.client_count += present.sum(axis=0)
        self.client_hits += ((ranks <= self.k) & present).sum(axis=0)
        # record the stream for the comparator: (user, step, positive, negatives, weight)
        step_idx, users = np.nonzero(present)
        self._users.append(users)
        self._step.append(ts[step_idx])
        self._items.append(chunk.X[step_idx, users, 0, 0].astype(np.int64))
        self._neg.append(observed["negatives"][step_idx, users])
        self._w.append(c[step_idx, users])
        return close_chunk(self, cols, cum[self.main], ts, self._fit(self.live_epochs) if self.live_epochs else None,
                           self.interactions)

    def count_bytes(self, up: np.ndarray, down: np.ndarray) -> None:
        """Cumulative bytes up and down after the chunk's last step (the live view shows them)."""
        self.state.bytes_up, self.state.bytes_down = int(up[-1]), int(down[-1])

    @property
    def hr(self) -> float:
        """Prequential HR@k over every positive so far."""
        return self.hits / max(self.interactions, 1)

    # ------------------------------------------------------------------ comparator
    def _recorded(self):
        users = np.concatenate(self._users)
        cand = np.concatenate([np.concatenate(self._items)[:, None], np.concatenate(self._neg)], axis=1)
        return users, np.ascontiguousarray(cand, dtype=np.int64), np.concatenate(self._w), np.concatenate(self._step)

    def _fit(self, epochs: int) -> float:
        """Warm-started comparator fit on the stream so far; returns its weighted loss Σ c f (nats)."""
        users, cand, w, _ = self._recorded()
        started = time.process_time()
        obj = fit_fixed_gmf(self.P, self.Q, self.h, self.b, users, cand, w, int(epochs), self.lr, self._adam)
        self.fit_seconds += time.process_time() - started
        return float(obj)

    def finalize(self) -> dict:
        """Fit the comparator on the whole stream, charge it step by step; the summary's figures."""
        users, cand, w, steps = self._recorded()
        self._fit(self.final_epochs)
        per = np.empty(users.size)
        fixed_gmf_losses(self.P, self.Q, self.h, float(self.b[0]), users, cand, per)
        T = int(self.state.t)
        step_loss = np.bincount(steps - 1, weights=per * w, minlength=T)
        comp = np.cumsum(step_loss)
        ranks = np.empty(users.size, np.int64)
        fixed_gmf_ranks(self.P, self.Q, self.h, float(self.b[0]), users, cand[:, 0], steps, self.stream.ever,
                        int(self.model.seed), int(self.model.eval_negatives), np.zeros(self.Q.shape[0], np.int64), ranks)
        regret = self.cum[self.main] - float(comp[-1])
        client_comp = np.bincount(users, weights=per * w, minlength=self.M)
        self.state.regret = {"static": regret}
        self.state.comparator = float(comp[-1])
        self.static_columns = pd.DataFrame({"comparator_static": comp,
                                            "regret_static": np.concatenate([f["cum_loss"] for f in self.rows]) - comp})
        k = self.k
        return {
            "cum_loss": dict(self.cum),
            "avg_loss_per_interaction": self.loss_sum / max(self.interactions, 1),
            f"prequential_hr{k}": self.hr,
            "interactions": self.interactions,
            "regret_static": regret,
            "regret_static_method": COMPARATOR,
            "regret_static_is_estimate": True,
            "comparator": {"loss": float(comp[-1]), "method": COMPARATOR, "epochs": self.final_epochs,
                           "live_epochs_per_chunk": self.live_epochs, "lr": self.lr,
                           "avg_loss_per_interaction": float(per.sum() / max(per.size, 1)),
                           f"prequential_hr{k}": float(np.mean(ranks <= k)) if ranks.size else math.nan,
                           "cpu_seconds": self.fit_seconds},
            "regret_over_sqrt_T": regret / math.sqrt(max(T, 1)),
            # per client m (client order; client_user_ids: the data set's user of each): Σ_t c_tm f_tm, its
            # interactions, its prequential HR@k and its regret against the same fixed comparator (an estimate)
            "client_user_ids": (np.asarray(self.stream.user_ids).tolist() if getattr(self.stream, "user_ids", None)
                                is not None else list(range(self.M))),
            "client_cum_loss": self.client_loss.tolist(),
            "client_interactions": self.client_count.tolist(),
            f"client_hr{k}": (self.client_hits / np.maximum(self.client_count, 1)).tolist(),
            "client_regret": (self.client_loss - client_comp).tolist(),
            "regret_expected": None, "regret_expected_method": "not available (F is unknown on real data)",
            "regret_dynamic": None, "regret_dynamic_method": "not available (F is unknown on real data)",
            "notes": list(self.notes),
        }
