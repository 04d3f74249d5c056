"""Seeds and sweeps of streaming sparse logistic runs (FedSubAvg), as users run them from a temporary folder."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from streamfl.config import ConfigError, parse_config, read_yaml, sweep_metric

CLI = [sys.executable, "-m", "streamfl.cli"]
ENV = {**os.environ, "COLUMNS": "300"}

TINY = """name: tiny
seed: 0
steps: 60
chunk_size: 30
source: {kind: sparse_powerlaw, clients: 10, features: 200, nnz: 3, hot: 5, drift_period: 20, drift_swaps: 2}
learner: {model: sparse_logistic, tau: 5, batch_size: 2, step_size: {eta: 0.5}}
"""


def cli(tmp_path, *argv):
    return subprocess.run(CLI + list(argv), cwd=tmp_path, capture_output=True, text=True, env=ENV, timeout=300)


def test_seeds_run_writes_every_seed_and_the_mean_of_their_summaries(tmp_path):
    (tmp_path / "x.yaml").write_text(TINY)
    proc = cli(tmp_path, "run", "--config", "x.yaml", "--seeds", "3", "--out", "r", "--no-live")
    assert proc.returncode == 0, proc.stderr
    root = tmp_path / "r"
    assert sorted(p.name for p in root.iterdir()) == ["config.yaml", "metrics.csv", "plots", "seed-0", "seed-1",
                                                     "seed-2", "summary.json"]
    seeds = [json.loads((root / f"seed-{s}" / "summary.json").read_text()) for s in (0, 1, 2)]
    summary = json.loads((root / "summary.json").read_text())
    assert summary["seeds"] == [0, 1, 2] and summary["model"] == "sparse_logistic"
    want = sum(s["regret_static"] for s in seeds) / 3
    assert summary["regret_static"] == pytest.approx(want, rel=1e-12, abs=1e-12)
    assert summary["intervals"]["regret_static"]["mean"] == pytest.approx(want, rel=1e-12, abs=1e-12)
    assert summary["intervals"]["regret_static"]["n"] == 3
    for name in ("fedsea", "tau1", "local", "fedavg"):
        assert summary["cum_loss"][name] == pytest.approx(np.mean([s["cum_loss"][name] for s in seeds]), rel=1e-12)
    gap = summary["intervals"]["gaps.fedavg"]
    assert gap["mean"] == pytest.approx(np.mean([s["gaps"]["fedavg"] for s in seeds]), rel=1e-12)
    assert summary["concept"]["regret"] == pytest.approx(np.mean([s["concept"]["regret"] for s in seeds]), rel=1e-12)
    # integers every seed agrees on stay integers; figures the model does not track stay null, undisputed
    assert type(summary["n_clients"]) is int and summary["rounds"] == 12 and type(summary["rounds"]) is int
    assert summary["regret_expected"] is None and "regret_expected" not in summary["agreement"]
    assert "regret_expected" not in summary["intervals"] and summary["wall_seconds"] > 0
    # per step: the mean of the seeds' columns, with the t-interval columns the plots shade
    agg = pd.read_csv(root / "metrics.csv")
    per = [pd.read_csv(root / f"seed-{s}" / "metrics.csv") for s in (0, 1, 2)]
    np.testing.assert_allclose(agg["regret_static"], sum(p["regret_static"] for p in per) / 3, rtol=1e-9)
    assert {"regret_static_lo", "regret_static_hi", "gap_fedavg_lo", "cum_loss_fedavg_hi"} <= set(agg.columns)
    assert {p.name for p in (root / "plots").iterdir()} == {"regret.png", "regret_over_sqrt_t.png", "loss.png"}
    from streamfl.report.plots import _baselines        # the interval columns are bands, not three more baselines
    assert _baselines(agg) == ["tau1", "local", "fedavg"]
    r = summary["intervals"]["regret_static"]
    assert f"regret static: {r['mean']:.4f} ± {r['hi'] - r['mean']:.4f}  (n = 3)" in proc.stdout
    assert f"loss gap FedSubAvg − fedavg: {gap['mean']:.4f} ± {gap['hi'] - gap['mean']:.4f}  (n = 3)" in proc.stdout
    assert "regret against the true concept (w*, b*): " in proc.stdout and "wall time: " in proc.stdout
    assert "note: baselines: tau1, local, fedavg" in proc.stdout          # the run header says what was inferred


def test_sweep_over_clients_reports_each_settings_summary(tmp_path):
    (tmp_path / "x.yaml").write_text(TINY + "sweep: {metric: regret_static, parameters: {source.clients: [4, 10]}}\n")
    proc = cli(tmp_path, "run", "--config", "x.yaml", "--out", "s", "--no-live", "--no-plots")
    assert proc.returncode == 0, proc.stderr
    root = tmp_path / "s"
    table = pd.read_csv(root / "sweep.csv")
    assert list(table["run"]) == ["clients-4", "clients-10"] and list(table["M"]) == [4, 10]
    assert "metric_note" not in table.columns and "sweep.metric not given" not in proc.stdout
    for rec in table.to_dict("records"):
        summary = json.loads((root / rec["run"] / "summary.json").read_text())
        assert summary["n_clients"] == rec["M"]
        assert rec["regret_static"] == pytest.approx(summary["regret_static"], rel=1e-12)
        assert rec["gap_fedavg"] == pytest.approx(summary["gaps"]["fedavg"], rel=1e-12)
        assert rec["regret_concept"] == pytest.approx(summary["concept"]["regret"], rel=1e-12)
        assert (f"  {rec['run']} (M = {rec['M']}): regret static {summary['regret_static']:.4f}; loss gap to fedavg "
                f"{summary['gaps']['fedavg']:.4f} nats") in proc.stdout.splitlines()
    saved = json.loads((root / "sweep.json").read_text())
    assert saved["metric"] == "regret_static" and saved["metric_source"] == "config" and saved["agreement"] is None
    assert saved["units"] == "nats"
    assert not (root / "agreement.csv").exists() and not list(root.rglob("*.png"))


def test_a_sweep_without_metric_compares_the_static_regret_and_says_so(tmp_path):
    from rich.console import Console

    from streamfl.runtime.sweep import run_sweep
    data = read_yaml(TINY)
    data.update(steps=20, sweep={"parameters": {"source.clients": [2, 3], "source.alpha": [1.0, 2.0]}})
    cfg = parse_config(data)
    metric, note = sweep_metric(cfg)
    assert metric == "regret_static" and note.startswith("sweep.metric not given: comparing regret_static")
    out = io.StringIO()
    result = run_sweep(cfg, tmp_path / "s", console=Console(file=out, width=300), live=False, plots=False,
                       workers=1)
    assert f"note: {note}" in out.getvalue().splitlines()           # the header says it, first
    table = pd.read_csv(tmp_path / "s" / "sweep.csv")
    assert len(table) == 4 and set(table["label"]) == {"alpha=1.0", "alpha=2.0"}
    assert (table["metric_note"] == note).all() and table["regret_static"].notna().all()
    saved = json.loads((tmp_path / "s" / "sweep.json").read_text())
    assert saved["metric"] == "regret_static" and saved["metric_source"] == "inferred" and note in saved["notes"]
    assert result["notes"] == saved["notes"]


@pytest.mark.parametrize("sweep, message", [
    ("{metric: regret_expected, parameters: {source.clients: [4, 10]}}",
     "error: config error: sweep.metric: regret_expected is not tracked by learner.model sparse_logistic (only the "
     "static regret); use regret_static"),
    ("{metric: regret_dynamic, parameters: {source.clients: [4, 10]}}",
     "error: config error: sweep.metric: regret_dynamic is not tracked by learner.model sparse_logistic (only the "
     "static regret); use regret_static"),
    ("{parameters: {source.alpha: [1.0, 2.0]}}",
     "error: config error: sweep.parameters must include source.clients: the comparison plot is regret against M"),
])
def test_sweep_refusals_are_one_line_before_any_run(tmp_path, sweep, message):
    (tmp_path / "x.yaml").write_text(TINY + f"sweep: {sweep}\n")
    proc = cli(tmp_path, "run", "--config", "x.yaml", "--no-live")
    assert proc.returncode == 2 and proc.stderr.strip() == message and proc.stdout == ""
    assert not (tmp_path / "runs").exists()                  # no run folder was started


def test_metric_refusal_in_process():
    data = read_yaml(TINY)
    data["sweep"] = {"metric": "regret_expected", "parameters": {"source.clients": [4]}}
    with pytest.raises(ConfigError, match=r"^config error: sweep\.metric: regret_expected is not tracked"):
        parse_config(data)
    data["sweep"] = {"parameters": {"source.clients": [4]}}
    assert sweep_metric(parse_config(data))[0] == "regret_static"
    linear = parse_config({"steps": 5, "source": {"kind": "synthetic", "task": "least_squares"},
                           "sweep": {"parameters": {"source.clients": [1, 2]}}})
    assert sweep_metric(linear) == ("regret_expected", None)      # the linear default is unchanged
