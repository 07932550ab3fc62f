"""The Wilson operator against plain numpy, and its algebraic properties (Grid's conventions)."""
import gc
import os
import weakref

import numpy as np
import pytest
from conftest import backend
from numpy_refs import dhop_ref

import pygrid as pg
import pygrid.qcd  # noqa: F401  (pg.qcd)
from pygrid.qcd import dslash, kernels_wilson as kw, unrolled_launch as ul
from pygrid.tensors.constant import Gamma

G = [Gamma.mu[mu].array() for mu in range(4)]
G5 = Gamma.Five.array()

# a 4-way split of t (lane maps that are rotations, not xor swaps) takes the kernel's general permute path
DOUBLE_LAYOUTS = {(4, 4, 4, 4): [None, (2, 1, 2, 1)], (4, 4, 4, 8): [None, (1, 2, 1, 2), (1, 1, 1, 4)]}
SINGLE_LAYOUTS = {(4, 4, 4, 4): [None, (2, 2, 2, 1)], (4, 4, 4, 8): [None, (2, 1, 2, 2), (1, 1, 2, 4)]}
CASES = [(dims, lay, "double") for dims, lays in DOUBLE_LAYOUTS.items() for lay in lays] + \
        [(dims, lay, "single") for dims, lays in SINGLE_LAYOUTS.items() for lay in lays]
TOL = {"double": 1e-12, "single": 1e-5}
MASS = 0.1



# ---- the independent implementation: np.roll and einsum on to_numpy arrays ----

def m_ref(U, psi, mass, dag=False):
    return (4 + mass) * psi.astype(np.complex128) + dhop_ref(U, psi, dag)


def g5(a):
    return np.einsum("st,...tc->...sc", G5, a)


def setup(dims, layout, prec, seed=(1, 2, 3, 4)):
    grid = pg.GridCartesian(dims, simd_layout=layout, precision=prec)
    rng = pg.ParallelRNG(grid, list(seed))
    U = pg.qcd.random_gauge(grid, rng, precision=prec)
    psi = pg.LatticeFermion(grid, prec)
    rng.gaussian(psi)
    return grid, rng, U, psi


def relerr(a, b):
    return np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300)


# ---- spin projection tables ----------------------------------------------------
def test_projection_tables_reproduce_one_minus_gamma():
    psrc, pim, psg, rsrc, rim, rsg = kw.projection_tables()
    rng = np.random.default_rng(7)
    for dag in (0, 1):
        for p in range(8):
            mu = p % 4
            s = (-1.0 if p < 4 else 1.0) * (-1.0 if dag else 1.0)
            psi = rng.normal(size=4) + 1j * rng.normal(size=4)
            want = (np.eye(4) + s * G[mu]) @ psi
            h = np.empty(2, complex)
            for a in range(2):
                c = psg[dag, p, a] * (1j if pim[dag, p, a] else 1)
                h[a] = psi[a] + c * psi[psrc[dag, p, a]]
            got = np.empty(4, complex)
            got[:2] = h
            for b in range(2):
                d = rsg[dag, p, b] * (1j if rim[dag, p, b] else 1)
                got[2 + b] = d * h[rsrc[dag, p, b]]
            np.testing.assert_allclose(got, want, atol=1e-14)


def test_gamma_basis_is_grids_chiral_basis():
    np.testing.assert_allclose(G5, np.diag([1, 1, -1, -1]))
    for mu in range(4):
        np.testing.assert_allclose(G[mu] @ G[mu], np.eye(4), atol=1e-15)
        for nu in range(mu):
            np.testing.assert_allclose(G[mu] @ G[nu] + G[nu] @ G[mu], 0, atol=1e-15)


# ---- against numpy ---------------------------------------------------------------
@pytest.mark.parametrize("dims,layout,prec", CASES)
def test_dhop_and_m_against_numpy(dims, layout, prec):
    grid, rng, U, psi = setup(dims, layout, prec)
    D = pg.qcd.WilsonFermion(U, MASS)
    Un, pn = U.to_numpy(), psi.to_numpy()
    assert relerr(D.Dhop(psi).to_numpy(), dhop_ref(Un, pn)) < TOL[prec]
    assert relerr(D.Dhop(psi, dag=True).to_numpy(), dhop_ref(Un, pn, dag=True)) < TOL[prec]
    assert relerr(D.M(psi).to_numpy(), m_ref(Un, pn, MASS)) < TOL[prec]
    assert relerr(D.Mdag(psi).to_numpy(), m_ref(Un, pn, MASS, dag=True)) < TOL[prec]
    chi = pg.LatticeFermion(grid, prec)
    r = D.M(psi, out=chi)
    assert r is chi
    assert relerr(chi.to_numpy(), m_ref(Un, pn, MASS)) < TOL[prec]
    # aliasing: out is the input
    p2 = psi.copy()
    D.M(p2, out=p2)
    assert relerr(p2.to_numpy(), m_ref(Un, pn, MASS)) < TOL[prec]


def check_5d_hop(grid, U, D, Ls=3):
    """The hopping kernel on a 5D field, every slice against the numpy reference; returns the field."""
    g5d = pg.GridCartesian5D(grid, Ls)
    psi5 = pg.LatticeFermion(g5d)
    pg.ParallelRNG(g5d, [5, 6, 7, 8]).gaussian(psi5)
    out5 = pg.LatticeFermion(g5d)
    with psi5.view(pg.AcceleratorRead) as p, U.view(pg.AcceleratorRead) as u, \
            out5.view(pg.AcceleratorWriteDiscard) as o:
        dslash.dhop(o, p, u, u, D.stencil, Ls)
    p5, o5, Un = psi5.to_numpy(), out5.to_numpy(), U.to_numpy()
    for s in range(Ls):
        assert relerr(o5[s], dhop_ref(Un, p5[s])) < 1e-12
    return psi5


def force_structure(monkeypatch, wide, far=False, pairs=None):
    """The unrolled kernel with the wide (AVX-512) or narrow (AVX2) structure whatever the host,
    with every field counted as larger than the caches when ``far``, and the 5D tiled order's
    loops in pairs of points or not (``pairs``; default: as the host takes them): fresh modules,
    launch states and bound launches (skips where the unrolled kernel does not run)."""
    if dslash.variant() != "unroll":
        pytest.skip("the unrolled kernel runs on the CPU backends only")
    monkeypatch.setattr(kw, "wide_default", lambda: wide)
    if pairs is not None:
        monkeypatch.setattr(kw, "TILE_PAIRS", pairs)
    monkeypatch.setattr(kw, "_modules", {})
    monkeypatch.setattr(ul, "_states", {})
    monkeypatch.setattr(dslash, "_BOUND", {})
    if far:
        monkeypatch.setattr(ul, "FAR_BYTES", dict.fromkeys(ul.FAR_BYTES, 0))


@pytest.mark.parametrize("wide", [False, True])
def test_both_register_structures_against_numpy(monkeypatch, wide):
    """The unrolled kernel's wide (AVX-512) and narrow (AVX2) structures: the host runs only one by
    default, so the other is forced here; 4D with a general lane permute, and 5D."""
    force_structure(monkeypatch, wide)
    grid, rng, U, psi = setup((4, 4, 4, 8), (1, 1, 1, 4), "double")
    D = pg.qcd.WilsonFermion(U, MASS)
    Un, pn = U.to_numpy(), psi.to_numpy()
    assert relerr(D.M(psi).to_numpy(), m_ref(Un, pn, MASS)) < 1e-12
    assert relerr(D.Mdag(psi).to_numpy(), m_ref(Un, pn, MASS, dag=True)) < 1e-12
    check_5d_hop(grid, U, D)


@pytest.mark.parametrize("wide,pairs", [(False, True), (True, False), (True, True)],
                         ids=["narrow", "wide", "wide-pairs"])
def test_the_adjoint_has_kernels_of_its_own_with_the_signs_compiled_in(monkeypatch, wide, pairs):
    """The projectors' signs are constants of each compiled kernel (an add or a subtract in place of
    a multiply-add by a sign read at run time), so the adjoint runs kernels of its own: 4D and 5D,
    every structure, the 5D tiled order's loops a point or a direction's two points at a time
    (kw.TILE_PAIRS, the default, pairs them), against numpy both ways; no kernel
    reads the signs from ``coef``."""
    for five_d in (False, True):
        for dag, sign in ((False, "-1.0"), (True, "1.0")):
            src = kw._source(4, "float64", five_d, wide, dag=dag, pairs=pairs)
            assert "coef[2]" not in src and "coef[3]" not in src
            signs = {line.strip() for line in src.splitlines() if line.strip().startswith("gf = ")}
            assert signs == {f"gf = vsplat(Z({sign}), W)"}
    force_structure(monkeypatch, wide, pairs=pairs)
    grid, rng, U, psi = setup((4, 4, 4, 8), (1, 1, 1, 4), "double")
    D = pg.qcd.WilsonFermion(U, MASS)
    Un = U.to_numpy()
    Ls = 3
    g5d = pg.GridCartesian5D(grid, Ls)
    # the wide 5D kernels in the register order's reach and past it (the tiled order)
    cases = [(grid, 1, None), (g5d, Ls, True)] + ([(g5d, Ls, False)] if wide else [])
    for g, Lsx, reach in cases:
        if reach is not None:
            monkeypatch.setattr(ul, "REGISTER_BYTES", ul.REGISTER_BYTES if reach else 0)
            monkeypatch.setattr(ul, "_states", {})
            monkeypatch.setattr(dslash, "_BOUND", {})
        x = pg.LatticeFermion(g)
        pg.ParallelRNG(g, [5, 6, 7, 8]).gaussian(x)
        xn = x.to_numpy()
        st = ul._launch_state(D.stencil, Lsx, grid.nsimd, np.dtype("float64"))
        for dag in (False, True):
            name = st.kernel("plain", dag).__name__
            assert name.endswith("_dag") is dag
            assert ("register" in name) is bool(wide and reach), name
            with x.view(pg.AcceleratorRead) as p, U.view(pg.AcceleratorRead) as u:
                for _ in range(2):  # the second call: the bound launch
                    o = np.full_like(p, np.nan)
                    dslash.dhop(o, p, u, u, D.stencil, Lsx, dag=dag)
                    got = _to_slices(g, "double", o)
                    for s in range(Lsx):
                        want = dhop_ref(Un, xn[s] if Lsx > 1 else xn, dag=dag)
                        assert relerr(got[s] if Lsx > 1 else got, want) < 1e-12, (Lsx, dag, s)


@pytest.mark.parametrize("bits, nsimd, dtype, pinned", [
    (512, 8, "float64", True), (512, 16, "float32", True), (512, 16, "float64", False),
    (256, 4, "float64", False)])
def test_the_accumulators_are_pinned_where_the_registers_hold_them(monkeypatch, bits, nsimd, dtype, pinned):
    """The wide structure pins its 24 result vectors after each point on AVX-512 alone: on 16
    registers, or with lanes wider than a register, LLVM cannot allocate the pin and aborts the
    process (the wide structure can be forced on AVX2)."""
    monkeypatch.setattr(kw, "host_simd_bits", lambda: bits)
    src = kw._source(nsimd, dtype, False, wide=True)
    hold = src[src.index("def hold(t):"):]
    assert ("return vpin(t)" in hold.split("\n\n")[0]) == pinned
    assert src.count("cc = hold(c0 + c1 + c2 + c3)") == 2 * 7   # seven points, with and without halos


def test_the_configuration_chooses_the_structure():
    """``--dslash-structure`` (the configuration's ``dslash_structure``) picks the structure the
    host would not: the same results, from a kernel module of that structure, and back."""
    import dataclasses

    from pygrid import config

    if dslash.variant() != "unroll":
        pytest.skip("the unrolled kernel runs on the CPU backends only")
    host = kw.wide_default()
    grid, rng, U, psi = setup((4, 4, 4, 8), (1, 1, 1, 4), "double")
    Un, pn = U.to_numpy(), psi.to_numpy()
    other = "narrow" if host else "wide"
    before = config.set_current(dataclasses.replace(config.current(), dslash_structure=other))
    try:
        assert kw.wide_default() is (not host)
        D = pg.qcd.WilsonFermion(U, MASS)
        out = D.new_fermion()
        for _ in range(2):   # the second call kept: bound under this configuration
            D.M(psi, out=out)
            assert relerr(out.to_numpy(), m_ref(Un, pn, MASS)) < 1e-12
        st = ul._launch_state(D.stencil, 1, grid.nsimd, np.float64)
        assert st.kernel("plain") is kw.kernel_for(grid.nsimd, "float64", wide=not host)
    finally:
        config.set_current(before)
    assert kw.wide_default() is host
    assert ul._launch_state(D.stencil, 1, grid.nsimd, np.float64).kernel("plain") is kw.kernel_for(
        grid.nsimd, "float64", wide=host)
    assert relerr(D.M(psi).to_numpy(), m_ref(Un, pn, MASS)) < 1e-12


def test_far_prefetch_path_against_numpy(monkeypatch):
    """The wide 4D kernel's prefetches for fields larger than the caches (forced on a small lattice)
    leave the result as it was (tests/mpi has the same with halos from other ranks)."""
    force_structure(monkeypatch, True, far=True)
    grid, rng, U, psi = setup((4, 4, 4, 8), (1, 1, 1, 4), "double")
    D = pg.qcd.WilsonFermion(U, MASS)
    Un, pn = U.to_numpy(), psi.to_numpy()
    assert relerr(D.M(psi).to_numpy(), m_ref(Un, pn, MASS)) < 1e-12
    assert all(st.far for st in ul._states.values())


@pytest.mark.parametrize("prec", ["double", "single"])
@pytest.mark.parametrize("wide", [False, True])
def test_streamed_result_against_numpy(monkeypatch, prec, wide):
    """Both structures' result written past the caches when the fields outgrow them (forced on a
    small lattice), 4D with and without the diagonal term, and 5D; a buffer off the vector
    alignment takes ordinary stores."""
    for five_d in (False, True):
        assert "vstoret_nt(out" in kw._source(4, "float64", five_d, wide)
    force_structure(monkeypatch, wide, far=True)
    grid, rng, U, psi = setup((4, 4, 4, 8), (1, 1, 1, 4), prec)
    D = pg.qcd.WilsonFermion(U, MASS)
    Un, pn = U.to_numpy(), psi.to_numpy()
    assert relerr(D.M(psi).to_numpy(), m_ref(Un, pn, MASS)) < TOL[prec]
    assert relerr(D.Dhop(psi).to_numpy(), dhop_ref(Un, pn)) < TOL[prec]
    assert all(st.far for st in ul._states.values())
    with psi.view(pg.AcceleratorRead) as p, U.view(pg.AcceleratorRead) as u:
        want = np.empty_like(p)
        dslash.dhop(want, p, u, u, D.stencil)
        off = np.empty(p.size + 1, p.dtype)[1:].reshape(p.shape)     # one real past the alignment
        dslash.dhop(off, p, u, u, D.stencil)
        assert np.array_equal(off, want)
    if prec == "double":
        check_5d_hop(grid, U, D)


@pytest.mark.parametrize("pairs", [False, True], ids=["points", "pairs"])
def test_the_5d_register_and_tiled_orders_give_the_same_bits(monkeypatch, pairs):
    """The wide structure's 5D register order adds the points in the order of the tiled order's
    loops, a point or a direction's two points at a time (kw._tile_order), so a hop whose boundary
    sites run the tiled order (split over ranks) gives the bits of one rank's register order:
    domain wall's M and M^dag, and the Schur operator's fused hops, both orders, bit for bit."""
    force_structure(monkeypatch, True, pairs=pairs)
    grid, rng, U, psi = setup((4, 4, 4, 8), (1, 1, 1, 4), "double")
    g5d = pg.GridCartesian5D(grid, 4)
    x = pg.LatticeFermion(g5d)
    pg.ParallelRNG(g5d, [13]).gaussian(x)
    odd = pg.pick_checkerboard(1, x)
    res = {}
    for reach in (True, False):
        monkeypatch.setattr(ul, "REGISTER_BYTES", ul.REGISTER_BYTES if reach else 0)
        monkeypatch.setattr(ul, "SCHUR_REGISTER_BYTES", ul.SCHUR_REGISTER_BYTES if reach else 0)
        monkeypatch.setattr(ul, "_states", {})
        monkeypatch.setattr(dslash, "_BOUND", {})
        D = pg.qcd.DomainWallFermion(U, 4, 0.1, 1.8)
        S = pg.qcd.SchurDiagMooeeOperator(D, 1)
        st = ul._launch_state(D._w.stencil, 4, grid.nsimd, np.dtype("float64"))
        assert ("register" in st.kernel("plain").__name__) is reach
        res[reach] = [D.M(x).to_numpy(), D.Mdag(x).to_numpy(), S.M(odd).to_numpy()]
    for a, b in zip(res[True], res[False]):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("prec", ["double", "single"])
def test_5d_register_order_in_cache_and_tiles_past_it(monkeypatch, prec):
    """The wide structure's 5D kernel: the register order (every last step) on fields in the caches'
    reach, with its prefetches and streamed result when they are past the caches, the tiled order
    beyond; against numpy, with and without the diagonal term (tests/test_domain_wall.py checks
    the other last steps)."""
    force_structure(monkeypatch, True)
    grid, rng, U, psi = setup((4, 4, 4, 8), (1, 1, 1, 4), prec)
    D = pg.qcd.WilsonFermion(U, MASS)
    Ls = 3
    g5d = pg.GridCartesian5D(grid, Ls)
    psi5, x5 = pg.LatticeFermion(g5d, prec), pg.LatticeFermion(g5d, prec)
    pg.ParallelRNG(g5d, [5, 6, 7, 8]).gaussian(psi5)
    pg.ParallelRNG(g5d, [1, 6, 7, 8]).gaussian(x5)
    p5, x, Un = psi5.to_numpy(), x5.to_numpy(), U.to_numpy()
    far_bytes, register_bytes, schur_bytes = ul.FAR_BYTES, ul.REGISTER_BYTES, ul.SCHUR_REGISTER_BYTES
    # in cache; in the register order's reach but past the caches (prefetches, streamed result);
    # past its reach
    for far, reach, name in ((False, True, "dhop_local_register"), (True, True, "dhop_local_register"),
                             (True, False, "dhop_local")):
        monkeypatch.setattr(ul, "FAR_BYTES", dict.fromkeys(far_bytes, 0) if far else far_bytes)
        monkeypatch.setattr(ul, "REGISTER_BYTES", register_bytes if reach else 0)
        monkeypatch.setattr(ul, "SCHUR_REGISTER_BYTES", schur_bytes if reach else 0)
        monkeypatch.setattr(ul, "_states", {})
        monkeypatch.setattr(dslash, "_BOUND", {})
        dt = np.dtype("float64" if prec == "double" else "float32")
        st = ul._launch_state(D.stencil, Ls, grid.nsimd, dt)
        assert st.far == far
        for last in kw.LAST:
            assert st.kernel(last).__name__ == name + ("" if last == "plain" else "_" + last)
        with psi5.view(pg.AcceleratorRead) as p, x5.view(pg.AcceleratorRead) as xb, \
                U.view(pg.AcceleratorRead) as u:
            for alpha in (0.0, 0.7):
                for _ in range(2):  # the second call: the bound launch
                    o = np.full_like(p, np.nan)
                    dslash.dhop(o, p, u, u, D.stencil, Ls, -0.5, alpha, xb)
                    got = _to_slices(g5d, prec, o)
                    for s in range(Ls):
                        assert relerr(got[s], dhop_ref(Un, p5[s]) + alpha * x[s]) < TOL[prec], (far, alpha, s)


def test_the_schur_variants_leave_the_register_order_on_smaller_fields(monkeypatch, reference_cache):
    """On fields between the two limits the plain hop runs the register order and the Schur
    operators' variants of the last step the tiled one (inside a solve the register order is the
    slower there); below both every variant runs the register order, above both none."""
    force_structure(monkeypatch, True)
    grid, rng, U, psi = setup((4, 4, 4, 8), (1, 1, 1, 4), "double")
    D = pg.qcd.WilsonFermion(U, MASS)
    nbytes = kw.field_bytes(D.stencil.neighbours.shape[1], 3, grid.nsimd, "float64")
    for plain_limit, schur_limit, plain_reg, schur_reg in ((nbytes, nbytes - 1, True, False),
                                                           (nbytes, nbytes, True, True),
                                                           (nbytes - 1, nbytes - 1, False, False)):
        monkeypatch.setattr(ul, "REGISTER_BYTES", plain_limit)
        monkeypatch.setattr(ul, "SCHUR_REGISTER_BYTES", schur_limit)
        monkeypatch.setattr(ul, "_states", {})
        st = ul._launch_state(D.stencil, 3, grid.nsimd, np.dtype("float64"))
        for last in kw.LAST:
            want = plain_reg if last == "plain" else schur_reg
            assert ("register" in st.kernel(last).__name__) == want, (last, plain_limit, schur_limit)


def _to_slices(g5d, prec, buf):
    """A 5D kernel buffer as the to_numpy() array of its field (slice s first)."""
    f = pg.LatticeFermion(g5d, prec)
    with f.view(pg.CpuWrite) as a:
        a[...] = buf
    return f.to_numpy()


def test_site_order_blocks_large_slices_and_visits_every_site_once(reference_cache):
    """(y, z) columns when a time-slice outgrows the cache budget; natural order otherwise (at the
    cache the budget was measured with)."""
    assert (ul.site_order((4, 4, 4, 8), 1, 8, "float64") == np.arange(512)).all()
    order = ul.site_order((16, 8, 8, 8), 8, 8, "float64")          # 12 MB slices: 4 x 4 columns
    assert sorted(order.tolist()) == list(range(8192))
    x, y, z, t = order % 16, order // 16 % 8, order // 128 % 8, order // 1024
    first = slice(0, 16 * 4 * 4 * 8)                                 # the first column, all t
    assert set(y[first]) == set(z[first]) == {0, 1, 2, 3} and set(t[first]) == set(range(8))
    assert (x[:16] == np.arange(16)).all()
    # Ls 16: 29 MB slices, columns 2 sites wide under the budget; MIN_COLUMN_WIDTH makes them 4
    order = ul.site_order((16, 8, 8, 8), 16, 8, "float64")
    y, z = order // 16 % 8, order // 128 % 8
    assert sorted(order.tolist()) == list(range(8192))
    assert set(y[:16 * 4 * 4 * 8]) == set(z[:16 * 4 * 4 * 8]) == {0, 1, 2, 3}


def test_blocked_site_order_against_numpy(monkeypatch):
    """The Dhop kernel visiting sites in (y, z) columns gives the numpy reference, 4D and 5D."""
    if dslash.variant() != "unroll":
        pytest.skip("the unrolled kernel runs on the CPU backends only")
    monkeypatch.setattr(ul, "COLUMN_BYTES", 1)                      # columns of 2 x 2 on any lattice
    monkeypatch.setattr(ul, "MIN_COLUMN_WIDTH", 2)
    monkeypatch.setattr(ul, "_states", {})
    grid, rng, U, psi = setup((4, 4, 8, 8), None, "double")
    D = pg.qcd.WilsonFermion(U, MASS)
    st = ul._launch_state(D.stencil, 1, grid.nsimd, np.dtype("float64"))
    assert not (st.sites == np.arange(len(st.sites))).all()
    Un, pn = U.to_numpy(), psi.to_numpy()
    assert relerr(D.M(psi).to_numpy(), m_ref(Un, pn, MASS)) < 1e-12
    check_5d_hop(grid, U, D)


def test_site_order_gives_each_thread_a_slab_of_a_large_4d_field(reference_cache):
    """4D fields beyond the caches on several threads: one z slab per thread, each over all t."""
    order = ul.site_order((16, 8, 8, 8), 1, 8, "float64", threads=2, far=True)
    assert sorted(order.tolist()) == list(range(8192))
    z, t = order // 128 % 8, order // 1024
    assert set(z[:4096]) == {0, 1, 2, 3} and set(z[4096:]) == {4, 5, 6, 7}
    assert set(t[:4096]) == set(range(8)) and (order[:512] == np.arange(512)).all()
    natural = np.arange(8192)
    assert (ul.site_order((16, 8, 8, 8), 1, 8, "float64", threads=1, far=True) == natural).all()
    assert (ul.site_order((16, 8, 8, 8), 1, 8, "float64", threads=2, far=False) == natural).all()
    assert (ul.site_order((16, 8, 7, 8), 1, 8, "float64", threads=2, far=True) == np.arange(7168)).all()


def test_slab_site_order_against_numpy(monkeypatch):
    """The Dhop kernel visiting the sites in one slab per thread gives the numpy reference, full
    grid and checkerboards."""
    if dslash.variant() != "unroll":
        pytest.skip("the unrolled kernel runs on the CPU backends only")
    monkeypatch.setattr(ul, "FAR_BYTES", dict.fromkeys(ul.FAR_BYTES, 0))
    monkeypatch.setattr(ul, "compute_threads", lambda: 2)
    monkeypatch.setattr(ul, "_states", {})
    grid, rng, U, psi = setup((4, 4, 8, 8), None, "double")
    D = pg.qcd.WilsonFermion(U, MASS)
    st = ul._launch_state(D.stencil, 1, grid.nsimd, np.dtype("float64"))
    assert st.far and not (st.sites == np.arange(len(st.sites))).all()
    Un, pn = U.to_numpy(), psi.to_numpy()
    assert relerr(D.M(psi).to_numpy(), m_ref(Un, pn, MASS)) < 1e-12
    dh = D.Dhop(psi)
    pe, po = pg.pick_checkerboard(0, psi), pg.pick_checkerboard(1, psi)
    assert relerr(D.DhopEO(po).to_numpy(), pg.pick_checkerboard(0, dh).to_numpy()) < 1e-12
    assert relerr(D.DhopOE(pe).to_numpy(), pg.pick_checkerboard(1, dh).to_numpy()) < 1e-12


@pytest.mark.parametrize("prec", ["double", "single"])
def test_gamma5_hermiticity_and_adjoint(prec):
    grid, rng, U, psi = setup((4, 4, 4, 8), None, prec)
    D = pg.qcd.WilsonFermion(U, MASS)
    chi = pg.LatticeFermion(grid, prec)
    rng.gaussian(chi)
    # g5 M g5 = Mdag
    lhs = pg.eval(Gamma.Five * D.M(pg.eval(Gamma.Five * psi)))
    assert relerr(lhs.to_numpy(), D.Mdag(psi).to_numpy()) < 10 * TOL[prec]
    # <chi, M psi> = <Mdag chi, psi>
    a = pg.inner_product(chi, D.M(psi))
    b = pg.inner_product(D.Mdag(chi), psi)
    assert abs(a - b) / abs(a) < 10 * TOL[prec]
    mm = D.MdagM(psi)
    assert abs(pg.inner_product(psi, mm) - pg.norm2(D.M(psi))) / pg.norm2(D.M(psi)) < 10 * TOL[prec]


def test_gauge_covariance():
    grid, rng, U, psi = setup((4, 4, 4, 4), None, "double")
    g = pg.LatticeColourMatrix(grid)
    rng.random_su3(g)
    Ug = pg.qcd.gauge_transform(U, g)
    lhs = pg.qcd.WilsonFermion(Ug, MASS).M(pg.qcd.gauge_transform_fermion(psi, g))
    rhs = pg.qcd.gauge_transform_fermion(pg.qcd.WilsonFermion(U, MASS).M(psi), g)
    assert relerr(lhs.to_numpy(), rhs.to_numpy()) < 1e-12


@pytest.mark.parametrize("dims", [(4, 4, 4, 4), (4, 4, 4, 8)])
def test_free_field_plane_wave(dims):
    grid = pg.GridCartesian(dims)
    U = pg.qcd.unit_gauge(grid)
    D = pg.qcd.WilsonFermion(U, MASS)
    rng = np.random.default_rng(3)
    n = (1, 0, 3, 2)
    p = [2 * np.pi * n[mu] / dims[mu] for mu in range(4)]
    x = np.indices(dims)
    phase = np.exp(1j * sum(p[mu] * x[mu] for mu in range(4)))
    u = rng.normal(size=(4, 3)) + 1j * rng.normal(size=(4, 3))
    psi = pg.LatticeFermion(grid).from_numpy(phase[..., None, None] * u)
    Mp = MASS * np.eye(4) + sum(
        (1 - np.cos(p[mu])) * np.eye(4) + 1j * np.sin(p[mu]) * G[mu] for mu in range(4)
    )
    want = phase[..., None, None] * (Mp @ u)
    assert relerr(D.M(psi).to_numpy(), want) < 1e-12
    # a constant spinor: M psi = m psi
    c = pg.LatticeFermion(grid).from_numpy(np.broadcast_to(u, dims + (4, 3)))
    assert relerr(D.M(c).to_numpy(), MASS * c.to_numpy()) < 1e-12


# ---- even-odd ------------------------------------------------------------------------
@pytest.mark.parametrize("dims,layout,prec", CASES)
def test_even_odd_pieces_reassemble_m(dims, layout, prec):
    grid, rng, U, psi = setup(dims, layout, prec)
    D = pg.qcd.WilsonFermion(U, MASS)
    pe, po = pg.pick_checkerboard(0, psi), pg.pick_checkerboard(1, psi)
    for dag, full in ((False, D.M(psi)), (True, D.Mdag(psi))):
        meo = D.MeooeDag if dag else D.Meooe
        ev = pg.eval(D.Mooee(pe) + meo(po))
        od = pg.eval(D.Mooee(po) + meo(pe))
        assert ev.checkerboard == 0 and od.checkerboard == 1
        out = pg.LatticeFermion(grid, prec)
        pg.set_checkerboard(out, ev)
        pg.set_checkerboard(out, od)
        assert relerr(out.to_numpy(), full.to_numpy()) < 10 * TOL[prec]
    dh = D.Dhop(psi)
    assert relerr(D.DhopEO(po).to_numpy(), pg.pick_checkerboard(0, dh).to_numpy()) < 10 * TOL[prec]
    assert relerr(D.DhopOE(pe).to_numpy(), pg.pick_checkerboard(1, dh).to_numpy()) < 10 * TOL[prec]
    one = D.MooeeInv(D.Mooee(po))
    assert relerr(one.to_numpy(), po.to_numpy()) < 10 * TOL[prec]


def test_schur_operator_prepare_and_reconstruct():
    grid, rng, U, x = setup((4, 4, 4, 8), None, "double")
    D = pg.qcd.WilsonFermion(U, MASS)
    b = D.M(x)
    S = pg.qcd.SchurDiagMooeeOperator(D)
    xo = pg.pick_checkerboard(1, x)
    # the Schur equation Mpc x_o = b_o - Meooe MooeeInv b_e holds for the exact solution
    src = S.prepare_source(b)
    assert relerr(S.M(xo).to_numpy(), src.to_numpy()) < 1e-12
    assert relerr(S.reconstruct(b, xo).to_numpy(), x.to_numpy()) < 1e-12
    # Mpc^dag is the adjoint of Mpc
    eta = S.new_fermion()
    rng.gaussian(eta)
    a = pg.inner_product(eta, S.M(xo))
    c = pg.inner_product(S.Mdag(eta), xo)
    assert abs(a - c) / abs(a) < 1e-12
    assert abs(pg.inner_product(xo, S.MdagM(xo)) - pg.norm2(S.M(xo))) / pg.norm2(S.M(xo)) < 1e-12
    # the two-kernel Schur operator (its diagonal folded into the second hop) against its pieces,
    # also in place
    for name, hop, inv, diag in (("M", D.Meooe, D.MooeeInv, D.Mooee),
                                 ("Mdag", D.MeooeDag, D.MooeeInvDag, D.MooeeDag)):
        want = diag(xo).to_numpy() - hop(inv(hop(xo))).to_numpy()
        assert relerr(getattr(S, name)(xo).to_numpy(), want) < 1e-12
        y = xo.copy()
        assert getattr(S, name)(y, out=y) is y and y.checkerboard == 1
        assert relerr(y.to_numpy(), want) < 1e-12


def test_single_precision_copy_of_operator():
    grid, rng, U, psi = setup((4, 4, 4, 4), None, "double")
    D = pg.qcd.WilsonFermion(U, MASS)
    Ds = D.converted("single")
    assert Ds.precision == "single"
    r = Ds.M(pg.convert(psi, "single"))
    assert relerr(r.to_numpy(), D.M(psi).to_numpy()) < 1e-5
    g1 = pg.GridCartesian((4, 4, 4, 4), precision="single")
    Dn = D.converted("single", grid=g1)
    ps = pg.LatticeFermion(g1, "single").from_numpy(psi.to_numpy())
    assert relerr(Dn.M(ps).to_numpy(), D.M(psi).to_numpy()) < 1e-5
    with pytest.raises(pg.ConformabilityError):
        D.M(ps)


def test_kernel_on_5d_field_with_4d_links():
    """The kernel's Ls argument: every s slice of a 5D field gets the 4D hopping term (domain-wall reuse)."""
    grid, rng, U, _ = setup((4, 4, 4, 4), None, "double")
    Ls = 3
    D = pg.qcd.WilsonFermion(U, MASS)
    psi5 = check_5d_hop(grid, U, D, Ls)
    g5d = psi5.grid
    pn, Un = psi5.to_numpy(), U.to_numpy()
    # and on the red-black 5D grid (4D checkerboard of the links)
    rb5 = g5d.red_black
    pe5 = pg.pick_checkerboard(0, psi5)
    oo5 = pg.LatticeFermion(rb5, checkerboard=1)
    with pe5.view(pg.AcceleratorRead) as p, D.U_cb[1].view(pg.AcceleratorRead) as uf, \
            D.U_cb[0].view(pg.AcceleratorRead) as ub, oo5.view(pg.AcceleratorWriteDiscard) as o:
        dslash.dhop(o, p, uf, ub, D.stencil_cb[0], Ls)
    full = pg.LatticeFermion(g5d)
    pg.set_checkerboard(full, oo5)
    want = np.stack([dhop_ref(Un, pn[s]) for s in range(Ls)])
    got = full.to_numpy()
    par = np.indices((4, 4, 4, 4)).sum(axis=0) % 2 == 1
    assert relerr(got[:, par], want[:, par]) < 1e-12


@pytest.mark.parametrize("wide", [False, True])
def test_the_tiled_order_of_5d_fields_pairs_its_points_by_default(wide):
    """A direction's two points go through the 5D tiled order in one pass in both structures
    unless asked otherwise; 4D fields pair them in the narrow structure only (the wide one has no
    4D tiled order)."""
    assert kw._resolve_pairs(None, wide, True) is True
    assert kw._resolve_pairs(False, wide, True) is False
    assert kw._resolve_pairs(None, wide, False) is (not wide)


@pytest.mark.parametrize("wide,pairs", [(False, None), (True, None), (True, False), (True, True)])
def test_5d_kernel_variants_share_the_tile_loops_but_the_last(wide, pairs):
    """The 5D kernel's variants of its last step (kw.LAST) call one compiled function for the
    tile's loops but the last (not inlined by numba, so it compiles once for all of them): each
    variant holds its own last loop alone.  The loops add a direction's two points each with
    ``pairs``, else a point each (kw._tile_loops; by default pairs in the narrow structure, and in
    the wide one, kw.TILE_PAIRS).  4D kernels keep every loop inline."""
    import ast

    tree = ast.parse(kw._source(4, "float64", True, wide, pairs=pairs))
    fns = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef)}
    loops = 4 if (kw.TILE_PAIRS if pairs is None else pairs) else 8

    def tile_loops(f):  # the loops over a tile's sites
        return sum(isinstance(n, ast.For) and ast.unparse(n.iter) == "range(i0, i1)" for n in ast.walk(f))

    def calls(f, name):
        return sum(isinstance(n, ast.Call) and ast.unparse(n.func) == name for n in ast.walk(f))

    for halo, shared in ((False, "tile_points"), (True, "tile_points_halo")):
        assert tile_loops(fns[shared]) == loops - 1
        assert [ast.unparse(d) for d in fns[shared].decorator_list] == ["_jit"]
        for last in kw.LAST:
            name = ("dhop_kernel" if halo else "dhop_local") + ("" if last == "plain" else "_" + last)
            f = fns[name]
            assert calls(f, shared) == 1, name
            # the last loop, and the tile's end for the variants that finish there
            assert tile_loops(f) == 1 + (last in ("solve", "mul", "mul_solve")), name
    four = ast.parse(kw._source(4, "float64", False, False))
    local = next(f for f in four.body if isinstance(f, ast.FunctionDef) and f.name == "dhop_local")
    assert tile_loops(local) == 4 and not any(
        isinstance(f, ast.FunctionDef) and f.name.startswith("tile_points") for f in four.body)


@pytest.mark.parametrize("Ls", [1, 3])
def test_the_kernel_counts_no_references_per_site(Ls):
    """The unrolled kernel (4D, and 5D with its shared function of the first seven points), called
    unboxed as the numpy backend calls it, compiled afresh to read its LLVM IR: numba counts no
    reference of any array past a function's entry block.  The inlined helpers of the last point
    take the result and the diagonal term's field; before the kernels rebound their arguments
    without owners (``simd_numba.unowned``), numba counted references to them at every site,
    atomic operations on an unboxed array."""
    import re

    grid, rng, U, psi = setup((4, 4, 4, 8), None, "double")
    D = pg.qcd.WilsonFermion(U, MASS)
    dt = np.dtype("float64")
    g5d = pg.GridCartesian5D(grid, Ls) if Ls > 1 else grid
    psi = pg.LatticeFermion(g5d, "double")
    pg.ParallelRNG(g5d, [5, 6, 7, 8]).gaussian(psi)
    # numba's disk cache would give back machine code without its IR
    src = kw._source(grid.nsimd, dt.name, Ls > 1, False).replace("cache=True", "cache=False")
    ns = {}
    exec(compile(src, "<unrolled Wilson kernel>", "exec"), ns)
    st = ul._launch_state(D.stencil, Ls, grid.nsimd, dt)
    with psi.view(pg.CpuRead) as p, U.view(pg.CpuRead) as u:
        o = np.zeros_like(p)
        args = ul.kernel_args(st, o, p, u, u, np.array([-0.5, 0, -1, 1]), o, False)
        ns["dhop_local"](0, st.n4, *args, st.sites, st.none, st.none)
    got, p5, Un = _to_slices(g5d, "double", o), psi.to_numpy(), U.to_numpy()
    for s in range(Ls):
        want = dhop_ref(Un, p5[s] if Ls > 1 else p5)
        assert relerr(got[s] if Ls > 1 else got, want) < TOL["double"]
    k = ns["dhop_local"]
    ir = k.inspect_llvm(k.signatures[0])
    names = ("dhop_local", "tile_points") if Ls > 1 else ("dhop_local",)
    funcs = {n: next(f for f in re.split(r"\ndefine ", ir)[1:] if re.search(
        rf"@\S*\d{n}\S*\(", f.split("\n")[0]) and "cpython" not in f.split("(")[0]) for n in names}
    for name, body in funcs.items():
        blocks = re.split(r"\n(?=[\w.]+:)", body)[1:]  # after the function's header
        assert blocks[0].startswith("entry:") and len(blocks) > 10, name
        assert not [b.split(":")[0] for b in blocks[1:] if "NRT_incref" in b], name


def test_errors():
    grid, rng, U, psi = setup((4, 4, 4, 4), None, "double")
    D = pg.qcd.WilsonFermion(U, MASS)
    with pytest.raises(pg.SiteTypeError):
        D.M(pg.LatticeColourMatrix(grid))
    with pytest.raises(pg.ConformabilityError):
        D.M(pg.pick_checkerboard(0, psi))
    with pytest.raises(pg.SiteTypeError):
        pg.qcd.WilsonFermion(psi, MASS)


@pytest.mark.parametrize("layout,nsimd", [((1, 1, 2, 2), 4), ((1, 1, 1, 4), 4), ((1, 2, 2, 2), 8)])
def test_stencil_lane_xor_marks_exactly_the_xor_maps(layout, nsimd):
    """The kernel's shuffle fast path is taken for a lane map only if it is l -> l ^ x (else the table
    lookup)."""
    from pygrid.stencil import Stencil, wilson_displacements
    grid = pg.GridCartesian((4, 4, 4, 8), simd_layout=layout, precision="double" if nsimd == 4 else "single")
    st = Stencil(grid, wilson_displacements())
    ids = np.arange(nsimd)
    assert st.lane_xor[0] == 0
    for row, x in zip(st.lanes[1:], st.lane_xor[1:]):
        if x:
            assert np.array_equal(row, ids ^ x)
        else:
            assert not any(np.array_equal(row, ids ^ y) for y in (1, 2, 4))
    # 2-way splits give only xor maps; a 4-way split of t gives rotations, which are not
    assert (layout == (1, 1, 1, 4)) == (0 in st.lane_xor[1:])


@pytest.mark.parametrize("dtype, tol", [(np.complex128, 1e-14), (np.complex64, 1e-6)])
def test_careful_numpy_baseline_matches_the_reference(dtype, tol):
    """The benchmarks' np.matmul Dhop (their numpy baseline) is the operator of docs/conventions.md."""
    from pygrid.bench.numpy_dhop import MatmulDhop
    from pygrid.qcd.reference import dhop

    r = np.random.default_rng(4)

    def cplx(shape):
        return (r.standard_normal(shape) + 1j * r.standard_normal(shape)).astype(dtype)

    U = cplx((4, 2, 6, 8, 4, 3, 3))
    for psi, axes in ((cplx((4, 2, 6, 8, 4, 3)), (0, 1, 2, 3)), (cplx((3, 4, 2, 6, 8, 4, 3)), (1, 2, 3, 4))):
        out = np.full_like(psi, np.nan)
        MatmulDhop(U, axes)(psi, out)
        ref = dhop(U.astype(complex), psi.astype(complex), lattice_axes=axes)
        assert np.abs(out - ref).max() < tol * np.abs(ref).max()


def test_dhop_names_a_wrong_buffer_and_leaves_out_alone():
    """dslash.dhop on raw buffers: a buffer of the wrong shape, size or precision, or out aliasing
    psi, is a ConformabilityError naming it, raised before anything is written."""
    grid, rng, U, psi = setup((4, 4, 4, 4), (1, 1, 1, 1), "double")
    D = pg.qcd.WilsonFermion(U, MASS)
    with psi.view(pg.CpuRead) as p, U.view(pg.CpuRead) as u:
        p, u = np.array(p), np.array(u)
    out = np.full_like(p, 7.0)
    cases = [
        (dict(psi=p.astype(np.float32)), "psi buffer has shape"),
        (dict(uf=u[:, :18]), "uf buffer has shape"),
        (dict(psi=p[:-1]), "do not match Ls=1"),
        (dict(ub=u[:-1]), "do not match Ls=1"),
        (dict(psi=out), "must not alias psi"),
    ]
    for change, message in cases:
        args = dict(out=out, psi=p, uf=u, ub=u) | change
        with pytest.raises(pg.ConformabilityError, match=message):
            dslash.dhop(args["out"], args["psi"], args["uf"], args["ub"], D.stencil)
        assert (out == 7.0).all()


def unrolled_operator(dims):
    """A Wilson operator, a random field and an output field on ``dims``, on a backend that runs the
    unrolled kernel (skips elsewhere)."""
    if dslash.variant() != "unroll":
        pytest.skip("the unrolled kernel runs on the CPU backends only")
    grid, rng, U, psi = setup(dims, None, "double")
    return grid, U, psi, pg.qcd.WilsonFermion(U, MASS), pg.LatticeFermion(grid)


def free_dead_fields(live):
    """Collect dead fields and let the manager free their memory (it does at the next open)."""
    gc.collect()
    with live.view(pg.CpuRead):
        pass
    gc.collect()


def test_repeated_calls_reuse_the_checked_launch(monkeypatch):
    """A call on the buffers of an earlier one goes straight to its bound launch (no checks, no
    launch lookup) and computes on the buffers' current contents; new buffers, another backend or
    a read-only buffer take the checked path; the fields' buffers are not kept alive by it."""
    grid, U, psi, D, out = unrolled_operator((4, 4, 4, 8))
    D.M(psi, out=out)
    checked = []
    original = ul.run_unrolled
    monkeypatch.setattr(ul, "run_unrolled", lambda *a, **k: checked.append(1) or original(*a, **k))
    Un = U.to_numpy()
    for seed in (5, 6):
        pg.ParallelRNG(grid, [seed, 1, 2, 3]).gaussian(psi)
        assert relerr(D.M(psi, out=out).to_numpy(), m_ref(Un, psi.to_numpy(), MASS)) < 1e-12
        assert relerr(D.Dhop(psi, out=out).to_numpy(), dhop_ref(Un, psi.to_numpy())) < 1e-12
    assert checked == [1]                              # Dhop's first call; M bound before the patch
    other = pg.LatticeFermion(grid)
    assert relerr(D.M(psi, out=other).to_numpy(), m_ref(Un, psi.to_numpy(), MASS)) < 1e-12
    assert checked == [1, 1]
    with backend("numpy"):
        D.M(psi, out=out)
    assert checked == [1, 1, 1]
    # a read-only input is copied for the kernel, which is not compiled again for it
    kernel = kw.kernel_for(grid.nsimd, "float64")
    compiled = len(kernel.overloads)
    o = pg.LatticeFermion(grid)
    with psi.view(pg.CpuRead) as p, U.view(pg.CpuRead) as u, o.view(pg.CpuWrite) as w:
        assert not p.flags.writeable
        dslash.dhop(w, p, u, u, D.stencil)
        dslash.dhop(w, p, u, u, D.stencil)
    assert checked == [1, 1, 1, 1, 1]
    assert len(kernel.overloads) == compiled
    assert relerr(o.to_numpy(), dhop_ref(Un, psi.to_numpy())) < 1e-12
    with other.view(pg.CpuRead) as b:
        buffer = weakref.ref(b.base if b.base is not None else b)
    del other, b
    free_dead_fields(psi)
    assert buffer() is None


def test_a_bound_call_is_forgotten_with_its_fields():
    """The bound launch of a call leaves dslash's table when a buffer it was made for dies, so
    it keeps no stencil tables alive for fields that are gone (a device's buffer dies when the
    memory manager's pool of freed buffers lets it go)."""
    grid, U, psi, D, out = unrolled_operator((4, 4, 4, 4))
    D.Dhop(psi, out=out)

    def same_buffer(x, a):
        return isinstance(x, np.ndarray) and x.ctypes.data == a.ctypes.data and x.shape == a.shape

    # the buffer the kernel read (on a device, its copy there, not the host's)
    with psi._kernel_view(pg.AcceleratorRead) as p:
        mine = [k for k, hit in dslash._BOUND.items() if any(same_buffer(r(), p) for r in hit.refs)]
    assert len(mine) == 1
    manager = psi._manager
    del psi, out, p
    free_dead_fields(U)
    manager.trim_pool()
    gc.collect()
    assert mine[0] not in dslash._BOUND


def test_a_kept_call_runs_the_bound_launch_on_the_fields_as_they_are_now(monkeypatch):
    """A call on the fields of an earlier one (full grid and even-odd) skips the operator's checks
    and dslash.dhop and runs the launch bound to their buffers, on their current contents; it opens
    and closes the same views (a conflicting one is refused, nothing written, nothing left open)."""
    from pygrid.qcd import fermion, hop

    grid, U, psi, D, out = unrolled_operator((4, 4, 4, 8))
    e, o = pg.pick_checkerboard(0, psi), pg.pick_checkerboard(1, pg.LatticeFermion(grid))
    D.Dhop(psi, out=out)
    D.Meooe(e, out=o)
    assert len(D._hop_calls) == 2
    slow = []
    for module, name in ((hop, "dhop"), (fermion.FermionOperator, "_check")):
        original = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _o=original, **k: slow.append(1) or _o(*a, **k))
    Un = U.to_numpy()
    for seed in (5, 6):
        pg.ParallelRNG(grid, [seed, 1, 2, 3]).gaussian(psi)
        e.assign(pg.pick_checkerboard(0, psi))
        ref = dhop_ref(Un, psi.to_numpy())
        assert D.Dhop(psi, out=out) is out
        assert relerr(out.to_numpy(), ref) < 1e-12
        assert D.Meooe(e, out=o) is o and o.checkerboard == 1
        assert relerr(o.to_numpy(), pg.pick_checkerboard(1, out).to_numpy()) < 1e-12
    assert slow == []
    before = out.to_numpy()
    with psi.view(pg.CpuWrite):
        with pytest.raises(pg.memory.ViewConflictError):
            D.Dhop(psi, out=out)
    np.testing.assert_array_equal(out.to_numpy(), before)
    assert psi._manager.open_views() == []
    # out on the wrong checkerboard: the checked path, which gives it the result's
    o.checkerboard = 0
    D.Meooe(e, out=o)
    assert o.checkerboard == 1 and slow
    assert relerr(o.to_numpy(), pg.pick_checkerboard(1, out).to_numpy()) < 1e-12
    # a new table of dslash's bound launches (every bound launch forgotten) retires the kept calls
    monkeypatch.setattr(dslash, "_BOUND", {})
    slow.clear()
    D.Dhop(psi, out=out)
    assert slow and relerr(out.to_numpy(), dhop_ref(Un, psi.to_numpy())) < 1e-12


def test_a_kept_call_whose_views_give_other_buffers_takes_the_checked_path(monkeypatch):
    """Where the views hand out other buffers than those the launch was bound to (a device cache
    that moved a field), the kept call does nothing and the call is checked and bound again.  Its
    views close as after a failure, so a checked path that fails then leaves out as it was (on a
    device, the write view that discarded out's contents would otherwise have lost them)."""
    from pygrid.qcd import hop

    grid, U, psi, D, out = unrolled_operator((4, 4, 4, 4))
    D.Dhop(psi, out=out)
    (call,) = D._hop_calls.values()
    call.buffers = tuple(b.copy() for b in call.buffers)
    if call.kept_launch is not None:        # a unified device's kept launch, checked again
        call.kept_launch.buffers, call.kept_launch.epoch = call.buffers, None
    before = psi.to_numpy() * 0.5       # out written on the host: on a device its device copy is stale
    out.from_numpy(before)

    def failing(*args, **kwargs):
        raise RuntimeError("injected in the checked path")

    monkeypatch.setattr(hop, "dhop", failing)
    with pytest.raises(RuntimeError, match="injected"):
        D.Dhop(psi, out=out)
    np.testing.assert_array_equal(out.to_numpy(), before)
    assert psi._manager.open_views() == []
    monkeypatch.undo()
    pg.ParallelRNG(grid, [9, 1, 2, 3]).gaussian(psi)
    D.Dhop(psi, out=out)
    assert relerr(out.to_numpy(), dhop_ref(U.to_numpy(), psi.to_numpy())) < 1e-12
    (again,) = D._hop_calls.values()
    assert again is not call


def test_a_kept_call_refuses_a_view_opened_after_its_last_check():
    """A kept call checks its views again only after a step that can change the answer: a CPU view
    opened since, of a field it reads or writes, gives the general path's conflict."""
    grid, U, psi, D, out = unrolled_operator((4, 4, 4, 4))
    for _ in range(3):
        D.Dhop(psi, out=out)
        gc.collect()
    D.Dhop(psi, out=out)            # checked at the manager's present step
    before = out.to_numpy()
    for field, mode in ((out, pg.CpuRead), (psi, pg.CpuWrite)):
        with field.view(mode):
            with pytest.raises(pg.memory.ViewConflictError):
                D.Dhop(psi, out=out)
    np.testing.assert_array_equal(out.to_numpy(), before)
    assert psi._manager.open_views() == []


def test_a_kept_call_is_forgotten_with_its_fields():
    grid, U, psi, D, out = unrolled_operator((4, 4, 4, 4))
    D.Dhop(psi, out=out)
    D.Dhop(psi, out=pg.LatticeFermion(grid))
    gc.collect()
    assert len(D._hop_calls) == 1
    del psi
    gc.collect()
    assert D._hop_calls == {}


def test_a_call_while_its_kept_views_are_open_opens_its_own():
    """Another thread's call on the same fields holds the kept views: this call opens its own."""
    grid, U, psi, D, out = unrolled_operator((4, 4, 4, 4))
    D.Dhop(psi, out=out)
    (call,) = D._hop_calls.values()
    pg.ParallelRNG(grid, [3, 1, 2, 3]).gaussian(psi)
    with call.views:
        D.Dhop(psi, out=out)
    assert not call.views.is_open and psi._manager.open_views() == []
    assert relerr(out.to_numpy(), dhop_ref(U.to_numpy(), psi.to_numpy())) < 1e-12


def schur_by_pieces(D, x, dag):
    """Mpc x (Mpc^dag x with ``dag``) composed from the operator's own pieces, as a numpy array."""
    hop, inv, diag = (D.MeooeDag, D.MooeeInvDag, D.MooeeDag) if dag else (D.Meooe, D.MooeeInv, D.Mooee)
    w = diag(x)
    w @= w - hop(inv(hop(x)))
    return w.to_numpy()


def test_a_kept_schur_application_runs_its_two_hops_again(monkeypatch):
    """M and Mdag of a Wilson Schur operator on the same fields again run their two hops' kept calls
    together (``hop.HopPair``) on the fields' current contents, equal to the operator's pieces
    composed, in place too; an out on the other checkerboard and a forgotten table of bound launches
    take the checked path, which gives the same; the pair is forgotten with its fields."""
    from pygrid.qcd import hop

    grid, U, psi, D, _ = unrolled_operator((4, 4, 4, 8))
    if D._compress[1]:
        pytest.skip("the even-odd hops read compressed links here")
    S = pg.qcd.SchurDiagMooeeOperator(D, 1)
    x, y = pg.pick_checkerboard(1, psi), S.new_fermion()
    ran, run = [], hop.HopPair.run

    def counted(self, *args):
        done = run(self, *args)
        ran.append(done)
        return done

    monkeypatch.setattr(hop.HopPair, "run", counted)
    for dag, apply in ((False, S.M), (True, S.Mdag)):
        for k in range(3):
            x @= (0.5 + k) * x
            ran.clear()
            apply(x, out=y)
            assert relerr(y.to_numpy(), schur_by_pieces(D, x, dag)) < 1e-13
            assert ran == ([] if k == 0 else [True])
    # out on the other checkerboard: the checked path, which gives it the result's
    y.checkerboard = 0
    ran.clear()
    S.M(x, out=y)
    assert ran == [False] and y.checkerboard == 1
    assert relerr(y.to_numpy(), schur_by_pieces(D, x, False)) < 1e-13
    # every bound launch forgotten: the kept calls refuse, the checked path runs and keeps them again
    monkeypatch.setattr(dslash, "_BOUND", {})
    ran.clear()
    S.M(x, out=y)
    S.M(x, out=y)
    assert ran == [False, True]
    assert relerr(y.to_numpy(), schur_by_pieces(D, x, False)) < 1e-13
    # in place
    want = schur_by_pieces(D, x, True)
    z = x.copy()
    for _ in range(2):
        z.assign(x)
        S.Mdag(z, out=z)
        assert relerr(z.to_numpy(), want) < 1e-13
    assert set(S._kept) == {(False, id(x), id(y)), (True, id(x), id(y)), (True, id(z), id(z))}
    del z
    gc.collect()
    assert set(S._kept) == {(False, id(x), id(y)), (True, id(x), id(y))}
    del y
    gc.collect()
    assert S._kept == {}


@pytest.mark.parametrize("kind", ["wilson", "dwf"])
def test_an_operators_parameters_are_fixed_when_it_is_made(kind):
    """Assigning an operator's mass (or M5, b, c, Ls, diag) afterwards would leave its kernels'
    coefficients and kept calls as they were: it raises, naming the parameter, and the operator
    goes on giving what it gave (here, on a kept Schur application)."""
    grid, rng, U, psi = setup((4, 4, 4, 4), None, "double")
    if kind == "wilson":
        D, names = pg.qcd.WilsonFermion(U, MASS), ("mass", "diag")
    else:
        D, names = pg.qcd.DomainWallFermion(U, 4, 0.05, 1.8), ("mass", "M5", "b", "c", "Ls")
        psi = D.new_fermion()
        pg.ParallelRNG(psi.grid, [4, 5]).gaussian(psi)
    S = pg.qcd.SchurDiagMooeeOperator(D, 1)
    x = pg.pick_checkerboard(1, psi)
    before = S.M(x, out=S.new_fermion()).to_numpy()
    out = S.new_fermion()
    S.M(x, out=out)
    for name in names:
        value = getattr(D, name)
        with pytest.raises(AttributeError, match=f"{type(D).__name__}.{name} is fixed when the operator"):
            setattr(D, name, value + 1)
        assert getattr(D, name) == value
    S.M(x, out=out)
    np.testing.assert_array_equal(out.to_numpy(), before)


def test_hops_run_on_the_threads_where_expressions_on_their_fields_do(monkeypatch):
    """A hop's launch splits over the threads exactly where an expression writing its result field
    does (the bytes of that field decide): at 4.4.8.8 in single the even-odd Wilson hop's fields
    (48 KB) stay on the calling thread and the domain-wall ones (Ls 4: 196 KB) go to every thread,
    though both hops count the same 4D outer sites; either way the field is the one thread gives."""
    b = pg.get_backend()
    if b.name != "openmp" or b.threads() < 2:
        pytest.skip("the openmp backend on two or more threads")
    from pygrid.accelerator import parallel_numba

    seen, decided = [], []
    runner = parallel_numba.Bound.runner
    monkeypatch.setattr(parallel_numba.Bound, "runner",
                        lambda self, n, osites, *a: seen.append(n) or runner(self, n, osites, *a))
    blocks = b.blocks
    monkeypatch.setattr(b, "blocks", lambda nbytes: decided.append(blocks(nbytes)) or decided[-1])
    grid = pg.GridCartesian([4, 4, 8, 8], precision="single")
    U = pg.qcd.random_gauge(grid, pg.ParallelRNG(grid, [1, 2, 3, 4]), precision="single")
    for D in (pg.qcd.WilsonFermion(U, MASS), pg.qcd.DomainWallFermion(U, 4, MASS, 1.8)):
        psi = D.new_fermion() if hasattr(D, "new_fermion") else pg.LatticeFermion(grid, "single")
        pg.ParallelRNG(psi.grid, [5, 6, 7, 8]).gaussian(psi)
        e = pg.lattice.pick_checkerboard(0, psi)
        seen.clear()
        o = D.Meooe(e)
        D.Meooe(e, out=o)
        # the hop's launch, and any other kept on the way (an expression's), on one split
        assert seen and set(seen) == {1 if isinstance(D, pg.qcd.WilsonFermion) else b.threads()}
        decided.clear()
        o2 = o.new_like()
        o2 @= 0.5 * o   # an expression kernel writing a field like the hop's result
        assert decided[-1:] == seen[:1]
        before = b.threads()
        try:
            b.set_threads(1)
            one = D.Meooe(e)
        finally:
            b.set_threads(before)
        np.testing.assert_array_equal(o.to_numpy(), one.to_numpy())
        np.testing.assert_array_equal(o2.to_numpy(), 0.5 * one.to_numpy())


def test_kept_calls_of_m_mdag_and_dhopdag_skip_the_checks_and_agree(monkeypatch):
    """Each of M, Mdag and DhopDag keeps its own call on the same fields (its key holds dag and the
    diagonal coefficient): the second call skips the checks and gives what the checked one gave."""
    from pygrid.qcd import fermion, hop

    grid, U, psi, D, out = unrolled_operator((4, 4, 4, 8))
    first = {}
    for name in ("M", "Mdag", "DhopDag", "Dhop"):
        first[name] = getattr(D, name)(psi, out=out).to_numpy()
    assert len(D._hop_calls) == 4
    slow = []
    for module, name in ((hop, "dhop"), (fermion.FermionOperator, "_check")):
        original = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _o=original, **k: slow.append(1) or _o(*a, **k))
    for name in ("Dhop", "DhopDag", "Mdag", "M"):
        out.assign(0 * psi)
        assert getattr(D, name)(psi, out=out) is out
        np.testing.assert_array_equal(out.to_numpy(), first[name])
    assert slow == []
    np.testing.assert_allclose(first["M"], first["Dhop"] + D.diag * psi.to_numpy(), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("Ls", [1, 4])
def test_balanced_kept_hops_give_what_whole_blocks_give(monkeypatch, Ls):
    """A kept Dirac call hands the threads pieces of its blocks (``bind_kernel(..., balance=True)``):
    whichever thread runs a site, the result is the one whole blocks give, bit for bit, and the
    numpy reference (4D)."""
    from pygrid.accelerator import gomp_team
    from pygrid.accelerator.backends import get_backend
    from pygrid.accelerator.openmp_backend import OpenMPBackend

    b = get_backend()
    if (dslash.variant() != "unroll" or b.name != "openmp" or gomp_team.driver() is None or b._blocks() < 2
            or os.environ.get("PYGRID_TEST_DEVICE", "unified") != "unified"):
        pytest.skip("balanced launches are the kept launches of the openmp backend's libgomp region, two "
                    "threads, unified memory")
    tasks, task = [], gomp_team.task
    monkeypatch.setattr(gomp_team, "task", lambda *a, **k: tasks.append(task(*a, **k)) or tasks[-1])
    grid, rng, U, psi = setup((8, 8, 8, 8), None, "double")
    Un, pn = U.to_numpy(), psi.to_numpy()
    results = []
    for piece_bytes in (4096, 1 << 40):   # pieces of 4 KiB; one piece a block (whole blocks)
        monkeypatch.setattr(OpenMPBackend, "min_piece_bytes", piece_bytes)
        if Ls == 1:
            D, src = pg.qcd.WilsonFermion(U, MASS), psi
        else:
            D = pg.qcd.DomainWallFermion(U, Ls, MASS, 1.8)
            src = D.new_fermion()
            pg.ParallelRNG(D.grid, [7]).gaussian(src)
        out = D.new_fermion() if Ls > 1 else pg.LatticeFermion(grid)
        del tasks[:]
        D.Dhop(src, out=out)    # binds the launch, its task words made once
        most = max(t[6] for t in tasks)
        assert most > 2 if piece_bytes == 4096 else most == 1
        out.assign(0 * src)
        D.Dhop(src, out=out)    # the kept call
        results.append(out.to_numpy())
    np.testing.assert_array_equal(results[0], results[1])
    if Ls == 1:
        assert relerr(results[0], dhop_ref(Un, pn)) < 1e-12
