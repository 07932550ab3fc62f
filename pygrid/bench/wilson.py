"""``pygrid benchmark wilson``: the Wilson hopping term ``Dhop``, against a plain numpy reference.

Uses ``pg.qcd.WilsonFermion(U, mass).Dhop(psi, out=chi)``.  Counts per site:
``FLOPS_PER_SITE`` = 1320 flops (Grid's count, 8 Nc (7 + 16 Nc)); bytes: the compulsory
traffic, what a perfect kernel must move: the spinor read once (24 reals), the 4 links
stored at the site (72 reals; U(x-mu) is the neighbour's) and the result written (24 reals)
= 120 reals = 960 B in double, 480 B in single; where the operator reads its links compressed
(two rows of each SU(3) matrix, on fields larger than the caches: ``compressed_links.compress_links``)
a perfect kernel moves 12 reals a link, 96 reals = 768 B in double, and the Dhop row counts
those.  The roofline is a copy of the same
working set (psi, U and the result) in the same run, so no kernel can pass 100%
except by what the cache keeps between calls.

Before timing, the operator is checked once on a 4^4 lattice (4 sites a rank in a split
dimension) against
:func:`pygrid.qcd.reference.dhop`, written with np.roll and einsum from the
definition in docs/conventions.md, independently of the kernel.
"""
from __future__ import annotations

import numpy as np

from ..qcd.kernels_wilson import FLOPS_PER_SITE
from ..qcd.reference import dhop as dhop_reference
from .common import NO_NUMPY_UNDER_MPI, check_red_black, dirac_run, make_grid, verify_dims
from .kinds import Kind
from .report import Kernel
from .roofline import measure_copy
from .timing import mpi_summary, time_operator
from .units import dotted, real_bytes

REALS_PER_SITE = 24 + 4 * 18 + 24   # 120
REALS_PER_SITE_COMPRESSED = 24 + 4 * 12 + 24   # 96
BYTE_MODEL = "compulsory traffic: the spinor read once, 4 links per site, the result written"
BYTE_MODEL_COMPRESSED = ("compulsory traffic: the spinor read once, 4 links per site as two rows of each "
                         "SU(3) matrix (the links compressed), the result written")
VERIFY_DIMS = (4, 4, 4, 4)
MASS = 0.1


def operator_class():
    """The operator this benchmark times."""
    from ..qcd import WilsonFermion

    return WilsonFermion


def _setup(grid, precision, seed):
    import pygrid as pg
    import pygrid.qcd as qcd

    rng = pg.ParallelRNG(grid, list(seed))
    U = qcd.random_gauge(grid, rng, precision)
    psi, chi = pg.LatticeFermion(grid, precision), pg.LatticeFermion(grid, precision)
    rng.gaussian(psi)
    rng.gaussian(chi)   # written before it is timed
    return U, psi, chi


def verify(precision, ctx):
    """Max relative error of Dhop against dhop_reference on a 4^4 lattice (``verify_dims``)."""
    W = operator_class()
    dims = verify_dims(VERIFY_DIMS)
    grid = make_grid(dims, precision, None)
    U, psi, chi = _setup(grid, precision, (5, 6, 7, 8))
    ctx.progress.step(f"wilson {precision}: verifying Dhop on {dotted(dims)} against numpy")
    W(U, MASS).Dhop(psi, out=chi)
    ref = dhop_reference(U.to_numpy().astype(np.complex128), psi.to_numpy().astype(np.complex128))
    err = float(np.max(np.abs(chi.to_numpy() - ref)) / np.max(np.abs(ref)))
    return {"precision": precision, "lattice": list(dims), "max_rel_error": err,
            "tolerance": 1e-12 if precision == "double" else 1e-5}


def run(dims, precision, ctx):
    W = operator_class()
    grid = make_grid(dims, precision, ctx.simd_layout)
    V = grid.osites * grid.nsimd  # this rank's sites (all of them on one rank)
    rb = real_bytes(precision)
    U, psi, chi = _setup(grid, precision, ctx.seed)
    D = W(U, MASS)
    r = dirac_run("wilson", grid, precision)
    ctx.progress.step(f"wilson {precision}: compiling and timing Dhop")
    t, tmin, it, extra = time_operator(ctx, lambda: D.Dhop(psi, out=chi), f"wilson {precision} Dhop", grid)
    compressed = D.reads_compressed_links()
    reals, model = ((REALS_PER_SITE_COMPRESSED, BYTE_MODEL_COMPRESSED) if compressed
                    else (REALS_PER_SITE, BYTE_MODEL))
    r.kernels.append(Kernel("Dhop", "pygrid", t, tmin, it, V, FLOPS_PER_SITE, reals * rb,
                            "WilsonFermion.Dhop(psi, out=chi); bytes: " + model, extra))
    r.roofline = measure_copy(V * reals * rb, precision, ctx.timer, f"wilson {precision} copy")
    r.extra["byte_model"] = model
    r.extra["compressed_links"] = compressed
    if compressed:
        r.notes.append("the links read compressed (two rows of each SU(3) matrix): 12 reals a link in the "
                       "byte count and the roofline; --no-compress-links reads them whole")
    r.extra["mass"] = MASS
    if grid.decomposed:
        r.notes.append(mpi_summary(r.kernels[0], grid))
        r.notes.append(NO_NUMPY_UNDER_MPI)
        r.main = "Dhop"
        return r
    Ua, pa = U.to_numpy(), psi.to_numpy()
    ctx.progress.step(f"wilson {precision}: numpy reference Dhop")
    t, tmin, it = ctx.timer(
        lambda: dhop_reference(Ua, pa), f"wilson {precision} numpy", target=1.0, max_warmup=1
    )
    r.kernels.append(Kernel("numpy_Dhop", "numpy", t, tmin, it, V, FLOPS_PER_SITE, REALS_PER_SITE * rb,
                            "plain numpy Dhop (np.roll + einsum) on to_numpy() arrays"))
    ctx.progress.step(f"wilson {precision}: careful numpy Dhop (np.matmul, preallocated)")
    r.kernels.append(numpy_matmul_kernel(ctx, Ua, pa, (0, 1, 2, 3), V, REALS_PER_SITE * rb,
                                         f"wilson {precision} numpy matmul"))
    r.main, r.baseline = "Dhop", "numpy_matmul_Dhop"
    return r


def numpy_matmul_kernel(ctx, Ua, pa, axes, sites, bytes_per_site, label):
    """The row of the careful numpy Dhop (pygrid.bench.numpy_dhop), timed on the same arrays."""
    from .numpy_dhop import MatmulDhop

    D, out = MatmulDhop(Ua, axes), np.empty_like(pa)
    t, tmin, it = ctx.timer(lambda: D(pa, out), label, target=1.0, max_warmup=1)
    return Kernel("numpy_matmul_Dhop", "numpy", t, tmin, it, sites, FLOPS_PER_SITE, bytes_per_site,
                  "numpy as a careful user writes it: np.matmul for colour and spin, preallocated arrays")


def device_reals(Ls=1):
    """Reals per 4D site on the device during a run: the links, the operator's links of each
    checkerboard (its even-odd hops'), and Ls slices of psi and chi."""
    return 2 * 4 * 18 + 2 * 24 * Ls


KIND = Kind("wilson", f"Wilson hopping term Dhop (pg.qcd.WilsonFermion), {FLOPS_PER_SITE} flop/site, "
            "vs numpy (np.matmul with preallocated arrays, and np.roll+einsum)", run, verify, check_red_black,
            device_reals=lambda Ls: device_reals())
