"""``pygrid precompile``: compile the kernels of the Dirac operators and their solves ahead of a job.

    pygrid precompile [--operators wilson,dwf,mobius] [--precision double|single|both] [--Ls N]
                      [--grid X.Y.Z.T] [--mpi X.Y.Z.T] [--accelerator NAME] [any other pygrid flag]

Each operator runs once, on a small random gauge field with antiperiodic time,
through every method a job calls (M, Mdag, MdagM, the even-odd pieces, the Schur operator, a Schur-
preconditioned CG solve and, for domain wall, the 4D source and solution
projections; with ``--precision both`` also the two solvers that iterate in single on the double
operator), so that its kernels are compiled and stored in the kernel cache
($PYGRID_CACHE_DIR, default ~/.cache/pygrid).  A later process with the same
backend, SIMD width (Nsimd) and MPI layout loads them in well under a second
each instead of compiling for tens of seconds.

Kernels depend on the Nsimd of the job's grid and on its MPI decomposition, not
on the lattice size: give the job's --grid (or one with the same Nsimd) and run
under the same mpirun layout.  Without --grid an 8.8.8.8 lattice is used.
"""
from __future__ import annotations

import time

OPERATORS = ("wilson", "dwf", "mobius")
DEFAULT_GRID = (8, 8, 8, 8)


def _parser():
    from .cli import _Parser

    p = _Parser(prog="pygrid precompile", add_help=False)
    p.add_argument("--operators", default="wilson,dwf",
                   help="comma-separated operators: " + ", ".join(OPERATORS))
    p.add_argument("--precision", default="double", choices=("double", "single", "both"))
    p.add_argument("--Ls", type=int, default=8, help="fifth-dimension extent of dwf and mobius")
    return p


def _operators(text):
    from .errors import ConfigError

    ops = [o.strip().lower() for o in text.split(",") if o.strip()]
    bad = [o for o in ops if o not in OPERATORS]
    if bad or not ops:
        raise ConfigError(f"--operators: unknown operator {', '.join(bad) or repr(text)}; choose from "
                          f"{', '.join(OPERATORS)}")
    return list(dict.fromkeys(ops))


def exercise(op: str, grid, precision: str, Ls: int) -> None:
    """Every method a job calls on operator ``op``, once, in ``precision``; ``mixed``: the steps of
    the solvers that iterate in single on a double operator (its kernels of both precisions
    compiled before)."""
    import pygrid as pg
    from pygrid.algorithms import (
        ConjugateGradient,
        MixedPrecisionConjugateGradient,
        ReliableUpdateConjugateGradient,
    )
    from pygrid.config import current

    mixed = precision == "mixed"
    precision = "double" if mixed else precision
    rng = pg.ParallelRNG(grid, [11, 3])
    U = pg.qcd.random_gauge(grid, rng, precision=precision)
    bc = {"boundary_phases": pg.qcd.ANTIPERIODIC_T}       # the phased links are kernels too
    if op == "wilson":
        D = pg.qcd.WilsonFermion(U, 0.5, **bc)
    elif op == "dwf":
        D = pg.qcd.DomainWallFermion(U, Ls, 0.1, 1.8, **bc)
    else:
        D = pg.qcd.MobiusFermion(U, Ls, 0.1, 1.8, 1.5, 0.5, **bc)
    b = D.new_fermion()
    pg.ParallelRNG(D.grid, [5]).gaussian(b)
    if mixed:
        for solver in (ReliableUpdateConjugateGradient, MixedPrecisionConjugateGradient):
            pg.qcd.schur_solve(D, b, solver(1e-6, maxiter=200, verbose=False))
        return
    for name in ("M", "Mdag", "MdagM", "Dhop"):
        getattr(D, name)(b)
    half = pg.pick_checkerboard(1, b)
    for name in ("Meooe", "MeooeDag", "Mooee", "MooeeDag", "MooeeInv", "MooeeInvDag"):
        getattr(D, name)(half)
    pg.qcd.schur_solve(D, b, ConjugateGradient(1e-4, maxiter=50, verbose=False))
    if op == "wilson" and current().compress_links != "never":
        # on fields larger than the caches the hops read the links compressed: their kernel too
        pg.qcd.WilsonFermion(U, 0.5, compress_links=True, **bc).Dhop(b)
    if op != "wilson":
        q = pg.LatticeFermion(grid, precision)
        pg.ParallelRNG(grid, [6]).gaussian(q)
        D.physical_field(D.import_physical_source(q))


def run(argv) -> int:
    """Entry point of ``pygrid precompile`` (argv: its flags); returns the exit status."""
    import pygrid as pg

    from .accelerator.compile_cache import cache_dir
    from .accelerator.compile_log import totals
    from .config import ConfigError, current

    if any(a in ("-h", "--help") for a in argv):
        print(__doc__.strip())
        return 0
    rest = pg.init(argv)
    args = _parser().parse_args(rest)
    ops = _operators(args.operators)
    if args.Ls < 1:
        raise ConfigError(f"--Ls must be a positive integer, got {args.Ls}")
    precisions = ("double", "single") if args.precision == "both" else (args.precision,)
    dims = tuple(current().grid or DEFAULT_GRID)
    backend = pg.get_backend()
    jobs = [(op, prec) for op in ops for prec in precisions]
    if args.precision == "both":  # and the mixed-precision solvers' steps between them
        jobs += [(op, "mixed") for op in ops]
    print(f"pygrid precompile on {backend.describe()}: {', '.join(ops)} in {' and '.join(precisions)}, "
          f"lattice {'.'.join(map(str, dims))}, kernel cache {cache_dir()}", flush=True)
    t_all, (n_all, c_all) = time.perf_counter(), totals()
    # a small lattice would run on one thread: every launch goes through the threads here, so that
    # the parallel drivers of the kernels are compiled too
    serial_below = getattr(backend, "min_parallel_bytes", None)
    if serial_below is not None:
        backend.min_parallel_bytes = 0
    # and the layout moves that a large lattice's operators run compiled (openmp), on this small one
    from .accelerator import layout_numba

    numpy_below, layout_numba.COMPILED_BYTES = layout_numba.COMPILED_BYTES, 0
    try:
        for i, (op, prec) in enumerate(jobs, 1):
            grid = pg.GridCartesian(list(dims), precision="double" if prec == "mixed" else prec)
            t0, (n0, c0) = time.perf_counter(), totals()
            exercise(op, grid, prec, args.Ls)
            n, c = totals()
            print(f"[{i}/{len(jobs)}] {op:<7} {prec:<7} Nsimd {grid.nsimd:<3} {n - n0:3d} kernels compiled "
                  f"in {c - c0:6.1f} s ({time.perf_counter() - t0:.1f} s in all)", flush=True)
    finally:
        layout_numba.COMPILED_BYTES = numpy_below
        if serial_below is not None:
            backend.min_parallel_bytes = serial_below
    n, c = totals()
    print(f"done in {time.perf_counter() - t_all:.1f} s: {n - n_all} kernels compiled ({c - c_all:.1f} s); "
          f"a job with the same backend, Nsimd and MPI layout loads them from the cache", flush=True)
    return 0
