"""Solver-level figures: the time of one CG iteration of the Schur-preconditioned Wilson and
domain-wall solves, and the share of it spent outside the hopping term.

    python benchmarks/bench_solvers.py [--grid 16.16.16.16] [--Ls 8] [--precision double]
                                       [--iterations 100] [--threads 2] [--operators wilson,dwf]

Each solve runs a fixed number of CG iterations (a tolerance it cannot reach) on a random
gauge field, after one short solve that compiles every kernel.  The hopping term of one
iteration is counted, not assumed: the operator's ``Meooe`` / ``MeooeDag`` calls (and
Wilson's second hop with its diagonal folded in, ``_mpc_finish``) are counted in a short
solve, and one ``Meooe`` is timed on its own; "outside Dhop" is the rest of the iteration
(the linear algebra of CG, ``Mooee`` and ``MooeeInv`` where they are separate kernels, the
solver's Python).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import pygrid as pg
import pygrid.qcd  # noqa: F401  (pg.qcd)
from pygrid.algorithms import ConjugateGradient

#: the operator's hopping calls; ``_mpc_finish`` is Wilson's second hop of a Schur application
#: with the scalar diagonal folded in (one hop kernel with its diagonal term)
HOPS = ("Meooe", "MeooeDag", "_mpc_finish")


def _count_hops(D):
    """Wrap D's hopping methods with a counter; returns the dict of counts."""
    counts = dict.fromkeys(HOPS, 0)
    for name in HOPS:
        method = getattr(D, name, None)
        if method is None:
            continue

        def counted(*a, _m=method, _n=name, **k):
            counts[_n] += 1
            return _m(*a, **k)

        setattr(D, name, counted)
    return counts


def _uncount(D):
    for name in HOPS:
        D.__dict__.pop(name, None)


def measure(op, grid, precision, Ls, iterations):
    rng = pg.ParallelRNG(grid, [3, 1, 4])
    U = pg.qcd.random_gauge(grid, rng, precision=precision)
    D = pg.qcd.WilsonFermion(U, 0.1) if op == "wilson" else pg.qcd.DomainWallFermion(U, Ls, 0.1, 1.8)
    b = D.new_fermion()
    pg.ParallelRNG(D.grid, [5]).gaussian(b)
    pg.qcd.schur_solve(D, b, ConjugateGradient(1e-30, maxiter=3, verbose="error"))   # compiles every kernel

    def hops(maxiter):
        counts = _count_hops(D)
        pg.qcd.schur_solve(D, b, ConjugateGradient(1e-30, maxiter=maxiter, verbose="error"))
        _uncount(D)
        return sum(counts.values())

    # the solve also hops outside its iterations (source preparation, reconstruction, the
    # full residual): the difference of two lengths is the count per iteration
    hops_per_iter = (hops(6) - hops(3)) / 3
    _, rec = pg.qcd.schur_solve(D, b, ConjugateGradient(1e-30, maxiter=iterations, verbose="error"))
    t_iter = rec.time / rec.iterations
    half = pg.pick_checkerboard(1, b)
    out = D.Meooe(half)
    sync = pg.get_backend().synchronize  # a GPU launch returns before its kernel has run
    times = []
    for _ in range(max(10, iterations // 4)):
        sync()
        t0 = time.perf_counter()
        D.Meooe(half, out=out)
        sync()
        times.append(time.perf_counter() - t0)
    t_hop = statistics.median(times)
    return t_iter, hops_per_iter, t_hop, rec.iterations


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--grid", default="16.16.16.16")
    p.add_argument("--Ls", type=int, default=8)
    p.add_argument("--precision", default="double", choices=("double", "single"))
    p.add_argument("--iterations", type=int, default=100)
    p.add_argument("--operators", default="wilson,dwf")
    args, rest = p.parse_known_args(argv)
    pg.init(rest)
    dims = [int(x) for x in args.grid.split(".")]
    grid = pg.GridCartesian(dims, precision=args.precision)
    print(f"Schur-preconditioned CG on {args.grid}, {args.precision}, {pg.get_backend().describe()}, "
          f"Nsimd {grid.nsimd}")
    for op in [o.strip() for o in args.operators.split(",") if o.strip()]:
        t_iter, hops, t_hop, n = measure(op, grid, args.precision, args.Ls, args.iterations)
        inside = hops * t_hop
        what = op if op == "wilson" else f"dwf Ls {args.Ls}"
        print(f"  {what:<12} {t_iter * 1e3:8.3f} ms per CG iteration ({n} iterations); Dhop "
              f"{hops:.0f} x {t_hop * 1e3:.3f} ms = {inside * 1e3:.3f} ms; outside Dhop "
              f"{100 * (1 - inside / t_iter):.0f}%", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
