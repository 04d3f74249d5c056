"""The throughput benchmark's engine path equals its plain per-sample FedSEA reference."""

import importlib.util
from pathlib import Path

import numpy as np

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "throughput.py"


def _load_benchmark():
    spec = importlib.util.spec_from_file_location("streamfl_benchmark_throughput", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_engine_matches_per_sample_reference_on_tiny_stream():
    bench = _load_benchmark()
    M, d, T, tau, eta = 4, 5, 30, 3, 0.05
    # chunk_size 7 so the engine crosses chunk boundaries like run_stream does.
    chunks = bench.make_chunks(M, d, T, seed=0, chunk_size=7)
    X, y = bench.stack_chunks(chunks)
    assert X.shape == (T, M, 1, d) and y.shape == (T, M, 1)

    engine, _ = bench.run_engine(chunks, M, d, tau, eta)
    reference = bench.reference_fedsea(X, y, tau, eta)

    assert engine.shape == reference.shape == (T, M)
    np.testing.assert_allclose(engine, reference, rtol=0, atol=1e-9)
    # The averaging really happened: right after a round all clients share one
    # model, so they differ only through their data; without averaging
    # (tau > T) the trajectory is different.
    no_avg = bench.reference_fedsea(X, y, T + 1, eta)
    assert np.max(np.abs(no_avg - reference)) > 1e-6


def test_engine_path_respects_truncation():
    bench = _load_benchmark()
    chunks = bench.make_chunks(3, 4, 20, seed=1, chunk_size=8)
    head = bench.truncate_chunks(chunks, 13)
    assert sum(c.n_steps for c in head) == 13
    full, _ = bench.run_engine(chunks, 3, 4, 2, 0.1)
    part, _ = bench.run_engine(head, 3, 4, 2, 0.1)
    np.testing.assert_array_equal(part, full[:13])
