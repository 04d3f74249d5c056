"""The run header: describe_inputs over each kind of source, and its printed lines."""

import numpy as np
import pandas as pd

from streamfl.config import parse_config
from streamfl.generators.build import build_stream
from streamfl.runtime.header import describe_inputs, header_lines


def _inputs(data):
    cfg = parse_config(data)
    return describe_inputs(cfg, build_stream(cfg))


def test_synthetic_drift_after_the_end_and_the_task_source():
    inputs = _inputs({"steps": 100, "source": {"kind": "synthetic", "clients": 2, "dim": 3,
                                                "drift": [{"kind": "abrupt", "at": [50, 100, 5000]}]}})
    assert inputs["task"] == {"value": "logistic", "source": "default", "rule": None}
    # steps count from 1: a switch at 100 acts at the last step, T = 100; only 5000 comes too late
    assert inputs["notes"] == ["abrupt drift at step 5000 comes after the last step (100; steps count from 1): "
                               "no effect"]
    assert inputs["columns"] == [] and inputs["rows"] is None
    assert header_lines(inputs) == [
        "input: synthetic SEA adversary → T = 100 steps, M = 2 clients, d = 3 features, b = 1",
        "task: logistic (default of source.task)",
        "note: abrupt drift at step 5000 comes after the last step (100; steps count from 1): no effect",
    ]


def test_file_source_inputs(tmp_path):
    path = tmp_path / "t.csv"
    pd.DataFrame({"x1": range(5), "x2": ["2", "abc", "4", "5", "6"], "y": [0.5, 1.5, 2.5, 0.5, 1.5]}).to_csv(
        path, index=False)
    inputs = _inputs({"steps": 10, "source": {"kind": "file", "path": str(path), "label": "y", "clients": 1,
                                              "standardize_label": True,
                                              "inject": [{"kind": "covariate_scale", "start": 7, "factor": 2.0}]},
                      "learner": {"batch_size": 2}})
    assert inputs["task"] == {"value": "least_squares", "source": "inferred",
                              "rule": "label 'y' holds numbers that are not whole (e.g. 0.5), so a regression "
                                      "target → least_squares"}
    assert [(c["column"], c["read_as"]) for c in inputs["columns"]] == [("x1", "number"), ("x2", "dropped"),
                                                                        ("y", "label")]
    assert inputs["rows"] == {"read": 5, "streamed": 4, "dropped_incomplete_batches": 1, "beyond_steps": 0}
    assert inputs["notes"] == [
        "1 row not streamed: the last mini-batch of 1 client had fewer than b = 2 rows (only full mini-batches are "
        "streamed)",
        "covariate_scale starts at step 7, after the last step (2; steps count from 1): no effect",
        "the table gives T = 2 steps, fewer than steps: 10",
    ]
    lines = header_lines(inputs)
    assert lines[2] == "columns: number x1 · label y"
    assert lines[3].startswith("label y: regression target, 5 values from ")
    assert lines[4] == ("dropped column x2: numbers with text among them (1 text cell, row 2: 'abc'); fix or remove "
                        "those rows")
    assert lines[5] == "rows: 5 read, 4 streamed"


def test_the_live_view_counts_rows_not_streamed(tmp_path):
    from rich.console import Console

    from streamfl.runtime.experiment import run_experiment
    from streamfl.runtime.live import LiveView

    path = tmp_path / "t.csv"
    pd.DataFrame({"x": range(7), "y": [0, 1, 0, 1, 0, 1, 0]}).to_csv(path, index=False)
    cfg = parse_config({"steps": None, "source": {"kind": "file", "path": str(path), "label": "y", "clients": 2},
                        "learner": {"batch_size": 3}, "baselines": [], "output": {"plots": False}})
    stream = build_stream(cfg)                  # clients of 4 and 3 rows: 1 row left out
    view = LiveView("t", stream.n_steps, enabled=False)
    tables = []

    def hook(tracker, s):
        view(tracker, s)
        tables.append(view.table(tracker))
    summary = run_experiment(cfg, tmp_path / "run", on_chunk=hook, stream=stream)
    console = Console(record=True, width=120)
    console.print(tables[-1])
    assert "rows not streamed = 1" in console.export_text()
    assert summary["inputs"]["rows"]["dropped_incomplete_batches"] == 1


def test_per_client_columns_above_client_columns_max_are_dropped_and_said(tmp_path):
    # 5 clients, output.client_columns_max 3: no per-client columns in metrics.csv, the header and
    # summary.json say so, every other column equals the uncapped run's, and the clients' final
    # cumulative losses go to summary.json (equal to the last row of the uncapped run's columns)
    import json

    from streamfl.runtime.experiment import run_experiment

    def cfg(limit):
        return parse_config({"name": f"cap{limit}", "steps": 40, "seed": 2, "baselines": [],
                             "source": {"kind": "synthetic", "clients": 5, "dim": 3},
                             "output": {"dir": str(tmp_path), "plots": False, "client_columns_max": limit}})
    capped = cfg(3)
    note = ("per-client columns of the metrics file not written: M = 5 clients exceed output.client_columns_max = 3 "
            "(up to 5 columns per client and step); each client's final cumulative loss, steps and regrets are in "
            "summary.json (client_cum_loss, client_steps, client_regret)")
    assert f"note: {note}" in header_lines(describe_inputs(capped, build_stream(capped)))
    a = run_experiment(capped, tmp_path / "a")
    b = run_experiment(cfg(5), tmp_path / "b")
    fa, fb = pd.read_csv(tmp_path / "a" / "metrics.csv"), pd.read_csv(tmp_path / "b" / "metrics.csv")
    assert not [c for c in fa.columns if c.startswith("client")]
    assert [c for c in fb.columns if c.startswith("client")][:2] == ["client0_cum_loss", "client0_avg_loss"]
    pd.testing.assert_frame_equal(fa, fb[fa.columns])
    saved = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert saved["client_columns"] == {"requested": True, "written": False, "max_clients": 3, "note": note}
    assert note in saved["inputs"]["notes"]
    assert json.loads((tmp_path / "b" / "summary.json").read_text())["client_columns"]["written"] is True
    assert a["client_cum_loss"] == b["client_cum_loss"]
    last = fb[[f"client{m}_cum_loss" for m in range(5)]].iloc[-1].tolist()       # written to 10 digits
    np.testing.assert_allclose(a["client_cum_loss"], last, rtol=1e-9)
    assert a["client_regret"] == b["client_regret"]


def test_the_lowered_chunk_and_the_skipped_client_static_regret_are_in_the_run_header():
    # both were only in summary.json's tracker_notes, though the README said the header states them
    cfg = parse_config({"name": "many", "steps": 100, "chunk_size": 256,
                        "source": {"kind": "synthetic", "task": "logistic", "clients": 5000, "dim": 10},
                        "baselines": [], "tracker": {"client_hindsight_max": 4096}})
    notes = describe_inputs(cfg, build_stream(cfg))["notes"]
    assert ("chunk_size lowered from 256 to 83 steps so that a chunk holds at most 4,194,304 features (memory; "
            "the results do not depend on it)") in notes
    assert ("per-client static regret skipped: M = 5000 clients exceed tracker.client_hindsight_max = 4096 (one "
            "exact solver run per client at the end); the network comparator is exact") in notes
    small = parse_config({"name": "few", "steps": 5, "source": {"kind": "synthetic", "clients": 8}, "baselines": []})
    assert not [n for n in describe_inputs(small, build_stream(small))["notes"] if "lowered" in n or "skipped" in n]


def test_no_chunk_note_when_the_run_is_shorter_than_the_lowered_chunk():
    # T = 20 < 83 steps: the chunk holds the whole run either way, nothing is lowered
    cfg = parse_config({"name": "short", "steps": 20, "chunk_size": 256,
                        "source": {"kind": "synthetic", "task": "logistic", "clients": 5000, "dim": 10},
                        "baselines": []})
    assert not [n for n in describe_inputs(cfg, build_stream(cfg))["notes"] if "chunk_size lowered" in n]


def test_an_ignored_reservoir_size_is_said():
    from streamfl.config import default_config
    from streamfl.generators.build import build_stream
    from streamfl.runtime.header import describe_inputs
    cfg = default_config().model_copy(update={"reservoir_size": 128, "steps": 20})
    notes = describe_inputs(cfg, build_stream(cfg))["notes"]
    assert any(n.startswith("reservoir_size = 128 is ignored") for n in notes)
    plain = default_config().model_copy(update={"steps": 20})
    assert not any("reservoir_size" in n for n in describe_inputs(plain, build_stream(plain))["notes"])
