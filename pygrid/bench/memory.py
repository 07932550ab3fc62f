"""``pygrid benchmark memory``: streaming bandwidth, copy, triad and read, numba parallel and numpy.

Arrays hold as many reals as a LatticeFermion on the grid and are written
before they are timed (untouched pages read from the shared zero page and
would report cache bandwidth).  Bytes: copy 2 per element (read + write),
triad ``a = b + s*c`` 3 per element (2 flops); write-allocate traffic is not
counted, as in STREAM.  The copy runs twice, with cached and with streaming
(non-temporal) stores, which skip the write-allocate read; the faster is the
roofline of the other benchmarks.  ``read`` sums one array: what a reduction
(``pg.norm2``) can reach, which out of the caches can fall short of a copy.
"""
from __future__ import annotations

import numpy as np

from .kinds import Kind
from .report import Kernel, Run
from .roofline import measure_copies, read_kernel, touched, triad_kernel
from .units import real_bytes, real_dtype


def run(dims, precision, ctx):
    from .common import make_grid

    grid = make_grid(dims, precision, ctx.simd_layout)
    n = grid.gsites * 24
    rb = real_bytes(precision)
    dt = real_dtype(precision)
    r = Run("memory", tuple(grid.gdims), precision, tuple(grid.simd_layout), grid.nsimd)
    ctx.progress.step(f"memory {precision}: copy")
    copies = measure_copies(2 * n * rb, precision, ctx.timer, f"memory {precision} copy")
    r.roofline = min(copies, key=lambda k: k.seconds)
    a, b, c = touched(n, dt, 3), touched(n, dt, 4), touched(n, dt, 5)
    ctx.progress.step(f"memory {precision}: triad")
    t, tmin, it = ctx.timer(lambda: triad_kernel(a, b, c, 0.5), f"memory {precision} triad")
    r.kernels.append(Kernel("triad", "memory", t, tmin, it, n, 2, 3 * rb,
                            "a[i] = b[i] + s*c[i], parallel numba"))
    for k in copies:
        stores = ", streaming stores" if k.name == "copy_stream" else ""
        r.kernels.append(Kernel(k.name, "memory", k.seconds, k.seconds_min, k.iterations, n, 0, 2 * rb,
                                f"dst[i] = src[i], parallel numba{stores}"))
    ctx.progress.step(f"memory {precision}: read")
    t, tmin, it = ctx.timer(lambda: read_kernel(a), f"memory {precision} read")
    r.kernels.append(Kernel("read", "memory", t, tmin, it, n, 1, rb,
                            "s += a[i], parallel numba: reads only (the bound of a reduction)"))
    ctx.progress.step(f"memory {precision}: numpy triad and copy")
    s = dt(0.5)

    def np_triad():
        np.multiply(c, s, out=a)
        a.__iadd__(b)

    t, tmin, it = ctx.timer(np_triad, f"memory {precision} numpy triad")
    r.kernels.append(Kernel("numpy_triad", "numpy", t, tmin, it, n, 2, 3 * rb,
                            "np.multiply(c, s, out=a); a += b (reads a once more: 4 B-streams)"))
    t, tmin, it = ctx.timer(lambda: np.copyto(a, b), f"memory {precision} numpy copy")
    r.kernels.append(Kernel("numpy_copy", "numpy", t, tmin, it, n, 0, 2 * rb, "np.copyto(a, b)"))
    r.main, r.baseline = "triad", "numpy_triad"
    r.extra["elements"] = n
    r.extra["array_bytes"] = n * rb
    return r


KIND = Kind("memory", "streaming bandwidth: copy, triad and read, numba parallel and numpy, on written "
            "arrays", run)
