"""Rounds to a target AUC: FedSubAvg vs FedAvg on a drifting power-law sparse stream, over seeds.

Setting (defaults; see ``streamfl/runtime/fedsubavg.py`` for the protocol and
``streamfl/generators/sparse_features.py`` for the stream):

* N = 100 clients, F = 2000 hashed features, 5 active features per sample,
  b = 8 samples per client and step; heat h(r) = min(1, (10 / r)^1): the 10
  hottest features are in every client's data, the median feature in one
  client's; every 100 steps 5 hot features and 5 cold ones exchange ranks;
* sparse logistic regression, local SGD η = 0.3, τ = 5 local steps per round,
  K = 10 clients sampled per round, 300 rounds; AUC every 5 rounds on 20
  fresh samples per client of the current distribution;
* target: the first evaluation with AUC ≥ 0.80 (the true model scores ≈ 0.87).

Both rules run on the same stream, the same sampled clients and the same test
sets for each seed. The script prints the rounds each rule needs per seed,
their mean ± std, and writes ``fedsubavg_rounds.json``, ``fedsubavg_rounds.csv``
and ``fedsubavg_auc.png`` (mean ± std AUC over seeds) into ``--out``.

Usage::

    python benchmarks/fedsubavg_rounds.py --out DIR [--seeds 5] [--rounds 300] [--target 0.80]
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from streamfl.generators.sparse_features import SparsePowerLawStream
from streamfl.runtime.fedsubavg import SubAvgSettings, run_rules

STREAM = dict(n_clients=100, n_features=2000, nnz=5, batch_size=8, alpha=1.0, hot=10, drift_period=100,
              drift_swaps=5)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path, help="Folder for the JSON, CSV and plot (created if missing).")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--target", type=float, default=0.80)
    ap.add_argument("--lr", type=float, default=0.3)
    a = ap.parse_args(argv)
    settings = SubAvgSettings(clients_per_round=10, local_steps=5, lr=a.lr, rounds=a.rounds, eval_every=5,
                              test_per_client=20, target_auc=a.target)
    a.out.mkdir(parents=True, exist_ok=True)
    results, t0 = [], time.perf_counter()
    for seed in range(a.seeds):
        stream = SparsePowerLawStream(n_steps=settings.rounds * settings.local_steps, seed=seed, **STREAM)
        res = run_rules(stream, settings, seed=seed)
        results.append(res)
        print(f"seed {seed}: rounds to AUC ≥ {a.target}: FedAvg {res['fedavg']['rounds_to_target']}, "
              f"FedSubAvg {res['fedsubavg']['rounds_to_target']}  (true model AUC {np.mean(res['fedavg']['bayes_auc']):.3f})",
              flush=True)
    seconds = time.perf_counter() - t0

    def stats(rule):
        r = [res[rule]["rounds_to_target"] for res in results]
        reached = [x for x in r if x is not None]
        return r, (float(np.mean(reached)) if reached else None), (float(np.std(reached)) if reached else None)

    print(f"\n{'rule':<10} {'rounds per seed':<28} {'mean ± std':>14}")
    summary = {}
    for rule in ("fedavg", "fedsubavg"):
        r, mean, std = stats(rule)
        summary[rule] = {"rounds_to_target": r, "mean": mean, "std": std,
                         "never_reached": sum(x is None for x in r)}
        shown = ", ".join("-" if x is None else str(x) for x in r)
        print(f"{rule:<10} {shown:<28} {('%.1f ± %.1f' % (mean, std)) if mean is not None else 'n/a':>14}")
    print(f"({a.seeds} seeds, {seconds:.0f} s; '-' = target not reached in {a.rounds} rounds)")

    rounds = results[0]["fedavg"]["rounds"]
    with open(a.out / "fedsubavg_rounds.csv", "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(["seed", "round", "auc_fedavg", "auc_fedsubavg", "auc_true_model"])
        for seed, res in enumerate(results):
            for i, r in enumerate(rounds):
                wr.writerow([seed, r, res["fedavg"]["auc"][i], res["fedsubavg"]["auc"][i], res["fedavg"]["bayes_auc"][i]])
    with open(a.out / "fedsubavg_rounds.json", "w") as f:
        json.dump({"stream": STREAM, "settings": asdict(settings),
                   "target_auc": a.target, "seeds": a.seeds, "summary": summary, "seconds": seconds}, f, indent=2)

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    for rule, label, color in (("fedavg", "FedAvg", "tab:blue"), ("fedsubavg", "FedSubAvg", "tab:red")):
        auc = np.array([res[rule]["auc"] for res in results])
        m, s = auc.mean(axis=0), auc.std(axis=0)
        ax.plot(rounds, m, color=color, label=f"{label} (mean of {a.seeds} seeds)")
        ax.fill_between(rounds, m - s, m + s, color=color, alpha=0.2)
    true = np.array([res["fedavg"]["bayes_auc"] for res in results]).mean(axis=0)
    ax.plot(rounds, true, color="grey", ls=":", label="true model")
    ax.axhline(a.target, color="k", lw=0.8, ls="--", label=f"target AUC {a.target}")
    ax.set_xlabel("round")
    ax.set_ylabel("test AUC (current distribution)")
    ax.set_title("Drifting power-law sparse stream: FedSubAvg vs FedAvg (± 1 std)")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(a.out / "fedsubavg_auc.png", dpi=120)
    print(f"wrote {a.out / 'fedsubavg_rounds.json'}, .csv and fedsubavg_auc.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
