"""FedNCF on MovieLens 100K: how fast the clients of a round train, and how long a paper-protocol GMF run takes.

Part 1 — trainers, side by side in one process on the same rounds (same
seed: same sampled users, negatives and shuffles), one thread:

* ``loop``: one client after another, a torch model per client with
  ``torch.optim.Adam`` / ``SparseAdam`` (the reference);
* ``vmap``: ``torch.vmap(torch.func.grad_and_value(...))`` over the stacked
  client parameters, the module run with ``functional_call``;
* ``batched``: the stacked parameters through the module's own broadcasting
  forward, autograd on the sum of the clients' losses;
* ``compiled``: the whole round's local training in one numba call
  (``streamfl/models/gmf_kernel.py`` for GMF, ``ncf_kernel.py`` for MLP and NeuMF).

It prints milliseconds per aggregation round (K = 20 clients, 2 local epochs,
B = ``--batch-size``) and checks that every trainer ends with the same model
as ``loop`` (max |difference| over all parameters).

Part 2 — the paper protocol (§5.2: D = 12, 4 negatives, Adam 1e-3, 2 local
epochs, 20 users per round) for federated GMF with MF-FedAvg over
``--global-rounds`` global rounds with the fastest trainer: wall time,
HR@10/NDCG@10 at the end. Target: within 10 minutes on 2 cores.

Usage::

    python benchmarks/fedncf.py --data PATH/ml-100k [--rounds 3] [--global-rounds 150] [--batch-size 8] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time

import numpy as np
import torch

from streamfl.generators.movielens import load_ml100k
from streamfl.runtime.fedncf import FederatedNCF, NCFSettings


def time_trainers(data, model: str, trainers: list[str], rounds: int, batch: int) -> list[dict]:
    users = np.random.default_rng(7).permutation(data.n_users)[: 20 * rounds].reshape(rounds, 20)
    out, models = [], {}
    for trainer in trainers:
        fed = FederatedNCF(data, NCFSettings(model=model, batch_size=batch), seed=0, trainer=trainer)
        fed.run_round(users[0][:2])                             # warm-up (numba compilation, first calls)
        fed = FederatedNCF(data, NCFSettings(model=model, batch_size=batch), seed=0, trainer=trainer)
        times = []
        for r in range(rounds):
            t0 = time.perf_counter()
            fed.run_round(users[r])
            times.append(time.perf_counter() - t0)
        models[trainer] = {k: v.detach().clone() for k, v in fed.model.named_parameters()}
        out.append({"model": model, "trainer": trainer, "ms_per_round": 1e3 * float(np.median(times))})
    ref = models[trainers[-1]]                                    # loop is listed last
    for row in out:
        row["max_abs_diff_vs_loop"] = max(float((models[row["trainer"]][k] - ref[k]).abs().max()) for k in ref)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="MovieLens 100K folder (or its u.data)")
    ap.add_argument("--rounds", type=int, default=3, help="aggregation rounds timed per trainer")
    ap.add_argument("--global-rounds", type=int, default=150, help="global rounds of the protocol run (0: skip)")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--models", default="gmf,mlp,neumf")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    data = load_ml100k(a.data)
    print(f"FedNCF trainers, K = 20 clients per round, B = {a.batch_size}, median of {a.rounds} rounds "
          f"(Python {platform.python_version()}, torch {torch.__version__}, 1 thread)")
    rows = []
    for model in a.models.split(","):
        trainers = ["compiled", "batched", "vmap", "loop"]
        rows += time_trainers(data, model, trainers, a.rounds, a.batch_size)
    print(f"{'model':<6} {'trainer':<9} {'ms/round':>10} {'vs loop':>8} {'max |Δ| vs loop':>16}")
    for r in rows:
        loop = next(x for x in rows if x["model"] == r["model"] and x["trainer"] == "loop")["ms_per_round"]
        r["speedup_vs_loop"] = loop / r["ms_per_round"]
        print(f"{r['model']:<6} {r['trainer']:<9} {r['ms_per_round']:>10.1f} {r['speedup_vs_loop']:>7.1f}x "
              f"{r['max_abs_diff_vs_loop']:>16.2e}")
    result = {"trainers": rows, "batch_size": a.batch_size}
    if a.global_rounds:
        fed = FederatedNCF(data, NCFSettings(batch_size=a.batch_size), rule="mf_fedavg", seed=0, trainer="compiled")
        t0 = time.perf_counter()
        hist = fed.run(a.global_rounds)
        wall = time.perf_counter() - t0
        print(f"\npaper-protocol federated GMF (MF-FedAvg), {a.global_rounds} global rounds "
              f"({fed.rounds} aggregation rounds): {wall:.0f} s wall ({wall / 60:.1f} min; target ≤ 10 min), "
              f"HR@10 {hist[-1]['hr']:.4f}, NDCG@10 {hist[-1]['ndcg']:.4f}")
        result["protocol"] = {"global_rounds": a.global_rounds, "aggregation_rounds": fed.rounds, "wall_seconds": wall,
                              "hr": hist[-1]["hr"], "ndcg": hist[-1]["ndcg"], "within_10_minutes": wall <= 600}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
