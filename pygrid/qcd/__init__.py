"""Lattice QCD: SU(3) gauge fields and the Wilson Dirac operator (domain wall to follow).

    import pygrid as pg, pygrid.qcd
    U = pg.qcd.random_gauge(grid, pg.ParallelRNG(grid, [1, 2, 3, 4]))
    D = pg.qcd.WilsonFermion(U, mass=0.1)
    chi = D.M(psi)
"""
from .gauge import (
    gauge_transform, gauge_transform_fermion, link_trace, plaquette, project_su3, project_su3_array,
    random_gauge, unit_gauge,
)
from .kernels_wilson import FLOPS_PER_SITE, projection_tables
from .wilson import SchurDiagMooeeOperator, WilsonFermion

__all__ = [
    "WilsonFermion", "SchurDiagMooeeOperator", "unit_gauge", "random_gauge", "plaquette", "link_trace",
    "project_su3", "project_su3_array", "gauge_transform", "gauge_transform_fermion", "FLOPS_PER_SITE",
    "projection_tables",
]
