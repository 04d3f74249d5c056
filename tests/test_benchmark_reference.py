"""The throughput benchmark's implementations compute FedSEA: equal to a plain per-sample reference,
and the fair (batched) torch implementation equal to the engine's per-sample losses."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "throughput.py"


def _load_benchmark():
    spec = importlib.util.spec_from_file_location("streamfl_benchmark_throughput", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_engine_matches_per_sample_reference_on_tiny_stream():
    bench = _load_benchmark()
    M, d, T, tau, eta = 4, 5, 30, 3, 0.05
    cfg = bench.make_config("logistic", M, d, 1, eta, T, tau=tau)
    X, y, engine = bench.engine_losses(cfg, T)
    assert X.shape == (T, M, 1, d) and y.shape == (T, M, 1)
    reference = bench.reference_fedsea(X, y, tau, eta)
    assert engine.shape == reference.shape == (T, M)
    np.testing.assert_allclose(engine, reference, rtol=0, atol=1e-9)
    # The averaging really happened: without it (tau > T) the trajectory differs.
    no_avg = bench.reference_fedsea(X, y, T + 1, eta)
    assert np.max(np.abs(no_avg - reference)) > 1e-6


@pytest.mark.parametrize("autograd", [True, False])
def test_batched_torch_matches_the_engine_per_sample_losses(autograd):
    pytest.importorskip("torch")
    bench = _load_benchmark()
    M, d, T, tau, eta = 16, 20, 120, 10, 0.05
    cfg = bench.make_config("logistic", M, d, 1, eta, T, tau=tau)
    X, y, engine = bench.engine_losses(cfg, T)
    got, seconds = bench.torch_batched(X, y, tau, eta, autograd=autograd)
    assert got.shape == (T, M) and seconds > 0
    np.testing.assert_allclose(got, engine, rtol=0, atol=1e-6)
    assert np.abs(engine[-1] - engine[0]).max() > 1e-3      # the models learned: losses moved away from ln 2
    # cycling past the given steps keeps the first pass's losses
    again, _ = bench.torch_batched(X, y, tau, eta, autograd=autograd, n_steps=T + 7)
    np.testing.assert_array_equal(again, got)


def test_per_sample_torch_loop_matches_the_engine():
    pytest.importorskip("torch")
    bench = _load_benchmark()
    cfg = bench.make_config("logistic", 3, 4, 1, 0.1, 25, tau=2)
    X, y, engine = bench.engine_losses(cfg, 25)
    got, _ = bench.torch_per_sample(X, y, 2, 0.1)
    np.testing.assert_allclose(got, engine, rtol=0, atol=1e-6)


def test_quick_benchmark_prints_every_row(tmp_path):
    """`--quick` runs end to end and prints each section's rows (timings are not checked)."""
    env = {**os.environ, "PYTHONPATH": str(SCRIPT.parents[1])}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--json", str(tmp_path / "q.json")],
                          cwd=tmp_path, capture_output=True, text=True, env=env, timeout=1800)
    out = proc.stdout
    assert proc.returncode == 0, proc.stderr[-2000:]
    for row in ["== whole run", "logistic M=8 d=10", "least_squares M=8 d=10", "softmax M=8 d=10 K=10",
                "logistic M=32 d=10", "logistic M=4 d=40",
                "least_squares M=32 d=10", "least_squares M=4 d=40", "== where the whole run goes",
                "== many clients", "M=20", "M=50",
                "== memory against T", "T=300", "T=600",
                "torch, all clients batched, autograd (fair row)", "torch, per-client per-sample autograd loop",
                "centralized (compiled sequential loop)", "river (one River", "default set",
                "== the same instrumented runs, by comparator", "== live static estimate",
                "== live static comparator (least squares)", "== start-up", "to first step"]:
        assert row in out, f"missing row {row!r} in:\n{out}"
    assert "error:" not in out, out
    assert "FAILED" not in out, out                 # the torch rows agree with the engine to 1e-6
    assert (tmp_path / "q.json").exists()
