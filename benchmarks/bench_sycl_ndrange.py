"""The sycl backend's generated axpy kernel in its three launches, on the same USM buffers of the
CPU OpenCL device, in one process: the vector form a CPU device runs (a work-item a site, its lanes
one OpenCL vector), the SIMT form a GPU device runs (2D: the lane the fastest dimension, the site
the other), and the SIMT body launched 1D (one work-item per outer site and lane, the site and lane
found by a division, as the backend launched it before 2026-11-28).

    python benchmarks/bench_sycl_ndrange.py [--precision double|single] [--grid 16.16.16.16]

Prints the time per call of each launch (the 2D one with 1, 4 and 16 sites per work-group) and of
the device copy of one field (the backend's hand-written ``bench_copy``), and checks that all
launches write the same result.  The 1D body is the generated SIMT source with its prologue
rewritten here (docs/backends.md, "Two kinds of generated kernels").
"""
from __future__ import annotations

import argparse
import ctypes
import time

import numpy as np

import pygrid as pg
from pygrid.accelerator import codegen_c


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--precision", choices=("double", "single"), default="double")
    ap.add_argument("--grid", default="16.16.16.16")
    args = ap.parse_args()
    prec = args.precision
    pg.init(accelerator="sycl")
    be = pg.get_backend()
    g = pg.GridCartesian(tuple(int(v) for v in args.grid.split(".")), precision=prec)
    x, y, z = (pg.LatticeFermion(g, prec) for _ in range(3))
    srcs = []
    orig = codegen_c.kernel_source
    codegen_c.kernel_source = lambda *a, **k: srcs.append(orig(*a, **k)) or srcs[-1]
    try:
        for form in ("opencl", "opencl-simd"):
            be.FORM = form
            be._kernels.clear()
            pg.axpy(z, 0.3, x, y)
    finally:
        codegen_c.kernel_source = orig
        be.FORM = None
    (src, vsrc), n = srcs[-2:], g.nsimd
    one_d = (f"    const long idx = (long)get_global_id(0);\n"
             f"    if (idx >= (long)(osites) * {n}) return;\n"
             f"    const long o = idx / {n};\n"
             f"    const long l = idx - o * {n};")
    # OpenCL's dimension 0 is the last of the SYCL range dpctl submits: the lane
    two_d = "    const long l = (long)get_global_id(0);\n    const long o = (long)get_global_id(1);"
    two_d += "\n    if (o >= (long)(osites)) return;"
    if two_d not in src:
        raise SystemExit("the generated kernel's prologue changed: update this benchmark")
    k1 = be._build(src.replace(two_d, one_d), codegen_c.KERNEL_NAME)
    k2 = be._build(src, codegen_c.KERNEL_NAME)
    k3 = be._build(vsrc, codegen_c.KERNEL_NAME)
    dt = np.float64 if prec == "double" else np.float32
    osites, size = g.osites, g.osites * 24 * n
    rng = np.random.default_rng(1)
    xa, ya = (be.to_device(rng.normal(size=size).astype(dt)) for _ in range(2))
    za, zb, zc = (be.to_device(np.zeros(size, dt)) for _ in range(3))
    cf = be.to_device(np.array([0.3, 0.0], dt))
    copy = be.bench_copy(size, dt)

    def per_call(f, calls=50):
        f()
        t0 = time.perf_counter()
        for _ in range(calls):
            f()
        return (time.perf_counter() - t0) / calls * 1e6

    tpb = codegen_c.threads_per_block()
    blocks = -(-osites * n // tpb)
    print(f"axpy on {args.grid}, {prec}, Nsimd {n}, {be.describe()}, "
          f"{time.strftime('%H:%M:%S', time.gmtime())} UTC; us per call")
    t1 = per_call(lambda: be.queue.submit(
        k1, [za.usm_data, xa.usm_data, ya.usm_data, cf.usm_data, ctypes.c_int(osites)],
        [blocks * tpb], [tpb]).wait())
    print(f"  1D, {tpb} work-items a group (the launch before):    {t1:8.0f}")
    for sites in (1, 4, 16):
        if osites % sites:
            continue
        t2 = per_call(lambda: be.queue.submit(
            k2, [zb.usm_data, xa.usm_data, ya.usm_data, cf.usm_data, ctypes.c_int(osites)],
            [osites, n], [sites, n]).wait())
        print(f"  2D, {sites:2d} sites x {n} lanes a group:              {t2:8.0f}"
              f"   ({t1 / t2:.1f}x the 1D launch)")
    t3 = per_call(lambda: be.queue.submit(
        k3, [zc.usm_data, xa.usm_data, ya.usm_data, cf.usm_data, ctypes.c_int(osites)], [osites]).wait())
    print(f"  vector form, a work-item a site:                 {t3:8.0f}   ({t1 / t3:.1f}x the 1D launch)")
    print(f"  device copy of one field:                        {per_call(copy):8.0f}")
    results = [np.asarray(z_.get()) for z_ in (za, zb, zc)]
    if not all(np.array_equal(results[0], r) for r in results[1:]):
        raise SystemExit("the launches wrote different results")
    print("  all launches wrote the same result")


if __name__ == "__main__":
    main()
