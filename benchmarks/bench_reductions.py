"""norm2 and the inner product on the openmp backend against a copy of their working set, in one process.

    python benchmarks/bench_reductions.py [--grid 16.16.16.16] [--rounds 11] \
        [--baseline OLD_reductions_numba.py]

Each round times a parallel copy moving as many bytes as the reduction reads (the
roofline of ``pygrid benchmark axpy``), then ``pg.norm2(x)`` or ``pg.inner_product(x, y)``
through the library, each for 0.15 s; the ratio to
the copy is taken within the round, so the machine's slow and fast phases cancel, and
the median and range over the rounds are printed.  (``pygrid benchmark axpy`` sets them
against ``np.vdot``; numpy's BLAS threads spin on after a call and would take the cores
from the copy of the next round here.)  With ``--baseline`` (the file
``reductions_numba.py`` of another commit, e.g.
``git show 66706b6:pygrid/accelerator/reductions_numba.py > /tmp/old.py``) its
``norm2``/``inner_product`` run in the same rounds on the same buffers, and must agree.
"""
from __future__ import annotations

import argparse
import time
import types

import numpy as np

import pygrid as pg
from pygrid.accelerator.backends import get_backend
from pygrid.bench.roofline import copy_kernel, touched


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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", default="16.16.16.16")
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--baseline", default=None)
    args = ap.parse_args()
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
            if abs(old.norm2(be, xa) - want_n2) > 1e-12 * want_n2 or \
                    abs(old.inner_product(be, xa, ya) - want_ip) > 1e-10 * abs(want_ip):
                raise SystemExit("the baseline's reductions disagree with the library's")
            cases["baseline norm2"] = (1, lambda: old.norm2(be, xa))
            cases["baseline inner_product"] = (2, lambda: old.inner_product(be, xa, ya))

        res = {k: [] for k in cases}
        for _ in range(args.rounds):
            copy_rate = {1: nb / rate(lambda: copy_kernel(one[1], one[0])),
                         2: 2 * nb / rate(lambda: copy_kernel(two[1], two[0]))}
            for k, (nf, f) in cases.items():
                res[k].append(nf * nb / rate(f) / copy_rate[nf])
        print(f"  {prec} ({nb / 1e6:.1f} MB a field):")
        for k, v in res.items():
            print(f"    {k:24s} {100 * np.median(v):5.1f}% ({100 * min(v):.0f}-{100 * max(v):.0f})")


if __name__ == "__main__":
    main()
