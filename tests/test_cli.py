import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

CLI = [sys.executable, "-m", "streamfl.cli"]
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def cli(cwd, *argv, timeout=300):
    """``streamfl ARGV`` as a user runs it: from a folder of their own (``cwd``), not the repository."""
    return subprocess.run(CLI + list(argv), capture_output=True, text=True, timeout=timeout, cwd=cwd)


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
    proc = cli(tmp_path, "run", "--config", "small.yaml", "--out", "run", "--no-live")
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
    assert summary["run_dir"] == str(out.resolve())          # stored paths are absolute
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "small.yaml"]
    # river loops over clients and samples in Python: the header names it as the run's bottleneck
    assert "bottleneck: learner river" in proc.stdout
    assert summary["bottleneck"].startswith("bottleneck: learner river: one River model per client")


def test_bad_config_is_one_line_without_traceback(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("learner: {tau: 0}\n")
    proc = cli(tmp_path, "run", "--config", "bad.yaml", "--no-live")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: config error: learner.tau: Input should be greater than or equal to 1 (got 0)"


def test_unknown_dataset_is_a_clear_error(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("source: {kind: river_dataset, name: Nope}\n")
    proc = cli(tmp_path, "run", "--config", "bad.yaml", "--no-live")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "Nope" in proc.stderr and "Phishing" in proc.stderr


def test_out_must_be_a_new_folder(tmp_path):
    existing = tmp_path / "data.csv"
    existing.write_text("x\n")
    proc = cli(tmp_path, "run", "--out", "data.csv", "--no-live")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "is an existing file" in proc.stderr
    proc = cli(tmp_path, "run", "--out", ".", "--no-live")
    assert proc.returncode == 2 and "already holds files" in proc.stderr


def test_diverging_run_is_one_line(tmp_path):
    cfg = tmp_path / "eta.yaml"
    cfg.write_text("source: {kind: synthetic, task: least_squares}\nlearner: {step_size: {eta: 5}}\nbaselines: []\n")
    proc = cli(tmp_path, "run", "--config", "eta.yaml", "--no-live", "--out", "new/sub/r", timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: learner 'fedsea' diverged at step t=")
    assert "Traceback" not in proc.stderr and "RuntimeWarning" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eta.yaml"]   # no half-written run folder, no parents
    # the same without --out: the run folder under output.dir (here ./runs, created by the run) goes too
    proc = cli(tmp_path, "run", "--config", "eta.yaml", "--no-live", timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("error: learner 'fedsea' diverged at step t=")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eta.yaml"]


def test_kafka_options_without_broker_are_refused(tmp_path):
    proc = cli(tmp_path, "run", "--producers", "2", "--no-live", "--out", "r")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == "error: --workers, --producers, --partitions, --keep-topics and --metrics-port need --broker HOST:PORT"
    assert not (tmp_path / "r").exists()


def test_producer_share_is_checked_before_contacting_a_broker(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("steps: 5\n")
    proc = cli(tmp_path, "produce", "--broker", "127.0.0.1:1", "--run-id", "x", "--config", "c.yaml",
               "--partitions", "4", "--share", "2/2", timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == "error: --share must be I/N with 0 ≤ I < N (e.g. 0/2), got '2/2'"


def test_replaying_a_run_into_itself_is_refused(tmp_path):
    proc = cli(tmp_path, "replay", "--broker", "127.0.0.1:1", "--run-id", "r1", "--from-run", "r1",
               "--config", str(EXAMPLES / "default.yaml"), timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "the source is run r1's own data topic" in proc.stderr


def _cli(tmp_path, *argv, timeout=300):
    """Run the CLI as a user does, from a temporary folder."""
    return subprocess.run(CLI + list(argv), capture_output=True, text=True, timeout=timeout, cwd=tmp_path)


def test_the_run_header_and_summary_say_how_a_file_was_read(tmp_path):
    (tmp_path / "data.csv").write_text("x1,x2,y\n1,2,0.5\n2,abc,1.5\n3,4,2.5\n4,5,0.5\n5,6,1.5\n")
    (tmp_path / "exp.yaml").write_text("steps: null\nsource: {kind: file, path: data.csv, label: y, clients: 1}\n"
                                       "learner: {batch_size: 2}\nbaselines: []\noutput: {plots: false}\n")
    proc = _cli(tmp_path, "run", "--config", "exp.yaml", "--no-live", "--out", "run")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[:7] == [
        f"input: file {tmp_path / 'data.csv'} → T = 2 steps, M = 1 client, d = 2 features incl. an intercept, b = 2",
        "task: least_squares, inferred: label 'y' holds numbers that are not whole (e.g. 0.5), so a regression "
        "target → least_squares",
        "columns: number x1 · label y",
        "label y: regression target, 5 values from 0.5 to 2.5 in its own units (mean 1.3, standard deviation "
        "0.7483)",
        "dropped column x2: numbers with text among them (1 text cell, row 2: 'abc'); fix or remove those rows",
        "rows: 5 read, 4 streamed",
        "note: 1 row not streamed: the last mini-batch of 1 client had fewer than b = 2 rows (only full "
        "mini-batches are streamed)",
    ]
    inputs = json.loads((tmp_path / "run" / "summary.json").read_text())["inputs"]
    assert inputs["task"]["source"] == "inferred" and inputs["rows"]["dropped_incomplete_batches"] == 1
    assert [c["read_as"] for c in inputs["columns"]] == ["number", "dropped", "label"]

    # named, the column is refused with its row; declared categorical, it is one-hot encoded (5 values)
    (tmp_path / "named.yaml").write_text("steps: null\nsource: {kind: file, path: data.csv, label: y, task: "
                                         "least_squares, features: [x1, x2]}\nbaselines: []\n")
    proc = _cli(tmp_path, "run", "--config", "named.yaml", "--no-live", "--out", "named")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == ("error: Feature column 'x2' holds numbers with text among them (1 text cell, "
                                   "row 2: 'abc'); fix or remove those rows, or list it in categorical to one-hot "
                                   "encode its values.")
    assert not (tmp_path / "named").exists()
    (tmp_path / "cat.yaml").write_text("steps: null\nsource: {kind: file, path: data.csv, label: y, clients: 1, task: "
                                       "least_squares, categorical: [x2]}\nbaselines: []\noutput: {plots: false}\n")
    proc = _cli(tmp_path, "run", "--config", "cat.yaml", "--no-live", "--out", "cat")
    assert proc.returncode == 0, proc.stderr
    assert "task: least_squares (source.task)" in proc.stdout
    summary = json.loads((tmp_path / "cat" / "summary.json").read_text())
    assert summary["n_features"] == 1 + 5 + 1
    assert summary["inputs"]["columns"][1] == {"column": "x2", "read_as": "category",
                                               "why": "one-hot over its 5 sorted values ('2', '4', '5', '6', 'abc')"}


@pytest.mark.parametrize("config,message", [
    ("name: ../../escaped\nsteps: 5\n",
     "error: config error: name: a run name is one folder name, without '/', '\\' or '..' (got '../../escaped')"),
    ("steps: 5\nsource: {task: least_squares}\n",
     "error: config error: source.kind is required: one of synthetic, river_synth, river_dataset, file, movielens, "
     "sparse_powerlaw"),
    ("steps: 5\nsource: {kind: synthetic, clients: true}\n",
     "error: config error: source.clients: Input should be a valid integer (got True)"),
    ("steps: 5\nlearner: {step_size: {kind: strongly_convex, t0: .inf}}\n",
     "error: config error: learner.step_size.t0: Input should be a finite number (got inf)"),
    ("steps: 5\noutput: {dir: taken}\n",
     "error: output.dir: taken is an existing file, not a folder; point output.dir at a folder"),
    ("steps: 5\noutput: {dir: taken/runs}\n",
     "error: output.dir: taken is an existing file, not a folder; point output.dir at a folder"),
    ("steps: 100\nsource: {kind: river_synth, name: ConceptDriftStream, params: {position: 200, width: 1}}\n",
     "error: Invalid params for river.datasets.synth.ConceptDriftStream: width 1 is too narrow for position 200: "
     "River draws the new concept with probability 1/(1 + exp(4·(position − i)/width)), which overflows for "
     "4·position/width > 709; use width >= 2."),
    ("steps: 10\nsource: {kind: river_synth, name: Hyperplane, params: {n_features: 3, n_drift_features: 5}}\n",
     "error: Invalid params for river.datasets.synth.Hyperplane: n_drift_features must be between 0 and n_features "
     "(3); got 5."),
])
def test_user_mistakes_are_one_line_and_write_nothing(tmp_path, config, message):
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "taken").write_text("a file\n")
    (tmp_path / "work" / "exp.yaml").write_text(config + "baselines: []\n")
    proc = _cli(tmp_path / "work", "run", "--config", "exp.yaml", "--no-live")
    assert proc.returncode == 2, proc.stdout
    assert proc.stderr.strip() == message
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["exp.yaml", "taken", "work"]
    if "output.dir" in message:        # refused before the run header and progress bar, not on the bar's line
        assert proc.stdout == ""


def test_a_saved_config_runs_again_to_the_same_numbers(tmp_path):
    (tmp_path / "exp.yaml").write_text(
        "steps: 200\nsource: {kind: synthetic, task: least_squares, clients: 3, dim: 2, drift: [{kind: abrupt, "
        "at: [150, 900]}]}\nlearner: {tau: 4, step_size: {kind: strongly_convex, mu: 2, t0: 5}}\nbaselines: []\n"
        "output: {plots: false}\n")
    first = _cli(tmp_path, "run", "--config", "exp.yaml", "--no-live", "--out", "a")
    assert first.returncode == 0, first.stderr
    assert "note: abrupt drift at step 900 comes after the last step (200; steps count from 1): no effect" in \
        first.stdout
    again = _cli(tmp_path, "run", "--config", "a/config.yaml", "--no-live", "--out", "b")
    assert again.returncode == 0, again.stderr
    a, b = (json.loads((tmp_path / d / "summary.json").read_text()) for d in "ab")
    assert a["config"] == b["config"]
    assert a["regret_static"] == b["regret_static"] and a["regret_expected"] == b["regret_expected"]
    assert a["inputs"]["notes"] == b["inputs"]["notes"]


def test_out_inside_a_file_is_one_line(tmp_path):
    (tmp_path / "data.csv").write_text("x\n")
    proc = _cli(tmp_path, "run", "--steps", "5", "--no-live", "--out", "data.csv/run")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: --out: data.csv is an existing file, not a folder; point --out at a folder"


def _one_error_line(proc):
    assert proc.returncode == 2 and "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.mark.parametrize("argv, start, end", [
    (["run", "--seed", "-1"], "error: --seed: ", "(got -1)"),
    (["run", "--seed", "abc"], "error: --seed: ", "(got abc)"),
    (["run", "--steps=0"], "error: --steps: ", "(got 0)"),
    (["run", "--broker", "127.0.0.1:1", "--workers", "0"], "error: --workers: ", "(got 0)"),
    (["track", "--broker", "127.0.0.1:1", "--run-id", "r", "--config", "c.yaml", "--metrics-port", "70000"],
     "error: --metrics-port: ", "(got 70000)"),
    (["worker", "--broker", "127.0.0.1:1", "--run-id", "a b", "--config", "c.yaml"],
     "error: --run-id: must be 1-64 characters from [A-Za-z0-9_-], got 'a b'", ""),
    (["replay", "--broker", "127.0.0.1:1", "--run-id", "r", "--from-run", "x/y"],
     "error: --from-run: must be 1-64 characters from [A-Za-z0-9_-], got 'x/y'", ""),
    (["run", "--sed", "1"], "error: No such option: --sed", "(see streamfl run --help)"),
    (["worker", "--broker", "127.0.0.1:1", "--config", "c.yaml"], "error: Missing option '--run-id'", ""),
])
def test_option_errors_are_one_line_naming_the_option(tmp_path, argv, start, end):
    (tmp_path / "c.yaml").write_text("steps: 5\n")
    line = _one_error_line(cli(tmp_path, *argv, timeout=60))
    assert line.startswith(start) and line.endswith(end), line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml"]       # nothing written


def test_overrides_are_validated_like_the_config():
    # --seed -1 used to bypass validation (a copy of the config with the value set) and stop in numpy with
    # "expected non-negative integer"; the option range catches it first, and the override is validated too.
    from streamfl.cli import _resolve
    from streamfl.config import ConfigError
    with pytest.raises(ConfigError) as e:
        _resolve(None, None, None, -1)
    assert str(e.value) == "--seed -1: config error: seed: Input should be greater than or equal to 0 (got -1)"
    assert _resolve(None, None, 7, 3).model_dump()["steps"] == 7


def test_error_text_is_printed_as_is(tmp_path):
    # the console used to read "[and 2 more]" as markup and drop it
    (tmp_path / "bad.yaml").write_text("seed: -3\nlearner: {tau: 0, batch_size: 0}\n")
    line = _one_error_line(cli(tmp_path, "run", "--config", "bad.yaml", "--no-live"))
    assert line == "error: config error: seed: Input should be greater than or equal to 0 (got -3) [and 2 more]"


def test_a_bad_config_is_refused_before_the_heavy_imports(tmp_path):
    (tmp_path / "bad.yaml").write_text("learner: {tau: 0}\n")
    code = (
        "import sys\n"
        "from streamfl.cli import main\n"
        "for argv in (['run', '--config', 'bad.yaml'], ['run', '--broker', '127.0.0.1:1', '--config', 'bad.yaml'],\n"
        "             ['track', '--broker', '127.0.0.1:1', '--run-id', 'r', '--config', 'bad.yaml'],\n"
        "             ['run', '--seed', '-1'], ['--help']):\n"
        "    sys.argv = ['streamfl'] + argv\n"
        "    try:\n"
        "        main()\n"
        "    except SystemExit as e:\n"
        "        print('exit', e.code)\n"
        "heavy = ('numpy', 'scipy', 'pandas', 'numba', 'torch', 'river', 'matplotlib', 'pyarrow', 'kafka')\n"
        "print('heavy', sorted({m.split('.')[0] for m in sys.modules} & set(heavy)))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    marks = [ln for ln in proc.stdout.splitlines() if ln.startswith(("exit ", "heavy "))]
    assert marks == ["exit 2", "exit 2", "exit 2", "exit 2", "exit 0", "heavy []"], proc.stdout + proc.stderr
    assert proc.stderr.count("error: config error: learner.tau: Input should be greater than or equal to 1 (got 0)") == 3


def _table(path, rows=120, d=3, seed=5):
    """A small CSV table: features a, b, c and a binary label y."""
    import numpy as np
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(rows, d))
    y = (X @ np.array([1.0, -2.0, 0.5]) + 0.3 * rng.normal(size=rows) > 0).astype(int)
    pd.DataFrame({"a": X[:, 0], "b": X[:, 1], "c": X[:, 2], "y": y}).to_csv(path, index=False)


def test_relative_paths_resolve_the_same_from_any_folder(tmp_path):
    """source.path is relative to the config file's folder, output.dir and --out to the current folder."""
    exp = tmp_path / "exp"
    exp.mkdir()
    _table(exp / "table.csv")
    (exp / "exp.yaml").write_text("name: rel\nsteps: null\nbaselines: []\n"
                                  "source: {kind: file, path: table.csv, label: y, clients: 3}\n"
                                  "learner: {tau: 4}\noutput: {dir: results, plots: false, format: parquet}\n")
    a = cli(tmp_path, "run", "--config", "exp/exp.yaml", "--no-live")
    assert a.returncode == 0, a.stderr
    b = cli(exp, "run", "--config", "exp.yaml", "--no-live")
    assert b.returncode == 0, b.stderr
    (run_a,) = (tmp_path / "results").iterdir()
    (run_b,) = (exp / "results").iterdir()
    sa, sb = (json.loads((r / "summary.json").read_text()) for r in (run_a, run_b))
    assert sa["run_dir"] == str(run_a.resolve()) and sb["run_dir"] == str(run_b.resolve())
    assert sa["config"]["source"]["path"] == sb["config"]["source"]["path"] == str((exp / "table.csv").resolve())
    assert sa["n_steps"] == 40 and sa["samples"] == 120
    for key in ("regret_static", "regret_dynamic", "cum_loss"):
        assert sa[key] == sb[key]
    ma, mb = (pd.read_parquet(r / "metrics.parquet") for r in (run_a, run_b))
    assert ma.equals(mb)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp", "results"]


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


def test_a_sweep_without_run_plots_still_draws_its_own_figures(tmp_path):
    # examples/sweep-regime.yaml sets output.plots: false (180 runs) and promises
    # sweep.png and regime.png; they used to be skipped with the run plots.
    (tmp_path / "sw.yaml").write_text("""
name: sw
seeds: 2
steps: 200
source: {kind: synthetic, task: least_squares, dim: 3, heterogeneity: 0.0, radius: 1.0, noise: 3.0}
learner: {tau: 5, batch_size: 4, step_size: {kind: constant, eta: 0.1}}
baselines: []
output: {plots: false, client_columns: false}
sweep: {metric: regret_dynamic, parameters: {source.clients: [1, 4]}}
""")
    proc = cli(tmp_path, "run", "--config", "sw.yaml", "--out", "sw", "--no-live")
    assert proc.returncode == 0, proc.stderr
    root = tmp_path / "sw"
    for name in ("sweep.png", "regime.png"):
        assert (root / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(root.glob("*/plots/*.png")) and not list(root.glob("*/seed-*/plots/*.png"))
    (root / "regime.png").unlink()
    proc = cli(tmp_path, "report", "sw")
    assert proc.returncode == 0, proc.stderr
    assert (root / "regime.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "agrees in" in proc.stdout
    proc = cli(tmp_path, "run", "--config", "sw.yaml", "--out", "sw2", "--no-live", "--no-plots")
    assert proc.returncode == 0, proc.stderr
    assert not list((tmp_path / "sw2").rglob("*.png"))


# ---- second new-user break test ----------------------------------------------------------------------------
def test_a_failed_sweep_keeps_the_users_empty_out_folder_and_their_output_dir(tmp_path):
    (tmp_path / "t.csv").write_text("x1,x2,y\n1,2,0.5\n2,abc,1.5\n3,4,2.5\n4,5,0.5\n")
    (tmp_path / "mine").mkdir()
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "notes.txt").write_text("mine")
    (tmp_path / "exp.yaml").write_text(
        "steps: null\nsource: {kind: file, path: t.csv, label: y, features: [x1], task: least_squares}\n"
        "sweep: {parameters: {source.clients: [1], source.label: [y, x2]}, metric: regret_static}\n")
    for argv in (["--out", "mine"], []):
        proc = _cli(tmp_path, "run", "--config", "exp.yaml", "--no-live", *argv)
        assert proc.returncode == 2
        assert proc.stderr.strip().splitlines()[-1] == ("error: Label column 'x2' holds numbers with text among them "
                                                        "(1 text cell, row 2: 'abc'); fix or remove those rows.")
    assert list((tmp_path / "mine").iterdir()) == []          # the user's folder stays, emptied of the run's files
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["notes.txt"]


def test_thousands_and_label_header_from_a_file(tmp_path):
    (tmp_path / "t.csv").write_text('x1,x2,y\n"1,170.3",1,0.5\n2.5,2,1.5\n"12,000",3,2.5\n4,4,3.5\n')
    (tmp_path / "exp.yaml").write_text("steps: null\nsource: {kind: file, path: t.csv, label: y, clients: 1, "
                                       "task: least_squares, thousands: ','}\nbaselines: []\noutput: {plots: false}\n")
    proc = _cli(tmp_path, "run", "--config", "exp.yaml", "--no-live", "--out", "run")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[2:4] == ["columns: number x1, x2 · label y",
                          "label y: regression target, 4 values from 0.5 to 3.5 in its own units (mean 2, standard "
                          "deviation 1.118)"]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    mean = summary["inputs"]["columns"][0]
    assert mean == {"column": "x1", "read_as": "number", "why": "numbers"}
    (tmp_path / "exp.yaml").write_text(
        "steps: null\nsource: {kind: file, path: t.csv, label: y, clients: 1, task: least_squares, "
        "features: [x1, x2]}\n")
    proc = _cli(tmp_path, "run", "--config", "exp.yaml", "--no-live")
    assert proc.stderr.strip() == ("error: Feature column 'x1' holds numbers written with thousands separators "
                                   "(row 1: '1,170.3'); set source.thousands: ','.")


def test_report_on_a_moved_or_damaged_run_folder(tmp_path):
    proc = _cli(tmp_path, "run", "--steps", "30", "--no-live", "--no-plots", "--out", "a")
    assert proc.returncode == 0, proc.stderr
    (tmp_path / "a").rename(tmp_path / "b")
    proc = _cli(tmp_path, "report", "b")
    assert proc.returncode == 0, proc.stderr
    assert "run folder: b" in proc.stdout.splitlines()
    (tmp_path / "b" / "metrics.csv").write_text("t,x\n1,2\n")
    proc = _cli(tmp_path, "report", "b")
    assert proc.stderr.strip() == ("error: b/metrics.csv is damaged or was not written by streamfl: Required column "
                                   "'cum_loss' is missing from b/metrics.csv (missing: ['cum_loss']; present: ['t', "
                                   "'x']).")
    (tmp_path / "b" / "summary.json").write_text("{bad")
    proc = _cli(tmp_path, "report", "b")
    assert proc.stderr.strip() == ("error: b/summary.json is not valid JSON (Expecting property name enclosed in double "
                                   "quotes: line 1 column 2 (char 1)); it is damaged or was not written by streamfl")


def test_more_partitions_than_clients_is_refused_before_any_topic(tmp_path):
    # --partitions above M used to be accepted: client m goes to partition m mod P, so the partitions
    # M … P − 1 carried no client and the workers holding them idled; refused before the broker is contacted
    (tmp_path / "c.yaml").write_text("steps: 5\nsource: {kind: synthetic, clients: 4, dim: 3}\n")
    line = _one_error_line(cli(tmp_path, "worker", "--broker", "127.0.0.1:1", "--run-id", "r", "--config", "c.yaml",
                               "--partitions", "6", timeout=60))
    assert line == ("error: --partitions 6 exceeds the stream's 4 clients: client m goes to partition m mod P, "
                    "so 2 partition(s) would carry no client; use at most 4")
    from streamfl.runtime.kafka_run import check_process_counts
    assert check_process_counts(4, 4, 2, 1) == 4 and check_process_counts(4, None, 1, 1) == 4


def test_sweep_folders_of_list_values_have_plain_names_and_colliding_labels_are_refused(tmp_path):
    # a swept list used to name its folder "…-baselines-['local']" (brackets and quotes in a file name)
    base = ("name: sw\nsteps: 40\nsource: {kind: synthetic, task: least_squares, clients: 2, dim: 2}\n"
            "sweep: {parameters: {source.clients: [2], baselines: [[local], [local, tau1]]}%s}\n")
    (tmp_path / "sw.yaml").write_text(base % "")
    proc = cli(tmp_path, "run", "--config", "sw.yaml", "--out", "sweep", "--no-live", "--no-plots")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (tmp_path / "sweep").iterdir() if p.is_dir()) == \
        ["clients-2-baselines-local", "clients-2-baselines-local+tau1"]
    # two labels giving one folder name would have overwritten one run with the other
    (tmp_path / "dup.yaml").write_text(base % ", labels: {baselines: [a b, a_b]}")
    line = _one_error_line(cli(tmp_path, "run", "--config", "dup.yaml", "--out", "dup", "--no-live"))
    assert line == ("error: sweep: the settings 'a b' and 'a_b' both get the folder name 'clients-2-a_b'; "
                    "give sweep.labels that differ")
    assert not (tmp_path / "dup").exists()


def _ball_least_squares(B, z, radius):
    """min_{‖x‖ ≤ radius} ½‖Bx − z‖² by the thin SVD and the secular equation ‖x(ν)‖ = radius (brentq)."""
    from scipy.optimize import brentq
    U, s, Vt = np.linalg.svd(B, full_matrices=False)
    keep = s > 1e-8 * s[0]
    U, s, Vt = U[:, keep], s[keep], Vt[keep]
    cz = U.T @ z
    x = Vt.T @ (cz / s)
    if np.linalg.norm(x) > radius:
        nu = brentq(lambda nu: np.linalg.norm(s * cz / (s * s + nu)) - radius, 0.0, s[0] * np.linalg.norm(cz) / radius,
                    xtol=1e-14, rtol=1e-15)
        x = Vt.T @ (s * cz / (s * s + nu))
    return 0.5 * np.sum((B @ x - z) ** 2)


def test_a_table_of_60_rows_and_5000_features_runs_and_its_figures_are_exact(tmp_path):
    # d = 5,000 least squares with 60 rows over 8 clients: before, its d × d statistics took minutes and GB
    # before the first step. The comparators (network, each client, every step) against the SVD of the rows
    # with the L2 ball of the learner's radius; L against the largest singular value of the weighted rows
    rng = np.random.default_rng(5)
    N, D, M, radius = 60, 5000, 8, 0.01
    raw = rng.standard_normal((N, D))
    table = pd.DataFrame(raw, columns=[f"f{j}" for j in range(D)])
    table["y"] = raw[:, :10].sum(axis=1) / 3 + 0.1 * rng.standard_normal(N)
    table.to_csv(tmp_path / "wide.csv", index=False)
    (tmp_path / "wide.yaml").write_text(
        "steps: null\nsource: {kind: file, path: wide.csv, label: y, task: least_squares}\n"
        f"learner: {{radius: {radius}}}\noutput: {{plots: false}}\n")
    proc = _cli(tmp_path, "run", "--config", "wide.yaml", "--no-live", "--out", "run", timeout=120)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    metrics = pd.read_csv(tmp_path / "run" / "metrics.csv")
    assert summary["tracker_notes"] == []                       # per-client figures kept: 8 rows each
    # the stream: standardised features and an intercept; contiguous blocks of 8, 8, 8, 8, 7, 7, 7, 7 rows
    data = pd.read_csv(tmp_path / "wide.csv")
    feats = data.drop(columns="y").to_numpy()
    A = np.hstack([(feats - feats.mean(axis=0)) / feats.std(axis=0), np.ones((N, 1))])
    yv = data["y"].to_numpy()
    blocks = np.array_split(np.arange(N), M)
    T = len(blocks[0])
    assert len(metrics) == T and summary["client_steps"] == [len(r) for r in blocks]
    weights = np.zeros((T, M))                                  # c_{t,m}: 1 / (clients present at t)
    for t in range(T):
        present = [m for m in range(M) if t < len(blocks[m])]
        weights[t, present] = 1.0 / len(present)
    for t in range(1, T + 1):
        rows = [(blocks[m][s], weights[s, m]) for s in range(t) for m in range(M) if s < len(blocks[m])]
        idx, w = np.array([i for i, _ in rows]), np.sqrt([w for _, w in rows])
        want = _ball_least_squares(A[idx] * w[:, None], yv[idx] * w, radius)
        assert want > 0.05                                      # the ball binds: no interpolation
        assert metrics["comparator_static"].iloc[t - 1] == pytest.approx(want, rel=1e-9)
    assert summary["comparator_static"] == pytest.approx(want, rel=1e-9)
    assert summary["regret_static"] == pytest.approx(summary["cum_loss"]["fedsea"] - want, rel=1e-9)
    clients = [_ball_least_squares(A[r], yv[r], radius) for r in blocks]
    np.testing.assert_allclose(summary["client_regret"]["static"],
                               np.array(summary["client_cum_loss"]) - clients, rtol=1e-9)
    Bw = A[idx] * w[:, None]
    L = np.linalg.svd(Bw, compute_uv=False)[0] ** 2 / weights.sum()
    assert summary["heterogeneity"]["L"] == pytest.approx(L, rel=1e-10)
    figures = [summary["regret_static"], summary["consensus_bound"], *summary["client_regret"]["static"],
               *summary["gaps"].values()]
    assert np.all(np.isfinite(figures))
