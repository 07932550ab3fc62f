"""Balanced launches against whole blocks, in one process: a kept call's blocks cut into pieces that
a free thread takes (``bind_kernel(..., balance=True)``, :mod:`pygrid.accelerator.gomp_team`) or each
block run whole by its own thread.

    python benchmarks/bench_balance.py [--operator wilson|dwf|cg] [--grid 8.8.8.8]
        [--precision single] [--seconds 20] [--group 5]

The launches' task words are captured as they are made; the benchmark then alternates, every
``--group`` calls, between the pieces the backend chose and one piece a block (the word that holds
the count; launches made meanwhile take the backend's ``min_piece_bytes`` of the turn), so both run
on the same fields, in the same phases of the machine.  On a virtual
machine another tenant on a core's second hardware thread slows that core's AVX-512 kernel by up
to 2x for seconds at a time while the other runs at full speed: the mean shows what balancing
recovers then, the median what the pieces cost where the threads run at one speed.  ``cg``: a call is
a solve of ``--iterations`` iterations of the Schur-preconditioned Wilson CG of ``bench_solvers.py``
(its fields, and so its kept launches, new each solve), timed per iteration.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from bench_call_overhead import operator_call, wilson_schur_system

from pygrid.accelerator import gomp_team
from pygrid.accelerator.backends import get_backend


def cg_call(dims, precision, iterations):
    from pygrid.algorithms import ConjugateGradient

    A, rhs = wilson_schur_system(dims, precision)
    cg = ConjugateGradient(1e-150, maxiter=iterations, verbose="error")
    return lambda: cg(A, rhs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--operator", default="wilson", choices=("wilson", "dwf", "schur", "cg"))
    ap.add_argument("--grid", default="8.8.8.8")
    ap.add_argument("--precision", choices=("double", "single"), default="single")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--group", type=int, default=5)
    ap.add_argument("--iterations", type=int, default=50, help="cg: iterations a solve")
    args = ap.parse_args()
    backend = get_backend()
    if backend.name != "openmp" or gomp_team.driver() is None or backend._blocks() < 2:
        import numba

        raise SystemExit("balanced launches run on the openmp backend's libgomp region, two threads or more: "
                         f"here {backend.describe()}, numba's threading layer "
                         f"{numba.threading_layer() if backend.name == 'openmp' else '-'}, "
                         f"{backend._blocks() if backend.name == 'openmp' else 0} blocks")
    tasks, make = [], gomp_team.task

    def task(*a, **k):
        t = make(*a, **k)
        if t is not None:
            tasks.append(t)
        return t

    gomp_team.task = task
    dims = tuple(int(x) for x in args.grid.split("."))
    cg = args.operator == "cg"
    call = cg_call(dims, args.precision, args.iterations) if cg else operator_call(args.operator, dims,
                                                                                  args.precision)
    per_call = args.iterations if cg else 1
    for _ in range(2 if cg else 20):
        call()
    chosen = {id(t): int(t[6]) for t in tasks}
    if not any(k > 1 for k in chosen.values()):
        raise SystemExit(f"no balanced launch in this call (pieces per block: {set(chosen.values())})")
    piece_bytes = type(backend).min_piece_bytes
    times = {True: [], False: []}
    t0, turn = time.perf_counter(), 0
    try:
        while time.perf_counter() - t0 < args.seconds:
            balanced = turn % 2 == 0
            turn += 1
            type(backend).min_piece_bytes = piece_bytes if balanced else 1 << 62
            for t in tasks:
                t[6] = chosen.setdefault(id(t), int(t[6])) if balanced else 1
            if cg:
                del tasks[:]   # a solve's launches die with its fields
                chosen.clear()
            for _ in range(args.group):
                a = time.perf_counter()
                call()
                times[balanced].append((time.perf_counter() - a) / per_call)
    finally:
        type(backend).min_piece_bytes = piece_bytes
        for t in tasks:
            t[6] = chosen.get(id(t), t[6])
    what = f"solves of {args.iterations} iterations, timed per iteration" if cg else "calls"
    print(f"{args.operator} on {args.grid}, {args.precision}, {backend.describe()}; {turn} groups of "
          f"{args.group} {what}, alternating")
    print(f"  {'':14s} {'calls':>7s} {'mean':>9s} {'median':>9s} {'p90':>9s}   (us)")
    for balanced in (False, True):
        x = np.array(times[balanced]) * 1e6
        label = "balanced" if balanced else "whole blocks"
        print(f"  {label:14s} {len(x):7d} {x.mean():9.1f} {np.median(x):9.1f} {np.percentile(x, 90):9.1f}")
    w, b = np.array(times[False]), np.array(times[True])
    print(f"  whole / balanced: mean {w.mean() / b.mean():.3f}, median {np.median(w) / np.median(b):.3f}")


if __name__ == "__main__":
    main()
