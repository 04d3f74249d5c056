"""FedSEA Lemma 1's decomposition adds up, in each regret's own basis, everywhere it is shown.

The live table of the default run read "virtual 38.593 + consensus 0.202" under a static regret of
38.894: the virtual regret was the realised-loss one (f) and the consensus part the population one
(F). Now static regret = ``regret_static_virtual`` + ``consensus_part_static`` (realised f) and
expected regret = ``regret_expected_virtual`` + ``consensus_part_expected`` (population F), at every
step of metrics.csv (read at full precision from metrics.parquet, the same columns), in the live
state after every step (chunk_size 1), in the live table, and in summary.json's ``decomposition``.
"""

import copy
import io
import json
import re

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from streamfl.config import parse_config, read_yaml
from streamfl.runtime.experiment import run_experiment
from streamfl.runtime.live import LiveView

RTOL = 1e-12

CONFIGS = {
    "logistic": """
steps: 120
source: {kind: synthetic, task: logistic, clients: 4, dim: 4, drift: [{kind: rotation, speed: 0.002}]}
learner: {tau: 5, step_size: {kind: constant, eta: 0.2}}
""",
    "least-squares": """
steps: 120
source: {kind: synthetic, task: least_squares, clients: 4, dim: 4, drift: [{kind: abrupt, at: [60]}]}
learner: {tau: 5, step_size: {kind: constant, eta: 0.05}}
""",
    "real-data": """
steps: 120
source: {kind: river_dataset, name: Phishing, clients: 4}
learner: {tau: 5, batch_size: 2, step_size: {kind: constant, eta: 0.2}}
""",
}


def _adds_up(regret, virtual, part, scale):
    """virtual + part = regret to RTOL of the magnitudes subtracted (the cumulative loss ``scale``); the
    regret and its virtual counterpart are unknown (NaN) together, the part never."""
    regret, virtual, part = (np.asarray(v, dtype=np.float64) for v in (regret, virtual, part))
    unknown = np.isnan(regret)
    return np.where(unknown, np.isnan(virtual) & np.isfinite(part),
                    np.abs(virtual + part - regret) <= RTOL * np.maximum(np.abs(regret), np.abs(scale)))


def _run(text, tmp_path):
    data = read_yaml(text)
    data.update(name="dec", chunk_size=1, baselines=[], output={"plots": False, "format": "parquet"})
    states, tables = [], []

    def hook(tracker, stream):
        states.append(copy.deepcopy(tracker.state))
        if tracker.state.t in (60, 120):
            console = Console(record=True, width=160, file=io.StringIO())
            console.print(LiveView("x", 120, console=console, enabled=False).table(tracker))
            tables.append(console.export_text())

    summary = run_experiment(parse_config(data), tmp_path / "run", on_chunk=hook, plots=False)
    on_disk = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert on_disk["decomposition"] == json.loads(json.dumps(on_disk["decomposition"]))
    return summary, on_disk, pd.read_parquet(tmp_path / "run" / "metrics.parquet"), states, tables


def _row(table: str, label: str) -> float:
    line = next(line for line in table.splitlines() if label in line)
    return float(re.findall(r"-?[\d,]+\.\d+", line.split(label, 1)[1])[0].replace(",", ""))


@pytest.mark.parametrize("name", list(CONFIGS))
def test_each_decomposition_pair_adds_up_to_its_regret(name, tmp_path):
    summary, on_disk, m, states, tables = _run(CONFIGS[name], tmp_path)
    cum = m["cum_loss"].to_numpy()
    # metrics: the realised pair at every step decomposes the live static regret (regret_static_virtual is
    # x̄_t's regret against the same live comparator); where the exact regret_static is known it is that value
    assert _adds_up(m["regret_static_live"], m["regret_static_virtual"], m["consensus_part_static"], cum).all()
    assert m["regret_static_live"].notna().all()
    exact = m["regret_static"].notna()
    assert exact.any()
    np.testing.assert_allclose(m.loc[exact, "regret_static_live"], m.loc[exact, "regret_static"], rtol=1e-12)
    np.testing.assert_allclose(m["consensus_part_static"], m["cum_loss"] - m["cum_loss_virtual"], rtol=0, atol=1e-12)
    # the population pair where the expected regret is live (least squares), its part wherever F is known
    synthetic = name != "real-data"
    assert m["consensus_part_expected"].notna().all() == synthetic
    assert m["consensus_part_expected"].isna().all() == (not synthetic)
    live_expected = m["regret_expected"].notna()
    assert live_expected.all() == (name == "least-squares") and live_expected.any() == (name == "least-squares")
    if name == "least-squares":
        assert _adds_up(m["regret_expected"], m["regret_expected_virtual"], m["consensus_part_expected"], cum).all()
        # the two bases differ: the pairs are not interchangeable
        assert np.max(np.abs(m["consensus_part_static"] - m["consensus_part_expected"])) > 1e-3
    # the live state after every step
    assert [st.t for st in states] == list(range(1, 121))
    for st in states:
        r, c = st.regret, st.cum_loss["fedsea"]
        assert _adds_up(r["static"], r["static_virtual"], r["consensus_part_static"], c), st.t
        if np.isfinite(r["expected"]):
            assert _adds_up(r["expected"], r["expected_virtual"], r["consensus_part_expected"], c), st.t
    # summary.json: every pair it gives adds up to the regret it names (the logistic expected regret is exact
    # at the end, with the same consensus part the metrics carry at T)
    for s in (summary, on_disk):
        dec = s["decomposition"]
        assert dec["source"].startswith("FedSEA Lemma 1")
        pairs = {"static": ("realised losses f", s["regret_static"], s["regret_static_virtual"],
                            s["consensus_part_static"])}
        if synthetic:
            pairs["expected"] = ("population F", s["regret_expected"], s["regret_expected_virtual"],
                                 s["consensus_part_expected"])
        else:
            assert dec["expected"] is None and s["consensus_part_expected"] is None
        for key, (basis, regret, virtual, part) in pairs.items():
            assert dec[key] == {"basis": basis, "regret": regret, "regret_virtual": virtual, "consensus_part": part}
            assert _adds_up(regret, virtual, part, s["cum_loss"]["fedsea"])
    assert summary["consensus_part_static"] == pytest.approx(m["consensus_part_static"].iloc[-1], rel=1e-15)
    if synthetic:
        assert summary["consensus_part_expected"] == pytest.approx(m["consensus_part_expected"].iloc[-1], rel=1e-15)
    # the live table: each pair sits under the regret it decomposes, named by its basis, and adds up to it
    # (to the 3 decimals shown)
    for table in tables:
        static = _row(table, "best fixed model (hindsight)")
        assert _row(table, "= virtual average x̄_t (realised f)") + _row(
            table, "+ consensus part (realised f; FedSEA Lemma 1)") == pytest.approx(static, abs=2e-3)
        if name == "least-squares":
            assert _row(table, "= virtual average x̄_t (population F)") + _row(
                table, "+ consensus part (population F; FedSEA Lemma 1)") == pytest.approx(
                _row(table, "expected, FedSEA eq. (3)"), abs=2e-3)
        else:
            assert "population F" not in table          # no pair for a regret not shown live
