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
    """A plausible metrics frame and summary: √t regret, drift bumps, σ²/ζ²/K²; ``switches`` are the steps t
    (counted from 1, as the config's ``at``) of abrupt drift: the regrets bump and K² spikes from there."""
    rng = np.random.default_rng(seed)
    switches = [s for s in switches if s < T]
    t = np.arange(1, T + 1, dtype=float)
    bump = sum(3.0 * np.log1p(np.maximum(t - s + 1, 0.0)) for s in switches)
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
        k2[s - 1] += 5.0                                     # row s − 1 is step s
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
                              "drift": [{"kind": "abrupt", "at": list(switches)},
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


# ---------------------------------------------------------------------- structure: what a reader can trust
from matplotlib.patches import Rectangle  # noqa: E402

from streamfl.report import render_sweep  # noqa: E402
from streamfl.report.plots import (  # noqa: E402
    _client_losses_figure,
    _heterogeneity_figure,
    _regret_figure,
    _regret_over_sqrt_t_figure,
)


def _legend_texts(fig):
    return [t.get_text() for leg in fig.legends for t in leg.get_texts()]


def _lines(ax):
    return {line.get_label(): line for line in ax.get_lines()}


def test_regret_has_a_panel_for_regrets_and_one_for_loss_gaps():
    df, summary = synthetic_run(T=600, M=3, baselines=("tau1", "local", "centralized", "river"))
    df["gap_river"] = df["gap_local"]                   # River equals local-only
    df["gap_centralized"] = df["gap_tau1"] + 0.01        # close enough to hide tau1 under it
    fig = _regret_figure(df, summary)
    top, bottom = fig.axes
    assert top.get_ylabel() == "cumulative regret $R_t$ (nats)"
    assert bottom.get_ylabel() == "loss gap (nats)"
    assert not any(label.startswith("loss gap") for label in _lines(top))      # gaps are not regrets
    gaps = {k: v for k, v in _lines(bottom).items() if k.startswith("loss gap")}
    assert sorted(gaps) == ["loss gap to centralized, overlaps tau1 (max |Δ| = 0.01)", "loss gap to local",
                            "loss gap to river, identical to local", "loss gap to tau1"]
    # every gap line has its own marker and line style, markers at staggered steps: none can hide another
    assert len({line.get_marker() for line in gaps.values()}) == 4
    assert len({line.get_markevery()[0] for line in gaps.values()}) == 4
    texts = _legend_texts(fig)
    assert "loss gap to river, identical to local" in texts
    assert "M = 3 clients" in top.get_title()


def test_regret_without_baselines_is_one_panel_and_says_so():
    df, summary = synthetic_run(T=300, M=1, baselines=())
    fig = _regret_figure(df, summary)
    assert len(fig.axes) == 1
    title = fig.axes[0].get_title().replace("\n", " ")
    assert "M = 1 client;" in title and "no baselines in this run" in title


INJECT = [{"kind": "covariate_rotation", "start": 200, "end": 300, "angle": 1.5},
          {"kind": "label_flip", "start": 450, "end": None, "fraction": 0.25}]


def _with_injected_drift(summary):
    summary["config"]["source"] = {"kind": "river_dataset", "inject": INJECT,
                                   "drift": [{"kind": "abrupt", "at": [99]}]}
    return summary


@pytest.mark.parametrize("build", [_regret_figure, _regret_over_sqrt_t_figure, _client_losses_figure,
                                   _heterogeneity_figure])
def test_every_time_axis_marks_injected_and_synthetic_drift(build):
    df, summary = synthetic_run(T=600, M=3, switches=())
    fig = build(df, _with_injected_drift(summary))
    spans = [p for ax in fig.axes for p in ax.patches if isinstance(p, Rectangle) and not (p.get_label() or "_").startswith("_")]
    labels = sorted(p.get_label() for p in spans)
    # steps count from 1 in the config as on the axes: the marks sit at the steps the config names
    assert labels == ["injected covariate rotation 1.5 rad, t = 200–300 then held",
                      "injected label flip (25% of labels), t ≥ 450"]
    flip = next(p for p in spans if "label flip" in p.get_label())
    assert flip.get_hatch() == "//"
    assert "abrupt drift switch" in _legend_texts(fig)
    assert _lines(fig.axes[0])["abrupt drift switch"].get_xdata()[0] == 99
    for ax in fig.axes:                                   # both panels of regret.png carry the marks
        assert any(isinstance(p, Rectangle) and p.get_x() == 200 for p in ax.patches)


def test_continuous_drift_is_named_in_the_regret_subtitle():
    df, summary = synthetic_run(T=300, M=2)
    summary["config"]["source"]["drift"].append({"kind": "rotation", "speed": 0.0005})
    title = _regret_figure(df, summary).axes[0].get_title().replace("\n", " ")
    assert "drift at every step: linear 0.01 per step, rotation 0.0005 rad/step" in title


def _ended_clients_run(T=400):
    df, summary = synthetic_run(T=T, M=3, switches=())
    df["client1_cum_loss"] = np.where(df["t"] <= 250, df["client1_cum_loss"], df["client1_cum_loss"].iloc[249])
    df["client2_cum_loss"] = 0.0                            # a client with no rows
    df["client2_avg_loss"] = np.nan
    summary["client_last_step"] = [T, 250, 0]
    return df, summary


@pytest.mark.parametrize("from_summary", [True, False])
def test_client_losses_end_where_the_table_ends_and_skip_empty_clients(from_summary):
    df, summary = _ended_clients_run()
    if not from_summary:                                   # older runs: read from the flat cumulative loss
        del summary["client_last_step"]
    fig = _client_losses_figure(df, summary)
    ax = fig.axes[0]
    lines = _lines(ax)
    assert lines["client 1"].get_xdata()[-1] == 250        # stops at its last step, not flat to T
    assert lines["client 0"].get_xdata()[-1] == 400
    assert "client 2" not in lines and "client 2" not in _legend_texts(fig)
    ends = [line for line in ax.get_lines() if line.get_marker() == "x" and len(line.get_xdata())]
    assert [float(line.get_xdata()[0]) for line in ends] == [250.0]
    assert ends[0].get_ydata()[0] == pytest.approx(df["client1_cum_loss"].iloc[249] / 250)
    assert "last step of a client whose table ended (1 of 2)" in _legend_texts(fig)
    assert "client 2 had no rows" in ax.get_title()


def test_client_losses_y_axis_holds_the_start_of_every_curve():
    df, summary = synthetic_run(T=2000, M=3, switches=())
    df.loc[0, "client0_cum_loss"] = 40.0                   # a first loss far above the rest
    fig = _client_losses_figure(df, summary)
    ax = fig.axes[0]
    lo, hi = ax.get_ylim()
    first = df["client0_cum_loss"].iloc[:5] / df["t"].iloc[:5]
    assert hi >= first.max() and ax.get_yscale() == "log"


def test_client_losses_without_client_columns_and_with_a_long_name():
    df, summary = synthetic_run(T=300, M=1)
    df = df[[c for c in df.columns if not c.startswith("client")]]
    summary["config"]["name"] = "sweep-heterogeneity-clients-16-strong_drift-with-a-much-longer-name"
    fig = _client_losses_figure(df, summary)
    sub = fig.axes[0].get_title().replace("\n", " ")
    assert sub.startswith("M = 1 client; per-client columns not recorded (output.client_columns: false)")
    assert "first 0" not in sub
    assert "\n" in fig._suptitle.get_text()                 # wrapped, not cut off


def test_heterogeneity_names_the_missing_estimate():
    df, summary = synthetic_run(T=300, M=2)
    df["sigma2"] = np.nan
    reason = "the gradient noise σ² cannot be estimated (a mini-batch of b ≥ 2 samples is needed)"
    summary["heterogeneity"].update(sigma2_mean=None, parallelisation_helps=None,
                                    regime={"parallelisation_helps": None, "reason": reason})
    fig = _heterogeneity_figure(df, summary)
    title = fig.legends[0].get_title().get_text()
    assert f"regime undetermined ({reason})" in title


@pytest.mark.parametrize("metric,what", [("regret_dynamic", r"of the average model $\bar{x}_t$"),
                                         ("regret_static", "of the network loss (mean over clients)")])
def test_sweep_labels_say_what_is_plotted(metric, what):
    from streamfl.report.plots import _sweep_figure
    t = np.arange(1, 101)
    rows = [{"label": "mild", "M": M, "t": t, "regret": t / M, "final": 100.0 / M} for M in (1, 4)]
    left, right, _ = _sweep_figure(rows, metric).axes           # curves, finals, colour bar
    name = metric.split("_")[1]
    assert right.get_ylabel() == f"final {name} regret $R_T$ {what} (loss units)"
    assert left.get_ylabel() == f"{name} regret $R_t$ {what} (loss units)"


def test_render_sweep_reads_the_sweep_folder(tmp_path):
    root = tmp_path / "sweep"
    for M in (1, 4):
        df, summary = synthetic_run(T=200, M=M, baselines=())
        write_run(root / f"clients-{M}", df, summary)
    pd.DataFrame({"run": ["clients-1", "clients-4"], "label": ["x", "x"], "M": [1, 4],
                  "regret_dynamic": [5.0, 2.0]}).to_csv(root / "sweep.csv", index=False)
    assert render_sweep(root) == root / "sweep.png"
    assert_png(root / "sweep.png")
    (root / "sweep.csv").write_text("run,label\nclients-1,x\n")
    with pytest.raises(ValueError, match="'M' is missing"):
        render_sweep(root)


def test_regime_agreement_plot_marks_agreeing_and_disagreeing_cells(tmp_path):
    from streamfl.report.plots import plot_regime_agreement
    cells = [{"label": "slow", "M": 4, "predicted_share": 0.8, "share_mean": 0.7, "share_lo": 0.6, "share_hi": 0.8,
              "agree": True},
             {"label": "fast", "M": 16, "predicted_share": 0.7, "share_mean": 0.2, "share_lo": 0.1, "share_hi": 0.3,
              "agree": False}]
    agreement = {"cells": cells, "agree": 1, "n": 2, "literal_agree": 0, "literal_n": 2, "metric": "regret_dynamic"}
    path = plot_regime_agreement(agreement, tmp_path / "regime.png")
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_client_regret_leaves_out_clients_that_never_played_and_wraps_its_title():
    from streamfl.report.plots import _client_regret_figure
    df, summary = synthetic_run(T=100, M=3, baselines=())
    df = df.drop(columns=[c for c in df.columns if c.startswith("client") and "_regret_" in c])
    summary["config"]["name"] = "n" * 60
    summary["client_last_step"] = [0, 56, 100]          # client 0 had no rows
    summary["client_regret"] = {"static": [0.0, 32.5, 40.0], "expected": None, "dynamic": None}
    fig = _client_regret_figure(df, summary)
    assert len(fig.axes) == 1
    points = _lines(fig.axes[0])["clients at their last step (exact)"]
    assert sorted(points.get_ydata().tolist()) == [32.5, 40.0]            # not the never-played 0
    assert fig.axes[0].get_title() == "static: per client at T only (solved at\nthe end of the run)"
    title = fig._suptitle.get_text()
    # a one-panel figure is 4.8 in wide: lines of at most 43 characters (the name alone cannot be broken)
    assert title == "n" * 60 + "\n(fedsea): per-client regret (each client\nagainst its own comparators)"


def test_decomposition_notes_coinciding_curves_and_the_live_static_estimate():
    from streamfl.report.plots import _decomposition_figure
    df, summary = synthetic_run(T=200, M=2, baselines=())
    df["regret_static_virtual"] = df["regret_static"] + 0.05           # hides the played models' curve
    df["consensus_part_static"] = -0.05
    df["cum_consensus"] = np.linspace(0.0, 100.0, len(df))              # far from the consensus part
    summary["heterogeneity"]["L"] = 1.0
    summary["config"]["source"] = {"kind": "file"}
    fig = _decomposition_figure(df, summary)
    labels = [line.get_label() for line in fig.axes[0].get_lines() if not line.get_label().startswith("_")]
    static = f"{df['regret_static'].iloc[-1]:.4g}"
    virtual = f"{df['regret_static_virtual'].iloc[-1]:.4g}"
    assert labels[0] == f"static regret of the played models (live estimate): {static}"
    assert labels[1] == (f"virtual average x̄_t (Lemma 1, first term): {virtual}; "
                         "overlaps static regret (max |Δ| = 0.05)")
    assert "overlaps" not in labels[3]


def test_literal_condition_that_cannot_be_evaluated_reads_undetermined():
    df, summary = synthetic_run(T=200, M=2, baselines=())
    summary["heterogeneity"]["literal"] = {"lhs": None, "rhs": 0.2, "holds": None}
    fig = _heterogeneity_figure(df, summary)
    texts = [t.get_text() for ax in fig.axes for t in ax.texts] + _legend_texts(fig)
    texts += [t.get_text() for leg in [ax.get_legend() for ax in fig.axes] if leg for t in leg.get_texts()]
    texts += [leg.get_title().get_text() for leg in fig.legends]
    joined = "\n".join(texts)
    assert "read literally (not unit-invariant): n/a vs 0.2 ⇒ undetermined" in joined
    assert "⇒ None" not in joined


def test_client_losses_says_when_a_client_is_the_network_and_draws_it_on_top():
    df, summary = synthetic_run(T=200, M=1, baselines=())
    df["client0_cum_loss"] = df["cum_loss"]                   # M = 1: the client is the network
    fig = _client_losses_figure(df, summary)
    ax = fig.axes[0]
    assert _legend_texts(fig) == ["client 0, identical to the network", "network (weighted mean over clients)"]
    lines = _lines(ax)
    assert lines["client 0, identical to the network"].get_zorder() > lines["network (weighted mean over clients)"].get_zorder()
    assert "M = 1 client;" in ax.get_title()
    df2, summary2 = synthetic_run(T=200, M=2, baselines=())
    assert "identical" not in " ".join(_legend_texts(_client_losses_figure(df2, summary2)))


def test_heterogeneity_lists_series_that_are_zero_in_the_legend_not_over_the_curves():
    df, summary = synthetic_run(T=200, M=1, baselines=())
    df["zeta2"] = 0.0
    df["K2"] = 0.0
    fig = _heterogeneity_figure(df, summary)
    top = fig.axes[0]
    assert not [t.get_text() for t in top.texts if "log scale" in t.get_text()]
    legend = [t.get_text() for t in top.get_legend().get_texts()] if top.get_legend() else _legend_texts(fig)
    assert "ζ² ≡ 0, K² ≡ 0 (not drawn on the log scale)" in legend


@pytest.mark.parametrize("build", [_regret_figure, _regret_over_sqrt_t_figure])
def test_live_static_estimate_says_where_it_starts_and_exact_points_are_not_clipped(build):
    df, summary = synthetic_run(T=300, M=2, baselines=())
    df.loc[df["t"] < 17, "regret_static"] = np.nan              # the live estimate's warm-up
    fig = build(df, summary)
    ax = fig.axes[0]
    lines = _lines(ax)
    assert "static: best fixed in hindsight (live estimate, from t = 17)" in lines
    exact = [line for label, line in lines.items() if label.startswith("static, exact")]
    assert len(exact) == 1 and exact[0].get_clip_on() is False


def test_decomposition_checkpoint_points_are_not_clipped_at_the_edges():
    from streamfl.report.plots import _decomposition_figure
    df, summary = synthetic_run(T=200, M=2, baselines=())
    df = df.drop(columns=["regret_expected"])
    summary["decomposition"] = {"basis": "population F"}
    summary["expected_checkpoints"] = [[1, 0.5, 0.4], [100, 5.0, 4.9], [200, 8.0, 7.9]]
    fig = _decomposition_figure(df, summary)
    marks = [line for label, line in _lines(fig.axes[0]).items() if "exact at checkpoints" in label]
    assert len(marks) == 2 and all(line.get_clip_on() is False for line in marks)
    assert marks[0].get_xdata().tolist() == [1.0, 100.0, 200.0]


def test_heterogeneity_draws_a_sparsely_recorded_series_as_one_connected_line():
    df, summary = synthetic_run(T=400, M=4, baselines=())
    sparse = np.full(len(df), np.nan)
    sparse[7::8] = 2.0                                   # σ² known at t = 8, 16, …, 400 only
    df["sigma2"] = sparse
    fig = _heterogeneity_figure(df, summary)
    line = next(line for line in fig.axes[0].get_lines() if line.get_label().startswith("σ² (gradient noise"))
    x, y = np.asarray(line.get_xdata(), dtype=float), np.asarray(line.get_ydata(), dtype=float)
    assert x.tolist() == list(range(8, 401, 8))          # its own points, no NaN gaps between them
    assert np.all(np.isfinite(y)) and np.allclose(y, 2.0)


def test_client_regret_says_why_a_panel_has_points_at_t_only():
    from streamfl.report.plots import _client_regret_figure
    df, summary = synthetic_run(T=100, M=2, baselines=())
    summary["client_regret"] = {"static": [3.0, 4.0], "expected": [2.0, 2.5], "dynamic": None}
    fig = _client_regret_figure(df, summary)                     # static has per-step columns, expected not
    assert [ax.get_title() for ax in fig.axes] == ["static", "expected: per client at T only (solved\nat the end of the run)"]
    df = df.drop(columns=[c for c in df.columns if "_regret_" in c and c.startswith("client")])
    summary["config"]["output"] = {"client_columns": False}
    fig = _client_regret_figure(df, summary)
    assert [ax.get_title() for ax in fig.axes] == [
        "static: per client at T only\n(output.client_columns: false)",
        "expected: per client at T only\n(output.client_columns: false)"]


def test_client_regret_stops_a_client_whose_table_ended_at_its_last_step():
    from streamfl.report.plots import _client_regret_figure
    df, summary = synthetic_run(T=100, M=3, baselines=())
    summary["client_last_step"] = [100, 40, 20]
    summary["client_regret"] = {"static": [5.0, 4.0, 3.0], "expected": None, "dynamic": None}
    summary["regret_static_method"] = "exact (sufficient statistics)"
    fig = _client_regret_figure(df, summary)
    lines = _lines(fig.axes[0])
    points = lines["clients at their last step (exact)"]
    assert points.get_xdata().tolist() == [100.0, 40.0, 20.0]
    median = lines["clients' median of the clients still playing"]
    y, x = np.asarray(median.get_ydata(), dtype=float), np.asarray(median.get_xdata(), dtype=float)
    # past t = 40 only client 0 plays: the median is its own curve, not a mix with frozen values
    assert np.allclose(y[x > 40], df.loc[df["t"].isin(x[x > 40]), "client0_regret_static"].to_numpy())


def test_regret_over_sqrt_t_labels_steps_between_decades_on_a_short_run():
    df, summary = synthetic_run(T=75, M=2, baselines=())
    fig = _regret_over_sqrt_t_figure(df, summary)
    ax = fig.axes[0]
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_xticklabels() + ax.get_xticklabels(minor=True) if t.get_text()]
    assert {"1", "10", "20", "40"} <= set(labels)
