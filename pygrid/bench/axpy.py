"""``pygrid benchmark axpy``: z = a*x + y on LatticeFermion, against numpy.

Counts per site (12 complex components, ``a`` real): 12 * (2 mul + 2 add) = 48
flops; bytes: x and y read, z written, 3 * 24 reals.
"""
from __future__ import annotations

from .common import lanes_note, make_grid, new_run
from .kinds import Kind
from .report import Kernel
from .roofline import measure_copy
from .units import real_bytes

A = 0.5
FLOPS_PER_SITE = 12 * 4


def bytes_per_site(precision):
    return 3 * 24 * real_bytes(precision)


def run(dims, precision, ctx):
    import pygrid as pg

    grid = make_grid(dims, precision, ctx.simd_layout)
    V = grid.gsites
    rng = pg.ParallelRNG(grid, list(ctx.seed))
    x, y, z = (pg.LatticeFermion(grid, precision) for _ in range(3))
    for f in (x, y, z):
        rng.gaussian(f)  # every page written before it is timed
    r = new_run("axpy", grid, precision)
    note = lanes_note(grid, precision)
    if note:
        r.notes.append(note)
    nb = bytes_per_site(precision)
    field_bytes = V * 24 * real_bytes(precision)

    ctx.progress.step(f"axpy {precision}: compiling and timing z = a*x + y")
    t, tmin, it = ctx.timer(lambda: z.assign(A * x + y), f"axpy {precision} pygrid")
    r.kernels.append(Kernel("axpy", "pygrid", t, tmin, it, V, FLOPS_PER_SITE, nb,
                            "z @= a*x + y on LatticeFermion (one fused kernel)"))

    xa, ya = x.to_numpy(), y.to_numpy()
    holder = {}

    def np_axpy():
        holder["z"] = A * xa + ya

    ctx.progress.step(f"axpy {precision}: numpy baseline")
    t, tmin, it = ctx.timer(np_axpy, f"axpy {precision} numpy")
    r.kernels.append(Kernel("numpy_axpy", "numpy", t, tmin, it, V, FLOPS_PER_SITE, nb,
                            "z = a*x + y on numpy complex arrays (allocates z)"))

    ctx.progress.step(f"axpy {precision}: bandwidth roofline")
    r.roofline = measure_copy(3 * field_bytes, precision, ctx.timer, f"axpy {precision} copy")
    r.main, r.baseline = "axpy", "numpy_axpy"
    return r


KIND = Kind("axpy", f"z = a*x + y on LatticeFermion ({FLOPS_PER_SITE} flop/site), vs numpy", run)
