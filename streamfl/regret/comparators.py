"""Hindsight comparators: min over a fixed model of the cumulative loss.

* :class:`LeastSquaresHindsight` — exact at every step for the squared loss,
  from running sufficient statistics (A = Σ c a aᵀ/b, v = Σ c a y/b,
  e = Σ c y²/b); memory O(G d²), constant in T.
* :class:`ReservoirHindsight` — the live estimate for the logistic and softmax
  losses: a weighted reservoir of R samples (Efraimidis & Spirakis, 2006),
  each kept with the loss the learner incurred on it. After every chunk the
  comparator model x̂ is refitted on the reservoir, and the regret is
  estimated as (Σ weights so far) × (reservoir mean of [learner loss − f(x̂, ξ)]).
  Pairing the two losses on the same samples cancels most of the sampling
  noise (a control variate); fitting and evaluating on the same reservoir
  makes the estimate slightly optimistic for the comparator. The exact value
  comes from :func:`solve_hindsight` at the end of the run.
* :func:`solve_hindsight` — the exact comparator on a recorded stream, by a
  convex solver (L-BFGS; on the L2 ball, L-BFGS on F + (λ/2)‖x‖² with λ found by Brent's method).
"""

from __future__ import annotations

import math

import numpy as np

from ..models.losses import get_loss


def _spectral_min(lam, vt, e, radius):
    """The minimum of ½ xᵀAx − vᵀx + ½e over ‖x‖ ≤ radius in A's eigenbasis.

    lam : (..., k) eigenvalues of A (those of its range; zero or tiny ones are
    dropped below 1e-10 λ_max); vt : (..., k) the coordinates of v on the
    eigenvectors; e : (...). Returns (value (...), xt (..., k)): the minimum
    and the minimiser's coordinates (the minimum-norm one; on the ball's
    boundary the multiplier ν of ‖(A + νI)⁻¹v‖ = D by bisection).
    """
    tol = 1e-10 * np.maximum(lam[..., -1:], 1e-300)
    keep = lam > tol
    safe = np.where(keep, lam, 1.0)
    xt = np.where(keep, vt / safe, 0.0)
    value = 0.5 * e - 0.5 * np.sum(xt * vt, axis=-1)
    if radius is not None:
        outside = np.sum(xt**2, axis=-1) > radius**2
        if np.any(outside):
            lo_, vt_, keep_ = lam[outside], vt[outside], keep[outside]
            lo = np.zeros(lo_.shape[0])
            hi = np.sqrt(np.sum(vt_**2, axis=-1)) / radius + 1.0
            for _ in range(200):
                nu = 0.5 * (lo + hi)
                xn = np.where(keep_, vt_ / (lo_ + nu[:, None]), 0.0)
                big = np.sum(xn**2, axis=-1) > radius**2
                lo, hi = np.where(big, nu, lo), np.where(big, hi, nu)
            xn = np.where(keep_, vt_ / (lo_ + hi[:, None]), 0.0)
            value = value.copy()
            value[outside] = 0.5 * np.sum(lo_ * xn**2, axis=-1) - np.sum(vt_ * xn, axis=-1) + 0.5 * e[outside]
            xt = xt.copy()
            xt[outside] = xn
    return value, xt


def quadratic_min(A: np.ndarray, v: np.ndarray, e: np.ndarray, radius: float | None = None,
                  return_x: bool = False):
    """min_{‖x‖ ≤ radius} ½ xᵀAx − vᵀx + ½ e, batched.

    Parameters
    ----------
    A : ndarray (..., d, d), symmetric positive semi-definite
    v : ndarray (..., d), in the range of A
    e : ndarray (...)
    radius : float or None
        The L2-ball radius D; ``None`` for no constraint. On the boundary the
        multiplier ν solving ‖(A + νI)⁻¹v‖ = D is found by bisection.
    return_x : bool
        Also return the minimiser.

    Returns
    -------
    value : ndarray (...)
        The minimum value (for least squares: the comparator's cumulative loss).
    x : ndarray (..., d), only with ``return_x``
        A minimiser (the minimum-norm one where A is singular).

    Cost: one symmetric eigendecomposition per matrix, O(d³) each. For a
    stack of well-conditioned matrices :func:`quadratic_min_cholesky` gives
    the same minimum about 7× cheaper; for A = BᵀB of a few rows,
    :func:`quadratic_min_rows`.
    """
    lam, Q = np.linalg.eigh(A)
    vt = np.einsum("...dk,...d->...k", Q, v)
    value, xt = _spectral_min(lam, vt, e, radius)
    if not return_x:
        return value
    return value, np.einsum("...dk,...k->...d", Q, xt)


CHOLESKY_MIN_DIM = 10   # d up to which a stack of d × d solves is cheaper as one batched eigendecomposition


def quadratic_min_cholesky(A: np.ndarray, v: np.ndarray, e: np.ndarray, radius: float | None = None):
    """:func:`quadratic_min` (with the minimiser) for a stack of matrices, by Cholesky where that is exact.

    A : (G, d, d) symmetric positive semi-definite; v : (G, d); e : (G,).
    Returns (value (G,), x (G, d)).

    For each matrix, A = LLᵀ (LAPACK ``potrf``) and L⁻¹ (``trtri``) give
    x = A⁻¹v and the minimum ½e − ½‖L⁻¹v‖². That is :func:`quadratic_min`'s
    answer (which keeps the eigenvalues above 10⁻¹⁰ λ_max) whenever every
    eigenvalue is kept, and that is certain when
    1/‖L⁻¹‖_F² (≤ λ_min, since ‖A⁻¹‖₂ ≤ trace A⁻¹ = ‖L⁻¹‖_F²) exceeds
    10⁻¹⁰ trace A (≥ λ_max). Matrices failing the test (singular or badly
    conditioned), or whose x lies outside the ball ‖x‖ ≤ radius, are solved
    by :func:`quadratic_min` (eigendecomposition). Cost: d³/3 + d³/3 flops
    per matrix against ~9d³ for the eigendecomposition, but one LAPACK call
    per matrix: for d ≤ :data:`CHOLESKY_MIN_DIM` the whole stack goes to the
    batched eigendecomposition instead (at d = 4 and 4,096 matrices the
    per-matrix calls took 62 ms of CPU against 7 ms).
    """
    from scipy.linalg import lapack
    G, d = v.shape
    if d <= CHOLESKY_MIN_DIM:
        return quadratic_min(A, v, e, radius, return_x=True)
    value, x = np.empty(G), np.zeros((G, d))
    rest = []
    for g in range(G):
        L, info = lapack.dpotrf(A[g], lower=1, clean=1)
        if info == 0:
            Li, info = lapack.dtrtri(L, lower=1)
        if info != 0 or 1.0 / max(np.sum(Li * Li), 1e-300) <= 1e-10 * np.trace(A[g]):
            rest.append(g)
            continue
        w = Li @ v[g]
        value[g] = 0.5 * e[g] - 0.5 * float(w @ w)
        x[g] = Li.T @ w
    if radius is not None:
        out = np.sum(x * x, axis=1) > radius**2
        out[rest] = False                      # those rows of x are not computed
        rest = sorted(rest + np.flatnonzero(out).tolist())
    if rest:
        r = np.asarray(rest)
        value[r], x[r] = quadratic_min(A[r], v[r], e[r], radius, return_x=True)
    return value, x


def quadratic_min_rows(B: np.ndarray, z: np.ndarray, e: np.ndarray, radius: float | None = None,
                       K: np.ndarray | None = None):
    """:func:`quadratic_min` for A = BᵀB, v = Bᵀz given the n rows of B, n < d: through the n × n Gram.

    B : (G, n, d) (weighted sample rows: √w_i a_i); z : (G, n) (√w_i y_i);
    e : (G,); K : (G, n, n), optional: the Gram BBᵀ if already known (e.g.
    kept up to date row block by row block, :class:`RowStats`). Returns
    (value (G,), x (G, d)), the minimum of ½ xᵀAx − vᵀx + ½e over
    ‖x‖ ≤ radius and the minimum-norm minimiser.

    A's nonzero eigenvalues are those of K = BBᵀ = UΛUᵀ, with eigenvectors
    q_k = Bᵀu_k/√λ_k and coordinates of v on them √λ_k (u_kᵀz); the solution
    is then that of :func:`quadratic_min` in this basis (same 10⁻¹⁰ λ_max
    cut, same bisection on the ball), and x = BᵀU(x̃/√λ). Cost O(n²d + n³)
    per matrix (O(n³ + nd) given K) against O(d³): the least-squares
    comparators while there are fewer samples than features.
    """
    if K is None:
        K = np.matmul(B, B.transpose(0, 2, 1))
    lam, U = np.linalg.eigh(K)
    lam = np.maximum(lam, 0.0)
    root = np.sqrt(lam)
    vt = root * np.einsum("gnk,gn->gk", U, z)
    value, xt = _spectral_min(lam, vt, e, radius)
    coef = np.divide(xt, root, out=np.zeros_like(xt), where=xt != 0)
    x = np.einsum("gnd,gn->gd", B, np.einsum("gnk,gk->gn", U, coef))
    return value, x


ROW_SPACE_MIN_DIM = 128   # d above which least-squares statistics start as rows (below: d × d from the start)


class RowStats:
    """The statistics A_g = B_gᵀB_g, v_g = B_gᵀz_g of G stacks of weighted rows, as rows while they are fewer than d.

    Least squares over rows (√w_i a_i, √w_i y_i) needs only A = Σ w a aᵀ
    (d × d) and v = Σ w a y. While a stack has n < d rows, the rows B
    (n × d) are smaller and give the same minimum through the n × n Gram
    K = BBᵀ (:func:`quadratic_min_rows`), and the same λ_max(A) = λ_max(K).
    Three ways to hold the statistics:

    * ``rows=True, sums=False`` (wide tables): the rows and K, kept up to
      date block by block (O(n k d) for k new rows); when the rows reach d,
      A = BᵀB and v = Bᵀz once (O(d³)) and the rows are dropped;
    * ``rows=True, sums=True``: A and v from the start, and the rows too
      while fewer than d, for cheaper solves (K formed at each solve);
    * ``rows=False``: A and v only.

    The callers add to A and v with their own sums (:meth:`add`), so a
    d × d path adds in the order it always did.

    Parameters
    ----------
    n_groups : int
        G, the number of stacks (1 for the network, M for the clients); the
        stacks share the row count (a zero row where a client was absent).
    n_features : int
        d.
    rows, sums : bool
        See above.
    targets : bool
        Keep z and v (False: A only, e.g. a second moment of the features).

    Memory: G·n·(d + n) floats in row space (n < d), G·d² with A.

    Examples
    --------
    >>> import numpy as np
    >>> s = RowStats(1, 3)
    >>> s.add(2, rows=(np.array([[[1.0, 0.0, 0.0], [0.0, 2.0, 0.0]]]), np.array([[1.0, 2.0]])))
    >>> s.in_rows, s.n_rows, float(s.lam_max()[0])
    (True, 2, 4.0)
    >>> value, x = s.solve(np.array([7.0]))       # x = (1, 1, 0) fits both rows: ½(e − ‖z‖²) = 1
    >>> float(value[0]), x[0].tolist()
    (1.0, [1.0, 1.0, 0.0])
    >>> s.add(1, rows=(np.array([[[0.0, 0.0, 3.0]]]), np.array([[3.0]])))   # 3 rows = d: A and v from now on
    >>> s.in_rows, s.A[0].diagonal().tolist(), s.v[0].tolist()
    (False, [1.0, 4.0, 9.0], [1.0, 4.0, 9.0])
    """

    def __init__(self, n_groups: int, n_features: int, rows: bool = True, sums: bool = False, targets: bool = True):
        G, d = n_groups, n_features
        self.G, self.d, self.targets = G, d, targets
        self.n_rows = 0
        self.B = self.z = self.K = self.A = self.v = None
        self._gram = rows and not sums              # K kept up to date (else formed at each solve)
        if rows:
            self.B = np.zeros((G, 0, d))
            self.z = np.zeros((G, 0)) if targets else None
            self.K = np.zeros((G, 0, 0)) if self._gram else None
        if sums or not rows:
            self.A = np.zeros((G, d, d))
            self.v = np.zeros((G, d)) if targets else None

    @property
    def in_rows(self) -> bool:
        """Whether the rows are held (fewer than d of them): solves and λ_max go through them."""
        return self.B is not None

    @property
    def wants_sums(self) -> bool:
        """Whether :meth:`add` needs the block's sums (A is held)."""
        return self.A is not None

    def add(self, k: int, rows=None, sums=None) -> None:
        """Add a block of k rows to every stack.

        rows : (B (G, k, d), z (G, k) or None), needed while :attr:`in_rows`;
        sums : (BᵀB (G, d, d), Bᵀz (G, d) or None), needed when
        :attr:`wants_sums`. When the rows reach d and A is not held, A and v
        are formed from all rows; the rows are dropped then.
        """
        if self.A is not None:
            self.A += sums[0]
            if self.targets:
                self.v += sums[1]
        if self.B is not None and k:
            B, z = rows
            n = self.n_rows
            if n + k >= self.d:                   # A (d × d) is no bigger than the rows now
                if self.A is None:
                    Ball = np.concatenate([self.B, B], axis=1)
                    self.A = np.matmul(Ball.transpose(0, 2, 1), Ball)
                    if self.targets:
                        self.v = np.einsum("gnd,gn->gd", Ball, np.concatenate([self.z, z], axis=1))
                self.B = self.z = self.K = None
            else:
                if self._gram:
                    cross = np.matmul(self.B, B.transpose(0, 2, 1))                   # (G, n, k)
                    K = np.empty((self.G, n + k, n + k))
                    K[:, :n, :n] = self.K
                    K[:, :n, n:] = cross
                    K[:, n:, :n] = cross.transpose(0, 2, 1)
                    K[:, n:, n:] = np.matmul(B, B.transpose(0, 2, 1))
                    self.K = K
                self.B = np.concatenate([self.B, B], axis=1)
                if self.targets:
                    self.z = np.concatenate([self.z, z], axis=1)
        self.n_rows += k

    def add_weighted(self, X: np.ndarray, w: np.ndarray, y: np.ndarray | None = None) -> None:
        """Add samples a_i (X (N, d)) with weights w_i ≥ 0 (N,) (and targets y (N,)) to a single stack (G = 1).

        Rows √w_i a_i (√w_i y_i) of positive weight while the rows are held;
        sums Xᵀ diag(w) X and Xᵀ(w y) while A is.
        """
        keep = w > 0
        rows = sums = None
        if self.in_rows:
            sw = np.sqrt(w[keep])
            rows = ((X[keep] * sw[:, None])[None], None if y is None else (sw * y[keep])[None])
        if self.wants_sums:
            sums = ((X.T @ (X * w[:, None]))[None], None if y is None else (X.T @ (w * y))[None])
        self.add(int(np.count_nonzero(keep)), rows, sums)

    def solve(self, e: np.ndarray, radius: float | None = None):
        """min_{‖x‖ ≤ radius} ½ xᵀA_gx − v_gᵀx + ½e_g for every stack: (value (G,), x (G, d)).

        :func:`quadratic_min`'s minimum and minimum-norm minimiser: through
        the Gram while the rows are held (:func:`quadratic_min_rows`), else
        by Cholesky where exact (:func:`quadratic_min_cholesky`), in batches
        of at most 2²⁴ matrix entries.
        """
        G, d = self.G, self.d
        if self.in_rows:
            if self.n_rows == 0:
                return 0.5 * np.asarray(e, dtype=float), np.zeros((G, d))
            return quadratic_min_rows(self.B, self.z, e, radius, K=self.K)
        per = max(1, min(G, (1 << 24) // max(1, d * d)))
        value, x = np.empty(G), np.empty((G, d))
        for i in range(0, G, per):
            j = min(G, i + per)
            value[i:j], x[i:j] = quadratic_min_cholesky(self.A[i:j], self.v[i:j], e[i:j], radius)
        return value, x

    def lam_max(self, scale: float = 1.0) -> np.ndarray:
        """λ_max(A_g / scale) for every stack (G,): of the n × n Gram while the rows are held (the same
        nonzero spectrum), else of A."""
        if self.in_rows:
            if self.n_rows == 0:
                return np.zeros(self.G)
            K = self.K if self.K is not None else np.matmul(self.B, self.B.transpose(0, 2, 1))
            return np.linalg.eigvalsh(K / scale)[:, -1]
        return np.linalg.eigvalsh(self.A / scale)[:, -1]


def refresh_steps(t0: int, n: int, every: int, extra=()) -> list[int]:
    """Offsets (1..n) inside steps t0+1..t0+n at which an exact solve is made.

    Exact steps: every step when ``every`` = 1; otherwise t ≤ 16, the powers of
    two below ``every``, the multiples of ``every`` and the steps in ``extra``
    (the tracker passes its checkpoints and T). Absolute step numbers only, so
    the values do not depend on chunking or on the machine's speed.

    >>> refresh_steps(0, 40, 1024)
    [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 32]
    >>> refresh_steps(1000, 100, 1024, extra=[1100])
    [24, 100]
    """
    if every <= 1:
        return list(range(1, n + 1))
    marks = {t for t in range(t0 + 1, min(t0 + n, 16) + 1)}
    p = 32
    while p < every:
        if t0 < p <= t0 + n:
            marks.add(p)
        p *= 2
    first = (t0 // every + 1) * every
    marks.update(range(first, t0 + n + 1, every))
    marks.update(int(t) for t in extra if t0 < t <= t0 + n)
    return sorted(t - t0 for t in marks)


class LeastSquaresHindsight:
    """Best-fixed-model comparator for the squared loss, from running sufficient statistics.

    Tracks the network (weights c_{t,m}) and, when ``per_client``, each client
    alone (weight 1 per step it is present), through A = Σ c a aᵀ/b,
    v = Σ c a y/b and e = Σ c y²/b (:class:`RowStats`). With ``row_space``
    (wide tables), each is held as its weighted rows while they are fewer
    than d and as A, v after: memory min(N, d)·d floats for the network's N
    rows, M·min(n, d)·d for the clients' n rows each; otherwise (M + 1) d²
    floats with clients, d² without. Constant in T.

    Exact at the *refresh steps* (:func:`refresh_steps`: every step with
    ``refresh_every = 1``; otherwise t ≤ 16, powers of two, multiples of
    ``refresh_every``, and the ``extra`` steps such as checkpoints and T),
    where min_{‖x‖≤D} ½ xᵀAx − vᵀx + ½e is solved (:func:`quadratic_min`'s
    minimum and minimum-norm minimiser: through the n × n Gram in row space,
    by Cholesky where exact after). In between, the value is *warm*: the
    exact minimum at the last refresh r plus the losses Σ_{r<s≤t} f_s(x̂_r)
    of that refresh's minimiser — an upper bound on the exact comparator loss
    (so a live regret that is a lower bound on the exact one), exact again at
    the next refresh.

    Costs: in row space O(N k d) per k new rows (the Gram's new entries) and
    O(N³ + N d) per exact solve; after, Gram sums O(M b d²) per step (one
    batched matrix product per segment between refreshes) and an exact solve
    O((M + 1) d³) per refresh, i.e. O(M d³ / refresh_every) per step on
    average after the first steps; warm values O(M b d) per step. None of it
    grows with T.

    Parameters
    ----------
    n_clients, n_features : int
    radius : float or None
        Comparator set X = {‖x‖ ≤ radius}.
    refresh_every : int
        k, the period of the exact solves (1: exact at every step).
    extra : iterable of int
        More steps at which the values are exact.
    per_client : bool
        Keep each client's statistics (False: the network only; ``update``
        returns None for the clients).
    client_extra : iterable of int or None
        None: the clients' values are exact at every refresh step, like the
        network's. Otherwise the clients are solved exactly (O(M d³)) only at
        the multiples of ``refresh_every`` and these steps; at the network's
        other refresh steps only the network is solved (O(d³)) and the
        clients' values stay warm (upper bounds, as between refreshes).
    keep_rows : bool
        Keep the clients' rows while they are fewer than d (at most M d²
        floats), for solves through the n × n Gram; False: the clients' A
        and v from the start (same values, more CPU at first).
    row_space : bool or None
        Hold the statistics as rows while they are fewer than d, and form
        A and v only when the rows reach d (the network's, and the clients'
        with ``keep_rows``): the memory and the solves of a wide table's
        run then grow with its rows, not with d². False: A and v from the
        start (the clients' first rows kept beside them with ``keep_rows``),
        the same values to rounding. None (default): row space when
        d > :data:`ROW_SPACE_MIN_DIM` (below it d × d statistics cost at
        most 128 KB and a few milliseconds per solve).

    Attributes
    ----------
    net : RowStats
        The network's statistics (one stack).
    clients : RowStats or None
        The clients' (M stacks), None without ``per_client``.

    Examples
    --------
    >>> import numpy as np
    >>> h = LeastSquaresHindsight(1, 1)
    >>> X = np.array([1.0, 1.0]).reshape(2, 1, 1, 1); y = np.array([1.0, 3.0]).reshape(2, 1, 1)
    >>> net, clients = h.update(X, y, np.ones((2, 1)), np.ones((2, 1), bool))
    >>> net            # best fixed x is 2: ½(1-2)² + ½(3-2)² = 1 after step 2
    array([0., 1.])
    """

    def __init__(self, n_clients: int, n_features: int, radius: float | None = None, refresh_every: int = 1,
                 extra=(), per_client: bool = True, client_extra=None, keep_rows: bool = True,
                 row_space: bool | None = None):
        M, d = n_clients, n_features
        self.M, self.d = M, d
        self.radius = radius
        self.refresh_every = max(1, int(refresh_every))
        self.extra = sorted(int(t) for t in extra)
        self.per_client = per_client
        # None: the clients are solved at every refresh step; else only at the multiples of refresh_every
        # and these steps (the network keeps every refresh step)
        self.client_extra = None if client_extra is None else sorted(int(t) for t in client_extra)
        self.row_space = d > ROW_SPACE_MIN_DIM if row_space is None else bool(row_space)
        G = M + 1 if per_client else 1
        # row space: the network's rows (√(c/b) a, √(c/b) y) while fewer than d, A and v after; the clients'
        # likewise (√p a, √p y, a zero row where a client is absent). Otherwise the network's A and v from
        # the start, and the clients' too, with their first rows kept beside for cheaper solves (keep_rows)
        self.net = RowStats(1, d, rows=self.row_space)
        self.clients = None
        if per_client:
            self.clients = RowStats(M, d, rows=keep_rows, sums=not (keep_rows and self.row_space))
        self.e = np.zeros(G)
        self.t = 0
        self.x = np.zeros((G, d))           # minimisers at the last refresh
        self.value = np.zeros(G)            # warm comparator values after step self.t
        self.refreshes = 0
        self.solved_at = None               # the last step after which every row was solved exactly

    def _absorb(self, X, y, c, p, cw):
        """Add a segment's statistics. X (n, M, b, d); p = present/b; cw = c/present."""
        n, M, b, d = X.shape
        Ac = None
        if self.per_client:
            Xm = np.ascontiguousarray(X.transpose(1, 0, 2, 3)).reshape(M, n * b, d)
            ym = np.ascontiguousarray(y.transpose(1, 0, 2)).reshape(M, n * b)
            w = np.repeat(p.T, b, axis=1)                                         # (M, n b)
            ec = np.einsum("nm,nmb->m", p, y * y)
            rows = sums = None
            if self.clients.in_rows:
                sw = np.sqrt(w)
                rows = (Xm * sw[..., None], sw * ym)
            if self.clients.wants_sums:
                Ac = np.matmul(Xm.transpose(0, 2, 1), Xm * w[..., None])          # (M, d, d)
                vc = np.einsum("mi,mid->md", w * ym, Xm)
                sums = (Ac, vc)
            if Ac is not None and self.net.wants_sums and not self.net.in_rows and np.all(cw == cw[:1]):
                # the network's weights per client are fixed here: its sums are the clients' weighted
                self.net.add(0, sums=(np.einsum("m,mde->de", cw[0], Ac)[None], (cw[0] @ vc)[None]))
                self.e[0] += float(cw[0] @ ec)
            else:
                self._absorb_network(X, y, c)
            self.clients.add(n * b, rows, sums)
            self.e[1:] += ec
        else:
            self._absorb_network(X, y, c)

    def _absorb_network(self, X, y, c):
        n, M, b, d = X.shape
        Xf = X.reshape(-1, d)
        w = np.repeat((c / b).reshape(-1), b)
        self.net.add_weighted(Xf, w, y.reshape(-1))      # rows of positive weight while fewer than d
        self.e[0] += float(w @ (y.reshape(-1) ** 2))

    def _step_losses(self, X, y, c, p):
        """f_s(x̂) per step for the stored minimisers: network (n,), clients (n, M) or None."""
        r = np.einsum("nmbd,d->nmb", X, self.x[0]) - y
        net = 0.5 * np.einsum("nm,nmb->n", c, r * r) / X.shape[2]
        clients = None
        if self.per_client:
            rc = np.einsum("nmbd,md->nmb", X, self.x[1:]) - y
            clients = 0.5 * p * np.sum(rc * rc, axis=2)
        return net, clients

    def solve(self):
        """Exact values now (G,) and the minimisers (G, d): the network's, then the clients'.

        Each through its n × n Gram while it has fewer than d rows
        (:func:`quadratic_min_rows`), by Cholesky where that is exact after
        (:func:`quadratic_min_cholesky`, an eigendecomposition otherwise):
        :func:`quadratic_min`'s minimum and minimum-norm minimiser either way
        (:meth:`RowStats.solve`).
        """
        value0, x0 = self.net.solve(self.e[:1], self.radius)
        if not self.per_client:
            return value0, x0
        value, x = self.clients.solve(self.e[1:], self.radius)
        return np.concatenate([value0, value]), np.concatenate([x0, x])

    def update(self, X, y, c, present, t0: int | None = None):
        """Absorb a chunk; return the comparator loss after each step.

        Parameters
        ----------
        X : (n, M, b, d); y : (n, M, b); c : (n, M) network weights;
        present : (n, M) bool; t0 : int or None — the step before the chunk
        (default: continue from the last step absorbed).

        Returns
        -------
        network : ndarray (n,)
        clients : ndarray (n, M), or None without ``per_client``

        After the call, ``self.network_lower`` (n,) holds a certified lower
        bound on the network's comparator at each step (equal to the value at
        the refresh steps), ``self.network_estimate`` (n,) the live estimate
        (the Newton step below, with A_t taken as A_r · W_t/W_r, W the
        network weight so far) and ``self.network_exact`` (n,) bool marks the
        refresh steps, where the value is exact. Between refreshes, with x̂ and
        ν the last refresh's minimiser and multiplier (ν > 0 only on the
        ball's boundary) and g_t = A_t x̂ − v_t, min_{‖x‖≤D} q_t ≥
        q_t(x̂) − ½ (g_t + ν x̂)ᵀ (A_r + ν I)⁻¹ (g_t + ν x̂): the Lagrangian
        q_t + ν(‖x‖² − D²)/2 bounds q_t below on the ball and its Hessian
        A_t + νI dominates A_r + νI (rows only add). O(d²) per step.
        """
        n, M, b, d = X.shape
        t0 = self.t if t0 is None else int(t0)
        p = present / b
        cw = np.divide(c, present, out=np.zeros_like(c, dtype=float), where=present)
        net_out = np.empty(n)
        net_low = np.empty(n)
        net_est = np.empty(n)
        exact = np.zeros(n, bool)
        wsum = getattr(self, "_weight", 0.0) + np.cumsum(np.asarray(c, dtype=float).sum(axis=1))
        cl_out = np.empty((n, M)) if self.per_client else None
        start = 0
        stops = refresh_steps(t0, n, self.refresh_every, self.extra)
        if not stops or stops[-1] != n:
            stops = stops + [n]
        refresh = set(refresh_steps(t0, n, self.refresh_every, self.extra))
        sparse = self.per_client and self.client_extra is not None
        if sparse:
            first = (t0 // self.refresh_every + 1) * self.refresh_every
            client_refresh = {t - t0 for t in range(first, t0 + n + 1, self.refresh_every)}
            client_refresh |= {t - t0 for t in self.client_extra if t0 < t <= t0 + n}
        for stop in stops:
            sl = slice(start, stop)
            if stop not in refresh or stop - start > 1 or (sparse and stop not in client_refresh):
                # warm values: the last refresh's minimisers on the new steps
                fn, fc = self._step_losses(X[sl], y[sl], c[sl], p[sl])
                net_out[sl] = self.value[0] + np.cumsum(fn)
                gap = self._gap(X[sl], y[sl], c[sl])
                net_low[sl] = net_out[sl] - gap
                # the Newton step with A_t ≈ A_r · W_t/W_r (the network weight so far against the refresh's)
                with np.errstate(invalid="ignore"):
                    net_est[sl] = net_out[sl] - gap * (getattr(self, "_bound_w", 0.0) / wsum[sl])
                if self.per_client:
                    cl_out[sl] = self.value[1:] + np.cumsum(fc, axis=0)
            self._absorb(X[sl], y[sl], c[sl], p[sl], cw[sl])
            if stop in refresh and sparse and stop not in client_refresh:
                # the network alone; the clients keep their warm values and last minimisers
                v0, x0 = self.net.solve(self.e[:1], self.radius)                                    # as solve()
                self.value = np.concatenate([v0, cl_out[stop - 1]])
                self.x[0] = x0[0]
                self.refreshes += 1
            elif stop in refresh:
                self.value, self.x = self.solve()
                self.refreshes += 1
                self.solved_at = t0 + stop          # every row exact after this step
            else:
                self.value = np.concatenate([[net_out[stop - 1]], cl_out[stop - 1]]) if self.per_client \
                    else np.array([net_out[stop - 1]])
            if stop in refresh:
                self._bound_w = float(wsum[stop - 1])
                self._refresh_bound()
                exact[stop - 1] = True
                net_low[stop - 1] = net_est[stop - 1] = self.value[0]
            net_out[stop - 1] = self.value[0]
            if self.per_client:
                cl_out[stop - 1] = self.value[1:]
            start = stop
        self.t = t0 + n
        self._weight = float(wsum[-1])
        self.network_lower = np.minimum(net_low, net_out)
        self.network_estimate = np.where(np.isfinite(net_est), np.clip(net_est, self.network_lower, net_out), net_out)
        self.network_exact = exact
        return net_out, cl_out

    def _refresh_bound(self):
        """Keep what the warm steps' lower bound needs: the factor of A_r + νI, x̂·ν and the gradient so far.

        With the network's statistics held as its N < d rows B (row space), A_r = BᵀB is singular: the
        bound needs ν > 0 (the ball binds), and (A_r + νI)⁻¹ = (I − Bᵀ(K + νI)⁻¹B)/ν (Woodbury) with
        the N × N Gram K = BBᵀ, O(N d) per step instead of a d × d factor; with ν = 0 the bound is
        −∞ (as where A_r + νI is singular otherwise).
        """
        from scipy.linalg import cho_factor
        x = self.x[0]
        self._bound_rows = None
        if self.net.in_rows:
            B, z = self.net.B[0], self.net.z[0]                  # (N, d), (N,)
            r = B @ x - z
            nu = 0.0
            if self.radius is not None:
                xx = float(x @ x)
                if xx > 0:
                    nu = max(0.0, -float((B @ x) @ r) / xx)       # x·(v − A x) = −(Bx)·(Bx − z)
            self._bound_g = B.T @ r + nu * x
            self._bound_chol = None
            if nu > 0:
                try:
                    chol = cho_factor(self.net.K[0] + nu * np.eye(len(z)), lower=True, check_finite=False)
                    if np.all(np.diag(chol[0]) > 0):
                        self._bound_rows = (chol, B, nu)
                except np.linalg.LinAlgError:
                    pass
            return
        A, v = self.net.A[0], self.net.v[0]
        nu = 0.0
        if self.radius is not None:
            xx = float(x @ x)
            if xx > 0:
                nu = max(0.0, float(x @ (v - A @ x)) / xx)
        self._bound_g = A @ x - v + nu * x           # ∇ of the Lagrangian at x̂ (0 up to rounding)
        try:
            self._bound_chol = cho_factor(A + nu * np.eye(self.d), lower=True, check_finite=False)
            if not np.all(np.diag(self._bound_chol[0]) > 0):
                self._bound_chol = None
        except np.linalg.LinAlgError:
            self._bound_chol = None

    def _gap(self, X, y, c):
        """q_t(x̂) − (certified lower bound on min q_t) at each of the steps (n,); inf before the first refresh
        or where A_r + νI is singular."""
        n, M, b, d = X.shape
        chol = getattr(self, "_bound_chol", None)
        rows = getattr(self, "_bound_rows", None)
        if chol is None and rows is None:
            return np.full(n, np.inf)
        from scipy.linalg import cho_solve
        r = (np.einsum("nmbd,d->nmb", X, self.x[0]) - y) * (c / b)[..., None]
        g = self._bound_g + np.cumsum(np.einsum("nmb,nmbd->nd", r, X), axis=0)
        self._bound_g = g[-1].copy()
        if rows is not None:
            cK, B, nu = rows
            sol = (g.T - B.T @ cho_solve(cK, B @ g.T, check_finite=False)) / nu       # (A_r + νI)⁻¹ gᵀ
        else:
            sol = cho_solve(chol, g.T, check_finite=False)
        return 0.5 * np.einsum("dn,nd->n", sol, g)


_BLOCK = 4096  # rows per partial sum in _weighted_logistic


def _numba():
    """(njit, types, read-only float64 C arrays of 1 and 2 dimensions): numba is imported by the first
    compiled solve, not with this module (a least-squares run never needs it: ~0.7 s of start-up)."""
    from numba import njit, types
    f64 = lambda ndim: types.Array(types.float64, ndim, "C", readonly=True)   # noqa: E731 (writable arrays convert)
    return njit, types, f64(1), f64(2)


def _weighted_logistic_py(theta, X, y, w):
    """Σ_i w_i (log(1 + e^{z_i}) − y_i z_i), z_i = x_i·θ, and its gradient Σ_i w_i (σ(z_i) − y_i) x_i.

    One pass over the rows of X. Each loss is the sum of the non-negative
    terms log1p(e^{−|z|}) + (1 − y) max(z, 0) + y max(−z, 0) (no overflow, no
    cancellation for y ∈ [0, 1]). The weighted losses of a block of ``_BLOCK``
    rows are buffered and summed by a vectorised (multi-accumulator) loop and
    the gradient is accumulated per block, so the rounding stays at the level
    of BLAS.
    theta : float64 (d,); X : float64 (N, d); y, w : float64 (N,), C-contiguous.
    Returns (float, float64 (d,)).
    """
    N, d = X.shape
    total, grad = 0.0, np.zeros(d)
    losses, part = np.empty(_BLOCK), np.empty(d)
    for i0 in range(0, N, _BLOCK):
        m = min(N - i0, _BLOCK)
        for k in range(d):
            part[k] = 0.0
        for j in range(m):
            i = i0 + j
            z = 0.0
            for k in range(d):
                z += X[i, k] * theta[k]
            e = math.exp(-abs(z))
            losses[j] = w[i] * (math.log1p(e) + (1.0 - y[i]) * max(z, 0.0) + y[i] * max(-z, 0.0))
            r = w[i] * ((1.0 if z >= 0 else e) / (1.0 + e) - y[i])
            for k in range(d):
                part[k] += r * X[i, k]
        block = 0.0
        for j in range(m):
            block += losses[j]
        total += block
        for k in range(d):
            grad[k] += part[k]
    return total, grad


_WEIGHTED_LOGISTIC = []   # the compiled kernel, made (loaded from numba's cache) on first use


def _weighted_logistic(theta, X, y, w):
    """:func:`_weighted_logistic_py` compiled for read-only C-contiguous float64 arrays.

    Compiled (loaded from numba's cache) at the first call rather than at
    import: a run reaches its first step without it (start-up), and only the
    logistic hindsight solves call it.
    """
    if not _WEIGHTED_LOGISTIC:
        njit, types, _F64_1, _F64_2 = _numba()
        sig = types.Tuple((types.float64, types.float64[::1]))(_F64_1, _F64_2, _F64_1, _F64_1)
        _WEIGHTED_LOGISTIC.append(njit(sig, cache=True, fastmath={"reassoc", "contract", "nsz", "arcp"},
                                       error_model="numpy")(_weighted_logistic_py))
    return _WEIGHTED_LOGISTIC[0](theta, X, y, w)


def _weighted_softmax_py(theta_t, X, y, w):
    """Σ_i w_i (logsumexp(z_i) − z_{i,y_i}), z_i = Wᵀx_i, and its gradient Σ_i w_i (softmax(z_i) − e_{y_i}) x_iᵀ.

    One pass over the rows of X, no (N, K) temporaries. theta_t : float64
    (K, d), Wᵀ (C-contiguous, so that each score and each gradient row runs
    along a row of X); X : float64 (N, d); y : float64 (N,) class indices
    0..K−1; w : float64 (N,). logsumexp is taken after subtracting the row's
    largest score (no overflow). The weighted losses of a block of ``_BLOCK``
    rows are buffered and summed as in :func:`_weighted_logistic_py`.
    Returns (float, float64 (K, d): the gradient with respect to Wᵀ).
    """
    N, d = X.shape
    K = theta_t.shape[0]
    total, grad = 0.0, np.zeros((K, d))
    losses, part = np.empty(_BLOCK), np.empty((K, d))
    z, p = np.empty(K), np.empty(K)
    for i0 in range(0, N, _BLOCK):
        m = min(N - i0, _BLOCK)
        for k in range(K):
            for j in range(d):
                part[k, j] = 0.0
        for r in range(m):
            i = i0 + r
            for k in range(K):
                acc = 0.0
                for j in range(d):
                    acc += X[i, j] * theta_t[k, j]
                z[k] = acc
            zmax = z[0]
            for k in range(1, K):
                zmax = max(zmax, z[k])
            s = 0.0
            for k in range(K):
                p[k] = math.exp(z[k] - zmax)
                s += p[k]
            yi = int(y[i])
            losses[r] = w[i] * (zmax + math.log(s) - z[yi])
            for k in range(K):
                p[k] = w[i] * p[k] / s
            p[yi] -= w[i]
            for k in range(K):
                pk = p[k]
                for j in range(d):
                    part[k, j] += pk * X[i, j]
        block = 0.0
        for r in range(m):
            block += losses[r]
        total += block
        for k in range(K):
            for j in range(d):
                grad[k, j] += part[k, j]
    return total, grad


_WEIGHTED_SOFTMAX = []    # compiled on first use, like _WEIGHTED_LOGISTIC


def _weighted_softmax(theta, X, y, w):
    """:func:`_weighted_softmax_py` compiled for read-only C-contiguous float64 arrays (on first use)."""
    if not _WEIGHTED_SOFTMAX:
        njit, types, _F64_1, _F64_2 = _numba()
        sig = types.Tuple((types.float64, types.float64[:, ::1]))(_F64_2, _F64_2, _F64_1, _F64_1)
        _WEIGHTED_SOFTMAX.append(njit(sig, cache=True, fastmath={"reassoc", "contract", "nsz", "arcp"},
                                      error_model="numpy")(_weighted_softmax_py))
    return _WEIGHTED_SOFTMAX[0](theta, X, y, w)


def weighted_loss_and_grad(task: str, theta: np.ndarray, shape, X: np.ndarray, y: np.ndarray, w: np.ndarray):
    """Σ_i w_i f(θ, x_i, y_i) and its gradient, for a flat parameter vector.

    X : (N, d); y : (N,); w : (N,); shape : (d, K). The logistic and softmax
    losses are one compiled pass over X each (:func:`_weighted_logistic`,
    :func:`_weighted_softmax`). Raises ValueError for softmax labels outside
    0..K−1.
    """
    if task == "logistic":
        return _weighted_logistic(*(np.ascontiguousarray(a, dtype=np.float64) for a in (theta, X, y, w)))
    if task == "softmax":
        # one compiled pass: scores, logsumexp(z) − z_y and the gradient Xᵀ((softmax(z) − e_y) w) per row
        Wt = np.ascontiguousarray(np.asarray(theta, dtype=np.float64).reshape(shape).T)
        yv = np.ascontiguousarray(y, dtype=np.float64)
        if len(yv) and not (0 <= yv.min() and yv.max() < shape[1]):
            raise ValueError(f"class labels must lie in 0..{shape[1] - 1}; got {yv.min():g}..{yv.max():g}")
        total, grad_t = _weighted_softmax(Wt, *(np.ascontiguousarray(a, dtype=np.float64) for a in (X, yv, w)))
        return total, grad_t.T.ravel()
    loss_fn = get_loss(task)            # least squares (and a ValueError for an unknown task)
    W = theta.reshape(shape)[None]
    loss, _ = loss_fn(W, X[None], y[None], with_grad=False)
    r = ((X @ W[0])[:, 0] - y) * w
    return float(np.dot(w, loss[0])), (X.T @ r).ravel()


def solve_hindsight(task: str, blocks, shape, radius: float | None = None, x0: np.ndarray | None = None):
    """Exact min_{x ∈ X} Σ_i w_i f(x, ξ_i) over a recorded stream.

    Parameters
    ----------
    task : str
    blocks : callable returning an iterable of (X (N, d), y (N,), w (N,))
        Called once per objective evaluation, so the stream may live on disk.
    shape : tuple (d, K)
    radius : float or None
    x0 : ndarray (d*K,) or None — warm start.

    Returns
    -------
    x : ndarray (d*K,)
    value : float

    Raises
    ------
    RuntimeError
        If the solver fails to converge.
    """

    def fun(theta):
        total, grad = 0.0, np.zeros_like(theta)
        for X, y, w in blocks():
            f, g = weighted_loss_and_grad(task, theta, shape, X, y, w)
            total += f
            grad += g
        return total, grad

    from scipy.optimize import brentq, minimize      # here, not at import: start-up a run does not need
    theta0 = np.zeros(int(np.prod(shape))) if x0 is None else np.asarray(x0, dtype=np.float64)
    options = {"maxiter": 2000, "gtol": 1e-10, "ftol": 1e-15}
    res = minimize(fun, theta0, jac=True, method="L-BFGS-B", options=options)
    x, value = res.x, float(res.fun)
    if radius is not None and np.linalg.norm(x) > radius:
        # the ball binds: x(λ) = argmin F + (λ/2)‖x‖² has ‖x(λ)‖ decreasing in λ, and the constrained minimiser
        # is x(λ*) with ‖x(λ*)‖ = D (KKT). λ* by Brent's method on 1/‖x(λ)‖ − 1/D (nearly linear in λ), each
        # x(λ) by L-BFGS warm-started from the last; the minimiser is then put exactly on the sphere, so the
        # value is that of a feasible point (SLSQP's had been a little outside the ball, 5e-5 nats below)
        state = {"x": x * (radius / np.linalg.norm(x))}

        def solve(lam):
            def ridge(th):
                f, g = fun(th)
                return f + 0.5 * lam * float(th @ th), g + lam * th
            state["x"] = minimize(ridge, state["x"], jac=True, method="L-BFGS-B", options=options).x
            return 1.0 / max(np.linalg.norm(state["x"]), 1e-300) - 1.0 / radius

        g0 = np.linalg.norm(fun(np.zeros_like(x))[1])
        hi = max(2.0 * g0 / radius, 1e-12)
        while solve(hi) < 0 and hi < 1e300:          # ‖x(hi)‖ still above D
            hi *= 4.0
        lam = brentq(solve, 0.0, hi, xtol=1e-15, rtol=1e-13, maxiter=200)
        solve(lam)
        x = state["x"] * (radius / max(np.linalg.norm(state["x"]), 1e-300))
        value = float(fun(x)[0])
    if not np.isfinite(value):
        raise RuntimeError(f"The hindsight comparator solver failed: {res.message}")
    return x, value


CLIENT_NEWTON_MAX_DIM = 32   # batched per-client Newton up to this d (its Hessians cost d² per sample)


def _logistic_clients_py(theta, X, y, w, value, grad, hess, with_hess):
    """Add every client's Σ_i w_i f, gradient and (lower triangle of the) Hessian over one block of steps.

    theta (M, d); X (n, M, b, d); y, w (n, M, b); value (M,), grad (M, d) and
    hess (M, d, d) are accumulated in place. The loss is log1p(e^{−|z|}) +
    (1 − y) max(z, 0) + y max(−z, 0), as in :func:`_weighted_logistic_py`;
    samples of weight 0 are skipped.
    """
    n, M, b, d = X.shape
    for i in range(n):
        for m in range(M):
            for j in range(b):
                wi = w[i, m, j]
                if wi == 0.0:
                    continue
                z = 0.0
                for k in range(d):
                    z += X[i, m, j, k] * theta[m, k]
                e = math.exp(-abs(z))
                yi = y[i, m, j]
                value[m] += wi * (math.log1p(e) + (1.0 - yi) * max(z, 0.0) + yi * max(-z, 0.0))
                p = (1.0 if z >= 0 else e) / (1.0 + e)
                r = wi * (p - yi)
                for k in range(d):
                    grad[m, k] += r * X[i, m, j, k]
                if with_hess:
                    h = wi * p * (1.0 - p)
                    for k in range(d):
                        hk = h * X[i, m, j, k]
                        for l in range(k + 1):
                            hess[m, k, l] += hk * X[i, m, j, l]


_LOGISTIC_CLIENTS = []   # compiled on first use (numba's cache), like _WEIGHTED_LOGISTIC


def _logistic_pass(theta, blocks, hessian: bool = True):
    """Σ_i w_i f, its gradient and Hessian for every client at once (one pass over the blocks).

    theta : (M, d); blocks : callable yielding (X (n, M, b, d), y (n, M, b), w (n, M, b)) of whole steps.
    Returns value (M,), gradient (M, d), Hessian (M, d, d) or None; one compiled
    loop over the samples (:func:`_logistic_clients_py`).
    """
    if not _LOGISTIC_CLIENTS:
        njit = _numba()[0]
        _LOGISTIC_CLIENTS.append(njit(cache=True, error_model="numpy")(_logistic_clients_py))
    M, d = theta.shape
    theta = np.ascontiguousarray(theta, dtype=np.float64)
    value, grad = np.zeros(M), np.zeros((M, d))
    hess = np.zeros((M, d, d))
    for X, y, w in blocks():
        _LOGISTIC_CLIENTS[0](theta, np.ascontiguousarray(X, dtype=np.float64),
                             np.ascontiguousarray(y, dtype=np.float64), np.ascontiguousarray(w, dtype=np.float64),
                             value, grad, hess, hessian)
    if not hessian:
        return value, grad, None
    low = np.tril(hess)
    return value, grad, low + np.transpose(np.tril(hess, -1), (0, 2, 1))


def solve_hindsight_clients(blocks, n_clients: int, dim: int, x0: np.ndarray | None = None, max_passes: int = 200,
                            gtol: float = 1e-10):
    """Each client's exact logistic hindsight comparator, all clients at once (damped Newton, vectorised).

    min_θ Σ_i w_i f(θ, ξ_i) over each client's own recorded samples, for all M
    clients together: every iteration is one pass over the recorded stream
    computing all clients' values, gradients and d × d Hessians, one batched
    linear solve, and a per-client backtracking (Armijo) step; no Python loop
    over clients. The same problem as :func:`solve_hindsight` per client
    (whose L-BFGS-B stops at a projected gradient of 1e-10); here a client
    converges when max |gradient| ≤ ``gtol``.

    Parameters
    ----------
    blocks : callable yielding (X (n, M, b, d), y (n, M, b), w (n, M, b))
        Whole steps of the recorded stream in order; w is each sample's weight (0 when absent).
    n_clients, dim : int
        M and d.
    x0 : ndarray (d,) or (M, d), optional
        Warm start (default 0).
    max_passes : int
        Passes over the blocks at most (Newton steps and halved trial steps).

    Returns
    -------
    x : ndarray (M, d)
    value : ndarray (M,)
    converged : ndarray (M,) bool
        False where the gradient did not reach ``gtol`` (e.g. separable
        samples: no finite minimiser); the caller solves those clients one
        by one with :func:`solve_hindsight`.
    """
    M, d = n_clients, dim
    theta = np.zeros((M, d)) if x0 is None else np.array(np.broadcast_to(x0, (M, d)), dtype=np.float64)
    f, g, H = _logistic_pass(theta, blocks)
    eye = np.eye(d)
    alpha = np.ones(M)
    step = np.zeros((M, d))

    def direction(g, H, rows):
        Hr = H[rows] + eye * (1e-14 * np.maximum(np.trace(H[rows], axis1=1, axis2=2), 1e-300))[:, None, None]
        return -np.linalg.solve(Hr, g[rows][..., None])[..., 0]

    done = np.max(np.abs(g), axis=1) <= gtol
    active = ~done
    if active.any():
        step[active] = direction(g, H, active)
    for _ in range(max_passes):
        if not active.any():
            break
        trial = theta.copy()
        trial[active] += alpha[active, None] * step[active]
        ft, gt, Ht = _logistic_pass(trial, blocks)
        slope = np.einsum("md,md->m", g, step)
        # Armijo; near the minimum, where the predicted decrease is below the rounding of f, a step that
        # lowers the largest gradient component is taken instead (f alone cannot tell the steps apart there)
        flat = -alpha * slope <= 64 * np.finfo(float).eps * (np.abs(f) + 1.0)
        lower = np.max(np.abs(gt), axis=1) < np.max(np.abs(g), axis=1)
        ok = active & ((ft <= f + 1e-4 * alpha * slope + 4 * np.finfo(float).eps * np.abs(f)) | (flat & lower))
        theta[ok], f[ok], g[ok], H[ok] = trial[ok], ft[ok], gt[ok], Ht[ok]
        alpha[ok] = 1.0
        alpha[active & ~ok] *= 0.5
        done |= ok & (np.max(np.abs(g), axis=1) <= gtol)
        stalled = active & ~ok & (alpha < 1e-12)
        active = active & ~done & ~stalled
        again = ok & active
        if again.any():
            step[again] = direction(g, H, again)
    return theta, f, done


class ReservoirHindsight:
    """Live estimate of the hindsight comparator for non-quadratic losses.

    Parameters
    ----------
    task : {"logistic", "softmax"}
    shape : tuple (d, K)
    size : int
        R, the reservoir size (samples kept; memory O(R d)).
    radius : float or None
    seed : int
    """

    def __init__(self, task: str, shape, size: int = 4096, radius: float | None = None, seed: int = 0):
        self.task, self.shape, self.size, self.radius = task, shape, size, radius
        self.rng = np.random.default_rng(seed)
        d = shape[0]
        self.X = np.empty((0, d))
        self.y = np.empty(0)
        self.keys = np.empty(0)
        self.theta = np.zeros(int(np.prod(shape)))
        self.lo = np.empty(0)
        self.mean_gap = np.nan
        self.total_weight = 0.0
        self.total_loss = 0.0

    def update(self, X, y, c, learner_loss, refit: bool = True):
        """Absorb steps; return the estimated comparator loss after each step.

        Parameters
        ----------
        X : (n, M, b, d); y : (n, M, b); c : (n, M) network weights;
        learner_loss : (n, M) the learner's mini-batch loss f(x_{t,m}, ξ_{t,m}).
        refit : bool
            Refit x̂ on the reservoir after absorbing these steps.

        Returns
        -------
        ndarray (n,): Σ_{s≤t} Σ_m c f(x_{s,m}, ξ_{s,m}) minus the estimated regret,
        using the latest fit made *before* these steps (NaN before the first fit).
        """
        n, M, b, d = X.shape
        w = np.repeat((c / b)[..., None], b, axis=2).reshape(-1)
        lo = np.repeat(learner_loss[..., None], b, axis=2).reshape(-1)
        cum_w = self.total_weight + np.cumsum(c.sum(axis=1))
        cum_l = self.total_loss + np.cumsum(np.einsum("nm,nm->n", c, learner_loss))
        self.total_weight, self.total_loss = cum_w[-1], cum_l[-1]
        estimate = cum_l - cum_w * self.mean_gap
        keep = np.flatnonzero(w > 0)
        keys = self.rng.random(w.shape)[keep] ** (1.0 / w[keep])
        allk = np.concatenate([self.keys, keys])
        if len(allk) > self.size:           # the R largest keys in O(N), then sorted (same order as a full sort)
            top = np.argpartition(-allk, self.size - 1)[: self.size]
            top = top[np.argsort(-allk[top], kind="stable")]
        else:
            top = np.argsort(-allk, kind="stable")
        # only the R kept rows are gathered (not the whole chunk copied first): top < R0 are old
        # reservoir rows, the others the chunk's rows keep[top − R0]
        old, R0 = top < len(self.keys), len(self.keys)
        new = keep[top[~old] - R0]
        Xn = np.empty((len(top), d))
        Xn[old], Xn[~old] = self.X[top[old]], X.reshape(-1, d)[new]
        yn = np.empty(len(top))
        yn[old], yn[~old] = self.y[top[old]], y.reshape(-1)[new]
        lon = np.empty(len(top))
        lon[old], lon[~old] = self.lo[top[old]], lo[new]
        self.X, self.y, self.lo = Xn, yn, lon
        self.keys = allk[top]
        if refit and len(self.y):
            uw = np.full(len(self.y), 1.0 / len(self.y))
            self.theta, mean_comp = solve_hindsight(
                self.task, lambda: [(self.X, self.y, uw)], self.shape, self.radius, x0=self.theta)
            self.mean_gap = float(np.mean(self.lo)) - mean_comp
        return estimate


def is_refit_step(t: int, every: int) -> bool:
    """Whether the reservoir is refitted at step t: t = 16, 32, 64, … below ``every``, or t a multiple of it.

    Absolute step numbers, so the live estimate does not depend on chunking.

    >>> [t for t in range(1, 3000) if is_refit_step(t, 1024)]
    [16, 32, 64, 128, 256, 512, 1024, 2048]
    """
    every = max(1, int(every))
    if t % every == 0:
        return True
    return 16 <= t < every and t & (t - 1) == 0


def refit_points(t0: int, n: int, every: int = 256) -> list[int]:
    """Offsets (1..n) inside steps t0+1..t0+n after which the reservoir is refitted.

    Refits happen at steps 16, 32, 64, … (powers of two below ``every``) and
    then every ``every`` steps (:func:`is_refit_step`), on absolute step
    numbers, so the live estimate does not depend on chunking. The last
    offset n closes the segment (a refit only if it is a mark).

    >>> refit_points(0, 300)
    [16, 32, 64, 128, 256, 300]
    >>> refit_points(300, 300)
    [212, 300]
    >>> refit_points(0, 600, every=1024)
    [16, 32, 64, 128, 256, 512, 600]
    """
    marks = [t for t in (1 << k for k in range(4, 63)) if t < every and t0 < t <= t0 + n]
    first = max(every, (t0 // every + 1) * every)
    marks += list(range(first, t0 + n + 1, every))
    points = sorted(m - t0 for m in set(marks))
    if not points or points[-1] != n:
        points.append(n)             # close the segment; refit only at real marks
    return points
