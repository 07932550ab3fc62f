"""The Wilson hopping kernel with every operand in L1, against the core's FMA rate in the same run.

    python benchmarks/bench_wilson_in_cache.py [--Ls 8] [--precision double]

The kernel runs on one thread over 64 outer sites whose neighbour table points
at two source sites only, so the spinors and links it reads stay in L1 (the
result and the per-site forward links are the only streams).  This is the
kernel's compute ceiling: what it does per site and point when memory costs
nothing.  The FMA loop of bench_cpu_limits.py runs in the same process; the
ratio of the two is independent of the clock.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import types

import numpy as np

from pygrid.accelerator.host import read_only
from pygrid.cartesian.simd import default_nsimd
from pygrid.memory.aligned import aligned_empty
from pygrid.qcd import kernels_wilson as kw, unrolled_launch as ul

sys.path.insert(0, os.path.dirname(__file__))
from bench_cpu_limits import _aligned, _fma, _rate  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--Ls", type=int, default=8)
    ap.add_argument("--precision", choices=("double", "single"), default="double")
    args = ap.parse_args()
    dt = "float64" if args.precision == "double" else "float32"
    ns = default_nsimd(args.precision)  # the lane count a lattice gets on this host
    Ls, n4, nsrc = args.Ls, 64, 2
    rng = np.random.default_rng(1)
    # aligned to cache lines as fields are; tables read-only as the library passes them (the
    # kernel's specialisation for the library's argument types)
    psi = aligned_empty((nsrc * Ls, 12, 2, ns), dt)
    psi[:] = rng.random(psi.shape)
    u = aligned_empty((nsrc, 36, 2, ns), dt)
    u[:] = rng.random(u.shape)
    nbr = read_only((np.arange(8 * n4) % nsrc).astype(np.int32))
    perm = read_only(np.zeros(8 * n4, np.int32))
    uf = aligned_empty((n4, 36, 2, ns), dt)
    uf[:] = u[0]
    out = aligned_empty((n4 * Ls, 12, 2, ns), dt)
    out[:] = 0
    k = kw.kernel_for(ns, dt, Ls)
    # the launch state's tables (nbr, perm, lanes, pxor, n4) replaced by ones that keep every read
    # in L1; the rest as the library passes it (kernel_args follows the kernel's signature)
    st = types.SimpleNamespace(tables=(nbr, perm, read_only(np.zeros(8 * ns, np.int32)),
                                       read_only(np.zeros(8, np.int32)), n4, Ls),
                               tile=ul._tile(Ls, ns, dt), far=False)
    sites, none = read_only(np.arange(n4, dtype=np.int32)), read_only(np.zeros(1, dt))
    a = ul.kernel_args(st, out, psi, uf, u, np.array([-0.5, 0, -1, 1], dt), out, False) + (sites, none, none)
    k(0, n4, *a)
    flops = kw.FLOPS_PER_SITE * ns * n4 * Ls
    best = 0.0
    for _ in range(5):
        n, t = 0, time.perf_counter()
        while time.perf_counter() - t < 0.5:
            k(0, n4, *a)
            n += 1
        best = max(best, flops * n / (time.perf_counter() - t))
    b = _aligned(40)
    b[32:36] = 0.999
    fma = _rate(_fma, b, 50_000_000, 8)
    peak = fma * 2 * 4 * (1 if args.precision == "double" else 2)
    print(f"Dhop in L1, {args.precision}, Ls {Ls}, one thread: {best / 1e9:.2f} GFlop/s")
    print(f"FMA peak of this core, same run: {peak / 1e9:.2f} GFlop/s ({args.precision})")
    print(f"kernel at {100 * best / peak:.0f}% of the FMA peak")


if __name__ == "__main__":
    main()
