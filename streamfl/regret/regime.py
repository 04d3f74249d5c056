"""When does averaging over more clients lower the regret? FedSEA's regime condition, in invariant form.

FedSEA (§3.2, the discussion after Theorem 1) states the benefit of
parallelisation as σ̄²/M ≥ L·K̄²: the variance term of the bound, which
averaging divides by M, must dominate the temporal-heterogeneity term, which
averaging does not improve. Read literally, with σ² and K² the
squared-gradient quantities of FedSEA eq. (8) and §2, the two sides do not
have the same units: rescale the features by s (and the optimum, drift and
radius by 1/s, and η by 1/s²) and every loss and regret is unchanged, but
σ², ζ², K² and L scale as s², so σ̄²/M scales as s² and L·K̄² as s⁴, and the
flag flips with the unit of a feature. The paper's statement of the bound
(eq. (9)) is stripped from the text we have, so we re-derive the two terms,
in loss units, from the same analysis (the virtual sequence of Lemma 1 and
the one-step progress of Lemma 2) and keep the paper's criterion:
parallelisation helps when the M-dependent term is at least the temporal one.

The derivation (our reading)
----------------------------
FedSEA's Lemma 1 splits the regret into the regret of the virtual average
x̄_t = (1/M) Σ_m x_{t,m} plus a consensus term. x̄_t follows online SGD with
the averaged gradient, x̄_{t+1} = x̄_t − η_t ḡ_t: the noise of ḡ_t has
variance σ_t²/M (Lemma 2's first term, "variance reduction"), and its
target u_t = argmin F_t moves (the temporal term). Linearise ∇F_t around u_t
with curvature ℓ (the mean eigenvalue of ∇²F_t at u_t) and write
e_t = x̄_t − u_t: e_{t+1} = (1 − η_t ℓ) e_t − η_t ξ_t − (u_{t+1} − u_t), with
E‖ξ_t‖² = σ_t²/M and ‖u_{t+1} − u_t‖ ≈ K_{t+1}/ℓ (K_t² = ‖∇F_t − ∇F_{t−1}‖²
at a fixed point, divided by the curvature: the optimum's step). The
stationary mean-square error of this recursion, times ℓ/2 (the loss of an
error e), gives the per-step regret of the virtual sequence against u_t
(dynamic regret) as the sum of

* the noise term   n_t = η_t σ_t² / (2M (2 − η_t ℓ))          (∝ η, ÷ M),
* the temporal term v_t = K_t² / (2 η_t ℓ² (2 − η_t ℓ))       (∝ 1/η, no M),

for drift that is uncorrelated from step to step (a random walk: SEA's
adversary is free at every step). Both are in loss units and invariant
under the rescaling: η σ², η ℓ and K²/ℓ are. A coherent drift (the same
step every time) adds up before the learner catches up and makes the lag
larger by ≈ 1/(η ℓ); K_t² per step cannot tell the two apart, so the
condition is optimistic for coherent drift. Theorem 1's own O(η T) form of
the temporal term is what a bound against a *fixed* comparator gives; the
1/η form is the lag of tracking a moving one. With time-varying steps
(``inv_sqrt``, ``strongly_convex``) the same expressions are summed with the
η_t of each step (η_t is capped at 1/ℓ, the analysis' step-size condition).

The same recursion gives the transient, the cost of reaching the first
optimum from x̄_1: P = D² / (2 η_1 (2 − η_1 ℓ)) with D = ‖x̄_1 − u_1‖ —
the D²/η term of Theorem 1, which does not fall with M either.

Over the run, with N_T = Σ_t n_t and V_T = Σ_t v_t,

    parallelisation helps  ⇔  N_T ≥ V_T + P,

i.e. at this M the variance term (which averaging divides by M) is still at
least the terms averaging does not improve: the regret is then still
falling like 1/M. For constant η and a long run (P negligible) this is
(η ℓ)² σ̄²/M ≥ K̄² — the paper's σ̄²/M ≥ L·K̄² with the L on the other side
and made dimensionless by the step. (With the paper's tuned η ∝ 1/√T the
D²/η term balances the others and drops out of the comparison; with the
fixed η a run configures it does not.)

σ_t² is the noise at the comparator u_t where the population is known
(``sigma2_comparator``: the noise at the played points also contains the
learner's own error, which is an effect of the lag, not a cause), and at
the played average x̄_t for real data. ℓ is exact for synthetic streams and
estimated from the mean Hessian trace at x̄_t for real data, where step t
uses the running mean of these estimates up to t (each one is noisy).

D is the initial distance ‖x̄_1 − u_1‖ on synthetic streams, the diameter
2·radius of X on real data when ``learner.radius`` is set; without either
the transient is left out of the comparison and the summary says so.

The consensus term of Lemma 3, weighted by L/2 as in Lemma 1, is shown and
not compared (it is not part of the virtual sequence's regret):
(L/2) Σ_t η_t² [(τ − 1)/2 · σ_t² (1 − 1/M) + (τ − 1)(2τ − 1)/6 · ζ_t²]:
the mean over a round of the spread of k = 0 … τ − 1 local steps, noise
growing like k and client drift like k².

Costs: O(1) per step on top of the heterogeneity estimates.
"""

from __future__ import annotations

import math

import numpy as np

from .heterogeneity import RunningMean, running_sum


class RegimeTerms:
    """Accumulates the bound's terms step by step (see the module docstring).

    Parameters
    ----------
    n_clients : int
        M.
    tau : int or None
        τ; ``None`` (never averaging) has no consensus term bound.
    step_size : StepSize or None
        The main learner's schedule; ``None`` leaves the regime undetermined.
    block : int
        Batch length for the standard errors (:class:`RunningMean`).
    estimated : bool
        True when σ², K², ℓ are stochastic estimates (real data): the flag is
        then undetermined when the two sides are within two standard errors.
        A temporal estimate below 0 counts as 0 (V is a sum of K² ≥ 0); without
        the transient P (D unknown) only "does not help" can be concluded.

    Examples
    --------
    >>> from streamfl.models import StepSize
    >>> r = RegimeTerms(4, 10, StepSize("constant", eta=0.1))
    >>> ts = np.arange(1, 101)
    >>> _ = r.update(ts, sigma2=np.full(100, 4.0), K2=np.full(100, 1e-4), curvature=np.ones(100),
    ...          sigma2_clients=np.full(100, 4.0), zeta2=np.zeros(100))
    >>> s = r.summary(100, D=0.5)
    >>> round(s["noise_term"], 4), round(s["temporal_term"], 4), round(s["transient_term"], 4), s["parallelisation_helps"]
    (2.6316, 0.0263, 0.6579, True)
    >>> print(r.summary(100)["parallelisation_helps"])     # P unknown: N ≥ V + P cannot be concluded
    None
    >>> round(r.summary(100, D=2.0)["transient_term"], 4)      # D²/(2η(2 − ηℓ))
    10.5263
    """

    def __init__(self, n_clients: int, tau, step_size, block: int = 1, estimated: bool = False):
        self.M, self.tau, self.step_size, self.estimated = n_clients, tau, step_size, estimated
        # why σ² can be missing (the default: an estimated σ² needs mini-batches of b ≥ 2)
        self.noise_missing = "the gradient noise σ² cannot be estimated (a mini-batch of b ≥ 2 samples is needed)"
        self.noise = RunningMean(block)
        self.temporal = RunningMean(block)
        self.consensus = RunningMean(block)
        self.eta_last = math.nan
        self.eta_first = math.nan
        self.ell_first = math.nan

    def update(self, ts, sigma2, K2, curvature, sigma2_clients, zeta2) -> None:
        """Absorb one chunk.

        Every input is per step, so the sums do not depend on where the
        chunks end; the smoothness L of the consensus term multiplies its
        sum in :meth:`summary` (L of the data so far, not of a chunk).

        Parameters
        ----------
        ts : ndarray (n,) — 1-based steps.
        sigma2 : ndarray (n,) — the noise the condition uses (comparator or played average).
        K2 : ndarray (n,) — K_t² (NaN where unknown).
        curvature : ndarray (n,) or float — ℓ_t (loss per squared model unit); for real data the
            running mean of the estimates up to step t.
        sigma2_clients : ndarray (n,) — the clients' noise at their played points (consensus term).
        zeta2 : ndarray (n,) — ζ_t².

        Returns
        -------
        (n_t, v_t) : ndarray (n,) each — the per-step noise and temporal terms
        (loss units; NaN where an input is missing), or None without a step size.
        """
        if self.step_size is None:
            return None
        eta = self.step_size.values(ts)
        ell = np.broadcast_to(np.asarray(curvature, dtype=np.float64), eta.shape)
        if math.isnan(self.eta_first):
            self.eta_first = float(eta[0])
        if math.isnan(self.ell_first):
            first = np.flatnonzero(np.isfinite(ell))       # the first step with a curvature, in any chunk
            if first.size:
                self.ell_first = float(ell[first[0]])
        self.eta_last = float(eta[-1])
        with np.errstate(divide="ignore", invalid="ignore"):
            e = np.where(ell > 0, np.minimum(eta, 1.0 / ell), eta)
            stab = 2.0 - e * ell
            nt = e * sigma2 / (2 * self.M * stab)
            vt = K2 / (2 * e * ell * ell * stab)
            self.noise.update(nt, ts)
            self.temporal.update(vt, ts)
            if self.tau is not None:
                k = self.tau - 1
                # without L/2: summary() multiplies the sum by it
                cons = eta * eta * (0.5 * k * sigma2_clients * (1 - 1 / self.M)
                                    + k * (2 * k + 1) / 6.0 * np.maximum(zeta2, 0.0))
                self.consensus.update(cons, ts)
        return nt, vt

    def cumulative(self, ts, terms, before) -> tuple:
        """Running estimates of N_t, V_t (mean per step so far × t) at every step of a chunk.

        ``terms`` are the arrays :meth:`update` returned; ``before`` the
        (total, count) pairs of both terms before the chunk.
        """
        out = []
        for (tot0, cnt0), values in zip(before, terms):
            ok = np.isfinite(values)
            tot = running_sum(tot0, np.where(ok, values, 0.0))     # as RunningMean adds them: step by step
            cnt = cnt0 + np.cumsum(ok)
            with np.errstate(invalid="ignore", divide="ignore"):
                out.append(np.where(cnt > 0, tot / np.maximum(cnt, 1) * ts, np.nan))
        return tuple(out)

    def transient(self, D: float) -> float:
        """P = D²/(2 η̃_1 (2 − η̃_1 ℓ)), η̃_1 = min(η_1, 1/ℓ): the cost of reaching u_1 from x̄_1 (loss units)."""
        ell = self.ell_first
        if not (np.isfinite(D) and np.isfinite(self.eta_first) and np.isfinite(ell)):
            return math.nan
        e = min(self.eta_first, 1.0 / ell) if ell > 0 else self.eta_first
        return D * D / (2 * e * (2 - e * ell))

    def summary(self, t: int, D: float = math.nan, units: str = "loss units", L: float = math.nan) -> dict:
        """The two sides, the flag and the other terms after ``t`` steps.

        ``L`` is the smoothness that weighs the consensus term (NaN: the
        term is NaN). Returns a dict: ``noise_term`` N, ``temporal_term`` V
        (cumulative, loss units: mean per step × t), ``transient_term`` P,
        their standard errors, ``ratio`` N/(V + P), ``predicted_share``
        N/(N + V + P), ``parallelisation_helps`` (N ≥ V + P; None =
        undetermined), ``reason`` (why undetermined, or what was left out),
        ``consensus_term`` ((L/2) Σ_t η_t² […], see the module docstring),
        ``D``, ``units``.
        """
        out = {"units": units, "noise_term": math.nan, "temporal_term": math.nan, "transient_term": math.nan,
               "noise_term_se": math.nan, "temporal_term_se": math.nan, "ratio": math.nan,
               "predicted_share": math.nan, "parallelisation_helps": None, "consensus_term": math.nan,
               "D": D, "reason": ""}
        if self.step_size is None:
            out["reason"] = "the step-size schedule is unknown"
            return out
        N, V = self.noise.mean * t, self.temporal.mean * t
        Nse, Vse = self.noise.se * t, self.temporal.se * t
        P = self.transient(D)
        out.update(noise_term=N, temporal_term=V, noise_term_se=Nse, temporal_term_se=Vse, transient_term=P,
                   consensus_term=0.5 * L * self.consensus.mean * t if self.consensus.count else math.nan)
        if not (np.isfinite(N) and np.isfinite(V)):
            out["reason"] = (self.noise_missing if not np.isfinite(N)
                             else "the temporal variation K² is not available yet")
            return out
        # V is a sum of K² ≥ 0; an unbiased estimate below 0 says V is indistinguishable from 0.
        rest = max(V, 0.0) + (P if np.isfinite(P) else 0.0)
        if not np.isfinite(P):
            out["reason"] = "the transient is left out (the initial distance D is unknown: set learner.radius)"
        out["ratio"] = N / rest if rest > 0 else math.inf
        out["predicted_share"] = N / (N + rest) if N + rest > 0 else math.nan
        if self.estimated:
            se = math.hypot(Nse if np.isfinite(Nse) else 0.0, Vse if np.isfinite(Vse) else 0.0)
            if not (np.isfinite(Nse) and np.isfinite(Vse)) or abs(N - rest) < 2 * se:
                out["reason"] = "the two sides are within two standard errors of each other"
                return out
        if N >= rest and not np.isfinite(P):
            # P ≥ 0 is unknown, so N ≥ V + P cannot be concluded (N < V still concludes "does not help")
            out["reason"] = ("the noise side exceeds the temporal side, but the transient P is unknown (set "
                             "learner.radius), so N ≥ V + P cannot be concluded")
            return out
        out["parallelisation_helps"] = bool(N >= rest)
        return out


def literal_condition(sigma2_mean: float, K2_mean: float, L: float, M: int) -> dict:
    """FedSEA's σ̄²/M ≥ L·K̄² read literally (kept for comparison; not unit-invariant).

    Returns ``lhs`` = σ̄²/M (squared gradient units), ``rhs`` = L·K̄²
    (squared gradient × loss per squared model unit) and ``holds``
    (None when either side is not finite).

    >>> literal_condition(2.0, 0.1, 4.0, 4)["holds"]
    True
    """
    lhs = sigma2_mean / M
    rhs = L * K2_mean
    ok = bool(np.isfinite(lhs) and np.isfinite(rhs))
    return {"lhs": float(lhs), "rhs": float(rhs), "holds": bool(lhs >= rhs) if ok else None}
