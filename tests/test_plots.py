"""Tests of the run-folder figures (streamfl.report.plots)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from matplotlib.image import imread

from streamfl.report import load_metrics, plot_sweep, render_run
from streamfl.report.plots import MAX_POINTS, _thin_index

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PLOTS = ("regret.png", "regret_over_sqrt_t.png", "client_losses.png", "heterogeneity.png", "decomposition.png",
         "client_regret.png")


def synthetic_run(T: int = 2000, M: int = 5, seed: int = 0, baselines=("tau1", "local", "centralized"),
                  switches=(700, 1400)) -> tuple[pd.DataFrame, dict]:
    """A plausible metrics frame and summary: √t regret, drift bumps, σ²/ζ²/K²."""
    rng = np.random.default_rng(seed)
    switches = [s for s in switches if s < T]
    t = np.arange(1, T + 1, dtype=float)
    bump = sum(3.0 * np.log1p(np.maximum(t - s, 0.0)) for s in switches)
    loss = 0.5 + 2.0 / np.sqrt(t) + 0.05 * rng.standard_normal(T) ** 2
    cum_loss = np.cumsum(loss)
    cols = {"t": t.astype(int), "loss": loss, "cum_loss": cum_loss}
    for i, b in enumerate(baselines):
        other = cum_loss - (1.0 + i) * np.sqrt(t) + 0.3 * i * t ** 0.6
        cols[f"cum_loss_{b}"] = other
        cols[f"gap_{b}"] = cum_loss - other
    static = 4.0 * np.sqrt(t) + bump + rng.normal(0, 0.5, T)
    cols["comparator_static"] = cum_loss - static
    cols["regret_static"] = static
    cols["regret_expected"] = 3.0 * np.sqrt(t) + 0.8 * bump
    cols["regret_dynamic"] = 6.0 * np.sqrt(t) + 2.0 * bump + 0.002 * t
    cols["sigma2"] = 0.8 * np.exp(rng.normal(0, 0.15, T))
    cols["zeta2"] = 0.2 * np.exp(rng.normal(0, 0.15, T))
    k2 = 0.004 * np.exp(rng.normal(0, 0.4, T))
    for s in switches:
        k2[s] += 5.0
    k2[0] = np.nan
    cols["K2"] = k2
    for m in range(M):
        lm = loss * (1 + 0.15 * (m - M / 2) / M) + 0.02 * rng.standard_normal(T) ** 2
        cols[f"client{m}_cum_loss"] = np.cumsum(lm)
        cols[f"client{m}_regret_static"] = static * (1 + 0.1 * m / M)
    df = pd.DataFrame(cols)
    checkpoints = [[int(c), float(static[int(c) - 1] * 0.97)] for c in np.unique(np.geomspace(8, T, 10).astype(int))]
    summary = {
        "main": "fedsea",
        "t": T,
        "n_clients": M,
        "regret_static": float(checkpoints[-1][1]),
        "regret_static_method": "exact (L-BFGS over the recorded stream)",
        "static_checkpoints": checkpoints,
        "heterogeneity": {"sigma2_mean": 0.8, "zeta2_mean": 0.2, "K2_mean": 0.0115, "L": 1.0,
                          "parallelisation_helps": True},
        "config": {"name": "demo-logistic", "task": "logistic",
                   "source": {"kind": "synthetic", "task": "logistic",
                              "drift": [{"kind": "abrupt", "at": [s - 1 for s in switches]},
                                        {"kind": "linear", "speed": 0.01}]}},
    }
    return df, summary


def write_run(path, df: pd.DataFrame, summary: dict, fmt: str = "csv"):
    path.mkdir(parents=True, exist_ok=True)
    if fmt == "csv":
        df.to_csv(path / "metrics.csv", index=False)
    else:
        df.to_parquet(path / "metrics.parquet", index=False)
    (path / "summary.json").write_text(json.dumps(summary))
    return path


def assert_png(path, min_height: int = 300):
    assert path.is_file(), path
    with open(path, "rb") as f:
        assert f.read(8) == PNG_SIGNATURE, path
    img = imread(path)
    assert img.ndim == 3 and img.shape[0] > min_height, (path, img.shape)


def test_render_run_writes_six_pngs(tmp_path):
    run = write_run(tmp_path / "run", *synthetic_run())
    paths = render_run(run)
    assert [p.name for p in paths] == list(PLOTS)
    for p in paths:
        assert p.parent == run / "plots"
        assert_png(p)


def test_render_run_parquet_and_missing_series(tmp_path):
    df, summary = synthetic_run(T=600, M=3, baselines=("river",), switches=())
    df["regret_expected"] = np.nan
    df["regret_dynamic"] = np.nan
    df["K2"] = 0.0
    df["zeta2"] = np.nan
    summary["static_checkpoints"] = []
    summary["config"] = {}
    del summary["heterogeneity"]
    run = write_run(tmp_path / "run", df, summary, fmt="parquet")
    for p in render_run(run):
        assert_png(p)


def test_all_nan_expected_regret_does_not_crash(tmp_path):
    df, summary = synthetic_run(T=400, M=2)
    df["regret_expected"] = np.nan
    run = write_run(tmp_path / "run", df, summary)
    for p in render_run(run):
        assert_png(p)


def test_many_clients_and_long_run_are_thinned(tmp_path):
    df, summary = synthetic_run(T=25_000, M=40, baselines=("tau1",), switches=(9000,))
    run = write_run(tmp_path / "run", df, summary, fmt="parquet")
    assert len(load_metrics(run)) == 25_000
    for p in render_run(run):
        assert_png(p)
    idx = _thin_index(25_000)
    assert len(idx) <= MAX_POINTS and idx[0] == 0 and idx[-1] == 24_999 and np.all(np.diff(idx) > 0)


def test_missing_cum_loss_raises_value_error(tmp_path):
    df, summary = synthetic_run(T=100, M=2)
    run = write_run(tmp_path / "run", df.drop(columns=["cum_loss"]), summary)
    with pytest.raises(ValueError, match="cum_loss"):
        load_metrics(run)
    with pytest.raises(ValueError, match="cum_loss"):
        render_run(run)


def test_missing_metrics_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="metrics"):
        load_metrics(tmp_path)


def test_plot_sweep_writes_png(tmp_path):
    rows = []
    t = np.arange(1, 3001)
    for label, drift in (("mild drift", 0.5), ("strong drift", 2.0)):
        for M in (1, 2, 4, 8, 16):
            regret = (2.0 / np.sqrt(M) + 0.2 * drift) * np.sqrt(t)
            rows.append({"label": label, "M": M, "t": t, "regret": regret, "final": float(regret[-1])})
    out = plot_sweep(rows, tmp_path / "sweep" / "sweep.png")
    assert_png(out)
