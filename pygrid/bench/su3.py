"""``pygrid benchmark su3``: colour matrix products z = x*y (and U*v), against numpy.

Flops per site of a 3x3 complex matrix product: 27 complex multiplies (6 flops)
and 18 complex adds (2 flops) = 27*6 + 18*2 = 198; bytes: x, y read, z written,
3 * 18 reals.  Matrix times vector: 9*6 + 6*2 = 66 flops, (18 + 6 + 6) reals.
"""
from __future__ import annotations

import numpy as np

from .common import lanes_note, make_grid, new_run
from .kinds import Kind
from .report import Kernel
from .roofline import measure_copy
from .units import real_bytes

MATMUL_FLOPS = 27 * 6 + 18 * 2     # 198
MATVEC_FLOPS = 9 * 6 + 6 * 2       # 66


def run(dims, precision, ctx):
    import pygrid as pg

    grid = make_grid(dims, precision, ctx.simd_layout)
    V = grid.gsites
    rb = real_bytes(precision)
    rng = pg.ParallelRNG(grid, list(ctx.seed))
    x, y, z = (pg.LatticeColourMatrix(grid, precision) for _ in range(3))
    for f in (x, y, z):
        rng.random_su3(f)
    v, w = (pg.Lattice(grid, pg.ColourVector(), precision) for _ in range(2))
    for f in (v, w):
        rng.gaussian(f)
    r = new_run("su3", grid, precision)
    note = lanes_note(grid, precision)
    if note:
        r.notes.append(note)

    ctx.progress.step(f"su3 {precision}: compiling and timing z = x*y")
    t, tmin, it = ctx.timer(lambda: z.assign(x * y), f"su3 {precision} x*y")
    r.kernels.append(Kernel("su3_mul", "pygrid", t, tmin, it, V, MATMUL_FLOPS, 3 * 18 * rb,
                            "z @= x*y, LatticeColourMatrix"))
    xa, ya = x.to_numpy(), y.to_numpy()
    za = np.empty_like(xa)
    ctx.progress.step(f"su3 {precision}: numpy matmul")
    t, tmin, it = ctx.timer(lambda: np.matmul(xa, ya, out=za), f"su3 {precision} numpy")
    r.kernels.append(Kernel("numpy_matmul", "numpy", t, tmin, it, V, MATMUL_FLOPS, 3 * 18 * rb,
                            "np.matmul(x, y, out=z) on complex [x,y,z,t,3,3] arrays"))

    ctx.progress.step(f"su3 {precision}: compiling and timing w = x*v")
    t, tmin, it = ctx.timer(lambda: w.assign(x * v), f"su3 {precision} x*v")
    r.kernels.append(Kernel("su3_matvec", "pygrid", t, tmin, it, V, MATVEC_FLOPS, (18 + 6 + 6) * rb,
                            "w @= x*v, colour matrix times colour vector"))
    va = v.to_numpy()
    ctx.progress.step(f"su3 {precision}: numpy einsum")
    t, tmin, it = ctx.timer(lambda: np.einsum("...ab,...b->...a", xa, va), f"su3 {precision} einsum")
    r.kernels.append(Kernel("numpy_matvec", "numpy", t, tmin, it, V, MATVEC_FLOPS, (18 + 6 + 6) * rb,
                            "np.einsum('...ab,...b->...a', x, v)"))

    ctx.progress.step(f"su3 {precision}: bandwidth roofline")
    r.roofline = measure_copy(3 * V * 18 * rb, precision, ctx.timer, f"su3 {precision} copy")
    r.main, r.baseline = "su3_mul", "numpy_matmul"
    return r


KIND = Kind("su3", "colour matrix products z = x*y (198 flop/site) and U*v (66 flop/site), "
            "vs np.matmul/np.einsum", run,
            device_reals=lambda Ls: 3 * 18 + 2 * 6)   # x, y, z and v, w
