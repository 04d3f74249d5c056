"""FedNCF: data protocol, ranking metrics, the NCF models, the stacked trainers and one federated round."""

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from streamfl.evaluation import hit_ratio, ndcg, ranks_with_random_ties
from streamfl.generators.movielens import load_ml100k
from streamfl.models.gmf_kernel import train_gmf_compiled
from streamfl.models.ncf import GMF, MLP, NeuMF, build, neumf_from_pretrained
from streamfl.models.ncf_kernel import train_ncf_compiled
from streamfl.models.stacked_torch import LocalSchedule, train_loop, train_stacked
from streamfl.runtime.fedncf import (CentralizedNCF, FederatedNCF, NCFSettings, evaluate, item_pop, round_samples,
                                     submodels)

ML100K = Path(os.environ.get("STREAMFL_ML100K", "/work/shared/data/ml-100k"))
needs_ml100k = pytest.mark.skipif(not (ML100K / "u.data").is_file(),
                                  reason=f"MovieLens 100K not found at {ML100K} (set STREAMFL_ML100K to the ml-100k folder)")


def tiny_file(tmp_path, n_users=12, n_items=40, per_user=15, seed=0) -> Path:
    """A u.data-like file: user, item, rating, timestamp (tab-separated), in random order."""
    rng = np.random.default_rng(seed)
    rows = []
    for u in range(1, n_users + 1):
        items = rng.choice(np.arange(1, n_items), per_user, replace=False)
        times = 1000 * u + np.arange(per_user)
        rows += [(u, i, int(rng.integers(1, 6)), t) for i, t in zip(items, times)]
    rows.append((1, n_items, 5, 1000 + per_user - 1))          # ties user 1's latest timestamp
    order = rng.permutation(len(rows))
    path = tmp_path / "u.data"
    path.write_text("".join("\t".join(map(str, rows[k])) + "\n" for k in order))
    return path


# ------------------------------------------------------------------ data protocol
def test_leave_one_out_and_negatives_on_a_hand_file(tmp_path):
    path = tiny_file(tmp_path)
    d = load_ml100k(path, n_test_negatives=10, seed=3)
    assert (d.n_users, d.n_items) == (12, 40) and d.info["duplicate_interactions_dropped"] == 0
    raw = np.loadtxt(path, dtype=np.int64)
    for u in range(d.n_users):
        mine = raw[raw[:, 0] == d.user_ids[u]]
        latest = mine[:, 3].max()
        tied = [r for r in raw if r[0] == d.user_ids[u] and r[3] == latest]
        assert d.item_ids[d.test_items[u]] == tied[-1][1]                 # last in the file among the latest
        assert d.test_times[u] == latest
        negs = d.test_negatives[u]
        assert len(set(negs.tolist())) == 10 and not d.interacted[u, negs].any()
        train = d.train_items[d.train_ptr[u]:d.train_ptr[u + 1]]
        assert d.test_items[u] not in train and len(train) == len(mine) - 1
    assert d.info["users_with_tied_latest_timestamp"] == 1
    neg = d.sample_negatives(np.repeat(np.arange(d.n_users), 200), 4, np.random.default_rng(0))
    assert not d.interacted[np.repeat(np.arange(d.n_users), 200)[:, None], neg].any()      # never a positive,
    assert not (neg == np.repeat(d.test_items, 200)[:, None]).any()                         # never the held-out item


def test_bad_data_files_are_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="MovieLens 100K file not found"):
        load_ml100k(tmp_path / "nowhere")
    bad = tmp_path / "u.data"
    bad.write_text("1\t2\t3\t100\n1\tx\t3\t101\n")
    with pytest.raises(ValueError, match="line 2: column 'item' is 'x', expected an integer"):
        load_ml100k(bad)


@needs_ml100k
def test_ml100k_split():
    d = load_ml100k(ML100K)
    assert (d.n_users, d.n_items, d.info["n_train"]) == (943, 1682, 99057)
    assert d.info["users_dropped_below_min_interactions"] == 0
    assert d.info["users_with_tied_latest_timestamp"] == 415
    assert d.test_negatives.shape == (943, 100)
    assert not d.interacted[np.arange(943)[:, None], d.test_negatives].any()
    assert all(len(set(r)) == 100 for r in d.test_negatives.tolist())
    assert (d.test_times >= np.maximum.reduceat(np.r_[d.train_times, 0][:len(d.train_times)], d.train_ptr[:-1])).all()


# ------------------------------------------------------------------ ranking metrics
def test_constant_scores_give_chance_hr_not_one():
    rng = np.random.default_rng(0)
    U = 50_000
    ranks = ranks_with_random_ties(np.zeros(U), np.zeros((U, 100)), rng)
    assert ranks.min() == 1 and ranks.max() == 101
    assert hit_ratio(ranks) == pytest.approx(10 / 101, abs=0.005)
    expected_ndcg = sum(1 / np.log2(r + 1) for r in range(1, 11)) / 101
    assert ndcg(ranks) == pytest.approx(expected_ndcg, abs=0.003)
    assert hit_ratio(ranks_with_random_ties(np.ones(3), np.zeros((3, 100)), rng)) == 1.0   # a real win is a hit


@needs_ml100k
def test_constant_model_on_ml100k_scores_about_one_tenth():
    d = load_ml100k(ML100K)

    class Constant(torch.nn.Module):
        def forward(self, users, items):
            return torch.zeros(users.shape)

    hr = [evaluate(Constant(), d, np.random.default_rng(s))["hr"] for s in range(5)]
    assert 0.07 < np.mean(hr) < 0.13
    assert 0.35 < item_pop(d)["hr"] < 0.5


def test_rank_and_ndcg_values():
    assert ndcg(np.array([1])) == 1.0 and ndcg(np.array([3])) == 0.5 and ndcg(np.array([11])) == 0.0
    with pytest.raises(ValueError, match="NaN"):
        ranks_with_random_ties(np.array([np.nan]), np.zeros((1, 3)), np.random.default_rng(0))


# ------------------------------------------------------------------ models
def test_neumf_from_pretrained_is_the_alpha_mixture_of_the_two_logits():
    g = GMF(5, 9, dim=4, generator=torch.Generator().manual_seed(0))
    m = MLP(5, 9, layers=(8, 4, 2), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        g.out.bias.fill_(0.3)
        m.out.bias.fill_(-0.7)
    n = neumf_from_pretrained(g, m, alpha=0.5)
    u, i = torch.tensor([0, 1, 4, 4]), torch.tensor([8, 0, 3, 5])
    torch.testing.assert_close(n(u, i), 0.5 * g(u, i) + 0.5 * m(u, i))
    assert n.out.bias.item() == pytest.approx(0.5 * 0.3 + 0.5 * -0.7)
    n3 = neumf_from_pretrained(g, m, alpha=0.25)
    torch.testing.assert_close(n3(u, i), 0.25 * g(u, i) + 0.75 * m(u, i))
    with pytest.raises(ValueError, match="'alpha' parameter of neumf_from_pretrained must be in \\[0, 1\\]"):
        neumf_from_pretrained(g, m, alpha=1.5)


def test_paper_architecture_sizes():
    m = MLP(3, 7)                                     # layers (48, 24, 12, 6)
    assert m.user.embedding_dim == 24 and [l.out_features for l in m.tower] == [24, 12, 6]
    n = NeuMF(3, 7)
    assert n.out.in_features == 12 + 6
    with pytest.raises(ValueError, match="must be one of \\['gmf', 'mlp', 'neumf'\\]"):
        build("ncf", 3, 7)


@pytest.mark.parametrize("kind", ["gmf", "mlp", "neumf"])
def test_stacked_forward_equals_each_client_alone(kind):
    K, B = 3, 5
    models = [build(kind, 1, 11, dim=4, layers=(8, 4, 2), generator=torch.Generator().manual_seed(k)) for k in range(K)]
    stacked = {name: torch.stack([dict(m.named_parameters())[name].detach() for m in models])
               for name, _ in models[0].named_parameters()}
    items = torch.randint(0, 11, (K, B))
    users = torch.zeros(K, B, dtype=torch.long)
    out = torch.func.functional_call(models[0], stacked, (users, items))
    want = torch.stack([models[k](users[k], items[k]) for k in range(K)])
    torch.testing.assert_close(out, want)


# ------------------------------------------------------------------ trainers
def _round(tmp_path, kind, K=4):
    d = load_ml100k(tiny_file(tmp_path, n_users=10, n_items=40, per_user=18), n_test_negatives=10)
    fed = FederatedNCF(d, NCFSettings(model=kind, dim=4, layers=(8, 4, 2), batch_size=8), seed=1)
    users = np.arange(K)
    rs = round_samples(d, users, 4, 8, 2, np.random.default_rng(0))
    sub = submodels(rs.owner, rs.items, K, d.n_items)
    params = fed.client_params(users, sub)
    schedule = LocalSchedule.from_samples(K, 8, rs.owner, rs.step, rs.col, (np.zeros_like(rs.owner), sub.local), rs.labels)
    return fed, params, schedule


@pytest.mark.parametrize("sparse", [True, False], ids=["SparseAdam", "Adam"])
@pytest.mark.parametrize("kind", ["gmf", "mlp", "neumf"])
def test_stacked_trainers_equal_the_per_client_torch_loop(tmp_path, kind, sparse):
    fed, params, schedule = _round(tmp_path, kind)
    sp = fed._sparse if sparse else None
    ref, ref_loss = train_loop(fed.client, params, schedule, 1e-2, sparse=sp)
    outs = {"batched": train_stacked(fed.client, params, schedule, 1e-2, sparse=sp),
            "vmap": train_stacked(fed.client, params, schedule, 1e-2, method="vmap", sparse=sp)}
    if kind == "gmf":
        outs["compiled"] = train_gmf_compiled(params, schedule, 1e-2, lazy=sparse)
    else:
        outs["compiled"] = train_ncf_compiled(params, schedule, 1e-2, lazy=sparse, model=kind)
    for name, (p, loss) in outs.items():
        for k in ref:
            torch.testing.assert_close(p[k], ref[k], rtol=1e-4, atol=1e-5, msg=f"{name} {k}")
        torch.testing.assert_close(loss, ref_loss, rtol=1e-4, atol=1e-5)
    assert not torch.equal(ref["out.weight"], params["out.weight"])          # it did train


def test_a_federated_round_sends_only_trained_rows_and_keeps_users_local(tmp_path):
    d = load_ml100k(tiny_file(tmp_path, n_users=10, n_items=40, per_user=18), n_test_negatives=10)
    fed = FederatedNCF(d, NCFSettings(dim=4, batch_size=8), seed=0)
    before = {k: v.detach().clone() for k, v in fed.model.named_parameters()}
    users = np.array([2, 5])
    rs = round_samples(d, users, 4, 8, 2, np.random.default_rng(0))      # what the round will draw
    fed.rng = np.random.default_rng(0)
    fed.run_round(users)
    after = dict(fed.model.named_parameters())
    changed_items = torch.nonzero((after["item.weight"] != before["item.weight"]).any(dim=1)).ravel().numpy()
    assert set(changed_items) <= set(rs.items.tolist())                      # only rows some client trained on
    changed_users = torch.nonzero((after["user.weight"] != before["user.weight"]).any(dim=1)).ravel().numpy()
    assert changed_users.tolist() == [2, 5]                                   # sampled users' own rows only


def test_one_client_rounds_are_the_same_under_every_rule(tmp_path):
    d = load_ml100k(tiny_file(tmp_path, n_users=6, n_items=40, per_user=18), n_test_negatives=10)
    models = []
    for rule in ("mf_fedavg", "fedavg", "simple_avg"):
        fed = FederatedNCF(d, NCFSettings(dim=4, batch_size=8, clients_per_round=1), rule=rule, seed=0)
        fed.run(1)
        models.append({k: v.detach() for k, v in fed.model.named_parameters()})
    for other in models[1:]:
        for k in models[0]:
            torch.testing.assert_close(other[k], models[0][k], rtol=0, atol=1e-7)


def test_mf_fedavg_and_fedavg_differ_with_several_clients(tmp_path):
    d = load_ml100k(tiny_file(tmp_path, n_users=6, n_items=40, per_user=18), n_test_negatives=10)
    items = []
    for rule in ("mf_fedavg", "fedavg"):
        fed = FederatedNCF(d, NCFSettings(dim=4, batch_size=8, clients_per_round=6), rule=rule, seed=0)
        fed.run(1)
        items.append(fed.model.item.weight.detach().clone())
    assert not torch.allclose(items[0], items[1])


def test_centralized_and_settings_errors(tmp_path):
    d = load_ml100k(tiny_file(tmp_path), n_test_negatives=10)
    hist = CentralizedNCF(d, NCFSettings(dim=4, centralized_batch_size=16), seed=0).run(2)
    assert [h["epoch"] for h in hist] == [1, 2] and 0 <= hist[-1]["hr"] <= 1
    with pytest.raises(ValueError, match="The 'rule' parameter must be one of \\['mf_fedavg', 'fedavg', 'simple_avg'\\]"):
        FederatedNCF(d, NCFSettings(), rule="fedprox")
    with pytest.raises(ValueError, match="The 'trainer' parameter must be one of \\['compiled', 'batched', 'vmap', 'loop'\\]"):
        FederatedNCF(d, NCFSettings(model="mlp"), trainer="numba")
    with pytest.raises(ValueError, match="The 'embedding_adam' setting must be 'sparse' or 'dense'"):
        NCFSettings(embedding_adam="lazy")


# ------------------------------------------------------------------ the reproduction command, as users run it
def test_reproduce_fedncf_command_writes_results_and_plots(tmp_path, monkeypatch):
    import json
    import subprocess
    import sys
    data = tiny_file(tmp_path, n_users=20, n_items=200, per_user=18)     # ≥ 100 test negatives per user
    monkeypatch.chdir(tmp_path)
    cmd = [sys.executable, "-m", "streamfl.cli", "reproduce", "fedncf", "--data", str(data), "--out", "rep",
           "--seeds", "2", "--rounds", "2", "--epochs", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    # the header echoes the protocol's open choices (they used to be in results.json only)
    assert ("protocol: 2 global rounds of 20 users per aggregation round, 2 local epochs, B = 8, Adam lr 0.001 "
            "(sparse on embeddings), D = 12, layers 48/24/12/6, 4 negatives per positive, compiled trainer; "
            "centralized: 1 epoch, B = 256") in proc.stdout + proc.stderr
    result = json.loads((tmp_path / "rep" / "results.json").read_text())
    labels = {"ItemPop", "centralized GMF", "federated GMF (MF-FedAvg)", "federated GMF (FedAvg)",
              "federated GMF (SimpleAvg)"}
    assert set(result["summary"]) == labels and all(v["n"] == 2 for v in result["summary"].values())
    assert set(result["checkpoints"]["federated GMF (MF-FedAvg)"]["at_round"]) == {"2"}
    assert result["summary"]["ItemPop"]["best_round"] == [1, 1] and "cpu_seconds" in result["summary"]["ItemPop"]
    assert "global rounds at which MF-FedAvg > FedAvg > SimpleAvg (mean HR@10)" in result["checks"]
    assert "ItemPop below every learned model (HR@10)" in result["checks"]
    assert result["data"]["users_with_tied_latest_timestamp"] == 1
    for png in ("hr_gmf.png", "final.png"):
        assert (tmp_path / "rep" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = (tmp_path / "rep" / "results.csv").read_text().splitlines()
    assert rows[0].startswith("method,model,rule,seed,round,hr10,ndcg10") and len(rows) == 1 + 2 * (1 + 1 + 3 * 2)

    again = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert again.returncode == 2 and "already holds files" in again.stderr and "Traceback" not in again.stderr
    missing = subprocess.run(cmd[:6] + [str(tmp_path / "nope"), "--out", "rep2"], capture_output=True, text=True,
                             timeout=120, cwd=tmp_path)
    assert missing.returncode == 2 and "MovieLens 100K file not found" in missing.stderr
    assert "Traceback" not in missing.stderr and not (tmp_path / "rep2").exists()
    bad = subprocess.run(cmd[:6] + [str(data), "--out", "rep3", "--embedding-adam", "lazy"], capture_output=True,
                         text=True, timeout=120, cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.strip() == "error: --embedding-adam must be sparse or dense; got 'lazy'"
    assert not (tmp_path / "rep3").exists()
    for models, message in (("gmf,gmf", "error: --models lists a model twice (gmf,gmf); each model runs once per seed."),
                            ("mlp", "error: --models must include gmf: the reproduction compares the aggregation "
                                    "rules on GMF (and NeuMF is built from GMF and MLP)."),
                            ("gmf,,mlp", "error: --models: an empty name in 'gmf,,mlp'; give e.g. gmf or gmf,mlp,neumf")):
        bad = subprocess.run(cmd[:6] + [str(data), "--out", "rep4", "--models", models], capture_output=True,
                             text=True, timeout=120, cwd=tmp_path, env={**__import__("os").environ, "COLUMNS": "200"})
        assert bad.returncode == 2 and bad.stderr.strip() == message and bad.stdout == ""
        assert not (tmp_path / "rep4").exists()
    (tmp_path / "u.item").write_bytes(b"1|Toy Story (1995)|01-Jan-1995||http://x\n2|Caf\xe9|x\n")
    bad = subprocess.run(cmd[:6] + [str(tmp_path / "u.item"), "--out", "rep5"], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path, env={**__import__("os").environ, "COLUMNS": "300"})
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip() == (f"error: {tmp_path / 'u.item'}: not a u.data file (not UTF-8 text; expected user, "
                                  f"item, rating, timestamp, tab-separated)")


@pytest.mark.parametrize("rule", ["mf_fedavg", "fedavg", "simple_avg"])
def test_a_round_aggregates_as_the_paper_defines_each_rule_on_full_tables(tmp_path, monkeypatch, rule):
    """FedNCF §3.2 and §5.3, on the tables as the clients would send them whole.

    Every client returns its full item table (rows it never trained stay at the
    global value, as P2's item in the paper's two-client example); SimpleAvg is
    the plain mean of those K tables and of the K network weights, FedAvg
    (eq. 1) their mean weighted by each client's interactions n_k, MF-FedAvg
    the mean of an item's row over the clients that trained it (the global row
    if none did) with h and b by FedAvg. The sparse implementation must give
    the same tables.
    """
    import streamfl.runtime.fedncf as rt

    d = load_ml100k(tiny_file(tmp_path, n_users=8, n_items=200, per_user=10), n_test_negatives=10)
    fed = FederatedNCF(d, NCFSettings(dim=3, batch_size=4, clients_per_round=4, negatives=1), rule=rule, seed=0,
                       trainer="compiled")
    seen = {}
    monkeypatch.setattr(rt, "round_samples", lambda *a: seen.setdefault("rs", round_samples(*a)))
    monkeypatch.setattr(rt, "train_gmf_compiled", lambda p, *a, **k: seen.setdefault("new", train_gmf_compiled(p, *a, **k)))
    before = {k: v.detach().double().numpy().copy() for k, v in fed.model.named_parameters()}
    users = np.array([6, 1, 3, 4])
    fed.run_round(users)
    rs, (new, _) = seen["rs"], seen["new"]
    sub = submodels(rs.owner, rs.items, len(users), d.n_items)
    full = np.repeat(before["item.weight"][None], len(users), axis=0)       # (K, items, D): each client's table
    full[sub.client, sub.ids] = new["item.weight"].double().numpy()[sub.client, sub.slot]
    touched = np.zeros((len(users), d.n_items), bool)
    touched[sub.client, sub.ids] = True
    interactions = np.diff(d.train_ptr)[users].astype(float)                 # n_k: the client's training positives
    h = new["out.weight"].double().numpy()[:, 0, :]
    if rule == "simple_avg":
        items, h_bar = full.mean(axis=0), h.mean(axis=0)
    else:
        p = interactions / interactions.sum()
        h_bar = p @ h
        if rule == "fedavg":
            items = np.tensordot(p, full, axes=1)
        else:
            n_m = touched.sum(axis=0)
            items = np.where(n_m[:, None] > 0, (full * touched[..., None]).sum(axis=0) / np.maximum(n_m, 1)[:, None],
                             before["item.weight"])
    assert touched.any(axis=0).sum() < d.n_items and (touched.sum(axis=0) >= 2).any()   # the rules do differ here
    np.testing.assert_allclose(fed.model.item.weight.detach().double().numpy(), items, rtol=0, atol=1e-7)
    np.testing.assert_allclose(fed.model.out.weight.detach().double().numpy()[0], h_bar, rtol=0, atol=1e-7)


def test_reproduction_summary_reports_last_and_best_and_the_ordered_rounds():
    from streamfl.reproduce.fedncf import check_orderings, ordered_rounds, summarise

    def run(rule, seed, hr):
        return {"kind": "federated", "model": "gmf", "rule": rule, "seed": seed, "seconds": 1.0, "cpu_seconds": 0.5,
                "history": [{"global_round": i + 1, "hr": h, "ndcg": h / 2} for i, h in enumerate(hr)]}
    runs = [run("mf_fedavg", 0, [0.1, 0.5, 0.6, 0.5, 0.7, 0.6]), run("mf_fedavg", 1, [0.1, 0.5, 0.6, 0.5, 0.7, 0.6]),
            run("fedavg", 0, [0.2, 0.4, 0.5, 0.6, 0.6, 0.6]), run("fedavg", 1, [0.2, 0.4, 0.5, 0.6, 0.6, 0.6]),
            run("simple_avg", 0, [0.3, 0.3, 0.4, 0.4, 0.5, 0.55]), run("simple_avg", 1, [0.3, 0.3, 0.4, 0.4, 0.5, 0.45])]
    assert ordered_rounds(runs) == "2-3, 5"
    assert ordered_rounds(runs[:4]) == "none"
    s = summarise(runs)
    mf, sa = s["federated GMF (MF-FedAvg)"], s["federated GMF (SimpleAvg)"]
    assert (mf["hr"], mf["hr_best"], mf["ndcg_at_best"], mf["best_round"]) == (0.6, 0.7, 0.35, [5, 5])
    assert [sa["hr"], sa["hr_std"], sa["hr_best"]] == pytest.approx([0.5, 0.05, 0.525], abs=1e-15)
    assert sa["best_round"] == [6, 5] and s["federated GMF (FedAvg)"]["best_round"] == [4, 4]     # first maximum
    assert mf["cpu_seconds"] == 0.5 and mf["n"] == 2
    checks = check_orderings(s)
    assert checks["MF-FedAvg > FedAvg > SimpleAvg (GMF HR@10)"] is False                      # 0.6 = 0.6 at the end
    assert checks["MF-FedAvg > FedAvg > SimpleAvg (GMF best HR@10 over training)"] is True    # 0.7 > 0.6 > 0.525


def test_a_u_data_without_a_user_of_five_interactions_is_refused(tmp_path):
    # two ratings: every user was dropped (FedNCF keeps users with ≥ 5) and the reproduction ended in a
    # ZeroDivisionError traceback after ItemPop scored HR@10 nan
    from streamfl.generators.movielens import load_ml100k
    (tmp_path / "u.data").write_text("196\t242\t3\t881250949\n186\t302\t3\t891717742\n")
    with pytest.raises(ValueError, match=r"u\.data: no user has 5 or more interactions \(2 user\(s\) with fewer "
                                         r"dropped, FedNCF §5\.1\): nothing to train or hold out$"):
        load_ml100k(tmp_path)


def test_models_figure_is_drawn_when_mlp_or_neumf_ran(tmp_path):
    from streamfl.reproduce.fedncf import render

    def hist(hr, loss):
        return [{"global_round": i + 1, "hr": h, "ndcg": h / 2, "loss": l} for i, (h, l) in enumerate(zip(hr, loss))]
    runs = [{"kind": "itempop", "model": "gmf", "rule": None, "seed": s, "history": hist([0.4], [0.0]),
             "seconds": 0.0, "cpu_seconds": 0.0} for s in (0, 1)]
    for model in ("gmf", "mlp"):
        runs += [{"kind": "federated", "model": model, "rule": "mf_fedavg", "seed": s,
                  "history": hist([0.3, 0.5], [0.5, 0.4 + s]), "seconds": 1.0, "cpu_seconds": 1.0} for s in (0, 1)]
        runs += [{"kind": "central", "model": model, "rule": None, "seed": s, "history": hist([0.6], [0.3]),
                  "seconds": 1.0, "cpu_seconds": 1.0} for s in (0, 1)]
    (tmp_path / "results.json").write_text(__import__("json").dumps({"runs": runs}))
    render(tmp_path)
    assert (tmp_path / "models.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    runs = [r for r in runs if r["model"] == "gmf"]                 # GMF only: no models figure
    (tmp_path / "models.png").unlink()
    (tmp_path / "results.json").write_text(__import__("json").dumps({"runs": runs}))
    render(tmp_path)
    assert not (tmp_path / "models.png").exists()
