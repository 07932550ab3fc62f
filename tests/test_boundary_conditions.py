"""Fermion boundary conditions (boundary phases and twists) on the Wilson and domain-wall operators.

The numpy reference (pygrid.qcd.reference.dhop) puts the phase on the neighbour
psi(x +- mu) that crosses the edge and leaves the links alone; pygrid puts it on
the links (Grid's DoubleStore).  The two agree only if both are right.  The
free-field check is independent of both: with a twist or a boundary phase the
plane waves of momentum (2 pi n + theta) / L are eigenvectors of the free Dhop.
"""
from __future__ import annotations

import cmath

import numpy as np
import pytest
from numpy_refs import GAMMA_5, GAMMA_MU, dhop_ref

import pygrid as pg
import pygrid.qcd
from pygrid.errors import GridError

DIMS = (4, 4, 4, 8)
PP = (np.eye(4) + GAMMA_5) / 2
PM = (np.eye(4) - GAMMA_5) / 2
CASES = {
    "antiperiodic_t": dict(boundary_phases=[1, 1, 1, -1]),
    "phases_and_twists": dict(boundary_phases=[cmath.exp(0.7j), 1j, 1, cmath.exp(-2.1j)],
                              twists=[0.25, 0.0, -1.5, 0.4]),
}


@pytest.fixture(scope="module")
def setup():
    grid = pg.GridCartesian(list(DIMS))
    rng = pg.ParallelRNG(grid, [4, 2])
    U = pg.qcd.random_gauge(grid, rng)
    psi = rng.gaussian(pg.LatticeFermion(grid))
    return grid, U, psi


def _ref_kw(kw):
    return dict(boundary_phases=kw.get("boundary_phases"), twists=kw.get("twists"))


def relerr(a, b):
    return np.abs(a - b).max() / np.abs(b).max()


@pytest.mark.parametrize("case", CASES)
def test_wilson_with_boundary_conditions_against_numpy(setup, case):
    grid, U, psi = setup
    kw = CASES[case]
    mass = 0.15
    D = pg.qcd.WilsonFermion(U, mass, **kw)
    Un, pn = U.to_numpy(), psi.to_numpy()
    ref = dhop_ref(Un, pn, **_ref_kw(kw))
    assert relerr(D.Dhop(psi).to_numpy(), ref) < 1e-14
    assert relerr(D.M(psi).to_numpy(), (4 + mass) * pn + ref) < 1e-14
    assert relerr(D.Mdag(psi).to_numpy(), (4 + mass) * pn + dhop_ref(Un, pn, True, **_ref_kw(kw))) < 1e-14
    # the periodic operator differs (the test would catch boundary conditions that are ignored)
    assert relerr(pg.qcd.WilsonFermion(U, mass).Dhop(psi).to_numpy(), ref) > 1e-3
    # even-odd pieces reassemble M
    full = D.new_fermion()
    for cb in (0, 1):
        part = pg.pick_checkerboard(cb, psi)
        pg.set_checkerboard(full, D.Meooe(part))
    half = D.new_fermion()
    for cb in (0, 1):
        pg.set_checkerboard(half, D.Mooee(pg.pick_checkerboard(cb, psi)))
    assert relerr(full.to_numpy() + half.to_numpy(), D.M(psi).to_numpy()) < 1e-14
    # adjointness, and g5-hermiticity (the phases have modulus 1)
    chi = pg.ParallelRNG(grid, [9]).gaussian(pg.LatticeFermion(grid))
    a = pg.inner_product(chi, D.M(psi))
    b = pg.inner_product(D.Mdag(chi), psi)
    assert abs(a - b) < 1e-12 * abs(a)
    g5Mg5 = pg.eval(pg.Gamma.Five * D.M(pg.eval(pg.Gamma.Five * psi)))
    assert relerr(g5Mg5.to_numpy(), D.Mdag(psi).to_numpy()) < 1e-14
    # the user's U is untouched, and a Schur solve converges to the full-grid solution
    assert U.to_numpy() is not None and np.array_equal(U.to_numpy(), Un)
    x, rec = pg.qcd.schur_solve(D, psi, pg.algorithms.ConjugateGradient(1e-11, 3000, verbose=False))
    assert rec.converged and rec.full_residual < 1e-9


def test_free_plane_waves_are_eigenvectors_with_shifted_momenta():
    grid = pg.GridCartesian(list(DIMS))
    theta = [0.0, 0.9, 0.0, np.pi]
    twists = [0.5, 0.0, 0.0, 0.0]
    D = pg.qcd.WilsonFermion(pg.qcd.unit_gauge(grid), 0.0, boundary_phases=[cmath.exp(1j * t) for t in theta],
                             twists=twists)
    n = (1, 2, 0, 3)
    # the waves that obey the boundary condition psi(x + L mu) = exp(i theta_mu) psi(x) ...
    k = [(2 * np.pi * n[mu] + theta[mu]) / DIMS[mu] for mu in range(4)]
    x = np.stack(np.meshgrid(*[np.arange(L) for L in DIMS], indexing="ij"), axis=-1)
    wave = np.exp(1j * (x @ np.array(k)))
    u = np.zeros((4, 3), dtype=complex)
    u[1, 2], u[3, 0] = 1.0, 0.5j
    psi = pg.LatticeFermion(grid).from_numpy(wave[..., None, None] * u)
    # ... and the twist moves their momentum by 2 pi n_mu / L
    q = [k[mu] + 2 * np.pi * twists[mu] / DIMS[mu] for mu in range(4)]
    Dk = sum(-np.cos(q[mu]) * np.eye(4) + 1j * np.sin(q[mu]) * GAMMA_MU[mu] for mu in range(4))
    want = wave[..., None, None] * (Dk @ u)
    assert relerr(D.Dhop(psi).to_numpy(), want) < 1e-13


@pytest.mark.parametrize("kind", ["shamir", "mobius"])
def test_domain_wall_with_boundary_conditions_against_numpy(setup, kind):
    grid, U, _ = setup
    kw = CASES["phases_and_twists"]
    Ls, mass, M5 = 4, 0.05, 1.8
    b, c = (1.0, 0.0) if kind == "shamir" else (1.5, 0.5)
    op = (pg.qcd.DomainWallFermion(U, Ls, mass, M5, **kw) if kind == "shamir"
          else pg.qcd.MobiusFermion(U, Ls, mass, M5, b, c, **kw))
    psi5 = pg.ParallelRNG(op.grid5, [3]).gaussian(op.new_fermion())
    Un, pn = U.to_numpy(), psi5.to_numpy()

    def dw(p, dag=False):
        return np.stack([(4 - M5) * q + dhop_ref(Un, q, dag, **_ref_kw(kw)) for q in p])

    def S(p, dag=False):
        out = np.empty_like(p)
        for s in range(Ls):
            up = p[s + 1] if s < Ls - 1 else -mass * p[0]
            dn = p[s - 1] if s > 0 else -mass * p[Ls - 1]
            if dag:
                up, dn = dn, up
            out[s] = np.einsum("st,...tc->...sc", PM, up) + np.einsum("st,...tc->...sc", PP, dn)
        return out

    Spsi = S(pn)
    want = b * dw(pn) + pn - (Spsi - c * dw(Spsi))
    assert relerr(op.M(psi5).to_numpy(), want) < 1e-13
    t = pn - c * dw(pn, True)
    want_dag = b * dw(pn, True) + pn - S(t, dag=True)
    assert relerr(op.Mdag(psi5).to_numpy(), want_dag) < 1e-13
    x, rec = pg.qcd.schur_solve(op, psi5, pg.algorithms.ConjugateGradient(1e-10, 3000, verbose=False))
    assert rec.converged and rec.full_residual < 1e-8


def test_conditions_survive_conversion_and_show_in_repr(setup):
    grid, U, psi = setup
    kw = CASES["phases_and_twists"]
    D = pg.qcd.WilsonFermion(U, 0.1, **kw)
    Ds = D.converted("single")
    assert Ds.boundary.phases == D.boundary.phases and Ds.boundary.twists == D.boundary.twists
    ref = D.M(psi).to_numpy()
    got = Ds.M(pg.convert(psi, "single")).to_numpy()
    assert relerr(got, ref) < 1e-5
    assert "boundary_phases=" in repr(D) and "twists=" in repr(D)
    assert "boundary" not in repr(pg.qcd.WilsonFermion(U, 0.1))
    DW = pg.qcd.MobiusFermion(U, 4, 0.1, 1.8, 1.5, 0.5, boundary_phases=pg.qcd.ANTIPERIODIC_T)
    assert DW.converted("single").boundary.phases == (1, 1, 1, -1)
    assert "boundary_phases=[1, 1, 1, -1]" in repr(DW)
    # periodic operators hop on U itself: no extra gauge field
    assert pg.qcd.WilsonFermion(U, 0.1).links is U


def test_bad_boundary_conditions_are_named(setup):
    _, U, _ = setup
    with pytest.raises(GridError, match="one phase per direction"):
        pg.qcd.WilsonFermion(U, 0.1, boundary_phases=[1, -1])
    with pytest.raises(GridError, match="modulus 1"):
        pg.qcd.WilsonFermion(U, 0.1, boundary_phases=[1, 1, 1, 2])
    with pytest.raises(GridError, match="modulus"):
        pg.qcd.WilsonFermion(U, 0.1, boundary_phases=[1, 1, 1, float("nan")])
    with pytest.raises(GridError, match="not a number"):
        pg.qcd.WilsonFermion(U, 0.1, boundary_phases=[1, 1, 1, "anti"])
    with pytest.raises(GridError, match="complex numbers"):
        pg.qcd.WilsonFermion(U, 0.1, boundary_phases="antiperiodic")
    with pytest.raises(GridError, match="real"):
        pg.qcd.DomainWallFermion(U, 4, 0.1, 1.8, twists=[0, 0, 0, 1j])
    with pytest.raises(GridError, match="finite"):
        pg.qcd.WilsonFermion(U, 0.1, twists=[0, 0, float("inf"), 0])
