"""Links read as two rows of each SU(3) matrix (pygrid.qcd.compressed_links.compress_links): the
rebuilt links against the stored ones, the SIMD operations against numpy, and the Wilson operator
on compressed links against the numpy reference and against itself on whole links.

By default the operator compresses its links only on fields larger than the caches; the operator
tests here ask for it (``compress_links=True``) on small lattices, where
every path is the same code.
"""
from __future__ import annotations

import cmath
import dataclasses
import os

import numba
import numpy as np
import pytest
from numpy_refs import dhop_ref

import pygrid as pg
import pygrid.qcd
from pygrid import config
from pygrid.accelerator.simd_numba import vcmatvec, vcmatvec3, vloadt, vstoret, vthirdrow
from pygrid.qcd import compressed_links as cl, dslash, kernels_wilson as kw
from pygrid.qcd.schur import SchurOperator

DIMS = (4, 4, 4, 8)
BOUNDARIES = {
    "periodic": {},
    "antiperiodic_t": dict(boundary_phases=[1, 1, 1, -1]),
    "phases_and_twists": dict(boundary_phases=[cmath.exp(0.7j), 1j, 1, cmath.exp(-2.1j)],
                              twists=[0.25, 0.0, -1.5, 0.4]),
}
TOL = {"double": 1e-13, "single": 2e-6}


def relerr(a, b):
    return np.abs(a - b).max() / np.abs(b).max()


def _complex_links(buf):
    """(osites, 4, W, 3, 3) complex128 links of a raw buffer (osites, 36, 2, W)."""
    u = buf.reshape(-1, 4, 3, 3, 2, buf.shape[3]).astype(np.float64)
    return np.moveaxis(u[..., 0, :] + 1j * u[..., 1, :], -1, 2)


def _rebuilt(rows, zi, ztab):
    """The whole links from two rows (stored direction by direction) and the phase tables, by the
    formula written out in numpy."""
    W = rows.shape[-1]
    r = np.moveaxis(rows, 0, 1).reshape(-1, 4, 2, 3, 2, W).astype(np.float64)
    r = np.moveaxis(r[..., 0, :] + 1j * r[..., 1, :], -1, 2)  # (osites, 4, W, 2, 3)
    a, b = r[..., 0, :], r[..., 1, :]
    third = np.stack([a[..., 1] * b[..., 2] - a[..., 2] * b[..., 1],
                      a[..., 2] * b[..., 0] - a[..., 0] * b[..., 2],
                      a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]], axis=-1).conj()
    f = (ztab[:, 0] + 1j * ztab[:, 1])[zi].reshape(third.shape[:3])
    return np.concatenate([r, (f[..., None] * third)[..., None, :]], axis=-2)


@pytest.fixture(scope="module", params=["double", "single"])
def setup(request):
    prec = request.param
    grid = pg.GridCartesian(list(DIMS), precision=prec)
    rng = pg.ParallelRNG(grid, [4, 2])
    U = pg.qcd.random_gauge(grid, rng, precision=prec)
    psi = rng.gaussian(pg.LatticeFermion(grid, prec))
    return prec, grid, U, psi


@pytest.mark.parametrize("case", BOUNDARIES)
def test_compressed_links_rebuild_the_links(setup, case):
    prec, grid, U, psi = setup
    D = pg.qcd.WilsonFermion(U, 0.1, **BOUNDARIES[case])
    for links in ([D.links], list(D.U_cb)):
        views = [f.view(pg.CpuRead) for f in links]
        bufs = [v.__enter__() for v in views]
        try:
            made = cl.compress_links(bufs)
            assert made is not None
            rows, ztab = made
            assert ztab.shape[1:] == (2, grid.nsimd) and np.array_equal(ztab[0, 0], np.ones(grid.nsimd))
            for (r, zi), buf in zip(rows, bufs):
                assert r.shape == (4, buf.shape[0], 6, 2, buf.shape[3]) and zi.shape == (4 * buf.shape[0],)
                assert np.abs(_rebuilt(r, zi, ztab) - _complex_links(buf)).max() < TOL[prec]
            # a boundary phase on the edge links needs a row of its own
            if case != "periodic":
                assert len(ztab) > 1 and max(int(zi.max()) for _, zi in rows) > 0
        finally:
            for v in views:
                v.__exit__(None, None, None)


def test_links_that_are_not_su3_times_a_phase_are_not_compressed(setup):
    prec, grid, U, psi = setup
    with U.view(pg.CpuRead) as u:
        u = np.array(u)
    assert cl.compress_links([u]) is not None
    assert cl.compress_links([u * 1.001]) is None  # not unitary
    rng = np.random.default_rng(3)
    # a phase of its own on every link: SU(3) times a phase, but more phases than the table holds
    z = _complex_links(u) * np.exp(1j * rng.uniform(0, 6, (u.shape[0], 4, u.shape[3])))[..., None, None]
    v = np.stack([np.moveaxis(z.real, 2, -1), np.moveaxis(z.imag, 2, -1)], axis=-2)
    assert cl.compress_links([v.reshape(u.shape).astype(u.dtype)]) is None
    with pytest.raises(pg.errors.ConformabilityError, match="link buffer"):
        cl.compress_links([u[:, :24]])


@numba.njit
def _third_and_products(m, m12, h, ftab, k, out, whole):
    x = vloadt(h, 0, 12, 8)
    t = vthirdrow(m12, 0, ftab, k, 8)
    vstoret(out, 0, vcmatvec3(m12, 0, t, x, 0))
    vstoret(out, 12 * 8, vcmatvec3(m12, 0, t, x, 1))
    vstoret(whole, 0, vcmatvec(m, 0, x, 3, 0))
    vstoret(whole, 12 * 8, vcmatvec(m, 0, x, 3, 1))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("k", [0, 1])
def test_simd_third_row_and_product_match_numpy(dtype, k):
    W = 8
    rng = np.random.default_rng(7 + k)
    q, _ = np.linalg.qr(rng.normal(size=(W, 3, 3)) + 1j * rng.normal(size=(W, 3, 3)))
    q = q / np.linalg.det(q)[:, None, None] ** (1 / 3)
    z = np.exp(1j * rng.uniform(0, 6, W)) if k else np.ones(W)
    u = q * z[:, None, None]
    m = np.stack([u.reshape(W, 9).T.real, u.reshape(W, 9).T.imag], axis=1).astype(dtype).reshape(-1)
    ftab = np.zeros((2, 2, W), dtype)
    ftab[0, 0] = 1.0
    # row 1: the phase det(U) = z^3, which row 0 (k = 0, not read) stands in for when z is 1
    ftab[1, 0], ftab[1, 1] = (z ** 3).real, (z ** 3).imag
    h = rng.normal(size=(2, 3, W)) + 1j * rng.normal(size=(2, 3, W))
    hb = np.stack([h.real, h.imag], axis=2).astype(dtype).reshape(-1)
    out, whole = np.zeros(24 * W, dtype), np.zeros(24 * W, dtype)
    _third_and_products(m, m[:12 * W].copy(), hb, ftab.reshape(-1), k, out, whole)
    got = out.reshape(2, 2, 3, 2, W)
    got = got[..., 0, :] + 1j * got[..., 1, :]
    tol = 1e-14 if dtype == np.float64 else 2e-6
    for adj, mat in ((0, u), (1, np.conj(np.swapaxes(u, 1, 2)))):
        want = np.einsum("lab,sbl->sal", mat, h)
        assert np.abs(got[adj] - want).max() < tol
    assert np.abs(out - whole).max() < tol


def _used(D):
    """The hops that read compressed links (a copy of whole links by direction does not count)."""
    return [k for k, (_, made) in D._links_c.items() if made is not None and made.rows == 2]


@pytest.fixture(params=["wide", "narrow"], ids=["register_order", "tiled_order"])
def structure(request):
    """The unrolled kernel in the register order (wide, AVX-512's) or the tiled order (narrow,
    AVX2's) whatever the host, through the configuration (``--dslash-structure``)."""
    before = config.set_current(dataclasses.replace(config.current(), dslash_structure=request.param))
    yield request.param
    config.set_current(before)


@pytest.mark.parametrize("case", BOUNDARIES)
def test_wilson_on_compressed_links_against_numpy(setup, case, structure):
    prec, grid, U, psi = setup
    bc = BOUNDARIES[case]
    D = pg.qcd.WilsonFermion(U, 0.15, **bc, compress_links=True)
    Un, pn = U.to_numpy(), psi.to_numpy()
    ref_kw = dict(boundary_phases=bc.get("boundary_phases"), twists=bc.get("twists"))
    ref = dhop_ref(Un, pn, **ref_kw)
    tol = TOL[prec] * 10
    assert relerr(D.Dhop(psi).to_numpy(), ref) < tol
    assert relerr(D.M(psi).to_numpy(), 4.15 * pn + ref) < tol
    assert relerr(D.Mdag(psi).to_numpy(), 4.15 * pn + dhop_ref(Un, pn, True, **ref_kw)) < tol
    assert _used(D) == [None]
    # the even-odd pieces and the Schur operator (its fused last hop) against whole links
    W = pg.qcd.WilsonFermion(U, 0.15, **bc, compress_links=False)
    odd = pg.pick_checkerboard(1, psi)
    want = [W.Meooe(odd).to_numpy(), W.MeooeDag(odd).to_numpy(), SchurOperator(W).MdagM(odd).to_numpy()]
    assert _used(W) == [] and not W.reads_compressed_links(1)
    got = [D.Meooe(odd).to_numpy(), D.MeooeDag(odd).to_numpy(), SchurOperator(D).MdagM(odd).to_numpy()]
    for g, w in zip(got, want):
        assert relerr(g, w) < tol
    assert sorted(_used(D), key=str) == [0, 1, None] and D.reads_compressed_links(0)
    # the precision conversion keeps the choice
    assert D.converted("single" if prec == "double" else "double").compress_links is True


def test_compressed_links_follow_the_gauge_field():
    """Links written after a hop (the operator reads U itself without boundary conditions) are
    compressed again before the next hop, also on a call kept from before."""
    grid = pg.GridCartesian(list(DIMS))
    rng = pg.ParallelRNG(grid, [8, 1])
    U = pg.qcd.random_gauge(grid, rng)
    psi = rng.gaussian(pg.LatticeFermion(grid))
    D = pg.qcd.WilsonFermion(U, 0.1, compress_links=True)
    out = D.new_fermion()
    D.Dhop(psi, out=out)
    D.Dhop(psi, out=out)  # a kept call
    first = D._links_c[None][1]
    V = pg.qcd.random_gauge(grid, pg.ParallelRNG(grid, [9, 9]))
    U.assign(V)
    D.Dhop(psi, out=out)
    assert D._links_c[None][1] is not first
    assert relerr(out.to_numpy(), dhop_ref(V.to_numpy(), psi.to_numpy())) < 1e-13


def test_the_even_odd_hops_share_one_compressed_copy():
    """The hops from the two checkerboards read the same two link fields, swapped: one compressed
    copy serves both, made again for both when their links are written."""
    grid = pg.GridCartesian(list(DIMS))
    rng = pg.ParallelRNG(grid, [6, 1])
    U = pg.qcd.random_gauge(grid, rng)
    psi = rng.gaussian(pg.LatticeFermion(grid))
    D = pg.qcd.WilsonFermion(U, 0.1, compress_links=True)
    W = pg.qcd.WilsonFermion(U, 0.1, compress_links=False)
    before = None
    for again in (False, True):
        if again:  # the even-odd hops' links written (the same values: W still gives the answer)
            before = D._links_c[0][1]
            for cb in (0, 1):
                D.U_cb[cb].assign(W.U_cb[cb])
        for cb in (0, 1):
            src = pg.pick_checkerboard(cb, psi)
            assert relerr(D.Meooe(src).to_numpy(), W.Meooe(src).to_numpy()) < 1e-13
        a, b = D._links_c[0], D._links_c[1]
        assert a[0][:2] == b[0][1::-1]  # the two fields' versions, swapped
        shared = [(a[1].uf, b[1].ub), (a[1].ub, b[1].uf), (a[1].zif, b[1].zib), (a[1].zib, b[1].zif),
                  (a[1].ztab, b[1].ztab)]
        assert all(x is y for x, y in shared)
        assert a[1] is not before and a[1].uf is not getattr(before, "uf", None)


def test_links_that_do_not_compress_are_read_whole():
    grid = pg.GridCartesian(list(DIMS))
    rng = pg.ParallelRNG(grid, [5, 5])
    U = pg.qcd.random_gauge(grid, rng)
    U.assign(1.01 * U)
    psi = rng.gaussian(pg.LatticeFermion(grid))
    D = pg.qcd.WilsonFermion(U, 0.1, compress_links=True)
    assert relerr(D.Dhop(psi).to_numpy(), dhop_ref(U.to_numpy(), psi.to_numpy())) < 1e-13
    assert D._links_c[None][1] is None and _used(D) == []


@pytest.mark.parametrize("nsimd", [8, 4])
def test_compression_pays_only_out_of_cache(reference_cache, nsimd):
    """The rule at the cache it was measured with (``reference_cache``)."""
    assert not cl.compression_pays(8 ** 4 // nsimd, nsimd, np.float64)       # 8^4 double: in the caches
    assert cl.compression_pays(24 ** 4 // nsimd, nsimd, np.float64)
    assert not cl.compression_pays(24 ** 4 // nsimd, nsimd, np.float64, Ls=8)  # 5D: the links are reused
    # 12^4: the even-odd hop in double (16 MB) compressed, in single (8 MB) whole
    half = 12 ** 4 // 2 // nsimd
    assert cl.compression_pays(half, nsimd, np.float64, links=8)
    assert not cl.compression_pays(half, nsimd, np.float32, links=8)
    # eight links a site from memory for the even-odd hop, four for the full grid: 12^4 single's
    # full-grid hop reads 10 MB, an even-odd hop of as many sites 16 MB
    assert not cl.compression_pays(2 * half, nsimd, np.float32, links=4)
    assert cl.compression_pays(2 * half, nsimd, np.float32, links=8)


@pytest.mark.skipif(os.environ.get("PYGRID_TEST_DEVICE", "unified") != "unified",
                    reason="24 MB of links, above the device passes' watermark; the main pass runs it")
def test_the_operators_compress_by_the_bytes_each_hop_reads(reference_cache):
    """On 12^4 double the even-odd hop (eight links a site from memory, 16 MB) reads its links
    compressed and so does the full grid (20 MB); on 12^4 single neither (10 and 8 MB), at the
    cache the rule was measured with."""
    for prec, want in (("double", (True, True)), ("single", (False, False))):
        grid = pg.GridCartesian([12, 12, 12, 12], precision=prec)
        U = pg.qcd.random_gauge(grid, pg.ParallelRNG(grid, [1]), precision=prec)
        D = pg.qcd.WilsonFermion(U, 0.1)
        assert (D.reads_compressed_links(), D.reads_compressed_links(0), D.reads_compressed_links(1)) == (
            want[0], want[1], want[1])


def test_both_orders_rebuild_the_third_rows():
    """The register order rebuilds a site's eight third rows before its first point, the tiled
    order each point's before its product; both kernels take the phase tables."""
    for wide in (True, False):
        src = kw._source(4, "float64", False, wide, compressed=True)
        assert src.count("vthirdrow(") == 16   # eight points, with the halo branches and without
        assert "def dhop_local(" in src and "zif, zib, ztab):" in src
        assert "def dhop_local_dag(" in kw._source(4, "float64", False, wide, compressed=True, dag=True)
    with pytest.raises(ValueError, match="4D"):
        kw._source(4, "float64", True, False, compressed=True)


def test_the_configuration_switches_the_default_off(monkeypatch):
    monkeypatch.setattr(cl, "compression_pays", lambda *a, **k: True)  # as on a large lattice
    grid = pg.GridCartesian(list(DIMS))
    U = pg.qcd.random_gauge(grid, pg.ParallelRNG(grid, [2, 2]))
    # by default the hand-unrolled kernel alone; the generic one when asked
    assert pg.qcd.WilsonFermion(U, 0.1).reads_compressed_links() == (dslash.variant() == "unroll")
    before = config.set_current(dataclasses.replace(config.current(), compress_links="never"))
    try:
        assert not pg.qcd.WilsonFermion(U, 0.1).reads_compressed_links()
        assert pg.qcd.WilsonFermion(U, 0.1, compress_links=True).reads_compressed_links()
    finally:
        config.set_current(before)
    with pytest.raises(pg.errors.GridError, match="compress_links"):
        pg.qcd.WilsonFermion(U, 0.1, compress_links="yes")


def test_the_configuration_flags():
    """--compress-links asks every kernel, --no-compress-links none; PYGRID_COMPRESS_LINKS takes the
    three names and, as before them, 1 and 0."""
    parse = config.parse_args
    assert config.Config().compress_links == "auto"
    assert parse(["--compress-links"], env={})[0].compress_links == "always"
    assert parse(["--no-compress-links"], env={})[0].compress_links == "never"
    for raw, want in (("0", "never"), ("1", "auto"), ("off", "never"), ("always", "always"),
                      ("Never", "never")):
        assert parse([], env={"PYGRID_COMPRESS_LINKS": raw})[0].compress_links == want
    cfg = parse(["--compress-links"], env={})[0]
    assert cfg.to_argv() == ["--compress-links"] and parse(cfg.to_argv(), env={})[0] == cfg
    with pytest.raises(pg.ConfigError, match="PYGRID_COMPRESS_LINKS.*always"):
        parse([], env={"PYGRID_COMPRESS_LINKS": "sometimes"})
    grid = pg.GridCartesian(list(DIMS))
    U = pg.qcd.random_gauge(grid, pg.ParallelRNG(grid, [2, 4]))
    before = config.set_current(dataclasses.replace(config.current(), compress_links="always",
                                                    dslash="generic"))
    try:  # the generic kernel and a lattice in the caches: compressed only because the flag says so
        assert pg.qcd.WilsonFermion(U, 0.1).reads_compressed_links()
        assert not pg.qcd.WilsonFermion(U, 0.1, compress_links=False).reads_compressed_links()
    finally:
        config.set_current(before)


def test_the_generic_kernel_reads_compressed_links_when_asked():
    """Under the generic kernel (every backend's, the only one off the CPU) an operator reads its
    links compressed only when asked (``compress_links=True``; on the CPU it ran no faster so), on
    the full grid and in the even-odd hops, and agrees with numpy."""
    grid = pg.GridCartesian(list(DIMS))
    rng = pg.ParallelRNG(grid, [3, 3])
    U = pg.qcd.random_gauge(grid, rng)
    psi = rng.gaussian(pg.LatticeFermion(grid))
    bc = dict(boundary_phases=[1, 1, 1, -1])
    before = config.set_current(dataclasses.replace(config.current(), dslash="generic"))
    try:
        assert not pg.qcd.WilsonFermion(U, 0.1, **bc).reads_compressed_links()
        D = pg.qcd.WilsonFermion(U, 0.1, **bc, compress_links=True)
        got = D.Dhop(psi).to_numpy()
        assert D.reads_compressed_links() and D.reads_compressed_links(0) and D.reads_compressed_links(1)
        full = pg.LatticeFermion(grid)
        pg.set_checkerboard(full, D.Meooe(pg.pick_checkerboard(0, psi)))
        pg.set_checkerboard(full, D.Meooe(pg.pick_checkerboard(1, psi)))
        got_eo = full.to_numpy()
    finally:
        config.set_current(before)
    want = dhop_ref(U.to_numpy(), psi.to_numpy(), **bc)
    assert relerr(got, want) < 1e-13
    assert relerr(got_eo, want) < 1e-13


def test_compression_of_several_buffers(setup):
    """Each buffer's rows and phase rows are those it has alone (the table shared), and a bad link
    at the last site of a later buffer is still found."""
    prec, grid, U, psi = setup
    D = pg.qcd.WilsonFermion(U, 0.1, **BOUNDARIES["antiperiodic_t"])
    with D.links.view(pg.CpuRead) as u:
        u = np.array(u)
    whole = cl.compress_links([u])
    both = cl.compress_links([u, u])
    assert np.array_equal(both[1], whole[1])
    for rows, zi in both[0]:
        assert np.array_equal(rows, whole[0][0][0]) and np.array_equal(zi, whole[0][0][1])
    bad = u.copy()
    bad[-1, 24] *= 1.01  # element (2, 0) of the last site's z link: its third row
    assert cl.compress_links([u, bad]) is None


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_compiled_link_helpers_against_numpy(dtype):
    """link_rows' determinants and third-row differences against np.linalg.det and np.cross on
    random complex matrices (not unitary: every term of the formulas counts)."""
    from pygrid.qcd import link_rows

    rng = np.random.default_rng(7)
    n, W = 5, 4
    buf = rng.normal(size=(n, 36, 2, W)).astype(dtype)
    z = np.moveaxis(buf.reshape(n, 4, 3, 3, 2, W).astype(np.float64), -1, 2)
    z = z[..., 0] + 1j * z[..., 1]                                  # (n, 4, W, 3, 3)
    f = np.zeros((3 + 4 * n, W), np.complex128)
    link_rows.link_dets(buf, f, 3)
    want = np.linalg.det(z).reshape(-1, W)
    assert np.allclose(f[3:], want, rtol=1e-12, atol=1e-12) and not f[:3].any()
    table = np.exp(1j * rng.uniform(0, 6, size=(2, W)))
    index = np.concatenate([np.zeros(3, np.int64), rng.integers(0, 2, size=4 * n)])
    rows = np.zeros((4, n, 6, 2, W), dtype)
    planes = np.stack([table.real, table.imag], axis=1)
    worst = link_rows.pack_rows(buf, index, 3, planes, rows)
    phase = table[index[3:]].reshape(n, 4, W)
    third = phase[..., None] * np.conj(np.cross(z[..., 0, :], z[..., 1, :]))
    assert np.isclose(worst, np.abs(third - z[..., 2, :]).max(), rtol=1e-12)
    assert np.array_equal(rows, buf.reshape(n, 4, 9, 2, W)[:, :, :6].transpose(1, 0, 2, 3, 4))


def _by_direction(D):
    return {k: made for k, (_, made) in D._links_c.items() if made is not None and made.rows == 3}


@pytest.mark.parametrize("prec", ["double", "single"])
def test_the_tiled_order_reads_whole_links_by_direction(prec, structure):
    """On fields in the caches the tiled order (narrow, AVX2's) reads a copy of the whole links
    stored direction by direction (one pass a direction reads one stream of links); the register
    order (wide) reads the links themselves. Every hop against numpy, both ways, the even-odd ones
    and the Schur operator against the operator on the generic kernel."""
    if dslash.variant() != "unroll":
        pytest.skip("the copy is the unrolled kernel's")
    grid = pg.GridCartesian(list(DIMS), precision=prec)
    rng = pg.ParallelRNG(grid, [4, 2])
    U = pg.qcd.random_gauge(grid, rng, precision=prec)
    psi = rng.gaussian(pg.LatticeFermion(grid, prec))
    D = pg.qcd.WilsonFermion(U, 0.1, boundary_phases=[1, 1, 1, -1])
    Un, pn = U.to_numpy(), psi.to_numpy()
    ref = dhop_ref(Un, pn, boundary_phases=[1, 1, 1, -1])
    tol = TOL[prec] * 10
    out = D.new_fermion()
    for _ in range(2):  # the checked call, then the kept one
        assert relerr(D.Dhop(psi, out=out).to_numpy(), ref) < tol
    ref_dag = dhop_ref(Un, pn, True, boundary_phases=[1, 1, 1, -1])
    assert relerr(D.Mdag(psi).to_numpy(), 4.1 * pn + ref_dag) < tol
    odd = pg.pick_checkerboard(1, psi)
    got = [D.Meooe(odd).to_numpy(), D.MeooeDag(odd).to_numpy(), SchurOperator(D).MdagM(odd).to_numpy()]
    assert not D.reads_compressed_links() and not D.reads_compressed_links(1)
    copies = _by_direction(D)
    if structure == "narrow":
        assert sorted(copies, key=str) == [0, 1, None]
        f = copies[None].uf
        assert f.shape == (4, grid.osites, 9, 2, grid.nsimd)
        # direction mu of site o is the mu-th link of o in the field's own layout
        with D.links.view(pg.CpuRead) as raw:
            assert all(np.array_equal(f[mu], raw[:, 9 * mu:9 * mu + 9]) for mu in range(4))
    else:
        assert copies == {}
    G = pg.qcd.WilsonFermion(U, 0.1, boundary_phases=[1, 1, 1, -1])
    before = config.set_current(dataclasses.replace(config.current(), dslash="generic"))
    try:
        want = [G.Meooe(odd).to_numpy(), G.MeooeDag(odd).to_numpy(), SchurOperator(G).MdagM(odd).to_numpy()]
    finally:
        config.set_current(before)
    for g, w in zip(got, want):
        assert relerr(g, w) < tol


def test_links_by_direction_follow_the_gauge_field():
    """The tiled order's copy of the links is made again when they are written, also under a kept
    call."""
    before = config.set_current(dataclasses.replace(config.current(), dslash_structure="narrow"))
    try:
        if dslash.variant() != "unroll":
            pytest.skip("the copy is the unrolled kernel's")
        grid = pg.GridCartesian(list(DIMS))
        rng = pg.ParallelRNG(grid, [8, 2])
        U = pg.qcd.random_gauge(grid, rng)
        psi = rng.gaussian(pg.LatticeFermion(grid))
        D = pg.qcd.WilsonFermion(U, 0.1)
        out = D.new_fermion()
        D.Dhop(psi, out=out)
        D.Dhop(psi, out=out)  # a kept call
        first = D._links_c[None][1]
        assert first.rows == 3
        V = pg.qcd.random_gauge(grid, pg.ParallelRNG(grid, [9, 8]))
        U.assign(V)
        D.Dhop(psi, out=out)
        assert D._links_c[None][1] is not first
        assert relerr(out.to_numpy(), dhop_ref(V.to_numpy(), psi.to_numpy())) < 1e-13
    finally:
        config.set_current(before)


def test_links_by_direction_layout():
    buf = np.arange(3 * 36 * 2 * 4, dtype=np.float64).reshape(3, 36, 2, 4)
    lk = cl.LinksByDirection.of(buf, buf)
    assert lk.ub is lk.uf and lk.uf.shape == (4, 3, 9, 2, 4) and lk.rows == 3
    for mu in range(4):
        assert np.array_equal(lk.uf[mu], buf[:, 9 * mu:9 * mu + 9])
    other = buf + 1.0
    lk2 = cl.LinksByDirection.of(buf, other)
    assert np.array_equal(lk2.ub[1], other[:, 9:18]) and lk2.swapped().uf is lk2.ub
    src = kw._source(4, "float64", False, False, compressed=kw.BY_DIRECTION)
    assert "vthirdrow" not in src.split("def dhop_kernel")[1] and "* LK + DF" in src
    with pytest.raises(pg.errors.ConformabilityError, match="LinksByDirection"):
        cl.LinksByDirection.of(buf[:, :30], buf[:, :30])
