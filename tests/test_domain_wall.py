"""Domain-wall fermions (Shamir and Möbius, Grid's Cayley form) against plain numpy, and their algebra.

The reference implementation below is independent of pygrid: np.roll and einsum on
``to_numpy()`` arrays, with an explicit loop over s, written from the formulas in
docs (docs/conventions.md and the docstring of pygrid.qcd.domain_wall):

    Shamir: (M psi)_s = [(5 - M5) + Dhop] psi_s - P_- psi_{s+1} - P_+ psi_{s-1}
            (+m P_- psi_0 at s = Ls-1, +m P_+ psi_{Ls-1} at s = 0 for the wrap-around terms)
    Möbius: M = (b Dw + 1) - (1 - c Dw) S,   Dw = (4 - M5) + Dhop,
            (S psi)_s = P_- psi_{s+1} + P_+ psi_{s-1}  (-m P_- psi_0 at s = Ls-1, -m P_+ psi_{Ls-1} at s = 0)
"""
import functools

import numpy as np
import pytest
from numpy_refs import dhop_ref
from schur_checks import schur_pieces_differ

import pygrid as pg
import pygrid.qcd  # noqa: F401  (pg.qcd)
from pygrid.tensors.constant import Gamma

G = [np.asarray(Gamma.mu[mu].array()) for mu in range(4)]
G5 = np.asarray(Gamma.Five.array())
PP = (np.eye(4) + G5) / 2
PM = (np.eye(4) - G5) / 2
TOL = {"double": 1e-12, "single": 1e-5}
MASS, M5 = 0.1, 1.8
B, C = 1.5, 0.5


# ---- the independent implementation ----------------------------------------------------------

def spin(m, a):
    return np.einsum("st,...tc->...sc", m, a)


def dw_ref(U, psi5, dag=False):
    """(4 - M5) + Dhop (or its adjoint) on every slice."""
    return np.stack([(4 - M5) * p + dhop_ref(U, p, dag) for p in psi5])


def shamir_ref(U, psi5, mass=MASS):
    Ls = psi5.shape[0]
    out = np.empty_like(psi5)
    for s in range(Ls):
        r = (5 - M5) * psi5[s] + dhop_ref(U, psi5[s])
        r = r - spin(PM, psi5[s + 1]) if s < Ls - 1 else r + mass * spin(PM, psi5[0])
        r = r - spin(PP, psi5[s - 1]) if s > 0 else r + mass * spin(PP, psi5[Ls - 1])
        out[s] = r
    return out


def s_ref(psi5, mass=MASS, dag=False):
    """S (or S^dag) with the explicit s loop."""
    Ls = psi5.shape[0]
    out = np.empty_like(psi5)
    for s in range(Ls):
        if not dag:
            up = psi5[s + 1] if s < Ls - 1 else -mass * psi5[0]
            dn = psi5[s - 1] if s > 0 else -mass * psi5[Ls - 1]
            out[s] = spin(PM, up) + spin(PP, dn)
        else:
            dn = psi5[s - 1] if s > 0 else -mass * psi5[Ls - 1]
            up = psi5[s + 1] if s < Ls - 1 else -mass * psi5[0]
            out[s] = spin(PM, dn) + spin(PP, up)
    return out


def mobius_ref(U, psi5, b, c, dag=False):
    """M = (b Dw + 1) - (1 - c Dw) S;  Mdag = (b Dw^dag + 1) - S^dag (1 - c Dw^dag)."""
    if not dag:
        Spsi = s_ref(psi5)
        return b * dw_ref(U, psi5) + psi5 - (Spsi - c * dw_ref(U, Spsi))
    t = psi5 - c * dw_ref(U, psi5, True)
    return b * dw_ref(U, psi5, True) + psi5 - s_ref(t, dag=True)


def g5r5(a):
    return spin(G5, a[::-1])


def relerr(a, b):
    return np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300)


# ---- set-up (cached: compile and RNG time dominate) --------------------------------------------
@functools.cache
def gauge(prec="double", dims=(4, 4, 4, 4)):
    grid = pg.GridCartesian(dims, precision=prec)
    rng = pg.ParallelRNG(grid, [1, 2, 3, 4])
    return pg.qcd.random_gauge(grid, rng, precision=prec)


def fermion(op, seed=(5, 6, 7, 8), cb=None):
    psi = op.new_fermion()
    pg.ParallelRNG(op.grid5, list(seed)).gaussian(psi)
    return psi if cb is None else pg.pick_checkerboard(cb, psi)


def ops(prec="double", dims=(4, 4, 4, 4), Ls=4):
    U = gauge(prec, dims)
    return U, pg.qcd.DomainWallFermion(U, Ls, MASS, M5), pg.qcd.MobiusFermion(U, Ls, MASS, M5, B, C)


# ---- against numpy -----------------------------------------------------------------------------
@pytest.mark.parametrize("prec,dims,Ls", [("double", (4, 4, 4, 4), 4), ("single", (4, 4, 4, 8), 5)])
def test_shamir_against_numpy(prec, dims, Ls):
    U, D, _ = ops(prec, dims, Ls)
    assert D.grid5 == pg.GridCartesian5D(U.grid, Ls) and D.grid5_rb == D.grid5.red_black
    psi = fermion(D)
    Un, pn = U.to_numpy().astype(np.complex128), psi.to_numpy().astype(np.complex128)
    assert pn.shape == (Ls,) + dims + (4, 3)
    tol = TOL[prec]
    assert relerr(D.M(psi).to_numpy(), shamir_ref(Un, pn)) < tol
    assert relerr(D.Mdag(psi).to_numpy(), mobius_ref(Un, pn, 1.0, 0.0, dag=True)) < tol
    assert relerr(D.M5D(psi).to_numpy(), pn - s_ref(pn)) < tol
    assert relerr(D.M5Ddag(psi).to_numpy(), pn - s_ref(pn, dag=True)) < tol
    # Dhop: the 4D Wilson hopping term on every slice, both ways
    dh = D.Dhop(psi).to_numpy()
    assert relerr(dh, np.stack([dhop_ref(Un, p) for p in pn])) < tol
    assert relerr(D.Dhop(psi, dag=True).to_numpy(), np.stack([dhop_ref(Un, p, True) for p in pn])) < tol
    W = pg.qcd.WilsonFermion(U, MASS)
    for s in range(Ls):
        p4 = pg.LatticeFermion(U.grid, prec).from_numpy(psi.to_numpy()[s])
        assert relerr(dh[s], W.Dhop(p4).to_numpy()) < tol
    # out= and in-place use
    chi = D.new_fermion()
    assert D.M(psi, out=chi) is chi
    cp = psi.copy()
    D.M(cp, out=cp)
    assert relerr(cp.to_numpy(), chi.to_numpy()) < tol


def test_mobius_against_numpy_and_shamir_limit():
    U, D, Mb = ops()
    psi = fermion(D)
    Un, pn = U.to_numpy(), psi.to_numpy()
    assert relerr(Mb.M(psi).to_numpy(), mobius_ref(Un, pn, B, C)) < 1e-12
    assert relerr(Mb.Mdag(psi).to_numpy(), mobius_ref(Un, pn, B, C, dag=True)) < 1e-12
    # b = 1, c = 0 is Shamir, in every piece
    M10 = pg.qcd.MobiusFermion(U, 4, MASS, M5, 1.0, 0.0)
    for name in ("M", "Mdag", "M5D", "Mooee", "MooeeInv", "MooeeDag", "MooeeInvDag"):
        assert relerr(getattr(M10, name)(psi).to_numpy(), getattr(D, name)(psi).to_numpy()) < 1e-14, name
    po = pg.pick_checkerboard(1, psi)
    for name in ("Meooe", "MeooeDag"):
        assert relerr(getattr(M10, name)(po).to_numpy(), getattr(D, name)(po).to_numpy()) < 1e-14, name
    # the Shamir reference is the Möbius reference at b=1, c=0 (the two formulas agree)
    assert relerr(mobius_ref(Un, pn, 1.0, 0.0), shamir_ref(Un, pn)) < 1e-13


# ---- algebra --------------------------------------------------------------------------------------
def test_g5r5_hermiticity_and_adjoints():
    U, D, Mb = ops()
    psi, chi = fermion(D), fermion(D, (9, 10, 11, 12))
    # g5 R5 M g5 R5 = Mdag (Shamir)
    g = D.new_fermion().from_numpy(g5r5(psi.to_numpy()))
    assert relerr(g5r5(D.M(g).to_numpy()), D.Mdag(psi).to_numpy()) < 1e-12
    # <chi, M psi> = <Mdag chi, psi> for every operator and piece
    for op in (D, Mb):
        for a, ad in (("M", "Mdag"), ("M5D", "M5Ddag"), ("Dhop", "DhopDag")):
            x = pg.inner_product(chi, getattr(op, a)(psi))
            y = pg.inner_product(getattr(op, ad)(chi), psi)
            assert abs(x - y) < 1e-12 * abs(x), (op, a)
        x = pg.inner_product(psi, op.MdagM(psi))
        assert abs(x - pg.norm2(op.M(psi))) < 1e-12 * abs(x)
        for cb in (0, 1):
            pe, ce = pg.pick_checkerboard(cb, psi), pg.pick_checkerboard(cb, chi)
            co = pg.pick_checkerboard(1 - cb, chi)
            for a, ad, c in (
                ("Meooe", "MeooeDag", co),
                ("Mooee", "MooeeDag", ce),
                ("MooeeInv", "MooeeInvDag", ce),
            ):
                x = pg.inner_product(c, getattr(op, a)(pe))
                y = pg.inner_product(getattr(op, ad)(c), pe)
                assert abs(x - y) < 1e-12 * abs(x), (op, a, cb)
    # Möbius with c != 0 is not g5 R5-Hermitian in this (Cayley) form: documented, pinned
    gm = g5r5(Mb.M(g).to_numpy())
    assert relerr(gm, Mb.Mdag(psi).to_numpy()) > 1e-3


@pytest.mark.parametrize("which", ["shamir", "mobius"])
def test_even_odd_pieces(which):
    U, D, Mb = ops()
    op = D if which == "shamir" else Mb
    psi = fermion(op)
    full = op.M(psi)
    fulld = op.Mdag(psi)
    for cb in (0, 1):
        pc, po = pg.pick_checkerboard(cb, psi), pg.pick_checkerboard(1 - cb, psi)
        got = op.Mooee(pc)
        got.assign(got + op.Meooe(po))
        assert got.checkerboard == cb
        assert relerr(got.to_numpy(), pg.pick_checkerboard(cb, full).to_numpy()) < 1e-12
        got = op.MooeeDag(pc)
        got.assign(got + op.MeooeDag(po))
        assert relerr(got.to_numpy(), pg.pick_checkerboard(cb, fulld).to_numpy()) < 1e-12
        # the exact inverse of the diagonal block, both orders, and its adjoint
        for a, b in (("MooeeInv", "Mooee"), ("Mooee", "MooeeInv"), ("MooeeInvDag", "MooeeDag")):
            one = getattr(op, a)(getattr(op, b)(pc))
            assert relerr(one.to_numpy(), pc.to_numpy()) < 1e-12, (a, b)
        # in place
        t = pc.copy()
        op.MooeeInv(t, out=t)
        op.Mooee(t, out=t)
        assert relerr(t.to_numpy(), pc.to_numpy()) < 1e-12
    # DhopEO / DhopOE are the checkerboards of Dhop
    dh = op.Dhop(psi)
    po, pe = pg.pick_checkerboard(1, psi), pg.pick_checkerboard(0, psi)
    assert relerr(op.DhopEO(po).to_numpy(), pg.pick_checkerboard(0, dh).to_numpy()) < 1e-12
    assert relerr(op.DhopOE(pe).to_numpy(), pg.pick_checkerboard(1, dh).to_numpy()) < 1e-12


def test_single_precision_pieces_and_converted():
    U, D, Mb = ops()
    psi = fermion(D)
    for op in (D, Mb):
        s = op.converted("single")
        assert s.precision == "single" and s.grid5 == op.grid5 and type(s) is type(op)
        ps = pg.convert(psi, "single")
        assert relerr(s.M(ps).to_numpy(), op.M(psi).to_numpy()) < 1e-5
        pe = pg.pick_checkerboard(0, ps)
        one = s.MooeeInv(s.Mooee(pe))
        assert relerr(one.to_numpy(), pe.to_numpy()) < 1e-5
        with pytest.raises(pg.ConformabilityError):
            op.M(ps)


# ---- physical 4D fields ------------------------------------------------------------------------
def test_physical_field_export_and_import():
    U, D, Mb = ops()
    Ls = D.Ls
    psi = fermion(D)
    pn = psi.to_numpy()
    q = D.physical_field(psi)
    assert q.grid == U.grid
    assert relerr(q.to_numpy(), spin(PM, pn[0]) + spin(PP, pn[Ls - 1])) < 1e-15
    src = pg.LatticeFermion(U.grid)
    pg.ParallelRNG(U.grid, [3, 1, 4, 1]).gaussian(src)
    sn = src.to_numpy()
    eta = np.zeros_like(pn)
    eta[0], eta[Ls - 1] = spin(PP, sn), spin(PM, sn)
    assert relerr(D.import_physical_source(src).to_numpy(), eta) < 1e-15
    # Möbius: D_minus = 1 - c Dw applied to the same eta
    assert relerr(Mb.import_physical_source(src).to_numpy(), eta - C * dw_ref(U.to_numpy(), eta)) < 1e-12


def test_free_field_physical_propagator_is_overlap():
    """Unit gauge field, constant source: the physical propagator is the overlap one, analytically.

    For a 4D-constant spinor Dhop = -4, so Dw = -M5 is a number and the Möbius
    kernel H = g5 (b + c) Dw / (2 + (b - c) Dw) is g5 h.  The DWF-overlap
    relation (Grid's import/export conventions) says

        physical_field(M^{-1} import_physical_source(q)) = (1 - m)^{-1} (D_eff^{-1} - 1) q,
        D_eff = (1 + m)/2 + (1 - m)/2 g5 eps_Ls(H),
        eps_Ls(x) = ((1 + x)^Ls - (1 - x)^Ls) / ((1 + x)^Ls + (1 - x)^Ls)   (the polar/tanh approximant)

    and g5 eps(g5 h) = eps(h) on both chiralities, so the answer is a number times q.
    """
    grid = gauge().grid
    U = pg.qcd.unit_gauge(grid)
    spinor = np.arange(12).reshape(4, 3) * (1 + 0.5j) + 1
    src = pg.LatticeFermion(grid).from_numpy(np.broadcast_to(spinor, grid.gdims + (4, 3)).copy())
    for Ls, b, c in ((4, 1.0, 0.0), (6, B, C)):
        op = pg.qcd.MobiusFermion(U, Ls, MASS, M5, b, c)
        b5 = op.import_physical_source(src)
        x, rec = pg.qcd.schur_solve(op, b5, pg.algorithms.ConjugateGradient(1e-13, 1000))
        assert rec.full_residual < 1e-11
        q = op.physical_field(x).to_numpy()
        h = (b + c) * (-M5) / (2 + (b - c) * (-M5))
        eps = ((1 + h) ** Ls - (1 - h) ** Ls) / ((1 + h) ** Ls + (1 - h) ** Ls)
        d_eff = (1 + MASS) / 2 + (1 - MASS) / 2 * eps
        factor = (1 / d_eff - 1) / (1 - MASS)
        assert relerr(q, factor * src.to_numpy()) < 1e-10


def test_errors():
    U, D, Mb = ops()
    psi4 = pg.LatticeFermion(U.grid)
    with pytest.raises(pg.ConformabilityError):
        D.M(psi4)
    psi = fermion(D)
    with pytest.raises(pg.ConformabilityError):
        D.Meooe(psi)          # full field where a checkerboard is needed
    with pytest.raises(pg.ConformabilityError):
        D.M(pg.pick_checkerboard(0, psi))
    with pytest.raises(pg.ConformabilityError):
        pg.qcd.DomainWallFermion(U, 5, MASS, M5).M(psi)   # other Ls
    with pytest.raises(pg.GridError):
        pg.qcd.DomainWallFermion(U, 0, MASS, M5)
    with pytest.raises(pg.SiteTypeError):
        pg.qcd.DomainWallFermion(psi4, 4, MASS, M5)


# ---- the O(Ls) s-matrix kernels against the dense kernel ------------------------------------------
@pytest.mark.parametrize("Ls", [2, 3, 8, 16])
def test_banded_s_matrices_match_dense(Ls):
    from pygrid.qcd.domain_wall import (
        bidiag_apply,
        bidiag_multiply,
        bidiag_solver,
        bidiag_structure,
        fifth_dim_hop_matrices,
        s_apply,
    )
    rng = np.random.default_rng(Ls)
    S = fifth_dim_hop_matrices(Ls, 0.07)
    one = np.broadcast_to(np.eye(Ls), (2, Ls, Ls))
    bee, cee = 1.0 + 1.3 * rng.random(), 0.4 + rng.random()
    x = rng.normal(size=(Ls * 6, 12, 2, 4))
    St = np.transpose(S, (0, 2, 1))
    for A in (
        bee * one - cee * S,
        bee * one - cee * St,
        one - S,
        one - St,
        1.5 * one + 0.5 * S,
        1.5 * one + 0.5 * St,
    ):
        # the multiply, out of place and in place
        want = s_apply(np.empty_like(x), x, A, Ls=Ls)
        band = bidiag_structure(A)
        assert band is not None
        assert relerr(bidiag_multiply(np.empty_like(x), x, band, Ls), want) < 1e-14
        y = x.copy()
        assert relerr(bidiag_multiply(y, y, band, Ls), want) < 1e-14
        # accumulating: out += A x, as the sums of two s matrices in M and Mdag use it
        z = rng.normal(size=x.shape)
        assert relerr(bidiag_multiply(z.copy(), x, band, Ls, accumulate=True), z + want) < 1e-14
        with pytest.raises(pg.ConformabilityError, match="alias"):
            bidiag_multiply(y, y, band, Ls, accumulate=True)
        # adding another field: out = A x + z, or A x + B z; out may be x or z (M and Mdag finish so,
        # writing out once)
        y = x.copy()
        assert relerr(bidiag_multiply(y, y, band, Ls, add=z), z + want) < 1e-14
        zc = z.copy()
        Az = s_apply(np.empty_like(z), z, A, Ls=Ls)
        assert relerr(bidiag_multiply(zc, x, band, Ls, add=zc, add_structure=band), want + Az) < 1e-14
        # a diagonal B (the kernel that reads its d alone), into z itself
        zc = z.copy()
        neg = (band[0], np.array([-2.0, 3.0]), np.zeros(2), np.zeros(2))
        zn = np.concatenate([-2.0 * z[..., :6, :, :], 3.0 * z[..., 6:, :, :]], axis=-3)
        assert relerr(bidiag_multiply(zc, x, band, Ls, add=zc, add_structure=neg), want + zn) < 1e-14
        # out of place (the kernel that walks the slices in memory order), with and without a diagonal B
        got = bidiag_multiply(np.empty_like(x), x, band, Ls, add=z, add_structure=neg)
        assert relerr(got, want + zn) < 1e-14
        assert relerr(bidiag_multiply(np.empty_like(x), x, band, Ls, add=z), want + z) < 1e-14
        tables = bidiag_solver(A)
        assert tables is not None
        want = s_apply(np.empty_like(x), x, np.linalg.inv(A), Ls=Ls)
        got = bidiag_apply(np.empty_like(x), x, tables, Ls)
        assert relerr(got, want) < 1e-13
        y = x.copy()
        bidiag_apply(y, y, tables, Ls)   # in place
        assert relerr(y, want) < 1e-13
        y32 = x.astype(np.float32)
        assert relerr(bidiag_apply(np.empty_like(y32), y32, tables, Ls), want) < 1e-5
    # a matrix of another structure is left to the dense path
    assert bidiag_solver(bee * one - cee * S + 0.1 * rng.random((2, Ls, Ls))) is None
    assert bidiag_structure(bee * one - cee * S + 0.1 * rng.random((2, Ls, Ls))) is None


def test_operator_uses_the_sweep_for_mooee_inverse():
    U, D, Mb = ops()
    for op in (D, Mb):
        assert op._sweeps["MooeeInv"] is not None and op._sweeps["MooeeInvDag"] is not None
        assert all(v is not None for v in op._banded.values())


def test_kept_calls_follow_the_fields_contents():
    """Repeated calls on the same fields (a solver's pattern) run the launch kept from the first
    (pygrid.qcd.hop) on the fields' current contents: Dhop, M (the hop with its diagonal term) and
    the even-odd hop, against numpy each time."""
    U, D, _ = ops()
    psi, out, m = fermion(D), D.new_fermion(), D.new_fermion()
    e, o = pg.pick_checkerboard(0, psi), pg.pick_checkerboard(1, D.new_fermion())
    Un = U.to_numpy().astype(np.complex128)
    for seed in (1, 2, 3):
        pg.ParallelRNG(D.grid5, [seed, 9, 9, 9]).gaussian(psi)
        e.assign(pg.pick_checkerboard(0, psi))
        pn = psi.to_numpy()
        dh = np.stack([dhop_ref(Un, p) for p in pn])
        assert relerr(D.Dhop(psi, out=out).to_numpy(), dh) < 1e-12
        assert relerr(D.M(psi, out=m).to_numpy(), shamir_ref(Un, pn)) < 1e-12
        assert relerr(D.Meooe(e, out=o).to_numpy(), pg.pick_checkerboard(1, out).to_numpy()) < 1e-12
    if pg.qcd.dslash.variant() == "unroll":
        assert len(D._w._hop_calls) >= 3


@pytest.mark.parametrize("prec,which", [("double", "unroll"), ("single", "unroll"), ("double", "generic"),
                                        ("double", "unroll-wide"), ("double", "unroll-far"),
                                        ("single", "unroll-wide-far")])
def test_hop_with_mooee_as_its_diagonal_term(monkeypatch, prec, which):
    """dslash.dhop's diagonal term in s (``diag_s``): scale * hop(t) + alpha * Mooee x in one
    kernel, its solve in s (``inv_s``): MooeeInv (scale * hop(t)), and its multiply in s before
    either (``mul_s``, Möbius's b + c S^dag), against the plain hop and the dense numpy s
    matrices, both adjoints, both variants; and the Schur operators (Shamir and Möbius) that
    start and end with them against their pieces.  ``unroll-wide``: the AVX-512 structure forced
    on any host; ``unroll-far``: every field counted as larger than the caches (the AVX2
    structure then writes its result past the caches); ``unroll-wide-far``: both (the AVX-512
    register order's prefetches and streamed result)."""
    from pygrid.qcd import dslash, kernels_wilson as kw, unrolled_launch as ul

    if which != "generic" and dslash.variant() != "unroll":
        pytest.skip("the unrolled kernel runs on the CPU backends only")
    if which in ("unroll-wide", "unroll-far", "unroll-wide-far"):
        wide = which != "unroll-far"   # not read from ``which``, which is reassigned below
        monkeypatch.setattr(kw, "wide_default", lambda: wide)
        monkeypatch.setattr(kw, "_modules", {})
        monkeypatch.setattr(ul, "_states", {})
        monkeypatch.setattr(dslash, "_BOUND", {})
        if which.endswith("far"):
            monkeypatch.setattr(ul, "FAR_BYTES", dict.fromkeys(ul.FAR_BYTES, 0))
        which = "unroll"
    U, D, Mob = ops(prec, (4, 4, 4, 8), Ls=5)
    if pg.get_backend().device == "unified":  # raw host buffers: the CPU backends
        _hop_with_mooee_buffers(D, prec, which)
        _hop_with_a_multiply_in_s(Mob, prec, which)
    for op in (D, Mob):
        assert op._mpc_start is not None and op._mpc_end is not None
        assert schur_pieces_differ(op, pg.pick_checkerboard(1, fermion(op)), out_is_input=True) < TOL[prec]


def _hop_with_a_multiply_in_s(Mob, prec, which):
    """``mul_s``: B (scale * hop(t)) plus nothing, alpha x, or alpha Mooee x; and MooeeInv B (scale *
    hop(t)), B = b + c S (or its adjoint), against the dense s matrices."""
    from pygrid.qcd import dslash, unrolled_launch as ul
    from pygrid.qcd.fifth_dim import s_apply

    w, Ls = Mob._w, Mob.Ls
    t, x = fermion(Mob, cb=0), fermion(Mob, (9, 8, 7, 6), cb=1)
    out = Mob.new_fermion(1)

    def dense(key, a):
        return s_apply(np.empty(a.shape), a.astype(np.float64), Mob._mats[key].astype(np.float64), Ls=Ls)

    with (t._kernel_view(pg.AcceleratorRead) as p, x._kernel_view(pg.AcceleratorRead) as xb,
          w.U_cb[1]._kernel_view(pg.AcceleratorRead) as uf, w.U_cb[0]._kernel_view(pg.AcceleratorRead) as ub,
          out._kernel_view(pg.AcceleratorWrite) as o):
        args = (p, uf, ub, w.stencil_cb[0], Ls, 0.7)
        for dag in (False, True):
            sfx = "Dag" if dag else ""
            hop = dslash.dhop(np.empty_like(o), *args, dag=dag, which=which)
            bhop = dense("bcS" + sfx, hop)
            cases = [(dict(), bhop),
                     (dict(alpha=-1.3, diag=xb), bhop - 1.3 * xb),
                     (dict(alpha=-1.3, diag=xb, diag_s=Mob._banded["Mooee" + sfx]),
                      bhop + dense("Mooee" + sfx, -1.3 * xb.astype(np.float64))),
                     (dict(inv_s=Mob._sweeps["MooeeInv" + sfx]), dense("MooeeInv" + sfx, bhop))]
            for kwargs, want in cases:
                for _ in range(2):  # the second call: the bound launch
                    o[...] = np.nan
                    dslash.dhop(o, *args, dag=dag, which=which, mul_s=Mob._banded["bcS" + sfx], **kwargs)
                    assert relerr(o, want) < TOL[prec], (dag, sorted(kwargs))
        # the variant follows the arguments
        st = ul._launch_state(w.stencil_cb[0], Ls, o.shape[3], o.dtype)
        mul = ul.diagonal_term(1.0, (np.ones(2), np.zeros(2 * Ls, np.int32), np.ones(2 * Ls)), Ls, o.dtype)
        solve = ul.solve_in_s(Mob._sweeps["MooeeInv"], Ls, o.dtype)
        coef = np.array([0.5, 1.0, -1.0, 1.0], o.dtype)
        assert ul._last(ul.kernel_args(st, o, p, uf, ub, coef, xb, True, None, None, mul)) == "mul"
        assert ul._last(ul.kernel_args(st, o, p, uf, ub, coef, xb, False, None, solve, mul)) == "mul_solve"
        with pytest.raises(pg.errors.ConformabilityError, match="not out"):
            dslash.dhop(o, *args, 1.0, o, which=which, mul_s=Mob._banded["bcS"])


def _hop_with_mooee_buffers(D, prec, which):
    from pygrid.qcd import dslash, unrolled_launch as ul
    from pygrid.qcd.fifth_dim import s_apply

    w = D._w
    t, x = fermion(D, cb=0), fermion(D, (9, 8, 7, 6), cb=1)
    out = D.new_fermion(1)
    with (t._kernel_view(pg.AcceleratorRead) as p, x._kernel_view(pg.AcceleratorRead) as xb,
          w.U_cb[1]._kernel_view(pg.AcceleratorRead) as uf, w.U_cb[0]._kernel_view(pg.AcceleratorRead) as ub,
          out._kernel_view(pg.AcceleratorWrite) as o):
        for dag in (False, True):
            key = "MooeeDag" if dag else "Mooee"
            hop = dslash.dhop(np.empty_like(o), p, uf, ub, w.stencil_cb[0], D.Ls, 0.7, dag=dag, which=which)
            want = hop.astype(np.float64) + s_apply(np.empty(o.shape), xb.astype(np.float64),
                                                      -1.3 * D._mats[key].astype(np.float64), Ls=D.Ls)
            for _ in range(2):  # the second call: the bound launch
                dslash.dhop(o, p, uf, ub, w.stencil_cb[0], D.Ls, 0.7, -1.3, xb, dag, which=which,
                            diag_s=D._banded[key])
                assert relerr(o, want) < TOL[prec]
            # MooeeInv after the hop, in its kernel: against the dense inverse
            inv = "MooeeInvDag" if dag else "MooeeInv"
            dense = D._mats[inv].astype(np.float64)
            want = s_apply(np.empty(o.shape), hop.astype(np.float64), dense, Ls=D.Ls)
            for _ in range(2):
                dslash.dhop(o, p, uf, ub, w.stencil_cb[0], D.Ls, 0.7, dag=dag, which=which,
                            inv_s=D._sweeps[inv])
                assert relerr(o, want) < TOL[prec]
        # the kernel variant follows the arguments (the positions kernels_wilson reads them at)
        st = ul._launch_state(w.stencil_cb[0], D.Ls, o.shape[3], o.dtype)
        stream = (np.ones(2), np.zeros(2 * D.Ls, np.int32), np.ones(2 * D.Ls))
        dterm = ul.diagonal_term(1.0, stream, D.Ls, o.dtype)
        solve = ul.solve_in_s(D._sweeps["MooeeInv"], D.Ls, o.dtype)
        coef = np.array([0.5, 1.0, -1.0, 1.0], o.dtype)
        assert ul._last(ul.kernel_args(st, o, p, uf, ub, coef, xb, True, dterm)) == "banded"
        assert ul._last(ul.kernel_args(st, o, p, uf, ub, coef, xb, False, None, solve)) == "solve"
        assert ul._last(ul.kernel_args(st, o, p, uf, ub, coef, xb, True)) == "plain"
        with pytest.raises(pg.errors.ConformabilityError, match="no diagonal term"):
            dslash.dhop(o, p, uf, ub, w.stencil_cb[0], D.Ls, 0.7, 1.0, xb, which=which,
                        inv_s=D._sweeps["MooeeInv"])
        with pytest.raises(pg.errors.ConformabilityError, match="not out"):
            dslash.dhop(o, p, uf, ub, w.stencil_cb[0], D.Ls, 0.7, 1.0, o, which=which,
                        diag_s=D._banded["Mooee"])
