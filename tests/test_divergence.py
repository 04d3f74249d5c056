"""A learner that diverges without reaching inf or NaN is said so: before the run and after it.

A 60-row table with d = 500 features gave a static regret in the hundreds of thousands with the default
η = 0.05, exit 0 and no note, while summary.json said L = 14.7–45.4. That L is the smoothness of the
expected loss; each SGD step descends one client's mini-batch loss, whose curvature is ‖a‖² ≈ d for
b = 1. The run header now compares η with both (streamfl.regret.stability.step_size_check), and the
tracker watches the network loss (LossGrowth).
"""

import io
import json

import numpy as np
import pandas as pd
import pytest
from rich.console import Console
from typer.testing import CliRunner

from streamfl.cli import app
from streamfl.config import default_config, parse_config
from streamfl.generators.build import build_stream
from streamfl.regret.stability import LossGrowth
from streamfl.runtime.experiment import run_experiment
from streamfl.runtime.header import describe_inputs, header_lines
from streamfl.runtime.live import LiveView


def _table(path, n, d, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = X @ (rng.standard_normal(d) / np.sqrt(d)) + 0.1 * rng.standard_normal(n)
    frame = pd.DataFrame(X, columns=[f"x{i}" for i in range(d)])
    frame["y"] = y
    frame.to_csv(path, index=False)
    return np.column_stack([X, np.ones(n)])          # the streamed features: raw columns and the intercept


def _config(name, data, extra=""):
    return (f"name: {name}\nsteps: null\nsource: {{kind: file, path: {data}, label: y, task: least_squares, clients: 2, "
            f"standardize: false}}\nbaselines: []\noutput: {{plots: false}}\n{extra}")


def _cli(tmp_path, monkeypatch, *argv):
    monkeypatch.chdir(tmp_path)                      # as users run it: from their own folder
    result = CliRunner().invoke(app, list(argv))
    assert result.exit_code == 0, result.output
    return result.output


def test_a_wide_table_that_diverges_is_said_before_and_after(tmp_path, monkeypatch):
    A = _table(tmp_path / "wide.csv", 60, 500)
    (tmp_path / "wide.yaml").write_text(_config("wide", "wide.csv"))
    out = _cli(tmp_path, monkeypatch, "run", "--config", "wide.yaml", "--out", "run", "--no-live")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    check = summary["inputs"]["step_size"]
    # L_batch: ‖a‖² of every row (b = 1; T = 30 steps of 2 clients, all read), its median
    L_batch = float(np.median(np.sum(A * A, axis=1)))
    assert check["L_batch"] == pytest.approx(L_batch, rel=1e-12)
    # L of the expected loss: λ_max(Σ_t Σ_m (1/2) a aᵀ / T) = λ_max(AᵀA)/60, through the 60 × 60 Gram; the same as
    # the tracker's heterogeneity.L after the run
    L = float(np.linalg.eigvalsh(A @ A.T)[-1]) / 60
    assert check["L"] == pytest.approx(L, rel=1e-10)
    assert summary["heterogeneity"]["L"] == pytest.approx(L, rel=1e-10)
    assert 10 < L < 25 and 400 < L_batch < 600          # η·L < 2, η·L_batch ≫ 2: the batch decides
    assert check["eta_L"] == pytest.approx(0.05 * L_batch) and check["steps_above"] == 30
    warning = (f"η·L = {0.05 * L_batch:.3g} > 2: SGD on an L-smooth loss can diverge; lower "
               f"learner.step_size.eta below 2/L = {2 / L_batch:.3g} (L = {L_batch:.4g}: λ_max((1/b)Σ a aᵀ) of one "
               f"client's mini-batch loss (b = 1), the loss each step descends, median over the first 30 steps; "
               f"the expected loss's L is {L:.4g})")
    assert summary["inputs"]["warnings"] == [warning]
    header, after = out.split("done in", 1)
    assert f"warning: {warning}" in " ".join(header.split())
    # after the run: the loss grew ×hundreds without inf or NaN
    div = summary["divergence"]
    assert div["diverging"] is True and div["ratio"] > 100 and div["window_steps"] == 2
    loss = pd.read_csv(tmp_path / "run" / "metrics.csv")["loss"].to_numpy()
    assert div["first_mean"] == pytest.approx(loss[:2].mean(), rel=1e-9)
    assert div["last_mean"] == pytest.approx(loss[-2:].mean(), rel=1e-9)
    assert div["note"] in summary["tracker_notes"]
    assert div["note"].startswith(f"diverging: the network loss averages {loss[-2:].mean():.4g} over steps 29–30, ")
    assert "warning: diverging: the network loss averages" in " ".join(after.split())
    assert summary["regret_static"] > 1e3
    # the live view says it too
    seen = []
    cfg = parse_config({**__import__("yaml").safe_load(_config("wide", str(tmp_path / "wide.csv"))), "chunk_size": 8})
    run_experiment(cfg, tmp_path / "live", on_chunk=lambda tracker, stream: seen.append(tracker), plots=False)
    console = Console(record=True, width=200, file=io.StringIO())
    console.print(LiveView("x", 30, console=console, enabled=False).table(seen[-1]))
    assert "warning: diverging: the network loss averages" in console.export_text()


def test_a_narrow_table_gets_neither_warning(tmp_path, monkeypatch):
    _table(tmp_path / "narrow.csv", 60, 5)
    (tmp_path / "narrow.yaml").write_text(_config("narrow", "narrow.csv"))
    out = _cli(tmp_path, monkeypatch, "run", "--config", "narrow.yaml", "--out", "run", "--no-live")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["inputs"]["warnings"] == [] and summary["inputs"]["step_size"]["eta_L"] < 1
    assert summary["divergence"]["diverging"] is False and summary["divergence"]["note"] is None
    assert "warning" not in out


def test_a_decaying_step_is_checked_over_its_first_steps(tmp_path):
    # every row has one feature equal to 3: ‖a‖² = 9; η_t = 2/√t, so η_t·9 > 2 ⇔ t < 81: the first 80 steps
    X = np.zeros((100, 3))
    X[np.arange(100), np.arange(100) % 3] = 3.0
    frame = pd.DataFrame(X, columns=["a", "b", "c"])
    frame["y"] = np.arange(100) % 2
    frame.to_csv(tmp_path / "rows.csv", index=False)
    cfg = parse_config({"steps": None, "source": {"kind": "file", "path": str(tmp_path / "rows.csv"), "label": "y",
                                                  "task": "least_squares", "clients": 1, "standardize": False,
                                                  "intercept": False},
                        "learner": {"step_size": {"kind": "inv_sqrt", "eta": 2.0}}, "baselines": []})
    inputs = describe_inputs(cfg, build_stream(cfg))
    check = inputs["step_size"]
    assert check["L_batch"] == 9.0 and check["steps_above"] == 80 and check["eta_L"] == 18.0
    assert check["L"] == pytest.approx(9.0 * 34 / 100, rel=1e-12)        # 34 rows of feature a among 100
    assert inputs["warnings"][0].startswith("η_t·L > 2 for the first 80 steps (η_1·L = 18): SGD on an L-smooth "
                                            "loss can diverge there; lower learner.step_size.eta below 2/L = 0.222")
    assert header_lines(inputs)[-1] == "warning: " + inputs["warnings"][0]


def test_the_default_experiment_is_quiet():
    cfg = default_config()
    inputs = describe_inputs(cfg, build_stream(cfg))
    assert inputs["warnings"] == []
    # the population's L = 1/4 for logistic with unit feature scale; a step descends ‖a‖²/4 ≈ d/4
    assert inputs["step_size"]["L"] == pytest.approx(0.25)
    assert 1.5 < inputs["step_size"]["L_batch"] < 3.5


def test_loss_growth_verdicts():
    # windows of 2 steps over T = 10
    g = LossGrowth(10, windows=5)
    g.update(np.arange(1, 2), np.array([1.0]))
    assert g.verdict()["note"] is None and g.verdict()["first_mean"] is None      # the first window is not complete
    g.update(np.arange(2, 11), np.array([3.0, 50.0, 450.0, 300.0, 100.0, 4.0, 2.0, 1.0, 1.0]))
    v = g.verdict()
    # window means 2, 250, 200, 3, 1: rose to 125× and fell back
    assert v["diverging"] is False and v["overshoot"] is True
    assert v["peak_mean"] == 250.0 and v["peak_steps"] == [3, 4] and v["ratio"] == 0.5
    assert v["note"] == ("the network loss rose to 250 over steps 3–4, 125× its mean over steps 1–2 (2), before "
                         "falling back to 1: the first steps overshoot; a smaller learner.step_size.eta avoids it")
    # the same steps in other chunks: the same verdict
    h = LossGrowth(10, windows=5)
    values = np.array([1.0, 3.0, 50.0, 450.0, 300.0, 100.0, 4.0, 2.0, 1.0, 1.0])
    for lo, hi in ((0, 3), (3, 4), (4, 10)):
        h.update(np.arange(lo + 1, hi + 1), values[lo:hi])
    assert h.verdict() == v
    # a loss 99× its first window's is not divergence (the factor is 100)
    k = LossGrowth(4, windows=2)
    k.update(np.arange(1, 5), np.array([1.0, 1.0, 99.0, 99.0]))
    assert k.verdict()["diverging"] is False and k.verdict()["ratio"] == 99.0
