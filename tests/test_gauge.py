"""Gauge fields: unit and random starts, plaquette, link trace, SU(3) projection, gauge transformations."""
import numpy as np
import pytest
from numpy_refs import plaquette_ref

import pygrid as pg
import pygrid.qcd  # noqa: F401


@pytest.fixture(params=[((4, 4, 4, 4), None), ((4, 4, 4, 8), (1, 2, 1, 2))])
def hot(request):
    dims, layout = request.param
    grid = pg.GridCartesian(dims, simd_layout=layout)
    rng = pg.ParallelRNG(grid, [11, 12, 13, 14])
    return grid, rng, pg.qcd.random_gauge(grid, rng)


def test_unit_gauge():
    grid = pg.GridCartesian((4, 4, 4, 8))
    U = pg.qcd.unit_gauge(grid)
    assert pg.qcd.plaquette(U) == pytest.approx(1.0, abs=1e-14)
    assert pg.qcd.link_trace(U) == pytest.approx(1.0, abs=1e-14)
    Us = pg.qcd.unit_gauge(grid, precision="single")
    assert pg.qcd.plaquette(Us) == pytest.approx(1.0, abs=1e-6)


def test_random_gauge_is_su3(hot):
    grid, rng, U = hot
    a = U.to_numpy()
    eye = np.eye(3)
    np.testing.assert_allclose(a @ a.conj().swapaxes(-1, -2), np.broadcast_to(eye, a.shape), atol=1e-13)
    np.testing.assert_allclose(np.linalg.det(a), 1, atol=1e-13)


def test_plaquette_against_numpy(hot):
    grid, rng, U = hot
    p = pg.qcd.plaquette(U)
    assert p == pytest.approx(plaquette_ref(U.to_numpy()), abs=1e-13)
    assert abs(p) < 0.2  # hot start
    lt = pg.qcd.link_trace(U)
    assert lt == pytest.approx(np.trace(U.to_numpy(), axis1=-2, axis2=-1).real.mean() / 3, abs=1e-13)


def test_gauge_invariance(hot):
    grid, rng, U = hot
    g = pg.LatticeColourMatrix(grid)
    rng.random_su3(g)
    Ug = pg.qcd.gauge_transform(U, g)
    assert pg.qcd.plaquette(Ug) == pytest.approx(pg.qcd.plaquette(U), abs=1e-13)
    # link trace is not gauge invariant, but it is invariant under a constant centre-free global rotation
    gc = pg.LatticeColourMatrix(grid)
    rng.random_su3(gc)
    g0 = gc.to_numpy()[0, 0, 0, 0]
    gcn = np.broadcast_to(g0, grid.lshape + (3, 3))
    gc.from_numpy(gcn)
    Ugc = pg.qcd.gauge_transform(U, gc)
    assert pg.qcd.link_trace(Ugc) == pytest.approx(pg.qcd.link_trace(U), abs=1e-13)
    # the transformation itself against numpy
    Un, gn = U.to_numpy(), g.to_numpy()
    want = np.stack([gn @ Un[..., mu, :, :] @ np.roll(gn, -1, axis=mu).conj().swapaxes(-1, -2)
                     for mu in range(4)], axis=-3)
    np.testing.assert_allclose(Ug.to_numpy(), want, atol=1e-13)


def test_gauge_transform_fermion(hot):
    grid, rng, U = hot
    g = pg.LatticeColourMatrix(grid)
    rng.random_su3(g)
    psi = pg.LatticeFermion(grid)
    rng.gaussian(psi)
    got = pg.qcd.gauge_transform_fermion(psi, g).to_numpy()
    want = np.einsum("...ab,...sb->...sa", g.to_numpy(), psi.to_numpy())
    np.testing.assert_allclose(got, want, atol=1e-13)


def test_project_su3(hot):
    grid, rng, U = hot
    noise = pg.LatticeGaugeField(grid)
    rng.gaussian(noise)
    V = pg.eval(U + 0.1 * noise)
    P = pg.qcd.project_su3(V).to_numpy()
    eye = np.eye(3)
    np.testing.assert_allclose(P @ P.conj().swapaxes(-1, -2), np.broadcast_to(eye, P.shape), atol=1e-13)
    np.testing.assert_allclose(np.linalg.det(P), 1, atol=1e-13)
    # an SU(3) field is a fixed point
    np.testing.assert_allclose(pg.qcd.project_su3(U).to_numpy(), U.to_numpy(), atol=1e-13)
    # and the projection moved V only a little (close to U)
    assert np.max(np.abs(P - U.to_numpy())) < 0.5


def test_errors():
    grid = pg.GridCartesian((4, 4, 4, 4))
    with pytest.raises(pg.SiteTypeError):
        pg.qcd.plaquette(pg.LatticeFermion(grid))
    with pytest.raises(pg.SiteTypeError):
        pg.qcd.gauge_transform(pg.qcd.unit_gauge(grid), pg.LatticeFermion(grid))
