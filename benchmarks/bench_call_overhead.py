"""What a Dirac call spends around its kernel: ``D.Dhop(psi, out=out)`` against the parallel
driver alone on the same buffers, alternated in one process.

    python benchmarks/bench_call_overhead.py [--grid 8.8.8.8] [--precision double] [--rounds 31]

Each round times ``--calls`` calls of each in turn; the difference of a round's two
figures is the time the call spends outside the kernel (views, argument checks, the
launch lookup, numba's dispatch, and those steps running again after the kernel has
streamed the fields through the core's caches).  Prints the best figure of each and
the median of the rounds' differences, which is robust to the machine's slow phases
because both halves of a difference run within milliseconds of each other.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import pygrid as pg
from pygrid.accelerator import parallel_numba
from pygrid.accelerator.backends import get_backend
from pygrid.qcd import kernels_wilson as kw


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", default="8.8.8.8")
    ap.add_argument("--precision", choices=("double", "single"), default="double")
    ap.add_argument("--rounds", type=int, default=31)
    ap.add_argument("--calls", type=int, default=40)
    args = ap.parse_args()
    if get_backend().name != "openmp":
        raise SystemExit("this benchmark times the openmp backend's launch path")
    dims = tuple(int(x) for x in args.grid.split("."))
    prec = args.precision
    grid = pg.GridCartesian(dims, precision=prec)
    U = pg.qcd.random_gauge(grid, pg.ParallelRNG(grid, [1, 2, 3, 4]), precision=prec)
    D = pg.qcd.WilsonFermion(U, 0.1)
    psi = pg.LatticeFermion(grid, prec)
    pg.ParallelRNG(grid, [5, 6, 7, 8]).gaussian(psi)
    out = pg.LatticeFermion(grid, prec)
    D.Dhop(psi, out=out)
    st, dt = D.stencil, np.dtype(np.float64 if prec == "double" else np.float32)
    n4 = st.neighbours.shape[1]
    blocks = get_backend()._blocks()
    # the fields' own buffers, writable, as the Dirac call's kernel views hand them to the kernel
    read = pg.ViewMode.AcceleratorRead
    with psi._kernel_view(read) as p, U._kernel_view(read) as u, out.view(pg.CpuWrite) as o:
        ls = kw._launch_state(st, 1, p.shape[3], dt)
        a = kw.kernel_args(ls, o, p, u, u, np.array([-0.5, 0, -1, 1], dt), o, False) + (
            ls.sites, ls.none, ls.none)
        drive, addr = parallel_numba.driver(len(a)), parallel_numba._address(ls.kernel, a)
    # the arrays stay usable after their views close: on the openmp backend they are the fields'
    # own host buffers (D.Dhop opens its views on the same fields, which an open view would refuse)

        failed = np.zeros(blocks, np.uint8)

        def kernel():
            drive(addr, blocks, n4, failed, *a)

    def call():
        D.Dhop(psi, out=out)

    best, diffs = {kernel: [], call: []}, []
    for _ in range(args.rounds):
        t = {}
        for f in (kernel, call):
            t0 = time.perf_counter()
            for _ in range(args.calls):
                f()
            t[f] = (time.perf_counter() - t0) / args.calls * 1e6
            best[f].append(t[f])
        diffs.append(t[call] - t[kernel])
    diffs.sort()
    print(f"Wilson Dhop on {args.grid}, {prec}, {blocks} threads, {args.rounds} rounds of {args.calls} calls")
    print(f"  parallel driver alone   best {min(best[kernel]):8.1f} us")
    print(f"  D.Dhop(psi, out=out)    best {min(best[call]):8.1f} us")
    print(f"  around the kernel       median {diffs[len(diffs) // 2]:6.1f} us "
          f"(rounds {diffs[0]:.1f} to {diffs[-1]:.1f})")


if __name__ == "__main__":
    main()
