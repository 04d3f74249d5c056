"""The tracker's cheaper live figures: refresh period, memory budget, bounded memory, fast quadrature."""

import numpy as np
import pandas as pd
import pytest

from streamfl.generators.population import LogisticPopulation, _softplus_mean
from streamfl.generators.schedules import RandomWalk
from streamfl.generators.synthetic import SyntheticStream
from streamfl.models import StackedLinear, StepSize
from streamfl.regret import RegretTracker
from streamfl.regret.comparators import LeastSquaresHindsight, refresh_steps
from streamfl.regret.fastquad import softplus_mean
from streamfl.regret.heterogeneity import population_estimates
from streamfl.runtime.engine import run_stream
from streamfl.runtime.experiment import effective_chunk_size
from streamfl.runtime.learners import Federated


def _data(n=700, M=3, b=2, d=5, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, M, b, d))
    y = X @ rng.standard_normal(d) + rng.standard_normal((n, M, b))
    return X, y, np.full((n, M), 1 / M), np.ones((n, M), bool)


def test_refresh_steps_rule():
    assert refresh_steps(0, 40, 64) == list(range(1, 17)) + [32]
    assert refresh_steps(40, 100, 64) == [24, 88]          # t = 64, 128
    assert refresh_steps(100, 10, 64, extra=[105]) == [5]
    assert refresh_steps(5, 3, 1) == [1, 2, 3]


@pytest.mark.parametrize("radius", [None, 0.5])
def test_live_values_are_exact_at_refresh_steps_and_upper_bounds_between(radius):
    X, y, c, p = _data()
    exact, ec = LeastSquaresHindsight(3, 5, radius).update(X, y, c, p)
    h = LeastSquaresHindsight(3, 5, radius, refresh_every=64, extra=[700])
    parts = [h.update(X[i:i + 97], y[i:i + 97], c[i:i + 97], p[i:i + 97]) for i in range(0, 700, 97)]
    live = np.concatenate([a for a, _ in parts])
    lc = np.concatenate([b for _, b in parts])
    ts = np.arange(1, 701)
    at = np.isin(ts, [t for t in ts if t <= 16 or t in (32,) or t % 64 == 0 or t == 700])
    np.testing.assert_allclose(live[at], exact[at], rtol=1e-10)
    np.testing.assert_allclose(lc[at], ec[at], rtol=1e-10)
    assert np.all(live[~at] >= exact[~at] - 1e-9)            # the warm value bounds the minimum from above
    assert np.any(live[~at] > exact[~at] + 1e-6)             # ... and is not silently the exact one
    assert h.refreshes == at.sum()


def _ls_run(T, **kw):
    stream = SyntheticStream("least_squares", n_clients=4, n_features=20, n_steps=T, batch_size=1, noise=0.5,
                             heterogeneity=0.5, radius=1.0, feature_scale=1.0, drift=[RandomWalk(0.05)], seed=2)
    step = StepSize("constant", eta=0.02)
    learner = Federated(StackedLinear(4, 20, "least_squares", step), 5)
    rows = []
    tr = RegretTracker(stream, "fedsea", ["fedsea"], sink=rows.append, step_size=step, tau=5, **kw)
    run_stream(stream, {"fedsea": learner}, tr, "fedsea", chunk_size=64)
    return tr, pd.concat(rows, ignore_index=True), tr.finalize()


def test_memory_budget_keeps_the_network_exact_and_says_what_it_skips():
    _, frame, full = _ls_run(300, refresh_every=1)
    tr, small_frame, small = _ls_run(300, refresh_every=1, memory_budget_mb=0.01)
    assert small["tracker_notes"] == [
        "per-client static regret skipped: the per-client d×d statistics need 0 MB, more than "
        "tracker.memory_budget_mb = 0.01; the network comparator is exact (0.0 MB)"]
    assert small["client_regret"]["static"] is None
    assert full["client_regret"]["static"] is not None and full["tracker_notes"] == []
    assert small["regret_static"] == pytest.approx(full["regret_static"], rel=1e-12)
    np.testing.assert_allclose(small_frame["regret_static"], frame["regret_static"], rtol=1e-12)
    assert tr.hindsight.clients is None                        # no per-client statistics kept
    assert tr.hindsight.net.A.shape == (1, 20, 20)              # the network's: 1,200 rows > d, so d × d


def test_refresh_period_changes_live_values_only_and_is_stated():
    _, f1, exact = _ls_run(600, refresh_every=1)
    tr, f64, warm = _ls_run(600, refresh_every=64)
    assert warm["regret_static"] == pytest.approx(exact["regret_static"], rel=1e-10)
    assert warm["client_regret"]["static"] == pytest.approx(exact["client_regret"]["static"], rel=1e-9)
    on = f64["t"].isin([t for t in range(1, 601) if t <= 16 or t % 64 == 0 or t in (32, 600) or t in tr.checkpoints])
    np.testing.assert_allclose(f64.loc[on, "regret_static"], f1.loc[on, "regret_static"], rtol=1e-9)
    np.testing.assert_allclose(f1["regret_static_live"], f1["regret_static"], rtol=1e-12)   # every step exact
    assert f64.loc[~on, "regret_static"].isna().all()            # not exact there: no exact value claimed
    # between refreshes, the certified interval holds the exact regret, and the estimate is close to it
    truth = f1.loc[~on, "regret_static"]
    assert (f64.loc[~on, "regret_static_lower"] <= truth + 1e-9).all()
    assert (truth <= f64.loc[~on, "regret_static_upper"] + 1e-9).all()
    width = f64.loc[~on, "regret_static_upper"] - f64.loc[~on, "regret_static_lower"]
    err = (f64.loc[~on, "regret_static_live"] - truth).abs()
    assert width.max() > 1e-6 and (err <= width + 1e-12).all() and err.median() < 0.25 * width.median()
    assert "every 64 steps (tracker.refresh_every)" in warm["regret_static_live_method"]
    assert exact["regret_static_live_method"] == "exact at every step (sufficient statistics)"


def _array_bytes(obj, seen=None):
    """Bytes of every in-memory ndarray reachable from obj's attributes (dicts and lists included), once each;
    memory maps of files (the recorded stream beyond its memory budget) are not counted."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        base = obj
        while isinstance(base, np.ndarray) and base.base is not None:
            base = base.base
        return 0 if isinstance(obj, np.memmap) or not isinstance(base, np.ndarray) else obj.nbytes
    if isinstance(obj, dict):
        return sum(_array_bytes(v, seen) for v in obj.values())
    if isinstance(obj, (list, tuple, set)):
        return sum(_array_bytes(v, seen) for v in obj)
    if hasattr(obj, "__dict__") and type(obj).__module__.startswith("streamfl"):
        return _array_bytes(vars(obj), seen)
    return 0


@pytest.mark.parametrize("task", ["least_squares", "logistic"])
def test_tracker_memory_does_not_grow_with_T(task, tmp_path):
    sizes = []
    for T in (256, 2048):
        stream = SyntheticStream(task, n_clients=3, n_features=4, n_steps=T, batch_size=1, heterogeneity=0.5,
                                 radius=1.0, drift=[RandomWalk(0.05)], seed=1)
        step = StepSize("constant", eta=0.05)
        # logistic: the recorded stream goes to files beyond recording_memory_mb (here: at once)
        tr = RegretTracker(stream, "fedsea", ["fedsea"], sink=lambda f: None, step_size=step, tau=2,
                           reservoir_size=64, recording_memory_mb=1e-6, spool_dir=str(tmp_path / f"s{T}"))
        run_stream(stream, {"fedsea": Federated(StackedLinear(3, 4, task, step), 2)}, tr, "fedsea", chunk_size=64)
        blocks = max(len(s._counts) for s in tr.stats.values())
        sizes.append((_array_bytes(tr), blocks, len(tr.checkpoint_loss), len(tr.checkpoint_exp)))
        tr.finalize()
        assert not (tmp_path / f"s{T}").exists()        # the spilled recording is deleted at the end
    assert sizes[0][0] == sizes[1][0]                  # the same in-memory arrays, whatever T
    assert sizes[1][1] <= 32 and sizes[1][2] <= 16 and sizes[1][3] <= 16


def test_interpolated_softplus_mean_agrees_with_the_quadrature():
    rng = np.random.default_rng(0)
    tau = np.concatenate([rng.uniform(0, 64, 200_000), rng.uniform(0, 0.02, 10_000), [0.0, 1e-12, 64.0, 80.0]])
    exact = _softplus_mean(tau)
    assert np.max(np.abs(softplus_mean(tau) - exact) / exact) < 5e-15


def test_softplus_grid_filled_segment_by_segment_equals_the_whole_grid():
    # the grid is computed as the run's τ reach it; a node's value must not depend on which τ came first
    import streamfl.regret.fastquad as fq
    saved, tau = fq._GRID, np.array([41.3, 0.2, 7.77, 63.999])
    try:
        fq._GRID = None
        first = [float(fq.softplus_mean(np.array([v]))[0]) for v in tau]     # one segment at a time
        assert fq._GRID[3].sum() < len(fq._GRID[3])                           # not the whole grid
        fq._GRID = None
        fq._grid()                                                            # the whole grid at once
        assert fq._GRID[3].all()
        assert fq.softplus_mean(tau).tolist() == first
    finally:
        fq._GRID = saved


def test_noise_on_rotating_clients_is_their_mean():
    pop = LogisticPopulation(3)
    rng = np.random.default_rng(1)
    n, M = 8, 5
    x, w = rng.standard_normal((n, M, 3)), rng.standard_normal((n, M, 3))
    steps = np.arange(1, n + 1)
    est = population_estimates(pop, x, x.mean(axis=1), w, None, 2, steps, noise_every=4, noise_clients=2)
    full = pop.grad_noise(x, w) / 2
    assert np.isnan(est["sigma2"][[0, 1, 2, 4, 5, 6]]).all()
    # t = 4: j = 1 → clients 2, 3; t = 8: j = 2 → clients 4, 0
    assert est["sigma2"][3] == pytest.approx(full[3, [2, 3]].mean(), rel=1e-13)
    assert est["sigma2"][7] == pytest.approx(full[7, [4, 0]].mean(), rel=1e-13)


def test_chunks_are_capped_by_their_feature_count():
    class S:
        n_clients, batch_size, n_features, task = 100_000, 1, 10, "logistic"
    assert effective_chunk_size(256, S) == 4               # 4 · 10⁶ ≤ 2²² features
    S.n_clients = 64
    S.n_features = 100
    assert effective_chunk_size(256, S) == 256


def _logistic_run(T, chunk, radius=5.0, **kw):
    """A logistic run; with a radius (the default here) its live comparator is solved exactly at the refit
    steps and warm in between (softmax's path too)."""
    stream = SyntheticStream("logistic", n_clients=3, n_features=4, n_steps=T, batch_size=2, heterogeneity=0.5,
                             seed=3)
    step = StepSize("constant", eta=0.05)
    frames = []
    tr = RegretTracker(stream, "fedsea", ["fedsea"], radius=radius, sink=frames.append, step_size=step, tau=2,
                       reservoir_size=64, **kw)
    run_stream(stream, {"fedsea": Federated(StackedLinear(3, 4, "logistic", step), 2)}, tr, "fedsea",
               chunk_size=chunk)
    return tr, pd.concat(frames, ignore_index=True), tr.finalize()


def test_solver_refit_period_rule_and_statement():
    from streamfl.regret.comparators import is_refit_step, refit_points
    assert [t for t in range(1, 3000) if is_refit_step(t, 1024)] == [16, 32, 64, 128, 256, 512, 1024, 2048]
    assert [t for t in range(1, 600) if is_refit_step(t, 256)] == [16, 32, 64, 128, 256, 512]   # the former rule
    assert [t for t in range(1, 40) if is_refit_step(t, 10)] == [10, 20, 30]
    assert refit_points(0, 600, 1024) == [16, 32, 64, 128, 256, 512, 600]
    tr, frame, out = _logistic_run(700, 100, refit_every=256)
    assert out["regret_static_live_method"] == (
        "exact (L-BFGS over the recorded stream, warm-started) at steps 16, 32, 64, 128, every 256 steps "
        "(tracker.refit_every), whenever the steps have grown by an eighth, the checkpoints and T; in between the "
        "smaller of the last exact minimiser's and the origin's cumulative loss, an upper bound on the comparator "
        "(so the live regret is a lower bound on the exact one), with the last exact value as the lower bound")
    # the exact values at their steps, and every live value inside its bounds
    exact = frame["regret_static"].notna()
    assert set(frame.loc[exact, "t"]) >= {16, 32, 64, 128, 256, 512, 700}
    assert (frame["regret_static_lower"] <= frame["regret_static_live"] + 1e-12).all()
    assert (frame["regret_static_live"] <= frame["regret_static_upper"] + 1e-12).all()
    assert tr.refit_every == 256


def test_solver_refit_period_changes_live_values_only_not_with_chunking():
    _, a, exact_a = _logistic_run(700, 100, refit_every=64)
    _, b, exact_b = _logistic_run(700, 33, refit_every=64)
    _, c, exact_c = _logistic_run(700, 100, refit_every=1024)
    np.testing.assert_allclose(a["regret_static_live"].to_numpy(), b["regret_static_live"].to_numpy(), rtol=1e-10)
    # the same live values up to the first exact solve that differs, t = 192 (16, …, 128 are exact in both;
    # 192 is a multiple of 64 only): exact there in a, the warm value (above it) in c
    np.testing.assert_array_equal(a["regret_static_live"][:191].to_numpy(), c["regret_static_live"][:191].to_numpy())
    assert a["regret_static_live"][191] > c["regret_static_live"][191]
    assert exact_a["regret_static"] == pytest.approx(exact_c["regret_static"], rel=1e-12)   # nor the exact end value
    assert exact_a["regret_static"] == pytest.approx(exact_b["regret_static"], rel=1e-12)


def _resident_mb():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20


def test_spool_pages_are_released_after_use(tmp_path):
    """The end-of-run solves read the recorded stream through mappings whose pages are dropped once used."""
    from streamfl.regret.tracker import _map, _release
    path = tmp_path / "X.bin"
    np.arange(8 * 2**20, dtype=np.float64).tofile(path)              # 64 MB
    mm, a = _map(str(path), np.float64)
    before = _resident_mb()
    assert a.sum() == float(8 * 2**20) * (8 * 2**20 - 1) / 2
    touched = _resident_mb()
    _release(mm, 0, a.nbytes)
    after = _resident_mb()
    assert touched - before > 40 and touched - after > 40
    assert a[12345] == 12345.0                                        # still readable (re-read from the file)
    (tmp_path / "empty.bin").write_bytes(b"")
    assert _map(str(tmp_path / "empty.bin"), np.float64)[1].shape == (0,)


def test_client_blocks_are_the_clients_rows():
    stream = SyntheticStream("logistic", n_clients=3, n_features=4, n_steps=300, batch_size=2, seed=3)
    step = StepSize("constant", eta=0.05)
    tr = RegretTracker(stream, "fedsea", ["fedsea"], sink=lambda f: None, step_size=step, tau=2, reservoir_size=64)
    run_stream(stream, {"fedsea": Federated(StackedLinear(3, 4, "logistic", step), 2)}, tr, "fedsea",
               chunk_size=100)
    chunks = list(stream.chunks(100))
    X = np.concatenate([ch.X for ch in chunks])
    y = np.concatenate([ch.y for ch in chunks])
    for m in range(tr.M):
        (Xc, yc, wc), = list(tr.bracket.client_blocks(m)())
        np.testing.assert_array_equal(Xc, X[:, m].reshape(-1, tr.d))
        np.testing.assert_array_equal(yc, y[:, m].reshape(-1))
        np.testing.assert_array_equal(wc, np.full(len(yc), 1 / tr.b))
    steps = list(tr.bracket.step_blocks())
    np.testing.assert_array_equal(np.concatenate([s[0] for s in steps]), X)
    tr.finalize()


@pytest.mark.parametrize("radius", [None, 0.5])
def test_sparse_client_refreshes_keep_the_network_at_every_refresh_step(radius):
    # client_extra: the clients are solved only at the multiples of refresh_every and the given steps
    # (their M·d³ solves), the network at every refresh step as before
    X, y, c, p = _data()
    exact, ec = LeastSquaresHindsight(3, 5, radius).update(X, y, c, p)
    full = LeastSquaresHindsight(3, 5, radius, refresh_every=64, extra=[700])
    h = LeastSquaresHindsight(3, 5, radius, refresh_every=64, extra=[700], client_extra=[700])
    fparts = [full.update(X[i:i + 97], y[i:i + 97], c[i:i + 97], p[i:i + 97]) for i in range(0, 700, 97)]
    parts = [h.update(X[i:i + 97], y[i:i + 97], c[i:i + 97], p[i:i + 97]) for i in range(0, 700, 97)]
    live = np.concatenate([a for a, _ in parts])
    lc = np.concatenate([b for _, b in parts])
    ts = np.arange(1, 701)
    np.testing.assert_array_equal(live, np.concatenate([a for a, _ in fparts]))   # the network: unchanged
    at = (ts % 64 == 0) | (ts == 700)
    np.testing.assert_allclose(lc[at], ec[at], rtol=1e-10)
    assert np.all(lc[~at] >= ec[~at] - 1e-9)
    assert np.any(lc[(ts <= 16) & (ts > 1)] > ec[(ts <= 16) & (ts > 1)] + 1e-6)   # warm, not exact, at t ≤ 16


def test_sparse_client_refreshes_are_stated_and_leave_the_final_values(monkeypatch):
    import streamfl.regret.tracker as tracker_module
    _, f_all, every = _ls_run(300, refresh_every=64)
    monkeypatch.setattr(tracker_module, "CLIENT_SOLVE_FLOPS", 0)
    _, f_sparse, sparse = _ls_run(300, refresh_every=64)
    assert sparse["client_regret"]["static"] == pytest.approx(every["client_regret"]["static"], rel=1e-10)
    np.testing.assert_array_equal(f_sparse["regret_static"], f_all["regret_static"])
    assert sparse["regret_static_live_method"].endswith(
        "; per client exact only every 64 steps and at T (M·d³ = 3.2e+04 > 0e+00 per solve), the last exact "
        "minimiser's loss in between")
    assert "per client" not in every["regret_static_live_method"]
