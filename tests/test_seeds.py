"""Uncertainty over seeds: ``streamfl run --seeds N`` as users run it, from a temporary folder."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from streamfl.runtime.seeds import aggregate, t_interval

CLI = [sys.executable, "-m", "streamfl.cli"]

CONFIG = """
name: seeds
seeds: 3
steps: 200
source: {kind: synthetic, task: least_squares, clients: 3, dim: 3, drift: [{kind: random_walk, step: 0.02}]}
learner: {tau: 5, batch_size: 2, step_size: {kind: constant, eta: 0.05}}
baselines: [tau1]
"""


def test_seeds_run_reports_intervals_and_keeps_every_seed(tmp_path):
    (tmp_path / "exp.yaml").write_text(CONFIG)
    # --seeds overrides the config's seeds: 3
    proc = subprocess.run(CLI + ["run", "--config", "exp.yaml", "--seeds", "2", "--out", "many", "--no-live"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    root = tmp_path / "many"
    assert sorted(p.name for p in root.iterdir()) == ["config.yaml", "metrics.csv", "plots", "seed-0", "seed-1",
                                                     "summary.json"]
    summary = json.loads((root / "summary.json").read_text())
    seeds = [json.loads((root / f"seed-{s}" / "summary.json").read_text()) for s in (0, 1)]
    assert summary["seeds"] == [0, 1]
    assert "95 %" in summary["interval"] and "t(0.975" in summary["interval"]
    for key in ("regret_static", "regret_expected", "regret_dynamic"):
        ref = t_interval([s[key] for s in seeds])
        got = summary["intervals"][key]
        assert got["mean"] == pytest.approx(ref["mean"], rel=1e-12) and summary[key] == pytest.approx(ref["mean"])
        # two seeds: t(0.975, 1) = 12.706
        half = 12.706204736174707 * abs(seeds[0][key] - seeds[1][key]) / np.sqrt(2) / np.sqrt(2)
        assert got["hi"] - got["mean"] == pytest.approx(half, rel=1e-9)
    assert summary["intervals"]["heterogeneity.regime.noise_term"]["n"] == 2
    assert summary["intervals"]["gaps.tau1"]["mean"] == pytest.approx(np.mean([s["gaps"]["tau1"] for s in seeds]))
    # per step: mean and interval columns, the mean of the seeds' columns
    agg = pd.read_csv(root / "metrics.csv")
    per = [pd.read_csv(root / f"seed-{s}" / "metrics.csv") for s in (0, 1)]
    np.testing.assert_allclose(agg["regret_dynamic"], (per[0]["regret_dynamic"] + per[1]["regret_dynamic"]) / 2,
                               rtol=1e-12)
    assert {"regret_dynamic_lo", "regret_dynamic_hi", "sigma2_lo"} <= set(agg.columns)
    assert np.all(agg["regret_dynamic_lo"] <= agg["regret_dynamic_hi"])
    for name in ("regret", "regret_over_sqrt_t", "client_losses", "heterogeneity", "decomposition", "client_regret"):
        assert (root / "plots" / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
    assert "regret dynamic:" in proc.stdout and "±" in proc.stdout

    # every seed's folder is the run `--seed s` would make
    single = subprocess.run(CLI + ["run", "--config", "exp.yaml", "--seeds", "1", "--seed", "1", "--out", "one",
                                   "--no-live", "--no-plots"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=300)
    assert single.returncode == 0, single.stderr
    one = json.loads((tmp_path / "one" / "summary.json").read_text())
    for key in ("regret_static", "regret_expected", "regret_dynamic"):
        assert one[key] == seeds[1][key]


def test_seeds_over_kafka_is_refused(tmp_path):
    proc = subprocess.run(CLI + ["run", "--seeds", "2", "--broker", "127.0.0.1:1", "--no-live"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "--seeds runs embedded" in proc.stderr


def test_aggregate_merges_numbers_booleans_and_lists():
    intervals, agreement = {}, {}
    merged = aggregate([{"a": 1.0, "flag": True, "b": {"c": [1.0, 2.0]}, "name": "x", "maybe": None},
                        {"a": 3.0, "flag": False, "b": {"c": [3.0, 4.0]}, "name": "x", "maybe": 2.0}],
                       intervals, agreement)
    assert merged["a"] == 2.0 and merged["b"]["c"] == [2.0, 3.0] and merged["name"] == "x"
    assert merged["flag"] is None and agreement["flag"] == {"true": 1, "false": 1, "undetermined": 0}
    assert intervals["a"]["n"] == 2 and intervals["maybe"]["n"] == 1 and merged["maybe"] == 2.0


def test_integers_every_seed_agrees_on_stay_integers():
    # a seeds summary turned counts and ids into means (943 → 943.0, user ids 1 → 1.0)
    from streamfl.runtime.seeds import aggregate
    intervals = {}
    merged = aggregate([{"n_clients": 943, "ids": [1, 2], "loss": 1.0, "steps": 3},
                        {"n_clients": 943, "ids": [1, 2], "loss": 2.0, "steps": 4}], intervals, {})
    assert merged == {"n_clients": 943, "ids": [1, 2], "loss": 1.5, "steps": 3.5}
    assert type(merged["n_clients"]) is int and type(merged["ids"][0]) is int
    assert intervals["n_clients"]["mean"] == 943.0 and intervals["loss"]["mean"] == 1.5
