"""Where a kept call's time goes, from the CPU's timestamp counter read inside the parallel launch.

    python benchmarks/bench_call_trace.py [--operator wilson|dwf|schur|cg] [--grid 8.8.8.8]
        [--precision single] [--calls 3000] [--rounds 3]

The openmp backend's parallel driver is replaced, before the first launch, by one that reads
the timestamp counter (``rdtsc``) as each block starts and ends (libgomp's region with its body
calling :mod:`call_trace_stamps`, or where that is not the driver, the ``prange`` one); the
call reads it before and after.  So each call splits into: the time before the first block
starts (the call's Python, the driver's entry and OpenMP starting the threads), the blocks
themselves (first start to last end), and the time after the last block ends (the threads
joining, the Python unwinding).  The
overhead, before plus after, does not include the kernel, so it is steady across the virtual
machine's slow and fast phases, which move the blocks by up to 1.5x.  Medians over ``--calls``
calls, per round; the counter's frequency is measured against ``time.perf_counter``.

``wilson``: ``WilsonFermion.Dhop(psi, out=out)``; ``dwf``: the domain-wall ``Dhop`` (Ls 8);
``schur``: the Wilson even-odd hop ``Meooe(psi_e, out=chi_o)``.  Each round also gives the floor:
an empty kernel's kept launch (``backend.bind_kernel(...).prepared(osites)``), the launch
mechanism alone.

``cg``: the Schur-preconditioned Wilson CG of ``bench_solvers.py``, ``--calls`` iterations a
round: the time per iteration, the parallel launches in it, the time their blocks took (first
start to last end of each launch, summed) and the rest (the Python of the solver, its operator
and its updates, and each launch's start and join).  Launches on the calling thread count as
the rest.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from bench_call_overhead import operator_call, wilson_schur_system  # the same calls, built the same way
from call_trace_stamps import MAX_BLOCKS, STAMPS, TOTALS, block_end, block_start, launch_end, now
from numba import njit, prange

from pygrid.accelerator import gomp_team, parallel_numba
from pygrid.accelerator.backends import get_backend
from pygrid.accelerator.parallel_numba import call_kernel


@njit(parallel=True, nogil=True)
def traced_drive(address, nblocks, osites, failed, words):
    """The generic ``prange`` driver of one packed argument (``parallel_numba.driver_source(1)``),
    for where libgomp's region is not the driver: each block's start and end stamped into
    :data:`STAMPS`, the launch added to :data:`TOTALS`."""
    n = 0
    for b in prange(nblocks):
        block_start(b)
        f = call_kernel(address, b * osites // nblocks, (b + 1) * osites // nblocks, (words,))
        block_end(b)
        failed[b] = f
        n += f
    launch_end(nblocks)
    return n


@njit(nogil=True)
def empty_kernel(lo, hi, a):
    a[0] = lo


def tsc_per_us():
    now()
    t0, c0 = time.perf_counter(), now()
    time.sleep(0.3)
    t1, c1 = time.perf_counter(), now()
    return (c1 - c0) / ((t1 - t0) * 1e6)


def trace(fn, nblocks, calls, per_us):
    """Medians (us) of: before the first block starts, first start to last end, after the last end."""
    rows = np.empty((calls, 3))
    s = STAMPS[:2 * nblocks]
    for i in range(calls):
        s[:] = 0
        a = now()
        fn()
        z = now()
        ran = s[0::2] != 0
        if not ran.any():
            raise SystemExit("the call left no stamps: it did not launch in parallel (a lattice too small "
                             "for the backend's min_parallel_bytes, or one thread)")
        st = s.astype(np.int64) - np.int64(a)
        first, last = st[0::2][ran].min(), st[1::2][ran].max()
        rows[i] = (first, last - first, int(z) - int(a) - last)
    return np.median(rows, axis=0) / per_us


def trace_cg(dims, precision, iterations, rounds, per_us):
    """The ``cg`` mode: per round, the time per iteration and its launches' blocks."""
    from pygrid.algorithms import ConjugateGradient

    A, rhs = wilson_schur_system(dims, precision)
    ConjugateGradient(1e-150, maxiter=3, verbose="error")(A, rhs)   # compiles every kernel
    print(f"  {'':14s} {'per iteration':>14s} {'launches':>9s} {'blocks':>8s} {'rest':>8s}   (us)")
    for _ in range(rounds):
        TOTALS[:] = 0
        t0 = time.perf_counter()
        # a tolerance it does not reach: the iterations asked for, then the true residual
        _, rec = ConjugateGradient(1e-150, maxiter=iterations, verbose="error")(A, rhs)
        t = (time.perf_counter() - t0) * 1e6 / rec.iterations
        blocks = int(TOTALS[1]) / per_us / rec.iterations
        print(f"  {'Schur CG':14s} {t:14.1f} {int(TOTALS[0]) / rec.iterations:9.2f} {blocks:8.1f} "
              f"{t - blocks:8.1f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--operator", default="wilson", choices=("wilson", "dwf", "schur", "cg"))
    ap.add_argument("--grid", default="8.8.8.8")
    ap.add_argument("--precision", choices=("double", "single"), default="single")
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    backend = get_backend()
    if backend.name != "openmp":
        raise SystemExit("this benchmark traces the openmp backend's parallel launches")
    if 1 in parallel_numba._drivers or gomp_team._state:
        raise SystemExit("the parallel driver was loaded before the trace could replace it")
    nblocks = backend.threads()
    if not 2 <= nblocks <= MAX_BLOCKS:
        raise SystemExit(f"the trace needs 2 to {MAX_BLOCKS} threads, not {nblocks}")
    # the driver launches take: libgomp's region (its body calling the stamps), else the prange one
    if not gomp_team.install("call_trace_stamps"):
        parallel_numba._drivers[1] = traced_drive
    dims = tuple(int(x) for x in args.grid.split("."))
    if args.operator == "cg":
        per_us = tsc_per_us()
        print(f"Wilson Schur CG on {args.grid}, {args.precision}, {backend.describe()}, {nblocks} blocks, "
              f"timestamp counter {per_us / 1e3:.3f} GHz; {args.calls} iterations a round")
        trace_cg(dims, args.precision, args.calls, args.rounds, per_us)
        return
    call = operator_call(args.operator, dims, args.precision)
    # the launch's first argument decides the split: as large as the backend's threshold
    a = np.zeros(-(-backend.min_parallel_bytes // 8))
    floor = backend.bind_kernel(empty_kernel, a)
    osites = 256 * nblocks
    floor(osites, a)
    # launch.again where the library predates launch.prepared (to compare with an older commit)
    if hasattr(floor, "prepared"):
        floor = floor.prepared(osites)
    else:
        floor = lambda again=floor.again: again(osites)  # noqa: E731
    for _ in range(30):
        call()
        floor()
    per_us = tsc_per_us()
    print(f"{args.operator} on {args.grid}, {args.precision}, {backend.describe()}, {nblocks} blocks, "
          f"timestamp counter {per_us / 1e3:.3f} GHz; medians over {args.calls} calls, us")
    print(f"  {'':34s} {'before':>8s} {'blocks':>8s} {'after':>8s} {'overhead':>9s}")
    for _ in range(args.rounds):
        for label, fn in (("the call", call), ("an empty kernel's kept launch", floor)):
            before, blocks, after = trace(fn, nblocks, args.calls, per_us)
            print(f"  {label:34s} {before:8.2f} {blocks:8.2f} {after:8.2f} {before + after:9.2f}")


if __name__ == "__main__":
    main()
