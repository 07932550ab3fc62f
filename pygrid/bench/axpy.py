"""``pygrid benchmark axpy``: the lattice linear algebra of a solver on LatticeFermion, against numpy.

Counts per site (12 complex components):

* ``z = a*x + y`` (``a`` real): 12 * (2 mul + 2 add) = 48 flops; x and y read, z
  written, 3 * 24 reals; as the statement ``z @= a*x + y`` and as ``pg.axpy(z, a, x, y)``;
* ``norm2(x)``: 24 multiply-adds = 48 flops; x read, 24 reals;
* ``inner_product(x, y)``: 12 complex multiply-adds = 96 flops; x and y read, 48 reals.

Each is set against a copy moving as many bytes as it does (so the copy meets the
same caches), and against numpy as a careful user writes it (``a * x + y``,
``np.vdot``).
"""
from __future__ import annotations

import numpy as np

from .common import lanes_note, make_grid, new_run
from .kinds import Kind
from .report import Kernel
from .roofline import measure_copy
from .units import real_bytes

A = 0.5
FLOPS_PER_SITE = 12 * 4
NORM2_FLOPS = 24 * 2
INNER_FLOPS = 12 * 8


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
    ctx.progress.step(f"axpy {precision}: pg.axpy")
    t, tmin, it = ctx.timer(lambda: pg.axpy(z, A, x, y), f"pg.axpy {precision} pygrid")
    r.kernels.append(Kernel("pg.axpy", "pygrid", t, tmin, it, V, FLOPS_PER_SITE, nb,
                            "pg.axpy(z, a, x, y), a solver's vector update: the same kernel, "
                            "no expression built"))

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

    rb = real_bytes(precision)
    for name, fn, np_fn, nfields, flops in (
        ("norm2", lambda: pg.norm2(x), lambda: np.vdot(xa, xa).real, 1, NORM2_FLOPS),
        ("inner_product", lambda: pg.inner_product(x, y), lambda: np.vdot(xa, ya), 2, INNER_FLOPS),
    ):
        ctx.progress.step(f"axpy {precision}: {name}, numpy and a copy of its working set")
        copy = measure_copy(nfields * field_bytes, precision, ctx.timer, f"{name} {precision} copy")
        for label, role, f, what in ((name, "pygrid", fn, f"pg.{name} (one reduction kernel)"),
                                     (f"numpy_{name}", "numpy", np_fn, "np.vdot on numpy complex arrays")):
            t, tmin, it = ctx.timer(f, f"{label} {precision}")
            r.kernels.append(Kernel(label, role, t, tmin, it, V, flops, nfields * 24 * rb,
                                    f"{what}; roofline: a copy of {nfields} field(s)", copy_gbps=copy.gbps))
    return r


KIND = Kind("axpy", f"z = a*x + y ({FLOPS_PER_SITE} flop/site), norm2 and inner product on LatticeFermion, "
                    "vs numpy", run, device_reals=lambda Ls: 3 * 24)   # x, y, z
