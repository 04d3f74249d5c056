"""The regret tracker: where every loss is counted and compared.

For each step t, for the network and for each client, it records the main
learner's cumulative loss and its regret against the comparators:

* **realised static regret** (best fixed model in hindsight on the realised
  stream), R_t = Σ_{s≤t} Σ_m c_{s,m} f(x_{s,m}, ξ_{s,m}) − min_{x∈X} Σ_{s≤t} Σ_m c_{s,m} f(x, ξ_{s,m}),
  with c_{s,m} = 1/M when every client is present. Exact at every step for
  the squared loss; for logistic/softmax a live reservoir estimate, made exact
  at the end of the run (:meth:`RegretTracker.finalize`) by a convex solver
  over the recorded stream;
* **expected regret** (FedSEA eq. (3)), where the generator knows F:
  Σ_t (1/M) Σ_m F_{t,m}(x_{t,m}) − min_x Σ_t F_t(x) — live for least squares,
  at the end for logistic;
* **dynamic regret** against u_t = argmin F_t: Σ_t [F_t(x̄_t) − F_t(u_t)];
* **gaps** to every baseline: the main learner's cumulative loss minus the
  baseline's, on the same stream;
* FedSEA's heterogeneity quantities σ_t², ζ_t², K_t² and their running means
  (:mod:`streamfl.regret.heterogeneity`).

Memory is constant in T: per-step rows go to ``sink`` chunk by chunk.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .comparators import LeastSquaresHindsight, ReservoirHindsight, refit_points, solve_hindsight
from .heterogeneity import empirical_estimates, population_estimates


@dataclass
class LiveState:
    """The latest values, for the live view and the summary."""

    t: int = 0
    cum_loss: dict = field(default_factory=dict)
    regret: dict = field(default_factory=dict)
    heterogeneity: dict = field(default_factory=dict)
    samples: int = 0
    comparator: float = float("nan")


class RegretTracker:
    """Counts losses and regrets for a main learner and its baselines.

    Parameters
    ----------
    stream : Stream
        Supplies M, d, b, the task, K and (synthetic) the population model.
    main : str
        Name of the learner whose regret is tracked (e.g. ``"fedsea"``).
    learners : list of str
        All learner names, ``main`` included; the others are baselines.
    radius : float or None
        D, the comparator set X = {‖x‖ ≤ D} (same as the learners' projection).
    sink : callable(DataFrame) or None
        Receives the per-step rows of every chunk (columns documented in
        :meth:`update`).
    spool_dir : str or None
        Where to record the realised stream for the exact end-of-run
        comparator of non-quadratic losses (deleted by :meth:`finalize`).
    reservoir_size : int
    seed : int
    """

    def __init__(self, stream, main: str, learners: list[str], radius: float | None = None,
                 sink=None, spool_dir: str | None = None, reservoir_size: int = 4096, seed: int = 0,
                 client_columns: bool = True):
        self.M, self.d, self.b = stream.n_clients, stream.n_features, stream.batch_size
        self.task, self.K = stream.task, (stream.n_classes if stream.task == "softmax" else 1)
        self.population = stream.population
        self.main, self.learners, self.radius, self.sink = main, list(learners), radius, sink
        self.client_columns = client_columns
        self.cum = {name: 0.0 for name in self.learners}
        self.client_cum = np.zeros(self.M)
        self.client_steps = np.zeros(self.M)
        self.state = LiveState()
        self.total_weight = 0.0
        self.second_moment = np.zeros((self.d, self.d))
        if self.task == "least_squares":
            self.hindsight = LeastSquaresHindsight(self.M, self.d, radius)
            self.reservoir = None
        else:
            self.hindsight = None
            self.reservoir = ReservoirHindsight(self.task, (self.d, self.K), reservoir_size, radius, seed)
        self.spool = None
        if self.task != "least_squares":
            self.spool_dir = spool_dir or tempfile.mkdtemp(prefix="streamfl-spool-")
            os.makedirs(self.spool_dir, exist_ok=True)
            self.spool = {k: open(os.path.join(self.spool_dir, k + ".bin"), "wb") for k in ("X", "y", "w", "t")}
        # expected regret (population known)
        self.exp_learner = 0.0
        self.opt_sums = [0.0, np.zeros(self.d), 0.0]        # Σc, Σ c w, Σ c ‖w‖²
        self.client_opt_sums = [np.zeros(self.M), np.zeros((self.M, self.d)), np.zeros(self.M)]
        self.client_exp = np.zeros(self.M)
        self.optima_spool = None
        if self.population is not None and self.task == "logistic":
            self.optima_spool = open(os.path.join(self.spool_dir, "optima.bin"), "wb")
        self.dynamic = 0.0
        self.u_prev = None
        self.prev_optima = None
        self.prev_batch = None
        T = self.T = stream.n_steps
        self.checkpoints = set(np.unique(np.geomspace(max(1, T / 2**15), T, 16).astype(int)).tolist())
        self.checkpoint_loss = {}
        self.checkpoint_regret = {}
        self.het_sums = np.zeros(3)
        self.het_counts = np.zeros(3)
        self.client_last_step = np.zeros(self.M, dtype=np.int64)
        # how each population regret is known; the live view, summary.json and the
        # README's metrics.csv columns say the same
        if self.population is None:
            self.expected_method = self.dynamic_method = "not available (needs a synthetic source: F is unknown)"
        else:
            self.expected_method = ("exact at every step (closed form)" if self.task == "least_squares" else
                                    "exact, computed at the end of the run (solver over the recorded optima); "
                                    "not tracked per step")
            self.dynamic_method = "exact at every step"

    # ------------------------------------------------------------------ per chunk
    def update(self, chunk, losses: dict, models: np.ndarray) -> pd.DataFrame:
        """Count one chunk of steps.

        Parameters
        ----------
        chunk : Chunk
        losses : dict name -> ndarray (n, M)
            f(x_{t,m}, ξ_{t,m}) of every learner (mini-batch mean; 0 if masked).
        models : ndarray (n, M, d, K)
            The main learner's played models x_{t,m}.

        Returns
        -------
        DataFrame with one row per step: ``t``, ``loss`` (network loss of the
        main learner), ``cum_loss``, ``cum_loss_<baseline>``, ``gap_<baseline>``,
        ``comparator_static``, ``regret_static``, ``regret_expected``,
        ``regret_dynamic``, ``sigma2``, ``zeta2``, ``K2``, and per client
        ``client<m>_cum_loss``, ``client<m>_avg_loss`` (over the steps the
        client was present) and (least squares) ``client<m>_regret_static``.
        """
        n = chunk.n_steps
        c = chunk.weights()
        present = np.ones((n, self.M), bool) if chunk.mask is None else chunk.mask
        ts = chunk.t0 + 1 + np.arange(n)
        cols = {"t": ts}
        net = {name: np.einsum("nm,nm->n", c, losses[name]) for name in self.learners}
        cum = {}
        for name in self.learners:
            cum[name] = self.cum[name] + np.cumsum(net[name])
            self.cum[name] = float(cum[name][-1])
        cols["loss"] = net[self.main]
        cols["cum_loss"] = cum[self.main]
        for name in self.learners:
            if name != self.main:
                cols[f"cum_loss_{name}"] = cum[name]
                cols[f"gap_{name}"] = cum[self.main] - cum[name]
        hits = np.flatnonzero(np.isin(ts, list(self.checkpoints)))
        for i in hits:
            self.checkpoint_loss[int(ts[i])] = float(cum[self.main][i])
        client_cum = self.client_cum + np.cumsum(losses[self.main], axis=0)
        self.client_cum = client_cum[-1].copy()
        self.second_moment += np.einsum("nm,nmbd,nmbe->de", c / self.b, chunk.X, chunk.X)
        self.total_weight += float(c.sum())

        # realised static regret
        client_regret = None
        if self.hindsight is not None:
            comp, client_comp = self.hindsight.update(chunk.X, chunk.y, c, present)
            client_regret = client_cum - client_comp
        else:
            comp = np.empty(n)
            start = 0
            for stop in refit_points(chunk.t0, n):
                marks = chunk.t0 + stop
                refit = marks in (16, 32, 64, 128) or marks % 256 == 0 or marks == self.T
                part = chunk.slice(start, stop)
                comp[start:stop] = self.reservoir.update(part.X, part.y, c[start:stop],
                                                         losses[self.main][start:stop], refit)
                start = stop
            self._spool(chunk, c, ts)
        cols["comparator_static"] = comp
        cols["regret_static"] = cum[self.main] - comp
        self.state.comparator = float(comp[-1])
        if self.hindsight is not None:
            for i in hits:
                self.checkpoint_regret[int(ts[i])] = float(cols["regret_static"][i])

        # expected and dynamic regret, heterogeneity
        K1 = models.shape[-1] == 1
        flat = models[..., 0] if K1 else None
        average = models.mean(axis=1)
        if self.population is not None and chunk.optimum is not None and K1:
            cols.update(self._population_terms(chunk, c, flat, average[..., 0]))
            sigma2, zeta2, K2 = population_estimates(self.population, flat, average[..., 0], chunk.optimum,
                                                     self.prev_optima, self.b, ts,
                                                     1 if self.task == "least_squares" else self.M)
            self.prev_optima = chunk.optimum[-1].copy()
        else:
            cols["regret_expected"] = np.full(n, np.nan)
            cols["regret_dynamic"] = np.full(n, np.nan)
            sigma2, zeta2, K2 = empirical_estimates(self.task, average, chunk.X, chunk.y, c, self.prev_batch)
            self.prev_batch = (chunk.X[-1].copy(), chunk.y[-1].copy(), c[-1].copy())
        cols["sigma2"], cols["zeta2"], cols["K2"] = sigma2, zeta2, K2
        for i, v in enumerate((sigma2, zeta2, K2)):
            ok = np.isfinite(v)
            self.het_sums[i] += v[ok].sum()
            self.het_counts[i] += ok.sum()

        client_steps = self.client_steps + np.cumsum(present, axis=0)
        self.client_steps = client_steps[-1].copy()
        seen = present.any(axis=0)
        self.client_last_step[seen] = ts[n - 1 - np.argmax(present[::-1], axis=0)][seen]
        if self.client_columns:
            with np.errstate(invalid="ignore", divide="ignore"):
                client_avg = np.where(client_steps > 0, client_cum / np.maximum(client_steps, 1), np.nan)
            for m in range(self.M):
                cols[f"client{m}_cum_loss"] = client_cum[:, m]
                cols[f"client{m}_avg_loss"] = client_avg[:, m]
            if client_regret is not None:
                for m in range(self.M):
                    cols[f"client{m}_regret_static"] = client_regret[:, m]
        frame = pd.DataFrame(cols)
        self._refresh_state(frame, int(present.sum()) * self.b)
        if self.sink is not None:
            self.sink(frame)
        return frame

    def _population_terms(self, chunk, c, models, average):
        pop, opt = self.population, chunk.optimum
        out = {}
        F_played = pop.loss(models, opt)                              # (n, M)
        exp_learner = self.exp_learner + np.cumsum(np.einsum("nm,nm->n", c, F_played))
        self.exp_learner = float(exp_learner[-1])
        Sc = self.opt_sums[0] + np.cumsum(c.sum(axis=1))
        Sw = self.opt_sums[1] + np.cumsum(np.einsum("nm,nmd->nd", c, opt), axis=0)
        Sww = self.opt_sums[2] + np.cumsum(np.einsum("nm,nmd->n", c, opt * opt))
        self.opt_sums = [float(Sc[-1]), Sw[-1].copy(), float(Sww[-1])]
        if self.task == "least_squares":
            s2 = pop.feature_scale**2
            xhat = Sw / Sc[:, None]
            if self.radius is not None:
                norm = np.linalg.norm(xhat, axis=1, keepdims=True)
                xhat = xhat * np.minimum(1.0, self.radius / np.maximum(norm, 1e-300))
            comp = 0.5 * s2 * (Sww - 2 * np.sum(xhat * Sw, axis=1) + Sc * np.sum(xhat**2, axis=1)) \
                + 0.5 * pop.noise**2 * Sc
            out["regret_expected"] = exp_learner - comp
        else:
            self.optima_spool.write(np.ascontiguousarray(opt, dtype=np.float64).tobytes())
            out["regret_expected"] = np.full(len(c), np.nan)
        # dynamic: F_t(x̄_t) − F_t(u_t), with F_t = Σ_m c F_{t,m}
        u = pop.minimize_mean(opt, x0=None if self.u_prev is None else np.broadcast_to(self.u_prev, average.shape),
                              radius=self.radius)
        self.u_prev = u[-1].copy()
        gap = np.einsum("nm,nm->n", c, pop.loss(average[:, None, :], opt) - pop.loss(u[:, None, :], opt))
        out["regret_dynamic"] = self.dynamic + np.cumsum(gap)
        self.dynamic = float(out["regret_dynamic"][-1])
        return out

    def _spool(self, chunk, c, ts):
        n, M, b, d = chunk.X.shape
        self.spool["X"].write(np.ascontiguousarray(chunk.X, dtype=np.float64).tobytes())
        self.spool["y"].write(np.ascontiguousarray(chunk.y, dtype=np.float64).tobytes())
        self.spool["w"].write(np.repeat((c / b)[..., None], b, axis=2).astype(np.float64).tobytes())
        self.spool["t"].write(np.repeat(ts, M * b).astype(np.int64).tobytes())

    def _refresh_state(self, frame, samples):
        last = frame.iloc[-1]
        st = self.state
        st.t = int(last["t"])
        st.samples += samples
        st.cum_loss = {self.main: float(last["cum_loss"])}
        for name in self.learners:
            if name != self.main:
                st.cum_loss[name] = float(last[f"cum_loss_{name}"])
        st.regret = {"static": float(last["regret_static"]), "expected": float(last["regret_expected"]),
                     "dynamic": float(last["regret_dynamic"])}
        st.heterogeneity = self.heterogeneity_summary()

    # ------------------------------------------------------------------ summaries
    def smoothness(self) -> float:
        """L: the population's, or estimated from the running second moment of
        the features (λ_max for squared loss, λ_max/4 for logistic/softmax)."""
        if self.population is not None:
            return float(self.population.smoothness)
        lam = float(np.linalg.eigvalsh(self.second_moment / max(self.total_weight, 1e-300))[-1])
        return lam if self.task == "least_squares" else lam / 4

    def heterogeneity_summary(self) -> dict:
        """Running means σ̄², ζ̄², K̄² and the regime flag σ̄²/M ≥ L·K̄².

        The flag is True or False when σ̄², K̄² and L are known, and None
        (undetermined) otherwise, e.g. σ̄² on real data with b = 1.
        """
        means = np.divide(self.het_sums, self.het_counts, out=np.full(3, np.nan), where=self.het_counts > 0)
        L = self.smoothness() if self.total_weight > 0 else np.nan
        known = bool(np.isfinite([means[0], means[2], L]).all())
        parallel = bool(means[0] / self.M >= L * means[2]) if known else None
        return {"sigma2_mean": float(means[0]), "zeta2_mean": float(means[1]), "K2_mean": float(means[2]),
                "L": float(L), "parallelisation_helps": parallel}

    def _blocks(self, upto: int | None = None, block_rows: int = 1 << 16):
        d = self.d
        X = np.memmap(os.path.join(self.spool_dir, "X.bin"), dtype=np.float64, mode="r").reshape(-1, d)
        y = np.memmap(os.path.join(self.spool_dir, "y.bin"), dtype=np.float64, mode="r")
        w = np.memmap(os.path.join(self.spool_dir, "w.bin"), dtype=np.float64, mode="r")
        t = np.memmap(os.path.join(self.spool_dir, "t.bin"), dtype=np.int64, mode="r")
        N = len(y) if upto is None else int(np.searchsorted(t, upto, side="right"))

        def blocks():
            for i in range(0, N, block_rows):
                j = min(N, i + block_rows)
                yield np.asarray(X[i:j]), np.asarray(y[i:j]), np.asarray(w[i:j])
        return blocks

    def finalize(self) -> dict:
        """Close the run: exact comparators for non-quadratic losses.

        Returns a dict with ``regret_static`` (exact), ``comparator_static``,
        ``static_checkpoints`` (list of (t, exact regret at t) on a geometric
        grid, for plots), ``regret_expected`` and ``regret_dynamic`` (where the
        population is known; ``regret_*_method`` says how each regret is
        known), the heterogeneity summary, ``client_steps`` (steps each client
        was present, (M,)) and ``client_last_step`` (its last such step t, 0
        if none).
        """
        out = {"t": self.state.t, "cum_loss": dict(self.state.cum_loss),
               "regret_static": self.state.regret.get("static"),
               "regret_expected": self.state.regret.get("expected"),
               "regret_dynamic": self.state.regret.get("dynamic"),
               "regret_static_method": "exact (sufficient statistics)" if self.hindsight else "exact (L-BFGS over the recorded stream)",
               "regret_expected_method": self.expected_method, "regret_dynamic_method": self.dynamic_method,
               "static_checkpoints": []}
        if self.hindsight is not None:
            out["comparator_static"] = self.state.comparator
            out["static_checkpoints"] = sorted(self.checkpoint_regret.items())
        if self.spool is not None:
            for f in self.spool.values():
                f.close()
            self.checkpoint_loss[self.state.t] = self.state.cum_loss[self.main]
            x = None
            for tt, cl in sorted(self.checkpoint_loss.items()):
                x, value = solve_hindsight(self.task, self._blocks(tt), (self.d, self.K), self.radius, x0=x)
                out["static_checkpoints"].append((int(tt), float(cl - value)))
            out["comparator_static"] = value
            out["regret_static"] = float(self.state.cum_loss[self.main] - value)
            out["regret_static_live_estimate"] = self.state.regret.get("static")
            if self.optima_spool is not None:
                self.optima_spool.close()
                path = os.path.join(self.spool_dir, "optima.bin")
                opt = np.memmap(path, dtype=np.float64, mode="r").reshape(-1, self.M, self.d)

                def wblocks():
                    for i in range(0, len(opt), 1024):
                        yield np.asarray(opt[i:i + 1024])
                _, comp = self.population.minimize_sum(wblocks, radius=self.radius)
                out["regret_expected"] = float(self.exp_learner - comp)
            for name in os.listdir(self.spool_dir):
                os.remove(os.path.join(self.spool_dir, name))
            os.rmdir(self.spool_dir)
        out["heterogeneity"] = self.heterogeneity_summary()
        out["samples"] = self.state.samples
        out["client_steps"] = self.client_steps.astype(int).tolist()
        out["client_last_step"] = self.client_last_step.tolist()
        return out
