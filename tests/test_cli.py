import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

CLI = [sys.executable, "-m", "streamfl.cli"]
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_run_writes_a_run_folder(tmp_path):
    cfg = tmp_path / "small.yaml"
    cfg.write_text("""
name: small
steps: 300
source: {kind: synthetic, task: least_squares, clients: 4, dim: 3, drift: [{kind: abrupt, at: [150]}]}
learner: {tau: 5, step_size: {kind: constant, eta: 0.05}}
baselines: [tau1, local, centralized, river]
""")
    out = tmp_path / "run"
    proc = subprocess.run(CLI + ["run", "--config", str(cfg), "--out", str(out), "--no-live"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    metrics = pd.read_csv(out / "metrics.csv")
    assert len(metrics) == 300 and metrics["t"].iloc[-1] == 300
    assert summary["rounds"] == 60
    assert summary["regret_static"] == pytest.approx(metrics["regret_static"].iloc[-1])
    assert set(summary["gaps"]) == {"tau1", "local", "centralized", "river"}
    for name in ("regret", "regret_over_sqrt_t", "client_losses", "heterogeneity"):
        assert (out / "plots" / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "static regret" in proc.stdout


def test_bad_config_is_one_line_without_traceback(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("learner: {tau: 0}\n")
    proc = subprocess.run(CLI + ["run", "--config", str(cfg), "--no-live"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: config error: learner.tau: Input should be greater than or equal to 1 (got 0)"


def test_unknown_dataset_is_a_clear_error(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("source: {kind: river_dataset, name: Nope}\n")
    proc = subprocess.run(CLI + ["run", "--config", str(cfg), "--no-live"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "Nope" in proc.stderr and "Phishing" in proc.stderr


def test_out_must_be_a_new_folder(tmp_path):
    existing = tmp_path / "data.csv"
    existing.write_text("x\n")
    proc = subprocess.run(CLI + ["run", "--out", str(existing), "--no-live"], capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "is an existing file" in proc.stderr
    proc = subprocess.run(CLI + ["run", "--out", str(tmp_path), "--no-live"], capture_output=True, text=True)
    assert proc.returncode == 2 and "already holds files" in proc.stderr


def test_diverging_run_is_one_line(tmp_path):
    cfg = tmp_path / "eta.yaml"
    cfg.write_text("source: {kind: synthetic, task: least_squares}\nlearner: {step_size: {eta: 5}}\nbaselines: []\n")
    proc = subprocess.run(CLI + ["run", "--config", str(cfg), "--no-live", "--out", str(tmp_path / "r")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: learner 'fedsea' diverged at step t=")
    assert "Traceback" not in proc.stderr and "RuntimeWarning" not in proc.stderr
    assert not (tmp_path / "r").exists()          # no half-written run folder is left behind


def test_kafka_options_without_broker_are_refused(tmp_path):
    proc = subprocess.run(CLI + ["run", "--producers", "2", "--no-live", "--out", str(tmp_path / "r")],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == "error: --workers, --producers, --keep-topics and --metrics-port need --broker HOST:PORT"
    assert not (tmp_path / "r").exists()


def test_producer_share_is_checked_before_contacting_a_broker(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("steps: 5\n")
    proc = subprocess.run(CLI + ["produce", "--broker", "127.0.0.1:1", "--run-id", "x", "--config", str(cfg),
                                 "--partitions", "4", "--share", "2/2"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == "error: --share must be I/N with 0 ≤ I < N (e.g. 0/2), got '2/2'"


def test_replaying_a_run_into_itself_is_refused():
    proc = subprocess.run(CLI + ["replay", "--broker", "127.0.0.1:1", "--run-id", "r1", "--from-run", "r1",
                                 "--config", str(EXAMPLES / "default.yaml")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "the source is run r1's own data topic" in proc.stderr


SMALL_SWEEP = """name: sw
steps: 60
source: {kind: synthetic, task: least_squares, dim: 2, drift: [{kind: random_walk, step: 0.05}]}
learner: {tau: 5, batch_size: 2}
baselines: []
output: {client_columns: false}
sweep:
  metric: regret_dynamic
  parameters: {source.clients: [1, 2]}
"""
RUN_PLOTS = ("regret.png", "regret_over_sqrt_t.png", "client_losses.png", "heterogeneity.png")


def test_report_renders_a_sweep_folder_and_rewrites_no_summary(tmp_path):
    (tmp_path / "sw.yaml").write_text(SMALL_SWEEP)
    proc = subprocess.run(CLI + ["run", "--config", "sw.yaml", "--out", "sweep", "--no-live"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    root = tmp_path / "sweep"
    table = pd.read_csv(root / "sweep.csv")
    assert list(table["run"]) == ["clients-1", "clients-2"] and list(table["M"]) == [1, 2]
    assert (root / "config.yaml").is_file() and (root / "sweep.png").is_file()
    for run in table["run"]:                           # each run's plots are drawn too
        assert all((root / run / "plots" / p).is_file() for p in RUN_PLOTS)
    # remove every PNG, then draw them again from the folder's files
    before = {run: (root / run / "summary.json").read_bytes() for run in table["run"]}
    csv = (root / "sweep.csv").read_bytes()
    for png in root.rglob("*.png"):
        png.unlink()
    proc = subprocess.run(CLI + ["report", "sweep"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "comparison plot: sweep/sweep.png" in proc.stdout
    assert f"clients-2: sw, M = 2, regret_dynamic = {table['regret_dynamic'].iloc[1]:.4f}" in proc.stdout
    assert (root / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for run in table["run"]:
        assert all((root / run / "plots" / p).is_file() for p in RUN_PLOTS)
        assert (root / run / "summary.json").read_bytes() == before[run]
    assert (root / "sweep.csv").read_bytes() == csv


def test_sweep_with_no_plots_writes_no_png(tmp_path):
    (tmp_path / "sw.yaml").write_text(SMALL_SWEEP)
    proc = subprocess.run(CLI + ["run", "--config", "sw.yaml", "--out", "sweep", "--no-live", "--no-plots"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert not list((tmp_path / "sweep").rglob("*.png")) and "comparison plot" not in proc.stdout


def test_report_redraws_a_run_and_leaves_its_summary_alone(tmp_path):
    (tmp_path / "c.yaml").write_text("steps: 50\nsource: {kind: synthetic, task: least_squares, clients: 2, dim: 2}\n"
                                     "baselines: [local]\n")
    proc = subprocess.run(CLI + ["run", "--config", "c.yaml", "--out", "run", "--no-live", "--no-plots"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    summary = tmp_path / "run" / "summary.json"
    data, stamp = summary.read_bytes(), summary.stat().st_mtime_ns
    proc = subprocess.run(CLI + ["report", "run"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert all((tmp_path / "run" / "plots" / p).is_file() for p in RUN_PLOTS)
    assert summary.read_bytes() == data and summary.stat().st_mtime_ns == stamp
    proc = subprocess.run(CLI + ["report", "."], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == "error: . is neither a run folder (no summary.json) nor a sweep folder (no sweep.csv)"
