"""Kafka mode gives the embedded engine's numbers (needs a broker).

Skipped unless ``STREAMFL_KAFKA`` names the bootstrap address, e.g. ``127.0.0.1:9092``
(start one with ``scripts/kafka-local start``).
"""

import os

import numpy as np
import pandas as pd
import pytest

BOOTSTRAP = os.environ.get("STREAMFL_KAFKA")
if not BOOTSTRAP:
    pytest.skip("STREAMFL_KAFKA is not set: start a broker with scripts/kafka-local start", allow_module_level=True)

from conftest import roles_by_hand  # noqa: E402
from streamfl.config import parse_config  # noqa: E402
from streamfl.runtime.experiment import run_experiment  # noqa: E402
from streamfl.runtime.kafka_run import run_kafka_experiment  # noqa: E402

COLUMNS = ["loss", "cum_loss", "regret_static", "regret_dynamic"]


@pytest.fixture(scope="module")
def cfg():
    return parse_config({
        "name": "kafka-eq", "seed": 1, "steps": 60,
        "source": {"kind": "synthetic", "task": "logistic", "clients": 4, "dim": 3},
        "learner": {"tau": 5},
        "baselines": [],
        "output": {"format": "parquet", "plots": False},   # parquet: full float64 precision on disk
    })


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_kafka_run_equals_embedded(cfg, embedded, workers, tmp_path):
    want_summary, want = embedded
    summary = run_kafka_experiment(cfg, BOOTSTRAP, workers=workers, run_dir=tmp_path, plots=False, timeout=30)
    got = pd.read_parquet(tmp_path / "metrics.parquet")
    assert got["t"].tolist() == list(range(1, 61))
    for col in COLUMNS:
        np.testing.assert_allclose(got[col].to_numpy(), want[col].to_numpy(), rtol=0, atol=1e-9, err_msg=col)
    # bytes_up/bytes_down are counted embedded (per-client payloads); the Kafka workers send pre-summed updates
    assert list(got.columns) == [c for c in want.columns if c not in ("bytes_up", "bytes_down")]
    assert "bytes_up" not in summary and want_summary["bytes_up"] == 12 * 4 * (6 + 3 * 8)
    for key in ("regret_static", "regret_expected", "regret_dynamic"):
        assert summary[key] == pytest.approx(want_summary[key], abs=1e-9)
    assert summary["rounds"] == want_summary["rounds"] == 12
    assert summary["transport"]["workers"] == workers
    assert (tmp_path / "summary.json").is_file() and (tmp_path / "config.yaml").is_file()


def test_two_producers_sharing_the_partitions_equal_embedded(cfg, embedded, tmp_path):
    want_summary, want = embedded
    summary = run_kafka_experiment(cfg, BOOTSTRAP, workers=2, producers=2, run_dir=tmp_path, plots=False, timeout=30)
    got = pd.read_parquet(tmp_path / "metrics.parquet")
    for col in COLUMNS:
        np.testing.assert_allclose(got[col].to_numpy(), want[col].to_numpy(), rtol=0, atol=1e-9, err_msg=col)
    assert summary["samples"] == want_summary["samples"] == 60 * 4
    logs = sorted(p.name for p in (tmp_path / "logs").iterdir())
    assert "producer-0.log" in logs and "producer-1.log" in logs
    assert "published 120 DATA records" in (tmp_path / "logs" / "producer-1.log").read_text()


def test_a_long_run_with_two_workers_equals_embedded(tmp_path):
    # Regression: with T in the hundreds the producer runs far ahead of the workers; pausing
    # partitions for back-pressure then stalled kafka-python 3.0.12 (no LOSS for step ~80-700).
    cfg = parse_config({
        "name": "kafka-long", "seed": 2, "steps": 600,
        "source": {"kind": "synthetic", "task": "least_squares", "clients": 8, "dim": 4,
                   "drift": [{"kind": "random_walk", "step": 0.01}]},
        "learner": {"tau": 10}, "baselines": [],
        "output": {"format": "parquet", "plots": False, "client_columns": False},
    })
    want = run_experiment(cfg, tmp_path / "embedded", plots=False)
    got = run_kafka_experiment(cfg, BOOTSTRAP, workers=2, run_dir=tmp_path / "kafka", plots=False, timeout=30)
    a = pd.read_parquet(tmp_path / "embedded" / "metrics.parquet")
    b = pd.read_parquet(tmp_path / "kafka" / "metrics.parquet")
    assert len(b) == 600
    for col in COLUMNS + ["regret_expected"]:
        np.testing.assert_allclose(b[col].to_numpy(), a[col].to_numpy(), rtol=0, atol=1e-9, err_msg=col)
    assert got["samples"] == want["samples"] == 600 * 8


def test_clients_that_sit_out_rounds_are_averaged_as_embedded(tmp_path):
    # A real table split by Dirichlet label skew: clients run out of rows at different steps, so 33 of the
    # 80 rounds average fewer than M clients (FedAvg's partial participation). The workers' pre-summed
    # updates count only the clients that took part, as the embedded FedAvg does.
    cfg = parse_config({
        "name": "kafka-masked", "seed": 2, "steps": None,
        "source": {"kind": "river_dataset", "name": "Phishing", "clients": 4,
                   "split": {"kind": "dirichlet", "alpha": 0.3}},
        "learner": {"tau": 5}, "baselines": [],
        "output": {"format": "parquet", "plots": False},
    })
    want = run_experiment(cfg, tmp_path / "embedded", plots=False)
    got = run_kafka_experiment(cfg, BOOTSTRAP, workers=2, run_dir=tmp_path / "kafka", plots=False, timeout=30)
    a = pd.read_parquet(tmp_path / "embedded" / "metrics.parquet")
    b = pd.read_parquet(tmp_path / "kafka" / "metrics.parquet")
    assert len(b) == len(a) == 402
    for col in COLUMNS + ["regret_expected"] if "regret_expected" in a else COLUMNS:
        np.testing.assert_allclose(b[col].to_numpy(), a[col].to_numpy(), rtol=0, atol=1e-9, err_msg=col)
    assert got["samples"] == want["samples"] == 320 + 294 + 402 + 234
    assert got["regret_static"] == pytest.approx(want["regret_static"], abs=1e-9)
    assert got["inputs"] == want["inputs"]            # the same run header in summary.json
    assert got["inputs"]["task"] == {"value": "logistic", "source": "inferred",
                                     "rule": "label 'is_phishing' holds booleans, so 2 classes → logistic"}


def test_separate_roles_read_a_file_source_as_the_embedded_run(tmp_path):
    """The roles started by hand from a temporary folder, with a config whose table path is relative to it:
    every role reads the same table, the tracker prints the run header, and summary.json equals embedded."""
    import json
    import uuid

    from streamfl.config import load_config

    (tmp_path / "exp" / "data").mkdir(parents=True)
    rng = np.random.default_rng(5)
    pd.DataFrame({"x": rng.standard_normal(41), "note": ["abc"] * 41, "y": rng.integers(0, 2, 41)}).to_csv(
        tmp_path / "exp" / "data" / "t.csv", index=False)
    (tmp_path / "exp" / "run.yaml").write_text(
        "seed: 3\nsteps: null\nsource: {kind: file, path: data/t.csv, label: y, clients: 2}\n"
        "learner: {tau: 5, batch_size: 2}\nbaselines: []\noutput: {format: parquet, plots: false}\n")
    want = run_experiment(load_config(tmp_path / "exp" / "run.yaml"), tmp_path / "embedded", plots=False)
    out = roles_by_hand(BOOTSTRAP, tmp_path, "exp/run.yaml", f"roles-file-{uuid.uuid4().hex[:8]}")
    lines = out.splitlines()
    assert lines[0] == f"input: file {tmp_path / 'exp' / 'data' / 't.csv'} → T = 10 steps, M = 2 clients, " \
                       f"d = 2 features incl. an intercept, b = 2"
    assert "note: 1 row not streamed: the last mini-batch of 1 client had fewer than b = 2 rows (only full " \
           "mini-batches are streamed)" in lines
    assert "dropped column note: text (row 1: 'abc'); list it in categorical to one-hot encode it" in lines
    got = json.loads((tmp_path / "kafka" / "summary.json").read_text())
    assert got["inputs"] == json.loads(json.dumps(want["inputs"]))
    assert got["regret_static"] == pytest.approx(want["regret_static"], abs=1e-9)
    assert load_config(tmp_path / "kafka" / "config.yaml") == load_config(tmp_path / "exp" / "run.yaml")


def test_run_over_kafka_from_a_temporary_folder_prints_the_header(tmp_path):
    """`streamfl run --broker` as a user types it, in their own folder, with a relative --out (the worker and
    producer processes used to look for the relative run folder from the repository root)."""
    import json
    import subprocess
    import sys

    (tmp_path / "data.csv").write_text("x1,x2,y\n1,2,0.5\n2,abc,1.5\n3,4,2.5\n4,5,0.5\n5,6,1.5\n6,7,2.5\n")
    (tmp_path / "exp.yaml").write_text("steps: null\nsource: {kind: file, path: data.csv, label: y, clients: 2}\n"
                                       "learner: {tau: 2}\nbaselines: [tau1]\noutput: {plots: false}\n")
    proc = subprocess.run([sys.executable, "-m", "streamfl.cli", "run", "--config", "exp.yaml", "--no-live", "--out",
                           "run", "--broker", BOOTSTRAP], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[3] == ("label y: regression target, 6 values from 0.5 to 2.5 in its own units "
                                           "(mean 1.5, standard deviation 0.8165)")
    assert proc.stdout.splitlines()[4] == ("dropped column x2: numbers with text among them (1 text cell, row 2: "
                                           "'abc'); fix or remove those rows")
    assert proc.stderr.strip() == "note: over Kafka only FedSEA runs; skipping baselines tau1"
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["inputs"]["rows"] == {"read": 6, "streamed": 6, "dropped_incomplete_batches": 0, "beyond_steps": 0}
    assert summary["n_steps"] == 3 and summary["n_features"] == 2
