"""``pygrid benchmark dwf``: the domain-wall (Shamir) hopping term on a 5D grid.

Uses ``pg.qcd.DomainWallFermion(U, Ls, mass, M5)`` and its ``Dhop(psi, out=chi)``
(the 4D Wilson hopping term on every s slice).  Counts per 5D site: 1320 flops
(Grid's count); bytes: the compulsory traffic, the spinor read once and the result
written (48 reals) and the 4 links of the 4D site shared by its Ls slices (72 / Ls
reals).  The roofline is a copy of that working set in the same run.  Verified once on a 4^4 x
Ls lattice (4 sites a rank in a split dimension) against :func:`pygrid.qcd.reference.dhop`
applied slice by slice.
"""
from __future__ import annotations

import numpy as np

from ..qcd.kernels_wilson import FLOPS_PER_SITE
from .common import NO_NUMPY_UNDER_MPI, check_red_black, dirac_run, make_grid, verify_dims
from .kinds import Kind
from .report import Kernel
from .roofline import measure_copy
from .timing import mpi_summary, time_operator
from .units import dotted, real_bytes
from .wilson import MASS, VERIFY_DIMS, device_reals, dhop_reference, numpy_matmul_kernel

M5 = 1.8


def reals_per_site(Ls):
    return 2 * 24 + 4 * 18 / Ls


def operator_class():
    """The operator this benchmark times."""
    from ..qcd import DomainWallFermion

    return DomainWallFermion


def _setup(grid4, Ls, precision, seed):
    import pygrid as pg
    import pygrid.qcd as qcd

    rng = pg.ParallelRNG(grid4, list(seed))
    U = qcd.random_gauge(grid4, rng, precision)
    D = operator_class()(U, Ls, MASS, M5)
    grid5 = getattr(D, "grid", None) or pg.GridCartesian5D(grid4, Ls)
    rng5 = pg.ParallelRNG(grid5, list(seed))
    psi, chi = pg.LatticeFermion(grid5, precision), pg.LatticeFermion(grid5, precision)
    rng5.gaussian(psi)
    rng5.gaussian(chi)
    return U, D, psi, chi


def verify(precision, ctx):
    Ls = 4
    dims = verify_dims(VERIFY_DIMS)
    grid4 = make_grid(dims, precision, None)
    U, D, psi, chi = _setup(grid4, Ls, precision, (5, 6, 7, 8))
    ctx.progress.step(f"dwf {precision}: verifying Dhop on {dotted(dims)} x {Ls} against numpy")
    D.Dhop(psi, out=chi)
    ref = dhop_reference(U.to_numpy().astype(np.complex128), psi.to_numpy().astype(np.complex128),
                         lattice_axes=(1, 2, 3, 4))
    err = float(np.max(np.abs(chi.to_numpy() - ref)) / np.max(np.abs(ref)))
    return {"precision": precision, "lattice": list(dims) + [Ls], "max_rel_error": err,
            "tolerance": 1e-12 if precision == "double" else 1e-5}


def run(dims, precision, ctx):
    Ls = ctx.Ls
    grid4 = make_grid(dims, precision, ctx.simd_layout)
    rb = real_bytes(precision)
    U, D, psi, chi = _setup(grid4, Ls, precision, ctx.seed)
    V5 = grid4.osites * grid4.nsimd * Ls  # this rank's sites
    r = dirac_run("dwf", grid4, precision)
    ctx.progress.step(f"dwf {precision}: compiling and timing Dhop (Ls={Ls})")
    t, tmin, it, extra = time_operator(ctx, lambda: D.Dhop(psi, out=chi), f"dwf {precision} Dhop", grid4)
    r.kernels.append(
        Kernel(
            "Dhop",
            "pygrid",
            t,
            tmin,
            it,
            V5,
            FLOPS_PER_SITE,
            reals_per_site(Ls) * rb,
            f"DomainWallFermion.Dhop, Ls={Ls}; bytes: compulsory traffic, the spinor read once, the "
            f"result written, 4 links per 4D site shared by the Ls slices",
            extra,
        )
    )
    r.extra["Ls"] = Ls
    r.extra["M5"] = M5
    if grid4.decomposed:
        r.roofline = measure_copy(V5 * reals_per_site(Ls) * rb, precision, ctx.timer, f"dwf {precision} copy")
        r.notes.append(mpi_summary(r.kernels[0], grid4))
        r.notes.append(NO_NUMPY_UNDER_MPI)
        r.main = "Dhop"
        return r
    Ua, pa = U.to_numpy(), psi.to_numpy()
    ctx.progress.step(f"dwf {precision}: numpy reference Dhop")
    t, tmin, it = ctx.timer(lambda: dhop_reference(Ua, pa, (1, 2, 3, 4)), f"dwf {precision} numpy",
                            target=1.0, max_warmup=1)
    r.kernels.append(Kernel("numpy_Dhop", "numpy", t, tmin, it, V5, FLOPS_PER_SITE,
                            reals_per_site(Ls) * rb, "plain numpy Dhop (np.roll + einsum) per s slice"))
    ctx.progress.step(f"dwf {precision}: careful numpy Dhop (np.matmul, preallocated)")
    r.kernels.append(numpy_matmul_kernel(ctx, Ua, pa, (1, 2, 3, 4), V5, reals_per_site(Ls) * rb,
                                         f"dwf {precision} numpy matmul"))
    r.roofline = measure_copy(V5 * reals_per_site(Ls) * rb, precision, ctx.timer, f"dwf {precision} copy")
    r.main, r.baseline = "Dhop", "numpy_matmul_Dhop"
    return r


KIND = Kind("dwf", f"domain-wall (Shamir) hopping term on Ls slices (pg.qcd.DomainWallFermion), "
            f"{FLOPS_PER_SITE} flop per 5D site", run, verify, check_red_black, fifth_dim=True,
            device_reals=device_reals)
