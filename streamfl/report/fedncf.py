"""Plots of the FedNCF reproduction (``streamfl reproduce fedncf``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

RULE_STYLE = {"mf_fedavg": ("MF-FedAvg", "tab:red"), "fedavg": ("FedAvg", "tab:blue"),
              "simple_avg": ("SimpleAvg", "tab:green")}


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _rounds_axis(ax, n_points: int) -> dict:
    """Whole global rounds on the x axis; the line style keyword arguments (markers when there are few points,
    so that a run of one or two rounds still shows)."""
    from matplotlib.ticker import MaxNLocator
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    return {"marker": "o", "markersize": 4} if n_points <= 20 else {}


def _seeds(n: int) -> str:
    return f"{n} seed" if n == 1 else f"{n} seeds"


def plot_gmf_curves(runs: list[dict], path: Path) -> Path:
    """HR@10 of federated GMF per global round for each rule (mean ± std over seeds), with references."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for rule, (label, color) in RULE_STYLE.items():
        hs = [r["history"] for r in runs if r["kind"] == "federated" and r["model"] == "gmf" and r["rule"] == rule]
        if not hs:
            continue
        hr = np.array([[h["hr"] for h in hist] for hist in hs])
        x = np.array([h["global_round"] for h in hs[0]])
        m, s = hr.mean(axis=0), hr.std(axis=0)
        ax.plot(x, m, color=color, label=f"federated GMF, {label}", **_rounds_axis(ax, len(x)))
        ax.fill_between(x, m - s, m + s, color=color, alpha=0.2)
    for kind, label, style in (("central", "centralized GMF (final)", "--"), ("itempop", "ItemPop", ":")):
        v = [r["history"][-1]["hr"] for r in runs if r["kind"] == kind and r["model"] == "gmf"]
        if v:
            ax.axhline(np.mean(v), color="k", ls=style, lw=1, label=f"{label}: {np.mean(v):.3f}")
    n = len({r["seed"] for r in runs})
    ax.set_xlabel("global round (every user trained once)")
    ax.set_ylabel("HR@10")
    ax.set_title(f"FedNCF on MovieLens 100K: GMF by aggregation rule (mean ± std, {_seeds(n)})")
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_final(summary: dict, path: Path) -> Path:
    """Final HR@10 and NDCG@10 of every method, bars with ± std error bars."""
    plt = _plt()
    labels = sorted(summary, key=lambda k: summary[k]["hr"])
    y = np.arange(len(labels))
    fig, axes = plt.subplots(1, 2, figsize=(10, 0.45 * len(labels) + 1.5), sharey=True)
    for ax, key, title in ((axes[0], "hr", "HR@10"), (axes[1], "ndcg", "NDCG@10")):
        ax.barh(y, [summary[k][key] for k in labels], xerr=[summary[k][key + "_std"] for k in labels],
                color=["grey" if k == "ItemPop" else "tab:orange" if k.startswith("centralized") else "tab:blue"
                       for k in labels], capsize=3)
        for i, k in enumerate(labels):        # past the error bar, so the two never overlap
            ax.text(summary[k][key] + summary[k][key + "_std"], i, f" {summary[k][key]:.3f}", va="center",
                    fontsize=8)
        ax.set_title(f"{title} (mean ± std over seeds)")
        ax.set_xlim(0, max(summary[k][key] + summary[k][key + "_std"] for k in labels) * 1.25)
    axes[0].set_yticks(y, labels, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


MODEL_STYLE = {"gmf": ("GMF", "tab:red"), "mlp": ("MLP", "tab:purple"), "neumf": ("NeuMF", "tab:brown")}


def plot_model_curves(runs: list[dict], path: Path) -> Path:
    """Federated GMF, MLP and NeuMF (MF-FedAvg) per global round: HR@10 and the clients' mean local loss.

    Left: HR@10, mean ± std over seeds, with each model's centralized final value (dashed) and
    ItemPop (dotted). Right: the mean local training loss of the round's clients (BCE, nats), one line
    per seed on a log scale, where a federated model that diverges shows as a rising loss.
    """
    plt = _plt()
    fig, (ax, lx) = plt.subplots(1, 2, figsize=(12, 4.5))
    for model, (name, color) in MODEL_STYLE.items():
        hs = [r["history"] for r in runs if r["kind"] == "federated" and r["model"] == model
              and r["rule"] == "mf_fedavg"]
        if not hs:
            continue
        hr = np.array([[h["hr"] for h in hist] for hist in hs])
        x = np.array([h["global_round"] for h in hs[0]])
        m, s = hr.mean(axis=0), hr.std(axis=0)
        style = _rounds_axis(ax, len(x))
        _rounds_axis(lx, len(x))
        ax.plot(x, m, color=color, label=f"federated {name} (MF-FedAvg)", **style)
        ax.fill_between(x, m - s, m + s, color=color, alpha=0.2)
        for k, hist in enumerate(hs):
            lx.plot(x, [h["loss"] for h in hist], color=color, lw=1, alpha=0.8,
                    label=f"federated {name}" if k == 0 else None, **style)
        central = [r["history"][-1]["hr"] for r in runs if r["kind"] == "central" and r["model"] == model]
        if central:
            ax.axhline(np.mean(central), color=color, ls="--", lw=1,
                       label=f"centralized {name} (final): {np.mean(central):.3f}")
    pop = [r["history"][-1]["hr"] for r in runs if r["kind"] == "itempop"]
    if pop:
        ax.axhline(np.mean(pop), color="k", ls=":", lw=1, label=f"ItemPop: {np.mean(pop):.3f}")
    n = len({r["seed"] for r in runs})
    ax.set_xlabel("global round (every user trained once)")
    ax.set_ylabel("HR@10")
    ax.set_title(f"HR@10 by model (mean ± std, {_seeds(n)})")
    ax.legend(fontsize=7, loc="best")
    lx.set_yscale("log")
    lx.set_xlabel("global round")
    lx.set_ylabel("mean local training loss (BCE, nats)")
    lx.set_title("clients' local loss, one line per seed")
    lx.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
