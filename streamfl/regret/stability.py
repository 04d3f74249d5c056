"""Is the learner diverging? Its step size against the loss's smoothness before the run, its loss during it.

A learner whose loss becomes inf or NaN stops the run
(:class:`~streamfl.runtime.engine.DivergenceError`). One that diverges more
slowly, or on a run too short to overflow, used to finish with exit 0 and a
regret of 10^13 and nothing said. Two checks say it:

* **before the run** (:func:`step_size_check`): a gradient step x − η∇f(x)
  on an L-smooth loss moves the iterate away from the minimiser along the
  top curvature direction when η·L > 2 (the quadratic's factor |1 − ηL| > 1);
  SGD repeats it every step, so η_t·L > 2 for the steps a run makes is the
  warning. Two curvatures are computed, in loss per squared model unit:

  - L of the expected loss: the population's own (synthetic streams), or
    λ_max of the streamed features' weighted second moment
    Σ_t Σ_m (c_{t,m}/b) Σ_j a aᵀ / Σ_t Σ_m c_{t,m} (real tables and River
    generators, whose samples are in memory; the tracker's ``L`` in
    summary.json, computed from the same rows), through the n × n Gram when
    the rows are fewer than the features;
  - L_batch, the curvature of the loss a step actually descends, one
    client's mini-batch loss f(·, ξ_{t,m}): λ_max((1/b) Σ_j a_j a_jᵀ) (‖a‖²
    for b = 1), the median over the first client-batches of the stream
    (:data:`BATCHES`). With more features than samples per batch it is far
    above L (a row of d standardised features has ‖a‖² ≈ d while λ_max of
    the second moment of n rows is ≈ (√d + √n)²/n), and it is what
    decides: SGD with b = 1 on a 60-row table of d = 500 features diverged at
    η = 0.05 with η·L = 0.93 but η·L_batch = 25.

  Both are multiplied by the loss's curvature bound: 1 for least squares,
  1/4 for logistic (σ' ≤ 1/4), 1/2 for softmax. A constant step is checked
  against the larger; a decaying one (large only in its first steps) against
  L_batch, the first steps' curvature, and the warning counts the steps
  with η_t·L > 2.
* **during the run** (:class:`LossGrowth`): the network loss is averaged
  over windows of ⌈T/20⌉ steps (absolute steps: the same at any chunk size);
  a last window whose mean is :data:`GROWTH` times the first window's or more
  says the learner is diverging; a window that high followed by a fall says
  its first steps overshot. A well-tuned run's loss falls from its first
  window (the models start at 0), and drift that moves the optimum raises
  it by a bounded factor (an abrupt switch of a synthetic least-squares
  optimum of norm r: at most (2r)²/r² = 4×).
"""

from __future__ import annotations

import math

import numpy as np

from .heterogeneity import running_sum

#: Curvature bound of each loss relative to the features' (least squares: the Hessian is a aᵀ).
TASK_FACTOR = {"least_squares": 1.0, "logistic": 0.25, "softmax": 0.5}
#: Client-batches (from the first steps) whose curvature gives L_batch.
BATCHES = 4096
#: A last window whose mean loss is this many times the first window's is divergence.
GROWTH = 100.0
#: Windows over a run for :class:`LossGrowth`.
WINDOWS = 20
#: Gram matrices up to this size are decomposed directly; above, λ_max by Lanczos.
GRAM_MAX = 4096


def top_eigenvalue(B: np.ndarray) -> float:
    """λ_max(BᵀB) for B (n, d): through the smaller of BᵀB (d × d) and BBᵀ (n × n), Lanczos above :data:`GRAM_MAX`.

    >>> B = np.array([[1.0, 0.0, 0.0], [0.0, 2.0, 0.0]])
    >>> top_eigenvalue(B), top_eigenvalue(B.T)
    (4.0, 4.0)
    """
    n, d = B.shape
    if min(n, d) == 0:
        return 0.0
    if min(n, d) <= GRAM_MAX:
        from scipy.linalg import eigh
        G = B @ B.T if n < d else B.T @ B
        k = G.shape[0]
        return float(eigh(G, eigvals_only=True, subset_by_index=[k - 1, k - 1])[0])
    from scipy.sparse.linalg import LinearOperator, eigsh
    op = LinearOperator((d, d), matvec=lambda v: B.T @ (B @ v), dtype=np.float64)
    return float(eigsh(op, k=1, which="LA", tol=1e-8, return_eigenvectors=False)[0])


def batch_curvatures(X: np.ndarray, present: np.ndarray | None = None) -> np.ndarray:
    """λ_max((1/b) Σ_j a_j a_jᵀ) of every present client-batch: X (n, M, b, d), present (n, M) bool or None.

    Returns ndarray (k,), one value per present (step, client) pair (features² units; multiply by
    :data:`TASK_FACTOR` for a loss). Cost O(n M b² d) through the b × b Gram when b < d.

    >>> X = np.array([[[[3.0, 4.0]], [[1.0, 0.0]]]])          # n = 1, M = 2, b = 1
    >>> batch_curvatures(X).tolist()
    [25.0, 1.0]
    """
    n, M, b, d = X.shape
    A = X.reshape(n * M, b, d)
    if present is not None:
        A = A[np.asarray(present, bool).reshape(-1)]
    if b == 1:
        return np.einsum("kd,kd->k", A[:, 0], A[:, 0])
    G = np.matmul(A, A.transpose(0, 2, 1)) if b <= d else np.matmul(A.transpose(0, 2, 1), A)
    return np.linalg.eigvalsh(G / b)[:, -1]


def _second_moment_top(stream) -> tuple[float | None, float]:
    """(λ_max of Σ_t Σ_m (c_{t,m}/b) Σ_j a aᵀ, Σ_t Σ_m c_{t,m}) over every step of an in-memory stream.

    The weighted rows √(c/b)·a are kept while they are at most d (the n × n
    Gram, :func:`top_eigenvalue`), then summed into the d × d moment; with
    more than :data:`GRAM_MAX` features and rows, (None, total): λ_max would
    need a weighted copy of the whole table.
    """
    b, d = stream.batch_size, stream.n_features
    total, rows, n_rows, gram = 0.0, [], 0, None
    for chunk in stream.chunks(256):
        c = chunk.weights()
        w = np.repeat((c / b).reshape(-1), b)
        keep = w > 0
        Bc = chunk.X.reshape(-1, d)[keep] * np.sqrt(w[keep])[:, None]
        total += float(c.sum())
        if gram is not None:
            gram += Bc.T @ Bc
            continue
        rows.append(Bc)
        n_rows += len(Bc)
        if n_rows > d:                        # more rows than features: the d × d moment from now on
            if d > GRAM_MAX:
                return None, total
            R = np.concatenate(rows)
            gram, rows = R.T @ R, []
    if gram is None:
        return (top_eigenvalue(np.concatenate(rows)) if rows else 0.0), total
    from scipy.linalg import eigh
    return float(eigh(gram, eigvals_only=True, subset_by_index=[d - 1, d - 1])[0]), total


def _ratio(r: float) -> str:
    """A growth ratio for a note: 1,376,517 up to 10⁷, then 3 significant digits (2.79e+180).

    >>> _ratio(215.3), _ratio(2.789e180)
    ('215', '2.79e+180')
    """
    return f"{r:,.0f}" if r < 1e7 else f"{r:.3g}"


def _steps_above(step_size, L: float, T: int) -> int:
    """How many of the steps 1..T have η_t·L > 2 (η_t never grows: they are the first ones)."""
    if step_size(1) * L <= 2:
        return 0
    if step_size(T) * L > 2:
        return T
    lo, hi = 1, T                      # η_lo·L > 2 ≥ η_hi·L
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if step_size(mid) * L > 2 else (lo, mid)
    return lo


def step_size_check(stream, step_size, radius: float | None = None) -> dict:
    """The main learner's step size against the smoothness of its loss, before the run (see the module docstring).

    Parameters
    ----------
    stream : Stream
        A dense-feature stream (read again from its first steps; a stream held
        in memory, ``stream.in_memory``, is read whole for L).
    step_size : StepSize
        η_t of the main learner.
    radius : float or None
        ``learner.radius`` (the warning then says the models stay bounded).

    Returns
    -------
    dict with ``eta_1`` (η_1), ``L`` and ``L_source`` (the expected loss's
    smoothness and how it was obtained; None when not computed),
    ``L_batch`` and ``L_batch_source`` (median curvature of a client's
    mini-batch loss over the first client-batches), ``L_used`` (the larger
    for a constant step; L_batch for a decaying one, which is large only in
    the first steps), ``eta_L`` (η_1·L_used), ``eta_max`` (2/L_used: the largest stable
    constant step), ``steps_above`` (steps t ≤ T with η_t·L_used > 2) and
    ``warning`` (the run header's line, or None).
    """
    key = (repr(step_size), radius)
    cached = getattr(stream, "_step_size_check", None)
    if cached is not None and cached[0] == key:       # the run header and summary.json both ask: read the stream once
        return dict(cached[1])
    out = _step_size_check(stream, step_size, radius)
    try:
        stream._step_size_check = (key, dict(out))
    except AttributeError:
        pass
    return out


def _step_size_check(stream, step_size, radius):
    task, M, b, d, T = stream.task, stream.n_clients, stream.batch_size, stream.n_features, stream.n_steps
    factor = TASK_FACTOR[task]
    L, source = None, None
    pop_L = getattr(stream.population, "smoothness", None) if stream.population is not None else None
    if pop_L is not None:
        L, source = float(pop_L), "the population's smoothness"
    elif getattr(stream, "in_memory", False):
        lam, total = _second_moment_top(stream)
        if lam is not None and total > 0:
            L = factor * lam / total
            source = "λ_max of the streamed features' second moment" + {"least_squares": "", "logistic": "/4",
                                                                        "softmax": "/2"}[task]
        elif lam is None:
            source = (f"not computed: more than {GRAM_MAX:,} features and as many rows (λ_max would need a copy "
                      f"of the table)")
    steps = max(1, min(T, 64, math.ceil(BATCHES / max(1, M))))
    first = next(iter(stream.chunks(steps)))
    curv = batch_curvatures(first.X, first.mask)
    L_batch = factor * float(np.median(curv)) if curv.size else None
    n_first = first.n_steps
    scaled = {"least_squares": "", "logistic": "/4", "softmax": "/2"}[task]
    batch_source = (f"λ_max((1/b)Σ a aᵀ){scaled} of one client's mini-batch loss (b = {b}), the loss each step "
                    f"descends, median over the first {n_first:,} step{'s' if n_first > 1 else ''}")
    out = {"eta_1": float(step_size(1)), "L": L, "L_source": source, "L_batch": L_batch,
           "L_batch_source": batch_source, "L_used": None, "eta_L": None, "eta_max": None, "steps_above": 0,
           "warning": None}
    # a constant step meets every step's curvature: the larger of the two. A decaying step is large only in
    # the first steps, whose curvature is L_batch (the whole stream's L may come from later steps: features
    # scaled by an injected drift at t = 1,000, when η_t is small)
    candidates = (L, L_batch) if step_size.kind == "constant" or L_batch is None else (L_batch,)
    known = [v for v in candidates if v is not None and math.isfinite(v) and v > 0]
    if not known:
        return out
    used = max(known)
    out.update(L_used=used, eta_L=out["eta_1"] * used, eta_max=2.0 / used,
               steps_above=_steps_above(step_size, used, T))
    if out["steps_above"] == 0:
        return out
    which = (f"L = {used:.4g}: {batch_source}" + (f"; the expected loss's L is {L:.4g}" if L is not None else "")
             if used == L_batch else f"L = {used:.4g}: {source}")
    if step_size.kind == "constant":
        text = f"η·L = {out['eta_L']:.3g} > 2: SGD on an L-smooth loss can diverge; lower learner.step_size.eta " \
               f"below 2/L = {2.0 / used:.3g}"
    else:
        knob = (f"lower learner.step_size.eta below 2/L = {2.0 / used:.3g}" if step_size.kind == "inv_sqrt" else
                f"raise learner.step_size.mu or t0 so that η_1 = 1/(μ(1 + t0)) < 2/L = {2.0 / used:.3g}")
        k = out["steps_above"]
        text = (f"η_t·L > 2 for the first {k:,} step{'s' if k > 1 else ''} (η_1·L = {out['eta_L']:.3g}): SGD on an "
                f"L-smooth loss can diverge there; {knob}")
    if radius is not None:
        text += " (learner.radius keeps the models in a ball: the loss stays bounded, the steps overshoot)"
    out["warning"] = f"{text} ({which})"
    return out


class LossGrowth:
    """Watches the network loss for divergence that does not reach inf or NaN (see the module docstring).

    Window k (0-based) holds steps k·w + 1 … (k + 1)·w, w = ⌈T/``windows``⌉;
    each keeps the sum and count of the network loss (nats or loss units),
    added step by step, so the verdict is the same at any chunk size. Memory
    O(``windows``).

    Parameters
    ----------
    n_steps : int
        T.
    windows : int
        Windows over the run (:data:`WINDOWS`).
    factor : float
        Growth of the last window's mean over the first's that is divergence (:data:`GROWTH`).

    Examples
    --------
    >>> g = LossGrowth(8, windows=8)
    >>> g.update(np.arange(1, 9), np.array([0.8, 0.75, 5.2, 20.0, 24.0, 33.0, 80.0, 172.0]))
    >>> v = g.verdict()
    >>> v["diverging"], round(v["ratio"], 1)
    (True, 215.0)
    >>> print(v["note"])
    diverging: the network loss averages 172 over step 8, 215× its mean over step 1 (0.8), without reaching inf or NaN; lower learner.step_size.eta, use a decaying step size, or set learner.radius
    """

    def __init__(self, n_steps: int, windows: int = WINDOWS, factor: float = GROWTH):
        self.T = max(1, int(n_steps))
        self.w = max(1, math.ceil(self.T / max(1, int(windows))))
        k = math.ceil(self.T / self.w)
        self.sums, self.counts = np.zeros(k), np.zeros(k, dtype=np.int64)
        self.factor = float(factor)
        self.t = 0

    def update(self, ts: np.ndarray, loss: np.ndarray) -> None:
        """Absorb the network loss (n,) of the 1-based steps ``ts`` (n,), in order."""
        ts, loss = np.asarray(ts), np.asarray(loss, dtype=np.float64)
        ids = (ts - 1) // self.w
        for k in np.unique(ids):
            if k >= len(self.sums):
                continue
            sel = ids == k
            self.sums[k] = running_sum(self.sums[k], loss[sel])[-1]
            self.counts[k] += int(sel.sum())
        if len(ts):
            self.t = int(ts[-1])

    def _steps(self, k: int) -> str:
        a, b = k * self.w + 1, min((k + 1) * self.w, self.t)
        return f"step {a:,}" if a == b else f"steps {a:,}–{b:,}"

    def verdict(self) -> dict:
        """The verdict after the steps absorbed so far.

        Returns a dict: ``diverging`` (the last window's mean ≥ ``factor`` ×
        the first window's), ``overshoot`` (an earlier window reached that
        and the loss fell back), ``window_steps`` w, ``first_mean``,
        ``last_mean``, ``peak_mean`` and ``peak_steps`` ([first, last] step of
        the highest window), ``ratio`` (last / first), ``factor`` and
        ``note`` (the line the summary, the live view and the notes print;
        None when neither). The first window must be complete.
        """
        out = {"diverging": False, "overshoot": False, "window_steps": self.w, "first_mean": None,
               "last_mean": None, "peak_mean": None, "peak_steps": None, "ratio": None, "factor": self.factor,
               "note": None}
        filled = np.flatnonzero(self.counts)
        if not len(filled) or self.counts[0] < min(self.w, self.T):
            return out
        means = self.sums[filled] / self.counts[filled]
        first, last = float(means[0]), float(means[-1])
        peak = int(np.argmax(means))
        out.update(first_mean=first, last_mean=last, peak_mean=float(means[peak]),
                   peak_steps=[int(filled[peak] * self.w + 1), int(min((filled[peak] + 1) * self.w, self.t))])
        if not first > 0:
            return out
        out["ratio"] = last / first
        if len(filled) > 1 and last >= self.factor * first:
            out["diverging"] = True
            out["note"] = (f"diverging: the network loss averages {last:.4g} over {self._steps(int(filled[-1]))}, "
                           f"{_ratio(last / first)}× its mean over {self._steps(0)} ({first:.4g}), without reaching inf "
                           f"or NaN; lower learner.step_size.eta, use a decaying step size, or set learner.radius")
        elif means[peak] >= self.factor * first:
            out["overshoot"] = True
            out["note"] = (f"the network loss rose to {means[peak]:.4g} over {self._steps(int(filled[peak]))}, "
                           f"{_ratio(means[peak] / first)}× its mean over {self._steps(0)} ({first:.4g}), before falling "
                           f"back to {last:.4g}: the first steps overshoot; a smaller learner.step_size.eta avoids it")
        return out
