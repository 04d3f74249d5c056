"""Throughput of FedSEA: the streamfl engine vs River vs a per-sample torch loop.

All three implementations run the same algorithm on the same stream, in one
process, one after another:

    FedSEA (Algorithm 1) with b = 1: every client m, at every step t,
    *tests* its model on its sample (records f(x_{t,m}, ξ_{t,m})), then
    *trains* on it with one online SGD step of constant size η; every τ steps
    the client models are averaged and the average is broadcast.

Stream: ``SyntheticStream("logistic", M=64, d=100, b=1, seed=0)`` (stationary,
ζ = 0). Its chunks are materialised once, up front, so data generation is
never timed. Loss: f = log(1 + e^z) − y z with z = a·x and y ∈ {0, 1}.

Implementations timed (client-samples per second = steps · M / seconds):

1. **engine** — ``Federated(StackedLinear(M, d, "logistic", constant η), τ)``
   driven step by step exactly like :func:`streamfl.runtime.engine.run_stream`
   (loop over chunks and their steps, ``losses[i] = learner.step(X[i], y[i], t)``).
   Only that learning loop is timed: the regret tracker (``tracker.update``)
   and the copy of the played models that ``run_stream`` keeps *for the
   tracker* are not part of this measure.
2. **River** — one ``river.linear_model.LogisticRegression(optim.SGD(η),
   intercept_lr=0, l2=0)`` per client; per sample ``predict_proba_one`` (to
   record the test loss) then ``learn_one``; every τ steps the mean weights are
   written back into every model's weight store ``model._weights`` (a
   ``river.utils.VectorDict``; ``model.weights`` is only a *copy*
   — ``_weights.to_dict()`` — so writing into it would silently do nothing).
   Each step's feature dicts are built from the numpy rows outside the timed
   region, which only favours River (the figure with that conversion counted
   is printed too). Best of the repeats.
3. **torch** — one ``torch.nn.Linear(d, 1, bias=False)`` (float64) per client;
   per sample forward, ``binary_cross_entropy_with_logits``, ``backward``, manual
   SGD update under ``no_grad``; averaging every τ steps. Best of the repeats.

Correctness: on the first ``--check-steps`` (200) steps, the (steps, M) loss
trajectory of each implementation is compared with :func:`reference_fedsea`,
a plain per-sample numpy loop. The engine must agree to ≤ 1e-6 (the script
exits with status 1 otherwise); River's and torch's differences are printed.

Usage::

    PYTHONPATH=. python benchmarks/throughput.py [--steps 2000] [--river-steps 600]
        [--torch-steps 150] [--clients 64] [--dim 100] [--tau 10] [--json out.json]

Target: engine ≥ 100× River (client-samples/s).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np

try:  # allow `python benchmarks/throughput.py` from the repo without PYTHONPATH
    import streamfl  # noqa: F401
except ImportError:  # pragma: no cover
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from streamfl.generators.synthetic import SyntheticStream
from streamfl.models import StackedLinear, StepSize
from streamfl.runtime.learners import Federated

ENGINE_TOL = 1e-6
TARGET_RATIO_RIVER = 100.0


# --------------------------------------------------------------------------- data

def make_chunks(n_clients: int, n_features: int, n_steps: int, seed: int = 0,
                batch_size: int = 1, chunk_size: int = 256) -> list:
    """The logistic SyntheticStream's chunks, materialised (generation is not timed)."""
    stream = SyntheticStream("logistic", n_clients=n_clients, n_features=n_features,
                             n_steps=n_steps, batch_size=batch_size, seed=seed)
    return list(stream.chunks(chunk_size))


def stack_chunks(chunks: list, n_steps: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """X (T, M, b, d) and y (T, M, b) of the first ``n_steps`` steps of the chunks."""
    X = np.concatenate([c.X for c in chunks])
    y = np.concatenate([c.y for c in chunks])
    if n_steps is not None:
        X, y = X[:n_steps], y[:n_steps]
    return X, y


def truncate_chunks(chunks: list, n_steps: int) -> list:
    """The chunks covering the first ``n_steps`` steps (the last one cut short)."""
    out = []
    for c in chunks:
        if c.t0 >= n_steps:
            break
        n = min(c.n_steps, n_steps - c.t0)
        out.append(type(c)(t0=c.t0, X=c.X[:n], y=c.y[:n], mask=c.mask, optimum=None))
    return out


# ---------------------------------------------------------------------- reference

def reference_fedsea(X: np.ndarray, y: np.ndarray, tau: int, eta: float) -> np.ndarray:
    """FedSEA on a logistic stream, written plainly, one client and sample at a time.

    Parameters
    ----------
    X : ndarray (T, M, b, d)
    y : ndarray (T, M, b), labels in {0, 1}
    tau : int
        Averaging period τ (after steps t = τ, 2τ, …, t counted from 1).
    eta : float
        Constant step size η.

    Returns
    -------
    ndarray (T, M)
        The test loss of every client at every step, before its update
        (mean over the client's mini-batch; with b = 1 the sample's loss).
    """
    T, M, b, d = X.shape
    w = np.zeros((M, d))
    losses = np.zeros((T, M))
    for i in range(T):
        for m in range(M):
            grad = np.zeros(d)
            for j in range(b):
                a, label = X[i, m, j], y[i, m, j]
                z = float(w[m] @ a)
                losses[i, m] += (np.logaddexp(0.0, z) - label * z) / b  # log(1 + e^z) − y z
                sigma = 1.0 / (1.0 + math.exp(-z))
                grad += (sigma - label) * a / b
            w[m] -= eta * grad
        if (i + 1) % tau == 0:
            w[:] = w.mean(axis=0)
    return losses


# ------------------------------------------------------------------------- engine

def make_engine(n_clients: int, n_features: int, tau: int, eta: float) -> Federated:
    """FedSEA as the engine runs it: stacked clients + FedAvg every τ steps."""
    return Federated(StackedLinear(n_clients, n_features, "logistic", StepSize("constant", eta=eta)), tau)


def run_engine(chunks: list, n_clients: int, n_features: int, tau: int, eta: float,
               learner: Federated | None = None) -> tuple[np.ndarray, float]:
    """Drive a :class:`Federated` learner over the chunks the way ``run_stream`` does.

    Returns the (T, M) loss trajectory and the seconds spent in the learning
    loop (no regret tracker, no copy of the played models for it).
    """
    learner = learner or make_engine(n_clients, n_features, tau, eta)
    out = []
    start = time.perf_counter()
    for chunk in chunks:
        n = chunk.n_steps
        losses = np.empty((n, n_clients))
        for i in range(n):
            t = chunk.t0 + i + 1
            X, y = chunk.X[i], chunk.y[i]
            mask = None if chunk.mask is None else chunk.mask[i]
            losses[i] = learner.step(X, y, t, mask)
        out.append(losses)
    seconds = time.perf_counter() - start
    return np.concatenate(out), seconds


# -------------------------------------------------------------------------- River

def river_step_inputs(X_i: np.ndarray, y_i: np.ndarray, names: list) -> tuple[list, list]:
    """One step's samples in River's format: per client, a list of b feature dicts and bools."""
    M, b, _ = X_i.shape
    xs = [[dict(zip(names, X_i[m, j].tolist())) for j in range(b)] for m in range(M)]
    ys = [[bool(y_i[m, j]) for j in range(b)] for m in range(M)]
    return xs, ys


def run_river(X: np.ndarray, y: np.ndarray, tau: int, eta: float) -> tuple[np.ndarray, float, float]:
    """FedSEA with one River LogisticRegression per client (see module doc).

    Each step's feature dicts are built from the numpy rows *outside* the
    timed region (that only favours River); the time spent building them is
    returned separately.

    River's logistic gradient is exactly ours: ``optim.losses.Log.gradient``
    returns −y'/(e^{y'z} + 1) with y' = 2y − 1 ∈ {−1, 1}, i.e. σ(z) − y, except
    for |z| > 18 where it uses e^{−|z|} in place of 1/(e^{|z|} + 1) — a
    difference below e^{−36} ≈ 2e-16. Its ``predict_proba_one`` gives σ(z)
    (clamped to exactly 0/1 for |z| > 30; we clip p to [1e-15, 1 − 1e-15] so
    the recorded loss −log p or −log(1 − p) stays finite); −log σ(z) and
    log(1 + e^z) − y z agree to rounding for the moderate z of this stream.

    Returns
    -------
    losses : ndarray (T, M)
    seconds : float
        Time in predict_proba_one / learn_one / averaging.
    convert_seconds : float
        Time spent building the feature dicts (not in ``seconds``).
    """
    from river import linear_model, optim

    T, M, b, d = X.shape
    names = [f"x{k}" for k in range(d)]
    models = [linear_model.LogisticRegression(optimizer=optim.SGD(eta), intercept_lr=0.0, l2=0.0)
              for _ in range(M)]
    losses = np.zeros((T, M))
    log = math.log
    seconds = convert = 0.0
    clock = time.perf_counter
    for i in range(T):
        c0 = clock()
        xs, ys = river_step_inputs(X[i], y[i], names)   # untimed: River's input format
        c1 = clock()
        convert += c1 - c0
        for m, model in enumerate(models):
            for x, target in zip(xs[m], ys[m]):
                p = model.predict_proba_one(x)[True]
                p = min(max(p, 1e-15), 1.0 - 1e-15)
                losses[i, m] += (-log(p) if target else -log(1.0 - p)) / b
                model.learn_one(x, target)
        if (i + 1) % tau == 0:
            # Average: read every client's weights, write the mean back into
            # each model's VectorDict (``model.weights`` would be a copy).
            mean = np.mean([model._weights.to_numpy(names) for model in models], axis=0)
            new = dict(zip(names, mean.tolist()))
            for model in models:
                model._weights.update(new)
        seconds += clock() - c1
    return losses, seconds, convert


# -------------------------------------------------------------------------- torch

def run_torch(X: np.ndarray, y: np.ndarray, tau: int, eta: float) -> tuple[np.ndarray, float]:
    """FedSEA with one float64 ``torch.nn.Linear`` per client, per-sample autograd SGD."""
    import torch
    import torch.nn.functional as F

    T, M, b, d = X.shape
    Xt = torch.from_numpy(np.ascontiguousarray(X))           # (T, M, b, d) float64, untimed
    yt = torch.from_numpy(np.ascontiguousarray(y))           # (T, M, b)
    models = []
    for _ in range(M):
        lin = torch.nn.Linear(d, 1, bias=False, dtype=torch.float64)
        with torch.no_grad():
            lin.weight.zero_()                                # FedSEA: common x_1 = 0
        models.append(lin)
    losses = np.zeros((T, M))
    start = time.perf_counter()
    for i in range(T):
        for m, lin in enumerate(models):
            for j in range(b):  # b sequential samples (b = 1 here)
                z = lin(Xt[i, m, j]).squeeze(-1)
                loss = F.binary_cross_entropy_with_logits(z, yt[i, m, j])
                losses[i, m] += loss.item() / b
                loss.backward()
                with torch.no_grad():
                    lin.weight -= eta * lin.weight.grad
                lin.weight.grad = None
        if (i + 1) % tau == 0:
            with torch.no_grad():
                mean = torch.stack([lin.weight for lin in models]).mean(dim=0)
                for lin in models:
                    lin.weight.copy_(mean)
    seconds = time.perf_counter() - start
    return losses, seconds


# --------------------------------------------------------------------------- main

def _table(rows: list[tuple[str, ...]], header: tuple[str, ...]) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # pragma: no cover
        widths = [max(len(str(r[k])) for r in [header, *rows]) for k in range(len(header))]
        for r in [header, *rows]:
            print("  ".join(str(c).rjust(w) for c, w in zip(r, widths)))
        return
    table = Table(*header)
    for r in rows:
        table.add_row(*r)
    Console().print(table)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=2000, help="engine steps (default 2000)")
    p.add_argument("--river-steps", type=int, default=600, help="River steps per repeat (default 600, about 1 s)")
    p.add_argument("--torch-steps", type=int, default=150, help="torch steps per repeat (default 150, about 1 s)")
    p.add_argument("--check-steps", type=int, default=200, help="steps compared with the reference (default 200)")
    p.add_argument("--clients", type=int, default=64, help="M (default 64)")
    p.add_argument("--dim", type=int, default=100, help="d (default 100)")
    p.add_argument("--tau", type=int, default=10, help="averaging period τ (default 10)")
    p.add_argument("--eta", type=float, default=0.05, help="constant step size η (default 0.05)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeats", type=int, default=3, help="interleaved repeats of all three, best of each taken (default 3)")
    p.add_argument("--json", type=Path, default=None, help="write the figures to this JSON file")
    args = p.parse_args(argv)
    M, d, tau, eta = args.clients, args.dim, args.tau, args.eta
    n_check = min(args.check_steps, args.steps, args.river_steps, args.torch_steps)
    n_total = max(args.steps, args.river_steps, args.torch_steps)

    print(f"FedSEA throughput: logistic SyntheticStream, M={M}, d={d}, b=1, tau={tau}, "
          f"eta={eta} (constant), seed={args.seed}")
    t0 = time.perf_counter()
    chunks = make_chunks(M, d, n_total, seed=args.seed)
    X_all, y_all = stack_chunks(chunks)
    print(f"stream materialised ({n_total} steps) in {time.perf_counter() - t0:.1f} s, untimed")

    # The three implementations run interleaved, `repeats` rounds, best of each:
    # a burst of load on the machine then hits all of them alike.
    engine_chunks = truncate_chunks(chunks, args.steps)
    times, river_times, torch_times = [], [], []
    engine_losses = None
    for _ in range(args.repeats):
        losses, sec = run_engine(engine_chunks, M, d, tau, eta)
        times.append(sec)
        if engine_losses is None:
            engine_losses = losses
        elif not np.array_equal(losses, engine_losses):  # every repeat replays the same trajectory
            print("engine repeats disagree", file=sys.stderr)
            return 1
        river_losses, sec, river_convert = run_river(X_all[:args.river_steps], y_all[:args.river_steps], tau, eta)
        river_times.append(sec)
        torch_losses, sec = run_torch(X_all[:args.torch_steps], y_all[:args.torch_steps], tau, eta)
        torch_times.append(sec)
    engine_sec, river_sec, torch_sec = min(times), min(river_times), min(torch_times)

    # Correctness against the plain per-sample reference.
    ref = reference_fedsea(X_all[:n_check], y_all[:n_check], tau, eta)
    diffs = {
        "engine": float(np.max(np.abs(engine_losses[:n_check] - ref))),
        "river": float(np.max(np.abs(river_losses[:n_check] - ref))),
        "torch": float(np.max(np.abs(torch_losses[:n_check] - ref))),
    }

    sps = {
        "engine": args.steps * M / engine_sec,
        "river": args.river_steps * M / river_sec,
        "torch": args.torch_steps * M / torch_sec,
    }
    river_with_convert = args.river_steps * M / (river_sec + river_convert)
    ratio_river = sps["engine"] / sps["river"]
    ratio_torch = sps["engine"] / sps["torch"]

    _table([
        ("engine", str(args.steps), f"{engine_sec:.3f} (best of {args.repeats})", f"{sps['engine']:,.0f}",
         f"{diffs['engine']:.2e}"),
        ("River", str(args.river_steps), f"{river_sec:.3f} (best of {args.repeats})", f"{sps['river']:,.0f}", f"{diffs['river']:.2e}"),
        ("torch", str(args.torch_steps), f"{torch_sec:.3f} (best of {args.repeats})", f"{sps['torch']:,.0f}", f"{diffs['torch']:.2e}"),
    ], ("impl", "steps", "seconds", "client-samples/s", f"max|loss-ref| ({n_check} st.)"))
    print("engine = Federated(StackedLinear) driven as run_stream does; River = LogisticRegression per client;")
    print("torch = nn.Linear per client, per-sample autograd. Engine repeats (s): "
          + ", ".join(f"{x:.3f}" for x in times))
    print(f"engine / River: {ratio_river:,.1f}x  -- target: engine >= {TARGET_RATIO_RIVER:.0f}x River: "
          f"{'MET' if ratio_river >= TARGET_RATIO_RIVER else 'NOT MET'}")
    print(f"engine / torch: {ratio_torch:,.1f}x")
    print(f"(River with its numpy-row -> dict conversion counted too: {river_with_convert:,.0f} samples/s, "
          f"engine / that = {sps['engine'] / river_with_convert:,.1f}x)")
    print("Engine time = the learning loop only (Federated.step per step, as run_stream drives it); "
          "the regret tracker and the played-model copy kept for it are not timed.")
    ok = diffs["engine"] <= ENGINE_TOL
    print(f"correctness (first {n_check} steps vs per-sample numpy reference): engine max abs diff "
          f"{diffs['engine']:.3e} (tolerance {ENGINE_TOL:g}) {'OK' if ok else 'FAILED'}; "
          f"River {diffs['river']:.3e}, torch {diffs['torch']:.3e} (informative)")

    if args.json is not None:
        import river
        import torch
        figures = {
            "config": {"task": "logistic", "clients": M, "dim": d, "batch_size": 1, "tau": tau, "eta": eta,
                       "seed": args.seed, "engine_steps": args.steps, "river_steps": args.river_steps,
                       "torch_steps": args.torch_steps, "check_steps": n_check, "engine_repeats": args.repeats},
            "seconds": {"engine": engine_sec, "engine_all_repeats": times, "river": river_sec,
                        "river_dict_conversion": river_convert, "torch": torch_sec},
            "samples_per_second": {**sps, "river_including_dict_conversion": river_with_convert},
            "ratios": {"engine_over_river": ratio_river, "engine_over_torch": ratio_torch},
            "target": {"engine_over_river_min": TARGET_RATIO_RIVER, "met": ratio_river >= TARGET_RATIO_RIVER},
            "max_abs_diff_vs_reference": diffs,
            "engine_check_passed": ok,
            "versions": {"python": platform.python_version(), "numpy": np.__version__,
                         "torch": torch.__version__, "river": river.__version__,
                         "torch_threads": torch.get_num_threads()},
        }
        args.json.write_text(json.dumps(figures, indent=2))
        print(f"figures written to {args.json}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
