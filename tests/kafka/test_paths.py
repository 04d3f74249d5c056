"""Kafka mode from any folder (needs a broker).

Every run here starts the CLI from a temporary folder with relative ``--config`` and ``--out`` and a config
whose table sits next to it (``source.path`` relative to the config file's folder), and must give the numbers
of the embedded run: ``streamfl run --broker``, the roles started one by one, and a non-editable install in a
fresh virtual environment, with no source tree on its path.

Skipped unless ``STREAMFL_KAFKA`` names the bootstrap address, e.g. ``127.0.0.1:9092``
(start one with ``scripts/kafka-local start``).
"""

import json
import os
import shutil
import site
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

BOOTSTRAP = os.environ.get("STREAMFL_KAFKA")
if not BOOTSTRAP:
    pytest.skip("STREAMFL_KAFKA is not set: start a broker with scripts/kafka-local start", allow_module_level=True)

from conftest import roles_by_hand  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
COLUMNS = ["loss", "cum_loss", "regret_static", "regret_dynamic"]
EXPERIMENT = """name: paths
seed: 3
steps: null
chunk_size: 16
baselines: []
source: {kind: file, path: table.csv, label: y, clients: 3}
learner: {tau: 4}
output: {format: parquet, plots: false}
"""


def _folder(path: Path) -> Path:
    """A user's folder holding ``exp/exp.yaml`` and the table ``exp/table.csv`` it names (120 rows, 40 steps)."""
    (path / "exp").mkdir(parents=True)
    rng = np.random.default_rng(5)
    X = rng.normal(size=(120, 3))
    y = (X @ np.array([1.0, -2.0, 0.5]) + 0.3 * rng.normal(size=120) > 0).astype(int)
    pd.DataFrame({"a": X[:, 0], "b": X[:, 1], "c": X[:, 2], "y": y}).to_csv(path / "exp" / "table.csv", index=False)
    (path / "exp" / "exp.yaml").write_text(EXPERIMENT)
    return path


def _cli(cwd, *argv, python=sys.executable, env=None, timeout=300):
    return subprocess.run([python, "-m", "streamfl.cli", *argv], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=timeout)


def _run(folder: Path):
    summary = json.loads((folder / "summary.json").read_text())
    return summary, pd.read_parquet(folder / "metrics.parquet")


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    cwd = _folder(tmp_path_factory.mktemp("embedded"))
    proc = _cli(cwd, "run", "--config", "exp/exp.yaml", "--out", "run", "--no-live")
    assert proc.returncode == 0, proc.stderr
    return _run(cwd / "run")


def _assert_same_numbers(got, want):
    (gs, gm), (ws, wm) = got, want
    assert len(gm) == len(wm) == 40 and gs["samples"] == ws["samples"] == 120
    for col in COLUMNS:
        np.testing.assert_allclose(gm[col].to_numpy(), wm[col].to_numpy(), rtol=0, atol=1e-9, err_msg=col)
    for key in ("regret_static", "regret_expected", "regret_dynamic"):
        if ws.get(key) is None:
            assert gs.get(key) is None, key
        else:
            assert gs[key] == pytest.approx(ws[key], abs=1e-9), key


def test_run_over_kafka_from_another_folder(tmp_path, embedded):
    """The roles used to start in the repository root with paths relative to the caller's folder
    ("No such file or directory: 'runs/default-…/config.yaml'")."""
    repo_before = sorted(p.name for p in ROOT.iterdir())
    cwd = _folder(tmp_path)
    proc = _cli(cwd, "run", "--broker", BOOTSTRAP, "--config", "exp/exp.yaml", "--out", "kafka", "--no-live",
                "--workers", "2", "--partitions", "2")
    assert proc.returncode == 0, proc.stderr
    got = _run(cwd / "kafka")
    _assert_same_numbers(got, embedded)
    assert got[0]["transport"]["partitions"] == 2          # --partitions reaches the run (default: one per client)
    assert got[0]["run_dir"] == str((cwd / "kafka").resolve())
    assert got[0]["config"]["source"]["path"] == str((cwd / "exp" / "table.csv").resolve())
    logs = sorted(p.name for p in (cwd / "kafka" / "logs").iterdir())
    assert logs == ["aggregator.log", "producer.log", "worker-0.log", "worker-1.log"]
    assert sorted(p.name for p in cwd.iterdir()) == ["exp", "kafka"]        # nothing else written here
    assert sorted(p.name for p in (cwd / "exp").iterdir()) == ["exp.yaml", "table.csv"]
    assert sorted(p.name for p in ROOT.iterdir()) == repo_before            # nor in the repository


def test_roles_started_one_by_one_from_another_folder(tmp_path, embedded):
    cwd = _folder(tmp_path / "user")
    roles_by_hand(BOOTSTRAP, cwd, "exp/exp.yaml", f"paths-{uuid.uuid4().hex[:8]}", out="out")
    got = _run(cwd / "out")
    _assert_same_numbers(got, embedded)
    # the run folder's config names the table absolutely (a copy of exp.yaml there would name out/table.csv)
    assert str((cwd / "exp" / "table.csv").resolve()) in (cwd / "out" / "config.yaml").read_text()
    assert sorted(p.name for p in cwd.iterdir()) == ["exp", "out"]


def test_more_workers_than_partitions_is_refused_before_the_run_header(tmp_path):
    cwd = _folder(tmp_path)
    proc = _cli(cwd, "run", "--broker", BOOTSTRAP, "--config", "exp/exp.yaml", "--out", "k", "--no-live",
                "--partitions", "1", "--workers", "2")
    assert proc.returncode == 2 and proc.stdout == ""          # the header used to come first
    assert proc.stderr.strip() == "error: --workers must be between 1 and the number of data partitions (1), got 2"
    assert sorted(p.name for p in cwd.iterdir()) == ["exp"]


def test_a_failed_run_over_kafka_removes_its_folder(tmp_path):
    (tmp_path / "diverge.yaml").write_text(
        "steps: 300\nbaselines: []\nsource: {kind: synthetic, task: least_squares, clients: 4, dim: 3, "
        "feature_scale: 3.0}\nlearner: {tau: 10, step_size: {kind: constant, eta: 5.0}}\n")
    proc = _cli(tmp_path, "run", "--broker", BOOTSTRAP, "--config", "diverge.yaml", "--no-live")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: worker-0 exited with code 1: error: worker 0: learner 'fedsea' diverged")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["diverge.yaml"]   # no ./runs/default-… with its logs


def test_a_non_editable_install_runs_kafka_mode_from_any_folder(tmp_path, embedded):
    """`pip install --no-deps .` of a copy of the project into a fresh virtual environment, then Kafka mode from
    another folder with no PYTHONPATH: every process imports streamfl, producers and consumers from that
    environment's site-packages.

    The environment sees this interpreter's site-packages (torch, river, numpy, …) through a .pth file that
    lists them as plain paths (what ``--system-site-packages`` gives, except that their .pth files are not run:
    an editable streamfl installed there would otherwise map ``streamfl`` back to the source tree first).
    """
    src = tmp_path / "src"
    for name in ("streamfl", "producers", "consumers"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True, env=env).stdout.strip()
    deps = [p for p in site.getsitepackages() + [site.getusersitepackages()] if os.path.isdir(p)]
    # the base interpreter's first: the setuptools a virtual environment gets from ensurepip (65.5 for 3.11)
    # cannot build a wheel without the separate `wheel` package
    deps.sort(key=lambda p: not p.startswith(sys.base_prefix))
    Path(purelib, "_streamfl_test_deps.pth").write_text("\n".join(deps) + "\n")
    pip = subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                          "--no-index", "--ignore-installed", "--disable-pip-version-check", str(src)],
                         capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    shutil.rmtree(src)                                  # nothing may rely on the source it was built from

    cwd = _folder(tmp_path / "user")
    where = subprocess.run([python, "-c", "import streamfl, producers, consumers\n"
                                          "for m in (streamfl, producers, consumers): print(m.__file__)"],
                           capture_output=True, text=True, cwd=cwd, env=env, check=True).stdout.split()
    site_packages = str(Path(purelib).resolve())
    assert len(where) == 3 and all(str(Path(f).resolve()).startswith(site_packages + os.sep) for f in where), where

    proc = subprocess.run([str(venv / "bin" / "streamfl"), "run", "--broker", BOOTSTRAP, "--config", "exp/exp.yaml",
                           "--out", "kafka", "--no-live"], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    _assert_same_numbers(_run(cwd / "kafka"), embedded)
    logs = sorted((cwd / "kafka" / "logs").iterdir())
    assert [p.name for p in logs] == ["aggregator.log", "producer.log", "worker-0.log"]
    for log in logs:
        (code,) = [ln.split(" INFO code: ", 1)[1] for ln in log.read_text().splitlines() if " INFO code: " in ln]
        role_file, streamfl_dir = code.split(", streamfl from ")
        assert role_file.startswith(site_packages + os.sep), (log.name, code)
        assert streamfl_dir == os.path.join(site_packages, "streamfl"), (log.name, code)
    assert sorted(p.name for p in cwd.iterdir()) == ["exp", "kafka"]
