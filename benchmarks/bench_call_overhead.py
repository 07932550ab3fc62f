"""What a library call spends around its kernel: Dirac operators and reductions.

    python benchmarks/bench_call_overhead.py [--operator wilson|dwf|schur|norm2|inner|expr|axpy|build]
        [--grid 8.8.8.8] [--precision double] [--calls 1000] [--whole]

``wilson``: ``WilsonFermion.Dhop(psi, out=out)`` on the full grid; ``dwf``: the domain-wall
``Dhop`` (Ls 8); ``schur``: the Wilson even-odd hop ``Meooe(psi_e, out=chi_o)`` a Schur
solve applies; ``norm2``, ``inner``: ``pg.norm2(x)``, ``pg.inner_product(x, y)`` of
fermion fields; ``expr``: the expression statement ``z @= 0.3 * x + y`` (building the
expression, its lowering and checks, the views), ``axpy``: the same as ``pg.axpy(z, 0.3, x, y)``,
``build``: building the expression ``0.3 * x + y`` alone (no launch: all of it is outside).
Each call is timed whole and, inside it, the parallel driver's launch
(``parallel_numba._run``, ``Bound.again`` for a launch bound to its fields, or the closure
of ``Bound.runner`` that a Dirac call on fields seen before keeps: the driver's entry point
and the kernel); the difference is
the time the call spends outside the launch (checks, views, the launch lookup, and
Python that runs with the caches full of the fields the kernel has just streamed).
With ``--whole`` the calls are timed whole, nothing inside them: for fields small enough that
the launch runs on the calling thread (under the backend's ``min_parallel_bytes``), where it
takes none of the timed paths (``--grid 4.4.4.8``: the expression statement against
``pg.axpy`` and the build alone).
The two halves come from the same call, so the machine's slow and fast phases, which
move a whole call by more than this difference on a virtual machine, cancel; the
median and quartiles over the calls are printed.  The timer around the launch adds
a wrapper's call to what is counted outside it (under a microsecond).
"""
from __future__ import annotations

import argparse
import time

import pygrid as pg
from pygrid.accelerator import parallel_numba
from pygrid.accelerator.backends import get_backend


def operator_call(kind, dims, prec):
    grid = pg.GridCartesian(dims, precision=prec)
    if kind in ("norm2", "inner", "expr", "axpy", "build"):
        x, y, z = pg.LatticeFermion(grid, prec), pg.LatticeFermion(grid, prec), pg.LatticeFermion(grid, prec)
        pg.ParallelRNG(grid, [5, 6, 7, 8]).gaussian(x)
        pg.ParallelRNG(grid, [1, 6, 7, 8]).gaussian(y)
        return {"norm2": lambda: pg.norm2(x), "inner": lambda: pg.inner_product(x, y),
                "expr": lambda: z.__imatmul__(0.3 * x + y), "axpy": lambda: pg.axpy(z, 0.3, x, y),
                "build": lambda: 0.3 * x + y}[kind]
    U = pg.qcd.random_gauge(grid, pg.ParallelRNG(grid, [1, 2, 3, 4]), precision=prec)
    if kind == "dwf":
        D = pg.qcd.DomainWallFermion(U, 8, 0.1, 1.8)
        psi, out = D.new_fermion(), D.new_fermion()
        pg.ParallelRNG(psi.grid, [5, 6, 7, 8]).gaussian(psi)
        return lambda: D.Dhop(psi, out=out)
    D = pg.qcd.WilsonFermion(U, 0.1)
    psi = pg.LatticeFermion(grid, prec)
    pg.ParallelRNG(grid, [5, 6, 7, 8]).gaussian(psi)
    if kind == "schur":
        e = pg.pick_checkerboard(0, psi)
        o = pg.pick_checkerboard(1, pg.LatticeFermion(grid, prec))
        return lambda: D.Meooe(e, out=o)
    out = pg.LatticeFermion(grid, prec)
    return lambda: D.Dhop(psi, out=out)


def wilson_schur_system(dims, prec):
    """``(A, rhs)``: the normal equations of the Schur-preconditioned Wilson operator of
    ``bench_solvers.py`` on a random gauge field, for the benchmarks that time its CG."""
    import pygrid.qcd  # noqa: F401  (pg.qcd)
    from pygrid.algorithms import MdagMOperator
    from pygrid.qcd.schur import SchurOperator

    grid = pg.GridCartesian(list(dims), precision=prec)
    U = pg.qcd.random_gauge(grid, pg.ParallelRNG(grid, [3, 1, 4]), precision=prec)
    D = pg.qcd.WilsonFermion(U, 0.1)
    b = D.new_fermion()
    pg.ParallelRNG(D.grid, [5]).gaussian(b)
    S = SchurOperator(D, 1)
    return MdagMOperator(S), S.Mdag(S.prepare_source(b))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--operator", default="wilson",
                    choices=("wilson", "dwf", "schur", "norm2", "inner", "expr", "axpy", "build"))
    ap.add_argument("--grid", default="8.8.8.8")
    ap.add_argument("--precision", choices=("double", "single"), default="double")
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--whole", action="store_true",
                    help="time whole calls only (launches on the calling thread)")
    args = ap.parse_args()
    if get_backend().name != "openmp":
        raise SystemExit("this benchmark times the openmp backend's launch path")
    dims = tuple(int(x) for x in args.grid.split("."))
    if args.whole:
        whole_calls(args, dims)
        return
    clock, inside, depth, on = time.perf_counter_ns, [], [0], [False]
    run, again, runner = parallel_numba._run, parallel_numba.Bound.again, parallel_numba.Bound.runner

    def timed(fn):
        def launch(*a):
            if depth[0] or not on[0]:  # a bound launch that falls back on _run: counted once
                return fn(*a)
            depth[0] += 1
            t = clock()
            try:
                return fn(*a)
            finally:
                inside.append(clock() - t)
                depth[0] -= 1
        return launch

    # a kept Dirac call runs the closure Bound.runner made when the call was first kept
    parallel_numba._run = timed(run)
    parallel_numba.Bound.again = timed(again)
    parallel_numba.Bound.runner = lambda self, *a: timed(runner(self, *a))
    try:
        call = operator_call(args.operator, dims, args.precision)
        for _ in range(30):
            call()
        on[0] = True
        outside, launch = [], []
        for _ in range(args.calls):
            inside.clear()
            t = clock()
            call()
            whole = clock() - t
            launch.append(sum(inside) / 1e3)
            outside.append((whole - sum(inside)) / 1e3)
    finally:
        parallel_numba._run = run
        parallel_numba.Bound.again = again
        parallel_numba.Bound.runner = runner
    if not any(launch):
        raise SystemExit(f"{args.operator}: no launch was timed inside the call (its launch path is "
                         "none of parallel_numba._run, Bound.again and Bound.runner's)")
    outside.sort()
    launch.sort()
    n = len(outside)
    print(f"{args.operator} on {args.grid}, {args.precision}, {get_backend().describe()}, {n} calls")
    print(f"  the launch (driver and kernel)   median {launch[n // 2]:8.1f} us")
    print(f"  the call outside the launch      median {outside[n // 2]:8.1f} us "
          f"(quartiles {outside[n // 4]:.1f} to {outside[3 * n // 4]:.1f})")


def whole_calls(args, dims):
    call = operator_call(args.operator, dims, args.precision)
    for _ in range(30):
        call()
    clock, times = time.perf_counter_ns, []
    for _ in range(args.calls):
        t = clock()
        call()
        times.append((clock() - t) / 1e3)
    times.sort()
    n = len(times)
    print(f"{args.operator} on {args.grid}, {args.precision}, {get_backend().describe()}, {n} calls")
    print(f"  the whole call                   median {times[n // 2]:8.1f} us "
          f"(quartiles {times[n // 4]:.1f} to {times[3 * n // 4]:.1f})")


if __name__ == "__main__":
    main()
