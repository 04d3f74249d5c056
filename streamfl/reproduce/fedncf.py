"""Reproduce FedNCF's MovieLens-100K results (paper 003, §5.3–5.4): ``streamfl reproduce fedncf``.

Runs, for each seed:

* ItemPop (lower bound);
* centralized GMF (upper bound) for ``epochs`` epochs;
* federated GMF with each aggregation rule (MF-FedAvg, FedAvg, SimpleAvg)
  for ``global_rounds`` global rounds;
* optionally (``models`` ⊇ {"mlp", "neumf"}) centralized and federated
  (MF-FedAvg) MLP, and NeuMF started from the GMF and MLP of the same
  setting (NCF's pretraining, α = 0.5), trained for the same budget.

Federated clients of every model train with ``trainer`` (default
``compiled``: the numba kernels of :mod:`streamfl.models.gmf_kernel` and
:mod:`streamfl.models.ncf_kernel`).

The seed drives the initial models, client sampling, negatives, shuffles,
tie-breaks and the 100 test negatives of every user. Runs are independent
and can be spread over processes (``jobs``). Every figure is reported as
mean ± std over the seeds (the population std, ddof = 0, as numpy's
``std``) of the **last** evaluation; beside it, the best
HR@10 over the evaluations of a run (NCF's code reports that one, its
"Best Iteration", chosen on the test items themselves, so it is optimistic).
The paper's aggregation ordering is checked on both, and at every global
round (``checks`` → the rounds at which MF-FedAvg > FedAvg > SimpleAvg holds
on the means).

Writes into the run folder: ``results.json`` (settings, data report,
per-run histories, summary, the checks and wall times), ``results.csv``
(one row per run and evaluation), ``hr_gmf.png`` (HR@10 of the GMF rules per
global round, centralized and ItemPop as references, mean ± std bands),
``final.png`` (final HR@10 and NDCG@10 of every method, mean ± std) and, when
MLP or NeuMF ran, ``models.png`` (HR@10 and the clients' local loss per global
round for federated GMF, MLP and NeuMF).
"""

from __future__ import annotations

import csv
import json
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Callable

import numpy as np

from ..generators.movielens import load_ml100k
from ..runtime.fedncf import RULES, CentralizedNCF, FederatedNCF, NCFSettings, item_pop, settings_dict

RULE_LABELS = {"mf_fedavg": "MF-FedAvg", "fedavg": "FedAvg", "simple_avg": "SimpleAvg"}


def _task(kind: str, model: str, rule: str | None, seed: int, data_path: str, settings: NCFSettings,
          rounds: int, epochs: int, trainer: str) -> dict:
    """One run in a worker process: returns {"method", "model", "rule", "seed", "history", "seconds"}."""
    import torch
    torch.set_num_threads(1)
    data = load_ml100k(data_path, seed=seed)
    t0, c0 = time.perf_counter(), time.process_time()
    s = replace(settings, model=model)
    if kind == "itempop":
        history = [{"hr": item_pop(data, seed)["hr"], "ndcg": item_pop(data, seed)["ndcg"]}]
    elif kind == "central":
        init = _pretrained(data, s, seed, rounds, epochs, trainer, federated=False) if model == "neumf" else None
        history = CentralizedNCF(data, s, seed=seed, init=init).run(epochs)
    else:
        init = _pretrained(data, s, seed, rounds, epochs, trainer, federated=True) if model == "neumf" else None
        fed = FederatedNCF(data, s, rule, seed=seed, trainer=trainer, init=init)
        history = fed.run(rounds)
    return {"kind": kind, "model": model, "rule": rule, "seed": seed, "history": history,
            "seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - c0}


def _pretrained(data, s: NCFSettings, seed: int, rounds: int, epochs: int, trainer: str, federated: bool):
    """NeuMF from a GMF and an MLP trained in the same setting (NCF §3.4.1, α = 0.5)."""
    from ..models.ncf import neumf_from_pretrained
    parts = {}
    for model in ("gmf", "mlp"):
        ps = replace(s, model=model)
        if federated:
            f = FederatedNCF(data, ps, "mf_fedavg", seed=seed, trainer=trainer)
            f.run(rounds)
            parts[model] = f.model
        else:
            c = CentralizedNCF(data, ps, seed=seed)
            c.run(epochs)
            c.model.sparse_grad = False
            parts[model] = c.model
    return neumf_from_pretrained(parts["gmf"], parts["mlp"], alpha=0.5)


def _label(run: dict) -> str:
    if run["kind"] == "itempop":
        return "ItemPop"
    name = run["model"].upper() if run["model"] != "neumf" else "NeuMF"
    if run["kind"] == "central":
        return f"centralized {name}"
    return f"federated {name} ({RULE_LABELS[run['rule']]})"


def reproduce(data_path: str | Path, out: Path, seeds: int = 3, global_rounds: int = 400, epochs: int = 20,
              models: tuple[str, ...] = ("gmf",), settings: NCFSettings | None = None, jobs: int = 1,
              trainer: str = "compiled", log: Callable[[str], None] = print) -> dict:
    """Run the reproduction and write the run folder ``out`` (see module doc); returns the summary.

    Raises
    ------
    FileNotFoundError
        If the data file is missing.
    ValueError
        Unknown, repeated or missing gmf model; seeds/jobs < 1.
    """
    settings = settings or NCFSettings()
    for m in models:
        if m not in ("gmf", "mlp", "neumf"):
            raise ValueError(f"--models takes gmf, mlp and neumf. Got {m!r}.")
    if len(set(models)) != len(models):
        raise ValueError(f"--models lists a model twice ({','.join(models)}); each model runs once per seed.")
    if "gmf" not in models:
        raise ValueError("--models must include gmf: the reproduction compares the aggregation rules on GMF "
                         "(and NeuMF is built from GMF and MLP).")
    if "neumf" in models and not {"gmf", "mlp"} <= set(models):
        raise ValueError("NeuMF is built from GMF and MLP: --models neumf needs gmf and mlp too.")
    if seeds < 1 or jobs < 1:
        raise ValueError(f"--seeds and --jobs must be ≥ 1. Got {seeds} and {jobs}.")
    data = load_ml100k(data_path)                     # fails early, and gives the data report
    out.mkdir(parents=True, exist_ok=True)
    tasks = []
    for seed in range(seeds):
        tasks.append(("itempop", "gmf", None, seed))
        for model in models:
            tasks.append(("central", model, None, seed))
            rules = RULES if model == "gmf" else ("mf_fedavg",)
            tasks += [("federated", model, rule, seed) for rule in rules]
    log(f"FedNCF reproduction on {data.info['source']}: {data.n_users} users, {data.n_items} items, "
        f"{data.info['n_train']} training interactions; {len(tasks)} runs over {jobs} process(es)")
    log(f"protocol: {global_rounds} global rounds of {settings.clients_per_round} users per aggregation round, "
        f"{settings.local_epochs} local epochs, B = {settings.batch_size}, Adam lr {settings.lr:g} "
        f"({settings.embedding_adam} on embeddings), D = {settings.dim}, layers {'/'.join(map(str, settings.layers))}, "
        f"{settings.negatives} negatives per positive, {trainer} trainer; centralized: {epochs} epoch{'s' * (epochs != 1)}, "
        f"B = {settings.centralized_batch_size}")
    t0 = time.perf_counter()
    runs = []
    args = [(k, m, r, s, str(data_path), settings, global_rounds, epochs, trainer) for k, m, r, s in tasks]
    if jobs == 1:
        for a in args:
            runs.append(_task(*a))
            log(f"  {_label(runs[-1])}, seed {a[3]}: HR@10 {runs[-1]['history'][-1]['hr']:.4f} "
                f"({runs[-1]['seconds']:.0f} s)")
    else:
        with ProcessPoolExecutor(jobs) as pool:
            for run in pool.map(_task, *zip(*args)):
                runs.append(run)
                log(f"  {_label(run)}, seed {run['seed']}: HR@10 {run['history'][-1]['hr']:.4f} ({run['seconds']:.0f} s)")
    wall = time.perf_counter() - t0
    result = {"settings": settings_dict(settings), "global_rounds": global_rounds, "centralized_epochs": epochs,
              "seeds": seeds, "models": list(models), "trainer": trainer, "jobs": jobs,
              "data": data.info, "wall_seconds": wall, "runs": [{**r, "label": _label(r)} for r in runs]}
    (out / "results.json").write_text(json.dumps(result, indent=2))
    return render(out)


def render(out: Path) -> dict:
    """(Re)compute the summary, checks and checkpoints of ``out/results.json``, rewrite it, the CSV and the plots."""
    result = json.loads((out / "results.json").read_text())
    runs = result["runs"]
    result["summary"] = summarise(runs)
    result["checks"] = check_orderings(result["summary"])
    result["checkpoints"] = checkpoints(runs)
    names = [f"federated GMF ({RULE_LABELS[r]})" for r in RULES]
    if all(n in result["checkpoints"] for n in names):
        marks = result["checkpoints"][names[0]]["at_round"]
        for m in marks:
            hr = [result["checkpoints"][n]["at_round"][m][0] for n in names]
            result["checks"][f"MF-FedAvg > FedAvg > SimpleAvg at global round {m}"] = bool(hr[0] > hr[1] > hr[2])
        result["checks"]["global rounds at which MF-FedAvg > FedAvg > SimpleAvg (mean HR@10)"] = ordered_rounds(runs)
    (out / "results.json").write_text(json.dumps(result, indent=2))
    _write_csv(out / "results.csv", runs)
    from ..report.fedncf import plot_final, plot_gmf_curves, plot_model_curves
    plot_gmf_curves(runs, out / "hr_gmf.png")
    plot_final(result["summary"], out / "final.png")
    if any(r["model"] != "gmf" for r in runs):
        plot_model_curves(runs, out / "models.png")
    return result


def checkpoints(runs: list[dict]) -> dict:
    """Federated runs: HR@10 mean ± std over seeds at a few global rounds, and the mean HR@10 over all rounds.

    The mean over the rounds (the area under the HR curve divided by its
    length) measures how fast a rule converges, which is FedNCF's claim for
    MF-FedAvg (§5.3, Fig. 5), beside the final value.
    """
    out: dict[str, dict] = {}
    by: dict[str, list[dict]] = {}
    for r in runs:
        if r["kind"] == "federated":
            by.setdefault(_label(r), []).append(r)
    for label, rs in by.items():
        hr = np.array([[h["hr"] for h in r["history"]] for r in rs])        # (seeds, rounds)
        n = hr.shape[1]
        marks = sorted({m for m in (10, 25, 50, 100, 150, 200, 300, 400) if m <= n} | {n})
        out[label] = {"at_round": {str(m): [float(hr[:, m - 1].mean()), float(hr[:, m - 1].std())] for m in marks},
                      "mean_over_rounds": [float(hr.mean(axis=1).mean()), float(hr.mean(axis=1).std())]}
    return out


def ordered_rounds(runs: list[dict]) -> str:
    """The global rounds at which the mean HR@10 of federated GMF is MF-FedAvg > FedAvg > SimpleAvg, as ranges.

    E.g. ``"19-63, 70"``; ``"none"`` if at no round. Rounds beyond the shortest
    run of the three rules are not compared.
    """
    curves = []
    for rule in RULES:
        hs = [r["history"] for r in runs if r["kind"] == "federated" and r["model"] == "gmf" and r["rule"] == rule]
        if not hs:
            return "none"
        n = min(len(h) for h in hs)
        curves.append(np.array([[e["hr"] for e in h[:n]] for h in hs]).mean(axis=0))
    n = min(len(c) for c in curves)
    ok = (curves[0][:n] > curves[1][:n]) & (curves[1][:n] > curves[2][:n])
    rounds = np.flatnonzero(ok) + 1
    if not rounds.size:
        return "none"
    breaks = np.flatnonzero(np.diff(rounds) > 1)
    starts, ends = np.r_[rounds[0], rounds[breaks + 1]], np.r_[rounds[breaks], rounds[-1]]
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in zip(starts, ends))


def summarise(runs: list[dict]) -> dict:
    """label → the last evaluation and the best one, mean ± std over seeds.

    Keys: ``hr``, ``hr_std``, ``ndcg``, ``ndcg_std`` (last evaluation), ``hr_best``,
    ``hr_best_std`` (each run's highest HR@10 over its evaluations, NCF's "Best
    Iteration"), ``ndcg_at_best``, ``ndcg_at_best_std`` (NDCG@10 at that
    evaluation), ``best_round`` (list, one per seed: the global round or epoch
    of the best HR@10), ``n`` (seeds), ``seconds`` and ``cpu_seconds`` (mean
    per run; ``cpu_seconds`` is absent for runs recorded before it was kept).
    """
    by: dict[str, list[dict]] = {}
    for r in runs:
        by.setdefault(_label(r), []).append(r)
    out = {}
    for label, rs in by.items():
        hr = np.array([r["history"][-1]["hr"] for r in rs])
        nd = np.array([r["history"][-1]["ndcg"] for r in rs])
        best = [int(np.argmax([h["hr"] for h in r["history"]])) for r in rs]      # first maximum
        hb = np.array([r["history"][b]["hr"] for r, b in zip(rs, best)])
        nb = np.array([r["history"][b]["ndcg"] for r, b in zip(rs, best)])
        out[label] = {"hr": float(hr.mean()), "hr_std": float(hr.std()), "ndcg": float(nd.mean()),
                      "ndcg_std": float(nd.std()), "hr_best": float(hb.mean()), "hr_best_std": float(hb.std()),
                      "ndcg_at_best": float(nb.mean()), "ndcg_at_best_std": float(nb.std()),
                      "best_round": [b + 1 for b in best], "n": len(rs),
                      "seconds": float(np.mean([r["seconds"] for r in rs]))}
        if all("cpu_seconds" in r for r in rs):
            out[label]["cpu_seconds"] = float(np.mean([r["cpu_seconds"] for r in rs]))
    return out


def check_orderings(summary: dict) -> dict:
    """The paper's claims on GMF, checked on the means (True/False, with the numbers)."""
    hr = {k: v["hr"] for k, v in summary.items()}
    mf, fa, sa = (hr.get(f"federated GMF ({RULE_LABELS[r]})") for r in RULES)
    central = hr.get("centralized GMF")
    pop = hr.get("ItemPop")
    learned = [v for k, v in hr.items() if k != "ItemPop"]
    checks = {}
    if None not in (mf, fa, sa):
        checks["MF-FedAvg > FedAvg > SimpleAvg (GMF HR@10)"] = bool(mf > fa > sa)
        best = [summary[f"federated GMF ({RULE_LABELS[r]})"]["hr_best"] for r in RULES]
        checks["MF-FedAvg > FedAvg > SimpleAvg (GMF best HR@10 over training)"] = bool(best[0] > best[1] > best[2])
    if mf is not None and central is not None:
        checks["federated GMF (MF-FedAvg) within 10 % of centralized GMF (HR@10)"] = bool(mf >= 0.9 * central)
        checks["federated / centralized GMF HR@10"] = mf / central
    if pop is not None and learned:
        checks["ItemPop below every learned model (HR@10)"] = bool(pop < min(learned))
    return checks


def _write_csv(path: Path, runs: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["method", "model", "rule", "seed", "round", "hr10", "ndcg10", "loss", "train_seconds"])
        for r in runs:
            for i, h in enumerate(r["history"]):
                step = h.get("global_round", h.get("epoch", i + 1)) if r["kind"] != "itempop" else 0
                w.writerow([_label(r), r["model"], r["rule"] or "", r["seed"], step, h["hr"], h["ndcg"],
                            h.get("loss", ""), h.get("seconds", "")])
