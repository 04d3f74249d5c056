"""The live static comparator of the logistic loss, with a certified bracket at every step.

The static comparator after step t is C_t = min_x F_t(x), with
F_t(x) = Σ_{s≤t} Σ_m c_{s,m} (1/b) Σ_j ℓ(a_{s,m,j}·x, y_{s,m,j}) the network's
cumulative loss (ℓ the logistic loss in nats; FedSEA eq. (3) with the
realised losses). Solving it exactly at every step costs a convex solve over
the whole stream per step. :class:`LogisticBracket` instead keeps, exactly and
in O(M b d²) per step (no pass over the past):

* S = F_t(x_c), G = ∇F_t(x_c) at a *centre* x_c,
* H = ∇²F_t(x_a) at an *anchor* x_a (updated one sub-block of steps behind),
* ε = max_i |a_i·(x_c − x_a)| and R = max_i ‖a_i‖ over the rows seen,

and from them a certified interval [L_t, U_t] ∋ C_t at every step, through
the generalised self-concordance of the logistic loss (Bach, "Self-concordant
analysis for logistic regression", EJS 2010, Proposition 1): for
g(τ) = F(x + τv), |g'''| ≤ R‖v‖ g'', hence for every v

    F(x+v) ≥ F(x) + ∇F·v + vᵀ∇²F v · ψ₋(R‖v‖),   ψ₋(r) = (e^{−r} + r − 1)/r²,
    F(x+v) ≤ F(x) + ∇F·v + vᵀ∇²F v · ψ₊(R‖v‖),   ψ₊(r) = (e^{r} − r − 1)/r²,

and, per row, ℓ''(z + δ) ∈ [e^{−|δ|}, e^{|δ|}] ℓ''(z), so that
e^{−ε} H ⪯ ∇²F(x_c) ⪯ e^{ε} H.

* **Upper bound.** U_t = min_α S + α G·Δ + α² e^{ε} ψ₊(αR‖Δ‖) ΔᵀH_tΔ at the
  quasi-Newton direction Δ = −H_s⁻¹ G (H_s: the Hessian at the start of the
  current sub-block; ΔᵀH_tΔ exact, O(M b d) per step): the loss of a point,
  bounded above.
* **Lower bound.** With H̄ = e^{−ε} H_s ⪯ ∇²F(x_c), λ̄² = GᵀH̄⁻¹G and
  κ̄ = R/√λ_min(H̄): if ν ψ₋(κ̄ν) > λ̄, F exceeds S on the H̄-sphere of radius
  ν, so by convexity its minimiser lies inside, where F ≥ S − λ̄²/(4ψ₋(κ̄ν)).
  The smallest such ν gives L_t = S − λ̄ν/4. Also C_t ≥ C_{t'} for t' < t
  (losses are ≥ 0), so L_t is the running maximum.
* **Estimate** (the live value): the quadratic model's minimum along Δ,
  S − ½ (G·Δ)²/ΔᵀH_tΔ, clipped into [L_t, U_t].

When the bracket grows wider than its tolerance (the stream shifted, or the
centre is stale), the centre moves to the bound's minimiser x_c + αΔ: one pass
over the recorded stream recomputes S, G and ε exactly (O(N d)); when ε
exceeds ``eps_max`` the anchor moves too and H is rebuilt (O(N d²)). At the
*exact steps* (the tracker's checkpoints and T) the centre is moved until the
bracket is narrower than ``exact_tol`` (each move a damped quasi-Newton step:
linear convergence at rate about ε, quadratic after a re-anchor). Everything
happens at absolute step numbers, so the values do not depend on chunking.

Costs per step: O(M b d²) for H, O(M b d k) for the bound's quadratic form
(k = ``block`` steps per sub-block), O(d²) for the bounds; one Cholesky
(O(d³)) per sub-block; plus the moves, each one pass over the stream so far.
"""

from __future__ import annotations

import math

import numpy as np

from .heterogeneity import running_sum

#: quasi-Newton step lengths tried by the upper bound (the minimiser of the bound over α is kept)
_ALPHAS = np.array([0.0, 0.25, 0.5, 0.7, 0.85, 1.0, 1.15, 1.35, 1.6, 2.0])

#: r: the bottom eigenpairs of H kept for the rows' leverage bounds
LEVERAGE_RANK = 8
#: rows per piece of a pass over the recording (rounded to whole steps): the piece stays in cache between
#: its two matrix products, about 1.7× faster than whole chunks at d = 100
_PASS_ROWS = 2048


def psi_minus(r: np.ndarray) -> np.ndarray:
    """ψ₋(r) = (e^{−r} + r − 1)/r² for r ≥ 0 (½ at 0; decreasing to 0), elementwise."""
    r = np.asarray(r, dtype=np.float64)
    small = r < 1e-4
    rs = np.where(small, 1.0, r)
    out = (np.expm1(-rs) + rs) / (rs * rs)
    return np.where(small, 0.5 - r / 6.0 + r * r / 24.0, out)


def psi_plus(r: np.ndarray) -> np.ndarray:
    """ψ₊(r) = (e^{r} − r − 1)/r² for r ≥ 0 (½ at 0; increasing), elementwise; inf where e^r overflows."""
    r = np.asarray(r, dtype=np.float64)
    small = r < 1e-4
    rs = np.where(small, 1.0, np.minimum(r, 700.0))
    out = (np.expm1(rs) - rs) / (rs * rs)
    out = np.where(r > 700.0, np.inf, out)
    return np.where(small, 0.5 + r / 6.0 + r * r / 24.0, out)


def sc_lower_gap(lam: np.ndarray, kappa) -> np.ndarray:
    """The certified gap S − C from the Newton decrement: λ̄ν/4 with ν the smallest root of ν ψ₋(κν) = λ̄.

    ``lam`` λ̄ ≥ 0 (the decrement in the metric H̄, √nats) and ``kappa`` κ̄ = max_i ‖a_i‖_{H̄⁻¹} ≥ 0
    (a float or an array of ``lam``'s shape). Returns the gap (nats, ``lam``'s shape): C ≥ S − gap;
    ``inf`` where no certificate exists (λ̄κ̄ ≥ 1). With u = κ̄ν the root solves
    φ(u) = 1 − (1 − e^{−u})/u = ρ := λ̄κ̄, φ increasing and concave from 0 to 1. Newton's iteration from
    Newton's iteration, kept inside the root's bracket [2ρ, 1/(1 − ρ)], reaches the root to rounding;
    the radius is then pushed up until φ(u) ≥ ρ holds in floating point (a valid certificate). As κ̄ → 0
    the gap tends to λ̄²/2, the quadratic model's.
    """
    lam = np.asarray(lam, dtype=np.float64)
    kappa = np.broadcast_to(np.asarray(kappa, dtype=np.float64), lam.shape)
    rho = lam * kappa
    ok = rho < 1.0
    r = np.where(ok, rho, 0.5)

    def phi_dphi(u):
        us = np.maximum(u, 1e-6)
        em = np.exp(-us)
        phi = np.where(u < 1e-6, 0.5 * u, 1.0 - (1.0 - em) / us)
        dphi = np.where(u < 1e-6, 0.5, (1.0 - em - us * em) / (us * us))
        return phi, dphi

    # the root lies in [2ρ, 1/(1 − ρ)] (φ(u) ≤ u/2 and φ(u) ≥ 1 − 1/u); Newton from the larger of 2ρ and
    # 1/(1 − ρ) − 1 (near the root in both regimes), kept inside the bracket
    lo_u, hi_u = 2.0 * r, 1.0 / (1.0 - r)
    u = np.maximum(lo_u, hi_u - 1.0)
    for _ in range(12):
        phi, dphi = phi_dphi(u)
        u = np.clip(u - (phi - r) / dphi, lo_u, hi_u)
    # a valid radius needs φ(u) ≥ ρ: step up past the rounding of the last iterate, by bisection if need be
    phi, _ = phi_dphi(u)
    up = u * (1.0 + 4e-16) + 1e-300
    for _ in range(60):
        short = phi < r
        if not short.any():
            break
        u = np.where(short, np.minimum(hi_u, u + (up - u) * 2.0), u)
        up = u * (1.0 + 4e-16) + 1e-300
        phi, _ = phi_dphi(u)
    u = u * (1.0 + 1e-12)                          # a margin far above the rounding of φ
    tiny = kappa < 1e-300
    with np.errstate(divide="ignore", invalid="ignore"):
        gap = np.where(tiny, 0.5 * lam * lam * (1.0 + 1e-12), lam * u / (4.0 * np.where(tiny, 1.0, kappa)))
    return np.where(ok, gap, np.inf)


def logistic_terms(z: np.ndarray, y: np.ndarray):
    """Per-row logistic loss ℓ(z, y) = log(1 + e^z) − y z (nats), ℓ' = σ(z) − y and ℓ'' = σ(z)(1 − σ(z)).

    z, y : arrays of one shape (y ∈ [0, 1]). Returns (ℓ, ℓ', ℓ''), each of z's shape; computed as
    log1p(e^{−|z|}) + max(z, 0) − y z (no overflow).
    """
    e = np.exp(-np.abs(z))
    loss = np.log1p(e) + np.maximum(z, 0.0) - y * z
    inv = 1.0 / (1.0 + e)
    sig = np.where(z >= 0, inv, e * inv)
    return loss, sig - y, e * inv * inv


class _Recording:
    """The stream so far as step-major rows in fixed pages: features (N, d), labels, weights, each row's
    anchor score and squared norm.

    A page holds the same steps whatever the chunk size (``page_steps`` consecutive steps from step 1 on),
    so every pass over the recording adds the same numbers in the same order: ``chunk_size`` changes no
    value. Pages stay in memory while they fit in ``budget_mb``; later ones are files in ``spool_dir``, read
    back through memory maps, so the process's own memory stays bounded whatever T. A row's anchor score is
    a·x at the centre that was current when the row was absorbed (or at the point of the last Hessian pass
    over every row).
    """

    def __init__(self, d: int, budget_mb: float = 1024.0, spool_dir: str | None = None):
        self.d = d
        # pages: [t_first (1-based), steps filled, rows per step, X (rows, d), y, w, za, ‖a‖²]
        self.blocks = []
        self.n_rows = 0           # rows of the steps absorbed so far (the tracker advances it)
        self.budget = float(budget_mb) * 2**20
        self.in_memory = 0
        self.spool_dir = spool_dir
        self.files = []
        self.per = None
        self.page_steps = None

    def _page(self, t_first: int):
        import os
        import tempfile
        rows = self.page_steps * self.per
        size = rows * (self.d + 4) * 8
        if self.in_memory + size <= self.budget:
            self.in_memory += size
            X, rest = np.empty((rows, self.d)), np.empty((4, rows))
            page = [t_first, 0, self.per, X, rest[0], rest[1], rest[2], rest[3]]
        else:
            if self.spool_dir is None:
                self.spool_dir = tempfile.mkdtemp(prefix="streamfl-recording-")
            os.makedirs(self.spool_dir, exist_ok=True)
            path = os.path.join(self.spool_dir, f"page{len(self.blocks)}.bin")
            mm = np.memmap(path, dtype=np.float64, mode="w+", shape=(rows, self.d + 4))
            self.files.append(path)
            page = [t_first, 0, self.per] + [mm[:, :self.d]] + [mm[:, self.d + k] for k in range(4)]
        self.blocks.append(page)
        return page

    def add(self, t_first: int, X2: np.ndarray, y: np.ndarray, w: np.ndarray, per_step: int):
        """Copy a chunk's rows (steps t_first, t_first + 1, …) into the pages; their anchor scores and squared
        norms are filled as the steps are absorbed."""
        if self.per is None:
            self.per = per_step
            self.page_steps = max(1, _PASS_ROWS // per_step)
        n = len(y) // per_step
        done = 0
        while done < n:
            t = t_first + done
            page = self.blocks[-1] if self.blocks and self.blocks[-1][0] + self.page_steps > t else \
                self._page(t)
            k = min(n - done, page[0] + self.page_steps - t)
            i, j = (t - page[0]) * self.per, (t - page[0] + k) * self.per
            src = slice(done * self.per, (done + k) * self.per)
            page[3][i:j], page[4][i:j], page[5][i:j] = X2[src], y[src], w[src]
            page[1] = t - page[0] + k
            done += k

    def segments(self, t_first: int, t_last: int):
        """(page, first row, steps) for the steps t_first..t_last, cut at page ends."""
        t = t_first
        while t <= t_last:
            page = self.blocks[(t - 1) // self.page_steps]
            k = min(t_last - t + 1, page[0] + self.page_steps - t)
            yield page, (t - page[0]) * self.per, k
            t += k

    def rows(self, upto: int):
        """(page, stop) pairs: the rows [0, stop) of each page that belong to steps ≤ ``upto``."""
        for blk in self.blocks:
            t_first, n, per = blk[0], blk[1], blk[2]
            if t_first > upto:
                break
            yield blk, min(n, upto - t_first + 1) * per

    def close(self):
        """Delete the spilled files (the recorded rows are gone afterwards)."""
        import os
        self.blocks = []
        for path in self.files:
            try:
                os.remove(path)
            except OSError:
                pass
        self.files = []
        if self.spool_dir is not None and os.path.isdir(self.spool_dir) and not os.listdir(self.spool_dir):
            os.rmdir(self.spool_dir)


class LogisticBracket:
    """Live static comparator of the network's logistic loss with a certified bracket at every step.

    H is kept as a sum of *epochs*: the rows absorbed while one centre was current, each epoch's
    Hessian evaluated at that centre (its anchor). When the centre moves, each closed epoch e gets its
    own ε_e = max |a·(x_c − x_e)| over its rows (computed in the move's pass), so that
    Σ_e e^{−ε_e} H_e ⪯ ∇²F(x_c) ⪯ Σ_e e^{ε_e} H_e; the current epoch's rows have ε = 0. Old epochs
    are merged (sums of H, maxima of ε) beyond ``max_epochs``.

    Parameters
    ----------
    d : int
        Number of features.
    block : int
        k: H is folded in and re-factorised (O(d³)) after every step t ≤ 16 and then every k steps
        (absolute step numbers), where the centre may also move.
    live_tol, live_floor : float
        The centre moves when the bracket on the regret is wider than
        max(``live_floor``, ``live_tol`` · |regret|) (nats), if :meth:`_affordable`.
    exact_steps : iterable of int
        Steps t at which the comparator is made exact: U − L ≤ ``exact_tol`` · max(1, C_t).
    exact_tol : float
    eps_max : float
        A Hessian pass over every row (O(N d²)) re-anchors all epochs at the centre when the epochs'
        largest ε exceeds this.
    budget, regrow, free_work : float
        A live move is made when its pass is cheap (N d ≤ ``free_work``), or when the rows grew by
        ``regrow`` since the last move and the moves so far cost at most ``budget`` times the work of
        keeping H (N d² multiply-adds).
    max_epochs : int
    memory_mb : float
        The recorded stream stays in memory up to this size (MiB); beyond, it goes to files in
        ``spool_dir`` (a temporary folder by default), read back through memory maps.
    spool_dir : str or None

    Attributes
    ----------
    moves, anchors, passes : int
        Centre moves, Hessian passes and passes over the recorded stream so far.
    exact : dict
        t → (value, lower, upper) at the exact steps (nats).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((64, 4, 1, 3)); y = (rng.random((64, 4, 1)) < 0.7).astype(float)
    >>> br = LogisticBracket(3, exact_steps=[64])
    >>> out = br.update(X, y, np.full((64, 4), 0.25), t0=0)
    >>> bool(np.all(out["lower"] <= out["upper"])), round(float(out["exact"][-1]), 6)
    (True, 44.200531)
    """

    def __init__(self, d: int, block: int = 16, live_tol: float = 5e-3, live_floor: float = 0.05, exact_steps=(),
                 exact_tol: float = 1e-12, eps_max: float = 2.0, budget: float = 0.5, free_work: float = 1e6,
                 regrow: float = 0.25, max_epochs: int = 8, memory_mb: float = 1024.0, spool_dir: str | None = None):
        self.d = d
        self.block = max(1, int(block))
        self.live_tol, self.live_floor = float(live_tol), float(live_floor)
        self.exact_tol, self.eps_max = float(exact_tol), float(eps_max)
        self.budget, self.free_work, self.regrow = float(budget), float(free_work), float(regrow)
        self.max_epochs = int(max_epochs)
        self.exact_steps = set(int(t) for t in exact_steps)
        self.rec = _Recording(d, memory_mb, spool_dir)
        self.xc = np.zeros(d)                # the centre, also the current epoch's anchor
        self.S, self.G = 0.0, np.zeros(d)    # F_t(x_c), ∇F_t(x_c), exact
        self.epochs = []                     # closed epochs: [H_e, ε_e, first step, last step]
        self.Hcur = np.zeros((d, d))         # the current epoch's folded rows, at x_c
        self.cur_first = 1
        self.base = {k: np.zeros((d, d)) for k in ("lo", "mid", "up")}   # Σ_e e^{∓ε_e} H_e, Σ_e H_e
        self.pending = []                    # (rows √(w ℓ''(a·x_c)) a, step of each row) since the last fold
        self.R = 0.0                         # max ‖a‖ over the rows
        self.lam_min = 0.0                   # a lower bound on λ_min(H_lo) (H_lo only grows between moves)
        self.rows_at_eig = 0
        # the bottom of H_lo's spectrum at the last move, and leverage bounds against it: of the rows absorbed
        # before that move (swept when needed) and of those absorbed since
        self.lev, self.lev_old, self.lev_new, self.t_moved = None, None, 0.0, 0
        self.t_absorbed = 0                  # the last step whose rows are absorbed
        self.weight = 0.0                    # Σ w over the rows absorbed: F_t(0) = weight · log 2
        self.chol = None                     # Cholesky of H_lo = base["lo"] + Hcur
        self.t = 0
        self.low = 0.0                       # running maximum of the certified lower bounds (C_t is nondecreasing)
        self.moves = self.anchors = self.passes = 0
        self.rows_at_move = 0
        self.work_stream = self.work_moves = 0.0
        self.exact = {}

    def is_fold(self, t: int) -> bool:
        """Whether H is folded in (and the centre may move) after step t: t ≤ 16, multiples of k, exact steps."""
        return t <= 16 or t % self.block == 0 or t in self.exact_steps

    @property
    def eps(self) -> float:
        """The largest ε over the closed epochs (0 if none)."""
        return max((e[1] for e in self.epochs), default=0.0)

    # ------------------------------------------------------------------ per chunk
    def update(self, X: np.ndarray, y: np.ndarray, c: np.ndarray, t0: int | None = None,
               cum: np.ndarray | None = None) -> dict:
        """Absorb steps t0+1..t0+n; return per-step arrays (n,) in nats: ``estimate``, ``lower``, ``upper``
        (C_t ∈ [lower, upper], certified) and ``exact`` (C_t at the exact steps, NaN elsewhere).

        X : (n, M, b, d); y : (n, M, b) in {0, 1}; c : (n, M) network weights (rows summing to 1, or 0
        where no client is present); cum : (n,) the learner's cumulative network loss after each step
        (the move rule measures the bracket against the regret cum − C); default: against C.
        """
        n, M, b, d = X.shape
        self._clients = M
        t0 = self.t if t0 is None else int(t0)
        X2 = X.reshape(n * M * b, d)
        yf = np.ascontiguousarray(y, dtype=np.float64).reshape(-1)
        cw = np.asarray(c, dtype=np.float64)
        w = (np.repeat(cw / b, b, axis=1) if b > 1 else cw).reshape(-1)
        per = M * b
        self.rec.add(t0 + 1, X2, yf, w, per)
        out = {k: np.empty(n) for k in ("estimate", "lower", "upper")}
        out["exact"] = np.full(n, np.nan)
        i = 0
        while i < n:
            stop = i + 1
            while stop < n and not self.is_fold(t0 + stop):
                stop += 1
            for page, r0, k in self.rec.segments(t0 + i + 1, t0 + stop):
                rows = slice(r0, r0 + k * per)
                j0 = page[0] + r0 // per - t0 - 1             # the segment's first step, within the chunk
                self._segment(page[3][rows], page[4][rows], page[5][rows], page[6][rows], page[7][rows], per,
                              t0 + j0, k, out, j0)
            t = self.t = t0 + stop
            i = stop
            if not self.is_fold(t):              # the chunk ends inside a sub-block: carry on at the next chunk
                continue
            self._fold()
            j = stop - 1
            if t in self.exact_steps:
                value, lo, hi = self._solve_exact(t)
                self.exact[t] = (value, lo, hi)
                out["exact"][j] = out["estimate"][j] = value
                out["lower"][j], out["upper"][j] = lo, hi
            else:
                ref = out["upper"][j] if cum is None else float(cum[j])
                tol = max(self.live_floor, self.live_tol * abs(ref - out["estimate"][j]))
                width = out["upper"][j] - out["lower"][j]
                if width > tol and self.rec.n_rows <= self.d and self._separable(t):
                    out["estimate"][j] = out["lower"][j] = out["upper"][j] = 0.0   # C_t = 0 exactly
                    self.low = 0.0
                elif width > tol and (self.rec.n_rows >= 2 * self.d or self.rec.n_rows * self.d <= self.free_work) \
                        and self._affordable(width, tol):
                    spent = self.work_moves
                    est, lo, hi = self._refit(t, 0.5 * tol)
                    if self.rec.n_rows * self.d <= self.free_work:      # cheap moves draw on no budget
                        self.work_moves = spent
                    out["estimate"][j], out["lower"][j], out["upper"][j] = est, lo, hi
            if self.lev is not None and self.lev_old is None and self.chol is not None and self.lam_min > 0:
                # from the next step on, the leverage bounds if R/√λ_min comes near its certificate's limit
                from scipy.linalg import cho_solve
                lam = math.sqrt(max(float(self.G @ cho_solve(self.chol, self.G, check_finite=False)), 0.0))
                if lam * self.R / math.sqrt(self.lam_min) >= 0.5:
                    self._sweep(t)
        return out

    def _segment(self, X2, y, w, za, sq, per, t_before, n, out, i0):
        """Steps t_before+1..t_before+n (no fold inside): exact running sums, the pending rows, the bracket.

        ``za``, ``sq`` (views into the recording) receive the rows' scores at the centre (their anchor)
        and their squared norms (0 where the weight is 0)."""
        np.matmul(X2, self.xc, out=za)
        loss, d1, d2 = logistic_terms(za, y)
        np.einsum("id,id->i", X2, X2, out=sq)
        sq[w <= 0] = 0.0
        # per step: R_t = max ‖a‖ and the leverage bound over the rows of steps ≤ t (as with one step a chunk)
        R2 = np.maximum.accumulate(np.maximum(sq.reshape(n, per).max(axis=1), self.R * self.R))
        self.R = math.sqrt(float(R2[-1]))
        lev = None
        if self.lev is not None:
            new = self._lev_rows(X2, sq, rows=True).reshape(n, per).max(axis=1)
            lev = np.maximum.accumulate(np.maximum(new, self.lev_new))
            self.lev_new = float(lev[-1])
        s = (w * loss).reshape(n, per).sum(axis=1)
        g = np.matmul((w * d1).reshape(n, 1, per), X2.reshape(n, per, self.d))[:, 0]
        S = running_sum(self.S, s)
        G = running_sum(self.G, g)
        self.S, self.G = float(S[-1]), G[-1].copy()
        self.pending.append((X2 * np.sqrt(w * d2)[:, None], np.repeat(np.arange(n), per) + (t_before + 1)))
        self.work_stream += len(y) * self.d * self.d
        self.weight += float(w.sum())
        self.rec.n_rows += len(y)
        self.t_absorbed = t_before + n
        est, lo, hi = self._bounds(S, G, np.arange(n) + (t_before + 1), np.sqrt(R2), lev)
        out["estimate"][i0:i0 + n], out["lower"][i0:i0 + n], out["upper"][i0:i0 + n] = est, lo, hi

    def _bounds(self, S, G, ts, R=None, lev=None):
        """The bracket at steps ``ts`` (n,) from S (n,), G (n, d), the epochs and the pending rows.

        ``R`` (n,): max ‖a‖ over the rows of steps ≤ t (default: all rows so far); ``lev`` (n,) or None: the
        leverage bound of the rows absorbed since the last move, up to each step. Returns (estimate,
        lower, upper), each (n,), nats."""
        n = len(S)
        if self.chol is None:                   # H singular: only C ≥ running max ≥ 0 and C ≤ S
            lo = np.full(n, max(self.low, 0.0))
            return S.copy(), lo, S.copy()
        from scipy.linalg import cho_solve
        D = -cho_solve(self.chol, G.T, check_finite=False).T          # (n, d): Δ_t = −H_lo⁻¹ G_t
        lam2 = np.maximum(-np.einsum("nd,nd->n", G, D), 0.0)          # Δᵀ H_lo Δ
        extra = np.zeros(n)                     # Σ_{pending rows of steps ≤ t} (B_row·Δ_t)²
        for B, st in self.pending:
            P = B @ D.T
            P *= P
            if st[-1] <= ts[0]:
                extra += P.sum(axis=0)
            else:
                extra += np.einsum("rn,rn->n", P, st[:, None] <= ts[None, :])
        if self.epochs:
            q_lo_base = np.einsum("nd,nd->n", D @ self.base["lo"], D)
            q_up = lam2 - q_lo_base + np.einsum("nd,nd->n", D @ self.base["up"], D) + extra
            q_mid = lam2 - q_lo_base + np.einsum("nd,nd->n", D @ self.base["mid"], D) + extra
        else:
            q_up = q_mid = lam2 + extra
        nrm = np.sqrt(np.einsum("nd,nd->n", D, D))
        kappa = self._kappa(np.full(n, self.R) if R is None else R,
                            np.full(n, self.lev_new) if lev is None and self.lev is not None else lev)
        a = _ALPHAS[None, :]
        with np.errstate(over="ignore", invalid="ignore"):
            reach = np.minimum((self.R if R is None else R) * nrm, kappa * np.sqrt(lam2))   # ≥ max_i |a_i·Δ|
            ub = S[:, None] - a * lam2[:, None] + a * a * psi_plus(a * reach[:, None]) * q_up[:, None]
        ub = np.where(np.isfinite(ub), ub, np.inf)
        hi = np.minimum(ub.min(axis=1), S)
        lo = S - sc_lower_gap(np.sqrt(lam2), kappa)
        lo = np.maximum.accumulate(np.maximum(lo, max(self.low, 0.0)))
        lo = np.minimum(lo, hi)
        self.low = float(lo[-1])
        with np.errstate(divide="ignore", invalid="ignore"):
            est = np.where(q_mid > 0, S - 0.5 * lam2 * lam2 / q_mid, S)
        return np.clip(est, lo, hi), lo, hi

    def _factor(self, fresh: bool = False):
        """Cholesky of H_lo (None unless numerically positive definite); λ_min(H_lo) bounded below.

        H_lo only grows between moves (rows are added), so an earlier λ_min stays a valid lower bound;
        it is recomputed (an eigenvalue solve, O(d³)) after a move (``fresh``) and when the rows have
        grown by a quarter since. After a move the bottom of the spectrum is kept for the rows'
        leverage bounds (:meth:`_kappa`).
        """
        from scipy.linalg import cho_factor, eigh
        self.chol = None
        if self.rec.n_rows == 0:
            return
        H = self.base["lo"] + self.Hcur
        try:
            chol = cho_factor(H, lower=True, check_finite=False)
        except np.linalg.LinAlgError:
            return
        diag = np.diag(chol[0])
        if not np.all(diag > 1e-7 * max(float(np.max(diag)), 1e-300)):     # condition number above 1e14
            return
        self.chol = chol
        if fresh or self.lam_min <= 0:
            r = min(self.d - 1, LEVERAGE_RANK)
            lam, U = eigh(H, subset_by_index=[0, r], check_finite=False)
            self.lam_min = max(float(lam[0]), 0.0)
            self.rows_at_eig = self.rec.n_rows
            if lam[0] > 0:
                # H_lo ⪰ Σ_{k<r} λ_k u_k u_kᵀ + λ_r (I − Σ u_k u_kᵀ): a·H_lo⁻¹a ≤ Σ (a·u_k)² (1/λ_k − 1/λ_r) + ‖a‖²/λ_r
                self.lev = (U[:, :r], 1.0 / lam[:r] - 1.0 / lam[r], 1.0 / lam[r])
            else:
                self.lev = None
            self.lev_old, self.lev_new, self.t_moved = None, 0.0, self.t_absorbed
        elif 4 * self.rec.n_rows >= 5 * self.rows_at_eig:
            self.lam_min = max(float(np.linalg.eigvalsh(H)[0]), 0.0)
            self.rows_at_eig = self.rec.n_rows

    def _lev_rows(self, X2, sq, rows: bool = False):
        """Leverage bounds a·H⁻¹a of rows X2 (squared norms sq) against the kept spectrum: their maximum, or
        (``rows``) one per row."""
        U, coef, rest = self.lev
        P = X2 @ U
        v = (P * P) @ coef + sq * rest
        if rows:
            return v
        return float(np.max(v)) if len(v) else 0.0

    def _kappa(self, R, lev):
        """κ̄_t ≥ max_i ‖a_i‖_{H_lo⁻¹} over the rows of steps ≤ t, per step (n,): R_t/√λ_min(H_lo), or the
        leverage bounds where the rows absorbed before the last move have been swept (:meth:`_sweep`)."""
        kappa = R / math.sqrt(self.lam_min) if self.lam_min > 0 else np.full(len(R), np.inf)
        if self.lev is None or lev is None or self.lev_old is None:
            return kappa
        return np.minimum(kappa, np.sqrt(np.maximum(lev, self.lev_old)))

    def _sweep(self, t: int):
        """The leverage bound of the rows absorbed before the last move (one pass, O(N d r)), against the
        spectrum kept at that move; made at a fold step t when R/√λ_min is too large for a certificate."""
        m = 0.0
        for blk, stop in self.rec.rows(self.t_moved):
            m = max(m, self._lev_rows(blk[3][:stop], blk[7][:stop]))
        self.lev_old = m
        self.passes += 1

    def _fold(self):
        """Fold the pending rows into the current epoch (one matrix product) and re-factorise."""
        if self.pending:
            B = np.concatenate([p[0] for p in self.pending]) if len(self.pending) > 1 else self.pending[0][0]
            self.Hcur += B.T @ B
            self.pending = []
        self._factor()

    # ------------------------------------------------------------------ moves
    def _affordable(self, width: float, tol: float) -> bool:
        """Whether a live move may be made now: its pass is cheap (N d ≤ ``free_work``), or the rows grew by
        ``regrow`` since the last move (by a fifth of it when the interval is over 10× its tolerance) and the
        moves so far cost at most ``budget`` times the work of keeping H or 32 passes over the stream,
        whichever is larger (for small d the passes are cheap next to the run's own work)."""
        rows = self.rec.n_rows
        if rows * self.d <= self.free_work:
            return True
        grow = self.regrow if width <= 10.0 * tol else 0.2 * self.regrow
        allowed = max(self.budget * self.work_stream, 32.0 * 4.0 * rows * self.d)
        return rows >= (1.0 + grow) * self.rows_at_move and self.work_moves + 4.0 * rows * self.d <= allowed

    def _pass(self, x: np.ndarray, upto: int, what: str = "grad"):
        """F_t and what ``what`` asks for at x, over the rows of steps ≤ upto.

        ``what``: ``"value"`` → (S,); ``"grad"`` → (S, G, dev) with dev (upto,) the largest
        |a·x − anchor score| over each step's rows; ``"hess"`` → (S, G, H, scores), the scores a·x of
        every recorded block. S in nats, G (d,), H (d, d).
        """
        S, G = 0.0, np.zeros(self.d)
        H = np.zeros((self.d, self.d)) if what == "hess" else None
        dev = np.zeros(upto) if what == "grad" else None
        zs = []
        rows = 0
        for blk, stop in self.rec.rows(upto):
            rows += stop
            zb = np.empty(stop) if what == "hess" else None
            piece = max(1, _PASS_ROWS // blk[2]) * blk[2]     # whole steps that stay in cache between the products
            for i in range(0, stop, piece):
                j = min(stop, i + piece)
                X2, y, w = blk[3][i:j], blk[4][i:j], blk[5][i:j]
                z = X2 @ x
                if what == "value":
                    e = np.exp(-np.abs(z))
                    S += float(w @ (np.log1p(e) + np.maximum(z, 0.0) - y * z))
                    continue
                loss, d1, d2 = logistic_terms(z, y)
                S += float(w @ loss)
                G += X2.T @ (w * d1)
                if what == "hess":
                    B = X2 * np.sqrt(w * d2)[:, None]
                    H += B.T @ B
                    zb[i:j] = z
                else:
                    gap = np.where(w > 0, np.abs(z - blk[6][i:j]), 0.0).reshape(-1, blk[2]).max(axis=1)
                    t0 = blk[0] - 1 + i // blk[2]
                    dev[t0:t0 + len(gap)] = gap
            if what == "hess":
                zs.append(zb)
        self.passes += 1
        self.work_moves += rows * self.d * {"value": 1.0, "grad": 2.0, "hess": 2.0 + self.d}[what]
        if what == "value":
            return (S,)
        return (S, G, H, zs) if what == "hess" else (S, G, dev)

    def _recentre(self, x, res, what, t):
        """Make x the centre, with the pass ``res`` at x (``what`` = "grad" or "hess") over the steps ≤ t.

        A "grad" move whose epochs' ε would exceed 30 (e^{−ε} ≈ 1e-13: the epochs' Hessians say nothing
        any more) is completed by a Hessian pass at x instead."""
        if what == "grad":
            ranges = [(e[2], e[3]) for e in self.epochs] + ([(self.cur_first, t)] if self.cur_first <= t else [])
            if max((float(res[2][a - 1:b].max()) for a, b in ranges), default=0.0) > 30.0:
                res, what = self._pass(x, t, "hess"), "hess"
        if what == "hess":
            S, G, H, zs = res
            for (blk, stop), z in zip(self.rec.rows(t), zs):
                blk[6][:stop] = z
            self.epochs, self.Hcur, self.cur_first = [], H, 1     # one epoch: steps 1..t, anchored at x
            self.anchors += 1
        else:
            S, G, dev = res
            if self.cur_first <= t:              # close the current epoch: anchored at the old centre
                self.epochs.append([self.Hcur, 0.0, self.cur_first, t])
                self.Hcur, self.cur_first = np.zeros((self.d, self.d)), t + 1
            while len(self.epochs) > self.max_epochs:
                (H1, _, a1, _), (H2, _, _, b2) = self.epochs[0], self.epochs[1]
                self.epochs[:2] = [[H1 + H2, 0.0, a1, b2]]
            for e in self.epochs:
                e[1] = float(dev[e[2] - 1:e[3]].max())
        self.xc, self.S, self.G = x, S, G
        for k in self.base:
            self.base[k] = np.zeros((self.d, self.d))
        for H, eps, _, _ in self.epochs:
            self.base["lo"] += math.exp(-eps) * H
            self.base["mid"] += H
            self.base["up"] += math.exp(eps) * H
        self.moves += 1
        self._factor(fresh=True)

    def _refit(self, t: int, tol: float, max_iter: int = 50):
        """Move the centre towards argmin F_t until U − L ≤ tol; (estimate, lower, upper) at t.

        L-BFGS (memory 6) preconditioned by the epochs' undiscounted Hessian Σ_e H_e + H_cur (slightly
        damped where it is nearly singular): each iteration tries the full step with one pass (S, G and the epochs' ε there) and
        keeps it if F fell by Armijo's rule; otherwise the step is halved on F's values (cheap passes)
        and a Hessian pass at the accepted point re-anchors every row (Newton's iteration, far from the
        minimiser). A Hessian pass is also made when the epochs' largest ε exceeds ``eps_max``.
        """
        from scipy.linalg import cho_solve
        if self.S > self.weight * math.log(2.0) * (1 + 1e-12) + 1e-300:
            # the centre is worse than the origin (it ran off along a direction that separated the first rows,
            # and the stream has since turned): start again from 0, with its Hessian
            x = np.zeros(self.d)
            self._recentre(x, self._pass(x, t, "hess"), "hess", t)
        est, lo, hi = (float(v[0]) for v in self._bounds(np.array([self.S]), self.G[None], np.array([t])))
        damped = False
        pairs = []

        mid = [None]

        def precond(v):
            if self.chol is None:                # far from a minimiser (H_lo singular): damped as Levenberg–Marquardt
                H = self.base["mid"] + self.Hcur
                mu = max(1e-8 * float(np.trace(H)) / self.d, 1e-12)
                return np.linalg.solve(H + mu * np.eye(self.d), v)
            # the epochs' Hessians at their own anchors, undiscounted: the closest to ∇²F(x_c) at hand
            if mid[0] is None:
                from scipy.linalg import cho_factor
                try:
                    mid[0] = cho_factor(self.base["mid"] + self.Hcur, lower=True, check_finite=False)
                except np.linalg.LinAlgError:
                    mid[0] = self.chol
            return cho_solve(mid[0], v, check_finite=False)

        for _ in range(max_iter):
            if hi - lo <= tol:
                break
            q = self.G.copy()                    # two-loop recursion with H_lo⁻¹ as the initial inverse Hessian
            alphas = []
            for sk, yk, rk in reversed(pairs):
                a_ = rk * float(sk @ q)
                q -= a_ * yk
                alphas.append(a_)
            r = precond(q)
            for (sk, yk, rk), a_ in zip(pairs, reversed(alphas)):
                r += sk * (a_ - rk * float(yk @ r))
            D = -r
            slope = float(self.G @ D)
            if not slope < 0:
                pairs = []
                D = -precond(self.G)
                slope = float(self.G @ D)
                if not slope < 0:
                    break
            what = "hess" if (self.chol is None or self.eps > self.eps_max or damped) else "grad"
            x = self.xc + D
            res = self._pass(x, t, what)
            damped = not res[0] <= self.S + 1e-4 * slope
            if damped:                           # Armijo failed at α = 1: backtrack on values
                alpha, x = 0.5, None
                while alpha > 1e-8 and -alpha * slope > 1e-13 * max(1.0, abs(self.S)):
                    trial = self.xc + alpha * D
                    if self._pass(trial, t, "value")[0] <= self.S + 1e-4 * alpha * slope:
                        x = trial
                        break
                    alpha *= 0.5
                if x is None:                    # no decrease above F's rounding: at the minimiser
                    break
                what = "hess"
                res = self._pass(x, t, what)
            sk, yk = x - self.xc, res[1] - self.G
            if what == "hess":
                pairs = []                       # a new preconditioner
            elif float(yk @ sk) > 1e-300:
                pairs = (pairs + [(sk, yk, 1.0 / float(yk @ sk))])[-6:]
            self._recentre(x, res, what, t)
            mid[0] = None
            est, lo, hi = (float(v[0]) for v in self._bounds(np.array([self.S]), self.G[None], np.array([t])))
        self.rows_at_move = self.rec.n_rows
        return est, lo, hi

    def _solve_exact(self, t: int):
        """(value, lower, upper) at step t (nats): :meth:`_refit` until U − L ≤ ``exact_tol`` · max(1, U).

        Where that fails (H singular: fewer independent rows than d, or separable data with no finite
        minimiser) the bracket is [the certified lower bound, the value an L-BFGS solve reaches]; with at most
        d linearly independent rows the samples are separable and C_t = 0 exactly.
        """
        spent = self.work_moves                  # the exact steps do not draw on the live moves' budget
        lo, hi = self.low, self.S
        if self.rec.n_rows >= 2 * self.d:        # fewer rows: (nearly) separable, no finite minimiser to home in on
            est, lo, hi = self._refit(t, self.exact_tol * max(1.0, self.S))
            if not hi - lo <= self.exact_tol * max(1.0, abs(hi)):
                est, lo, hi = self._refit(t, self.exact_tol * max(1.0, abs(hi)))
        certified = hi - lo <= self.exact_tol * max(1.0, abs(hi))
        if not certified and self._separable(t):
            return 0.0, 0.0, 0.0                 # inf F_t = 0 exactly (not attained)
        if not certified:
            hi = min(hi, self._fallback(t))
            lo = min(lo, hi)
        self.work_moves = spent
        return (0.5 * (lo + hi) if certified else hi), lo, hi

    def step_blocks(self):
        """The recorded stream as whole steps, all clients: (X (n, M, b, d), y (n, M, b), w (n, M, b)) with w
        each client's own weight, 1/b per sample where the client was present (0 where absent)."""
        for blk, stop in self.rec.rows(self.t_absorbed):
            X2, y, w = blk[3][:stop], blk[4][:stop], blk[5][:stop]
            n, per = stop // blk[2], blk[2]
            M = self._clients
            b = per // M
            yield (X2.reshape(n, M, b, self.d), y.reshape(n, M, b), (w.reshape(n, M, b) > 0) / b)

    def client_blocks(self, m: int):
        """A callable yielding client m's recorded rows as one block (X (n b, d), y, w = 1/b where present)."""
        def blocks():
            parts = [(X[:, m].reshape(-1, self.d), y[:, m].reshape(-1), w[:, m].reshape(-1))
                     for X, y, w in self.step_blocks()]
            if parts:
                yield (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
                       np.concatenate([p[2] for p in parts]))
        return blocks

    def _separable(self, t: int) -> bool:
        """Whether the rows of steps ≤ t are at most d and linearly independent: then any labels are separated
        by some x (a·x = ±s for every row), the logistic loss tends to 0 along it, and C_t = 0 exactly."""
        parts = [blk[3][:stop][blk[5][:stop] > 0] for blk, stop in self.rec.rows(t)]
        A = np.concatenate(parts) if parts else np.empty((0, self.d))
        if len(A) == 0 or len(A) > self.d:
            return len(A) == 0
        K = A @ A.T
        try:
            L = np.linalg.cholesky(K)
        except np.linalg.LinAlgError:
            return False
        diag = np.diag(L)
        return bool(np.all(diag > 1e-8 * np.sqrt(max(float(np.max(np.diag(K))), 1e-300))))

    def _fallback(self, t: int) -> float:
        """min F_t by L-BFGS-B over the recorded rows (warm-started at the centre); the value reached (nats).

        The objective is the pass's own numpy arithmetic (:meth:`_pass`): this runs where H is singular,
        i.e. on the first few rows, and loads no compiler.
        """
        from scipy.optimize import minimize

        def fun(x):
            self.passes -= 1                 # counted once below
            S, G, _ = self._pass(x, t, "grad")
            return S, G
        res = minimize(fun, self.xc.copy(), jac=True, method="L-BFGS-B",
                       options={"maxiter": 2000, "gtol": 1e-10, "ftol": 1e-15})
        self.passes += 1
        return float(res.fun)


def solve_clients(blocks, n_clients: int, dim: int, x0: np.ndarray | None = None, precond=None,
                  gtol: float = 1e-10, memory: int = 8, max_passes: int = 200, group_mb: float = 128.0):
    """Each client's exact logistic hindsight comparator, all clients at once (batched L-BFGS), for any d.

    min_θ Σ_i w_i ℓ(a_i·θ, y_i) over each client's own recorded samples. The
    clients are solved in groups whose samples (gathered client by client,
    one sweep over ``blocks`` per group) fit in ``group_mb``. Every iteration
    is one pass over the group's samples (two batched matrix-vector products
    per client), an L-BFGS direction per client (memory ``memory``) whose
    initial inverse Hessian is the client's own Hessian at ``x0``
    (``precond="clients"``: one batched matrix product, O(N d²)) or ``precond``
    ⁻¹ scaled by the client's share of the weight, and Armijo's rule per
    client (a client whose step fails halves it at the next pass). Near the
    minimum, where the predicted decrease falls below the rounding of f, a
    step that lowers the largest gradient component is taken instead. A
    client converges when max |gradient| ≤ ``gtol``, as :func:`solve_hindsight`'s
    L-BFGS-B, or when the quasi-Newton decrement −g·D is below 10⁻¹⁵ of its
    loss (its value is then exact to rounding).

    Parameters
    ----------
    blocks : callable yielding (X (n, M, b, d), y (n, M, b), w (n, M, b))
        Whole steps of the recorded stream in order; w is each sample's weight for its client (0 when absent).
    n_clients, dim : int
        M and d.
    x0 : ndarray (d,) or (M, d), optional
        Warm start (default 0), e.g. the network's comparator.
    precond : ndarray (d, d), "clients" or None
        An approximate Hessian per unit of weight of every client's objective (e.g. the network comparator's
        Hessian divided by the network's total weight); ``"clients"``: each client's own Hessian at ``x0``
        (M d² floats); default the identity.

    Returns
    -------
    x : ndarray (M, d)
    value : ndarray (M,)
    converged : ndarray (M,) bool
        False where the gradient did not reach ``gtol`` (separable samples: no finite minimiser; or no
        samples at all).
    """
    M, d = n_clients, dim
    theta = np.zeros((M, d)) if x0 is None else np.array(np.broadcast_to(x0, (M, d)), dtype=np.float64)
    steps = 0
    b = 1
    for X, _, _ in blocks():
        steps += X.shape[0]
        b = X.shape[2]
    R = steps * b                                               # samples per client
    G = max(1, min(M, int(group_mb * 2**20 // max(1, R * (d + 2) * 8))))
    value, done = np.zeros(M), np.zeros(M, bool)
    for g0 in range(0, M, G):
        g1 = min(M, g0 + G)
        Xg = np.empty((g1 - g0, R, d))
        yg = np.empty((g1 - g0, R))
        wg = np.empty((g1 - g0, R))
        i = 0
        for X, y, w in blocks():
            n = X.shape[0]                           # one strided copy each, straight into place
            Xg[:, i:i + n * b].reshape(g1 - g0, n, b, d)[...] = X[:, g0:g1].transpose(1, 0, 2, 3)
            yg[:, i:i + n * b].reshape(g1 - g0, n, b)[...] = y[:, g0:g1].transpose(1, 0, 2)
            wg[:, i:i + n * b].reshape(g1 - g0, n, b)[...] = w[:, g0:g1].transpose(1, 0, 2)
            i += n * b
        theta[g0:g1], value[g0:g1], done[g0:g1] = _solve_group(Xg, yg, wg, theta[g0:g1], precond, gtol, memory,
                                                              max_passes)
    return theta, value, done


def _solve_group(X, y, w, theta, precond, gtol, memory, max_passes):
    """:func:`solve_clients` for one group: X (G, R, d), y and w (G, R) client-major; theta (G, d) the start."""
    M, R, d = X.shape
    weight = w.sum(axis=1)

    def pass_(th, idx):
        Xs = X if idx is None else X[idx]
        ys, ws = (y, w) if idx is None else (y[idx], w[idx])
        z = np.matmul(Xs, th[:, :, None])[:, :, 0]
        loss, d1, _ = logistic_terms(z, ys)
        return np.einsum("gr,gr->g", ws, loss), np.matmul((ws * d1)[:, None, :], Xs)[:, 0]

    if isinstance(precond, str) and precond == "clients":
        z = np.matmul(X, theta[:, :, None])[:, :, 0]
        root = np.sqrt(logistic_terms(z, y)[2] * w)
        H = np.empty((M, d, d))
        for m in range(M):                           # one GEMM per client: 4× faster than a batched product here
            B = X[m] * root[m][:, None]
            np.matmul(B.T, B, out=H[m])
        ridge = 1e-10 * np.maximum(np.trace(H, axis1=1, axis2=2) / d, 1e-300)
        Pinv = np.linalg.inv(H + ridge[:, None, None] * np.eye(d))                   # (G, d, d)
        scale = np.ones(M)
    else:
        # no preconditioner: the identity, applied as such (the same numbers as a product with a d × d
        # identity, without its d² floats, 200 MB at d = 5,000, and O(d²) per client and pass)
        Pinv = None if precond is None else np.linalg.pinv(precond, hermitian=True)
        scale = np.where(weight > 0, 1.0 / np.maximum(weight, 1e-300), 0.0)     # H0⁻¹ = Pinv / W_m

    def h0(v, idx):
        if Pinv is None:
            return v * scale[idx, None]
        if Pinv.ndim == 3:
            return np.einsum("nde,ne->nd", Pinv[idx], v)
        return (v @ Pinv) * scale[idx, None]

    f, g = pass_(theta, None)
    passes = 1
    S = np.zeros((M, memory, d))
    Y = np.zeros((M, memory, d))
    rho = np.zeros((M, memory))
    count = np.zeros(M, dtype=np.int64)
    alpha = np.ones(M)
    eps = np.finfo(float).eps
    done = (np.max(np.abs(g), axis=1) <= gtol) | (weight <= 0)
    active = ~done
    while active.any() and passes < max_passes:
        idx = np.flatnonzero(active)
        q = g[idx].copy()
        k = np.minimum(count[idx], memory)
        alphas = np.zeros((len(idx), memory))
        for j in range(memory):                      # newest pair first (slot (count − 1 − j) mod memory)
            slot = (count[idx] - 1 - j) % memory
            use = j < k
            s_, y_, r_ = S[idx, slot], Y[idx, slot], rho[idx, slot]
            a_ = np.where(use, r_ * np.einsum("nd,nd->n", s_, q), 0.0)
            q -= a_[:, None] * y_
            alphas[:, j] = a_
        r = h0(q, idx)
        for j in reversed(range(memory)):
            slot = (count[idx] - 1 - j) % memory
            use = j < k
            s_, y_, r_ = S[idx, slot], Y[idx, slot], rho[idx, slot]
            b_ = np.where(use, r_ * np.einsum("nd,nd->n", y_, r), 0.0)
            r += (alphas[:, j] - b_)[:, None] * s_ * use[:, None]
        D = -r
        slope = np.einsum("nd,nd->n", g[idx], D)
        bad = ~(slope < 0)
        if bad.any():                                # not a descent direction: drop the memory
            count[idx[bad]] = 0
            D[bad] = -h0(g[idx[bad]], idx[bad])
            slope[bad] = np.einsum("nd,nd->n", g[idx[bad]], D[bad])
        # converged where the quasi-Newton decrement −g·D (about twice f − min f) is below 10⁻¹⁵ of f: the
        # value is then exact to rounding, whatever the gradient's scale
        fin = (slope < 0) & (-slope <= 1e-15 * np.maximum(1.0, np.abs(f[idx])))
        if fin.any():
            done[idx[fin]] = True
            active[idx[fin]] = False
            keep = ~fin
            idx, D, slope = idx[keep], D[keep], slope[keep]
            if not len(idx):
                break
        trial = theta[idx] + alpha[idx, None] * D
        ft, gt = pass_(trial, None if len(idx) == M else idx)
        passes += 1
        a = alpha[idx]
        fi, gi = f[idx], g[idx]
        flat = -a * slope <= 64 * eps * (np.abs(fi) + 1.0)
        lower = np.max(np.abs(gt), axis=1) < np.max(np.abs(gi), axis=1)
        ok = (ft <= fi + 1e-4 * a * slope + 4 * eps * np.abs(fi)) | (flat & lower)
        acc = idx[ok]
        sk, yk = trial[ok] - theta[acc], gt[ok] - g[acc]
        sy = np.einsum("nd,nd->n", sk, yk)
        keep = sy > 1e-300 * np.maximum(1.0, np.einsum("nd,nd->n", sk, sk))
        slot = count[acc] % memory
        S[acc[keep], slot[keep]] = sk[keep]
        Y[acc[keep], slot[keep]] = yk[keep]
        rho[acc[keep], slot[keep]] = 1.0 / sy[keep]
        count[acc[keep]] += 1
        theta[acc], f[acc], g[acc] = trial[ok], ft[ok], gt[ok]
        alpha[acc] = 1.0
        alpha[idx[~ok]] *= 0.5
        done[acc] |= np.max(np.abs(g[acc]), axis=1) <= gtol
        stalled = np.zeros(M, bool)
        stalled[idx[~ok]] = alpha[idx[~ok]] < 1e-12
        active = active & ~done & ~stalled
    return theta, f, done
