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
* **dynamic regret** against u_t = argmin F_t: Σ_t [F_t(x̄_t) − F_t(u_t)]
  (at the virtual average x̄_t, the sequence FedSEA's analysis follows);
* **decomposition** (FedSEA Lemma 1): the regret of the played models equals
  the regret of the virtual average x̄_t = (1/M) Σ_m x_{t,m} plus the consensus
  part, in each regret's own basis: the static regret (realised losses f) =
  ``regret_static_virtual`` + ``consensus_part_static``, the latter
  Σ_t Σ_m c_{t,m} [f(x_{t,m}, ξ_{t,m}) − f(x̄_t, ξ_{t,m})]; the expected regret
  (population F, synthetic streams) = ``regret_expected_virtual`` +
  ``consensus_part_expected``, the latter Σ_t Σ_m c_{t,m} [F_{t,m}(x_{t,m}) −
  F_{t,m}(x̄_t)]. Each part is the difference of the two cumulative losses,
  so each pair adds up to its regret to rounding. The bound weighs the
  consensus error C_t = Σ_m c_{t,m} ‖x_{t,m} − x̄_t‖² (``consensus``) by L/2
  (smoothness): the summary's ``consensus_bound`` = (L/2) Σ_t C_t;
* **per client** (each client alone against its own comparators, weight 1
  per step it is present): static (live for least squares, exact at the end
  for logistic), expected (live for least squares, exact at the end for
  logistic) and dynamic (live, against its own per-step optimum);
* **gaps** to every baseline: the main learner's cumulative loss minus the
  baseline's, on the same stream;
* FedSEA's heterogeneity quantities σ_t², ζ_t², K_t², their running means
  with standard errors and maxima (:mod:`streamfl.regret.heterogeneity`),
  and the regime condition (:mod:`streamfl.regret.regime`);
* whether the network loss is diverging without reaching inf or NaN
  (:class:`~streamfl.regret.stability.LossGrowth`; the live state's
  ``warning`` and the summary's ``divergence``).

Memory is constant in T: per-step rows go to ``sink`` chunk by chunk.

How the costs grow (n steps per chunk, M clients, b samples, d features,
K classes; nothing kept grows with T: per-step rows go to ``sink``, running
means keep ≤ 32 blocks, checkpoints ≤ 16, the reservoir R samples; the
logistic/softmax spool of samples for the exact end-of-run solve is on disk,
in the run folder, and deleted by :meth:`finalize`):

* losses, decomposition, consensus, per-client regrets: O(M b d K) per step;
* empirical heterogeneity (real data): two gradient evaluations of every
  mini-batch, O(M b d K) per step;
* logistic population terms (synthetic): F at every played model through
  the interpolated softplus mean (:mod:`streamfl.regret.fastquad`), O(M d)
  per step; κ once per distinct optimum norm; σ² by the 2-D quadrature on 8
  rotating clients every 64th step (:data:`NOISE_EVERY`,
  :data:`NOISE_CLIENTS`), O(d) per step on average;
* least-squares static comparator: while the network (or a client) has
  N < d samples, its rows and their N × N Gram, O(N M b d) per step and an
  exact solve O(N³ + N d); after, Gram sums O(M b d²) per step (one matrix
  product per segment), an exact solve O(M d³) every ``refresh_every``
  steps (:class:`LeastSquaresHindsight`); warm values O(M b d); per-client
  statistics only within ``memory_budget_mb``
  (:func:`client_statistics_plan`);
* the smoothness L of real data: λ_max of the features' second moment, from
  the same rows (N × N) or d × d statistics, once per chunk;
* logistic/softmax static comparator: reservoir refits every ``refit_every``
  steps (1024 by default; L-BFGS over R samples, warm-started), spool writes
  O(M b d) per step; at the end one
  solver run over the spool per checkpoint, O(T M b d) per iteration, and
  the per-client comparators (up to ``client_hindsight_max`` clients): for
  logistic with d ≤ 32 all clients at once by damped Newton, one pass over
  the spool per step, O(T M b d²)
  (:func:`~streamfl.regret.comparators.solve_hindsight_clients`), otherwise
  one solver run per client.
"""

from __future__ import annotations

import math
import mmap
import os
import tempfile
from dataclasses import dataclass, field

import numpy as np

from ..generators.population import row_blocks
from .bracket import LogisticBracket, solve_clients
from .fastquad import kappa_unique, softplus_mean
from ..models.losses import get_loss
from .comparators import (CLIENT_NEWTON_MAX_DIM, ROW_SPACE_MIN_DIM, LeastSquaresHindsight, RowStats, is_refit_step,
                          quadratic_min, quadratic_min_cholesky, quadratic_min_rows, refit_points, solve_hindsight,
                          solve_hindsight_clients)
from .heterogeneity import RunningMean, client_losses, empirical_estimates, population_estimates, running_sum
from .regime import RegimeTerms, literal_condition
from .rows import Rows, deliver
from .stability import LossGrowth


NOISE_EVERY, NOISE_CLIENTS = 64, 8   # logistic σ²: every 64th step, on 8 rotating clients (quadrature cost)

_POOLS = None


def client_hindsight_note(n_clients: int, client_hindsight_max: int) -> str:
    """Why a logistic or softmax run has no per-client static regret (M > ``tracker.client_hindsight_max``)."""
    return (f"per-client static regret skipped: M = {n_clients} clients exceed tracker.client_hindsight_max = "
            f"{client_hindsight_max} (one exact solver run per client at the end); the network comparator is exact")


def client_columns_plan(n_clients: int, requested: bool, limit: int) -> tuple[bool, str | None]:
    """Whether the per-step per-client columns are written, and the note saying why not when they are dropped.

    ``requested`` is ``output.client_columns``; above ``limit`` clients
    (``output.client_columns_max``) the columns are not written (they grow as
    5·M per step: 500,000 columns at M = 10^5) and each client's final values
    go to summary.json only. Returns (write, note or None); the note is the
    run header's and summary.json's (``client_columns``) wording.
    """
    if not requested or n_clients <= limit:
        return bool(requested), None
    return False, (f"per-client columns of the metrics file not written: M = {n_clients:,} clients exceed "
                   f"output.client_columns_max = {limit:,} (up to 5 columns per client and step); each client's "
                   f"final cumulative loss, steps and regrets are in summary.json (client_cum_loss, "
                   f"client_steps, client_regret)")
def client_statistics_plan(n_clients: int, n_features: int, n_steps: int, batch_size: int, budget_mb: float,
                           row_space: bool = True) -> tuple[bool, bool, str | None]:
    """Whether a least-squares run keeps per-client statistics, whether with their first rows, and the note when not.

    Each client sees n = T·b rows at most. In row space (wide tables) with
    n < d its statistics stay its rows (and their n × n Gram) all run:
    M·n·(d + n + 1) floats. Otherwise they are d × d: (M + 1)·d² floats with
    the network's, and the first rows, kept for cheaper solves until they
    reach d, double that at most. Kept within ``budget_mb``
    (``tracker.memory_budget_mb``). Returns (per_client, keep_rows, note or
    None); the note is the run's ``tracker_notes`` wording.

    >>> client_statistics_plan(8, 5000, 8, 1, 512)       # 8 rows each: 2.5 MB of rows, no d × d
    (True, True, None)
    >>> client_statistics_plan(8, 2000, 3000, 1, 512)    # 9 · 2000² floats = 275 MB; with the rows beside, 549
    (True, False, None)
    >>> client_statistics_plan(8, 5000, 6000, 1, 512)[2]
    'per-client static regret skipped: the per-client d×d statistics need 1717 MB, more than tracker.memory_budget_mb = 512; the network comparator is exact (190.7 MB)'
    """
    M, d, n = n_clients, n_features, n_steps * batch_size
    if row_space and n < d:
        need = M * n * (d + n + 1) * 8 / 2**20
        what = f"per-client statistics (each client's {n} rows, fewer than d = {d})"
        keep_rows = True
    else:
        need = (M + 1) * d * d * 8 / 2**20
        what = "per-client d×d statistics"
        keep_rows = 2 * need <= budget_mb
    network = (min(n * M, d) if row_space else d) * d * 8 / 2**20
    if need <= budget_mb:
        return True, keep_rows, None
    return False, False, (f"per-client static regret skipped: the {what} need {need:.0f} MB, more than "
                          f"tracker.memory_budget_mb = {budget_mb:g}; the network comparator is exact "
                          f"({network:.1f} MB)")


CLIENT_SOLVE_FLOPS = 1e8    # least squares: per-client exact solves at every refresh step up to M·d³ of this
CLIENT_GATHER_BYTES = 256 * 2**20   # finalize: a client's recorded features read once per solve up to this size


def one_blas_thread():
    """A context in which BLAS (numpy's and scipy's OpenBLAS) uses one thread.

    The tracker's matrix products are small (d ≤ a few hundred, a chunk of
    rows): a second BLAS thread costs more in hand-offs and spinning than it
    saves, and on a shared 2-core machine it took up to a third of a run's
    CPU time (L-BFGS-B's own small BLAS calls waited on the spinning threads).
    The learning loop is compiled code and is not affected. scipy's OpenBLAS
    is a library of its own, loaded with ``scipy.linalg``: it is loaded here
    first, or the controller would not know it (its solves then spun a second
    thread: cho_solve took 3.5 ms instead of 0.1).
    """
    global _POOLS
    if _POOLS is None:
        import scipy.linalg  # noqa: F401  (its BLAS must be loaded before the controller looks)
        from threadpoolctl import ThreadpoolController
        _POOLS = ThreadpoolController()
    return _POOLS.limit(limits=1, user_api="blas")


@dataclass
class LiveState:
    """The latest values, for the live view and the summary."""

    t: int = 0
    cum_loss: dict = field(default_factory=dict)
    regret: dict = field(default_factory=dict)
    heterogeneity: dict = field(default_factory=dict)
    samples: int = 0
    comparator: float = float("nan")
    consensus: float = 0.0
    bytes_up: int | None = None        # cumulative payload bytes clients → server (None: not counted)
    bytes_down: int | None = None      # cumulative payload bytes server → clients
    warning: str | None = None         # the loss is diverging (or rose and fell): LossGrowth's note


def close_chunk(tracker, cols: dict, cum_main: np.ndarray, ts: np.ndarray, comparator: float | None,
                samples: int) -> "pandas.DataFrame":
    """End a chunk of a tracker whose comparator is refitted at chunk ends (GMF, sparse logistic).

    Adds ``comparator_live`` (NaN but at the chunk's last step, where it is
    ``comparator``; all NaN when None) and ``regret_live`` = ``cum_main`` −
    it to ``cols`` (one array of n steps each), updates ``tracker.state``
    (step, cumulative losses, samples, live comparator and static regret),
    keeps the frame in ``tracker.rows`` and hands it to ``tracker.sink``.
    Returns the chunk's frame (n rows).
    """
    import pandas as pd
    comp = np.full(len(ts), np.nan)
    if comparator is not None:
        comp[-1] = comparator
    cols["comparator_live"] = comp
    cols["regret_live"] = cum_main - comp
    frame = pd.DataFrame(cols)
    st = tracker.state
    st.t = int(ts[-1])
    st.cum_loss = dict(tracker.cum)
    st.samples = samples
    if comparator is not None:
        st.comparator = float(comparator)
        st.regret = {"static": float(cum_main[-1] - comparator)}
    st.heterogeneity = {}
    tracker.rows.append(frame)
    if tracker.sink is not None:
        tracker.sink(frame)
    return frame


def _map(path: str, dtype):
    """(mmap or None, read-only array of ``dtype`` over the whole file)."""
    if os.path.getsize(path) == 0:
        return None, np.empty(0, dtype=dtype)
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    return mm, np.frombuffer(mm, dtype=dtype)


def _release(mm, lo: int, hi: int) -> None:
    """Drop bytes lo..hi of a read-only file mapping from this process's resident memory (page cache kept)."""
    if mm is None or hi <= lo or not hasattr(mm, "madvise"):
        return
    start = lo // mmap.PAGESIZE * mmap.PAGESIZE
    stop = min(hi, len(mm))
    if stop > start:
        mm.madvise(mmap.MADV_DONTNEED, start, stop - start)


def loss_columns(cols: dict, c: np.ndarray, losses: dict, learners, main: str, totals: dict):
    """Each learner's network loss and cumulative loss over a chunk, written into ``cols``; ``totals`` advanced.

    ``c`` (n, M) are the clients' weights per step, ``losses[name]`` (n, M)
    each learner's per-client losses (nats). Adds ``loss`` and ``cum_loss``
    (the main learner) and ``cum_loss_<b>``, ``gap_<b>`` (cumulative loss of
    the main learner minus baseline b's) to ``cols``; ``totals[name]`` is
    the cumulative loss before the chunk and becomes the one after it.
    Returns (net, cum): dicts of (n,) arrays.
    """
    net = {name: np.einsum("nm,nm->n", c, losses[name]) for name in learners}
    cum = {}
    for name in learners:
        cum[name] = running_sum(totals[name], net[name])        # step by step: the same at any chunk size
        totals[name] = float(cum[name][-1])
    cols["loss"] = net[main]
    cols["cum_loss"] = cum[main]
    for name in learners:
        if name != main:
            cols[f"cum_loss_{name}"] = cum[name]
            cols[f"gap_{name}"] = cum[main] - cum[name]
    return net, cum


def _project_rows(x: np.ndarray, radius: float | None) -> np.ndarray:
    if radius is None:
        return x
    n = np.linalg.norm(x, axis=-1, keepdims=True)
    return x * np.minimum(1.0, radius / np.maximum(n, 1e-300))


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
    sink : RowsSink, callable(DataFrame) or None
        Receives the per-step rows of every chunk (columns documented in
        :meth:`update`): as :class:`~streamfl.regret.rows.Rows` if it is a
        :class:`~streamfl.regret.rows.RowsSink` (the metrics file), else as a DataFrame.
    spool_dir : str or None
        Where to record the realised stream for the exact end-of-run
        comparator of non-quadratic losses (deleted by :meth:`finalize`).
    reservoir_size : int
    seed : int
    client_columns : bool
        Write the per-client columns (``output.client_columns``).
    client_columns_max : int
        ... only up to this many clients (``output.client_columns_max``; see
        :func:`client_columns_plan`); summary.json's ``client_columns`` says
        what was written and why.
    step_size : StepSize or None
        The main learner's η_t, for the regime condition (undetermined without it).
    tau : int or None
        The main learner's τ, for the consensus term of the bound.
    refresh_every, memory_budget_mb, client_hindsight_max, refit_every, recording_memory_mb
        The ``tracker`` section of the config (:class:`~streamfl.config.TrackerConfig`).

    Static regret columns (see :meth:`update`): ``regret_static`` is exact where it is known (least
    squares: every step with ``refresh_every`` = 1, else the refresh steps; logistic: the checkpoints and
    T) and NaN elsewhere; ``regret_static_live`` is the live estimate at every step, with the certified
    interval ``regret_static_lower`` ≤ R_t ≤ ``regret_static_upper`` (:mod:`streamfl.regret.bracket`
    for logistic; the Lagrangian bound of :meth:`LeastSquaresHindsight.update` for least squares; NaN for
    softmax and for logistic with a radius, whose reservoir estimate has no bound).
    """

    def __init__(self, stream, main: str, learners: list[str], radius: float | None = None,
                 sink=None, spool_dir: str | None = None, reservoir_size: int = 4096, seed: int = 0,
                 client_columns: bool = True, step_size=None, tau: int | None = None, client_columns_max: int = 1024,
                 refresh_every: int | None = None, memory_budget_mb: float = 512.0, client_hindsight_max: int = 4096,
                 refit_every: int = 1024, recording_memory_mb: float = 2048.0):
        self.M, self.d, self.b = stream.n_clients, stream.n_features, stream.batch_size
        self.task, self.K = stream.task, (stream.n_classes if stream.task == "softmax" else 1)
        self.population = stream.population
        self.dirac = bool(getattr(self.population, "dirac", False))
        self.main, self.learners, self.radius, self.sink = main, list(learners), radius, sink
        self.client_columns, why = client_columns_plan(self.M, client_columns, client_columns_max)
        self.client_columns_info = {"requested": bool(client_columns), "written": self.client_columns,
                                    "max_clients": int(client_columns_max), "note": why}
        self.cum = {name: 0.0 for name in self.learners}
        self.client_cum = np.zeros(self.M)
        self.client_steps = np.zeros(self.M)
        self.state = LiveState()
        self.total_weight = 0.0
        self._data_smoothness = getattr(self.population, "smoothness", None) is None
        T = self.T = stream.n_steps
        self.checkpoints = set(np.unique(np.geomspace(max(1, T / 2**15), T, 16).astype(int)).tolist())
        # auto: every step while a solve is cheap (d ≤ 16), else every 1024 steps
        self.refresh_every = max(1, int(refresh_every)) if refresh_every else (1 if self.d <= 16 else 1024)
        self.refit_every = max(1, int(refit_every))        # logistic/softmax reservoir refits
        self.memory_budget_mb = float(memory_budget_mb)
        self.client_hindsight_max = int(client_hindsight_max)
        self.notes = []
        if self.task == "least_squares":
            row_space = self.d > ROW_SPACE_MIN_DIM
            per_client, keep_rows, why = client_statistics_plan(self.M, self.d, T, self.b, self.memory_budget_mb,
                                                                row_space)
            if why is not None:
                self.notes.append(why)
            # the clients' exact solves cost M·d³ each (M·d·n² in row space while each client has n < d rows):
            # above CLIENT_SOLVE_FLOPS they are made only every refresh_every steps and at T (the network keeps
            # every refresh step); the live method says so
            self.client_solve_flops = self.M * self.d * min(self.d, T * self.b if row_space else self.d) ** 2
            self.client_sparse = per_client and self.refresh_every > 1 and self.client_solve_flops > CLIENT_SOLVE_FLOPS
            self.hindsight = LeastSquaresHindsight(self.M, self.d, radius, refresh_every=self.refresh_every,
                                                   extra=sorted(self.checkpoints | {T}), per_client=per_client,
                                                   client_extra=[T] if self.client_sparse else None,
                                                   keep_rows=keep_rows, row_space=row_space)
            self.reservoir = None
        else:
            self.hindsight = None
            self.reservoir = None
        # logistic: the live comparator with a certified bracket, exact at the checkpoints and T; it keeps
        # the stream in memory for its passes and for the per-client solves at the end
        self.bracket = None
        self._spool_root = spool_dir
        if self.task == "logistic" and radius is None:
            self.bracket = LogisticBracket(self.d, exact_steps=sorted(self.checkpoints | {T}),
                                           memory_mb=recording_memory_mb,
                                           spool_dir=None if spool_dir is None else os.path.join(spool_dir, "recording"))
        elif self.task != "least_squares":
            self.reservoir = True            # the solver path (see _solver_update); the reservoir estimate is gone
            self.solver_x, self.solver_value, self.solver_low = np.zeros(self.d * self.K), 0.0, 0.0
            self.solver_exact, self.solver_weight, self.solver_last = {}, 0.0, 0
        # L from the data: λ_max of the second moment Σ (c/b) a aᵀ of the features; on wide tables held as its
        # rows while they are fewer than d (:class:`RowStats`), d × d otherwise
        self._moment = None
        if self._data_smoothness:
            self._moment = RowStats(1, self.d, rows=self.d > ROW_SPACE_MIN_DIM, targets=False)
        self._lam = None                    # λ_max of the second moment, cached until it changes
        self.spool = None
        if self.reservoir is not None:
            self.spool_dir = spool_dir or tempfile.mkdtemp(prefix="streamfl-spool-")
            os.makedirs(self.spool_dir, exist_ok=True)
            self.spool = {k: open(os.path.join(self.spool_dir, k + ".bin"), "wb") for k in ("X", "y", "w", "t")}
        self.known = self.population is not None and not self.dirac
        # expected regret (population known): network and per-client running sums
        self.exp_learner = 0.0
        self.exp_virtual = 0.0
        self.opt_sums = [0.0, np.zeros(self.d), 0.0, 0.0]          # Σk, Σ k w, Σ k ‖w‖², Σ c σ²
        self.client_opt_sums = [np.zeros(self.M), np.zeros((self.M, self.d)), np.zeros(self.M), np.zeros(self.M)]
        self.client_exp = np.zeros(self.M)
        self.client_dyn = np.zeros(self.M)
        # logistic expected comparators: running sums of the optima (network weights 1/M, and each
        # client alone), snapshotted at the checkpoints; solved at the end (O(M d) memory, nothing spooled)
        self.exp_sums = self.client_exp_sums = None
        self.exp_snaps = {}
        if self.known and self.task == "logistic":
            self.exp_sums = self.population.running_sums(per_client=False)
            self.client_exp_sums = self.population.running_sums(per_client=True)
        self.dynamic = 0.0
        self.cum_consensus = 0.0
        self.cum_virtual = 0.0
        self.prev_optima = None
        self.prev_scale = None
        self.prev_est = None
        self.D = math.nan if self.known else (2.0 * radius if radius is not None else math.nan)
        self.checkpoint_loss = {}
        self.checkpoint_regret = {}
        self.last_exact = None                 # (t, exact static regret) at the last step where it is known
        self.checkpoint_exp = {}
        self.block = max(1, math.ceil(T / 32))
        self.growth = LossGrowth(T)          # divergence without inf or NaN, from the network loss
        self.stats = {k: RunningMean(self.block) for k in ("sigma2", "sigma2_comparator", "zeta2", "K2", "curvature")}
        self.step_size, self.tau = step_size, tau
        self.regime = RegimeTerms(self.M, tau, step_size, self.block, estimated=not (self.known or self.dirac))
        if self.known and self.task == "logistic":
            self.regime.noise_missing = (f"the population σ² of a logistic stream is evaluated every "
                                         f"{NOISE_EVERY}th step (a quadrature): none before step {NOISE_EVERY}")
        self.client_last_step = np.zeros(self.M, dtype=np.int64)
        self._names = {}
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
    def count_bytes(self, up: np.ndarray, down: np.ndarray) -> None:
        """The next chunk's cumulative bytes up and down after each step, (n,) int each (see :meth:`update`)."""
        self._comm = (up, down)

    def update(self, chunk, losses: dict, models: np.ndarray, comm=None) -> "pandas.DataFrame":
        """Count one chunk of steps (BLAS on one thread meanwhile, :func:`one_blas_thread`).

        Parameters
        ----------
        chunk : Chunk
        losses : dict name -> ndarray (n, M)
            f(x_{t,m}, ξ_{t,m}) of every learner (mini-batch mean; 0 if masked).
        models : ndarray (n, M, d, K)
            The main learner's played models x_{t,m}.
        comm : pair of int ndarrays (n,), optional
            The main learner's cumulative bytes up and down (payload lengths) after each step;
            written as the columns ``bytes_up`` and ``bytes_down``. Default: what
            :meth:`count_bytes` gave for this chunk, if anything.

        Returns
        -------
        :class:`~streamfl.regret.rows.Rows` with one row per step (``.frame()`` gives the DataFrame; the
        sink receives the Rows if it is a :class:`~streamfl.regret.rows.RowsSink`, else the DataFrame):

        * ``t``, ``loss`` (network loss of the main learner), ``cum_loss``,
          ``cum_loss_<baseline>``, ``gap_<baseline>``;
        * ``comparator_static``, ``regret_static``, ``regret_expected``,
          ``regret_dynamic`` (NaN where not available);
        * decomposition (FedSEA Lemma 1, each pair adding up to its regret):
          ``cum_loss_virtual`` (Σ c f(x̄_t, ξ)), ``regret_static_virtual`` (x̄_t's
          regret against the live comparator) and ``consensus_part_static``
          (realised losses f: they add up to ``regret_static_live``, which is
          ``regret_static`` where that is exact), ``regret_expected_virtual`` and
          ``consensus_part_expected`` (population F: they add up to
          ``regret_expected``; NaN without a population; the expected pair
          of a logistic run is NaN but its consensus part, which is known per
          step), ``consensus`` (C_t, squared model units) and
          ``cum_consensus``;
        * heterogeneity: ``sigma2``, ``sigma2_comparator``, ``zeta2``, ``K2``
          (squared gradient units), ``curvature`` (ℓ_t), and the regime
          condition's cumulative sides ``regime_noise``, ``regime_temporal``
          (loss units);
        * per client: ``client<m>_cum_loss``, ``client<m>_avg_loss`` (over the
          steps the client was present), ``client<m>_regret_static`` (least
          squares), ``client<m>_regret_expected`` (synthetic least squares),
          ``client<m>_regret_dynamic`` (synthetic).
        """
        with one_blas_thread():
            return self._update(chunk, losses, models, comm)

    def _update(self, chunk, losses, models, comm):
        n = chunk.n_steps
        c = chunk.weights()
        present = np.ones((n, self.M), bool) if chunk.mask is None else chunk.mask
        ts = chunk.t0 + 1 + np.arange(n)
        cols = {"t": ts}
        cum = loss_columns(cols, c, losses, self.learners, self.main, self.cum)[1]
        self.growth.update(ts, cols["loss"])
        self.state.warning = self.growth.verdict()["note"]
        hits = np.flatnonzero(np.isin(ts, list(self.checkpoints)))
        for i in hits:
            self.checkpoint_loss[int(ts[i])] = float(cum[self.main][i])
        client_cum = running_sum(self.client_cum, losses[self.main])
        self.client_cum = client_cum[-1].copy()
        if self._data_smoothness:            # L from the data (a synthetic population knows its own)
            self._lam = None
            self._moment.add_weighted(chunk.X.reshape(-1, self.d), np.repeat((c / self.b).reshape(-1), self.b))
        self.total_weight += float(c.sum())

        # realised static regret: the live estimate of the comparator with its certified bounds, and its exact
        # value at the steps where it is known (least squares: the refresh steps; logistic: checkpoints and T)
        client_regret = None
        nan = np.full(n, np.nan)
        lo = hi = nan
        exact = nan
        if self.hindsight is not None:
            warm, client_comp = self.hindsight.update(chunk.X, chunk.y, c, present, t0=chunk.t0)
            client_regret = None if client_comp is None else client_cum - client_comp
            lo, hi = self.hindsight.network_lower, warm
            comp = self.hindsight.network_estimate        # a Newton step from the last exact minimiser
            exact = np.where(self.hindsight.network_exact, warm, np.nan)
        elif self.bracket is not None:
            br = self.bracket.update(chunk.X, chunk.y, c, t0=chunk.t0, cum=cum[self.main])
            comp, lo, hi, exact = br["estimate"], br["lower"], br["upper"], br["exact"]
        else:
            self._spool(chunk, c, ts)
            comp, lo, hi, exact = self._solver_update(chunk, c, ts)
        cols["comparator_static"] = exact
        cols["comparator_static_live"] = comp
        cols["regret_static"] = cum[self.main] - exact
        cols["regret_static_live"] = cum[self.main] - comp
        cols["regret_static_lower"] = cum[self.main] - hi
        cols["regret_static_upper"] = cum[self.main] - lo
        self.state.comparator = float(comp[-1])
        for i in hits:
            if np.isfinite(exact[i]):
                self.checkpoint_regret[int(ts[i])] = float(cols["regret_static"][i])
        done = np.flatnonzero(np.isfinite(exact))
        if len(done):
            self.last_exact = (int(ts[done[-1]]), float(cols["regret_static"][done[-1]]))

        # the virtual average, its realised loss and the consensus error (Lemma 1)
        average = models.mean(axis=1)                                    # (n, d, K)
        dev = models - average[:, None]
        consensus = np.einsum("nm,nm->n", c, np.sum(dev * dev, axis=(2, 3)))
        est = None
        if not self.known:
            est, self.prev_est = empirical_estimates(self.task, average, chunk.X, chunk.y, c, self.prev_est,
                                                     noise_free=self.dirac)
        virtual_loss = est["virtual_loss"] if est is not None else \
            np.einsum("nm,nm->n", c, client_losses(self.task, average, chunk.X, chunk.y))
        cum_virtual = running_sum(self.cum_virtual, virtual_loss)
        self.cum_virtual = float(cum_virtual[-1])
        cols["cum_loss_virtual"] = cum_virtual
        cols["regret_static_virtual"] = cum_virtual - comp          # against the live estimate's comparator
        cols["consensus_part_static"] = cum[self.main] - cum_virtual    # realised f: adds up to regret_static_live
        cols["regret_expected_virtual"] = np.full(n, np.nan)
        cols["consensus_part_expected"] = np.full(n, np.nan)
        cols["consensus"] = consensus
        cols["cum_consensus"] = running_sum(self.cum_consensus, consensus)
        self.cum_consensus = float(cols["cum_consensus"][-1])
        self.state.consensus = self.cum_consensus

        # expected and dynamic regret, heterogeneity
        K1 = models.shape[-1] == 1
        client_expected = client_dynamic = None
        if self.known and chunk.optimum is not None and K1:
            pop_cols, u, client_expected, client_dynamic = self._population_terms(
                chunk, c, models[..., 0], average[..., 0])
            cols.update(pop_cols)
            if self.prev_optima is None:
                self.D = float(np.linalg.norm(average[0, :, 0] - u[0]))
            het = population_estimates(self.population, models[..., 0], average[..., 0], chunk.optimum,
                                       self.prev_optima, self.b, ts, 1 if self.task == "least_squares" else NOISE_EVERY,
                                       noise_clients=None if self.task == "least_squares" else NOISE_CLIENTS,
                                       comparator=u, scale=chunk.scale, noise=chunk.noise,
                                       previous_scale=self.prev_scale, optima_norm=self._opt_norm,
                                       sqdist=self._sq)
            self.prev_optima = chunk.optimum[-1].copy()
            self.prev_scale = None if chunk.scale is None else chunk.scale[-1].copy()
            sc = np.full((n, self.M), self.population.feature_scale) if chunk.scale is None else chunk.scale
            # ℓ_t at u_t for every client: ‖u_t‖ once per step (the rows of the broadcast u are equal)
            unorm = np.broadcast_to(np.sqrt(np.einsum("nd,nd->n", u, u))[:, None], (n, self.M))
            het["curvature"] = np.einsum("nm,nm->n", c, np.ascontiguousarray(self.population.curvature(
                np.broadcast_to(u[:, None, :], chunk.optimum.shape), scale=sc, x_norm=unorm)))
            flag_noise = het["sigma2_comparator"]
        elif self.dirac:
            dcols, client_dynamic = self._dirac_terms(chunk, c, losses[self.main], virtual_loss, cols,
                                                            client_regret, client_cum)
            cols.update(dcols)
            client_expected = client_regret
            het = {"sigma2": np.zeros(n), "sigma2_comparator": np.zeros(n), "zeta2": est["zeta2"],
                   "K2": est["K2"], "curvature": est["curvature"]}
            flag_noise = het["sigma2_comparator"]
        else:
            cols["regret_expected"] = np.full(n, np.nan)
            cols["regret_dynamic"] = np.full(n, np.nan)
            het = {"sigma2": est["sigma2"], "sigma2_comparator": np.full(n, np.nan), "zeta2": est["zeta2"],
                   "K2": est["K2"], "curvature": est["curvature"]}
            flag_noise = het["sigma2"]
        # real data: the curvature enters the regime terms through its running mean up to each step (the
        # per-step estimates are noisy; the mean at the chunk's end would make the terms depend on chunk_size)
        ell = het["curvature"] if (self.known or self.dirac) else self.stats["curvature"].prefix_means(het["curvature"])
        for key in ("sigma2", "sigma2_comparator", "zeta2", "K2", "curvature"):
            cols[key] = het[key]
            self.stats[key].update(het[key], ts)
        cols["regime_noise"], cols["regime_temporal"] = self._regime_update(ts, flag_noise, het, ell)

        client_steps = self.client_steps + np.cumsum(present, axis=0)
        self.client_steps = client_steps[-1].copy()
        seen = present.any(axis=0)
        self.client_last_step[seen] = ts[n - 1 - np.argmax(present[::-1], axis=0)][seen]
        frame = Rows(n)
        frame.add_columns(cols)
        if self.client_columns:          # one (n, M) block per quantity, not M columns one by one
            with np.errstate(invalid="ignore", divide="ignore"):
                client_avg = np.where(client_steps > 0, client_cum / np.maximum(client_steps, 1), np.nan)
            # client<m>_cum_loss, client<m>_avg_loss for m = 0, 1, … (interleaved), then each regret's M columns
            frame.add_group(self._client_names("cum_loss", "avg_loss"),
                            np.stack([client_cum, client_avg], axis=2).reshape(n, 2 * self.M))
            for label, values in (("regret_static", client_regret), ("regret_expected", client_expected),
                                  ("regret_dynamic", client_dynamic)):
                if values is not None:
                    frame.add_group(self._client_names(label), values)
        self.client_last = {"static": None if client_regret is None else client_regret[-1].copy(),
                            "expected": None if client_expected is None else client_expected[-1].copy(),
                            "dynamic": None if client_dynamic is None else client_dynamic[-1].copy()}
        if comm is None:
            comm, self._comm = getattr(self, "_comm", None), None
        if comm is not None:
            frame.add("bytes_up", comm[0])
            frame.add("bytes_down", comm[1])
            self.state.bytes_up, self.state.bytes_down = int(comm[0][-1]), int(comm[1][-1])
        self._refresh_state(frame, int(present.sum()) * self.b)
        deliver(self.sink, frame)
        return frame

    def _client_names(self, *labels: str) -> list[str]:
        """``client<m>_<label>`` for m = 0..M−1 and each label in turn per client (made once per labels)."""
        names = self._names.get(labels)
        if names is None:
            names = self._names[labels] = [f"client{m}_{label}" for m in range(self.M) for label in labels]
        return names

    def _regime_update(self, ts, flag_noise, het, ell):
        """Absorb the chunk into the regime terms; cumulative sides per step (loss units)."""
        r = self.regime
        before = ((r.noise.total, r.noise.count), (r.temporal.total, r.temporal.count))
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = r.update(ts, flag_noise, het["K2"], ell, het["sigma2"], het["zeta2"])
        if terms is None:
            nan = np.full(len(ts), np.nan)
            return nan, nan
        return r.cumulative(ts, terms, before)

    def _population_terms(self, chunk, c, models, average):
        """Expected and dynamic regret (network, virtual and per client) from F.

        Returns (columns, u (n, d), client expected (n, M) or None, client
        dynamic (n, M)); the columns hold ``regret_expected``, ``regret_dynamic``
        and the population-F pair ``regret_expected_virtual``,
        ``consensus_part_expected`` (the part known per step even where the
        expected regret is computed at the end).
        """
        pop, opt = self.population, chunk.optimum
        sc, nz = chunk.scale, chunk.noise
        nkw = {} if (nz is None or self.task != "least_squares") else {"noise": nz}
        out = {}
        sq = self._sq = {}          # squared distances ‖x − w‖² (least squares), reused by σ² (population_estimates)
        if self.task == "logistic":
            # F(x) = A(s‖x‖) − s² (x·w) κ(s‖w‖): κ once per distinct optimum norm, A interpolated
            # (:mod:`streamfl.regret.fastquad`); one pass per chunk instead of a quadrature per call.
            # ‖w‖² once per chunk: κ, F at the clients' own optima, u_t, the hindsight sums and ζ², K² use it
            s_ = pop.feature_scale if sc is None else sc
            ww = self._opt_sq = np.einsum("...d,...d->...", opt, opt)
            self._opt_norm = np.sqrt(ww)
            kw = kappa_unique(s_ * self._opt_norm)

            def F(x, key=None):
                if x is opt:                # x·w = ‖w‖² (the same sums as einsum of x with w)
                    return softplus_mean(s_ * self._opt_norm) - s_ * s_ * ww * kw
                nx = np.sqrt(np.einsum("...d,...d->...", x, x))
                # x·w by einsum (broadcasting x over the clients), without an (n, M, d) product array
                return softplus_mean(s_ * nx) - s_ * s_ * np.einsum("...d,...d->...", x, opt) * kw
        else:
            self._opt_sq = self._opt_norm = None

            def F(x, key=None):
                d2 = pop.sqdist(x, opt)
                if key is not None:
                    sq[key] = d2
                return pop.loss_of_sqdist(d2, scale=sc, **nkw)
        F_played = F(models, "models")                                           # (n, M)
        F_avg = F(average[:, None, :])                                           # (n, M)
        exp_learner = running_sum(self.exp_learner, np.einsum("nm,nm->n", c, F_played))
        exp_virtual = running_sum(self.exp_virtual, np.einsum("nm,nm->n", c, F_avg))
        self.exp_learner, self.exp_virtual = float(exp_learner[-1]), float(exp_virtual[-1])
        ts = chunk.t0 + 1 + np.arange(len(c))
        for i in np.flatnonzero(np.isin(ts, list(self.checkpoints))):
            self.checkpoint_exp[int(ts[i])] = (float(exp_learner[i]), float(exp_virtual[i]))
        # Σ c [F(x_m) − F(x̄)], as the difference of the two cumulative losses: with the virtual regret below it
        # adds up to the expected regret (exp_learner − comp = (exp_virtual − comp) + this) to rounding
        out["consensus_part_expected"] = exp_learner - exp_virtual
        client_exp = running_sum(self.client_exp, F_played)
        self.client_exp = client_exp[-1].copy()
        client_expected = None
        if self.task == "least_squares":
            s0 = pop.feature_scale
            k = np.ones_like(c) if sc is None else (sc / s0) ** 2             # relative curvature weights
            noise2 = pop.noise ** 2 if nz is None else nz ** 2
            n2 = np.broadcast_to(noise2, c.shape)
            # network: weights c k
            ck = c * k
            oo = opt * opt
            Sc = running_sum(self.opt_sums[0], ck.sum(axis=1))
            Sw = running_sum(self.opt_sums[1], np.einsum("nm,nmd->nd", ck, opt))
            Sww = running_sum(self.opt_sums[2], np.einsum("nm,nmd->n", ck, oo))
            Sn = running_sum(self.opt_sums[3], np.einsum("nm,nm->n", c, n2))
            self.opt_sums = [float(Sc[-1]), Sw[-1].copy(), float(Sww[-1]), float(Sn[-1])]
            comp = self._ls_comparator(Sc, Sw, Sww, Sn, s0)
            out["regret_expected"] = exp_learner - comp
            out["regret_expected_virtual"] = exp_virtual - comp
            # each client alone: weight 1 per step. Its comparator needs ‖Σ k w‖² only (see
            # _ls_client_comparator): the running sum Σ k w (M, d) is advanced step by step and its squared
            # norm taken, without an (n, M, d) array of running sums
            Kc = running_sum(self.client_opt_sums[0], k)
            n, M = c.shape
            Kw, Kw2 = self.client_opt_sums[1], np.empty((n, M))
            for i in range(n):
                Kw += opt[i] if sc is None else k[i][:, None] * opt[i]     # k = 1 without per-client scales
                Kw2[i] = np.vecdot(Kw, Kw)
            Kww = running_sum(self.client_opt_sums[2], k * np.sum(oo, axis=-1))
            Kn = running_sum(self.client_opt_sums[3], np.broadcast_to(n2, k.shape))
            self.client_opt_sums = [Kc[-1].copy(), Kw, Kww[-1].copy(), Kn[-1].copy()]
            client_expected = client_exp - self._ls_client_comparator(Kc, Kw2, Kww, Kn, s0)
        else:
            n, M = c.shape
            s_all = np.broadcast_to(pop.feature_scale if sc is None else sc, (n, M))
            cnet = np.full((n, M), 1.0 / M)
            start = 0
            nw = self._opt_norm
            for i in np.flatnonzero(np.isin(ts, list(self.checkpoints))):
                self.exp_sums.absorb(opt[start:i + 1], cnet[start:i + 1], s_all[start:i + 1], nw[start:i + 1])
                self.exp_snaps[int(ts[i])] = self.exp_sums.snapshot()
                start = i + 1
            if start < n:
                self.exp_sums.absorb(opt[start:], cnet[start:], s_all[start:], nw[start:])
            self.client_exp_sums.absorb(opt, np.ones((n, M)), s_all, nw)
            out["regret_expected"] = np.full(len(c), np.nan)
        # dynamic: F_t(x̄_t) − F_t(u_t), with F_t = Σ_m c F_{t,m}
        # every step from its own start (no warm start from the previous chunk's last u_t): u_t, and what is
        # evaluated at it (σ² at u_t, ℓ_t), is then the same whatever the chunk size; it is also cheaper (a
        # chunk-long broadcast of one warm start is a poor start for most of its steps)
        norm = {} if self._opt_norm is None else {"w_norm": self._opt_norm}
        u = pop.minimize_mean(opt, radius=self.radius, scale=sc, weights=None if sc is None else c, **norm)
        gap = np.einsum("nm,nm->n", c, F_avg - F(u[:, None, :], "comparator"))
        out["regret_dynamic"] = running_sum(self.dynamic, gap)
        self.dynamic = float(out["regret_dynamic"][-1])
        # each client against its own per-step optimum (the projection of x*_{t,m}: F_{t,m} is isotropic)
        if self.radius is None and self.task == "least_squares":
            own = pop.loss_of_sqdist(np.zeros(c.shape), scale=sc, **nkw)       # ‖w − w‖² = 0
        else:
            own = F(_project_rows(opt, self.radius))
        client_dynamic = running_sum(self.client_dyn, F_played - own)
        self.client_dyn = client_dynamic[-1].copy()
        return out, u, client_expected, client_dynamic

    def _ls_client_comparator(self, Kc, Kw2, Kww, Kn, s0):
        """Each client's min_{‖x‖≤D} ½ s0² Σ k ‖x − w‖² + ½ Σ σ² from Σk, ‖Σ k w‖², Σ k ‖w‖², Σ σ² (n, M).

        The minimiser is x̂ = a Σkw/Σk with a = min(1, D Σk/‖Σkw‖) (a = 1 without a radius), so
        x̂·Σkw = a ‖Σkw‖²/Σk and Σk ‖x̂‖² = a² ‖Σkw‖²/Σk: the value needs ‖Σkw‖², not Σkw itself.
        The same value as :meth:`_ls_comparator` on the sums (to rounding).
        """
        Kc = np.maximum(Kc, 1e-300)
        q = Kw2 / Kc                                            # ‖Σkw‖²/Σk
        if self.radius is None:
            return 0.5 * s0 ** 2 * (Kww - q) + 0.5 * Kn
        a = np.minimum(1.0, self.radius * Kc / np.maximum(np.sqrt(Kw2), 1e-300))
        return 0.5 * s0 ** 2 * (Kww - 2 * a * q + a * a * q) + 0.5 * Kn

    def _ls_comparator(self, Sc, Sw, Sww, Sn, s0):
        """min_{‖x‖≤D} ½ s0² Σ k ‖x − w‖² + ½ Σ σ², from running sums (any leading shape; (n, M, d) sums
        a few steps at a time, :func:`~streamfl.generators.population.row_blocks`)."""
        if Sw.ndim == 3:
            out = np.empty(Sc.shape)
            for i, j in row_blocks(len(Sw), Sw[0].nbytes):
                out[i:j] = self._ls_comparator_rows(Sc[i:j], Sw[i:j], Sww[i:j], Sn[i:j], s0)
            return out
        return self._ls_comparator_rows(Sc, Sw, Sww, Sn, s0)

    def _ls_comparator_rows(self, Sc, Sw, Sww, Sn, s0):
        xhat = Sw / np.maximum(Sc, 1e-300)[..., None]
        xhat = _project_rows(xhat, self.radius)
        return 0.5 * s0 ** 2 * (Sww - 2 * np.sum(xhat * Sw, axis=-1) + Sc * np.sum(xhat ** 2, axis=-1)) + 0.5 * Sn

    def _dirac_terms(self, chunk, c, played_loss, virtual_loss, cols, client_regret, client_cum):
        """Dirac adversary: F_{t,m} = f(·, ξ_{t,m}); expected = realised static regret, dynamic from
        the per-step quadratic (pooled over clients), per client against each client's own step."""
        X, y, b = chunk.X, chunk.y, self.b
        # the exact static regret where it is known (NaN between least-squares refreshes), its pair with it
        exact = np.isfinite(cols["regret_static"])
        out = {"regret_expected": cols["regret_static"].copy(),
               "regret_expected_virtual": np.where(exact, cols["regret_static_virtual"], np.nan),
               "consensus_part_expected": cols["consensus_part_static"].copy()}
        n, M, _, d = X.shape
        e = np.einsum("nmb,nmb->nm", y, y) / b
        # each step's minimum from its weighted rows (√(c/b) a, √(c/b) y): through the n × n Gram while the
        # rows are fewer than d (quadratic_min_rows), else from the d × d sums by Cholesky where exact;
        # the same minima as quadratic_min's eigendecompositions, without one d × d matrix per client
        sw = np.sqrt(c / b)
        Bn, zn, en = (X * sw[..., None, None]).reshape(n, M * b, d), (y * sw[..., None]).reshape(n, M * b), \
            np.einsum("nm,nm->n", c, e)
        if M * b < d:
            step_min = quadratic_min_rows(Bn, zn, en, self.radius)[0]
        else:
            step_min = quadratic_min_cholesky(np.matmul(Bn.transpose(0, 2, 1), Bn),
                                              np.einsum("nid,ni->nd", Bn, zn), en, self.radius)[0]
        out["regret_dynamic"] = running_sum(self.dynamic, virtual_loss - step_min)
        self.dynamic = float(out["regret_dynamic"][-1])
        if b < d:
            own = quadratic_min_rows(X.reshape(n * M, b, d) / math.sqrt(b), y.reshape(n * M, b) / math.sqrt(b),
                                     e.reshape(-1), self.radius)[0].reshape(n, M)
        else:
            own = quadratic_min(np.einsum("nmbd,nmbe->nmde", X, X) / b, np.einsum("nmbd,nmb->nmd", X, y) / b,
                                e, self.radius)                                    # (n, M)
        client_dynamic = running_sum(self.client_dyn, played_loss - own)
        self.client_dyn = client_dynamic[-1].copy()
        return out, client_dynamic

    def _solver_update(self, chunk, c, ts):
        """Softmax, and logistic with a radius: the comparator exact (a solver over the spool) at the refit
        steps (16, 32, … below ``refit_every``, its multiples), whenever the steps have grown by an eighth
        since the last exact solve, at the checkpoints and T; in between the warm value, the smaller of the
        last exact minimiser's cumulative loss and the origin's, W_t · log K (both above the comparator), with
        the last exact value below it (C_t never decreases: the losses are ≥ 0). Returns (estimate, lower,
        upper, exact), each (n,), nats; the estimate is the warm value."""
        n, M, b, d = chunk.X.shape
        loss_fn = get_loss(self.task)
        est, exact = np.empty(n), np.full(n, np.nan)
        lower = np.empty(n)
        log_k = math.log(max(self.K, 2))                      # f(0, ξ) = log K (log 2 for logistic)
        weight = running_sum(self.solver_weight, c.sum(axis=1))
        marks = []
        for i in range(n):
            t = int(ts[i])
            if is_refit_step(t, self.refit_every) or t in self.checkpoints or t == self.T or \
                    (t >= 16 and 8 * t >= 9 * self.solver_last):
                marks.append(i + 1)
                self.solver_last = t
        start = 0
        for stop in marks + ([n] if not marks or marks[-1] != n else []):
            sl = slice(start, stop)
            k = stop - start
            W = self.solver_x.reshape(1, d, self.K)
            rows = loss_fn(W, chunk.X[sl].reshape(1, k * M * b, d), chunk.y[sl].reshape(1, k * M * b),
                           with_grad=False)[0].reshape(k, M, b).mean(axis=2)
            warm = running_sum(self.solver_value, np.einsum("nm,nm->n", c[sl], rows))
            self.solver_value = float(warm[-1])
            est[sl] = np.minimum(warm, weight[sl] * log_k)
            lower[sl] = self.solver_low
            if stop in marks:
                t = int(ts[stop - 1])
                for f in self.spool.values():
                    f.flush()
                x, value = solve_hindsight(self.task, self._blocks(t), (self.d, self.K), self.radius, x0=self.solver_x)
                self.solver_x, self.solver_value, self.solver_low = x, float(value), float(value)
                est[stop - 1] = lower[stop - 1] = exact[stop - 1] = value
                self.solver_exact[t] = float(value)
            start = stop
        self.solver_weight = float(weight[-1])
        return est, lower, est.copy(), exact

    def _spool(self, chunk, c, ts):
        # the arrays' own buffers are written (C-contiguous float64/int64): no bytes copy of a chunk
        n, M, b, d = chunk.X.shape
        self.spool["X"].write(np.ascontiguousarray(chunk.X, dtype=np.float64))
        self.spool["y"].write(np.ascontiguousarray(chunk.y, dtype=np.float64))
        self.spool["w"].write(np.ascontiguousarray(np.repeat((c / b)[..., None], b, axis=2), dtype=np.float64))
        self.spool["t"].write(np.repeat(ts, M * b).astype(np.int64))

    def _refresh_state(self, frame, samples):
        last = frame.last()
        st = self.state
        st.t = int(last["t"])
        st.samples += samples
        st.cum_loss = {self.main: float(last["cum_loss"])}
        for name in self.learners:
            if name != self.main:
                st.cum_loss[name] = float(last[f"cum_loss_{name}"])
        st.regret = {"static": float(last["regret_static_live"]),
                     "static_lower": float(last["regret_static_lower"]), "static_upper": float(last["regret_static_upper"]),
                     "expected": float(last["regret_expected"]),
                     "dynamic": float(last["regret_dynamic"]),
                     "static_virtual": float(last["regret_static_virtual"]),
                     "expected_virtual": float(last["regret_expected_virtual"]),
                     "consensus_part_static": float(last["consensus_part_static"]),
                     "consensus_part_expected": float(last["consensus_part_expected"]),
                     "consensus_bound": 0.5 * self.smoothness() * self.cum_consensus}
        st.heterogeneity = self.heterogeneity_summary()

    # ------------------------------------------------------------------ summaries
    def static_live_method(self) -> str:
        """How the live (per-step) static comparator is computed; the live view and summary.json say it."""
        if self.hindsight is not None:
            k = self.refresh_every
            if k == 1:
                return "exact at every step (sufficient statistics)"
            text = (f"exact at steps t ≤ 16, powers of two, every {k} steps (tracker.refresh_every), the "
                    f"checkpoints and T; in between a Newton step from the last exact minimiser, with a certified "
                    f"interval (regret_static_lower/_upper: the last minimiser's loss above, a Lagrangian bound below)")
            if getattr(self, "client_sparse", False):
                cost = "M·d³" if self.client_solve_flops == self.M * self.d ** 3 else "M·d·(T b)²"
                text += (f"; per client exact only every {k} steps and at T ({cost} = {self.client_solve_flops:.2g} "
                         f"> {CLIENT_SOLVE_FLOPS:.0e} per solve), the last exact minimiser's loss in between")
            return text
        if self.bracket is not None:
            return ("a quadratic model of the cumulative loss at a centre near the minimiser (exact sums of the "
                    "loss, gradient and Hessian over the stream), with a certified interval at every step "
                    "(regret_static_lower/_upper, by the self-concordance of the logistic loss); the centre moves "
                    "when the interval grows wider than 0.5 % of the regret (or 0.05 nats), within a work budget; "
                    "exact at the checkpoints and T")
        k = self.refit_every
        powers = ", ".join(str(1 << i) for i in range(4, 63) if (1 << i) < k)
        return (f"exact (L-BFGS over the recorded stream, warm-started) at steps {powers + ', ' if powers else ''}"
                f"every {k} steps (tracker.refit_every), whenever the steps have grown by an eighth, the "
                f"checkpoints and T; in between the smaller of the last exact minimiser's and the origin's "
                f"cumulative loss, an upper bound on the comparator (so the live regret is a lower bound on the "
                f"exact one), with the last exact value as the lower bound")

    def smoothness(self) -> float:
        """L: the population's, or estimated from the running second moment of
        the features: λ_max(E aaᵀ) for the squared loss, λ_max/4 for logistic
        (sigmoid' ≤ 1/4) and λ_max/2 for softmax (the Hessian (diag p − ppᵀ) ⊗ aaᵀ
        has λ_max(diag p − ppᵀ) ≤ 1/2, reached at p = (½, ½, 0, …))."""
        L = getattr(self.population, "smoothness", None) if self.population is not None else None
        if L is not None:
            return float(L)
        if self.total_weight <= 0:
            return math.nan
        if self._lam is None:                # once per chunk, however often it is asked for
            self._lam = float(self._moment.lam_max(max(self.total_weight, 1e-300))[0])
        lam = self._lam
        return {"least_squares": lam, "logistic": lam / 4, "softmax": lam / 2}[self.task]

    def estimator(self) -> str:
        """How σ², ζ², K² are obtained: ``population (exact)``, ``dirac (exact)`` or ``empirical (unbiased)``."""
        if self.dirac:
            return "dirac (exact)"
        return "population (exact)" if self.known else "empirical (unbiased per step)"

    def heterogeneity_summary(self) -> dict:
        """Running means (± standard error), maxima, L, ℓ and the regime condition.

        Returns a dict with ``sigma2_mean``, ``sigma2_comparator_mean``,
        ``zeta2_mean``, ``K2_mean`` and ``curvature_mean`` (unbiased running
        means: an empirical mean can be slightly negative; displays clip at
        0), ``<name>_se`` (batch-means standard errors), ``sigma2_max``,
        ``sigma2_comparator_max``, ``zeta2_max``, ``K2_max`` (FedSEA Theorem
        2's σ²_max, ζ²_max, K²_max: per-step maxima for exact values, the
        largest block mean of ⌈T/32⌉ steps for estimates), ``L``,
        ``estimator``, ``regime`` (:meth:`RegimeTerms.summary` plus
        ``sigma2_used``), ``parallelisation_helps`` (True / False / None =
        undetermined; the regime condition), ``literal`` (the paper's
        σ̄²/M ≥ L·K̄² read literally, for comparison) and ``notes``.
        """
        L = self.smoothness()
        exact = self.known or self.dirac
        out = {"estimator": self.estimator(), "L": float(L), "block_steps": self.block}
        for key, st in self.stats.items():
            name = "curvature" if key == "curvature" else key
            out[f"{name}_mean"] = float(st.mean)
            out[f"{name}_se"] = float(st.se)
            if key != "curvature":
                out[f"{name}_max"] = float(st.max_step if exact else st.max_block) if st.count else math.nan
        units = "nats" if self.task in ("logistic", "softmax") else "loss units"
        regime = self.regime.summary(self.state.t, self.D, units, L)
        regime["sigma2_used"] = "comparator u_t" if exact else "played average x̄_t"
        regime["curvature"] = out["curvature_mean"]
        out["regime"] = regime
        out["parallelisation_helps"] = regime["parallelisation_helps"]
        out["literal"] = literal_condition(out["sigma2_mean"], out["K2_mean"], L, self.M)
        notes = []
        if not exact and self.b < 2:
            notes.append("b = 1: the gradient noise σ² cannot be estimated; ζ̄² and K̄² are the raw spreads "
                         "(biased upward by the noise)")
        out["notes"] = notes
        return out

    def _blocks(self, upto: int | None = None, block_rows: int = 1 << 16, client: int | None = None):
        """A callable yielding (X, y, w) blocks of the recorded stream (up to step ``upto``, or one client's rows).

        The spool files are memory-mapped and every block's pages are released
        from the process (``madvise(MADV_DONTNEED)``; they stay in the page
        cache) once the block is used, so the resident memory of the end-of-run
        solves stays at about one block, whatever T.
        """
        d = self.d
        (mX, X), (my, y), (mw, w), (mt, t) = (_map(os.path.join(self.spool_dir, name), dt) for name, dt in
                                              (("X.bin", np.float64), ("y.bin", np.float64),
                                               ("w.bin", np.float64), ("t.bin", np.int64)))
        X = X.reshape(-1, d)
        N = len(y) if upto is None else int(np.searchsorted(t, upto, side="right"))
        _release(mt, 0, t.nbytes)

        def release(i, j):                     # rows i..j of the spool (all clients)
            _release(mX, i * d * 8, j * d * 8)
            _release(my, i * 8, j * 8)
            _release(mw, i * 8, j * 8)

        if client is not None:
            # rows are ordered (t, m, b): client m's rows of every step; weight 1/b when present
            M, b = self.M, self.b
            Xc = X[:N].reshape(-1, M, b, d)[:, client]
            yc = np.ascontiguousarray(y[:N].reshape(-1, M, b)[:, client].reshape(-1))
            wc = (w[:N].reshape(-1, M, b)[:, client].reshape(-1) > 0) / b
            if Xc.nbytes <= CLIENT_GATHER_BYTES:
                # one gather of the client's strided rows per solve, not one per objective evaluation;
                # piece by piece, each piece's pages released (the kernel maps whole neighbourhoods of
                # the rows it faults in, so gathering in one go made the whole spool resident)
                steps = Xc.shape[0]
                per = max(1, (64 << 20) // max(1, M * b * d * 8))
                out = np.empty(Xc.shape)
                for s0 in range(0, steps, per):
                    s1 = min(steps, s0 + per)
                    out[s0:s1] = Xc[s0:s1]
                    release(s0 * M * b, s1 * M * b)
                Xc = out.reshape(-1, d)
                block_rows = max(1, len(yc))
                strided = False
            else:
                Xc = Xc.reshape(-1, d)
                strided = True
            release(0, N)

            def client_blocks():
                for i in range(0, len(yc), block_rows):
                    j = min(len(yc), i + block_rows)
                    yield np.ascontiguousarray(Xc[i:j]), yc[i:j], np.asarray(wc[i:j], dtype=np.float64)
                    if strided:               # steps i//b .. (j-1)//b of every client
                        release(i // b * M * b, ((j - 1) // b + 1) * M * b)
            return client_blocks

        def blocks():
            for i in range(0, N, block_rows):
                j = min(N, i + block_rows)
                yield X[i:j], y[i:j], w[i:j]
                release(i, j)
        return blocks

    def _step_blocks(self, block_bytes: int = 64 << 20):
        """A callable yielding the recorded stream as whole steps, all clients: (X (n, M, b, d), y (n, M, b), w (n, M, b)).

        w is each client's own weight, 1/b per sample when the client was
        present (as for one client's solve, :meth:`_blocks`); about
        ``block_bytes`` of features per block, each block's pages released after use.
        """
        M, b, d = self.M, self.b, self.d
        (mX, X), (my, y), (mw, w) = (_map(os.path.join(self.spool_dir, name), np.float64)
                                     for name in ("X.bin", "y.bin", "w.bin"))
        steps = len(y) // (M * b)
        per = max(1, block_bytes // max(1, M * b * d * 8))

        def blocks():
            for s0 in range(0, steps, per):
                s1 = min(steps, s0 + per)
                i, j = s0 * M * b, s1 * M * b
                yield (X[i * d:j * d].reshape(-1, M, b, d), y[i:j].reshape(-1, M, b),
                       (w[i:j].reshape(-1, M, b) > 0) / b)
                _release(mX, i * d * 8, j * d * 8)
                _release(my, i * 8, j * 8)
                _release(mw, i * 8, j * 8)
        return blocks

    def finalize(self) -> dict:
        """Close the run: exact comparators for non-quadratic losses.

        Returns a dict with ``regret_static`` (exact), ``comparator_static``,
        ``static_checkpoints`` (list of (t, exact regret at t) on a geometric
        grid, for plots), ``regret_expected`` and ``regret_dynamic`` (where the
        population is known; ``regret_*_method`` says how each regret is
        known), the decomposition (``regret_static_virtual`` and
        ``consensus_part_static``, ``regret_expected_virtual`` and
        ``consensus_part_expected``, ``consensus_bound``,
        ``cum_consensus``; for logistic ``expected_checkpoints``: (t, expected
        regret, virtual expected regret) on the checkpoint grid), ``client_regret`` ({comparator: list of M
        values}) with ``client_regret_spread`` ({comparator: min, median,
        max}), the heterogeneity summary, ``client_steps`` (steps each client
        was present, (M,)), ``client_last_step`` (its last such step t, 0
        if none) and ``divergence`` (:meth:`LossGrowth.verdict
        <streamfl.regret.stability.LossGrowth.verdict>`: whether the network
        loss grew without reaching inf or NaN; its note is also in
        ``tracker_notes``). BLAS runs on one thread meanwhile (:func:`one_blas_thread`).
        """
        with one_blas_thread():
            return self._finalize()

    def _finalize(self) -> dict:
        st = self.state
        out = {"t": st.t, "cum_loss": dict(st.cum_loss),
               "regret_static": st.regret.get("static"),
               "regret_expected": st.regret.get("expected"),
               "regret_dynamic": st.regret.get("dynamic"),
               "regret_static_virtual": st.regret.get("static_virtual"),
               "regret_expected_virtual": st.regret.get("expected_virtual"),
               "regret_static_method": ("exact (sufficient statistics)" if self.hindsight else
                                        "exact (quasi-Newton over the recorded stream, certified to a relative "
                                        f"{self.bracket.exact_tol:g})" if self.bracket else
                                        "exact (L-BFGS over the recorded stream)"),
               "regret_static_live_method": self.static_live_method(),
               "regret_expected_method": self.expected_method, "regret_dynamic_method": self.dynamic_method,
               "static_checkpoints": []}
        if st.bytes_up is not None:
            out["bytes_up"], out["bytes_down"] = st.bytes_up, st.bytes_down
        last = getattr(self, "client_last", {"static": None, "expected": None, "dynamic": None})
        clients = {k: (None if v is None else v.copy()) for k, v in last.items()}
        if self.hindsight is not None:
            # exact now, whatever the last step was; the values of that step when it solved every row
            # (T is a refresh step; the clients' (M + 1)·d³ solve is not repeated)
            h = self.hindsight
            value = h.value.copy() if h.solved_at == h.t else h.solve()[0]
            out["comparator_static"] = float(value[0])
            out["regret_static_live_estimate"] = st.regret.get("static")
            out["regret_static"] = float(st.cum_loss[self.main] - value[0])
            out["regret_static_virtual"] = float(self.cum_virtual - value[0])
            if self.hindsight.per_client:
                clients["static"] = self.client_cum - value[1:]
            out["static_checkpoints"] = sorted(self.checkpoint_regret.items())
        if self.spool is not None or self.bracket is not None:
            x = None
            if self.bracket is not None:
                # exact during the run at the checkpoints and T (certified to the bracket's exact_tol)
                br = self.bracket
                if st.t not in br.exact and st.t > 0:
                    br.exact[st.t] = br._solve_exact(st.t)
                for tt, (v, _, _) in sorted(br.exact.items()):
                    if tt in self.checkpoint_loss:
                        out["static_checkpoints"].append((int(tt), float(self.checkpoint_loss[tt] - v)))
                value, v_lo, v_hi = br.exact[st.t] if st.t > 0 else (0.0, 0.0, 0.0)
                if st.t not in self.checkpoint_loss:
                    out["static_checkpoints"].append((int(st.t), float(st.cum_loss[self.main] - value)))
                out["regret_static_bounds"] = [float(st.cum_loss[self.main] - v_hi),
                                               float(st.cum_loss[self.main] - v_lo)]
                x = br.xc.copy()
                step_blocks, client_blocks = br.step_blocks, br.client_blocks
            else:
                for f in self.spool.values():
                    f.close()
                self.checkpoint_loss[st.t] = st.cum_loss[self.main]
                if st.t not in self.solver_exact and st.t > 0:
                    self.solver_x, self.solver_exact[st.t] = solve_hindsight(
                        self.task, self._blocks(st.t), (self.d, self.K), self.radius, x0=self.solver_x)
                for tt, cl in sorted(self.checkpoint_loss.items()):
                    out["static_checkpoints"].append((int(tt), float(cl - self.solver_exact[tt])))
                value = self.solver_exact.get(st.t, 0.0)
                x = self.solver_x
                step_blocks = self._step_blocks()
                client_blocks = lambda m: self._blocks(client=m)      # noqa: E731
            out["comparator_static"] = value
            out["regret_static"] = float(st.cum_loss[self.main] - value)
            out["regret_static_virtual"] = float(self.cum_virtual - value)
            out["regret_static_live_estimate"] = st.regret.get("static")
            # each client alone, exact (warm-started from the network comparator): one solver run per
            # client over the recorded stream, so only up to tracker.client_hindsight_max clients
            if self.M <= self.client_hindsight_max:
                cl = np.empty(self.M)
                todo = range(self.M)
                if self.task == "logistic" and self.d <= CLIENT_NEWTON_MAX_DIM:
                    # all clients at once (one pass over the recording per Newton step); clients it does not
                    # settle (no finite minimiser, or outside the radius) go to the one-by-one solver below
                    xs, vals, ok = solve_hindsight_clients(step_blocks, self.M, self.d, x0=x)
                    if self.radius is not None:
                        ok &= np.linalg.norm(xs, axis=1) <= self.radius
                    cl[ok] = vals[ok]
                    todo = np.flatnonzero(~ok).tolist()
                    out["client_regret_static_method"] = (
                        f"exact: all clients at once by damped Newton (logistic, d ≤ {CLIENT_NEWTON_MAX_DIM}) for "
                        f"{self.M - len(todo)} clients, L-BFGS one client at a time for {len(todo)}")
                elif self.task == "logistic":
                    # all clients at once by L-BFGS preconditioned by each client's Hessian at the network's
                    # comparator (one pass of batched products, then O(N d) per pass); the rest one by one
                    xs, vals, ok = solve_clients(step_blocks, self.M, self.d, x0=x,
                                                 precond="clients" if (self.M * self.d ** 2 * 8 <= 2**28
                                                                      and st.t * self.b >= self.d) else None)
                    if self.radius is not None:
                        ok &= np.linalg.norm(xs, axis=1) <= self.radius
                    cl[ok] = vals[ok]
                    todo = np.flatnonzero(~ok).tolist()
                    out["client_regret_static_method"] = (
                        f"exact: all clients at once by preconditioned L-BFGS (logistic, d > {CLIENT_NEWTON_MAX_DIM}) "
                        f"for {self.M - len(todo)} clients, L-BFGS one client at a time for {len(todo)}")
                else:
                    out["client_regret_static_method"] = "exact: L-BFGS one client at a time"
                for m in todo:
                    _, cl[m] = solve_hindsight(self.task, client_blocks(m), (self.d, self.K), self.radius, x0=x)
                clients["static"] = self.client_cum - cl
            else:
                self.notes.append(client_hindsight_note(self.M, self.client_hindsight_max))
            if self.exp_sums is not None and self.exp_sums.B is not None:
                self.checkpoint_exp[st.t] = (self.exp_learner, self.exp_virtual)
                marks = sorted(self.checkpoint_exp)
                last = self.exp_sums.snapshot()
                sols = [self.exp_sums.solve(self.radius, self.exp_snaps.get(tt, last)) for tt in marks]
                out["expected_checkpoints"] = [(int(tt), float(self.checkpoint_exp[tt][0] - v[0]),
                                                float(self.checkpoint_exp[tt][1] - v[0]))
                                               for tt, (_, v) in zip(marks, sols)]
                comp = float(sols[-1][1][0])
                out["regret_expected"] = float(self.exp_learner - comp)
                out["regret_expected_virtual"] = float(self.exp_virtual - comp)
                _, ccomp = self.client_exp_sums.solve(self.radius)
                clients["expected"] = self.client_exp - ccomp
            if self.spool is not None:
                for name in os.listdir(self.spool_dir):
                    os.remove(os.path.join(self.spool_dir, name))
                os.rmdir(self.spool_dir)
            if self.bracket is not None:
                self.bracket.rec.close()
                if spool_root := getattr(self, "_spool_root", None):
                    try:
                        os.rmdir(spool_root)
                    except OSError:
                        pass

        def known(v):
            return v is not None and math.isfinite(v)

        # FedSEA Lemma 1 in each regret's basis; each part is the difference of the two cumulative losses
        # (the last step's columns), so virtual + part = regret to rounding
        out["consensus_part_static"] = st.regret.get("consensus_part_static")
        part = st.regret.get("consensus_part_expected")
        out["consensus_part_expected"] = part if known(part) else None
        out["cum_consensus"] = self.cum_consensus
        out["consensus_bound"] = 0.5 * self.smoothness() * self.cum_consensus
        expected = None
        if known(out["regret_expected"]) and known(part):
            expected = {"basis": "population F", "regret": out["regret_expected"],
                        "regret_virtual": out["regret_expected_virtual"],
                        "consensus_part": out["consensus_part_expected"]}
        out["decomposition"] = {
            "source": "FedSEA Lemma 1: regret = regret of the virtual average x̄_t + consensus part",
            "static": {"basis": "realised losses f", "regret": out["regret_static"],
                       "regret_virtual": out["regret_static_virtual"],
                       "consensus_part": out["consensus_part_static"]},
            "expected": expected,
            "consensus_bound": out["consensus_bound"],
        }
        out["client_regret"] = {k: (None if v is None else [float(x) for x in v]) for k, v in clients.items()}
        out["client_regret_spread"] = {
            k: (None if v is None else {"min": float(np.min(v)), "median": float(np.median(v)), "max": float(np.max(v))})
            for k, v in clients.items()}
        out["heterogeneity"] = self.heterogeneity_summary()
        out["divergence"] = self.growth.verdict()
        if out["divergence"]["note"]:
            self.notes.append(out["divergence"]["note"])
        out["tracker_notes"] = list(self.notes)
        out["client_columns"] = dict(self.client_columns_info)
        out["client_cum_loss"] = self.client_cum.tolist()
        out["samples"] = st.samples
        out["client_steps"] = self.client_steps.astype(int).tolist()
        out["client_last_step"] = self.client_last_step.tolist()
        return out
