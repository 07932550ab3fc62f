"""Solver-level figures: the time of one CG iteration of the Schur-preconditioned Wilson and
domain-wall solves, and the share of it spent outside the hopping term.

    python benchmarks/bench_solvers.py [--grid 16.16.16.16] [--Ls 8] [--precision double]
                                       [--iterations 100] [--threads 2] [--operators wilson,dwf]

Each solve is CG on the normal equations of the Schur operator (``MdagMOperator(SchurOperator(D))``),
a fixed number of iterations (a tolerance of 1e-150, which it does not reach: at 8^4 the
iterated residual of the Wilson solve passed 1e-30 after 67 iterations) on a random gauge field, after one
short solve that compiles every kernel.  The time per iteration is that of a solve as it runs;
the hopping term is then timed inside a second solve: the
operator's ``Meooe`` / ``MeooeDag`` calls and the hops with pieces of the diagonal folded in
(Wilson's ``_mpc_finish``, domain wall's ``_mpc_start`` and ``_mpc_end``), each between two clock
reads (the device synchronised), the Wilson Schur operator's kept pair of hops
(``pygrid.qcd.hop.HopPair``, which calls none of them) left out so that each goes through them;
"outside Dhop" is the rest of the iteration (the linear algebra of CG, ``Mooee`` and ``MooeeInv``
where they are kernels of their own, the solver's Python), the first solve's time per iteration
less the second's hops (which count the Python of each hop's call on the path that checks it).
Each of those calls is then timed on its own,
repeated on the arguments of its last call in the solve (the fields it has just read), and
printed beside its time inside the solve: the variants do different work (domain wall's
``_mpc_start`` solves ``MooeeInv`` in s in its kernel, ``_mpc_end`` adds ``Mooee psi``), so a
hop is compared with itself, and what the solve adds to it is the fields of the other steps
passing through the caches between two hops.

``--solve TOL [--mass M]`` instead times whole solves to a tolerance, in double precision, with
``pg.qcd.schur_solve`` and three solvers: ``ConjugateGradient(TOL)``,
``MixedPrecisionConjugateGradient(TOL, inner_tol=1e-5)`` (CG on the operator converted to single,
restarted at each correction in double) and ``ReliableUpdateConjugateGradient(TOL)`` (its iterations
in single, reliable updates in double), each after a short solve that compiles its kernels, on the
same source.  A mass nearer the critical one (e.g. -1.9 for Wilson on this random gauge field)
makes the system harder.  It prints each solve's iterations, time and the residual of the full
solution it returns, ``|b - M x| / |b|`` (or why it did not converge), then the time of the last two
over CG's.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import pygrid as pg
import pygrid.qcd  # noqa: F401  (pg.qcd)
from pygrid.algorithms import (
    ConjugateGradient,
    MdagMOperator,
    MixedPrecisionConjugateGradient,
    ReliableUpdateConjugateGradient,
)
from pygrid.qcd.schur import SchurOperator

#: the operator's hopping calls; ``_mpc_finish`` is Wilson's second hop of a Schur application
#: with the scalar diagonal folded in, ``_mpc_start`` / ``_mpc_end`` domain wall's first hop with
#: MooeeInv solved in its kernel and its second with Mooee psi as the diagonal term
HOPS = ("Meooe", "MeooeDag", "_mpc_finish", "_mpc_start", "_mpc_end")


def _time_hops(D, S, sync):
    """Wrap D's hopping methods with timers (the device synchronised around each call), and leave
    the Schur operator ``S``'s kept pairs of hops out; returns the list their durations go into, the
    names wrapped, and per name the durations of its calls and the arguments of its last one."""
    spent, names, calls = [], [], {}
    if hasattr(D, "_mpc_kept"):
        S._kept.clear()
        D._mpc_kept = lambda *a: None
        names.append("_mpc_kept")
    for name in HOPS:
        method = getattr(D, name, None)
        if method is None:
            continue

        def timed(*a, _m=method, _n=name, **k):
            sync()
            t0 = time.perf_counter()
            r = _m(*a, **k)
            sync()
            dt = time.perf_counter() - t0
            spent.append(dt)
            per = calls.setdefault(_n, [[], None])
            per[0].append(dt)
            per[1] = (a, k)
            return r

        setattr(D, name, timed)
        names.append(name)
    return spent, names, calls


def _alone(D, name, args, sync, repeat):
    """The median time of ``D.<name>(*args)`` called ``repeat`` times in a row."""
    method, (a, k) = getattr(D, name), args
    times = []
    for _ in range(repeat):
        sync()
        t0 = time.perf_counter()
        method(*a, **k)
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(op, grid, precision, Ls, iterations):
    D = _operator(op, grid, precision, Ls)
    b = D.new_fermion()
    pg.ParallelRNG(D.grid, [5]).gaussian(b)
    S = SchurOperator(D, 1)
    A, rhs = MdagMOperator(S), S.Mdag(S.prepare_source(b))
    ConjugateGradient(1e-150, maxiter=3, verbose="error")(A, rhs)   # compiles every kernel
    _, rec = ConjugateGradient(1e-150, maxiter=iterations, verbose="error")(A, rhs)
    t_iter = rec.time / rec.iterations
    sync = pg.get_backend().synchronize  # a GPU launch returns before its kernel has run
    spent, names, calls = _time_hops(D, S, sync)
    try:
        _, rec = ConjugateGradient(1e-150, maxiter=iterations, verbose="error")(A, rhs)
    finally:
        for name in names:
            del D.__dict__[name]
    # the solve's own time and the hops inside it both include its closing true residual
    hops = len(spent) / rec.iterations
    variants = {name: (statistics.median(durations), len(durations) / rec.iterations,
                       _alone(D, name, last, sync, max(10, iterations // 4)))
                for name, (durations, last) in calls.items()}
    return t_iter, hops, sum(spent) / rec.iterations, variants, rec.iterations


def _operator(op, grid, precision, Ls, mass=0.1):
    rng = pg.ParallelRNG(grid, [3, 1, 4])
    U = pg.qcd.random_gauge(grid, rng, precision=precision)
    return pg.qcd.WilsonFermion(U, mass) if op == "wilson" else pg.qcd.DomainWallFermion(U, Ls, mass, 1.8)


def solve(op, grid, Ls, tol, mass):
    """Time to solution of the Schur solve in double, with CG and with mixed-precision CG: per solver
    (name, iterations, outer steps or None, iterations in double after single precision lost the
    system or None, seconds, residual of the full solution)."""
    D = _operator(op, grid, "double", Ls, mass)
    b = D.new_fermion()
    pg.ParallelRNG(D.grid, [5]).gaussian(b)
    out = []
    for name, make in (("CG, double", lambda it: ConjugateGradient(tol, maxiter=it, verbose="error")),
                       ("mixed-precision CG", lambda it: MixedPrecisionConjugateGradient(
                           tol, inner_tol=1e-5, maxiter=it, verbose="error")),
                       ("reliable-update CG", lambda it: ReliableUpdateConjugateGradient(
                           tol, maxiter=it, verbose="error"))):
        pg.qcd.schur_solve(D, b, make(3))   # compiles every kernel of this solve
        x, rec = pg.qcd.schur_solve(D, b, make(100000))
        out.append((name, rec.iterations, rec.outer_iterations, rec.double_iterations,
                    rec.time if rec.converged else None, rec.full_residual if rec.converged else rec.reason))
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--grid", default="16.16.16.16")
    p.add_argument("--Ls", type=int, default=8)
    p.add_argument("--precision", default="double", choices=("double", "single"))
    p.add_argument("--iterations", type=int, default=100)
    p.add_argument("--operators", default="wilson,dwf")
    p.add_argument("--solve", type=float, default=None, metavar="TOL",
                   help="time whole solves to TOL: CG in double and the two mixed-precision CGs")
    p.add_argument("--mass", type=float, default=0.1, help="the fermion mass of --solve's operators")
    args, rest = p.parse_known_args(argv)
    pg.init(rest)
    dims = [int(x) for x in args.grid.split(".")]
    ops = [o.strip() for o in args.operators.split(",") if o.strip()]
    if args.solve is not None:
        grid = pg.GridCartesian(dims, precision="double")
        print(f"Schur solves to {args.solve:g} on {args.grid}, mass {args.mass:g}, "
              f"{pg.get_backend().describe()}")
        for op in ops:
            rows = solve(op, grid, args.Ls, args.solve, args.mass)
            what = op if op == "wilson" else f"dwf Ls {args.Ls}"
            for name, its, outer, dbl, t, res in rows:
                steps = f" ({outer} outer{f', the last {dbl} in double' if dbl else ''})" if outer else ""
                if t is None:
                    print(f"  {what:<10} {name:<20} did not converge after {its} iterations: {res}",
                          flush=True)
                    continue
                print(f"  {what:<10} {name:<20} {its:6d} iterations{steps}, {t:8.3f} s, |b - M x| / |b| "
                      f"{res:.1e}", flush=True)
            ratio = [f"{rows[i][4] / rows[0][4]:.3f}" if rows[i][4] and rows[0][4] else "-" for i in (1, 2)]
            print(f"  {'':<10} time against CG in double: mixed {ratio[0]}, reliable update {ratio[1]}",
                  flush=True)
        return 0
    grid = pg.GridCartesian(dims, precision=args.precision)
    print(f"Schur-preconditioned CG on {args.grid}, {args.precision}, {pg.get_backend().describe()}, "
          f"Nsimd {grid.nsimd}")
    for op in ops:
        t_iter, hops, inside, variants, n = measure(op, grid, args.precision, args.Ls, args.iterations)
        what = op if op == "wilson" else f"dwf Ls {args.Ls}"
        print(f"  {what:<12} {t_iter * 1e3:8.3f} ms per CG iteration ({n} iterations); Dhop "
              f"{hops:.0f} x {inside / hops * 1e3:.3f} ms = {inside * 1e3:.3f} ms; outside Dhop "
              f"{100 * (1 - inside / t_iter):.0f}%", flush=True)
        for name, (med, per_iter, alone) in variants.items():
            print(f"    {name:<12} {per_iter:.0f} a iteration, median {med * 1e3:.3f} ms in the solve, "
                  f"{alone * 1e3:.3f} ms on its own ({med / alone:.2f}x)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
