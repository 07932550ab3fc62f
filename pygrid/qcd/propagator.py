"""Quark propagators: twelve solves, one per spin-colour column of a source.

    S, records = pg.qcd.propagator(op, src, pg.algorithms.ConjugateGradient(1e-10))

``src`` is a ``LatticePropagator`` on the operator's 4D grid (a point, wall,
noise or smeared source from :mod:`pygrid.qcd.sources`).  Column (s, c) of
``src`` is the fermion ``b = src * e_sc``; its solution ``x`` of ``M x = b``
becomes column (s, c) of ``S``, so that ``S = M^{-1} src`` as a matrix product
in spin-colour.  Each solve is the Schur red-black one
(:func:`pygrid.qcd.schur_solve`) with the Hermitian ``solver`` given.

For the domain-wall operators the solve is 5D and ``S`` is the physical 4D
propagator, Grid's ``ImportPhysicalFermionSource`` and
``ExportPhysicalFermionSolution``::

    b5 = op.import_physical_source(b)     x5 = M5^{-1} b5     x = op.physical_field(x5)

(P_- x5_0 + P_+ x5_{Ls-1}; the contact term is not subtracted).
"""
from __future__ import annotations

import time

import numpy as np

from ..algorithms.log import SolverLog
from ..errors import ConformabilityError, SiteTypeError
from ..lattice import Lattice, outer_product
from ..tensors import sitetype as st
from ..tensors.constant import ConstTensor
from .schur import schur_solve

__all__ = ["propagator", "spin_colour_unit_vector"]

_PROP = st.SpinColourMatrix()
_VEC = st.SpinColourVector()


def spin_colour_unit_vector(s: int, c: int) -> ConstTensor:
    """The constant spin-colour vector with 1 at spin ``s``, colour ``c``: ``P * e`` is column (s, c) of
    the propagator ``P``, ``pg.outer_product(x, e)`` puts ``x`` there."""
    v = np.zeros((4, 3))
    v[s, c] = 1.0
    return ConstTensor(_VEC, v, f"e[{s},{c}]")


def _four_d_grid(op):
    return op.grid4 if hasattr(op, "physical_field") else op.grid


def propagator(op, src: Lattice, solver, out: Lattice | None = None, cb: int = 1,
               verbose=None) -> tuple[Lattice, list]:
    """``S = M^{-1} src`` column by column (see the module docstring); returns ``(S, records)``.

    ``op``: a WilsonFermion, DomainWallFermion or MobiusFermion.  ``solver``: a Hermitian solver for
    the Schur normal equations (``ConjugateGradient``, ``MixedPrecisionConjugateGradient``, ...).
    ``records``: the twelve SolverRecords, in column order (s, c) = (0, 0), (0, 1), ... (3, 2).
    One line per column is logged at Grid's ``message`` level (``verbose`` as for the solvers).
    ``out`` (if given) is written once, after the twelfth solve: a failure or Ctrl-C part way
    leaves it as it was.
    """
    grid4 = _four_d_grid(op)
    if not isinstance(src, Lattice) or src.site_type.levels != _PROP.levels:
        raise SiteTypeError(f"propagator: the source must be a LatticePropagator, got {src!r}")
    if src.grid != grid4:
        raise ConformabilityError(f"propagator: the source {src} is not on the operator's 4D grid {grid4}")
    if src.precision != op.precision:
        raise ConformabilityError(
            f"propagator: a {src.precision} source for a {op.precision} operator; use "
            f"pg.convert(src, {op.precision!r})")
    if out is not None and (not isinstance(out, Lattice) or out.site_type.levels != _PROP.levels
                            or out.grid != grid4 or out.precision != op.precision):
        raise ConformabilityError(f"propagator: out must be a {op.precision} LatticePropagator on {grid4}, "
                                  f"got {out!r}")
    five_d = hasattr(op, "physical_field")
    log = SolverLog("propagator", verbose)
    S = Lattice(grid4, _PROP, op.precision)
    b = Lattice(grid4, _VEC, op.precision)
    records = []
    t_all = time.perf_counter()
    for s in range(4):
        for c in range(3):
            e = spin_colour_unit_vector(s, c)
            b.assign(src * e)
            t0 = time.perf_counter()
            if five_d:
                x5, rec = schur_solve(op, op.import_physical_source(b), solver, cb=cb)
                x = op.physical_field(x5)
            else:
                x, rec = schur_solve(op, b, solver, cb=cb)
            S.assign(S + outer_product(x, e))
            records.append(rec)
            k = 3 * s + c + 1
            if rec is None:
                log.message("propagator: column %d/12 (spin %d, colour %d) in %.3g s", k, s, c,
                            time.perf_counter() - t0)
            else:
                log.message("propagator: column %d/12 (spin %d, colour %d): %s %s in %d iterations, "
                            "residual %.2e, %.3g s", k, s, c, rec.solver,
                            "converged" if rec.converged else "NOT converged", rec.iterations,
                            getattr(rec, "full_residual", rec.true_residual), time.perf_counter() - t0)
    if records and records[0] is not None:
        log.message("propagator: 12 columns, %d iterations in all, %.3g s",
                    sum(r.iterations for r in records), time.perf_counter() - t_all)
    return (S if out is None else out.assign(S)), records
