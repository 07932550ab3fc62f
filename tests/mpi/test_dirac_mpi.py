"""The Dirac operators and solvers on a lattice split over the job's ranks agree with one rank.

Operators are bit-identical (no sums); the solvers agree to their tolerance and
take the same number of iterations (their inner products differ in rounding).
"""
from __future__ import annotations

import shutil

import numpy as np
import pytest
from conftest import WORLD, grids, layouts, same_everywhere

import pygrid as pg
from pygrid.algorithms import ConjugateGradient, MdagMOperator, ReliableUpdateConjugateGradient, operand_grid
from pygrid.algorithms.operators import converted_operator

DIMS = (4, 4, 4, 8)

#: the hopping-kernel variants this backend has (pygrid.qcd.dslash.variant): both on the CPU backends
VARIANTS = ["unroll", "generic"] if pg.get_backend().name in ("openmp", "numpy") else ["generic"]


@pytest.fixture(params=VARIANTS)
def variant(request):
    """The Dirac kernels run as the hand-unrolled or the generic kernel (both with compressed halos
    and overlap)."""
    import dataclasses

    from pygrid import config

    before = config.current()
    config.set_current(dataclasses.replace(before, dslash=request.param))
    yield request.param
    config.set_current(before)


def setup(g, Ls=None):
    rng = pg.ParallelRNG(g, [11, 12])
    U = pg.qcd.random_gauge(g, rng)
    gf = g if Ls is None else pg.GridCartesian5D(g, Ls)
    psi = pg.LatticeFermion(gf)
    pg.ParallelRNG(gf, [13]).gaussian(psi)
    return U, psi


@pytest.mark.parametrize("layout", layouts(), ids=lambda m: ".".join(map(str, m)))
def test_wilson(layout, variant):
    res = []
    for g in grids(DIMS, layout):
        U, psi = setup(g)
        # links whole: whether they are read compressed follows the local fields' bytes against
        # the host's cache, so one rank and a split may differ there, and compressed links round
        # differently (test_wilson_on_compressed_links compares them)
        D = pg.qcd.WilsonFermion(U, 0.1, compress_links=False)
        e = pg.pick_checkerboard(0, psi)
        res.append([D.M(psi).to_numpy(), D.Mdag(psi).to_numpy(), D.Dhop(psi).to_numpy(),
                    D.Meooe(e).to_numpy(), D.MeooeDag(pg.pick_checkerboard(1, psi)).to_numpy()])
    for x, y in zip(*res):
        np.testing.assert_array_equal(same_everywhere(x), y)


@pytest.mark.skipif("unroll" not in VARIANTS, reason="the unrolled kernel runs on the CPU backends only")
@pytest.mark.parametrize("layout", layouts(), ids=lambda m: ".".join(map(str, m)))
def test_wilson_with_far_prefetch(layout, monkeypatch):
    """The unrolled kernel's prefetches for fields larger than the caches (forced here on a small
    lattice) change nothing, the halo branches included (links whole: compressed, they differ in
    rounding; see test_wilson_on_compressed_links)."""
    from pygrid.qcd import unrolled_launch as ul

    monkeypatch.setattr(ul, "FAR_BYTES", dict.fromkeys(ul.FAR_BYTES, 0))
    monkeypatch.setattr(ul, "_states", {})
    res = []
    for g in grids(DIMS, layout):
        U, psi = setup(g)
        D = pg.qcd.WilsonFermion(U, 0.1, compress_links=False)
        res.append([D.M(psi).to_numpy(), D.Dhop(psi).to_numpy()])
    for x, y in zip(*res):
        np.testing.assert_array_equal(same_everywhere(x), y)
    assert all(st.far for st in ul._states.values())


@pytest.mark.parametrize("structure", [("unroll", "wide"), ("unroll", "narrow"), ("generic", "auto")],
                         ids=["register_order", "tiled_order", "generic"])
@pytest.mark.parametrize("layout", layouts(), ids=lambda m: ".".join(map(str, m)))
def test_wilson_on_compressed_links(layout, structure):
    """Links read as two rows of SU(3) on a lattice split over the ranks give what whole links give
    on one rank, with boundary phases on the edge links: in both orders of the unrolled kernel
    (AVX-512's and AVX2's, whatever the host: --dslash-structure; the halo's links whole), and in
    the generic kernel (every backend's; the halo's links compressed after the local ones)."""
    import dataclasses

    from pygrid import config

    variant, structure = structure
    if variant not in VARIANTS:
        pytest.skip("the unrolled kernel runs on the CPU backends only")
    before = config.set_current(dataclasses.replace(config.current(), dslash=variant,
                                                    dslash_structure=structure))
    try:
        _wilson_on_compressed_links(layout)
    finally:
        config.set_current(before)


@pytest.mark.skipif("unroll" not in VARIANTS, reason="the unrolled kernel runs on the CPU backends only")
@pytest.mark.parametrize("layout", layouts(), ids=lambda m: ".".join(map(str, m)))
def test_wide_structure_past_the_register_reach(layout, monkeypatch):
    """The wide structure's 4D fields past the register reach (none, here) run their compressed
    links in the tiled order, the halo branches included, and give what whole links give on one
    rank."""
    import dataclasses

    from pygrid import config
    from pygrid.qcd import unrolled_launch as ul

    monkeypatch.setattr(ul, "REGISTER_BYTES", 0)
    monkeypatch.setattr(ul, "_states", {})
    before = config.set_current(dataclasses.replace(config.current(), dslash="unroll",
                                                    dslash_structure="wide"))
    try:
        _wilson_on_compressed_links(layout)
    finally:
        config.set_current(before)
    assert all(st.tiled_4d for st in ul._states.values() if st.Ls == 1) and ul._states


def _wilson_on_compressed_links(layout):
    res = []
    for g in grids(DIMS, layout):
        U, psi = setup(g)
        D = pg.qcd.WilsonFermion(U, 0.1, boundary_phases=[1, 1, 1j, -1], compress_links=g.decomposed)
        e, o = pg.pick_checkerboard(0, psi), pg.pick_checkerboard(1, psi)
        res.append([D.M(psi).to_numpy(), D.Dhop(psi).to_numpy(), D.Meooe(e).to_numpy(),
                    D.MeooeDag(o).to_numpy()])
        assert D.reads_compressed_links() == D.reads_compressed_links(0) == g.decomposed
    for x, y in zip(*res):
        np.testing.assert_allclose(same_everywhere(x), y, rtol=0, atol=1e-13 * np.abs(y).max())


@pytest.mark.parametrize("layout", layouts(), ids=lambda m: ".".join(map(str, m)))
def test_tiled_order_on_links_by_direction(layout):
    """The tiled order (AVX2's, forced) reads its local links whole but stored direction by direction
    (compressed_links.LinksByDirection) and the halo's from the exchanged rows: a lattice split over
    the ranks gives what one rank gives."""
    import dataclasses

    from pygrid import config

    if "unroll" not in VARIANTS:
        pytest.skip("the unrolled kernel runs on the CPU backends only")
    before = config.set_current(dataclasses.replace(config.current(), dslash="unroll",
                                                    dslash_structure="narrow"))
    try:
        res = []
        for g in grids(DIMS, layout):
            U, psi = setup(g)
            D = pg.qcd.WilsonFermion(U, 0.1, boundary_phases=[1, 1, 1j, -1], compress_links=False)
            e, o = pg.pick_checkerboard(0, psi), pg.pick_checkerboard(1, psi)
            res.append([D.M(psi).to_numpy(), D.Dhop(psi).to_numpy(), D.Meooe(e).to_numpy(),
                        D.MeooeDag(o).to_numpy()])
            assert {made.rows for _, made in D._links_c.values()} == {3}
        for x, y in zip(*res):
            np.testing.assert_allclose(same_everywhere(x), y, rtol=0, atol=1e-13 * np.abs(y).max())
    finally:
        config.set_current(before)


@pytest.mark.parametrize("layout", layouts(), ids=lambda m: ".".join(map(str, m)))
def test_domain_wall_and_mobius(layout, variant):
    res = []
    for g in grids(DIMS, layout):
        U, psi = setup(g, Ls=4)
        out = []
        for D in (pg.qcd.DomainWallFermion(U, 4, 0.1, 1.8), pg.qcd.MobiusFermion(U, 4, 0.1, 1.8, 1.5, 0.5)):
            o = pg.pick_checkerboard(1, psi)
            S = pg.qcd.SchurDiagMooeeOperator(D, 1)   # its fused hops, with their halo variants
            out += [D.M(psi).to_numpy(), D.Mdag(psi).to_numpy(), D.Meooe(o).to_numpy(),
                    D.MeooeDag(o).to_numpy(), S.M(o).to_numpy(), S.Mdag(o).to_numpy()]
        res.append(out)
    for x, y in zip(*res):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("layout", layouts(), ids=lambda m: ".".join(map(str, m)))
def test_schur_cg_wilson_and_dwf(layout):
    res = []
    for g in grids(DIMS, layout):
        U, psi = setup(g)
        W = pg.qcd.WilsonFermion(U, 0.1)
        xw, rw = pg.qcd.SchurRedBlackDiagMooeeSolve(ConjugateGradient(tol=1e-10, maxiter=500))(W, psi)
        _, p5 = setup(g, Ls=4)
        Dw = pg.qcd.DomainWallFermion(U, 4, 0.1, 1.8)
        xd, rd = pg.qcd.SchurRedBlackDiagMooeeSolve(ConjugateGradient(tol=1e-10, maxiter=500))(Dw, p5)
        res.append([xw.to_numpy(), rw.iterations, xd.to_numpy(), rd.iterations,
                    pg.norm2(W.M(xw) - psi) / pg.norm2(psi)])
    (xw, iw, xd, idd, r), (xw1, iw1, xd1, id1, r1) = res
    assert abs(iw - iw1) <= 1 and abs(idd - id1) <= 1
    np.testing.assert_allclose(xw, xw1, rtol=0, atol=1e-8 * np.abs(xw1).max())
    np.testing.assert_allclose(xd, xd1, rtol=0, atol=1e-8 * np.abs(xd1).max())
    assert r < 1e-18 and r1 < 1e-18


@pytest.mark.parametrize("layout", layouts(), ids=lambda m: ".".join(map(str, m)))
def test_reliable_update_schur_solve_on_the_single_layout(layout):
    """Single-precision iterations on the single grid's own SIMD layout (the same ranks), reliable
    updates in double: the solution of one rank.  Where the single layout cannot hold red-black
    fields (twice double's lanes on a rank's small lattice, as on 4 ranks with AVX-512's 16 lanes)
    they run on the double grid's layout."""
    from pygrid.qcd.fermion import native_grid

    res = []
    for g in grids(DIMS, layout):
        U, psi = setup(g)
        W = pg.qcd.WilsonFermion(U, 0.1)
        A_s = converted_operator(MdagMOperator(pg.qcd.schur.SchurOperator(W)), "single", native=True)
        gs = operand_grid(A_s)
        assert gs.mpi_layout == g.mpi_layout and gs.ldims[1:] == W.rb_grid.ldims[1:]
        assert gs.nsimd == (1 if native_grid(g, "single") is g else 2) * W.rb_grid.nsimd
        x, rec = pg.qcd.schur_solve(W, psi, ReliableUpdateConjugateGradient(tol=1e-10, maxiter=500))
        assert rec.converged and rec.full_residual < 1e-9
        res.append([x.to_numpy(), rec.iterations])
    (x, it), (x1, it1) = res
    assert abs(it - it1) <= 2
    np.testing.assert_allclose(x, x1, rtol=0, atol=1e-8 * np.abs(x1).max())


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler for the SIMT emulation")
@pytest.mark.skipif(pg.get_backend().name not in ("openmp", "numpy"),
                    reason="fields live in another backend's device memory in this pass")
@pytest.mark.parametrize("name", ["cuda-emulated", "opencl-emulated"])
def test_generated_c_across_ranks(name):
    """The CUDA and OpenCL sources, run under the SIMT emulation, on a split lattice: the Wilson
    operator (generic kernel: the pack, the interior and the boundary on the halo's half spinors)
    and a shifted expression."""
    res = []
    previous = pg.get_backend().name
    pg.set_backend(name)
    try:
        for g in grids(DIMS, layouts()[0]):
            U, psi = setup(g)
            e = pg.eval(pg.adj(pg.peek_lorentz(U, 3)) * pg.cshift(psi, 3, -1) + pg.cshift(psi, 0, 1))
            res.append([pg.qcd.WilsonFermion(U, 0.1).M(psi).to_numpy(), e.to_numpy()])
    finally:
        pg.set_backend(previous)
    for x, y in zip(*res):
        np.testing.assert_array_equal(same_everywhere(x), y)


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler for the SIMT emulation")
@pytest.mark.skipif(pg.get_backend().name not in ("openmp", "numpy"),
                    reason="fields live in another backend's device memory in this pass")
def test_cuda_launch_code_across_ranks(monkeypatch):
    """The cuda backend's own code on a split lattice, CuPy a stand-in (tests/cupy_standin.py) whose
    kernels are the CUDA source under the SIMT emulation: the pack into a device array, its copy
    into the page-locked host arrays, the messages, the halo's copy back to the device, the interior
    and the boundary; Wilson and domain wall, Dhop and its adjoint, against one rank."""
    import sys

    from cupy_standin import dirac_cupy

    from pygrid.accelerator import backends as _bk

    cp = dirac_cupy()
    monkeypatch.setitem(sys.modules, "cupy", cp)
    monkeypatch.setattr(_bk, "_backends", dict(_bk._backends))
    res = []
    previous = pg.get_backend().name
    pg.set_backend("cuda")
    try:
        for g in grids(DIMS, layouts()[0]):
            U, psi = setup(g)
            dwf = pg.qcd.DomainWallFermion(U, 4, 0.05, 1.8)
            psi5 = dwf.new_fermion()
            pg.ParallelRNG(psi5.grid, [4]).gaussian(psi5)
            D = pg.qcd.WilsonFermion(U, 0.1)
            res.append([D.M(psi).to_numpy(), D.Mdag(psi).to_numpy(), dwf.M(psi5).to_numpy(),
                        dwf.Mdag(psi5).to_numpy()])
    finally:
        pg.set_backend(previous)
    for x, y in zip(*res):
        np.testing.assert_array_equal(same_everywhere(x), y)
    from pygrid.qcd import kernels_generic as kg

    split = {kg.WILSON_PACK, kg.WILSON_HOP, kg.WILSON_HOP_5D}
    if WORLD.size == 2:  # four ranks of this lattice leave no site interior
        split |= {kg.WILSON_HOP_INTERIOR, kg.WILSON_HOP_5D_INTERIOR}
    assert {k.name for k in split} <= set(cp.launched)
    assert len(cp.pinned) == 4  # the packed rows and the halo, in 4D and in 5D


def test_generic_halo_device_copies_live_as_long_as_the_operator(monkeypatch):
    """The generic kernel's links' halo copied to the device (Backend.device_copy) once per gauge
    field, and released with the operator: nothing is kept on the device for a dead one, and
    nothing at all where the kernels read host arrays.  The spinor halo's host arrays are the
    backend's (Backend.host_array), made once for both calls."""
    import gc

    from pygrid import config
    from pygrid.qcd import generic_halo as gh

    monkeypatch.setattr(config, "_current", config.make_config(config.current(), dslash="generic"))
    g = grids(DIMS, layouts()[0])[0]
    U, psi = setup(g)
    D = pg.qcd.WilsonFermion(U, 0.1)
    backend = pg.get_backend()
    probe = np.zeros(3)
    on_host = backend.device_copy(probe) is probe
    copies, hosts = [], []
    real, real_host = type(backend).device_copy, type(backend).host_array
    monkeypatch.setattr(type(backend), "device_copy", lambda self, a: copies.append(a.shape) or real(self, a))
    monkeypatch.setattr(type(backend), "host_array",
                        lambda self, shape, dtype: hosts.append(shape) or real_host(self, shape, dtype))
    for h in gh._halos.values():  # the plan is shared with earlier tests' operators: arrays made afresh
        if h.plan() is D.stencil.plan:
            h._arrays.clear()
    D.M(psi)
    D.M(psi)
    halos = [h for h in gh._halos.values() if h.plan() is D.stencil.plan and h.Ls == 1
             and h.dtype == np.float64]
    assert len(halos) == 1
    assert len(hosts) == 2 and hosts[0][1:] == hosts[1][1:] == (1, 6, 2, g.nsimd)  # packed rows, halo
    if on_host:
        assert not halos[0]._links
        return
    assert len(halos[0]._links) == 1
    assert len([s for s in copies if s[1] == 36]) == 1  # the links' halo, once for both calls
    del D
    gc.collect()
    assert not halos[0]._links


@pytest.mark.parametrize("early", [False, True], ids=["host", "gpu"])
def test_the_comms_line_says_what_the_wait_means(monkeypatch, early):
    """The benchmark's comms line of a split Dhop: the share of the messages' time computation hid,
    where launches wait for their kernel; where they return early (the GPUs'), the host's wait
    alone, which says nothing of what the device did meanwhile, and no hidden fraction."""
    from types import SimpleNamespace

    from pygrid.bench import timing

    g = grids(DIMS, layouts()[0])[0]
    U, psi = setup(g)
    D = pg.qcd.WilsonFermion(U, 0.1)
    ctx = SimpleNamespace(timer=lambda fn, label: [fn() for _ in range(3)] and (1e-3, 1e-3, 3))
    monkeypatch.setattr(type(pg.get_backend()), "asynchronous", early)
    *_, extra = timing.time_operator(ctx, lambda: D.Dhop(psi), "Dhop", g)
    assert "in flight per call" in extra["comms"] and "packing" in extra["comms"]
    if early:
        assert "the host waited, while the device ran the interior" in extra["comms"]
        assert extra["_mpi"]["hidden_fraction"] is None
    else:
        assert "hidden by computation" in extra["comms"]
        assert 0 <= extra["_mpi"]["hidden_fraction"] <= 1
