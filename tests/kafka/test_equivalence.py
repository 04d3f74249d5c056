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


@pytest.fixture(scope="module")
def embedded(cfg, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("embedded")
    summary = run_experiment(cfg, run_dir, plots=False)
    return summary, pd.read_parquet(run_dir / "metrics.parquet")


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_kafka_run_equals_embedded(cfg, embedded, workers, tmp_path):
    want_summary, want = embedded
    summary = run_kafka_experiment(cfg, BOOTSTRAP, workers=workers, run_dir=tmp_path, plots=False, timeout=30)
    got = pd.read_parquet(tmp_path / "metrics.parquet")
    assert got["t"].tolist() == list(range(1, 61))
    for col in COLUMNS:
        np.testing.assert_allclose(got[col].to_numpy(), want[col].to_numpy(), rtol=0, atol=1e-9, err_msg=col)
    assert list(got.columns) == list(want.columns)
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
