"""Streaming FedNCF (GMF clients through the engine): MF-FedAvg step, prequential HR@10, runs, ML-100K, CLI."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from streamfl.aggregation import MFFedAvg
from streamfl.config import ConfigError, parse_config
from streamfl.generators.interactions import InteractionStream, movielens_stream
from streamfl.models import StepSize
from streamfl.models.streaming_gmf import StreamingGMF
from streamfl.regret.ranking import RankingTracker
from streamfl.runtime.engine import run_stream
from streamfl.runtime.experiment import run_experiment
from streamfl.runtime.learners import Federated

ML100K = Path("/work/shared/data/ml-100k/u.data")
needs_ml100k = pytest.mark.skipif(not ML100K.is_file(), reason=f"MovieLens 100K not found at {ML100K} "
                                  "(the data set is read in place, never copied into the repository)")


def synthetic(n_users=30, n_items=150, per_user=12, seed=0):
    """A tiny interaction stream: user u interacts with per_user (+ u % 3) distinct items, popular ones first."""
    rng = np.random.default_rng(seed)
    users, items, times = [], [], []
    pop = np.arange(n_items, 0, -1, dtype=float) ** 1.5
    for u in range(n_users):
        k = per_user + u % 3
        chosen = rng.choice(n_items, size=k, replace=False, p=pop / pop.sum())
        users += [u] * k
        items += chosen.tolist()
        times += sorted(rng.integers(0, 10_000, k).tolist())
    return np.array(users), np.array(items), np.array(times)


def write_udata(path: Path, users, items, times):
    path.write_text("".join(f"{u + 1}\t{i + 1}\t4\t{t}\n" for u, i, t in zip(users, items, times)))


# ---------------------------------------------------------------- the stream
def test_interaction_stream_orders_each_user_by_time_and_masks_ended_users():
    users = np.array([0, 1, 0, 0, 1])
    items = np.array([5, 6, 7, 8, 9])
    times = np.array([30, 10, 10, 20, 10])          # user 1: both at t = 10 → file order (6 then 9)
    s = InteractionStream(users, items, times, 2, 10)
    (chunk,) = list(s.chunks(8))
    assert s.n_steps == 3
    assert chunk.X[:, 0, 0, 0].tolist() == [7, 8, 5]
    assert chunk.X[:2, 1, 0, 0].tolist() == [6, 9]
    assert chunk.mask.tolist() == [[True, True], [True, True], [True, False]]
    assert s.ever.sum() == 5 and s.ever[1, 9] and not s.ever[1, 5]


# ---------------------------------------------------------------- one hand-computed MF-FedAvg step
def test_one_mf_fedavg_round_by_hand():
    """Two users, τ = 1: each client's SGD step on its positive and negative, then MF-FedAvg of the
    item rows (per item, over the users who touched it) and FedAvg of h and b, recomputed in numpy."""
    I, D, eta = 6, 3, 0.5
    ever = np.zeros((2, I), bool)
    ever[0, [0, 1]] = True
    ever[1, [0, 2]] = True
    model = StreamingGMF(2, I, StepSize("constant", eta=eta), ever, tau=1, dim=D, negatives=1, eval_negatives=2,
                         init_std=0.3, seed=3)
    P, Q, H, B = model.P.copy(), model.Q.copy(), model.H.copy(), model.B.copy()
    fed = Federated(model, 1, MFFedAvg("uniform"))
    X = np.array([[[0.0]], [[0.0]]])                 # both users' positive: item 0
    losses = fed.step(X, np.ones((2, 1)), t=1)
    negs = model.observations()["negatives"][:, 0].copy()
    assert not ever[0, negs[0]] or negs[0] == 1      # a negative is an item not seen so far
    assert negs[0] != 0 and negs[1] != 0
    sig = lambda z: 1 / (1 + math.exp(-z))          # noqa: E731
    local_Q = [{}, {}]
    newH, newB, want_loss = [], [], []
    for m in range(2):
        cand, ys = [0, int(negs[m])], [1.0, 0.0]
        rows = {j: Q[j].copy() for j in cand}
        zs = [B[m] + float(H[m] @ (P[m] * Q[j])) for j in cand]
        want_loss.append(np.mean([math.log1p(math.exp(-z)) if y else math.log1p(math.exp(z)) for z, y in zip(zs, ys)]))
        g = [(sig(z) - y) / 2 for z, y in zip(zs, ys)]
        for gk, j in zip(g, cand):
            rows[j] = rows[j] - eta * gk * H[m] * P[m]
        newH.append(H[m] - eta * sum(gk * P[m] * Q[j] for gk, j in zip(g, cand)))
        newB.append(B[m] - eta * sum(g))
        local_Q[m] = rows
    np.testing.assert_allclose(losses, want_loss, rtol=1e-12)
    want = Q.copy()
    for j in {0, int(negs[0]), int(negs[1])}:
        touched = [local_Q[m][j] for m in range(2) if j in local_Q[m]]
        want[j] = np.mean(touched, axis=0)            # MF-FedAvg: only the users who updated item j
    np.testing.assert_allclose(model.Q, want, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(model.H, np.repeat(np.mean(newH, axis=0)[None], 2, axis=0), rtol=1e-12)
    np.testing.assert_allclose(model.B, np.full(2, np.mean(newB)), rtol=1e-12)
    assert (model.slot_map == -1).all() and model.n_slots.tolist() == [0, 0]   # submodels emptied


def test_untouched_item_rows_never_move():
    users, items, times = synthetic(n_users=8, n_items=150, per_user=5)
    s = InteractionStream(users, items, times, 8, 150)
    model = StreamingGMF(8, 150, StepSize("constant", eta=1.0), s.ever, tau=3, dim=4, negatives=1,
                         eval_negatives=10, seed=1)
    Q0 = model.Q.copy()
    fed = Federated(model, 3, MFFedAvg())
    touched = set()
    for chunk in s.chunks(64):
        for i in range(chunk.n_steps):
            fed.step(chunk.X[i], chunk.y[i], chunk.t0 + i + 1, chunk.mask[i])
            present = chunk.mask[i]
            touched |= set(chunk.X[i, present, 0, 0].astype(int).tolist())
            touched |= set(model.observations()["negatives"][present].ravel().tolist())
    if s.n_steps % 3:                       # the last, partial round has not been aggregated
        fed.clients.download(fed.strategy.aggregate(fed.clients.upload(np.ones(8)), np.ones(8)))
    moved = np.flatnonzero((model.Q != Q0).any(axis=1))
    assert set(moved.tolist()) == touched
    assert len(touched) < 150


# ---------------------------------------------------------------- prequential HR@10
def test_constant_scores_give_hr10_about_10_over_101_never_1():
    users, items, times = synthetic(n_users=200, n_items=400, per_user=40, seed=2)
    s = InteractionStream(users, items, times, 200, 400)
    model = StreamingGMF(200, 400, StepSize("constant", eta=0.5), s.ever, tau=5, dim=4, seed=0)
    model.P[:] = 0.0        # p = 0 and h = 0: every item scores b, and no gradient moves p, h or q
    model.H[:] = 0.0
    fed = Federated(model, 5, MFFedAvg())
    tracker = RankingTracker(s, "fedsea", ["fedsea"], model, live_epochs=0, final_epochs=1)
    run_stream(s, {"fedsea": fed}, tracker, "fedsea", 64)
    assert tracker.interactions == len(users)
    assert abs(tracker.hr - 10 / 101) < 0.01          # 8,400 positives: sd ≈ 0.003
    assert tracker.hr < 0.2


# ---------------------------------------------------------------- embedded runs
def _config(path, **learner):
    return parse_config({"name": "gmf", "seed": 0, "steps": None, "chunk_size": 7, "baselines": [],
                         "source": {"kind": "movielens", "path": str(path)},
                         "learner": {"model": "gmf", "tau": 4, "step_size": {"kind": "constant", "eta": 1.0},
                                     **learner},
                         "output": {"plots": False}})


def test_embedded_run_on_a_tiny_stream(tmp_path):
    users, items, times = synthetic()
    write_udata(tmp_path / "u.data", users, items, times)
    cfg = _config(tmp_path / "u.data", gmf={"dim": 4, "init_std": 1e-6, "eval_negatives": 20})
    summary = run_experiment(cfg, tmp_path / "run")
    df = __import__("pandas").read_csv(tmp_path / "run" / "metrics.csv")
    assert summary["n_steps"] == 14 and summary["n_clients"] == 30 and summary["interactions"] == len(users)
    assert summary["rounds"] == 3                                   # steps 4, 8, 12
    # step 1: every user present, scores ≈ 0, so every client's loss is ln 2
    assert df["loss"].iloc[0] == pytest.approx(math.log(2), abs=1e-9)
    assert df["interactions"].tolist()[:12] == [30] * 12 and df["interactions"].iloc[-1] == 10
    assert summary["cum_loss"]["fedsea"] == pytest.approx(df["cum_loss"].iloc[-1], rel=1e-9)
    assert summary["prequential_hr10"] == pytest.approx(df["cum_hr10"].iloc[-1], rel=1e-9)
    assert summary["regret_static"] == pytest.approx(summary["cum_loss"]["fedsea"] - summary["comparator"]["loss"])
    assert df["regret_static"].iloc[-1] == pytest.approx(summary["regret_static"], rel=1e-9)
    assert summary["regret_static_is_estimate"] is True and "estimate" in summary["regret_static_method"]
    assert any("ESTIMATED comparator" in n for n in summary["inputs"]["notes"])
    # the same run again: identical numbers (all draws are seeded)
    again = run_experiment(cfg, tmp_path / "run2")
    assert again["cum_loss"] == summary["cum_loss"] and again["prequential_hr10"] == summary["prequential_hr10"]


def test_engine_equals_a_hand_loop(tmp_path):
    """run_stream's losses and ranks are those of calling the learner step by step."""
    users, items, times = synthetic(n_users=12, per_user=6)
    s = InteractionStream(users, items, times, 12, 150)
    make = lambda: StreamingGMF(12, 150, StepSize("constant", eta=1.0), s.ever, tau=2, dim=3, seed=5)  # noqa: E731
    fed = Federated(make(), 2, MFFedAvg())
    tracker = RankingTracker(s, "fedsea", ["fedsea"], fed.clients, live_epochs=0, final_epochs=1)
    run_stream(s, {"fedsea": fed}, tracker, "fedsea", 3)
    hand = Federated(make(), 2, MFFedAvg())
    total, hits = 0.0, 0
    client_loss, client_hits, client_n = np.zeros(12), np.zeros(12), np.zeros(12)
    for chunk in s.chunks(100):
        for i in range(chunk.n_steps):
            m = chunk.mask[i]
            loss = hand.step(chunk.X[i], chunk.y[i], chunk.t0 + i + 1, m)
            total += float(loss[m].mean())
            hit = hand.clients.observations()["rank"] <= 10
            hits += int(hit[m].sum())
            client_loss[m] += loss[m] / m.sum()
            client_hits[m] += hit[m]
            client_n[m] += 1
    assert tracker.cum["fedsea"] == pytest.approx(total, rel=1e-12)
    assert tracker.hits == hits
    np.testing.assert_array_equal(fed.clients.Q, hand.clients.Q)
    # per client: the same sums, client by client; they add up to the run's figures
    summary = tracker.finalize()
    np.testing.assert_allclose(summary["client_cum_loss"], client_loss, rtol=1e-12)
    assert summary["client_interactions"] == client_n.tolist() and sum(client_n) == tracker.interactions
    assert summary["client_hr10"] == (client_hits / client_n).tolist()
    assert summary["client_user_ids"] == list(range(12))
    assert sum(summary["client_regret"]) == pytest.approx(summary["regret_static"], rel=1e-12)


def test_config_refusals():
    with pytest.raises(ConfigError, match="set learner.model: gmf"):
        parse_config({"source": {"kind": "movielens", "path": "x"}, "steps": None})
    with pytest.raises(ConfigError, match="learner.batch_size: not available with learner.model gmf"):
        parse_config({"source": {"kind": "movielens", "path": "x"}, "learner": {"model": "gmf", "batch_size": 2}})
    with pytest.raises(ConfigError, match="set source.kind: movielens"):
        parse_config({"learner": {"model": "gmf"}})


# ---------------------------------------------------------------- MovieLens 100K
@needs_ml100k
def test_ml100k_counts():
    s = movielens_stream(ML100K.parent)
    assert (s.n_clients, s.n_items, s.n_steps) == (943, 1682, 737)
    assert s.n_interactions_ == s.n_streamed_ == 100_000 and int(s.ever.sum()) == 100_000
    assert int(s.counts.min()) == 20 and int(s.counts.max()) == 737
    masks = np.concatenate([c.mask for c in s.chunks(256)])
    assert int(masks.sum()) == 100_000 and masks[0].all()
    assert s.info["duplicates_dropped"] == 0


# ---------------------------------------------------------------- the CLI, from a temporary folder
def test_cli_run_from_a_temporary_folder(tmp_path):
    users, items, times = synthetic(n_users=10, per_user=5)
    (tmp_path / "data").mkdir()
    write_udata(tmp_path / "data" / "u.data", users, items, times)
    text = ("name: cli\nsteps: null\nsource: {kind: movielens, path: data}\n"
            "learner: {model: gmf, tau: 2, step_size: {eta: 1.0}, gmf: {dim: 3%s}}\n")
    (tmp_path / "x.yaml").write_text(text % "")
    exe = Path(sys.executable).with_name("streamfl")
    few = subprocess.run([str(exe), "run", "--config", "x.yaml", "--no-live", "--no-plots", "--out", "r"],
                         cwd=tmp_path, capture_output=True, text=True)
    assert few.returncode == 2 and "Traceback" not in few.stderr
    assert few.stderr.strip().endswith("fewer than the 100 evaluation negatives (learner.gmf.eval_negatives)")
    assert few.stdout == ""                   # refused before the run header and the progress bar
    assert not (tmp_path / "r").exists()
    (tmp_path / "x.yaml").write_text(text % ", eval_negatives: 20")
    out = subprocess.run([str(exe), "run", "--config", "x.yaml", "--no-live", "--no-plots", "--out", "r"],
                         cwd=tmp_path, capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    assert out.returncode == 0, out.stderr
    assert "M = 10 clients (one per user), I = " in out.stdout
    assert "baselines tau1" not in out.stdout and "baselines local, centralized are not available" in out.stdout
    assert "static regret (ESTIMATE)" in out.stdout and "loss gap FedNCF − tau1: " in out.stdout
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["interactions"] == 59 and summary["config"]["source"]["path"] == str(tmp_path / "data")
    again = subprocess.run([str(exe), "report", "r"], cwd=tmp_path, capture_output=True, text=True,
                           env={**os.environ, "COLUMNS": "200"})
    assert again.returncode == 0, again.stderr
    assert "plot: r/plots/ranking.png" in again.stdout and (tmp_path / "r" / "plots" / "ranking.png").is_file()
    assert "prequential HR@10: " in again.stdout
    kafka = subprocess.run([str(exe), "run", "--config", "x.yaml", "--no-live", "--broker", "127.0.0.1:9"],
                           cwd=tmp_path, capture_output=True, text=True, env={**os.environ, "COLUMNS": "300"})
    assert kafka.returncode == 2 and kafka.stderr.strip() == (       # gmf runs over Kafka: only the broker is missing
        "error: cannot reach a Kafka broker at 127.0.0.1:9 (Connection refused); start one with scripts/kafka-local start")
    bad = subprocess.run([str(exe), "run", "--config", "x.yaml", "--no-live", "--steps", "3", "--out", "r2"],
                         cwd=tmp_path / "data", capture_output=True, text=True)
    assert bad.returncode == 2 and "no such file" in bad.stderr and "Traceback" not in bad.stderr


# ---------------------------------------------------------------- the server rule's three variants, by hand
def test_mffedavg_rules_by_hand():
    """Client 0 (2 samples) moves row 5 by 0.3, client 1 (1 sample) touches nothing, client 2 sat the round
    out: MF-FedAvg 0.3 (its one user), FedAvg by samples 2/3·0.3 = 0.2, SimpleAvg 0.3/2 = 0.15 (over the
    two clients that took part); h is averaged over those two."""
    from streamfl.aggregation.sparse import SparseRound
    from streamfl.models.client_model import ModelUpdate
    n = np.array([2, 1, 0])
    r = SparseRound(client=np.array([0]), ids=np.array([5]), rows=np.array([[0.3]]), counts=np.array([2]),
                    n_samples=n)
    u = ModelUpdate(sparse={"item": r}, dense={"h": np.array([[1.0], [4.0], [100.0]])}, n_samples=n)
    got = {rule: MFFedAvg("uniform", rule).aggregate(u, n) for rule in ("mf_fedavg", "fedavg", "simple_avg")}
    assert {k: float(g.sparse["item"].rows[0, 0]) for k, g in got.items()} == pytest.approx(
        {"mf_fedavg": 0.3, "fedavg": 0.2, "simple_avg": 0.15}, rel=1e-15)
    assert got["mf_fedavg"].dense["h"].tolist() == [2.5]
    assert MFFedAvg("samples").aggregate(u, n).dense["h"].tolist() == [2.0]
    assert MFFedAvg().aggregate(u, np.zeros(3)) is None


# ---------------------------------------------------------------- the live view
def test_live_view_labels_the_regret_an_estimate():
    from rich.console import Console
    from streamfl.runtime.live import LiveView
    users, items, times = synthetic(n_users=6, per_user=4)
    s = InteractionStream(users, items, times, 6, 150)
    fed = Federated(StreamingGMF(6, 150, StepSize("constant", eta=1.0), s.ever, tau=2, dim=3, seed=0), 2, MFFedAvg())
    tracker = RankingTracker(s, "fedsea", ["fedsea"], fed.clients, live_epochs=5, final_epochs=5)
    run_stream(s, {"fedsea": fed}, tracker, "fedsea", 64)
    console = Console(width=200, record=True)
    console.print(LiveView("gmf", s.n_steps, console=console, enabled=False).table(tracker))
    text = console.export_text()
    assert "regret vs offline fixed GMF (ESTIMATE)" in text
    assert f"prequential HR@10 (pooled)             │  {tracker.hr:.3f}" in text
    assert f"interactions = {len(users)}" in text


# ---------------------------------------------------------------- the upload on the wire (format version 3)
def test_gmf_upload_survives_the_sparse_update_record():
    """A round's item-row upload encoded as SPARSE_UPDATE records (one per worker half of the clients) and
    decoded gives the aggregator exactly the MF-FedAvg delta of the embedded round."""
    from streamfl.aggregation.sparse import SparseRound, mf_fedavg
    from streamfl.transport.format import SparseRoundUpdate, decode, encode
    users, items, times = synthetic(n_users=10, per_user=6)
    s = InteractionStream(users, items, times, 10, 150)
    model = StreamingGMF(10, 150, StepSize("constant", eta=1.0), s.ever, tau=3, dim=4, seed=2)
    (chunk,) = list(s.chunks(3))[:1]
    for i in range(3):
        model.test_then_train(chunk.X[i], chunk.y[i], i + 1, chunk.mask[i])
    up = model.upload(np.full(10, 3))
    r = up.sparse["item"]
    parts = []
    for half in (np.arange(0, 5), np.arange(5, 10)):             # two workers, clients 0-4 and 5-9
        keep = np.isin(r.client, half)
        sub = SparseRound(client=r.client[keep] - half[0], ids=r.ids[keep], rows=r.rows[keep], counts=r.counts[keep],
                          n_samples=r.n_samples[half])
        msg = decode(encode(SparseRoundUpdate.from_round(sub, round=1, worker=int(half[0] > 0), clients=half)))
        back = msg.to_round()
        parts.append((msg.clients[back.client], back))
    merged = SparseRound(client=np.concatenate([c for c, _ in parts]), ids=np.concatenate([b.ids for _, b in parts]),
                         rows=np.concatenate([b.rows for _, b in parts]),
                         counts=np.concatenate([b.counts for _, b in parts]), n_samples=r.n_samples)
    a, b = mf_fedavg(r), mf_fedavg(merged)
    np.testing.assert_array_equal(a.ids, b.ids)
    np.testing.assert_allclose(a.rows, b.rows, rtol=1e-15, atol=0)
    assert int(r.counts.sum()) == 3 * 10 * 5          # 3 steps × 10 clients × (1 positive + 4 negatives)


def test_the_round_length_guard_looks_at_the_clients_that_step_only():
    """Over Kafka one process can hold clients of two rounds (after taking over a dead worker's clients):
    a client whose round submodel is full must not stop another client from stepping."""
    users, items, times = synthetic(n_users=2, per_user=6)
    s = InteractionStream(users, items, times, 2, 150)
    g = StreamingGMF(2, 150, StepSize("constant", eta=0.5), s.ever, tau=2, dim=3, negatives=1, eval_negatives=20)
    X = next(s.chunks(10)).X
    for t in (1, 2):                                   # client 0 fills its round (τ = 2 steps)
        g.test_then_train(X[t - 1], None, t, np.array([True, False]))
    assert g.n_slots.tolist()[0] >= 3
    g.test_then_train(X[0], None, 1, np.array([False, True]))       # client 1 is still in its first step
    with pytest.raises(ValueError, match="more steps between two rounds than tau"):
        g.test_then_train(X[2], None, 3, np.array([True, False]))


def test_an_empty_u_data_is_refused_in_one_line(tmp_path):
    # a 0-byte u.data used to reach the ranking tracker and end in an IndexError traceback
    (tmp_path / "u.data").write_text("")
    with pytest.raises(ValueError, match=r"u\.data: no ratings \(the file is empty; expected user, item, rating, "
                                         r"timestamp, tab-separated\)"):
        movielens_stream(tmp_path)


def test_too_few_negatives_names_the_user_id_of_the_file(tmp_path):
    # the message named the internal client index ("user 0"), not the file's user id
    (tmp_path / "u.data").write_text("196\t242\t3\t881250949\n196\t302\t3\t891717742\n")
    s = movielens_stream(tmp_path)
    with pytest.raises(ValueError, match=r"^user 196 \(client 0\) interacts with all but 0 of the 2 items: fewer "
                                         r"than the 100 evaluation negatives \(learner\.gmf\.eval_negatives\)$"):
        StreamingGMF(s.n_clients, s.n_items, StepSize("constant", 0.1), s.ever, 10, user_ids=s.user_ids)


def test_seeds_run_labels_the_regret_an_estimate(tmp_path):
    users, items, times = synthetic(n_users=10, per_user=5)
    (tmp_path / "data").mkdir()
    write_udata(tmp_path / "data" / "u.data", users, items, times)
    (tmp_path / "x.yaml").write_text("name: cli\nsteps: null\nsource: {kind: movielens, path: data}\n"
                                     "learner: {model: gmf, tau: 2, step_size: {eta: 1.0}, "
                                     "gmf: {dim: 3, eval_negatives: 20}}\n")
    exe = Path(sys.executable).with_name("streamfl")
    out = subprocess.run([str(exe), "run", "--config", "x.yaml", "--no-live", "--no-plots", "--out", "r",
                          "--seeds", "2"], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, "COLUMNS": "200"})
    assert out.returncode == 0, out.stderr
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["regret_static_is_estimate"] is True
    r = summary["intervals"]["regret_static"]
    assert f"regret static (ESTIMATE): {r['mean']:.4f} ± {r['hi'] - r['mean']:.4f}  (n = 2)" in out.stdout


def test_training_negatives_have_an_upper_bound():
    # learner.gmf.negatives: 2000 used to be accepted and ran for minutes (O(negatives · D) per step)
    with pytest.raises(ConfigError) as e:
        parse_config({"source": {"kind": "movielens", "path": "x"}, "learner": {"model": "gmf", "gmf": {"negatives": 2000}}})
    assert str(e.value) == ("config error: learner.gmf.negatives: Input should be less than or equal to 100 "
                            "(got 2000)")
