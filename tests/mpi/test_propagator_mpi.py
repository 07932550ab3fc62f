"""Sources, propagators and correlators on a decomposed lattice equal the one-rank ones."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import grids, layouts, same_everywhere

import pygrid as pg
import pygrid.qcd

DIMS = (4, 4, 4, 8)


def _cg():
    return pg.algorithms.ConjugateGradient(1e-11, maxiter=3000, verbose=False)


@pytest.mark.parametrize("layout", layouts())
def test_wilson_propagator_and_pion(layout):
    gd, g1 = grids(DIMS, layout)
    out = {}
    for name, g in (("mpi", gd), ("one", g1)):
        U = pg.qcd.random_gauge(g, pg.ParallelRNG(g, [3, 1]))
        D = pg.qcd.WilsonFermion(U, 0.5)
        src = pg.qcd.gaussian_smear(U, pg.qcd.point_source(g, (1, 2, 3, 5)), 1.5, 3)
        S, recs = pg.qcd.propagator(D, src, _cg(), verbose=False)
        assert all(r.converged for r in recs)
        out[name] = (S.to_numpy(), pg.qcd.correlator(pg.qcd.meson(S, S), t0=5),
                     pg.qcd.correlator(pg.qcd.meson(S, S, pg.Gamma.X, pg.Gamma.X), momentum=(1, 0, 0), t0=5),
                     pg.qcd.z2_source(g, pg.ParallelRNG(g, [9]), t0=2).to_numpy())
    for a, b in zip(out["mpi"], out["one"]):
        np.testing.assert_allclose(same_everywhere(a), b, rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(out["mpi"][3], out["one"][3])


@pytest.mark.parametrize("layout", layouts())
def test_boundary_conditions_on_a_decomposed_lattice(layout):
    """Phases on the links that cross the global edge (a rank boundary on decomposed
    directions) and twists on every link: M of Wilson and domain wall equal one rank's."""
    gd, g1 = grids(DIMS, layout)
    bc = dict(boundary_phases=[1, 1j, 1, -1], twists=[0.5, 0, 0.25, 0])
    out = {}
    for name, g in (("mpi", gd), ("one", g1)):
        U = pg.qcd.random_gauge(g, pg.ParallelRNG(g, [4, 2]))
        psi = pg.ParallelRNG(g, [7]).gaussian(pg.LatticeFermion(g))
        D = pg.qcd.WilsonFermion(U, 0.2, **bc)
        DW = pg.qcd.DomainWallFermion(U, 4, 0.05, 1.8, **bc)
        psi5 = DW.new_fermion()
        pg.ParallelRNG(DW.grid5, [8]).gaussian(psi5)
        out[name] = (D.M(psi).to_numpy(), D.Mdag(psi).to_numpy(), DW.M(psi5).to_numpy())
    for a, b in zip(out["mpi"], out["one"]):
        np.testing.assert_allclose(same_everywhere(a), b, rtol=1e-12, atol=1e-13)
