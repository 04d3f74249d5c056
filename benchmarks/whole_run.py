"""The whole ``streamfl run`` against the scripts an expert would write instead, side by side, in CPU seconds.

Usage::

    nice -n 5 python benchmarks/whole_run.py [--configs logistic-4000,ls-16000] [--repeats 3]
    nice -n 5 python benchmarks/whole_run.py --parts [--configs logistic-4000]

The experiment (issue 21, "Targets"): a synthetic stream (stochastic
adversary, ζ = heterogeneity 0, no drift), M = 64 clients, d = 100, b = 1,
FedSEA τ = 10, constant η = 0.05 (logistic) or 0.005 (least squares),
``baselines: []``, no plots; at T = 4,000 and 16,000, and at M = 2,048,
T = 500 (``--configs`` keys ``logistic-4000``, ``logistic-16000``, ``ls-4000``,
``ls-16000``, ``logistic-m2048``, ``ls-m2048``). For each configuration and each of
``--repeats`` interleaved repeats, every program runs as a whole process and
is charged its CPU seconds (user + system, ``getrusage(RUSAGE_CHILDREN)``
deltas) and its wall seconds:

* ``streamfl``: ``python -m streamfl.cli run --config cfg.yaml --no-live
  --no-plots`` from a temporary folder (the streamfl of this repository,
  its defaults for everything the config does not set);
* the anchors in ``benchmarks/anchors/`` on the same experiment (their
  streams are streamfl's draws, so their regrets must equal streamfl's):
  ``numpy_final`` (final static regret only), ``numpy_figures`` (the same
  final figures: static regret at the 16 checkpoints, per-client static
  regrets, per-step metrics file), ``torch_final`` and ``river_final``
  (final static regret). Each anchor runs with the default threads and
  with ``OPENBLAS_NUM_THREADS = OMP_NUM_THREADS = MKL_NUM_THREADS = 1``;
  its figure is the lower of the two medians (the table says which).

It prints one table (medians): streamfl's CPU, each anchor's CPU, the two
target ratios (streamfl / same-figures anchor, target ≤ 1; streamfl /
final-only anchor, target ≤ 1.5); then the wall times, the peak RSS, and the
largest relative difference between each anchor's regrets and streamfl's
summary.json (final static regret; for ``numpy_figures`` also the
checkpoints and the per-client regrets). Date, load average and the command
come first.

``--parts`` instead runs streamfl in-process with every part timed
(``time.process_time``, exclusive): stream generation, learning (the
learners' ``step``), each live comparator (``throughput.instrument_tracker``'s
grouping of the regret package), the end of run (``finalize``), the metrics
output, the rest (engine loop, run folder, summary.json) and, apart, the
process start-up (imports and compiled-kernel caches, measured as a 4-step
run with M = 4, d = 10 before the timed one). Then the growth of each part: CPU at
T = ``--grid-steps`` (M = 64, d = 100), at M = ``--grid-clients`` and at
d = ``--grid-dims`` (T = ``--grid-base-steps``), each in its own process,
and the exponent k of CPU ∝ x^k fitted by least squares on the logarithms.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from throughput import instrument_tracker, table  # noqa: E402

ETA = {"logistic": 0.05, "least_squares": 0.005}
CONFIGS = {                                       # key: (task, T, M, d)
    "logistic-4000": ("logistic", 4000, 64, 100),
    "logistic-16000": ("logistic", 16000, 64, 100),
    "ls-4000": ("least_squares", 4000, 64, 100),
    "ls-16000": ("least_squares", 16000, 64, 100),
    "logistic-m2048": ("logistic", 500, 2048, 100),
    "ls-m2048": ("least_squares", 500, 2048, 100),
}
ANCHORS = ("numpy_final", "numpy_figures", "torch_final", "river_final")
ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
THREADS = {"default": {}, "one": ONE_THREAD}


def config_dict(task: str, T: int, M: int, d: int, out_dir: str = "runs") -> dict:
    """The benchmark's experiment as a streamfl config (only what it sets; streamfl's defaults for the rest)."""
    return {"name": "bench", "seed": 0, "steps": T,
            "source": {"kind": "synthetic", "task": task, "clients": M, "dim": d, "heterogeneity": 0.0,
                       "drift": [], "adversary": "stochastic"},
            "learner": {"tau": 10, "batch_size": 1, "step_size": {"kind": "constant", "eta": ETA[task]}},
            "baselines": [], "output": {"dir": out_dir, "plots": False}}


def command(program: str, task: str, T: int, M: int, d: int, folder: Path) -> list[str]:
    """The command line of one program on one configuration, run from ``folder``."""
    if program == "streamfl":
        path = folder / "cfg.yaml"
        path.write_text(json.dumps(config_dict(task, T, M, d)))       # JSON is YAML
        return [sys.executable, "-m", "streamfl.cli", "run", "--config", str(path), "--out", str(folder / "run"),
                "--no-live", "--no-plots"]
    return [sys.executable, str(HERE / "anchors" / f"{program}.py"), "--task", task, "--steps", str(T),
            "--clients", str(M), "--dim", str(d), "--eta", str(ETA[task]), "--tau", "10", "--seed", "0",
            "--out", str(folder)]


def run_once(program: str, threads: str, task: str, T: int, M: int, d: int) -> dict:
    """One whole process: CPU (user + system) and wall seconds, peak RSS, and the figures it printed/wrote."""
    folder = Path(tempfile.mkdtemp(prefix="streamfl-whole-"))
    try:
        cmd = command(program, task, T, M, d, folder)
        env = {**os.environ, **THREADS[threads]}
        env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        with open(folder / "stdout", "wb") as out, open(folder / "stderr", "wb") as err:
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            proc = subprocess.Popen(cmd, cwd=folder, env=env, stdout=out, stderr=err)
            _, status, usage = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - start
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            tail = (folder / "stderr").read_text(errors="replace").strip().splitlines()[-3:]
            raise RuntimeError(f"{program} {task} T={T} M={M} failed ({proc.returncode}): " + " | ".join(tail))
        if program == "streamfl":
            s = json.loads((folder / "run" / "summary.json").read_text())
            figures = {"regret_static": s["regret_static"],
                       "static_checkpoints": [v for _, v in s["static_checkpoints"]],
                       "client_regret_static": (s.get("client_regret") or {}).get("static")}
        else:
            figures = json.loads((folder / "stdout").read_text().strip().splitlines()[-1])
            figures["static_checkpoints"] = [v for _, v in figures.get("static_checkpoints", [])] or None
        cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        return {"cpu": cpu, "wall": wall, "rss_mb": usage.ru_maxrss / 1024, "figures": figures,
                "load1": os.getloadavg()[0]}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def rel_diff(a, b) -> float | None:
    """Largest |a − b| / |b| over paired values (None when either side lacks them)."""
    if a is None or b is None:
        return None
    a, b = np.atleast_1d(np.asarray(a, float)), np.atleast_1d(np.asarray(b, float))
    if a.shape != b.shape:
        return float("nan")
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-300)))


def fmt(x, digits: int = 2) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def measure(keys: list[str], programs: list[str], threads: list[str], repeats: int) -> dict:
    """Interleaved repeats of every (configuration, program, threads); every run's record."""
    runs = {}
    jobs = [(k, p, th) for k in keys for p in programs for th in (["default"] if p == "streamfl" else threads)]
    for task in sorted({CONFIGS[k][0] for k in keys}):   # warm-up, untimed: byte-code, numba caches, page cache
        for p in programs:
            run_once(p, "default", task, 20, 4, 10)
    for rep in range(repeats):
        for k, p, th in jobs:
            task, T, M, d = CONFIGS[k]
            r = run_once(p, th, task, T, M, d)
            runs.setdefault((k, p, th), []).append(r)
            print(f"  [{rep + 1}/{repeats}] {k:15s} {p:14s} threads={th:7s} CPU {r['cpu']:7.2f} s  wall "
                  f"{r['wall']:7.2f} s  RSS {r['rss_mb']:6.0f} MB  load {r['load1']:.1f}", flush=True)
    return runs


def report(runs: dict, keys: list[str], programs: list[str], threads: list[str]) -> dict:
    """Print the tables; return the medians."""
    med = {}
    for (k, p, th), rs in runs.items():
        med[(k, p, th)] = {f: statistics.median(r[f] for r in rs) for f in ("cpu", "wall", "rss_mb")}
        med[(k, p, th)]["n"] = len(rs)
    best = {}
    for k in keys:
        for p in programs:
            options = [(med[(k, p, th)]["cpu"], th) for th in (["default"] if p == "streamfl" else threads)
                       if (k, p, th) in med]
            if options:
                cpu, th = min(options)
                best[(k, p)] = {**med[(k, p, th)], "threads": th}
    anchors = [p for p in programs if p != "streamfl"]
    rows = []
    for k in keys:
        task, T, M, d = CONFIGS[k]
        s = best.get((k, "streamfl"))
        row = [f"{task} T={T:,} M={M:,} d={d}", fmt(s and s["cpu"])]
        for p in anchors:
            a = best.get((k, p))
            row.append("–" if a is None else f"{a['cpu']:.2f} ({'1 thr' if a['threads'] == 'one' else 'default'})")
        for p, target in (("numpy_figures", 1.0), ("numpy_final", 1.5)):
            a = best.get((k, p))
            if s and a:
                ratio = s["cpu"] / a["cpu"]
                row.append(f"{ratio:.2f} ({'met' if ratio <= target else 'not met'})")
            else:
                row.append("–")
        rows.append(row)
    print("\n== CPU seconds (user + system) of the whole process, median; anchors: the lower of default threads "
          "and one BLAS/OpenMP thread ==")
    table(rows, ("configuration", "streamfl", *anchors, "streamfl / same-figures (<= 1)",
                 "streamfl / final-only (<= 1.5)"))

    rows = []
    for k in keys:
        task, T, M, d = CONFIGS[k]
        s_runs = runs.get((k, "streamfl", "default"), [])
        ref = s_runs[0]["figures"] if s_runs else None
        row = [f"{task} T={T:,} M={M:,}"]
        for p in programs:
            b = best.get((k, p))
            row.append("–" if b is None else f"{b['wall']:.2f} / {b['rss_mb']:,.0f}")
        agree = []
        for p in anchors:
            th = best.get((k, p), {}).get("threads")
            if ref is None or th is None:
                continue
            fig = runs[(k, p, th)][0]["figures"]
            parts = [f"{rel_diff(fig['regret_static'], ref['regret_static']):.1e}"]
            if fig.get("client_regret_static") is not None:
                parts.append(f"ckpt {rel_diff(fig['static_checkpoints'], ref['static_checkpoints']):.1e}")
                parts.append(f"clients {rel_diff(fig['client_regret_static'], ref['client_regret_static']):.1e}")
            agree.append(f"{p.split('_')[0]}{'' if p != 'numpy_figures' else '*'} " + ", ".join(parts))
        row.append("; ".join(agree))
        rows.append(row)
    print("\n== wall seconds / peak RSS MB (same runs as above), and agreement with streamfl's summary.json ==")
    table(rows, ("configuration", *programs, "max relative difference of regret_static vs streamfl "
                                                "(* numpy_figures: also checkpoints, per-client)"))

    rows = []
    for k in keys:
        for p in anchors:
            cells = [fmt(med[(k, p, th)]["cpu"]) if (k, p, th) in med else "–" for th in threads]
            rows.append([k, p, *cells])
    print("\n== anchors' CPU seconds by thread setting (median) ==")
    table(rows, ("configuration", "anchor", *[f"threads={th}" for th in threads]))
    return {f"{k}|{p}": v for (k, p), v in best.items()}


# --------------------------------------------------------------------------------------------- parts

def child_parts(spec: dict) -> dict:
    """One in-process streamfl run, every part timed (CPU seconds, exclusive); runs in its own process."""
    start = time.process_time()
    from streamfl.config import ExperimentConfig
    from streamfl.generators.build import build_stream
    from streamfl.runtime import learners as L
    from streamfl.runtime.experiment import run_experiment

    task, T, M, d = spec["task"], spec["T"], spec["M"], spec["d"]
    tmp = Path(tempfile.mkdtemp(prefix="streamfl-parts-"))
    clock = time.process_time
    try:
        warm = ExperimentConfig.model_validate(config_dict(task, 4, 4, 10, str(tmp)))     # imports, caches
        run_experiment(warm, tmp / "warm", plots=False)
        startup = clock() - start
        cfg = ExperimentConfig.model_validate(config_dict(task, T, M, d, str(tmp)))
        own = {"stream generation": 0.0, "learning (learners' step)": 0.0}
        stream_cls = type(build_stream(cfg))
        chunks = stream_cls.chunks

        def timed_chunks(self, *a, **k):
            it = chunks(self, *a, **k)
            while True:
                c = clock()
                try:
                    item = next(it)
                except StopIteration:
                    own["stream generation"] += clock() - c
                    return
                own["stream generation"] += clock() - c
                yield item

        undo = [(stream_cls, "chunks", chunks)]
        stream_cls.chunks = timed_chunks
        for cls in [c for c in vars(L).values() if isinstance(c, type) and c.__module__ == L.__name__]:
            if "step" in vars(cls):
                step = vars(cls)["step"]

                def timed_step(self, *a, _step=step, **k):
                    c = clock()
                    try:
                        return _step(self, *a, **k)
                    finally:
                        own["learning (learners' step)"] += clock() - c
                undo.append((cls, "step", step))
                cls.step = timed_step
        totals, restore = instrument_tracker(clock)
        c = clock()
        try:
            run_experiment(cfg, tmp / "run", plots=False)
        finally:
            whole = clock() - c
            restore()
            for owner, attr, fn in undo:
                setattr(owner, attr, fn)
        groups = dict(totals.pop("__groups__"))
        parts = {**own}
        for g, sec in groups.items():
            name = ("end of run (finalize: exact solves)" if g.startswith("end of run") else
                    "output: metrics rows and file" if g.startswith("metrics") else
                    "live: " + g.replace("static comparator, live ", "static comparator "))
            parts[name] = parts.get(name, 0.0) + sec
        parts["rest (engine loop, run folder, summary.json)"] = whole - sum(parts.values())
        return {"whole": whole, "startup": startup, "parts": parts}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def parts_child(spec: dict) -> dict:
    """:func:`child_parts` in a fresh interpreter (this file with ``--child``); its JSON is the last stdout line."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + (os.pathsep + os.environ["PYTHONPATH"]
                                                    if os.environ.get("PYTHONPATH") else "")}
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)],
                          capture_output=True, text=True, env=env)
    if proc.returncode:
        raise RuntimeError(f"parts run {spec} failed: " + " | ".join(proc.stderr.strip().splitlines()[-3:]))
    return json.loads(proc.stdout.strip().splitlines()[-1])


def exponent(xs, ys) -> float | None:
    """k of y ∝ x^k, least squares on the logarithms (None when a value is below 10 ms)."""
    if min(ys) < 0.01:
        return None
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def parts_report(keys: list[str], grid_T: list[int], grid_M: list[int], grid_d: list[int], base_T: int) -> None:
    """Print streamfl's CPU by part for each configuration, then the parts' growth in T, M and d."""
    for k in keys:
        task, T, M, d = CONFIGS[k]
        r = parts_child({"task": task, "T": T, "M": M, "d": d})
        rows = [(name, f"{sec:.3f}", f"{100 * sec / r['whole']:.1f} %")
                for name, sec in sorted(r["parts"].items(), key=lambda kv: -kv[1])]
        rows.append(("whole run (run_experiment)", f"{r['whole']:.3f}", "100 %"))
        rows.append(("apart: process start-up (imports, kernel caches; a 4-step run, M = 4, d = 10)",
                     f"{r['startup']:.3f}", ""))
        print(f"\n== streamfl CPU by part: {task} T={T:,} M={M:,} d={d} (one in-process run, exclusive CPU s) ==")
        table(rows, ("part", "CPU s", "share of the run"))
    tasks = sorted({CONFIGS[k][0] for k in keys})
    for task in tasks:
        for axis, values, shape in (("T", grid_T, lambda x: (x, 64, 100)), ("M", grid_M, lambda x: (base_T, x, 100)),
                                    ("d", grid_d, lambda x: (base_T, 64, x))):
            res = []
            for x in values:
                T, M, d = shape(x)
                res.append(parts_child({"task": task, "T": T, "M": M, "d": d}))
                print(f"  parts run {task} T={T} M={M} d={d}: {res[-1]['whole']:.2f} s", flush=True)
            names = sorted({n for r in res for n in r["parts"]}, key=lambda n: -res[-1]["parts"].get(n, 0.0))
            rows = []
            for n in [*names, "whole"]:
                ys = [r["whole"] if n == "whole" else r["parts"].get(n, 0.0) for r in res]
                k_ = exponent(values, ys)
                rows.append((n, *[f"{y:.3f}" for y in ys], "–" if k_ is None else f"{k_:.2f}"))
            fixed = {"T": "M = 64, d = 100", "M": f"T = {base_T:,}, d = 100", "d": f"T = {base_T:,}, M = 64"}[axis]
            print(f"\n== growth in {axis}: {task}, {fixed}; CPU s by part, and the exponent k of CPU ∝ {axis}^k ==")
            table(rows, ("part", *[f"{axis}={x:,}" for x in values], "exponent k"))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", default=",".join(CONFIGS), help=f"comma list of {', '.join(CONFIGS)}")
    p.add_argument("--programs", default=",".join(("streamfl",) + ANCHORS), help="comma list of streamfl and "
                                                                                  "the anchors to run")
    p.add_argument("--threads", default="default,one", help="anchors' thread settings: default, one, or both")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--parts", action="store_true", help="streamfl's CPU by part, and its growth in T, M, d")
    p.add_argument("--grid-steps", default="2000,4000,8000,16000")
    p.add_argument("--grid-clients", default="32,64,128,256")
    p.add_argument("--grid-dims", default="25,50,100,200")
    p.add_argument("--grid-base-steps", type=int, default=2000, help="T of the M and d grids")
    p.add_argument("--json", type=Path, default=None, help="also write the medians (and every run) to this file")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child is not None:
        print(json.dumps(child_parts(json.loads(a.child))))
        return 0
    keys = [k for k in a.configs.split(",") if k]
    bad = [k for k in keys if k not in CONFIGS]
    programs = [x for x in a.programs.split(",") if x]
    threads = [x for x in a.threads.split(",") if x]
    if bad or any(x not in ("streamfl",) + ANCHORS for x in programs) or any(x not in THREADS for x in threads):
        p.error(f"unknown configuration, program or thread setting in {a.configs!r} / {a.programs!r} / "
                f"{a.threads!r}; configurations: {', '.join(CONFIGS)}; programs: streamfl, {', '.join(ANCHORS)}; "
                f"threads: default, one")
    print(f"{time.strftime('%Y-%m-%d %H:%M %Z')}  load average {os.getloadavg()}  {os.cpu_count()} CPUs")
    print("command: " + " ".join([Path(sys.executable).name, *sys.argv]))
    if a.parts:
        ints = [[int(x) for x in s.split(",")] for s in (a.grid_steps, a.grid_clients, a.grid_dims)]
        parts_report(keys, *ints, a.grid_base_steps)
    else:
        runs = measure(keys, programs, threads, a.repeats)
        best = report(runs, keys, programs, threads)
        if a.json:
            a.json.write_text(json.dumps({"medians": best, "runs": {"|".join(k): v for k, v in runs.items()}},
                                         indent=1, default=float))
    print(f"\nload average at the end {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
