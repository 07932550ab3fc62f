"""The Dirac kernels on every backend: one description, generated for numba, CUDA C and OpenCL C.

* The generic kernel (generated from pygrid.qcd.kernels_generic) equals the
  hand-unrolled one on openmp, for every lane-permute path (xor shuffles and
  the 4-way rotations of the table path), 4D and 5D, with and without the
  diagonal term, Dhop and its adjoint.
* The generated CUDA C and OpenCL C of every Dirac kernel, compiled by the host
  compiler under the SIMT emulation, give the Wilson, domain-wall and Möbius
  operators that equal the numpy references.
* The CuPy launch path of the cuda backend runs the Dirac operators against a
  stand-in cupy whose RawKernel is that emulation.
* The vocabulary refuses a description that mixes lane-permuted values with
  others (a forgotten permute fails on every target, not only on the CPU).

The sycl backend runs the Wilson, domain-wall and solver suites for real in the
sycl pass of `make test` (PYGRID_TEST_BACKEND=sycl).  This file runs there too:
with the fields in device memory, the openmp and emulated kernels above read and
write them through host views.
"""
import shutil
import sys

import numpy as np
import pytest
from conftest import COMPILED, backend
from numpy_refs import dhop_ref

import pygrid as pg
import pygrid.qcd  # noqa: F401
from pygrid.accelerator import covariant, emulated_backend
from pygrid.accelerator.covariant import DescriptionError, Kernel, Param
from pygrid.errors import BackendError
from pygrid.qcd import dslash, kernels_generic as kg

needs_cxx = pytest.mark.skipif(
    not emulated_backend.shutil.which("g++") and not emulated_backend.os.environ.get("CXX"),
    reason="no host C++ compiler (g++) for the SIMT emulation")

TOL = {"double": 1e-12, "single": 2e-6}


def relerr(a, b):
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def setup(dims=(4, 4, 4, 8), layout=None, prec="double", Ls=None):
    grid = pg.GridCartesian(dims, simd_layout=layout, precision=prec)
    rng = pg.ParallelRNG(grid, [3, 1, 4])
    U = pg.qcd.random_gauge(grid, rng, precision=prec)
    g = grid if Ls is None else pg.GridCartesian5D(grid, Ls)
    psi = pg.LatticeFermion(g, prec)
    pg.ParallelRNG(g, [2, 7]).gaussian(psi)
    return grid, U, psi


def raw_hop(D, U, psi, Ls, which, alpha, dag, cb=False):
    """One dhop call on raw views; returns the output field as numpy."""
    if cb:
        src = pg.pick_checkerboard(0, psi)
        out = pg.Lattice(src.grid, src.site_type, src.precision, checkerboard=1)
        uf, ub, st = D.U_cb[1], D.U_cb[0], D.stencil_cb[0]
    else:
        src, out, uf, ub, st = psi, pg.Lattice(psi.grid, psi.site_type, psi.precision), U, U, D.stencil
    # kernel views: a host backend gets host arrays also when the fields live in device memory
    with (
        src._kernel_view(pg.AcceleratorRead) as p,
        uf._kernel_view(pg.AcceleratorRead) as f,
        ub._kernel_view(pg.AcceleratorRead) as b,
        out._kernel_view(pg.AcceleratorWriteDiscard) as o,
    ):
        dslash.dhop(o, p, f, b, st, Ls, -0.5, alpha, p if alpha else None, dag, which=which)
    return out.to_numpy()


# ---- generic == unrolled on openmp ----------------------------------------------------

@pytest.mark.parametrize("prec,layout", [("double", None), ("double", (1, 1, 1, 4)), ("single", None),
                                         ("single", (1, 1, 2, 4))])
def test_generic_equals_unrolled_kernel(prec, layout):
    grid, U, psi = setup(layout=layout, prec=prec)
    D = pg.qcd.WilsonFermion(U, 0.1)
    with backend("openmp"):  # whatever the backend under test: the unrolled kernel is openmp's
        for alpha, dag, cb in ((0.0, False, False), (4.1, True, False), (0.0, True, True)):
            a = raw_hop(D, U, psi, 1, "unroll", alpha, dag, cb)
            b = raw_hop(D, U, psi, 1, "generic", alpha, dag, cb)
            assert relerr(b, a) < TOL[prec], (alpha, dag, cb)
        # and against the numpy formula, so both are pinned independently
        want = dhop_ref(U.to_numpy(), psi.to_numpy(), True) + 4.1 * psi.to_numpy()
        assert relerr(raw_hop(D, U, psi, 1, "generic", 4.1, True), want) < 10 * TOL[prec]


def test_generic_equals_unrolled_kernel_5d():
    grid, U, psi5 = setup(dims=(4, 4, 4, 4), Ls=3)
    D = pg.qcd.WilsonFermion(U, 0.1)
    with backend("openmp"):
        a = raw_hop(D, U, psi5, 3, "unroll", 0.0, False)
        b = raw_hop(D, U, psi5, 3, "generic", 0.0, False)
    assert relerr(b, a) < 1e-13
    pn = psi5.to_numpy()
    for s in range(3):
        assert relerr(b[s], dhop_ref(U.to_numpy(), pn[s])) < 1e-12


def test_dslash_flags_select_the_variant():
    cfg, _ = pg.config.parse_args(["--dslash-generic"])
    assert cfg.dslash == "generic" and cfg.to_argv() == ["--dslash-generic"]
    cfg, _ = pg.config.parse_args(["--dslash-unroll"], env={})
    assert cfg.dslash == "unroll"
    assert pg.config.parse_args([], env={"PYGRID_DSLASH": "generic"})[0].dslash == "generic"
    with pytest.raises(pg.ConfigError, match="Dirac kernel variant"):
        pg.config.make_config(dslash="asm")
    assert dslash.variant(pg.get_backend("openmp")) == "unroll"


@needs_cxx
def test_unrolled_kernel_on_a_gpu_backend_is_a_clear_error():
    grid, U, psi = setup(dims=(4, 4, 4, 4))
    D = pg.qcd.WilsonFermion(U, 0.1)
    with backend("cuda-emulated"):
        with pytest.raises(BackendError, match="hand-unrolled.*cuda-emulated"):
            raw_hop(D, U, psi, 1, "unroll", 0.0, False)
        old = pg.config.current()
        pg.config.set_current(pg.config.make_config(old, dslash="unroll"))
        try:
            with pytest.raises(BackendError, match="--dslash-generic"):
                D.M(psi)
        finally:
            pg.config.set_current(old)


# ---- the generated C of every Dirac kernel, under the SIMT emulation --------------------

def _dwf_refs(op, psi5):
    """The domain-wall pieces from the openmp run (itself checked against numpy in test_domain_wall)."""
    o5 = pg.pick_checkerboard(1, psi5)
    return {"M": op.M(psi5).to_numpy(), "Mdag": op.Mdag(psi5).to_numpy(), "Mooee": op.Mooee(o5).to_numpy(),
            "MooeeInv": op.MooeeInv(o5).to_numpy(), "MooeeInvDag": op.MooeeInvDag(o5).to_numpy(),
            "Meooe": op.Meooe(o5).to_numpy(), "MeooeDag": op.MeooeDag(o5).to_numpy(),
            "M5D": op.M5D(psi5).to_numpy()}


def _into_a_halo(st, seed):
    """Half the outer sites, chosen at random, moved into a halo as rows from another rank arrive:
    (the moved sites, and per point the destination sites that read one, their source sites and
    the point's first halo row; the stencil's neighbour table renumbered to read those rows)."""
    n4 = st.neighbours.shape[1]
    moved = np.random.default_rng(seed).choice(n4, n4 // 2, replace=False)
    nbr = st.neighbours.copy()
    faces, offset = [], 0
    for p in range(8):
        face = np.nonzero(np.isin(nbr[p], moved))[0]
        faces.append((face, nbr[p, face].copy(), offset))
        nbr[p, face] = n4 + offset + np.arange(len(face))
        offset += len(face)
    nbr.setflags(write=False)  # read-only as the stencil's tables, so numba reuses the kernel it compiled
    return moved, faces, nbr


def _projected_rows(p, rows, mu, g, Ls):
    """Independently of the kernels: the upper two spins of (1 + g gamma_mu) psi at the outer sites
    ``rows`` (all Ls slices), as the halo holds them, (len(rows) * Ls, 6, 2, nsimd)."""
    ns = p.shape[3]
    x = p.reshape(-1, Ls, 4, 3, 2, ns)[rows]
    z = x[..., 0, :] + 1j * x[..., 1, :]
    gamma = np.asarray(pg.tensors.constant.Gamma.mu[mu].array())
    h = (z + g * np.einsum("ab,nsbcl->nsacl", gamma, z))[:, :, :2]
    return np.stack([h.real, h.imag], axis=-2).reshape(-1, 6, 2, ns).astype(p.dtype)


def _split(nbr, n4):
    """(interior, boundary): the sites that read no halo row, the others, as a split lattice's."""
    reads = np.any(nbr >= n4, axis=0)
    return np.nonzero(~reads)[0].astype(np.int32), np.nonzero(reads)[0].astype(np.int32)


def _halo_of(p, faces, Ls, signs=(-1.0, 1.0)):
    """The projected halo of ``_into_a_halo``'s faces for the hop with (forward, backward) signs."""
    return np.concatenate([_projected_rows(p, rows, q % 4, signs[q >= 4], Ls)
                           for q, (_, rows, _) in enumerate(faces)])


@needs_cxx
@pytest.mark.parametrize("name,Ls", [
    (n, Ls) for n in ("openmp", "cuda-emulated", "opencl-emulated", "opencl-simd-emulated") for Ls in (1, 3)
    # the vector form's g++ builds of these kernels take a minute a lattice; its 5D run covers the text
    if not (n == "opencl-simd-emulated" and Ls == 1)])
def test_generic_kernel_reads_neighbours_from_a_halo(name, Ls):
    """Neighbour rows renumbered into a halo array of half spinors, as rows from another rank
    arrive projected (E.read_either for the links), give the same hopping term on every target,
    Dhop and its adjoint; the local copies of those rows are poisoned, so a read that ignored the
    halo would show.  The kernel of a lattice without a halo gives it too.  The pack kernel
    (WILSON_PACK) makes the same halo rows as the numpy projection."""
    if name != "openmp" and shutil.which("g++") is None:
        pytest.skip("no host C++ compiler")
    grid, U, psi = setup(dims=(4, 4, 4, 4), Ls=None if Ls == 1 else Ls)
    st = pg.qcd.WilsonFermion(U, 0.1).stencil
    n4 = st.neighbours.shape[1]
    moved, faces, nbr = _into_a_halo(st, 0)
    with psi.view(pg.CpuRead) as p, U.view(pg.CpuRead) as u:
        p, u = p.copy(), u.copy()
    ns, dt = p.shape[3], p.dtype
    ubh = np.concatenate([u[rows] for _, rows, _ in faces])
    p_far, u_far = p.copy(), u.copy()
    p_far.reshape(n4, Ls * 12, 2, ns)[moved] = np.nan
    u_far[moved] = np.nan
    rows = np.concatenate([r for _, r, _ in faces]).astype(np.int32)
    mus = np.concatenate([np.full(len(r), q % 4, np.int32) for q, (_, r, _) in enumerate(faces)])
    fwd = np.concatenate([np.full(len(r), q < 4) for q, (_, r, _) in enumerate(faces)])
    kernel = kg.WILSON_HOP_5D if Ls > 1 else kg.WILSON_HOP
    interior_kernel = kg.WILSON_HOP_5D_INTERIOR if Ls > 1 else kg.WILSON_HOP_INTERIOR
    inner, bound = _split(nbr, n4)
    assert len(inner) and len(bound)
    with backend(name):
        for sf in (-1.0, 1.0):  # Dhop, its adjoint
            coef = np.array([-0.5, 0.0, sf, -sf], dt)
            halo = _halo_of(p, faces, Ls, (sf, -sf))
            packed = np.zeros_like(halo)
            pg.get_backend().launch(kg.WILSON_PACK, dict(
                packed=packed, psi=p, rows=rows, mus=mus, signs=np.where(fwd, sf, -sf).astype(dt),
                nrows=len(rows), Ls=Ls), ns, dt)
            np.testing.assert_allclose(packed, halo, rtol=0, atol=1e-13)
            outs = []
            for psi_, ub_, nbr_, ubh_ in ((p, u, st.neighbours, u), (p_far, u_far, nbr, ubh)):
                out = np.zeros_like(p)
                args = dict(out=out, psi=psi_, uf=u, ub=ub_, nbr=nbr_, perm=st.perm, lanes=st.lanes,
                            pxor=st.lane_xor, coef=coef, diag=out, use_diag=0, n4=n4, Ls=Ls, halo=packed,
                            ubh=ubh_)
                if nbr_ is nbr:  # the interior by the kernel without a halo, then the boundary
                    pg.get_backend().launch(interior_kernel, dict(args, sites=inner, nsites=len(inner)),
                                            ns, dt)
                    sites = bound
                else:  # every site through the halo's kernel
                    sites = np.arange(n4, dtype=np.int32)
                pg.get_backend().launch(kernel, dict(args, sites=sites, nsites=len(sites)), ns, dt)
                outs.append(out)
            # the kernel of a lattice without a halo, on the local fields: the same hopping term
            out = np.zeros_like(p)
            pg.get_backend().launch(
                kg.WILSON_HOP_5D_LOCAL if Ls > 1 else kg.WILSON_HOP_LOCAL,
                dict(out=out, psi=p, uf=u, ub=u, nbr=st.neighbours, perm=st.perm, lanes=st.lanes,
                     pxor=st.lane_xor, coef=coef, diag=out, use_diag=0, n4=n4, Ls=Ls),
                ns, dt)
            outs.append(out)
            assert np.all(np.isfinite(outs[1])) and np.abs(outs[0]).max() > 0
            np.testing.assert_array_equal(outs[0], outs[2])
            np.testing.assert_array_equal(outs[1], outs[0])


@needs_cxx
@pytest.mark.parametrize("name,prec,layout,cb", [
    (n, p, lay, cb) for n in ("openmp", "cuda-emulated", "opencl-emulated", "opencl-simd-emulated")
    for p, lay, cb in (("double", None, False), ("single", None, False), ("double", (1, 1, 2, 2), True))
    # the vector form's single-precision build alone takes 50 s of g++; its double runs the same source
    if not (n == "opencl-simd-emulated" and p == "single")])
def test_generic_kernel_on_compressed_links(name, prec, layout, cb):
    """The generic kernel reading the links as two rows and a phase (WILSON_HOP_LOCAL_C) gives the
    kernel on whole links on every target: antiperiodic in time (the edge links' phase -1) and
    twisted in x (a phase that is not real), the full grid and the even-odd hop (forward and
    backward links of different fields), Dhop and its adjoint."""
    from pygrid.qcd import compressed_links as cl

    grid, U, psi = setup(layout=layout, prec=prec)
    D = pg.qcd.WilsonFermion(U, 0.1, boundary_phases=[np.exp(0.7j), 1, 1, -1])
    if cb:
        psi, st = pg.pick_checkerboard(1, psi), D.stencil_cb[1]
        uf_f, ub_f = D.U_cb[0], D.U_cb[1]
    else:
        st, uf_f, ub_f = D.stencil, D.links, D.links
    with psi.view(pg.CpuRead) as p, uf_f.view(pg.CpuRead) as a, ub_f.view(pg.CpuRead) as b:
        p, uf, ub = p.copy(), a.copy(), b.copy()
    ub = uf if ub_f is uf_f else ub
    lc = cl.CompressedLinks.of(uf, ub)
    assert lc is not None and len(lc.ztab) > 2  # 1, -1 and the twist at least
    n4, ns, dt = st.neighbours.shape[1], p.shape[3], p.dtype
    for dag in (False, True):
        coef = np.array([-0.5, 0.0, 1.0 if dag else -1.0, -1.0 if dag else 1.0], dt)
        tables = dict(nbr=st.neighbours, perm=st.perm, lanes=st.lanes, pxor=st.lane_xor, coef=coef,
                      use_diag=0, n4=n4, Ls=1)
        whole, comp = np.zeros_like(p), np.zeros_like(p)
        with backend(name):
            pg.get_backend().launch(kg.WILSON_HOP_LOCAL, dict(out=whole, psi=p, uf=uf, ub=ub, diag=whole,
                                                              halo=p, ubh=ub, **tables), ns, dt)
            pg.get_backend().launch(kg.WILSON_HOP_LOCAL_C, dict(
                out=comp, psi=p, diag=comp, **lc.on(pg.get_backend()), **tables), ns, dt)
        assert np.all(np.isfinite(comp)) and np.abs(whole).max() > 0
        assert relerr(comp, whole) < 10 * TOL[prec], (name, dag)


@needs_cxx
@pytest.mark.parametrize("name", ["openmp", "cuda-emulated", "opencl-emulated", "opencl-simd-emulated"])
def test_generic_compressed_kernel_reads_a_halo(name):
    """WILSON_HOP_C, the generic kernel on compressed links of a lattice split over ranks: neighbour
    rows renumbered into a halo (half spinors in ``halo``, links compressed after the local ones)
    give the hop of the kernel on whole local links; the local copies of those rows are replaced by
    other rows (links by other SU(3) links), so a read that ignored the halo would show."""
    from pygrid.qcd import compressed_links as cl

    grid, U, psi = setup(dims=(4, 4, 4, 4))
    D = pg.qcd.WilsonFermion(U, 0.1, boundary_phases=[1, 1, 1, -1])
    st = D.stencil
    n4 = st.neighbours.shape[1]
    moved, faces, nbr = _into_a_halo(st, 1)
    with psi.view(pg.CpuRead) as p, D.links.view(pg.CpuRead) as u:
        p, u = p.copy(), u.copy()
    ns, dt = p.shape[3], p.dtype
    halo = _halo_of(p, faces, 1)
    p_far, u_far = p.copy(), u.copy()
    p_far[moved] = p[np.roll(moved, 1)]
    u_far[moved] = u[np.roll(moved, 1)]
    lc = cl.CompressedLinks.of(u, np.concatenate([u_far] + [u[rows] for _, rows, _ in faces]))
    assert lc is not None and lc.ub.shape[1] == n4 + len(halo)
    coef = np.array([-0.5, 0.0, -1.0, 1.0], dt)
    tables = dict(perm=st.perm, lanes=st.lanes, pxor=st.lane_xor, coef=coef, use_diag=0, n4=n4, Ls=1)
    want, got = np.zeros_like(p), np.zeros_like(p)
    inner, bound = _split(nbr, n4)
    with backend(name):
        pg.get_backend().launch(kg.WILSON_HOP_LOCAL, dict(out=want, psi=p, uf=u, ub=u, diag=want,
                                                          nbr=st.neighbours, **tables), ns, dt)
        args = dict(out=got, psi=p_far, diag=got, halo=halo, nbr=nbr, **lc.on(pg.get_backend()), **tables)
        pg.get_backend().launch(kg.WILSON_HOP_INTERIOR_C, dict(args, sites=inner, nsites=len(inner)), ns, dt)
        pg.get_backend().launch(kg.WILSON_HOP_C, dict(args, sites=bound, nsites=len(bound)), ns, dt)
    assert relerr(got, want) < 10 * TOL["double"], name


@pytest.mark.parametrize("name,prec", [(n, p) for n in ("cuda-emulated", "opencl-emulated")
                                       for p in ("double", "single")] + [("opencl-simd-emulated", "double")])
def test_dirac_operators_through_generated_c(name, prec):
    grid, U, psi = setup(prec=prec, layout=(1, 1, 1, 4) if prec == "double" else None)
    D = pg.qcd.WilsonFermion(U, 0.1)
    Un, pn = U.to_numpy(), psi.to_numpy()
    Ls = 4
    psi5 = pg.LatticeFermion(pg.GridCartesian5D(grid, Ls), prec)
    pg.ParallelRNG(psi5.grid, [9]).gaussian(psi5)
    mob = pg.qcd.MobiusFermion(U, Ls, 0.05, 1.8, 1.5, 0.5)
    dwf = pg.qcd.DomainWallFermion(U, Ls, 0.05, 1.8)
    refs = {k: _dwf_refs(op, psi5) for k, op in (("mobius", mob), ("shamir", dwf))}
    with backend(name):
        assert relerr(D.M(psi).to_numpy(), 4.1 * pn + dhop_ref(Un, pn)) < 10 * TOL[prec]
        assert relerr(D.Mdag(psi).to_numpy(), 4.1 * pn + dhop_ref(Un, pn, True)) < 10 * TOL[prec]
        full = pg.LatticeFermion(grid, prec)
        pg.set_checkerboard(full, D.Meooe(pg.pick_checkerboard(0, psi)))
        par = np.indices(pn.shape[:4]).sum(axis=0) % 2 == 1
        assert relerr(full.to_numpy()[par], dhop_ref(Un, pn)[par]) < 10 * TOL[prec]
        for k, op in (("mobius", mob), ("shamir", dwf)):
            got = _dwf_refs(op, psi5)
            for piece, want in refs[k].items():
                assert relerr(got[piece], want) < 10 * TOL[prec], (k, piece)


@needs_cxx
@pytest.mark.skipif(COMPILED in ("cuda", "hip"),
                    reason="the stand-in CuPy would replace the real one under test")
def test_cupy_launch_path_runs_the_dirac_operators(monkeypatch):
    from cupy_standin import dirac_cupy

    from pygrid.accelerator import backends as _bk

    cp = dirac_cupy()
    launched = cp.launched
    monkeypatch.setitem(sys.modules, "cupy", cp)
    monkeypatch.setattr(_bk, "_backends", dict(_bk._backends))
    grid, U, psi = setup(dims=(4, 4, 4, 4))
    D = pg.qcd.WilsonFermion(U, 0.1)
    dwf = pg.qcd.DomainWallFermion(U, 4, 0.05, 1.8)
    psi5 = dwf.new_fermion()
    pg.ParallelRNG(psi5.grid, [4]).gaussian(psi5)
    want_w, want_d = D.M(psi).to_numpy(), dwf.M(psi5).to_numpy()
    want_inv = dwf.MooeeInv(pg.pick_checkerboard(0, psi5)).to_numpy()
    with backend("cuda"):
        assert relerr(D.M(psi).to_numpy(), want_w) < 1e-13
        assert relerr(dwf.M(psi5).to_numpy(), want_d) < 1e-13
        assert relerr(dwf.MooeeInv(pg.pick_checkerboard(0, psi5)).to_numpy(), want_inv) < 1e-13
        assert "wilson_hop_local_c" not in launched
        # the links compressed when asked, copied to the device once (Backend.device_copy)
        Dc = pg.qcd.WilsonFermion(U, 0.1, compress_links=True)
        assert relerr(Dc.M(psi).to_numpy(), want_w) < 1e-13
        assert relerr(Dc.M(psi).to_numpy(), want_w) < 1e-13
        copies = Dc._links_c[None][1]._copies
        assert len(copies) == 2 and all(isinstance(d, cp.ndarray) for _, d in copies.values())
    assert {"wilson_hop_local", "wilson_hop_local_c", "bidiag_stream", "bidiag_solve"} <= set(launched)

    # and with the fields in the stand-in's device memory, allocated by CupyDevice under the manager
    from pygrid import memory as mem

    monkeypatch.setattr(mem, "_default", mem.get_manager())
    with backend("cuda"):
        m = mem.configure(device="cuda", device_mem_mb=64)
        _, U2, psi2 = setup(dims=(4, 4, 4, 4))  # the same seeds: the same fields, now on the device
        del launched[:]
        assert relerr(pg.qcd.WilsonFermion(U2, 0.1).M(psi2).to_numpy(), want_w) < 1e-13
        st = m.stats()
        assert type(m.device).__name__ == "CupyDevice" and st["h2d_count"] >= 2 and st["d2h_count"] >= 1
        assert "wilson_hop_local" in launched and "pg_gather" in launched  # the operator's checkerboards of U


# ---- the vocabulary's rules ------------------------------------------------------------

def _bad_body(E, o, s):
    P = E.permutation(E.itable("perm")[o])
    a = E.read("x", o, 0, P)
    b = E.read("x", o, 1)
    E.store("out", o, 0, a + b)  # a carries the permute, b does not: E.permute(a) is missing


BAD = Kernel("bad", (Param("out", "field", 1, out=True), Param("x", "field", 1), Param("perm", "itable"),
                     Param("lanes", "itable"), Param("pxor", "itable"), Param("n", "int")), "n", _bad_body)


@pytest.mark.parametrize("target", ["numba", "cuda", "opencl", "opencl-simd"])
def test_a_forgotten_permute_is_refused_on_every_target(target):
    with pytest.raises(DescriptionError, match="without E.permute"):
        covariant.generate(BAD, target, 4, "float64")


def _branch_body(unpermuted):
    def body(E, o, s):
        """A neighbour read from x or y by a branch, into variables of the permute's frame; the
        bad form sets one from an unpermuted read."""
        P = E.permutation(E.itable("perm")[o])
        v = E.var(E.const(0.0), P)
        with E.when(o.less(2)):
            E.set(v, E.read("x", o, 0, None if unpermuted else P))
        with E.otherwise():
            E.set(v, E.read("y", o, 0, P))
        E.store("out", o, 0, E.permute([v], P)[0])
    return body


def _branch_kernel(unpermuted):
    params = (Param("out", "field", 1, out=True), Param("x", "field", 1), Param("y", "field", 1),
              Param("perm", "itable"), Param("lanes", "itable"), Param("pxor", "itable"), Param("n", "int"))
    return Kernel("branch", params, "n", _branch_body(unpermuted))


@pytest.mark.parametrize("target", ["numba", "cuda", "opencl", "opencl-simd"])
def test_a_branch_carries_a_permuted_read_only_in_its_frame(target):
    """E.var(v, P) holds reads of permute P from either branch; an unpermuted value is refused."""
    covariant.generate(_branch_kernel(False), target, 4, "float64")
    with pytest.raises(DescriptionError, match="unpermuted value"):
        covariant.generate(_branch_kernel(True), target, 4, "float64")


@pytest.mark.parametrize("name", ["openmp", "cuda-emulated", "opencl-simd-emulated"])
def test_a_branch_of_permuted_reads_runs(name):
    """The branch kernel above on every form: sites below 2 read x, the others y, each with the
    lane permute of its row, and the result equals numpy's."""
    if name != "openmp" and shutil.which("g++") is None:
        pytest.skip("no host C++ compiler")
    ns, n = 4, 6
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((n, 1, 2, ns)), rng.standard_normal((n, 1, 2, ns))
    lanes = np.array([[0, 1, 2, 3], [1, 0, 3, 2], [2, 3, 0, 1]], np.int32)
    perm = np.array([0, 1, 2, 1, 0, 2], np.int32)
    out = np.zeros_like(x)
    with backend(name):
        pg.get_backend().launch(_branch_kernel(False), dict(out=out, x=x, y=y, perm=perm, lanes=lanes,
                                                            pxor=np.array([0, 1, 2], np.int64), n=n), ns,
                                np.float64)
    src = np.where(np.arange(n)[:, None] < 2, x[:, 0, 0], y[:, 0, 0])
    want = np.take_along_axis(src, lanes[perm], axis=1)
    np.testing.assert_array_equal(out[:, 0, 0], want)
    np.testing.assert_array_equal(out[:, 0, 1], 0)


def test_generated_sources_of_one_description():
    """Every target's source names the same kernel and parameters; SIMT reads the permuted lane directly."""
    targets = ("numba", "cuda", "opencl", "opencl-simd")
    srcs = {t: covariant.generate(kg.WILSON_HOP_LOCAL, t, 4, "float64") for t in targets}
    assert "def wilson_hop_local(lo, hi, out, psi, uf, ub, nbr, perm, lanes, pxor, coef, diag" in (
        srcs["numba"])
    assert 'extern "C" __global__ void wilson_hop_local(' in srcs["cuda"]
    assert "__kernel void wilson_hop_local(" in srcs["opencl"]
    assert "__kernel __attribute__((vec_type_hint(double4))) void wilson_hop_local(" in srcs["opencl-simd"]
    assert "vpermute(" in srcs["numba"] and "vpermute(" not in srcs["cuda"]
    # the vector form: a site's lanes one double4, permuted by a shuffle after the read
    assert "vload4(" in srcs["opencl-simd"] and "shuffle(" in srcs["opencl-simd"]
    assert "shuffle(" not in srcs["opencl"]
    with pytest.raises(DescriptionError, match="Nsimd in"):
        covariant.generate(kg.WILSON_HOP_LOCAL, "opencl-simd", 32, "float64")
    # a straight-line site body
    assert "lanes[" in srcs["cuda"] and "for (" not in srcs["cuda"].split("{", 1)[1]


# ---- the layout kernels (checkerboards, precision) in the generated C --------------------

@needs_cxx
@pytest.mark.parametrize("name", ["cuda-emulated", "opencl-emulated"])
def test_checkerboards_convert_and_poke_through_generated_c(name):
    """pick/set_checkerboard, convert and poke as device kernels, against numpy."""
    grid, U, psi = setup(layout=(1, 1, 1, 4))
    pn = psi.to_numpy()
    want = {cb: pg.pick_checkerboard(cb, psi) for cb in (0, 1)}
    single = pg.convert(psi, "single").to_numpy()
    with backend(name):
        full = pg.LatticeFermion(grid)
        for cb in (0, 1):
            half = pg.pick_checkerboard(cb, psi)
            w = pg.LatticeFermion(grid)
            pg.set_checkerboard(w, want[cb])
            g = pg.LatticeFermion(grid)
            pg.set_checkerboard(g, half)
            assert np.array_equal(g.to_numpy(), w.to_numpy())
            pg.set_checkerboard(full, half)
        assert np.array_equal(full.to_numpy(), pn)
        s = pg.convert(psi, "single")
        assert np.array_equal(s.to_numpy(), single)
        assert relerr(pg.convert(s, "double").to_numpy(), pn) < 1e-7
        # onto another SIMD layout: the gather kernel with the cast, full and red-black
        other = pg.GridCartesian(list(grid.gdims), simd_layout=(1, 2, 2, 1), precision="single")
        assert np.array_equal(pg.convert(psi, "single", grid=other).to_numpy(), single)
        h = pg.convert(want[1], "single", grid=other)
        assert h.grid == other.red_black
        assert np.array_equal(pg.convert(h, "double", grid=grid).to_numpy(),
                              want[1].to_numpy().astype(np.complex64).astype(np.complex128))
        pg.poke_index(full, pg.peek_index(psi, "spin", 3), "spin", 0)
        want = pn.copy()
        want[..., 0, :] = pn[..., 3, :]
        assert np.array_equal(full.to_numpy(), want)


@needs_cxx
@pytest.mark.parametrize("name", ["openmp", "cuda-emulated", "opencl-emulated", "opencl-simd-emulated"])
@pytest.mark.parametrize("prec", ["double", "single"])
def test_project_su3_generated_for_every_backend(name, prec):
    """The SU(3) projection (pygrid.qcd.kernels_gauge) against the numpy Gram-Schmidt, gauge fields and
    matrices."""
    from pygrid.qcd.gauge import project_su3, project_su3_array

    grid = pg.GridCartesian((4, 4, 4, 8), precision=prec)
    U = pg.Lattice(grid, pg.LatticeGaugeField(grid).site_type, prec)
    pg.ParallelRNG(grid, [5]).gaussian(U)
    V = pg.LatticeColourMatrix(grid, prec)
    pg.ParallelRNG(grid, [6]).gaussian(V)
    with backend(name):
        for f in (U, V):
            got = project_su3(f).to_numpy()
            assert relerr(got, project_su3_array(f.to_numpy())) < 50 * TOL[prec]
            eye = np.einsum("...ab,...cb->...ac", got, got.conj())
            assert np.allclose(eye, np.eye(3), atol=50 * TOL[prec])
            assert np.allclose(np.linalg.det(got), 1, atol=50 * TOL[prec])


def test_parameter_names_of_the_generated_code_are_refused():
    k = Kernel("k", (Param("out", "field", 1, out=True), Param("U", "field", 1), Param("n", "int")), "n",
               lambda E, o, s: E.store("out", o, 0, E.read("U", o, 0)))
    with pytest.raises(DescriptionError, match="'U'"):
        covariant.generate(k, "numba", 4, "float64")


@pytest.mark.skipif(COMPILED != "sycl", reason="runs on the sycl backend (the sycl pass of make test)")
@pytest.mark.parametrize("prec", ["double", "single"])
def test_sycl_runs_both_forms_of_the_dirac_kernels_alike(prec):
    """On the SYCL device the vector form (a work-item a site) and the SIMT form (a work-item a
    lane) of the Wilson and domain-wall hops give the same fields, and those equal numpy's."""
    from pygrid.accelerator.sycl_backend import SyclBackend

    grid, U, psi = setup(prec=prec)
    Un, pn = U.to_numpy(), psi.to_numpy()
    psi5 = pg.LatticeFermion(pg.GridCartesian5D(grid, 3), prec)
    pg.ParallelRNG(psi5.grid, [9]).gaussian(psi5)
    dwf = pg.qcd.DomainWallFermion(U, 3, 0.05, 1.8)
    got = {}
    try:
        for form in ("opencl", "opencl-simd"):
            SyclBackend.FORM = form
            assert pg.get_backend().form(grid.nsimd) == form
            D = pg.qcd.WilsonFermion(U, 0.1)
            got[form] = (D.Dhop(psi).to_numpy(), D.DhopDag(psi).to_numpy(), dwf.M(psi5).to_numpy())
    finally:
        SyclBackend.FORM = None
    for a, b in zip(got["opencl"], got["opencl-simd"]):
        assert relerr(b, a) < 10 * TOL[prec]
    assert relerr(got["opencl-simd"][0], dhop_ref(Un, pn)) < 10 * TOL[prec]
    assert relerr(got["opencl-simd"][1], dhop_ref(Un, pn, True)) < 10 * TOL[prec]
