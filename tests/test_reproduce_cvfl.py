"""`streamfl reproduce cvfl` as users run it: from an empty folder, a small grid, exact byte counts."""

import json
import subprocess
import sys

import pandas as pd

CLI = [sys.executable, "-m", "streamfl.cli"]


def test_reproduce_cvfl_writes_tables_plots_and_exact_bytes(tmp_path):
    proc = subprocess.run(CLI + ["reproduce", "cvfl", "--out", "out", "--seeds", "2", "--epochs", "1", "--bits", "2",
                                 "--q-max-epochs", "1", "--workers", "1"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=900)
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "out"
    summary = json.loads((out / "summary.json").read_text())
    rows = {(r["compressor"], r["bits"]): r for r in summary["compression"]}
    assert set(rows) == {("none", 32), ("scalar", 2), ("lattice", 2), ("topk", 2)}
    # one epoch = 22 rounds of 64 samples + one of 29; 4 parties with 16-dim embeddings, θ_0 = Linear(64, 10).
    # b = 32, per full round: up 4·(6 + 64·16·4), down 3·up + 4·(6 + 650·4); the last round likewise with 29 rows
    assert rows[("none", 32)]["bytes_per_epoch"] == 22 * (4 * 4102 * 4 + 4 * 2606) + (4 * 1862 * 4 + 4 * 2606)
    # b = 2 scalar: embeddings 6 + 64·16·2/8 bytes, θ_0 6 + 4 (scale) + ⌈650·2/8⌉
    assert rows[("scalar", 2)]["bytes_per_epoch"] == 22 * (4 * 262 * 4 + 4 * 173) + (4 * 122 * 4 + 4 * 173)
    assert rows[("lattice", 2)]["bytes_per_epoch"] == rows[("scalar", 2)]["bytes_per_epoch"]
    runs = pd.read_csv(out / "runs.csv")
    grid = runs[runs["table"] == "grid"]
    assert len(grid) == 4 * 2 * 5                      # 4 configurations × 2 seeds × (start + 4 evaluations)
    assert (grid.groupby(["compressor", "seed"])["bytes"].max() == grid.groupby(["compressor", "seed"])["bytes"].last()).all()
    assert [r["Q"] for r in summary["q_latency"]] == [1, 10, 25]
    q = runs[runs["table"] == "q"]
    assert set(q["Q"]) == {1, 10, 25} and q.groupby(["Q", "seed"])["round"].max().max() <= 23
    for name in ("accuracy_vs_epochs", "accuracy_vs_bytes", "time_to_target"):
        assert (out / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| hexagonal lattice VQ | 2 |" in (out / "tables.md").read_text()
    assert summary["wall_seconds"] > 0 and summary["jobs_cpu_seconds"] > 0


def test_reproduce_cvfl_refuses_bad_options_in_one_line(tmp_path):
    (tmp_path / "taken").write_text("x")
    proc = subprocess.run(CLI + ["reproduce", "cvfl", "--out", "taken"], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: --out taken is an existing file; give a folder for the run"
    proc = subprocess.run(CLI + ["reproduce", "cvfl", "--bits", "9"], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "bits must be in 1..8 (b = 32 is the baseline), got (9,)" in proc.stderr
    assert not (tmp_path / "runs").exists()
