"""A device backend's norm2 and inner product for several counts of partial sums, in one process.

    python benchmarks/bench_device_reductions.py --accelerator cuda --device-mem none \
        [--grid 32.32.32.32] [--rows 32768,131072,524288,1048576] [--loads 1,4]
        [--precision both] [--rounds 5]

The device reductions (pygrid/accelerator/reduction_kernels.py) run one thread a row of
partial sums, each summing every R-th number of the field; R is the backend's setting
(``REDUCE_ROWS`` on cuda, hip and the emulations; on sycl ``REDUCE_PARTIALS`` on a GPU and
``CPU_ROWS_PER_UNIT`` on a CPU device).  Fewer rows leave fewer loads in flight, more rows
more partial sums to add afterwards.  On cuda, hip and the emulations each thread may also load
several numbers at a time (``REDUCE_LOADS``, ``--loads``): more loads in flight for the same
rows.  Each round times, for every value of ``--rows`` (and of ``--loads``),
``norm2(x)`` and ``inner_product(x, y)`` on a spin-colour vector field in the device's memory,
and the device's copy of as many bytes; the table gives the median over the rounds in GB/s
read and as a share of the copy in the same round.  The values must agree between the settings
(to 1e-12 relative), or the script exits 1.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

import pygrid as pg
from pygrid.accelerator.backends import get_backend


def knob(backend):
    """The name of the backend's setting of the reductions' rows."""
    if backend.name == "sycl":
        return "CPU_ROWS_PER_UNIT" if backend.is_cpu else "REDUCE_PARTIALS"
    if hasattr(backend, "REDUCE_ROWS"):
        return "REDUCE_ROWS"
    raise SystemExit(f"the {backend.name} backend has no device reductions to tune: use --accelerator "
                     "cuda, hip or sycl")


def seconds_per_call(fn, seconds):
    fn()
    n, t0 = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds:
            return elapsed / n


def run(precision, dims, rows, loads, rounds, seconds):
    backend = get_backend()
    name = knob(backend)
    default = getattr(backend, name)
    loads = loads if hasattr(backend, "REDUCE_LOADS") else [None]
    default_loads = getattr(backend, "REDUCE_LOADS", None)
    settings = [(r, u) for u in loads for r in rows]
    grid = pg.GridCartesian(dims, precision=precision)
    x, y = pg.LatticeFermion(grid, precision), pg.LatticeFermion(grid, precision)
    rng = pg.ParallelRNG(grid, [5, 7])
    rng.gaussian(x)
    rng.gaussian(y)
    times = {r: ([], []) for r in settings}
    shares = {r: ([], []) for r in settings}
    values = {}
    with x.view(pg.AcceleratorRead) as a, y.view(pg.AcceleratorRead) as b:
        dtype = np.dtype(a.dtype)
        nbytes = int(a.size) * dtype.itemsize
        copy = backend.bench_copy(nbytes // dtype.itemsize // 2, dtype)  # reads and writes nbytes
        try:
            for _ in range(rounds):
                tcopy = seconds_per_call(copy, seconds) if copy else None
                for r in settings:
                    setattr(backend, name, r[0])
                    if r[1] is not None:
                        backend.REDUCE_LOADS = r[1]
                    getattr(backend, "_plans", {}).clear()  # sycl keeps its plans
                    values[r] = (backend.norm2(a), backend.inner_product(a, b))
                    for k, fn in enumerate((lambda: backend.norm2(a), lambda: backend.inner_product(a, b))):
                        t = seconds_per_call(fn, seconds)
                        times[r][k].append(t)
                        if tcopy:  # the copy moves nbytes; norm2 reads nbytes, the inner product twice
                            shares[r][k].append((k + 1) * tcopy / t)
        finally:
            setattr(backend, name, default)
            if default_loads is not None:
                backend.REDUCE_LOADS = default_loads
            getattr(backend, "_plans", {}).clear()
    ref = values[settings[0]]
    ok = all(abs(v[0] - ref[0]) <= 1e-12 * abs(ref[0]) and abs(v[1] - ref[1]) <= 1e-12 * abs(ref[1])
             for v in values.values())
    print(f"\n{backend.describe()}, {precision}, {'.'.join(map(str, dims))}: {nbytes / 1e6:.1f} MB a field; "
          f"{name} (default {default})"
          + (f", REDUCE_LOADS (default {default_loads})" if default_loads is not None else "")
          + f"; median of {rounds} rounds")
    print(f"{name:>18} {'loads':>5} {'norm2 GB/s':>11} {'of copy':>8} {'inner GB/s':>11} {'of copy':>8}")
    for r in settings:
        cells = []
        for k in range(2):
            t = statistics.median(times[r][k])
            cells.append(f"{(k + 1) * nbytes / t / 1e9:11.1f}")
            cells.append(f"{100 * statistics.median(shares[r][k]):7.1f}%" if shares[r][k] else f"{'-':>8}")
        print(f"{r[0]:>18} {'-' if r[1] is None else r[1]:>5} " + " ".join(cells))
    print(f"values agree between the settings: {'yes' if ok else 'NO'}")
    return ok


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--grid", default="32.32.32.32")
    p.add_argument("--rows", default="32768,131072,524288,1048576",
                   help="values of the backend's setting, comma-separated")
    p.add_argument("--loads", default="1,2,4",
                   help="numbers a thread loads at a time (cuda, hip, emulations), comma-separated")
    p.add_argument("--precision", default="both", choices=("double", "single", "both"))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seconds", type=float, default=0.2, help="timing of each kernel in a round")
    args, rest = p.parse_known_args(argv)
    pg.init(rest)
    dims = tuple(int(v) for v in args.grid.split("."))
    rows = [int(v) for v in args.rows.split(",")]
    precs = ("double", "single") if args.precision == "both" else (args.precision,)
    loads = [int(v) for v in args.loads.split(",")]
    ok = all([run(prec, dims, rows, loads, args.rounds, args.seconds) for prec in precs])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
