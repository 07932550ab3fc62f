"""norm2 and the inner product on the openmp backend against a copy of their working set, in one process.

    python benchmarks/bench_reductions.py [--grid 16.16.16.16] [--rounds 11] \
        [--baseline OLD_reductions_numba.py] [--per-core]

Each round times a parallel copy moving as many bytes as the reduction reads (the
roofline of ``pygrid benchmark axpy``: the faster of cached and streaming stores), then
``pg.norm2(x)`` or ``pg.inner_product(x, y)`` through the library, each for 0.15 s; the ratio to
the copy is taken within the round, so the machine's slow and fast phases cancel, and
the median and range over the rounds are printed.  (``pygrid benchmark axpy`` sets them
against ``np.vdot``; numpy's BLAS threads spin on after a call and would take the cores
from the copy of the next round here.)  With ``--baseline`` (the file
``reductions_numba.py`` of another commit, e.g.
``git show 66706b6:pygrid/accelerator/reductions_numba.py > /tmp/old.py``) its
``norm2``/``inner_product`` run in the same rounds on the same buffers, and must agree.

``--per-core`` instead times the kernels themselves on one core, without a launch or a call:
the block kernels of both precisions (``reductions_numba``) looped over one buffer of
16 KiB to 16 MiB, in GB/s read, which shows what one core's loop sustains from L1, L2
and L3 (in single each vector is widened to double before it is accumulated).
"""
from __future__ import annotations

import argparse
import time
import types

import numpy as np

import pygrid as pg
from pygrid.accelerator.backends import get_backend
from pygrid.bench.roofline import copy_kernel, stream_copy_kernel, touched


def load_baseline(path):
    src = open(path).read().replace("from . import", "from pygrid.accelerator import")
    src = src.replace("from .", "from pygrid.accelerator.")
    mod = types.ModuleType("reductions_baseline")
    exec(compile(src, path, "exec"), mod.__dict__)
    return mod


def rate(f, seconds=0.15):
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        f()
        n += 1
    return (time.perf_counter() - t0) / n


def per_core(sizes_kib=(16, 256, 768, 4096, 16384), seconds=0.2):
    """GB/s read by one core's norm2 and inner-product block kernels on buffers of ``sizes_kib``."""
    import numba

    from pygrid.accelerator import reductions_numba

    print(f"reduction kernels on one core, {time.strftime('%H:%M:%S', time.gmtime())} UTC; GB/s read, "
          "best of 5")
    for dtype, nsimd in (("float64", 8), ("float32", 16)):
        m = reductions_numba.kernels(nsimd, np.dtype(dtype))
        n2, ip = m.norm2_block, m.inner_block

        @numba.njit(nogil=True)
        def loop_n2(a, osites, reps, part):
            for _ in range(reps):
                n2(0, osites, a, 12, osites, part)

        @numba.njit(nogil=True)
        def loop_ip(a, b, osites, reps, pr, pi):
            for _ in range(reps):
                ip(0, osites, a, b, 12, osites, pr, pi)

        for kib in sizes_kib:
            osites = max(1, kib * 1024 // (24 * nsimd * np.dtype(dtype).itemsize))
            a = np.random.default_rng(1).random(osites * 24 * nsimd).astype(dtype)
            b = a[::-1].copy()
            part, pi = np.zeros(1), np.zeros(1)
            loop_n2(a, osites, 1, part)
            loop_ip(a, b, osites, 1, part, pi)
            reps = max(1, int(2e8 // a.nbytes))
            t_n2 = min(_timed(lambda: loop_n2(a, osites, reps, part)) for _ in range(5))
            t_ip = min(_timed(lambda: loop_ip(a, b, osites, reps, part, pi)) for _ in range(5))
            print(f"  {dtype} {a.nbytes / 1024:8.0f} KiB   norm2 {reps * a.nbytes / t_n2 / 1e9:6.1f}   "
                  f"inner product {2 * reps * a.nbytes / t_ip / 1e9:6.1f}", flush=True)


def _timed(f):
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", default="16.16.16.16")
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--baseline", default=None)
    ap.add_argument("--per-core", action="store_true", help="the block kernels on one core, no launch")
    args = ap.parse_args()
    if args.per_core:
        per_core()
        return
    dims = tuple(int(v) for v in args.grid.split("."))
    be = get_backend("openmp")
    old = load_baseline(args.baseline) if args.baseline else None
    print(f"reductions on {args.grid}, {be.describe()}, {time.strftime('%H:%M:%S', time.gmtime())} UTC; "
          "% of a copy of the same working set, median (range) over the rounds")
    for prec in ("double", "single"):
        g = pg.GridCartesian(dims, precision=prec)
        x, y = pg.LatticeFermion(g, prec), pg.LatticeFermion(g, prec)
        pg.ParallelRNG(g, [1, 2, 3, 4]).gaussian(x)
        pg.ParallelRNG(g, [5, 6, 7, 8]).gaussian(y)
        with x.view(pg.CpuRead) as xa, y.view(pg.CpuRead) as ya:
            pass
        nb, dt = xa.nbytes, xa.dtype
        # copies that read and write as many bytes in all as one field (norm2) and two (inner product)
        one = touched(nb // 2 // dt.itemsize, dt, 1), touched(nb // 2 // dt.itemsize, dt, 2)
        two = touched(nb // dt.itemsize, dt, 1), touched(nb // dt.itemsize, dt, 2)
        cases = {"pg.norm2": (1, lambda: pg.norm2(x)),
                 "pg.inner_product": (2, lambda: pg.inner_product(x, y))}
        want_n2, want_ip = pg.norm2(x), pg.inner_product(x, y)  # compiled before the rounds
        if old is not None:
            # in single the two may round the products' sums differently (SINGLE_GROUP)
            rtol = 1e-12 if prec == "double" else 2.0**-20
            scale = np.sqrt(want_n2 * pg.norm2(y))      # |<x, y>| at most
            if abs(old.norm2(be, xa) - want_n2) > rtol * want_n2 or \
                    abs(old.inner_product(be, xa, ya) - want_ip) > max(rtol, 1e-10) * scale:
                raise SystemExit("the baseline's reductions disagree with the library's")
            cases["baseline norm2"] = (1, lambda: old.norm2(be, xa))
            cases["baseline inner_product"] = (2, lambda: old.inner_product(be, xa, ya))

        res = {k: [] for k in cases}
        for _ in range(args.rounds):
            # the roofline's copy: the faster of cached and streaming stores (pygrid.bench.roofline)
            copy_rate = {n: max(n * nb / rate(lambda c=c, b=b: c(b[1], b[0]))
                                for c in (copy_kernel, stream_copy_kernel))
                         for n, b in ((1, one), (2, two))}
            for k, (nf, f) in cases.items():
                res[k].append(nf * nb / rate(f) / copy_rate[nf])
        print(f"  {prec} ({nb / 1e6:.1f} MB a field):")
        for k, v in res.items():
            print(f"    {k:24s} {100 * np.median(v):5.1f}% ({100 * min(v):.0f}-{100 * max(v):.0f})")


if __name__ == "__main__":
    main()
