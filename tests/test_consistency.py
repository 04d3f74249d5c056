"""The live view, summary.json, metrics.csv, the final lines and the plots say the same thing."""

import json
import subprocess
import sys

import numpy as np
import pandas as pd
from rich.console import Console

from streamfl.config import parse_config
from streamfl.runtime.experiment import run_experiment
from streamfl.runtime.live import LiveView

CLI = [sys.executable, "-m", "streamfl.cli"]

HYPERPLANE_B1 = """name: hp
steps: 120
source: {kind: river_synth, name: Hyperplane, params: {n_features: 4}, clients: 3}
learner: {tau: 5, batch_size: 1}
baselines: []
"""

LOGISTIC = """name: lg
steps: 120
source: {kind: synthetic, task: logistic, clients: 3, dim: 3}
learner: {tau: 5}
baselines: []
"""


def _cli_run(tmp_path, text, *extra):
    (tmp_path / "c.yaml").write_text(text)
    proc = subprocess.run(CLI + ["run", "--config", "c.yaml", "--no-live", "--out", "run", *extra], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc, json.loads((tmp_path / "run" / "summary.json").read_text())


def _live_text(cfg, tmp_path) -> str:
    seen = []
    run_experiment(cfg, tmp_path / "live", on_chunk=lambda tracker, stream: seen.append(tracker), plots=False)
    console = Console(record=True, width=140)
    console.print(LiveView("x", cfg.steps, console=console, enabled=False).table(seen[-1]))
    return console.export_text()


def test_an_undetermined_regime_is_undetermined_everywhere(tmp_path):
    # River's Hyperplane with b = 1: no population F, so σ² cannot be estimated
    proc, summary = _cli_run(tmp_path, HYPERPLANE_B1, "--no-plots")
    het = summary["heterogeneity"]
    assert het["sigma2_mean"] is None and het["parallelisation_helps"] is None      # null, not false
    assert "⇒ undetermined (the gradient noise σ² cannot be estimated" in proc.stdout
    assert "transient n/a" in proc.stdout and "nan" not in proc.stdout
    live = _live_text(parse_config(__import__("yaml").safe_load(HYPERPLANE_B1)), tmp_path)
    assert "undetermined (the gradient noise σ² cannot be" in live
    assert "helps" not in live.replace("averaging helps", "")        # no yes/no verdict where none exists
    # the expected and dynamic regrets do not exist here: said, not left as a bare dash
    assert summary["regret_expected"] is None and summary["regret_dynamic"] is None
    assert summary["regret_expected_method"] == "not available (needs a synthetic source: F is unknown)"
    assert "regret expected: n/a  (not available (needs a synthetic source: F is unknown))" in proc.stdout
    assert "n/a†" in live and "† needs a synthetic source (the population loss F is unknown)" in live


def test_logistic_expected_regret_is_marked_as_computed_at_the_end(tmp_path):
    proc, summary = _cli_run(tmp_path, LOGISTIC, "--no-plots")
    metrics = pd.read_csv(tmp_path / "run" / "metrics.csv")
    assert metrics["regret_expected"].isna().all()                  # not tracked per step (README says so)
    assert np.isfinite(summary["regret_expected"])                  # but known at the end
    assert summary["regret_expected_method"] == ("exact, computed at the end of the run (solver over the recorded "
                                                  "optima); not tracked per step")
    assert summary["regret_dynamic_method"] == "exact at every step"
    assert f"regret expected: {summary['regret_expected']:.4f}  (exact, computed at the end" in proc.stdout
    live = _live_text(parse_config(__import__("yaml").safe_load(LOGISTIC)), tmp_path)
    assert "at end*" in live
    assert "* computed at the end of the run for the logistic loss (exact solve over the recorded optima)" in live
    assert summary["heterogeneity"]["parallelisation_helps"] in (True, False)    # determined: synthetic source


def test_summary_records_when_each_client_was_present(tmp_path):
    rows = [{"c": "a", "x": float(i), "label": i % 2} for i in range(5)] + \
           [{"c": "b", "x": float(i), "label": (i + 1) % 2} for i in range(3)] + \
           [{"c": "d", "x": 1.0, "label": 1}]
    pd.DataFrame(rows).to_csv(tmp_path / "t.csv", index=False)
    cfg = parse_config({"name": "t", "steps": None, "baselines": [],
                        "source": {"kind": "file", "path": str(tmp_path / "t.csv"), "label": "label",
                                   "features": ["x"], "split": {"kind": "column", "column": "c"}}})
    summary = run_experiment(cfg, tmp_path / "r", plots=False)
    assert summary["client_steps"] == [5, 3, 1]
    assert summary["client_last_step"] == [5, 3, 1]
