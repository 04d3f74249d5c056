"""The expert anchors of benchmarks/whole_run.py compute streamfl's figures: fed streamfl's own stream, their
static regrets (final, at the checkpoints, per client) and per-step metrics equal the summary and metrics.csv
of run_experiment on the same config.

Tolerance: 1e-10 relative. Both sides solve the same convex problems to the rounding of the objective
(L-BFGS-B stopping when f moves by less than 1e-15 of itself, or closed forms), and sum the same losses in
another order (relative rounding ~1e-16 per term); the regret L − L* amplifies relative errors by L / regret
(about 25 here). Measured disagreement: 1e-15 to 6e-14, also at T = 4,000, M = 64, d = 100. Any real
difference (a step averaged at the wrong t, a weight 1/M missing, the loss charged after the update) moves
the regret by far more than 1e-6 (checked below with τ + 1).
"""

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from streamfl.config import ExperimentConfig
from streamfl.generators.build import build_stream
from streamfl.runtime.experiment import run_experiment

ANCHORS = Path(__file__).resolve().parents[1] / "benchmarks" / "anchors"
sys.path.insert(0, str(ANCHORS))
sys.path.insert(0, str(ANCHORS.parent))

import anchor_common  # noqa: E402
import numpy_figures  # noqa: E402
import numpy_final  # noqa: E402
from whole_run import ETA, config_dict  # noqa: E402

RTOL = 1e-10
T, M, D, TAU = 120, 6, 5, 10


@pytest.fixture(scope="module", params=["logistic", "least_squares"])
def reference(request, tmp_path_factory):
    """streamfl's run on the benchmark's config (small), its stream's chunks, and its summary and metrics."""
    task = request.param
    tmp = tmp_path_factory.mktemp(task)
    cfg = ExperimentConfig.model_validate(config_dict(task, T, M, D, str(tmp)))
    summary = run_experiment(cfg, tmp / "run", plots=False)
    chunks = [(c.X, c.y) for c in build_stream(cfg).chunks(cfg.chunk_size)]
    metrics = pd.read_csv(tmp / "run" / "metrics.csv")
    return task, chunks, summary, metrics, tmp


def test_like_stream_draws_streamfls_stream(reference):
    task, chunks, *_ = reference
    X = np.concatenate([x for x, _ in chunks])
    y = np.concatenate([y for _, y in chunks])
    mine = list(anchor_common.like_stream(task, T, M, D, chunk=7))          # another chunking, the same draws
    np.testing.assert_array_equal(np.concatenate([x for x, _ in mine]), X)
    np.testing.assert_allclose(np.concatenate([y for _, y in mine]), y, rtol=0, atol=1e-14)


def test_final_only_anchor_equals_streamfl(reference):
    task, chunks, summary, *_ = reference
    got = numpy_final.run(iter(chunks), task, M, D, 1, ETA[task], TAU)
    assert got["T"] == T
    np.testing.assert_allclose(got["regret_static"], summary["regret_static"], rtol=RTOL)
    np.testing.assert_allclose(got["cum_loss"], summary["cum_loss"]["fedsea"], rtol=RTOL)
    # the check can fail: averaging one step later gives another regret
    other = numpy_final.run(iter(chunks), task, M, D, 1, ETA[task], TAU + 1)
    assert abs(other["regret_static"] - summary["regret_static"]) > 1e-6 * abs(summary["regret_static"])


def test_same_figures_anchor_equals_streamfl(reference):
    task, chunks, summary, metrics, tmp = reference
    got = numpy_figures.run(iter(chunks), task, T, M, D, 1, ETA[task], TAU, str(tmp / "anchor"))
    np.testing.assert_allclose(got["regret_static"], summary["regret_static"], rtol=RTOL)
    ts, values = zip(*got["static_checkpoints"])
    want_ts, want = zip(*summary["static_checkpoints"])
    assert list(ts) == list(want_ts) == anchor_common.checkpoints(T).tolist()
    # the first checkpoints' samples are separable: the infimum is 0 (streamfl reports it exactly), which the
    # anchor's L-BFGS-B approaches to within its tolerance (~1e-10 nats)
    np.testing.assert_allclose(values, want, rtol=RTOL, atol=1e-9)
    np.testing.assert_allclose(got["client_regret_static"], summary["client_regret"]["static"], rtol=RTOL)
    mine = pd.read_csv(got["metrics_file"])
    assert list(mine.columns) == ["t", "loss", "cum_loss"] + [f"client{m}_cum_loss" for m in range(M)]
    np.testing.assert_array_equal(mine["t"], metrics["t"])
    for col in mine.columns[1:]:                   # both files print %.10g
        np.testing.assert_allclose(mine[col], metrics[col], rtol=1e-9)


def test_torch_anchor_equals_streamfl(reference):
    pytest.importorskip("torch")
    import torch_final
    task, chunks, summary, *_ = reference
    got = torch_final.run(iter(chunks), task, M, D, 1, ETA[task], TAU)
    np.testing.assert_allclose(got["regret_static"], summary["regret_static"], rtol=RTOL)


def test_river_anchor_equals_streamfl(reference):
    pytest.importorskip("river")
    import river_final
    task, chunks, summary, *_ = reference
    got = river_final.run(iter(chunks), task, M, D, 1, ETA[task], TAU)
    np.testing.assert_allclose(got["regret_static"], summary["regret_static"], rtol=RTOL)
    with pytest.raises(ValueError, match="b = 1"):
        river_final.run(iter(chunks), task, M, D, 2, ETA[task], TAU)


def test_checkpoint_grid_is_the_trackers():
    from streamfl.regret.tracker import RegretTracker

    stream = build_stream(ExperimentConfig.model_validate(config_dict("least_squares", 4000, 2, 3)))
    tracker = RegretTracker(stream, "fedsea", ["fedsea"])
    assert sorted(tracker.checkpoints) == anchor_common.checkpoints(4000).tolist()
    assert anchor_common.checkpoints(4000).tolist()[:3] == [1, 3, 5]
