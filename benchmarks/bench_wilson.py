"""Wilson Dhop benchmark, Grid-style: GFlop/s, GB/s, a plain numpy Dhop and the copy-bandwidth roofline.

    python benchmarks/bench_wilson.py                  # 8^4 and 16^4, double and single, 2 threads
    python benchmarks/bench_wilson.py --large          # also 24^4
    python benchmarks/bench_wilson.py --grid 8.8.8.8 --precision double

Counting (stated in every table):
  flops  1320 per site (Grid's count, 8 Nc (7 + 16 Nc));
  bytes  per site, no cache reuse assumed: 8 neighbour spinors (24 reals each)
         + 8 links (18 reals) + the result (24 reals) = 360 reals
         = 2880 B double, 1440 B single (the "no reuse" line of ANCHORS.md).
  roofline = (bandwidth of a numba parallel copy, measured in the same run) x 1320 / bytes per site.

``run_wilson_benchmark(grid_dims, precision, iterations, warmup, threads)`` returns the
figures as a dict, for ``pygrid benchmark wilson``.  Timings on a shared machine are
noisy: medians are reported.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import pygrid as pg
import pygrid.qcd  # noqa: F401
from pygrid.qcd.kernels_wilson import FLOPS_PER_SITE

REALS_PER_SITE = 8 * 24 + 8 * 18 + 24  # neighbour spinors + links + result
_BYTES = {"double": 8, "single": 4}


def _median_time(fn, iterations, warmup):
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def numpy_dhop(U, psi, gammas):
    """What a user writes by hand: np.roll + einsum over the whole lattice (Grid's -1/2 included)."""
    res = np.zeros_like(psi)
    for mu in range(4):
        Umu = U[..., mu, :, :]
        t = np.einsum("...ab,...sb->...sa", Umu, np.roll(psi, -1, axis=mu))
        res += t - np.einsum("st,...tc->...sc", gammas[mu], t)
        t = np.einsum("...ba,...sb->...sa", np.roll(Umu, 1, axis=mu).conj(), np.roll(psi, 1, axis=mu))
        res += t + np.einsum("st,...tc->...sc", gammas[mu], t)
    return -0.5 * res


_copy_kernel = None


def _get_copy_kernel():
    global _copy_kernel
    if _copy_kernel is None:
        from numba import njit, prange

        @njit(parallel=True, fastmath=True, nogil=True)
        def copy(dst, src, nchunk):
            n = src.shape[0]
            for ch in prange(nchunk):
                lo = (ch * n) // nchunk
                hi = ((ch + 1) * n) // nchunk
                for i in range(lo, hi):
                    dst[i] = src[i]

        _copy_kernel = copy
    return _copy_kernel


def copy_bandwidth(nbytes=256 * 2 ** 20, iterations=5, threads=2):
    """GB/s of a numba parallel copy (read + write counted) of two touched arrays of nbytes each."""
    src = np.ones(nbytes // 8)
    dst = np.zeros_like(src)  # touched: never benchmark untouched memory (ANCHORS.md)
    k = _get_copy_kernel()
    nchunk = 8 * threads
    t = _median_time(lambda: k(dst, src, nchunk), iterations, 1)
    return 2 * src.nbytes / t / 1e9


def run_wilson_benchmark(grid_dims=(8, 8, 8, 8), precision="double", iterations=20, warmup=3, threads=2,
                         numpy_reference=True, roofline=True, copy_bytes=256 * 2 ** 20):
    """Time Wilson Dhop on ``grid_dims`` in ``precision``; returns a dict of figures.

    Keys: grid, precision, nsimd, threads, sites, seconds (median per call), gflops,
    gbytes_per_s, bytes_per_site, flops_per_site, numpy_seconds, numpy_gflops,
    speedup_vs_numpy, copy_gb_s, roofline_gflops, fraction_of_roofline.
    """
    dims = tuple(int(d) for d in grid_dims)
    pg.get_backend().set_threads(threads)
    grid = pg.GridCartesian(dims, precision=precision)
    rng = pg.ParallelRNG(grid, [1, 2, 3, 4])
    U = pg.qcd.random_gauge(grid, rng, precision=precision)
    psi = pg.LatticeFermion(grid, precision)
    rng.gaussian(psi)
    chi = pg.LatticeFermion(grid, precision)
    D = pg.qcd.WilsonFermion(U, 0.1)
    sites = int(np.prod(dims))
    t = _median_time(lambda: D.Dhop(psi, out=chi), iterations, warmup)
    bps = REALS_PER_SITE * _BYTES[precision]
    r = {
        "grid": dims, "precision": precision, "nsimd": grid.nsimd, "threads": pg.get_backend().threads()
        if hasattr(pg.get_backend(), "threads") else threads, "sites": sites,
        "seconds": t, "flops_per_site": FLOPS_PER_SITE, "bytes_per_site": bps,
        "gflops": FLOPS_PER_SITE * sites / t / 1e9, "gbytes_per_s": bps * sites / t / 1e9,
    }
    if numpy_reference:
        from pygrid.tensors.constant import Gamma

        cdt = np.complex128 if precision == "double" else np.complex64
        gam = [Gamma.mu[mu].array().astype(cdt) for mu in range(4)]
        Un, pn = U.to_numpy().astype(cdt), psi.to_numpy().astype(cdt)
        ref = numpy_dhop(Un, pn, gam)
        err = np.max(np.abs(chi.to_numpy() - ref)) / np.max(np.abs(ref))
        tn = _median_time(lambda: numpy_dhop(Un, pn, gam), max(1, min(3, iterations)), 0)
        r.update(numpy_seconds=tn, numpy_gflops=FLOPS_PER_SITE * sites / tn / 1e9, speedup_vs_numpy=tn / t,
                 max_rel_diff_vs_numpy=float(err))
    if roofline:
        bw = copy_bandwidth(copy_bytes, threads=threads)
        roof = bw * FLOPS_PER_SITE / bps
        r.update(copy_gb_s=bw, roofline_gflops=roof, fraction_of_roofline=r["gflops"] / roof)
    return r


def format_table(results):
    lines = [
        "Wilson Dhop: 1320 flops/site; bytes/site = 8 neighbour spinors + 8 links + result "
        "(2880 B double, 1440 B single); roofline = copy GB/s x flops/byte",
        f"{'grid':>12} {'prec':>6} {'Nsimd':>5} {'thr':>3} {'usec/call':>10} {'GFlop/s':>8} {'GB/s':>7} "
        f"{'numpy GF/s':>10} {'x numpy':>8} {'copy GB/s':>9} {'roofline':>8} {'%roof':>6}",
    ]
    for r in results:
        g = ".".join(map(str, r["grid"]))
        lines.append(
            f"{g:>12} {r['precision']:>6} {r['nsimd']:>5} {r['threads']:>3} {1e6 * r['seconds']:>10.1f} "
            f"{r['gflops']:>8.2f} {r['gbytes_per_s']:>7.1f} {r.get('numpy_gflops', float('nan')):>10.3f} "
            f"{r.get('speedup_vs_numpy', float('nan')):>8.1f} {r.get('copy_gb_s', float('nan')):>9.1f} "
            f"{r.get('roofline_gflops', float('nan')):>8.1f} {100 * r.get('fraction_of_roofline', float('nan')):>5.0f}%")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", help="one lattice, e.g. 16.16.16.16 (default: 8^4 and 16^4)")
    ap.add_argument("--large", action="store_true", help="also 24^4")
    ap.add_argument("--precision", choices=["double", "single", "both"], default="both")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--no-numpy", action="store_true", help="skip the plain numpy reference")
    a = ap.parse_args(argv)
    if a.grid:
        grids = [tuple(int(v) for v in a.grid.split("."))]
    else:
        grids = [(8,) * 4, (16,) * 4] + ([(24,) * 4] if a.large else [])
    precs = ["double", "single"] if a.precision == "both" else [a.precision]
    results = []
    for dims in grids:
        for prec in precs:
            results.append(run_wilson_benchmark(dims, prec, a.iterations, a.warmup, a.threads,
                                                numpy_reference=not a.no_numpy))
    print(format_table(results))
    return results


if __name__ == "__main__":
    main()
