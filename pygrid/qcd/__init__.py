"""Lattice QCD: SU(3) gauge fields, the Wilson and domain-wall (Shamir, Möbius) Dirac operators, Schur solves.

    import pygrid as pg, pygrid.qcd
    U = pg.qcd.random_gauge(grid, pg.ParallelRNG(grid, [1, 2, 3, 4]))
    D = pg.qcd.WilsonFermion(U, mass=0.1)
    chi = D.M(psi)
    DW = pg.qcd.DomainWallFermion(U, Ls=8, mass=0.01, M5=1.8)   # 5D fields on DW.grid5
    x, rec = pg.qcd.schur_solve(DW, b5, pg.algorithms.ConjugateGradient(1e-10))
"""
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
from .schur import SchurRedBlackDiagMooeeSolve, schur_solve
from .wilson import SchurDiagMooeeOperator, WilsonFermion

__all__ = [
    "WilsonFermion", "SchurDiagMooeeOperator", "DomainWallFermion", "MobiusFermion", "schur_solve",
    "SchurRedBlackDiagMooeeSolve", "unit_gauge", "random_gauge", "plaquette", "link_trace",
    "project_su3", "project_su3_array", "gauge_transform", "gauge_transform_fermion", "FLOPS_PER_SITE",
    "projection_tables",
]
