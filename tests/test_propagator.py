"""Sources, propagators, meson contractions and correlators.

The free-field propagators are checked against an independent computation in
momentum space with numpy: the free Wilson operator is diagonal in momentum,
M(k) = 4 + m - sum_mu cos k_mu + i sum_mu gamma_mu sin k_mu, with k_mu =
(2 pi n_mu + theta_mu) / L_mu for the boundary phase exp(i theta_mu), and the
domain-wall one is a (4 Ls) x (4 Ls) matrix per momentum built from the
definitions in docs/conventions.md; the propagator from a point source at the
origin is the inverse Fourier transform of the inverse.  No solver, stencil or
pygrid kernel is involved on the numpy side.
"""
from __future__ import annotations

import numpy as np
import pytest

import pygrid as pg
import pygrid.qcd
from pygrid.errors import ConformabilityError, GridError, SiteTypeError
from pygrid.qcd.reference import GAMMA_5, GAMMA_MU

DIMS = (4, 4, 4, 8)
P_PLUS = (np.eye(4) + GAMMA_5) / 2
P_MINUS = (np.eye(4) - GAMMA_5) / 2


def _momenta(dims, theta):
    """k[..., mu] for every momentum, in numpy's FFT order of n."""
    axes = [(2 * np.pi * np.arange(L) + th) / L for L, th in zip(dims, theta)]
    return np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1)


def _wilson_k(k, diag):
    """diag - sum cos k + i sum gamma sin k, shaped (..., 4, 4)."""
    m = (diag - np.cos(k).sum(-1))[..., None, None] * np.eye(4)
    for mu in range(4):
        m = m + 1j * np.sin(k[..., mu])[..., None, None] * GAMMA_MU[mu]
    return m


def _to_position(Sk, dims, theta):
    """S(x) = 1/V sum_k exp(i k.x) S(k) for a source at the origin."""
    Sx = np.fft.ifftn(Sk, axes=(0, 1, 2, 3))
    x = np.stack(np.meshgrid(*[np.arange(L) for L in dims], indexing="ij"), axis=-1)
    twist = np.exp(1j * sum(th * x[..., mu] / L for mu, (L, th) in enumerate(zip(dims, theta))))
    return Sx * twist[..., None, None]


def free_wilson_propagator(dims, mass, theta=(0, 0, 0, 0)):
    """The free Wilson propagator from the origin, spin part only: (*dims, 4, 4)."""
    Mk = _wilson_k(_momenta(dims, theta), 4.0 + mass)
    return _to_position(np.linalg.inv(Mk), dims, theta)


def free_dwf_propagator(dims, Ls, mass, M5, b, c, theta=(0, 0, 0, 0)):
    """The free physical domain-wall propagator (import source, 5D inverse, export), spin part."""
    k = _momenta(dims, theta)
    Dw = _wilson_k(k, 4.0 - M5)
    n = 4 * Ls
    S = np.zeros((n, n))
    for s in range(Ls):
        up, down = (s + 1) % Ls, (s - 1) % Ls
        S[4 * s:4 * s + 4, 4 * up:4 * up + 4] += (-mass if s == Ls - 1 else 1.0) * P_MINUS.real
        S[4 * s:4 * s + 4, 4 * down:4 * down + 4] += (-mass if s == 0 else 1.0) * P_PLUS.real
    Dw5 = np.zeros(k.shape[:-1] + (n, n), dtype=complex)
    for s in range(Ls):
        Dw5[..., 4 * s:4 * s + 4, 4 * s:4 * s + 4] = Dw
    M = Dw5 @ (b * np.eye(n) + c * S) + (np.eye(n) - S)
    Dminus = np.eye(n) - c * Dw5
    imp = np.zeros((n, 4))
    imp[0:4] = P_PLUS.real
    imp[n - 4:n] = P_MINUS.real
    exp = np.zeros((4, n))
    exp[:, 0:4] = P_MINUS.real
    exp[:, n - 4:n] = P_PLUS.real
    Sk = exp @ np.linalg.solve(M, Dminus @ imp)
    return _to_position(Sk, dims, theta)


def _with_colour(S_spin):
    """Spin propagator times the colour unit, in pygrid's (s, s', c, c') order."""
    return np.einsum("...st,ab->...stab", S_spin, np.eye(3))


def _pion_numpy(S_spin):
    """sum over space of tr[S S^dag] (colour trace 3), per timeslice."""
    return 3 * np.einsum("xyztab,xyztab->t", S_spin, S_spin.conj())


@pytest.fixture(scope="module")
def grid():
    return pg.GridCartesian(list(DIMS))


def _cg(tol=1e-12):
    return pg.algorithms.ConjugateGradient(tol, maxiter=5000, verbose=False)


def test_free_wilson_propagator_and_pion_match_momentum_space(grid):
    mass = 0.2
    D = pg.qcd.WilsonFermion(pg.qcd.unit_gauge(grid), mass)
    S, recs = pg.qcd.propagator(D, pg.qcd.point_source(grid, [0, 0, 0, 0]), _cg(), verbose=False)
    assert len(recs) == 12 and all(r.converged for r in recs)
    ref = free_wilson_propagator(DIMS, mass)
    got = S.to_numpy()
    assert np.abs(got - _with_colour(ref)).max() < 1e-9 * np.abs(ref).max()
    C = pg.qcd.correlator(pg.qcd.meson(S, S))
    np.testing.assert_allclose(C, _pion_numpy(ref), rtol=1e-9, atol=0)
    assert np.all(C.real > 0) and np.abs(C.imag).max() < 1e-12 * C.real.max()
    # periodic time: the correlator is symmetric about T/2, and the effective mass positive
    np.testing.assert_allclose(C[1:], C[1:][::-1], rtol=1e-9)
    m_eff = pg.qcd.effective_mass(C[: DIMS[3] // 2 + 1])
    assert np.all(m_eff > 0)


def test_source_away_from_the_origin_is_the_translated_propagator(grid):
    mass = 0.3
    D = pg.qcd.WilsonFermion(pg.qcd.unit_gauge(grid), mass)
    x0 = (1, 2, 3, 5)
    S, _ = pg.qcd.propagator(D, pg.qcd.point_source(grid, x0), _cg(), verbose=False)
    ref = np.roll(_with_colour(free_wilson_propagator(DIMS, mass)), x0, axis=(0, 1, 2, 3))
    assert np.abs(S.to_numpy() - ref).max() < 1e-9 * np.abs(ref).max()
    C = pg.qcd.correlator(pg.qcd.meson(S, S), t0=x0[3])
    np.testing.assert_allclose(C, _pion_numpy(free_wilson_propagator(DIMS, mass)), rtol=1e-9)


@pytest.mark.parametrize("kind", ["shamir", "mobius"])
def test_free_domain_wall_propagator_matches_momentum_space(grid, kind):
    Ls, mass, M5 = 6, 0.1, 1.8
    b, c = (1.0, 0.0) if kind == "shamir" else (1.5, 0.5)
    U = pg.qcd.unit_gauge(grid)
    op = (pg.qcd.DomainWallFermion(U, Ls, mass, M5) if kind == "shamir"
          else pg.qcd.MobiusFermion(U, Ls, mass, M5, b, c))
    S, recs = pg.qcd.propagator(op, pg.qcd.point_source(grid, [0, 0, 0, 0]), _cg(1e-11), verbose=False)
    assert all(r.converged for r in recs)
    ref = free_dwf_propagator(DIMS, Ls, mass, M5, b, c)
    assert np.abs(S.to_numpy() - _with_colour(ref)).max() < 1e-8 * np.abs(ref).max()


def test_meson_gamma_structures_and_momentum_projection():
    # 4^4: two propagators and the result fit the 2 MB device watermark of the sycl test pass
    dims = (4, 4, 4, 4)
    grid = pg.GridCartesian(list(dims))
    rng = np.random.default_rng(7)
    shape = dims + (4, 4, 3, 3)
    a = rng.normal(size=shape) + 1j * rng.normal(size=shape)
    b = rng.normal(size=shape) + 1j * rng.normal(size=shape)
    S1 = pg.LatticePropagator(grid).from_numpy(a)
    S2 = pg.LatticePropagator(grid).from_numpy(b)
    G = pg.Gamma
    gam = {"X": GAMMA_MU[0], "T": GAMMA_MU[3], "5": GAMMA_5}
    cases = [(G.Five, G.Five, GAMMA_5, GAMMA_5), (G.X, G.X, gam["X"], gam["X"]),
             (G.T * G.Five, G.X, GAMMA_MU[3] @ GAMMA_5, gam["X"])]
    for gs, gr, ns, nr in cases:
        field = pg.eval(pg.qcd.meson(S1, S2, gs, gr)).to_numpy()
        # tr[ns a nr^dag g5 b^dag g5], with (b^dag)[w, r; d, c] = conj(b[r, w; c, d])
        want = np.einsum("st,xyzTtuCD,uv,vw,xyzTrwCD,rs->xyzT", ns, a, nr.conj().T, GAMMA_5,
                         b.conj(), GAMMA_5)
        np.testing.assert_allclose(field, want, rtol=1e-12, atol=1e-10)
        x = np.stack(np.meshgrid(*[np.arange(L) for L in dims], indexing="ij"), axis=-1)
        p = (1, 0, 2)
        ph = np.exp(-2j * np.pi * sum(p[i] * x[..., i] / dims[i] for i in range(3)))
        corr = pg.qcd.correlator(pg.qcd.meson(S1, S2, gs, gr), momentum=p, t0=3)
        np.testing.assert_allclose(corr, np.roll(np.einsum("xyzt,xyzt->t", ph, want), -3), rtol=1e-10)


def test_sources_against_their_definitions(grid):
    unit = np.einsum("st,ab->stab", np.eye(4), np.eye(3))
    P = pg.qcd.point_source(grid, (3, 0, 1, 7)).to_numpy()
    want = np.zeros(DIMS + (4, 4, 3, 3), dtype=complex)
    want[3, 0, 1, 7] = unit
    np.testing.assert_array_equal(P, want)
    W = pg.qcd.wall_source(grid, 2, momentum=(1, 0, 3)).to_numpy()
    x = np.stack(np.meshgrid(*[np.arange(L) for L in DIMS], indexing="ij"), axis=-1)
    prof = np.exp(2j * np.pi * (x[..., 0] / 4 + 3 * x[..., 2] / 4)) * (x[..., 3] == 2)
    np.testing.assert_allclose(W, prof[..., None, None, None, None] * unit, atol=1e-15)
    Z = pg.qcd.z2_source(grid, pg.ParallelRNG(grid, [5]), t0=4).to_numpy()
    eta = Z[..., 0, 0, 0, 0]
    np.testing.assert_allclose(Z, eta[..., None, None, None, None] * unit, atol=0)
    on = eta[..., 4]
    np.testing.assert_allclose(np.abs(on.real), 2 ** -0.5)
    np.testing.assert_allclose(np.abs(on.imag), 2 ** -0.5)
    assert len(np.unique(np.round(on * 2 ** 0.5))) == 4
    assert not np.any(np.delete(eta, 4, axis=3))
    everywhere = pg.qcd.z2_source(grid, pg.ParallelRNG(grid, [5])).to_numpy()[..., 0, 0, 0, 0]
    np.testing.assert_allclose(np.abs(everywhere), 1.0)


def test_gaussian_smearing_against_numpy():
    dims = (4, 4, 4, 4)        # fits the sycl pass's 2 MB device watermark
    grid = pg.GridCartesian(list(dims))
    U = pg.qcd.random_gauge(grid, pg.ParallelRNG(grid, [11]))
    src = pg.qcd.point_source(grid, (1, 1, 1, 2))
    width, n = 1.7, 4
    got = pg.qcd.gaussian_smear(U, src, width, n).to_numpy()
    Un = U.to_numpy()
    chi = src.to_numpy()
    coeff = width ** 2 / (4 * n)
    for _ in range(n):
        lap = -6 * chi
        for mu in range(3):
            u = Un[..., mu, :, :]
            lap = lap + np.einsum("...ab,...stbc->...stac", u, np.roll(chi, -1, axis=mu))
            lap = lap + np.roll(np.einsum("...ba,...stbc->...stac", u.conj(), chi), 1, axis=mu)
        chi = chi + coeff * lap
    np.testing.assert_allclose(got, chi, atol=1e-14)
    # it stays on its timeslice, and on the unit gauge field it is a function of |x - x0| alone
    assert not np.any(np.delete(got, 2, axis=3))
    free = pg.qcd.gaussian_smear(pg.qcd.unit_gauge(grid), src, width, n).to_numpy()[..., 0, 0, 0, 0]
    np.testing.assert_allclose(free[0, 1, 1, 2], free[2, 1, 1, 2])
    np.testing.assert_allclose(free[1, 0, 1, 2], free[1, 1, 2, 2])
    assert np.argmax(np.abs(free)) == np.ravel_multi_index((1, 1, 1, 2), dims)


def test_bad_input_is_named(grid):
    with pytest.raises(GridError, match="not on the lattice"):
        pg.qcd.point_source(grid, (4, 0, 0, 0))
    with pytest.raises(GridError, match="timeslice"):
        pg.qcd.wall_source(grid, 8)
    with pytest.raises(GridError, match="integers"):
        pg.qcd.wall_source(grid, 0, momentum=(0.5, 0, 0))
    with pytest.raises(GridError, match="ParallelRNG"):
        pg.qcd.z2_source(grid, np.random.default_rng(1))
    D = pg.qcd.WilsonFermion(pg.qcd.unit_gauge(grid), 0.1)
    with pytest.raises(SiteTypeError, match="LatticePropagator"):
        pg.qcd.propagator(D, pg.LatticeFermion(grid), _cg())
    other = pg.GridCartesian([4, 4, 4, 4])
    with pytest.raises(ConformabilityError, match="4D grid"):
        pg.qcd.propagator(D, pg.qcd.point_source(other, (0, 0, 0, 0)), _cg())
    with pytest.raises(ConformabilityError, match="single"):
        pg.qcd.propagator(D, pg.qcd.point_source(grid, (0, 0, 0, 0), precision="single"), _cg())
    S = pg.LatticePropagator(grid)
    with pytest.raises(SiteTypeError, match="constant spin matrix"):
        pg.qcd.meson(S, S, pg.Gamma.Five, 1.0)
    with pytest.raises(SiteTypeError, match="LatticePropagator"):
        pg.qcd.meson(S, pg.LatticeFermion(grid))
    with pytest.raises(SiteTypeError, match="scalar"):
        pg.qcd.correlator(S)
    with pytest.raises(GridError, match="t0"):
        pg.qcd.correlator(pg.qcd.meson(S, S), t0=8)
    with pytest.raises(GridError, match="kind"):
        pg.qcd.effective_mass([1.0, 0.5, 0.25], kind="sinh")
