"""Core expression benchmark: fused kernels against numpy and a copy kernel.

    python benchmarks/bench_core.py [--grid 16.16.16.16] [--threads 2] [--iterations N]

Measures, in one run: z @= a*x + y on LatticeFermion, chi @= U*psi (colour
matrix times colour vector), the same arithmetic in plain numpy on
to_numpy() arrays, and a parallel numba copy of a fermion field (the
bandwidth reference).  Also the compile time of a new expression and the
time to load it from the disk cache in a fresh process.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numba
import numpy as np

import pygrid as pg


@numba.njit(parallel=True, cache=True)
def _copy(dst, src):
    n = src.shape[0]
    for i in numba.prange(n):
        dst[i] = src[i]


def timeit(fn, iterations, warmup=2):
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def bench(dims, precision, iterations):
    grid = pg.GridCartesian(dims, precision=precision)
    rng = pg.ParallelRNG(grid, seed=[1, 2, 3, 4])
    x, y, z, psi, chi = (pg.LatticeFermion(grid, precision) for _ in range(5))
    for f in (x, y, z, psi, chi):
        rng.gaussian(f)  # touch every page: never benchmark untouched memory
    U = pg.LatticeColourMatrix(grid, precision)
    rng.random_su3(U)
    cv, cw = pg.Lattice(grid, pg.ColourVector(), precision), pg.Lattice(grid, pg.ColourVector(), precision)
    rng.gaussian(cv)
    rng.gaussian(cw)
    a = 0.5
    V = grid.gsites
    real = 8 if precision == "double" else 4
    out = {"grid": list(dims), "precision": precision, "nsimd": grid.nsimd, "threads": numba.get_num_threads()}

    t = timeit(lambda: z.assign(a * x + y), iterations)
    nbytes = 3 * V * 12 * 2 * real
    out["axpy"] = {"seconds": t, "GBps": nbytes / t / 1e9, "GFlops": V * 12 * 4 / t / 1e9}

    xa, ya = x.to_numpy(), y.to_numpy()
    za = np.empty_like(xa)

    def np_axpy():
        np.multiply(xa, a, out=za)
        za.__iadd__(ya)

    t = timeit(np_axpy, iterations)
    out["numpy_axpy"] = {"seconds": t, "GBps": nbytes / t / 1e9, "GFlops": V * 12 * 4 / t / 1e9}

    with x.view(pg.CpuRead) as src, z.view(pg.CpuWrite) as dst:
        t = timeit(lambda: _copy(dst, src), iterations)
    out["copy"] = {"seconds": t, "GBps": 2 * V * 12 * 2 * real / t / 1e9}

    t = timeit(lambda: cw.assign(U * cv), iterations)
    su3_bytes = V * (9 + 3 + 3) * 2 * real
    su3_flops = V * 66  # 9 complex multiplies (6) + 6 complex adds (2)
    out["su3_matvec"] = {"seconds": t, "GBps": su3_bytes / t / 1e9, "GFlops": su3_flops / t / 1e9}
    ua, va = U.to_numpy(), cv.to_numpy()
    t = timeit(lambda: np.einsum("...ab,...b->...a", ua, va), max(3, iterations // 4))
    out["numpy_su3_matvec"] = {"seconds": t, "GBps": su3_bytes / t / 1e9, "GFlops": su3_flops / t / 1e9}
    return out


_PROBE = """
import sys, time
t0 = time.perf_counter()
import pygrid as pg
t1 = time.perf_counter()
g = pg.GridCartesian([4, 4, 4, 4])
x = pg.LatticeFermion(g); y = pg.LatticeFermion(g); U = pg.LatticeColourMatrix(g)
t2 = time.perf_counter()
y @= pg.adj(U) * pg.cshift(x, 2, 1) + ({tag} + 0.25j) * pg.cshift(x, 1, -2) * {tag}
t3 = time.perf_counter()
print(t1 - t0, t3 - t2)
"""


def compile_times():
    """First use of a new expression (compiles) and a new process loading it (disk cache)."""
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, PYGRID_CACHE_DIR=d, NUMBA_CACHE_DIR=os.path.join(d, "numba"))
        code = _PROBE.replace("{tag}", "1.5")
        runs = []
        for _ in range(2):
            r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
            runs.append([float(v) for v in r.stdout.split()])
    return {"import_seconds": runs[1][0], "first_compile_seconds": runs[0][1], "disk_cache_load_seconds": runs[1][1]}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--grid", default="16.16.16.16")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    pg.init([], threads=args.threads) if args.threads else pg.init([])
    dims = [int(v) for v in args.grid.split(".")]
    results = {"compile": compile_times(), "runs": []}
    for prec in ("double", "single"):
        r = bench(dims, prec, args.iterations)
        results["runs"].append(r)
        print(f"\n{args.grid} {prec} Nsimd={r['nsimd']} threads={r['threads']}")
        for k in ("axpy", "numpy_axpy", "copy", "su3_matvec", "numpy_su3_matvec"):
            v = r[k]
            gf = f"{v['GFlops']:8.2f} GFlop/s" if "GFlops" in v else " " * 16
            print(f"  {k:18s} {v['seconds'] * 1e3:9.3f} ms {v['GBps']:8.2f} GB/s {gf}")
        print(f"  fused axpy / numpy axpy: {r['numpy_axpy']['seconds'] / r['axpy']['seconds']:.2f}x;"
              f" axpy bandwidth / copy bandwidth: {100 * r['axpy']['GBps'] / r['copy']['GBps']:.0f}%")
    c = results["compile"]
    print(f"\nnew expression: compile {c['first_compile_seconds']:.2f} s; "
          f"from disk cache in a new process {c['disk_cache_load_seconds']:.3f} s (import pygrid {c['import_seconds']:.2f} s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
