"""The live terminal view: progress plus cumulative loss and regret per comparator."""

from __future__ import annotations

import math
import time

from rich.console import Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text


def _fmt(x) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    if x != 0 and abs(x) < 1e-2:
        return f"{x:.3g}"
    return f"{x:,.3f}" if abs(x) < 1e5 else f"{x:,.4g}"


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def _pm(h: dict, key: str) -> str:
    """A running mean (clipped at 0 for display: empirical means are unbiased and may dip below) ± its SE."""
    mean, se = h.get(f"{key}_mean"), h.get(f"{key}_se")
    if not _finite(mean):
        return "—"
    text = _fmt(max(mean, 0.0))
    return text + (f" ± {_fmt(se)}" if _finite(se) else "")


class LiveView:
    """Context manager showing a progress bar and a regret table, refreshed per chunk.

    Use ``view(tracker, stream)`` as the engine's ``on_chunk`` hook. For a
    real table the title also counts the rows not streamed (the stream's
    ``n_dropped_``: incomplete last mini-batches). ``bottleneck`` (from
    :func:`streamfl.runtime.learners.bottleneck_note`) names the per-sample
    Python learner that bounds the run, shown under the rate.
    """

    def __init__(self, title: str, total_steps: int, console=None, enabled: bool = True,
                 bottleneck: str | None = None):
        self.title, self.total, self.enabled = title, total_steps, enabled
        self.bottleneck = bottleneck       # bottleneck_note(cfg.baselines): a per-sample Python learner
        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("steps"), TimeElapsedColumn(), TimeRemainingColumn(), console=console)
        self.task = self.progress.add_task(title, total=total_steps)
        self.live = Live(Group(self.progress), console=console, refresh_per_second=4, transient=False)
        self.started = time.perf_counter()
        self.dropped = 0

    def __enter__(self):
        if self.enabled:
            self.live.__enter__()
        return self

    def __exit__(self, *exc):
        if self.enabled:
            self.live.__exit__(*exc)

    def ranking_table(self, tracker) -> Table:
        """The live table of a streaming recommender run (:class:`~streamfl.regret.ranking.RankingTracker`)."""
        st = tracker.state
        rate = st.samples / max(time.perf_counter() - self.started, 1e-9)
        sent = (f"   bytes up = {st.bytes_up:,}   down = {st.bytes_down:,}" if st.bytes_up is not None else "")
        t = Table(title=f"t = {st.t:,}   interactions = {st.samples:,}   interactions/s = {rate:,.0f}{sent}",
                  expand=False)
        t.add_column("learner")
        t.add_column("cum. BCE", justify="right")
        t.add_column("FedNCF − this", justify="right")
        for name, v in st.cum_loss.items():
            t.add_row(name, _fmt(v), "" if name == tracker.main else _fmt(st.cum_loss[tracker.main] - v))
        r = Table(show_header=True, expand=False)
        r.add_column("main learner")
        r.add_column("value", justify="right")
        r.add_row("prequential HR@10 (pooled)", _fmt(tracker.hr))
        r.add_row("BCE per interaction", _fmt(tracker.loss_sum / max(tracker.interactions, 1)))
        v = st.regret.get("static")
        r.add_row("regret vs offline fixed GMF (ESTIMATE)", _fmt(v))
        note = Text("the comparator is an estimate: the fixed GMF trained offline (Adam, warm-started every "
                    "chunk) on the stream so far; GMF is non-convex", style="dim")
        return Group(t, r, note)

    def sparse_table(self, tracker) -> Table:
        """The live table of a streaming sparse logistic run (:class:`~streamfl.regret.sparse.SparseRegretTracker`)."""
        st = tracker.state
        rate = st.samples / max(time.perf_counter() - self.started, 1e-9)
        sent = (f"   bytes up = {st.bytes_up:,}   down = {st.bytes_down:,}" if st.bytes_up is not None else "")
        t = Table(title=f"t = {st.t:,}   samples/s = {rate:,.0f}{sent}", expand=False)
        t.add_column("learner")
        t.add_column("cum. loss (nats)", justify="right")
        t.add_column("loss per sample", justify="right")
        t.add_column("main − this", justify="right")
        for name, v in st.cum_loss.items():
            t.add_row(name, _fmt(v), _fmt(v / max(st.t, 1)),
                      "" if name == tracker.main else _fmt(st.cum_loss[tracker.main] - v))
        r = Table(show_header=True, expand=False)
        r.add_column("regret of the main learner vs")
        r.add_column("R_t", justify="right")
        r.add_column("R_t/√t", justify="right")
        for key, label in (("static", f"best fixed sparse model (hindsight, to ‖∇‖ ≤ {tracker.tol:g}, at chunk ends)"),
                           ("concept", "the generator's concept (w*, b*)")):
            v = st.regret.get(key)
            r.add_row(label, _fmt(v), _fmt(v / math.sqrt(st.t) if v is not None and st.t else None))
        return Group(t, r)

    def table(self, tracker) -> Table:
        if hasattr(tracker, "concept_cum"):
            return self.sparse_table(tracker)
        if hasattr(tracker, "observes"):
            return self.ranking_table(tracker)
        st = tracker.state
        rate = st.samples / max(time.perf_counter() - self.started, 1e-9)
        dropped = f"   rows not streamed = {self.dropped:,}" if self.dropped else ""
        sent = (f"   bytes up = {st.bytes_up:,}   down = {st.bytes_down:,}"
                if getattr(st, "bytes_up", None) is not None else "")
        t = Table(title=f"t = {st.t:,}   samples/s = {rate:,.0f}{dropped}{sent}", expand=False)
        t.add_column("learner")
        t.add_column("cum. loss", justify="right")
        t.add_column("avg loss", justify="right")
        t.add_column("FedSEA − this", justify="right")
        main = tracker.main
        for name, v in st.cum_loss.items():
            gap = "" if name == main else _fmt(st.cum_loss[main] - v)
            t.add_row(name, _fmt(v), _fmt(v / max(st.t, 1)), gap)
        r = Table(show_header=True, expand=False)
        r.add_column("regret of FedSEA vs")
        r.add_column("R_t", justify="right")
        r.add_column("R_t/√t", justify="right")
        r.add_column("certified interval", justify="right")
        k = getattr(tracker, "refresh_every", 1)
        refit = getattr(tracker, "refit_every", None)
        bracket = getattr(tracker, "bracket", None) is not None
        static_label = "best fixed model (hindsight)" + (
            ", live estimate§" if bracket else
            (", exact at refit steps, a lower bound between¶" if refit else ", live estimate")
            if not tracker.hindsight else "" if k == 1 else f", exact every {k} steps‡")
        labels = {"static": static_label,
                  "expected": "expected, FedSEA eq. (3)", "dynamic": "per-step optimum (dynamic)"}
        notes = []
        bases = {"static": "realised f", "expected": "population F"}
        for key, label in labels.items():
            v = st.regret.get(key)
            if v is not None and math.isfinite(v):
                interval = ""
                if key == "static":
                    lo, hi = st.regret.get("static_lower"), st.regret.get("static_upper")
                    last = getattr(tracker, "last_exact", None)
                    if last is not None and last[0] == st.t:
                        interval = "exact"
                    elif _finite(lo) and _finite(hi):
                        interval = f"[{_fmt(lo)}, {_fmt(hi)}]"
                    if not tracker.hindsight and not bracket:
                        notes.append("¶ softmax (or logistic with learner.radius): solved exactly at steps 16, 32, "
                                     "…, every tracker.refit_every steps, when the steps have grown by an eighth, "
                                     "the checkpoints and T; between them the last minimiser's loss, so the value "
                                     "shown is the interval's lower end")
                r.add_row(label, _fmt(v), _fmt(v / math.sqrt(st.t) if st.t else None), interval)
                # FedSEA Lemma 1, in this regret's own basis: the two rows add up to the row above
                virtual, part = st.regret.get(f"{key}_virtual"), st.regret.get(f"consensus_part_{key}")
                if key in bases and _finite(virtual) and _finite(part):
                    r.add_row(f"  = virtual average x̄_t ({bases[key]})", _fmt(virtual), "", "")
                    r.add_row(f"  + consensus part ({bases[key]}; FedSEA Lemma 1)", _fmt(part), "", "")
                continue
            method = getattr(tracker, f"{key}_method", "")
            if "at the end" in method:
                r.add_row(label, "at end*", "at end*", "")
                notes.append("* computed at the end of the run for the logistic loss (exact solve over the "
                             "recorded optima); not tracked per step")
            else:
                r.add_row(label, "n/a†", "n/a†", "")
                notes.append("† needs a synthetic source (the population loss F is unknown)")
        if bracket:
            notes.append("§ a quadratic model of the cumulative loss at a centre near the minimiser; the interval "
                         "is certified by the logistic loss's self-concordance; exact at the checkpoints and T")
        if tracker.hindsight and k != 1:
            notes.append(f"‡ between exact solves (every {k} steps: tracker.refresh_every) a Newton step from the "
                         f"last exact minimiser, with its certified interval; exact at the end")
        # the bound's weight of the consensus error (FedSEA Lemmas 1 and 3)
        r.add_row("bound's consensus weight (L/2)·Σ‖x_m − x̄‖²/M", _fmt(st.regret.get("consensus_bound")), "", "")
        h = st.heterogeneity
        het = Table(show_header=True, expand=False)
        for col in ("σ̄² (played)", "σ̄² (at u_t)", "ζ̄²", "K̄²", "L", "ℓ"):
            het.add_column(col, justify="right")
        het.add_row(_pm(h, "sigma2"), _pm(h, "sigma2_comparator"), _pm(h, "zeta2"), _pm(h, "K2"),
                    _fmt(h.get("L")), _fmt(h.get("curvature_mean")))
        reg = h.get("regime") or {}
        units = reg.get("units", "loss units")
        helps = reg.get("parallelisation_helps")
        verdict = {True: "[green]helps[/]", False: "[red]does not help[/]"}.get(
            helps, f"[yellow]undetermined[/] ({reg.get('reason') or 'missing estimates'})")
        regime = Table(show_header=True, expand=False,
                       title="parallelisation: the noise term against the terms averaging does not improve")
        regime.add_column(f"N = Σ ησ²/(2M(2−ηℓ)) ({units})", justify="right")
        regime.add_column(f"V = Σ K²/(2ηℓ²(2−ηℓ)) ({units})", justify="right")
        regime.add_column(f"P = D²/(2η(2−ηℓ)) ({units})", justify="right")
        regime.add_column("N ≥ V + P ⇒ averaging helps")
        regime.add_row(_fmt(reg.get("noise_term")), _fmt(reg.get("temporal_term")), _fmt(reg.get("transient_term")),
                       verdict)
        slow = [Text(self.bottleneck, style="yellow")] if self.bottleneck else []
        # the tracker's divergence watch (streamfl.regret.stability.LossGrowth): a loss growing without inf or NaN
        warn = [Text(f"warning: {st.warning}", style="bold red")] if getattr(st, "warning", None) else []
        return Group(t, *warn, *slow, r, het, regime, *(Text(n, style="dim") for n in dict.fromkeys(notes)))

    def __call__(self, tracker, stream=None) -> None:
        self.dropped = int(getattr(stream, "n_dropped_", 0) or 0)
        self.progress.update(self.task, completed=tracker.state.t)
        if self.enabled:
            self.live.update(Group(self.progress, self.table(tracker)))
