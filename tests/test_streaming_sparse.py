"""Streaming FedSubAvg (sparse logistic clients through the engine): the step, the server rule, the regret, runs, CLI."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from streamfl.aggregation import FedSubAvg
from streamfl.aggregation.sparse import SparseRound, SparseUpdate, fedavg, fedsubavg, mf_fedavg, row_heat
from streamfl.config import ConfigError, parse_config
from streamfl.generators.sparse_features import SparsePowerLawStream
from streamfl.models import StepSize
from streamfl.models.client_model import ModelUpdate
from streamfl.models.streaming_sparse import StreamingSparseLogistic
from streamfl.regret.sparse import SparseRegretTracker
from streamfl.runtime.engine import run_stream
from streamfl.runtime.experiment import build_sparse_learners, run_experiment
from streamfl.runtime.learners import Federated
from streamfl.transport.spec import SPARSE_OVER_KAFKA


def small_config(**over):
    data = {"name": "sp", "seed": 3, "steps": 60, "chunk_size": 25,
            "source": {"kind": "sparse_powerlaw", "clients": 12, "features": 300, "nnz": 4, "hot": 6,
                       "drift_period": 20, "drift_swaps": 3},
            "learner": {"model": "sparse_logistic", "tau": 5, "batch_size": 3, "step_size": {"eta": 0.5},
                        "sparse": {"l2": 0.01}},
            "output": {"plots": False}}
    data.update(over)
    return parse_config(data)


def bce(z, y):
    return math.log1p(math.exp(-abs(z))) + max(z, 0.0) - y * z


# ---------------------------------------------------------------- (a) the client model against a hand loop
@pytest.mark.parametrize("rule", ["fedsubavg", "fedavg", None])
def test_client_model_and_rounds_equal_a_per_client_python_loop(rule):
    """Losses, table and biases of the engine's learner = per client, per sample Python with dicts, to 1e-12
    (rule None: the local-only learner, τ = None, which never communicates)."""
    M, F, b, nnz, eta, lam = 5, 40, 3, 3, 0.7, 0.05
    tau = None if rule is None else 3
    s = SparsePowerLawStream(n_clients=M, n_features=F, nnz=nnz, batch_size=b, n_steps=8, hot=4, drift_period=3,
                             drift_swaps=2, seed=4)
    fed = Federated(StreamingSparseLogistic(M, F, StepSize("constant", eta=eta), tau, b, nnz, lam), tau,
                    None if rule is None else FedSubAvg(rule))
    w, bias = np.zeros(F), np.zeros(M)                     # the reference: global table, per-client biases
    local = [dict() for _ in range(M)]                     # client m's rows touched since the last round
    for chunk in s.chunks(3):
        for i in range(chunk.n_steps):
            t = chunk.t0 + i + 1
            got = fed.step(chunk.X[i], chunk.y[i], t)
            for m in range(M):
                row = lambda f: local[m].get(f, w[f])                 # noqa: E731 - the played model
                zs = [bias[m] + sum(row(f) for f in chunk.ids[i, m, j]) for j in range(b)]
                ys = chunk.y[i, m]
                assert got[m] == pytest.approx(sum(bce(z, y) for z, y in zip(zs, ys)) / b, rel=1e-12, abs=1e-15)
                grad = {}
                for j in range(b):
                    g = (1 / (1 + math.exp(-zs[j])) - ys[j]) / b
                    for f in chunk.ids[i, m, j]:
                        grad[int(f)] = grad.get(int(f), 0.0) + g
                new = {f: row(f) - eta * (grad[f] + lam * row(f)) for f in grad}
                local[m].update(new)
                bias[m] -= eta * sum((1 / (1 + math.exp(-z)) - y) / b for z, y in zip(zs, ys))
            if tau is not None and t % tau == 0:               # the round, by hand
                touched = {f for m in range(M) for f in local[m]}
                for f in sorted(touched):
                    deltas = [local[m][f] - w[f] for m in range(M) if f in local[m]]
                    w[f] += sum(deltas) / (len(deltas) if rule == "fedsubavg" else M)
                bias[:] = bias.mean()
                local = [dict() for _ in range(M)]
    c = fed.clients
    for m in range(M):
        played, b_m = c.played(m)
        expect = w.copy()
        for f, v in local[m].items():
            expect[f] = v
        np.testing.assert_allclose(played, expect, rtol=1e-12, atol=1e-15)
        assert b_m == pytest.approx(bias[m], rel=1e-12, abs=1e-15)
    np.testing.assert_allclose(c.w, w, rtol=1e-12, atol=1e-15)
    assert fed.rounds == (0 if rule is None else 2)


def test_upload_is_the_touched_rows_only_and_the_guard_refuses_a_long_round():
    c = StreamingSparseLogistic(2, 10, StepSize("constant", eta=1.0), tau=1, batch_size=1, nnz=2)
    ids = np.array([[[0, 1]], [[1, 7]]])
    c.test_then_train(ids, np.array([[1.0], [0.0]]), 1)
    u = c.upload(np.array([1, 1]))
    r = u.sparse["w"]
    assert r.client.tolist() == [0, 0, 1, 1] and r.ids.tolist() == [0, 1, 1, 7]
    np.testing.assert_allclose(r.rows.ravel(), [0.5, 0.5, -0.5, -0.5])        # z = 0: gradient ∓½
    assert r.counts.tolist() == [1, 1, 1, 1] and u.nbytes == 4 * 24 + 2 * 8
    with pytest.raises(ValueError, match="more steps between two rounds than tau"):
        c.test_then_train(ids, np.array([[1.0], [0.0]]), 2)
    with pytest.raises(ValueError, match=r"feature ids must be in \[0, 10\)"):
        StreamingSparseLogistic(2, 10, StepSize("constant", eta=1.0), 1, 1, 2).test_then_train(
            ids + 5, np.zeros((2, 1)), 1)


# ---------------------------------------------------------------- (b) the server rule
def test_fedsubavg_strategy_by_hand_the_two_client_example():
    """One client moves row 5 by 0.007, the other never touches it: FedSubAvg gives the mover's value,
    FedAvg half of the move (paper 000's dilution of cold rows)."""
    r = SparseRound(client=np.array([0]), ids=np.array([5]), rows=np.array([[0.007]]), counts=np.array([3]),
                    n_samples=np.array([8, 8]))
    u = ModelUpdate(sparse={"w": r}, dense={"b": np.array([[0.2], [0.4]])}, n_samples=np.array([8, 8]))
    sub, avg = FedSubAvg().aggregate(u, u.n_samples), FedSubAvg("fedavg").aggregate(u, u.n_samples)
    assert sub.sparse["w"].ids.tolist() == [5] and sub.sparse["w"].rows[0, 0] == 0.007
    assert avg.sparse["w"].rows[0, 0] == 0.0035
    assert sub.dense["b"].tolist() == avg.dense["b"].tolist() == pytest.approx([0.3])
    with pytest.raises(ValueError, match="'rule' parameter of FedSubAvg"):
        FedSubAvg("mf_fedavg")


def test_fedsubavg_strategy_equals_the_rules_on_a_real_round():
    M, F = 10, 200
    s = SparsePowerLawStream(n_clients=M, n_features=F, nnz=4, batch_size=3, n_steps=5, hot=6, seed=2)
    c = StreamingSparseLogistic(M, F, StepSize("constant", eta=0.4), 5, 3, 4)
    chunk = next(s.chunks(5))
    for i in range(5):
        c.test_then_train(chunk.X[i], chunk.y[i], i + 1)
    u = c.upload(np.full(M, 15))
    r = u.sparse["w"]
    got = FedSubAvg().aggregate(u, u.n_samples).sparse["w"]
    ref = fedsubavg(r, row_heat(r, F), population=M)            # heat: the clients involving each row
    mf = mf_fedavg(r)                                           # full participation: the mean over involving clients
    assert got.ids.tolist() == ref.ids.tolist() == mf.ids.tolist()
    np.testing.assert_allclose(got.rows, ref.rows, rtol=1e-13)
    np.testing.assert_allclose(got.rows, mf.rows, rtol=1e-12)
    diluted = FedSubAvg("fedavg").aggregate(u, u.n_samples).sparse["w"]
    np.testing.assert_allclose(diluted.rows, fedavg(r, "uniform").rows, rtol=1e-13)
    heat = np.bincount(r.ids, minlength=F)[got.ids]
    np.testing.assert_allclose(diluted.rows[:, 0], got.rows[:, 0] * heat / M, rtol=1e-12)    # FedAvg = heat/M of it
    assert (heat < M).any() and (heat == M).any()              # cold and hot rows in the round


# ---------------------------------------------------------------- (c) the static regret by hand
def test_static_regret_recomputed_by_hand():
    cfg = small_config()
    from streamfl.generators.build import build_stream
    stream = build_stream(cfg)
    learners = build_sparse_learners(cfg, stream)
    assert list(learners) == ["fedsea", "tau1", "local", "fedavg"]
    tracker = SparseRegretTracker(stream, "fedsea", list(learners), tol=1e-8)
    run_stream(stream, learners, tracker, "fedsea", cfg.chunk_size)
    summary = tracker.finalize()
    theta = tracker.theta
    comp, concept, grad = 0.0, 0.0, np.zeros(301)
    M, b = 12, 3
    for chunk in stream.chunks(7):                            # plain numpy on the replayed stream
        z = theta[-1] + theta[chunk.ids].sum(axis=-1)
        comp += float((np.logaddexp(0, z) - chunk.y * z).mean(axis=-1).sum() / M)
        zc = stream.intercept + stream.true_weights[chunk.ids].sum(axis=-1)
        concept += float((np.logaddexp(0, zc) - chunk.y * zc).mean(axis=-1).sum() / M)
        g = (1 / (1 + np.exp(-z)) - chunk.y) / (M * b)
        np.add.at(grad, chunk.ids.reshape(-1), np.repeat(g.reshape(-1), 4))
        grad[-1] += g.sum()
    assert np.linalg.norm(grad) <= 1e-8 and summary["comparator"]["converged"]
    assert summary["comparator"]["loss"] == pytest.approx(comp, rel=1e-12)
    assert summary["regret_static"] == pytest.approx(summary["cum_loss"]["fedsea"] - comp, rel=1e-10)
    assert summary["concept"]["loss"] == pytest.approx(concept, rel=1e-12)
    assert comp <= concept                                   # the best fixed model beats the concept in hindsight
    assert sum(summary["client_regret"]) == pytest.approx(summary["regret_static"], rel=1e-10)
    assert tracker.static_columns["regret_static"].iloc[-1] == pytest.approx(summary["regret_static"], rel=1e-12)
    # features seen with one label only: the best fixed model's weight for them is unbounded, and the summary says so
    ids = np.concatenate([c.ids for c in stream.chunks(7)]).reshape(-1, 4)
    ys = np.concatenate([c.y for c in stream.chunks(7)]).reshape(-1)
    labels = {}
    for row, label in zip(ids.tolist(), ys.tolist()):
        for f in row:
            labels.setdefault(f, set()).add(label)
    one = sum(len(v) == 1 for v in labels.values())
    assert summary["comparator"]["one_label_features"] == one
    assert any(n.startswith(f"{one} feature(s) appear only in samples of one label") for n in summary["notes"]) == (one > 0)
    # by hand: feature 0 with labels 1 and 0, feature 1 with 1 only, feature 2 with 0 only, feature 3 unseen
    assert tracker.one_label_features(np.array([[0, 1], [0, 2]]), np.array([1, 0], np.int8)) == 2


# ---------------------------------------------------------------- (d) FedSubAvg against FedAvg on a drifting stream
def test_fedsubavg_beats_fedavg_on_a_drifting_stream(tmp_path):
    cfg = small_config(steps=300, seed=0, chunk_size=300,
                       source={"kind": "sparse_powerlaw", "clients": 40, "features": 1000, "nnz": 5, "hot": 10,
                               "drift_period": 50, "drift_swaps": 5},
                       learner={"model": "sparse_logistic", "tau": 10, "batch_size": 4, "step_size": {"eta": 0.5}},
                       baselines=["fedavg"])
    s = run_experiment(cfg, tmp_path / "run", plots=False)
    sub, avg = s["cum_loss"]["fedsea"], s["cum_loss"]["fedavg"]
    # measured (seed 0): FedSubAvg 151.43 nats, FedAvg 176.99 nats over T = 300 steps (0.505 vs 0.590 per sample)
    assert sub == pytest.approx(151.426, abs=1e-3) and avg == pytest.approx(176.992, abs=1e-3)
    assert avg - sub > 20
    assert s["gaps"]["fedavg"] == pytest.approx(sub - avg)


# ---------------------------------------------------------------- (e) refusals
@pytest.mark.parametrize("change, message", [
    ({"learner": {"model": "linear"}},
     "config error: learner.model: source.kind sparse_powerlaw carries feature ids, not feature values; set "
     "learner.model: sparse_logistic (learner.model is linear)"),
    ({"source": {"kind": "synthetic"}},
     "config error: learner.model: sparse_logistic learns from sparse feature ids; set source.kind: "
     "sparse_powerlaw (source.kind is synthetic)"),
    ({"baselines": ["tau1", "centralized"]},
     "config error: baselines: centralized is not available with learner.model sparse_logistic (one pooled dense "
     "model, not a sparse client model); use tau1, local or fedavg"),
    ({"baselines": ["river"]},
     "config error: baselines: river is not available with learner.model sparse_logistic (River's dense linear "
     "models, not a sparse client model); use tau1, local or fedavg"),
])
def test_config_refusals_are_one_line(change, message):
    data = {"steps": 10, "source": {"kind": "sparse_powerlaw", "clients": 4, "features": 50},
            "learner": {"model": "sparse_logistic"}}
    for key, value in change.items():
        data[key] = {**data[key], **value} if key == "learner" else value
    with pytest.raises(ConfigError) as e:
        parse_config(data)
    assert str(e.value) == message


def test_other_refusals_and_defaults():
    with pytest.raises(ConfigError, match="baselines: fedavg is the sparse FedAvg rule"):
        parse_config({"baselines": ["fedavg"]})
    with pytest.raises(ConfigError, match="learner.sparse: only learner.model sparse_logistic uses it"):
        parse_config({"learner": {"sparse": {"l2": 0.1}}})
    with pytest.raises(ConfigError, match="learner.tau: a sparse_logistic client keeps a round's rows"):
        parse_config({"steps": 5, "source": {"kind": "sparse_powerlaw"}, "learner": {"model": "sparse_logistic",
                                                                                    "tau": None}})
    with pytest.raises(ConfigError, match="source.hot: must lie in"):
        parse_config({"steps": 5, "source": {"kind": "sparse_powerlaw", "nnz": 8, "hot": 4},
                      "learner": {"model": "sparse_logistic"}})
    cfg = parse_config({"steps": 5, "source": {"kind": "sparse_powerlaw"}, "learner": {"model": "sparse_logistic"}})
    assert cfg.baselines == ["tau1", "local", "fedavg"]
    from streamfl.config import dump_config, read_yaml
    assert parse_config(read_yaml(dump_config(cfg))) == cfg


# ---------------------------------------------------------------- (f) the CLI from a temporary folder
def test_cli_run_from_a_temporary_folder_matches_an_in_process_run(tmp_path):
    text = """name: cli-sparse
seed: 1
steps: 40
chunk_size: 16
source: {kind: sparse_powerlaw, clients: 10, features: 200, nnz: 3, hot: 5, drift_period: 10, drift_swaps: 2}
learner: {model: sparse_logistic, tau: 4, batch_size: 2, step_size: {eta: 0.5}}
"""
    (tmp_path / "x.yaml").write_text(text)
    exe = Path(sys.executable).with_name("streamfl")
    env = {**os.environ, "COLUMNS": "300"}
    out = subprocess.run([str(exe), "run", "--config", "x.yaml", "--no-live", "--out", "r"], cwd=tmp_path,
                         capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert "F = 200 features (a table row each), nnz = 3 active per sample, b = 2" in out.stdout
    assert "note: baselines: tau1, local, fedavg" in out.stdout and "loss gap FedSubAvg − fedavg: " in out.stdout
    assert "; BCE per sample: FedSubAvg 0." in out.stdout and "fedsea" not in out.stdout   # the engine's key, not a name
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    for key in ("cum_loss", "regret_static", "regret_static_method", "comparator", "concept", "notes", "learners",
                "gaps", "avg_loss_per_sample", "bytes_up", "elapsed_seconds", "inputs"):
        assert key in summary
    assert set(summary["cum_loss"]) == {"fedsea", "tau1", "local", "fedavg"}
    assert "exact to gradient norm <= 1e-06" in summary["regret_static_method"]
    assert {p.name for p in (tmp_path / "r" / "plots").iterdir()} == {"regret.png", "regret_over_sqrt_t.png",
                                                                    "loss.png"}
    from streamfl.config import load_config
    here = run_experiment(load_config(tmp_path / "x.yaml"), tmp_path / "here", plots=False)
    assert here["regret_static"] == pytest.approx(summary["regret_static"], rel=1e-12)
    assert here["cum_loss"] == pytest.approx(summary["cum_loss"], rel=1e-12)
    report = subprocess.run([str(exe), "report", "r"], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert report.returncode == 0, report.stderr
    for argv, message in ((["--broker", "127.0.0.1:9"], "error: --broker: learner.model sparse_logistic runs "
                           "embedded only for now (its sparse uploads have no Kafka wire format yet); run without "
                           "--broker"),):
        bad = subprocess.run([str(exe), "run", "--config", "x.yaml", "--no-live", *argv], cwd=tmp_path,
                             capture_output=True, text=True, env=env)
        assert bad.returncode == 2 and bad.stderr.strip() == message and bad.stdout == ""
    role = subprocess.run([str(exe), "produce", "--broker", "127.0.0.1:9", "--run-id", "r1", "--config", "x.yaml"],
                          cwd=tmp_path, capture_output=True, text=True, env=env)     # the Kafka roles refuse it too
    assert role.returncode == 2 and role.stderr.strip() == "error: " + SPARSE_OVER_KAFKA
    (tmp_path / "bad.yaml").write_text(text + "baselines: [centralized]\n")
    bad = subprocess.run([str(exe), "run", "--config", "bad.yaml", "--no-live"], cwd=tmp_path, capture_output=True,
                         text=True, env=env)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and bad.stdout == ""
    assert bad.stderr.strip().startswith("error: config error: baselines: centralized is not available")


def test_rule_fedavg_as_the_main_learner_is_the_fedavg_baseline(tmp_path):
    """learner.sparse.rule: fedavg runs the same learner as the fedavg baseline of a FedSubAvg run (to compare)."""
    sub = run_experiment(small_config(baselines=["fedavg"]), tmp_path / "a", plots=False)
    learner = {"model": "sparse_logistic", "tau": 5, "batch_size": 3, "step_size": {"eta": 0.5},
               "sparse": {"l2": 0.01, "rule": "fedavg"}}
    avg = run_experiment(small_config(baselines=["tau1"], learner=learner), tmp_path / "b", plots=False)
    assert avg["cum_loss"]["fedsea"] == sub["cum_loss"]["fedavg"]
    assert avg["rule"] == "fedavg" and avg["learners"]["tau1"]["rule"] == "fedavg"
    assert any("sparse FedAvg (uniform over the M clients" in n for n in avg["notes"])
