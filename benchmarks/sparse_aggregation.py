"""Sparse aggregation costs O(touched rows), not O(table size).

One round: K = 100 clients each send a sparse update of 50 distinct rows
(ids uniform over the table, rows of width k = 16, float64). The server

1. concatenates and validates them (``SparseRound.from_updates``),
2. applies a rule (``fedavg`` by samples, ``mf_fedavg``, ``fedsubavg``),
3. adds the global delta into its table in place (``apply_rows``).

That round is timed at table sizes 10^4, 10^5 and 10^6 rows, the sizes
interleaved so that machine drift hits them alike (``--rounds`` rounds per
size and rule, cycling over 8 sets of updates). The target is checked on the
fastest round of each size (the cost of the work itself; on a shared
machine the median also carries other processes' load, so it is printed
beside it). Peak memory is
the ``tracemalloc`` peak of one round (numpy reports its buffers to it); the
table itself exists before the round and is not counted. For scale, the
time of one pass over the table (``table += 0``), which is what any
O(table) rule would pay at least, is printed beside it.

FedSubAvg's heat (an array over the table, computed once per period from the
population's reports) is built outside the timed round.

Target: time per round and peak memory grow by at most 1.5x from 10^4 to
10^6 rows, for every rule (exit status 1 otherwise).

Usage::

    python benchmarks/sparse_aggregation.py [--rounds 200] [--clients 100] [--touched 50] [--width 16] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import tracemalloc

import numpy as np

from streamfl.aggregation.sparse import SparseRound, SparseUpdate, apply_rows, fedavg, fedsubavg, mf_fedavg

SIZES = (10_000, 100_000, 1_000_000)


def make_updates(rng, n_rows, clients, touched, width):
    return [SparseUpdate(ids=rng.choice(n_rows, touched, replace=False).astype(np.int64),
                         rows=rng.standard_normal((touched, width)),
                         counts=rng.integers(1, 5, touched),
                         n_samples=int(rng.integers(10, 200))) for _ in range(clients)]


def one_round(table, updates, rule, heat, population):
    r = SparseRound.from_updates(updates)
    if rule == "fedavg":
        delta = fedavg(r, "samples")
    elif rule == "mf_fedavg":
        delta = mf_fedavg(r)
    else:
        delta = fedsubavg(r, heat, population)
    apply_rows(table, delta)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--touched", type=int, default=50)
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="Also write the results to this JSON file.")
    a = ap.parse_args(argv)
    rng = np.random.default_rng(a.seed)
    rules = ("fedavg", "mf_fedavg", "fedsubavg")
    population = 10 * a.clients
    tables = {n: rng.standard_normal((n, a.width)) for n in SIZES}
    heats = {n: rng.integers(1, population, n).astype(np.float64) for n in SIZES}
    pool = {n: [make_updates(rng, n, a.clients, a.touched, a.width) for _ in range(8)] for n in SIZES}
    times = {(n, rule): [] for n in SIZES for rule in rules}
    scans = {n: [] for n in SIZES}
    for n in SIZES:                                        # warm-up: page the tables in, first calls
        for rule in rules:
            one_round(tables[n], pool[n][0], rule, heats[n], population)
    for i in range(a.rounds):
        for n in SIZES:
            for rule in rules:
                ups = pool[n][i % len(pool[n])]
                t0 = time.perf_counter()
                one_round(tables[n], ups, rule, heats[n], population)
                times[(n, rule)].append(time.perf_counter() - t0)
            if i % 10 == 0:
                t0 = time.perf_counter()
                tables[n] += 0.0
                scans[n].append(time.perf_counter() - t0)
    peaks = {}
    for n in SIZES:
        for rule in rules:
            tracemalloc.start()
            one_round(tables[n], pool[n][1], rule, heats[n], population)
            peaks[(n, rule)] = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()

    print(f"sparse aggregation: {a.clients} clients x {a.touched} touched rows, width {a.width}, "
          f"{a.rounds} rounds per size (Python {platform.python_version()}, numpy {np.__version__})")
    head = (f"{'rule':<10} {'table rows':>10} {'ms/round (min)':>14} {'(median)':>9} {'peak KiB':>9} "
            f"{'one pass over table, ms':>24}")
    print(head)
    print("-" * len(head))
    rows, ok = [], True
    for rule in rules:
        for n in SIZES:
            ms = 1e3 * float(np.min(times[(n, rule)]))
            med = 1e3 * float(np.median(times[(n, rule)]))
            kib = peaks[(n, rule)] / 1024
            scan = 1e3 * float(np.min(scans[n]))
            rows.append({"rule": rule, "table_rows": n, "ms_per_round": ms, "ms_per_round_median": med,
                         "peak_kib": kib, "table_pass_ms": scan})
            print(f"{rule:<10} {n:>10,} {ms:>14.3f} {med:>9.3f} {kib:>9.1f} {scan:>24.3f}")
        small, large = rows[-len(SIZES)], rows[-1]
        t_growth = large["ms_per_round"] / small["ms_per_round"]
        m_growth = large["peak_kib"] / small["peak_kib"]
        ok &= t_growth <= 1.5 and m_growth <= 1.5
        print(f"{'':<10} growth 10^4 -> 10^6: time {t_growth:.2f}x, memory {m_growth:.2f}x (target <= 1.5x)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "clients": a.clients, "touched": a.touched, "width": a.width,
                       "rounds": a.rounds, "ok": bool(ok)}, f, indent=2)
    print("target met" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
