"""Lattice QCD: SU(3) gauge fields, the Wilson and domain-wall (Shamir, Möbius) Dirac operators, Schur solves.

    import pygrid as pg, pygrid.qcd
    U = pg.qcd.random_gauge(grid, pg.ParallelRNG(grid, [1, 2, 3, 4]))
    D = pg.qcd.WilsonFermion(U, mass=0.1)
    chi = D.M(psi)
    DW = pg.qcd.DomainWallFermion(U, Ls=8, mass=0.01, M5=1.8)   # 5D fields on DW.grid5
    x, rec = pg.qcd.schur_solve(DW, b5, pg.algorithms.ConjugateGradient(1e-10))
    src = pg.qcd.point_source(grid, [0, 0, 0, 0])
    S, recs = pg.qcd.propagator(D, src, pg.algorithms.ConjugateGradient(1e-10))
    C = pg.qcd.correlator(pg.qcd.meson(S, S))                    # the pion, C[t]
"""
from .boundary import ANTIPERIODIC_T, PERIODIC, FermionBoundary
from .contractions import correlator, effective_mass, meson
from .domain_wall import DomainWallFermion, MobiusFermion
from .gauge import (
    gauge_transform,
    gauge_transform_fermion,
    link_trace,
    plaquette,
    project_su3,
    project_su3_array,
    random_gauge,
    unit_gauge,
)
from .kernels_wilson import FLOPS_PER_SITE, projection_tables
from .propagator import propagator, spin_colour_unit_vector
from .schur import SchurRedBlackDiagMooeeSolve, schur_solve
from .sources import gaussian_smear, momentum_phase, point_source, wall_source, z2_source
from .wilson import SchurDiagMooeeOperator, WilsonFermion

__all__ = [
    "WilsonFermion", "SchurDiagMooeeOperator", "DomainWallFermion", "MobiusFermion", "schur_solve",
    "SchurRedBlackDiagMooeeSolve", "unit_gauge", "random_gauge", "plaquette", "link_trace",
    "project_su3", "project_su3_array", "gauge_transform", "gauge_transform_fermion", "FLOPS_PER_SITE",
    "projection_tables", "point_source", "wall_source", "z2_source", "gaussian_smear", "momentum_phase",
    "propagator", "spin_colour_unit_vector", "ANTIPERIODIC_T", "PERIODIC", "FermionBoundary", "meson",
    "correlator", "effective_mass",
]
