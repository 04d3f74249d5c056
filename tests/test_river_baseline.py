"""The opt-in ``river`` baseline measures what local-only SGD measures.

River learns (its own models, SGD and gradients); the loss is computed from
River's raw scores with the clients' loss function. With the same model and
step, River must equal the local-only learner to rounding, step by step.
"""

import json
import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from streamfl.config import default_config, parse_config
from streamfl.models import StackedLinear, StepSize
from streamfl.runtime.experiment import run_experiment
from streamfl.runtime.learners import Federated, RiverClients

CLI = [sys.executable, "-m", "streamfl.cli"]


@pytest.mark.parametrize("b", [1, 2, 5])
@pytest.mark.parametrize("task,K", [("least_squares", 1), ("logistic", 1), ("softmax", 3)])
def test_river_equals_local_only_step_by_step(task, K, b):
    # inv_sqrt step size and a client absent every 7th step: η_t must follow the global step t,
    # not River's own count of optimizer steps (which lags for the absent client).
    rng = np.random.default_rng(1)
    M, d, T = 3, 4, 200
    eta = StepSize("inv_sqrt", eta=0.3)
    river = RiverClients(M, d, task, eta, K)
    local = Federated(StackedLinear(M, d, task, eta, K), None)
    worst_loss = worst_model = 0.0
    for t in range(1, T + 1):
        X = rng.normal(size=(M, b, d))
        if task == "least_squares":
            y = X.sum(axis=-1) + rng.normal(size=(M, b))
        else:
            y = rng.integers(0, max(K, 2), size=(M, b)).astype(float)
        mask = None if t % 7 else np.array([True, False, True])
        a, c = river.step(X, y, t, mask), local.step(X, y, t, mask)
        worst_loss = max(worst_loss, float(np.abs(a - c).max()))
        worst_model = max(worst_model, float(np.abs(river.models - local.models).max()))
        if mask is not None:
            assert a[1] == 0.0
    assert worst_loss < 1e-12          # measured ≤ 3.6e-15
    assert worst_model < 1e-12


def _table_run(tmp_path, rows: str, source: dict, b: int = 1):
    (tmp_path / "t.csv").write_text(rows)
    cfg = parse_config({"name": "t", "steps": None,
                        "source": {"kind": "file", "path": str(tmp_path / "t.csv"), "label": "label", "clients": 1,
                                   **source},
                        "learner": {"tau": None, "batch_size": b, "step_size": {"kind": "constant", "eta": 0.5}},
                        "baselines": ["local", "river"], "output": {"format": "parquet"}})   # full precision
    out = tmp_path / f"run-b{b}"
    summary = run_experiment(cfg, out, plots=False)
    return summary, pd.read_parquet(out / "metrics.parquet")


SIX_ROWS_THREE_CLASSES = "a,b,label\n0.5,1.0,0\n-1.0,0.3,1\n0.2,-0.7,2\n1.5,0.1,1\n-0.4,0.9,2\n0.8,-1.2,0\n"


@pytest.mark.parametrize("b", [1, 2])
def test_a_class_seen_for_the_first_time_costs_river_what_it_costs_the_clients(tmp_path, b):
    # River's SoftmaxRegression alone gives a class it has not seen probability 0 (34.5 nats after
    # clamping); the baseline is the K-class model started at zero, like the clients: ln 3 at step 1.
    s, m = _table_run(tmp_path, SIX_ROWS_THREE_CLASSES, {}, b)
    assert s["task"] == "softmax"
    assert m["cum_loss_river"].iloc[0] == pytest.approx(math.log(3), abs=1e-15)
    np.testing.assert_allclose(m["cum_loss_river"], m["cum_loss_local"], rtol=1e-12, atol=0)
    assert s["cum_loss"]["river"] < 10           # measured 9.64 at b = 1 (River alone: 73 nats on such data)


def test_large_features_logistic_loss_is_not_clipped(tmp_path):
    # a = 1e9-scale features, η = 0.5, x_1 = 0, b = 1: the weights alternate 0.25e9, -0.35e9, 0.1e9, -0.45e9,
    # 0.2e9 and the losses after the first (ln 2) are the margins 3e17, 3.15e17, 1.1e17, 5.85e17, 1.6e17 nats.
    rows = "a,label\n1.0e9,1\n1.2e9,0\n0.9e9,1\n1.1e9,0\n1.3e9,1\n0.8e9,0\n"
    s, m = _table_run(tmp_path, rows, {"standardize": False, "intercept": False})
    assert s["cum_loss"]["river"] == pytest.approx(1.47e18 + math.log(2), rel=1e-12)
    assert s["cum_loss"]["local"] == pytest.approx(1.47e18 + math.log(2), rel=1e-12)
    assert s["gaps"]["river"] == s["gaps"]["local"] == 0.0


def test_river_is_opt_in_and_refused_with_a_radius(tmp_path):
    assert "river" not in default_config().baselines
    (tmp_path / "r.yaml").write_text("steps: 20\nlearner: {radius: 1.0}\nbaselines: [local, river]\n")
    proc = subprocess.run(CLI + ["run", "--config", "r.yaml", "--no-live", "--out", "run"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stdout == ""                  # refused before the run header and the progress bar
    assert proc.stderr.strip() == ("error: config error: baselines: river cannot be compared with learner.radius = 1.0: River's "
                                   "models have no projection onto the ball; drop river from baselines or the radius")
    assert not (tmp_path / "run").exists()


def test_river_from_the_command_line_equals_local(tmp_path):
    header, body = SIX_ROWS_THREE_CLASSES.split("\n", 1)
    (tmp_path / "six.csv").write_text(header + "\n" + body * 4)
    (tmp_path / "c.yaml").write_text("name: six\nsteps: null\nsource: {kind: file, path: six.csv, label: label, "
                                     "clients: 2}\nlearner: {batch_size: 2}\nbaselines: [local, river]\n")
    proc = subprocess.run(CLI + ["run", "--config", "c.yaml", "--no-live", "--no-plots", "--out", "run"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["cum_loss"]["river"] == pytest.approx(summary["cum_loss"]["local"], rel=1e-12)
