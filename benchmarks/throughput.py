"""Throughput of a streamfl run: what a user waits for, and what the learning loop alone costs.

One invocation prints, side by side (client-samples per second = steps · M / seconds):

1. **Configurations** (each measured in its own child process, so its peak
   RSS is its own): logistic M=64 d=100 τ=10 η=0.05 ``baselines: []`` (the
   reference), least squares of the same shape (η=0.005), softmax K=10,
   and the scale rows logistic and least squares at M=1024 d=100 and M=16
   d=1000 (least squares η=0.005 and 0.0005: η·d = 0.5). For each:

   * **whole run** — ``run_experiment`` as ``streamfl run`` calls it: the
     regret tracker on (every comparator the stream allows), metrics written,
     plots off; wall time of the call, summary and files included. Also the
     streaming part alone (``summary["elapsed_seconds"]``: ``run_stream``,
     i.e. learning + ``tracker.update``, without ``finalize``).
   * **learning loop** — the same learners (``build_learners``) on the same
     stream (``build_stream``), stepped exactly as ``run_stream`` steps them,
     without the tracker and without the copy of the played models kept for
     it. The stream's first steps are materialised once (untimed) and cycled
     (t keeps counting), so data generation is never timed.
   * **ratio** whole run / learning loop (the target of issue 9 is ≥ 1/3),
     from wall time and, beside it, from each process's CPU time (the same
     runs; on a shared machine the CPU figures move much less).
   * **tracker parts** — one extra, instrumented whole run in which every
     Python function and method of :mod:`streamfl.regret` (and the
     population module) is wrapped by a timer; each part's *exclusive*
     seconds (time in it minus time in other timed parts it called) are
     printed, largest first. The wrappers cost about a microsecond a call, so
     these are shares, not rates. They follow whatever the tracker's code is.
   * **peak RSS** of the child process (``ru_maxrss``).

2. **Many clients**: logistic d=10, FedSEA only, M = 10^3, 10^4, 10^5: whole
   run (T = ``--scale-steps``, 100) and learning loop rate, wall and per CPU second, and peak RSS, each in a child process whose
   address space is capped (``--memory-cap-gb``, default 6) so that a run
   that would need more reports ``MemoryError`` instead of exhausting a shared
   machine.

3. **Memory against T**: peak RSS of the reference whole run at T = 10^4 and
   10^5 (``--memory-steps``).

4. **FedSEA in plain torch, fairly** (reference shape): all M clients at once
   over stacked (M, d) weights — one batched product for the scores, the
   gradients of all clients from one ``backward`` of the summed losses
   (clients are independent, so that is each client's own gradient), one
   update, ``mean`` every τ steps; no Python loop over clients. Its per-sample
   losses equal the engine's to 1e-6 (checked here and in
   tests/test_benchmark_reference.py). Also the same with the analytic gradient
   (no autograd), and, clearly named, the old per-sample autograd loop (one
   ``nn.Linear`` per client).

5. **Per-sample Python learners**, reported separately because a run that
   includes them is bound by them: ``centralized`` (compiled sequential loop),
   ``river`` (one River ``LogisticRegression`` per client, the library
   reference), and the default learner set FedSEA + τ=1 + local +
   centralized, all as learning loops on the reference shape.

6. **Start-up**: ``streamfl run`` (subprocess, from a temporary folder, warm
   caches: one untimed run first) to the first step, read from the time stamp
   the engine writes when ``STREAMFL_FIRST_STEP_STAMP`` is set; median of
   ``--startup-repeats`` (5).

7. **Refit trade-off** of the live logistic static estimate: one reference
   whole run (T = ``--refit-steps``, 8192) per refit period k
   (``tracker.refit_every``, ``--refit-periods`` 256,1024,4096), same seed:
   CPU seconds, number of refits, and the relative error of the live static
   regret against the exact values ``finalize`` computes at the checkpoints.

8. **Refresh trade-off** of the live least-squares static comparator: one
   least-squares whole run (M = 64, d = 100, T = ``--refresh-steps``, 2048)
   per refresh period k (``tracker.refresh_every``, ``--refresh-periods``
   1,64,256,1024; k = 1 is exact at every step and is the reference), same
   seed: CPU seconds, exact solves, and the relative error of the live static
   regret of every step t ≥ 32 against the k = 1 run's.

Every timed figure covers at least ``--min-seconds`` (1 s) of work and is
repeated ``--repeats`` (3) times; printed as median [min–max]. Steps are
calibrated per figure from a short probe, after an untimed warm-up; a timed
whole run has at least ``--whole-min-steps`` (512) steps so that its fixed
end-of-run cost does not dominate. ``--quick`` runs a small smoke version
(tiny shapes, one repeat, a few minutes: mostly imports and end-of-run
solves) that prints the same rows. ``--only TEXT`` measures only the
configurations whose name contains TEXT; ``--skip`` skips sections.

Usage::

    nice -n 19 python benchmarks/throughput.py [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

try:  # allow `python benchmarks/throughput.py` from the repo without PYTHONPATH
    import streamfl
except ImportError:  # pragma: no cover
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import streamfl

ENGINE_TOL = 1e-6
TARGET_RATIO = 1 / 3
SOFTMAX_MAX_STEPS = 3000      # River's RandomRBF draws every sample up front, in Python
ROOT = Path(streamfl.__file__).resolve().parents[1]

# name, task, M, d, K, η
CONFIGS = [
    ("logistic M=64 d=100 (reference)", "logistic", 64, 100, 1, 0.05),
    ("least squares M=64 d=100", "least_squares", 64, 100, 1, 0.005),
    ("softmax K=10 M=64 d=100", "softmax", 64, 100, 10, 0.05),
    ("logistic M=1024 d=100", "logistic", 1024, 100, 1, 0.05),
    ("logistic M=16 d=1000", "logistic", 16, 1000, 1, 0.05),
    ("least squares M=1024 d=100", "least_squares", 1024, 100, 1, 0.005),
    ("least squares M=16 d=1000", "least_squares", 16, 1000, 1, 0.0005),
]
QUICK_CONFIGS = [
    ("logistic M=64 d=100 (reference)", "logistic", 8, 10, 1, 0.05),
    ("least squares M=64 d=100", "least_squares", 8, 10, 1, 0.005),
    ("softmax K=10 M=64 d=100", "softmax", 8, 10, 10, 0.05),
    ("logistic M=1024 d=100", "logistic", 32, 10, 1, 0.05),
    ("logistic M=16 d=1000", "logistic", 4, 40, 1, 0.05),
    ("least squares M=1024 d=100", "least_squares", 32, 10, 1, 0.005),
    ("least squares M=16 d=1000", "least_squares", 4, 40, 1, 0.0005),
]


# ----------------------------------------------------------------------- configs

def make_config(task: str, M: int, d: int, K: int, eta: float, steps: int, tau: int = 10,
                baselines: tuple = (), out_dir: str = "runs", chunk_size: int = 256, tracker: dict | None = None):
    """The benchmark's experiment: a stationary synthetic stream (ζ = 0, no drift), FedSEA τ, constant η."""
    from streamfl.config import ExperimentConfig

    source = {"kind": "synthetic", "task": task, "clients": M, "dim": d, "heterogeneity": 0.0, "drift": []}
    if task == "softmax":   # the synthetic SEA stream is scalar-output; K classes come from River's RandomRBF
        source = {"kind": "river_synth", "name": "RandomRBF", "clients": M,
                  "params": {"n_classes": K, "n_features": d, "n_centroids": 50}}
        steps = min(steps, SOFTMAX_MAX_STEPS)
    raw = {"name": "bench", "seed": 0, "steps": steps, "source": source,
           "learner": {"tau": tau, "step_size": {"kind": "constant", "eta": eta}},
           "baselines": list(baselines), "chunk_size": chunk_size,
           "output": {"dir": out_dir, "plots": False}}
    if tracker:
        raw["tracker"] = dict(tracker)
    return ExperimentConfig.model_validate(raw)


def summarise(values: list[float]) -> dict:
    """Median and spread of repeated measurements."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values),
            "all": list(values)}


def fmt_rate(s: dict | None) -> str:
    if not s:
        return "—"
    return f"{s['median']:,.0f} [{s['min']:,.0f}–{s['max']:,.0f}]"


def peak_rss_mb() -> float:
    """This process's peak resident set size, MB (Linux reports ru_maxrss in KB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ------------------------------------------------------------------ learning loop

def materialise(stream, n_steps: int, chunk_size: int = 256) -> list:
    """The stream's first ``n_steps`` steps as (X, y, mask) per step (generation untimed)."""
    out = []
    for chunk in stream.chunks(max(1, min(chunk_size, n_steps))):
        for i in range(chunk.n_steps):
            out.append((chunk.X[i], chunk.y[i], None if chunk.mask is None else chunk.mask[i]))
            if len(out) >= n_steps:
                return out
    return out


def loop_seconds(learners: dict, steps: list, n_steps: int, t0: int = 0) -> float:
    """Seconds for ``n_steps`` steps of every learner, cycling over ``steps``; as run_stream steps them."""
    k = len(steps)
    cpu = time.process_time()
    start = time.perf_counter()
    with np.errstate(over="ignore", invalid="ignore"):
        for i in range(n_steps):
            X, y, mask = steps[i % k]
            t = t0 + i + 1
            for learner in learners.values():
                learner.step(X, y, t, mask)
    LAST_CPU[0] = time.process_time() - cpu
    return time.perf_counter() - start


LAST_CPU = [math.nan]      # CPU seconds of the last loop_seconds / whole_run call


def calibrated(fn, min_seconds: float, probe: int, cap: int) -> tuple[int, float]:
    """A step count n whose run ``fn(n)`` (→ seconds) lasts ≥ min_seconds (≥ probe, ≤ cap), and that run's seconds."""
    n = probe
    while True:
        sec = fn(n)
        if sec >= min_seconds or n >= cap:
            return n, sec
        n = min(cap, max(n * 2, int(math.ceil(n * 1.3 * min_seconds / max(sec, 1e-6)))))


def measure_loop(make_learners, stream, M: int, min_seconds: float, repeats: int, cap: int = 10 ** 7,
                 materialise_mb: float = 200.0) -> dict:
    """client-samples/s of the learning loop: median over ``repeats`` of ≥ min_seconds each."""
    X0 = next(iter(stream.chunks(1))).X
    per_step = max(X0.nbytes, 1)
    steps = materialise(stream, max(1, min(stream.n_steps, int(materialise_mb * 2 ** 20 / per_step))))
    loop_seconds(make_learners(), steps, 2)          # warm-up, untimed: compiled kernels loaded from numba's cache
    n, sec = calibrated(lambda n: loop_seconds(make_learners(), steps, n), min_seconds, 8, cap)
    rates, cpu_rates = [n * M / sec], [n * M / LAST_CPU[0]]
    for _ in range(repeats - 1):
        rates.append(n * M / loop_seconds(make_learners(), steps, n))
        cpu_rates.append(n * M / LAST_CPU[0])
    return {"steps": n, "materialised_steps": len(steps), **summarise(rates), "cpu": summarise(cpu_rates)}


# ------------------------------------------------------------------- whole run

def whole_run(cfg, run_dir: Path) -> tuple[float, dict]:
    """Wall seconds of ``run_experiment(cfg)`` (plots off) and its summary."""
    from streamfl.runtime.experiment import run_experiment

    cpu = time.process_time()
    start = time.perf_counter()
    summary = run_experiment(cfg, run_dir, plots=False)
    LAST_CPU[0] = time.process_time() - cpu
    return time.perf_counter() - start, summary


def measure_whole(cfg_for, M: int, tmp: Path, min_seconds: float, repeats: int, cap: int, probe: int = 16) -> dict:
    """client-samples/s of the whole run, calibrated so one run lasts ≥ min_seconds and has ≥ probe steps.

    A whole run has fixed costs (imports excluded: start-up is measured on its
    own; ``finalize``'s end-of-run solves, files); ``probe`` (``--whole-min-steps``)
    keeps short runs from being dominated by them.
    """
    counter = [0]

    def one(n):
        counter[0] += 1
        sec, summary = whole_run(cfg_for(n), tmp / f"run{counter[0]}")
        one.last = summary
        return sec

    one(2)                                           # warm-up, untimed: lazy imports and compiled kernels loaded
    n, sec = calibrated(one, min_seconds, probe, cap)
    walls, streams, cpus = [n * M / sec], [n * M / one.last["elapsed_seconds"]], [n * M / LAST_CPU[0]]
    for _ in range(repeats - 1):
        sec = one(n)
        walls.append(n * M / sec)
        streams.append(n * M / one.last["elapsed_seconds"])
        cpus.append(n * M / LAST_CPU[0])
    return {"steps": n, "wall": summarise(walls), "streaming": summarise(streams), "cpu": summarise(cpus)}


# --------------------------------------------------------- tracker parts (shares)

# which comparator a timed function works for (its innermost listed caller decides; anything under
# finalize counts as the end of the run)
COMPARATOR_GROUPS = {
    "ReservoirHindsight.update": "static comparator, live (reservoir refits / LS sums and solves, spool)",
    "LeastSquaresHindsight.update": "static comparator, live (reservoir refits / LS sums and solves, spool)",
    "RegretTracker._spool": "static comparator, live (reservoir refits / LS sums and solves, spool)",
    "RegretTracker._population_terms": "expected + dynamic (population F, optimum sums, u_t)",
    "RegretTracker._dirac_terms": "expected + dynamic (population F, optimum sums, u_t)",
    "heterogeneity.population_estimates": "heterogeneity sigma2, zeta2, K2 (+ curvature)",
    "heterogeneity.empirical_estimates": "heterogeneity sigma2, zeta2, K2 (+ curvature)",
    "LogisticPopulation.curvature": "heterogeneity sigma2, zeta2, K2 (+ curvature)",
    "LeastSquaresPopulation.curvature": "heterogeneity sigma2, zeta2, K2 (+ curvature)",
    "sink.csv_block": "metrics rows and file",
    "sink.table_csv": "metrics rows and file",
    "rows.deliver": "metrics rows and file",
    "Rows.add": "metrics rows and file",
    "Rows.add_columns": "metrics rows and file",
    "Rows.add_group": "metrics rows and file",
    "Rows.table": "metrics rows and file",
    "Rows.frame": "metrics rows and file",
    "Rows.last": "metrics rows and file",
    "RegretTracker._client_names": "metrics rows and file",
    "RegretTracker._finalize": "end of run: exact static/expected solves (finalize)",
}


def instrument_tracker(clock=time.perf_counter):
    """Wrap every plain Python function/method of the regret package with an exclusive timer.

    ``clock``: wall time by default; ``time.process_time`` for CPU seconds.

    Returns (totals dict name -> [exclusive seconds, calls], undo callable).
    Functions are replaced wherever a module binds them (``from x import f``
    too); compiled (numba) functions are left alone (they are timed inside
    their callers).
    """
    import functools
    import importlib
    import inspect
    import pkgutil
    import types

    import streamfl.regret as pkg

    mods = [importlib.import_module(f"streamfl.regret.{m.name}") for m in pkgutil.iter_modules(pkg.__path__)]
    for extra in ("streamfl.generators.population", "streamfl.runtime.sink"):
        try:
            mods.append(importlib.import_module(extra))
        except ImportError:  # pragma: no cover
            pass
    totals: dict = {}
    stack: list = []
    names: list = []
    groups = totals.setdefault("__groups__", {})

    def group_of() -> str:
        if "RegretTracker._finalize" in names:
            return COMPARATOR_GROUPS["RegretTracker._finalize"]
        for nm in reversed(names):
            if nm in COMPARATOR_GROUPS:
                return COMPARATOR_GROUPS[nm]
        return "other bookkeeping (losses, consensus, regime, state)"

    def wrap(name, fn):
        @functools.wraps(fn)
        def timed(*a, **k):
            stack.append(0.0)
            names.append(name)
            start = clock()
            try:
                return fn(*a, **k)
            finally:
                sec = clock() - start
                child = stack.pop()
                rec = totals.setdefault(name, [0.0, 0])
                rec[0] += sec - child
                rec[1] += 1
                g = group_of()
                groups[g] = groups.get(g, 0.0) + sec - child
                names.pop()
                if stack:
                    stack[-1] += sec
        return timed

    originals, undo = {}, []
    for mod in mods:
        for attr, obj in list(vars(mod).items()):
            if isinstance(obj, types.FunctionType) and obj.__module__ == mod.__name__:
                originals[obj] = wrap(f"{mod.__name__.split('.')[-1]}.{attr}", obj)
            elif inspect.isclass(obj) and obj.__module__ == mod.__name__:
                for mattr, m in list(vars(obj).items()):
                    if isinstance(m, types.FunctionType) and not mattr.startswith("__"):
                        w = wrap(f"{obj.__name__}.{mattr}", m)
                        setattr(obj, mattr, w)
                        undo.append((obj, mattr, m))
    for mod in list(sys.modules.values()):
        if mod is None or not getattr(mod, "__name__", "").startswith("streamfl"):
            continue
        for attr, obj in list(vars(mod).items()):
            if isinstance(obj, types.FunctionType) and obj in originals:
                setattr(mod, attr, originals[obj])
                undo.append((mod, attr, obj))

    def restore():
        for owner, attr, obj in undo:
            setattr(owner, attr, obj)
    return totals, restore


def measure_parts(cfg, run_dir: Path, learning_rate: float, M: int) -> dict:
    """One instrumented whole run: exclusive seconds per tracker function, plus the learning share."""
    totals, restore = instrument_tracker()
    try:
        wall, summary = whole_run(cfg, run_dir)
    finally:
        restore()
    n = summary["n_steps"]
    groups = totals.pop("__groups__", {})
    parts = sorted(((k, v[0], v[1]) for k, v in totals.items()), key=lambda r: -r[1])
    return {"steps": n, "wall": wall, "learning_estimate": n * M / learning_rate,
            "parts": [{"name": k, "seconds": s, "calls": c} for k, s, c in parts],
            "comparators": dict(sorted(groups.items(), key=lambda kv: -kv[1]))}


# ------------------------------------------------------------ one configuration

def child_config(spec: dict) -> dict:
    """Everything measured for one configuration (runs in its own process)."""
    from streamfl.generators.build import build_stream
    from streamfl.runtime.experiment import build_learners

    task, M, d, K, eta = spec["task"], spec["M"], spec["d"], spec["K"], spec["eta"]
    min_s, reps, cap = spec["min_seconds"], spec["repeats"], spec["cap"]
    tmp = Path(tempfile.mkdtemp(prefix="streamfl-bench-"))
    out: dict = {"name": spec["name"]}
    def memory_run():
        sec, summary = whole_run(make_config(task, M, d, K, eta, spec["memory_steps"], out_dir=str(tmp)), tmp / "mem")
        out["memory_run"] = {"steps": spec["memory_steps"], "seconds": sec, "cpu_seconds": LAST_CPU[0],
                             "client_samples_per_s": spec["memory_steps"] * M / sec,
                             "client_samples_per_cpu_s": spec["memory_steps"] * M / LAST_CPU[0],
                             "finalize_note": "wall and CPU include finalize",
                             "peak_rss_mb_so_far": peak_rss_mb()}

    if spec.get("memory_steps") and spec.get("memory_first"):
        memory_run()                      # first: its peak RSS is the whole run's alone
    big = make_config(task, M, d, K, eta, min(cap, 100_000), out_dir=str(tmp))
    stream = build_stream(big)
    if spec.get("loop", True):
        out["loop"] = measure_loop(lambda: build_learners(big, stream), stream, M, min_s, reps, cap)
    if spec.get("whole", True):
        out["whole"] = measure_whole(lambda n: make_config(task, M, d, K, eta, n, out_dir=str(tmp)),
                                     M, tmp, min_s, reps, cap, spec.get("whole_min_steps", 16))
        if "loop" in out:
            out["ratio"] = out["whole"]["wall"]["median"] / out["loop"]["median"]
            out["ratio_streaming"] = out["whole"]["streaming"]["median"] / out["loop"]["median"]
            out["ratio_cpu"] = out["whole"]["cpu"]["median"] / out["loop"]["cpu"]["median"]
    if spec.get("parts", False) and "loop" in out:
        out["parts"] = measure_parts(make_config(task, M, d, K, eta, out["whole"]["steps"], out_dir=str(tmp)),
                                     tmp / "parts", out["loop"]["median"], M)
    if spec.get("memory_steps") and not spec.get("memory_first"):
        memory_run()
    out["peak_rss_mb"] = peak_rss_mb()
    out["load_avg"] = os.getloadavg()
    shutil.rmtree(tmp, ignore_errors=True)          # the run folders were only for timing
    return out


def run_child(spec: dict, cap_gb: float | None = None, timeout: float | None = None) -> dict:
    """Run :func:`child_config` in a fresh interpreter; its JSON is the last stdout line."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)]
    if cap_gb:
        cmd += ["--memory-cap-gb", str(cap_gb)]
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"name": spec["name"], "error": f"timed out after {timeout:.0f} s"}
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"name": spec["name"], "error": last[:200]}
    return json.loads(lines[-1])


# -------------------------------------------------------------------------- torch

def reference_fedsea(X: np.ndarray, y: np.ndarray, tau: int, eta: float) -> np.ndarray:
    """FedSEA on a logistic stream, written plainly, one client and sample at a time.

    Parameters
    ----------
    X : ndarray (T, M, b, d); y : ndarray (T, M, b), labels in {0, 1}
    tau : int — averaging period τ (after t = τ, 2τ, …). eta : float — constant η.

    Returns
    -------
    ndarray (T, M): every client's test loss log(1 + e^z) − y z before its update
    (mean over its mini-batch).
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
                losses[i, m] += (np.logaddexp(0.0, z) - label * z) / b
                grad += (1.0 / (1.0 + math.exp(-z)) - label) * a / b
            w[m] -= eta * grad
        if (i + 1) % tau == 0:
            w[:] = w.mean(axis=0)
    return losses


def torch_batched(X: np.ndarray, y: np.ndarray, tau: int, eta: float, autograd: bool = True,
                  n_steps: int | None = None) -> tuple[np.ndarray, float]:
    """FedSEA (logistic) in plain torch, all clients at once; the fair torch implementation.

    Weights W (M, d) float64 stacked; step t: scores z = (X_t · W) per client
    and sample (one batched product, ``einsum('mbd,md->mb')``), losses
    softplus(z) − y z, mini-batch means; the gradient of every client from
    one ``backward`` of the sum of the clients' mean losses (``autograd=True``)
    or analytically (σ(z) − y)·a; W ← W − η ∇; every τ steps W ← mean(W).
    No Python loop over clients.

    Parameters
    ----------
    X : (T, M, b, d); y : (T, M, b) in {0, 1}
    n_steps : steps to run, cycling over the T given (t keeps counting); T by default.

    Returns
    -------
    losses (min(T, n_steps), M) of the first pass, and the seconds of the loop.
    """
    import torch
    import torch.nn.functional as F

    T, M, b, d = X.shape
    n_steps = T if n_steps is None else n_steps
    Xt = torch.from_numpy(np.ascontiguousarray(X, dtype=np.float64))
    yt = torch.from_numpy(np.ascontiguousarray(y, dtype=np.float64))
    W = torch.zeros(M, d, dtype=torch.float64, requires_grad=autograd)
    keep = torch.empty(min(T, n_steps), M, dtype=torch.float64)
    start = time.perf_counter()
    for i in range(n_steps):
        x, label = Xt[i % T], yt[i % T]
        if autograd:
            z = torch.einsum("mbd,md->mb", x, W)
            loss = (F.softplus(z) - label * z).mean(dim=1)          # (M,)
            loss.sum().backward()
            with torch.no_grad():
                W -= eta * W.grad
                W.grad = None
                if (i + 1) % tau == 0:
                    W[:] = W.mean(dim=0)
            if i < T:
                keep[i] = loss.detach()
        else:
            with torch.no_grad():
                z = torch.einsum("mbd,md->mb", x, W)
                if i < T:
                    keep[i] = (F.softplus(z) - label * z).mean(dim=1)
                W -= (eta / b) * torch.einsum("mb,mbd->md", torch.sigmoid(z) - label, x)
                if (i + 1) % tau == 0:
                    W[:] = W.mean(dim=0)
    seconds = time.perf_counter() - start
    return keep.numpy(), seconds


def torch_per_sample(X: np.ndarray, y: np.ndarray, tau: int, eta: float) -> tuple[np.ndarray, float]:
    """The naive torch loop: one float64 ``nn.Linear`` per client, per-sample autograd SGD (b = 1)."""
    import torch
    import torch.nn.functional as F

    T, M, b, d = X.shape
    Xt, yt = torch.from_numpy(np.ascontiguousarray(X)), torch.from_numpy(np.ascontiguousarray(y))
    models = []
    for _ in range(M):
        lin = torch.nn.Linear(d, 1, bias=False, dtype=torch.float64)
        with torch.no_grad():
            lin.weight.zero_()
        models.append(lin)
    losses = np.zeros((T, M))
    start = time.perf_counter()
    for i in range(T):
        for m, lin in enumerate(models):
            z = lin(Xt[i, m, 0]).squeeze(-1)
            loss = F.binary_cross_entropy_with_logits(z, yt[i, m, 0])
            losses[i, m] = loss.item()
            loss.backward()
            with torch.no_grad():
                lin.weight -= eta * lin.weight.grad
            lin.weight.grad = None
        if (i + 1) % tau == 0:
            with torch.no_grad():
                mean = torch.stack([lin.weight for lin in models]).mean(dim=0)
                for lin in models:
                    lin.weight.copy_(mean)
    return losses, time.perf_counter() - start


def engine_losses(cfg, n_steps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The stream's first n_steps (X, y) and FedSEA's (engine) per-sample losses on them."""
    from streamfl.generators.build import build_stream
    from streamfl.runtime.experiment import build_learners

    stream = build_stream(cfg)
    steps = materialise(stream, n_steps)
    fed = build_learners(cfg, stream)["fedsea"]
    losses = np.array([fed.step(X, y, t, mask) for t, (X, y, mask) in enumerate(steps, start=1)])
    X = np.stack([s[0] for s in steps])
    y = np.stack([s[1] for s in steps])
    return X, y, losses


def child_torch(spec: dict) -> dict:
    """Torch rows on the reference shape; correctness against the engine's per-sample losses."""
    import torch

    M, d, tau, eta = spec["M"], spec["d"], 10, spec["eta"]
    min_s, reps = spec["min_seconds"], spec["repeats"]
    cfg = make_config("logistic", M, d, 1, eta, 10 ** 6)
    n_check = spec["check_steps"]
    X, y, ref = engine_losses(cfg, max(n_check, spec["torch_data_steps"]))
    out = {"torch_threads": torch.get_num_threads(), "torch": torch.__version__}
    from streamfl.generators.build import build_stream
    from streamfl.runtime.experiment import build_learners
    stream = build_stream(cfg)
    out["engine"] = measure_loop(lambda: build_learners(cfg, stream), stream, M, min_s, reps)
    for key, autograd in (("torch_batched_autograd", True), ("torch_batched_analytic", False)):
        got, _ = torch_batched(X[:n_check], y[:n_check], tau, eta, autograd)   # also the warm-up
        diff = float(np.max(np.abs(got - ref[:n_check])))
        n, sec = calibrated(lambda n: torch_batched(X, y, tau, eta, autograd, n)[1], min_s, 16, 10 ** 7)
        rates = [n * M / sec] + [n * M / torch_batched(X, y, tau, eta, autograd, n)[1] for _ in range(reps - 1)]
        out[key] = {"steps": n, "max_abs_diff_vs_engine": diff, **summarise(rates)}
    nps = spec["per_sample_steps"]
    rates, diff = [], None
    for _ in range(reps):
        got, sec = torch_per_sample(X[:nps], y[:nps], tau, eta)
        rates.append(nps * M / sec)
        diff = float(np.max(np.abs(got - ref[:nps])))
    out["torch_per_sample_loop"] = {"steps": nps, "max_abs_diff_vs_engine": diff, **summarise(rates)}
    out["peak_rss_mb"] = peak_rss_mb()
    return out


def child_refit(spec: dict) -> dict:
    """Live logistic static estimate: refit period k against CPU time and error (reference shape, one T).

    For each k, one whole run (same seed, so only the refit cadence differs):
    the CPU seconds of the process for the run, the number of refits, and the
    relative error |live − exact| / |exact| of the live static regret
    (metrics.csv) against the exact values ``finalize`` computes on the
    checkpoint grid (``static_checkpoints``), median and maximum over the
    checkpoints t ≥ 256, and at the checkpoint before T (T itself is always a
    refit step).
    """
    import pandas as pd

    task, M, d, K, eta, T = spec["task"], spec["M"], spec["d"], spec["K"], spec["eta"], spec["steps"]
    tmp = Path(tempfile.mkdtemp(prefix="streamfl-bench-refit-"))
    whole_run(make_config(task, M, d, K, eta, 32, out_dir=str(tmp)), tmp / "warm")      # untimed warm-up
    out = {"steps": T, "rows": []}
    for k in spec["periods"]:
        cfg = make_config(task, M, d, K, eta, T, out_dir=str(tmp), tracker={"refit_every": k})
        from streamfl.regret.comparators import is_refit_step
        c0 = time.process_time()
        sec, summary = whole_run(cfg, tmp / f"k{k}")
        cpu = time.process_time() - c0
        frame = pd.read_csv(tmp / f"k{k}" / "metrics.csv", usecols=["t", "regret_static"]).set_index("t")
        errs = []
        for t, exact in summary["static_checkpoints"]:
            if t >= spec.get("min_t", 256) and t < T:
                errs.append(abs(frame.loc[t, "regret_static"] - exact) / abs(exact))
        out["rows"].append({"refit_every": k, "refits": sum(is_refit_step(t, k) or t == T for t in range(1, T + 1)),
                            "cpu_seconds": cpu, "wall_seconds": sec, "streaming_seconds": summary["elapsed_seconds"],
                            "median_rel_error": float(np.median(errs)) if errs else float("nan"),
                            "max_rel_error": float(np.max(errs)) if errs else float("nan"),
                            "last_checkpoint_rel_error": float(errs[-1]) if errs else float("nan"),
                            "checkpoints": len(errs)})
        shutil.rmtree(tmp / f"k{k}", ignore_errors=True)
    shutil.rmtree(tmp, ignore_errors=True)
    out["peak_rss_mb"] = peak_rss_mb()
    return out


def child_refresh(spec: dict) -> dict:
    """Live least-squares static comparator: refresh period k against CPU time and error (one T).

    For each k, one whole run (same seed, so only the cadence of the exact
    solves differs): the CPU seconds of the process, the exact solves
    (:func:`streamfl.regret.comparators.refresh_steps` with the checkpoints
    and T), and |live − exact| / |exact| of the network's ``regret_static``
    (metrics.csv) at every step t ≥ ``min_t``, exact = the k = 1 run (exact at
    every step, listed first), median and maximum.
    """
    import pandas as pd
    from streamfl.regret.comparators import refresh_steps

    task, M, d, K, eta, T = spec["task"], spec["M"], spec["d"], spec["K"], spec["eta"], spec["steps"]
    tmp = Path(tempfile.mkdtemp(prefix="streamfl-bench-refresh-"))
    whole_run(make_config(task, M, d, K, eta, 32, out_dir=str(tmp)), tmp / "warm")      # untimed warm-up
    out = {"steps": T, "rows": []}
    exact = None
    for k in spec["periods"]:
        cfg = make_config(task, M, d, K, eta, T, out_dir=str(tmp), tracker={"refresh_every": k})
        c0 = time.process_time()
        sec, summary = whole_run(cfg, tmp / f"k{k}")
        cpu = time.process_time() - c0
        live = pd.read_csv(tmp / f"k{k}" / "metrics.csv", usecols=["t", "regret_static"]).set_index("t")
        live = live["regret_static"].to_numpy()
        if exact is None:
            exact = live
        sel = np.arange(1, T + 1) >= spec.get("min_t", 32)
        err = np.abs(live[sel] - exact[sel]) / np.abs(exact[sel])
        marks = np.unique(np.geomspace(max(1, T / 2**15), T, 16).astype(int)).tolist() + [T]
        out["rows"].append({"refresh_every": k, "solves": len(refresh_steps(0, T, k, marks)),
                            "cpu_seconds": cpu, "wall_seconds": sec, "streaming_seconds": summary["elapsed_seconds"],
                            "median_rel_error": float(np.median(err)), "max_rel_error": float(np.max(err)),
                            "steps_compared": int(sel.sum())})
        shutil.rmtree(tmp / f"k{k}", ignore_errors=True)
    shutil.rmtree(tmp, ignore_errors=True)
    out["peak_rss_mb"] = peak_rss_mb()
    return out


def child_per_sample(spec: dict) -> dict:
    """Learning-loop rates of the per-sample Python learners and the default learner set."""
    from streamfl.generators.build import build_stream
    from streamfl.runtime.experiment import build_learners

    M, d, eta = spec["M"], spec["d"], spec["eta"]
    min_s, reps = spec["min_seconds"], spec["repeats"]
    out = {}
    for key, baselines, tau, keep in (
            ("fedsea_alone_tau1", (), 1, None),
            ("centralized", ("centralized",), 1, "centralized"),
            ("river", ("river",), 1, "river"),
            ("default_set", ("tau1", "local", "centralized"), 10, None)):
        cfg = make_config("logistic", M, d, 1, eta, 10 ** 6, tau=tau, baselines=baselines)
        stream = build_stream(cfg)

        def make(cfg=cfg, stream=stream, keep=keep):
            learners = build_learners(cfg, stream)
            return {keep: learners[keep]} if keep else learners
        out[key] = measure_loop(make, stream, M, min_s, reps, 10 ** 7, materialise_mb=50)
    out["peak_rss_mb"] = peak_rss_mb()
    return out


# ------------------------------------------------------------------------ start-up

def measure_startup(repeats: int, quick: bool) -> dict:
    """Seconds from launching ``streamfl run`` to its first step (warm caches; median of repeats)."""
    exe = Path(sys.executable).with_name("streamfl")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "streamfl.cli"]
    tmp = Path(tempfile.mkdtemp(prefix="streamfl-bench-start-"))
    M, d = (8, 10) if quick else (64, 100)
    (tmp / "exp.yaml").write_text(
        f"name: start\nsteps: 1\nsource: {{kind: synthetic, task: logistic, clients: {M}, dim: {d}, "
        f"heterogeneity: 0.0, drift: []}}\nlearner: {{tau: 10}}\nbaselines: []\n"
        f"output: {{dir: {tmp / 'runs'}, plots: false}}\n")
    stamp = tmp / "stamp"
    env = {**os.environ, "STREAMFL_FIRST_STEP_STAMP": str(stamp)}
    times, cpus, totals = [], [], []
    for k in range(repeats + 1):                      # the first run warms the caches, untimed
        stamp.unlink(missing_ok=True)
        start = time.time()
        proc = subprocess.run([*cmd, "run", "-c", "exp.yaml", "--no-live", "--no-plots"], cwd=tmp,
                              capture_output=True, text=True, env=env)
        end = time.time()
        if proc.returncode != 0 or not stamp.exists():
            return {"error": (proc.stderr.strip().splitlines() or ["no first step"])[-1][:200]}
        if k:
            wall, cpu = (float(v) for v in stamp.read_text().split())
            times.append(wall - start)
            cpus.append(cpu)
            totals.append(end - start)
    shutil.rmtree(tmp, ignore_errors=True)
    return {"to_first_step": summarise(times), "cpu_to_first_step": summarise(cpus), "whole_T1_run": summarise(totals),
            "config": f"M={M} d={d} T=1", "load_avg": os.getloadavg()}


# ---------------------------------------------------------------------------- main

def table(rows: list, header: tuple) -> None:
    widths = [max(len(str(r[k])) for r in [header, *rows]) for k in range(len(header))]
    print("  ".join(str(c).ljust(w) for c, w in zip(header, widths)))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small smoke version (tiny shapes, one repeat)")
    p.add_argument("--repeats", type=int, default=None, help="repeats per figure (default 3; 1 with --quick)")
    p.add_argument("--min-seconds", type=float, default=None, help="work per timed figure (default 1; 0.05 quick)")
    p.add_argument("--memory-steps", default=None, help="T values for the memory rows (default 10000,100000)")
    p.add_argument("--clients-scale", default=None, help="M values at d=10 (default 1000,10000,100000)")
    p.add_argument("--scale-steps", type=int, default=None, help="T of the many-clients runs (default 100)")
    p.add_argument("--memory-cap-gb", type=float, default=6.0, help="address-space cap of the many-clients children")
    p.add_argument("--startup-repeats", type=int, default=None, help="start-up runs (default 5)")
    p.add_argument("--skip", default="", help="comma list of sections to skip: configs,scale,memory,torch,"
                                             "per-sample,startup,refit,refresh")
    p.add_argument("--refit-steps", type=int, default=None, help="T of the refit trade-off runs (default 8192)")
    p.add_argument("--refit-periods", default=None, help="refit periods k to compare (default 256,1024,4096)")
    p.add_argument("--refresh-steps", type=int, default=None,
                   help="T of the least-squares refresh trade-off runs (default 2048)")
    p.add_argument("--refresh-periods", default=None,
                   help="least-squares refresh periods k to compare, the first one the reference (default 1,64,256,1024)")
    p.add_argument("--whole-min-steps", type=int, default=None,
                   help="fewest steps of a timed whole run (default 512, two chunks; 16 with --quick)")
    p.add_argument("--only", default="", help="run only the configurations whose name contains this text")
    p.add_argument("--json", type=Path, default=None, help="write every figure to this JSON file")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.child is not None:                       # a measurement in its own process
        if args.memory_cap_gb and "--memory-cap-gb" in (argv or sys.argv):
            cap = int(args.memory_cap_gb * 2 ** 30)
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        spec = json.loads(args.child)
        kind = spec.get("kind", "config")
        fn = {"config": child_config, "torch": child_torch, "per_sample": child_per_sample,
              "refit": child_refit, "refresh": child_refresh}[kind]
        try:
            print(json.dumps(fn(spec)))
        except MemoryError:
            print(json.dumps({"name": spec.get("name"), "error": f"MemoryError (address space capped at "
                                                                 f"{args.memory_cap_gb:g} GB)",
                              "peak_rss_mb": peak_rss_mb()}))
        return 0

    quick = args.quick
    reps = args.repeats or (1 if quick else 3)
    min_s = args.min_seconds if args.min_seconds is not None else (0.05 if quick else 1.0)
    mem_steps = [int(x) for x in (args.memory_steps or ("300,600" if quick else "10000,100000")).split(",") if x]
    scale_M = [int(x) for x in (args.clients_scale or ("20,50" if quick else "1000,10000,100000")).split(",") if x]
    scale_T = args.scale_steps or (20 if quick else 100)
    skip = set(filter(None, args.skip.split(",")))
    cap = 600 if quick else 10 ** 6
    res: dict = {"date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "quick": quick, "repeats": reps,
                 "min_seconds": min_s, "machine": {"python": platform.python_version(), "numpy": np.__version__,
                                                   "cpus": os.cpu_count(), "load_avg": os.getloadavg()}}
    print(f"streamfl throughput ({'quick smoke run' if quick else 'full'}), {res['date_utc']} UTC, "
          f"{reps} repeat(s) of >= {min_s:g} s each; figures are client-samples/s, median [min-max]; "
          f"load average at start {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    configs = [c for c in (QUICK_CONFIGS if quick else CONFIGS) if args.only in c[0]]

    if "configs" not in skip:
        rows, parts_rows, comp_rows = [], [], []
        res["configs"] = []
        for k, (name, task, M, d, K, eta) in enumerate(configs):
            spec = {"name": name, "task": task, "M": M, "d": d, "K": K, "eta": eta, "min_seconds": min_s,
                    "repeats": reps, "cap": cap, "parts": not quick or k == 0,
                    "whole_min_steps": args.whole_min_steps or (16 if quick else 512)}
            r = run_child(spec)
            r.update({"task": task, "M": M, "d": d, "K": K, "eta": eta})
            print(f"  measured {name}: " + (r["error"] if "error" in r else
                  f"whole {r['whole']['wall']['median']:,.0f}/s, loop {r['loop']['median']:,.0f}/s, "
                  f"ratio 1/{1 / r['ratio']:,.1f} (per CPU second 1/{1 / r['ratio_cpu']:,.1f}), "
                  f"peak RSS {r['peak_rss_mb']:,.0f} MB"), flush=True)
            res["configs"].append(r)
            shape = f"{task} M={M} d={d}" + (f" K={K}" if task == "softmax" else "") + f" eta={eta:g}"
            if "error" in r:
                rows.append((shape, "error: " + r["error"], "", "", "", "", ""))
                continue
            w, lp = r["whole"], r["loop"]
            rows.append((shape, fmt_rate(w["wall"]), fmt_rate(w["streaming"]), fmt_rate(lp),
                         f"1/{1 / r['ratio']:,.1f}" + (" MET" if r["ratio"] >= TARGET_RATIO else " not met"),
                         f"{fmt_rate(w['cpu'])} / {fmt_rate(lp['cpu'])} = 1/{1 / r['ratio_cpu']:,.1f}"
                         + (" MET" if r["ratio_cpu"] >= TARGET_RATIO else " not met"),
                         f"{w['steps']:,} / {lp['steps']:,}", f"{r['peak_rss_mb']:,.0f}"))
            if "parts" not in r:
                continue
            pr = r["parts"]
            tracked = sum(x["seconds"] for x in pr["parts"])
            top = ", ".join(f"{x['name']} {x['seconds']:.2f}" for x in pr["parts"][:6])
            parts_rows.append((shape, f"{pr['wall']:.2f}", f"{pr['learning_estimate']:.3f}", f"{tracked:.2f}", top))
            comp_rows.extend((shape, g, f"{sec:.3f}", f"{sec / max(pr['wall'], 1e-9):.0%}")
                             for g, sec in pr.get("comparators", {}).items())
            rest = pr["wall"] - sum(pr.get("comparators", {}).values())
            comp_rows.append((shape, "outside the tracker: stream generation, learning (est. "
                              f"{pr['learning_estimate']:.3f} s), engine, files", f"{rest:.3f}",
                              f"{rest / max(pr['wall'], 1e-9):.0%}"))
        print("\n== whole run (run_experiment: tracker on, metrics written, plots off) vs learning loop ==")
        table(rows, ("configuration (tau=10, baselines [])", "whole run (wall)", "streaming part",
                     "learning loop", "whole/loop (>=1/3?)", "per CPU second: whole / loop = ratio",
                     "steps whole/loop", "peak RSS MB"))
        print("whole run = wall time of run_experiment incl. finalize and files; streaming part = run_stream "
              "(learning + tracker.update) = summary elapsed_seconds; per CPU second = the same runs divided by "
              "the process's CPU time (less sensitive to the machine's load).")
        print("Under load the wall figures of the two can be measured at very different shares of a CPU; when "
              "the wall and CPU verdicts disagree, the CPU one is the figure to trust.")
        print("\n== where the whole run goes: one instrumented run each (exclusive seconds per tracker "
              "function; timer overhead ~1 us/call) ==")
        table(parts_rows, ("configuration", "run s", "learning s (est.)", "tracker s", "largest tracker parts (s)"))
        print("\n== the same instrumented runs, by comparator (exclusive seconds; share of the run) ==")
        table(comp_rows, ("configuration", "comparator / part", "seconds", "share of run"))

    if "scale" not in skip:
        rows = []
        res["scale"] = []
        for M in scale_M:
            spec = {"name": f"M={M}", "task": "logistic", "M": M, "d": 10, "K": 1, "eta": 0.05,
                    "min_seconds": min_s, "repeats": 1, "cap": min(cap, 10 ** 5), "whole": False,
                    "memory_steps": scale_T, "memory_first": True}
            r = run_child(spec, cap_gb=args.memory_cap_gb)
            res["scale"].append(r)
            if "error" in r:
                rows.append((f"M={M:,}", "error: " + r["error"], "", f"{r.get('peak_rss_mb', float('nan')):,.0f}"))
                continue
            mr = r["memory_run"]
            rows.append((f"M={M:,}", f"{mr['client_samples_per_s']:,.0f} ({mr['seconds']:.1f} s)",
                         f"{mr['client_samples_per_cpu_s']:,.0f} ({mr['cpu_seconds']:.1f} s)",
                         fmt_rate(r["loop"]), fmt_rate(r["loop"]["cpu"]), f"{mr['peak_rss_mb_so_far']:,.0f}",
                         f"{r['peak_rss_mb']:,.0f}",
                         f"{r.get('load_avg', [float('nan')])[0]:.1f}"))
        print(f"\n== many clients: logistic d=10, FedSEA only, whole run of T={scale_T} (address space capped at "
              f"{args.memory_cap_gb:g} GB) ==")
        table(rows, ("clients", "whole run, wall (s)", "whole run per CPU s (CPU s)", "learning loop, wall",
                     "learning loop per CPU s", "peak RSS MB, whole run", "peak RSS MB, + loop", "load"))

    if "memory" not in skip:
        rows = []
        res["memory"] = []
        name, task, M, d, K, eta = (QUICK_CONFIGS if quick else CONFIGS)[0]
        for T in mem_steps:
            spec = {"name": f"T={T}", "task": task, "M": M, "d": d, "K": K, "eta": eta, "min_seconds": min_s,
                    "repeats": 1, "cap": cap, "loop": False, "whole": False, "memory_steps": T}
            r = run_child(spec)
            res["memory"].append(r)
            rows.append((f"T={T:,}", "error: " + r["error"]) if "error" in r else
                        (f"T={T:,}", f"{r['peak_rss_mb']:,.0f}",
                         f"{r['memory_run']['seconds']:.1f} s ({r['memory_run']['client_samples_per_s']:,.0f}/s)",
                         f"{r['memory_run']['cpu_seconds']:.1f} s ({r['memory_run']['client_samples_per_cpu_s']:,.0f}/s)"))
        print(f"\n== memory against T: whole run, {task} M={M} d={d} ==")
        table(rows, ("steps", "peak RSS MB", "run time, wall (rate)", "CPU time (rate per CPU s)"))

    if "torch" not in skip:
        name, task, M, d, K, eta = (QUICK_CONFIGS if quick else CONFIGS)[0]
        spec = {"kind": "torch", "name": "torch", "M": M, "d": d, "eta": eta, "min_seconds": min_s,
                "repeats": reps, "check_steps": 50 if quick else 200, "torch_data_steps": 100 if quick else 1000,
                "per_sample_steps": 20 if quick else 150}
        r = run_child(spec)
        res["torch"] = r
        print(f"\n== FedSEA in plain torch, {task} M={M} d={d} tau=10 (learning loop only; "
              f"compare with the learning loop above) ==")
        if "error" in r:
            print("error: " + r["error"])
        else:
            rows = [("streamfl learning loop (same process, for the ratio)", fmt_rate(r["engine"]), "-",
                     f"{r['engine']['steps']:,}")]
            for key, label in (("torch_batched_autograd", "torch, all clients batched, autograd (fair row)"),
                               ("torch_batched_analytic", "torch, all clients batched, analytic gradient"),
                               ("torch_per_sample_loop", "torch, per-client per-sample autograd loop")):
                x = r[key]
                ok = x["max_abs_diff_vs_engine"] <= ENGINE_TOL
                rows.append((label, fmt_rate(x), f"{x['max_abs_diff_vs_engine']:.1e}" + (" OK" if ok else " FAILED"),
                             f"{x['steps']:,}"))
            table(rows, ("implementation", "client-samples/s", "max |loss - engine|", "steps"))
            print(f"torch {r['torch']}, {r['torch_threads']} threads")

    if "per-sample" not in skip:
        name, task, M, d, K, eta = (QUICK_CONFIGS if quick else CONFIGS)[0]
        spec = {"kind": "per_sample", "name": "per-sample", "M": M, "d": d, "eta": eta, "min_seconds": min_s,
                "repeats": reps}
        r = run_child(spec)
        res["per_sample"] = r
        print(f"\n== per-sample Python learners (learning loops, logistic M={M} d={d}): a run that includes "
              f"them is bound by them ==")
        if "error" in r:
            print("error: " + r["error"])
        else:
            table([("FedSEA alone, tau=1", fmt_rate(r["fedsea_alone_tau1"])),
                   ("centralized (compiled sequential loop)", fmt_rate(r["centralized"])),
                   ("river (one River LogisticRegression per client; library reference)", fmt_rate(r["river"])),
                   ("default set: FedSEA tau=10 + tau1 + local + centralized", fmt_rate(r["default_set"]))],
                  ("learner", "client-samples/s (of the stream)"))

    if "refit" not in skip:
        name, task, M, d, K, eta = (QUICK_CONFIGS if quick else CONFIGS)[0]
        periods = [int(x) for x in (args.refit_periods or ("16,64" if quick else "256,1024,4096")).split(",") if x]
        T = args.refit_steps or (300 if quick else 8192)
        r = run_child({"kind": "refit", "name": "refit", "task": task, "M": M, "d": d, "K": K, "eta": eta,
                       "steps": T, "periods": periods, "min_t": 32 if quick else 256})
        res["refit"] = r
        print(f"\n== live static estimate (logistic reservoir): refit period vs CPU and error, {task} M={M} d={d} "
              f"T={T:,} (one run each, same seed) ==")
        if "error" in r:
            print("error: " + r["error"])
        else:
            table([(f"{x['refit_every']:,}", f"{x['refits']}", f"{x['cpu_seconds']:.2f}", f"{x['streaming_seconds']:.2f}",
                    f"{x['median_rel_error']:.2e}", f"{x['max_rel_error']:.2e}", f"{x['last_checkpoint_rel_error']:.2e}")
                   for x in r["rows"]],
                  ("refit every k steps", "refits", "whole run CPU s", "streaming wall s",
                   "median rel. error", "max rel. error", "rel. error, last checkpoint < T"))
            print(f"error = |live - exact| / |exact| of the static regret at the checkpoints t >= {32 if quick else 256} "
                  f"({r['rows'][0]['checkpoints']} of them; exact = finalize's solve over the recorded stream)")

    if "refresh" not in skip:
        name, task, M, d, K, eta = (QUICK_CONFIGS if quick else CONFIGS)[1]
        periods = [int(x) for x in (args.refresh_periods or ("1,16,64" if quick else "1,64,256,1024")).split(",") if x]
        T = args.refresh_steps or (200 if quick else 2048)
        r = run_child({"kind": "refresh", "name": "refresh", "task": task, "M": M, "d": d, "K": K, "eta": eta,
                       "steps": T, "periods": periods, "min_t": 32})
        res["refresh"] = r
        print(f"\n== live static comparator (least squares): refresh period vs CPU and error, {task} M={M} d={d} "
              f"eta={eta:g} T={T:,} (one run each, same seed) ==")
        if "error" in r:
            print("error: " + r["error"])
        else:
            table([(f"{x['refresh_every']:,}", f"{x['solves']}", f"{x['cpu_seconds']:.2f}",
                    f"{x['streaming_seconds']:.2f}", f"{x['median_rel_error']:.2e}", f"{x['max_rel_error']:.2e}")
                   for x in r["rows"]],
                  ("refresh every k steps", "exact solves", "whole run CPU s", "streaming wall s",
                   "median rel. error", "max rel. error"))
            print(f"error = |live - exact| / |exact| of the static regret at every step t >= 32 "
                  f"({r['rows'][0]['steps_compared']} steps; exact = the k = {periods[0]} run)")

    if "startup" not in skip:
        r = measure_startup(args.startup_repeats or (2 if quick else 5), quick)
        res["startup"] = r
        print("\n== start-up: `streamfl run` (warm caches) to its first step ==")
        if "error" in r:
            print("error: " + r["error"])
        else:
            s, c, w = r["to_first_step"], r["cpu_to_first_step"], r["whole_T1_run"]
            table([(r["config"], f"{s['median']:.2f} [{s['min']:.2f}-{s['max']:.2f}]",
                    f"{c['median']:.2f} [{c['min']:.2f}-{c['max']:.2f}]",
                    f"{w['median']:.2f} [{w['min']:.2f}-{w['max']:.2f}]", "MET" if s["median"] < 1.5 else "not met")],
                  ("run", "to first step (wall), s", "CPU time to first step, s", "whole T=1 run, s", "< 1.5 s?"))
            print(f"(wall time depends on the machine's load: load average {r['load_avg'][0]:.1f} on "
                  f"{os.cpu_count()} CPUs; the CPU time of the process does much less)")

    if args.json is not None:
        args.json.write_text(json.dumps(res, indent=2, default=float))
        print(f"\nfigures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
