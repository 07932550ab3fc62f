"""Schur red-black (even-odd preconditioned) solves, as Grid's SchurRedBlackDiagMooeeSolve.

For a fermion operator with the even-odd pieces (``Meooe``, ``MeooeDag``,
``Mooee``, ``MooeeDag``, ``MooeeInv``, ``MooeeInvDag``, ``new_fermion``,
``rb_grid``): ``WilsonFermion``, ``DomainWallFermion``, ``MobiusFermion``.
Solving ``M x = b`` with ``cb`` the solve checkerboard (default odd, 1) and
``e`` the other one::

    src_o = b_o - Meooe MooeeInv b_e                       (prepare_source)
    Mpc   = Mooee - Meooe MooeeInv Meooe                   (SchurDiagMooeeOperator, on cb)
    (Mpc^dag Mpc) x_o = Mpc^dag src_o                      (the solver, e.g. CG)
    x_e = MooeeInv (b_e - Meooe x_o)                       (reconstruct)

    x, record = schur_solve(op, b, ConjugateGradient(tol=1e-10, maxiter=5000))
    x, record = SchurRedBlackDiagMooeeSolve(MixedPrecisionConjugateGradient(1e-10))(op, b)

``record`` is the solver's :class:`pygrid.algorithms.SolverRecord` for the
preconditioned system, with two attributes added: ``full_residual``
(``|b - M x| / |b|`` of the reconstructed solution) and ``checkerboard``.

``b`` and ``x0`` are only read (the source and the guess are picked into new
red-black fields), and ``x`` is a new field: a solve that fails or is interrupted
leaves the caller's fields as they were.
"""
from __future__ import annotations

import math

from ..algorithms.base import SolverRecord
from ..errors import ConformabilityError, GridError
from ..lattice import Lattice, norm2
from .wilson import SchurDiagMooeeOperator

__all__ = ["SchurOperator", "SchurRedBlackDiagMooeeSolve", "schur_solve"]


class SchurOperator(SchurDiagMooeeOperator):
    """SchurDiagMooeeOperator plus ``converted(precision)`` for mixed-precision solvers."""

    def converted(self, precision, native=False):
        """This Schur operator in ``precision``; ``native``: its fermion operator on the grid of that
        precision's own SIMD layout (``FermionOperator.converted``)."""
        conv = getattr(self.op, "converted", None)
        if conv is None:
            raise GridError(
                f"{self.op!r} has no converted(precision): cannot make a {precision} Schur operator"
            )
        return SchurOperator(conv(precision, native=True) if native else conv(precision), self.cb)


class SchurRedBlackDiagMooeeSolve:
    """``SchurRedBlackDiagMooeeSolve(solver, cb=1)(op, b, x0=None) -> (x, record)``.

    ``solver`` is a Hermitian solver called as ``solver(A, rhs, x0)`` with ``A``
    the normal operator of the Schur complement (e.g. ``ConjugateGradient``,
    ``MixedPrecisionConjugateGradient``, which uses ``A.converted('single', native=True)``).
    ``b`` is a full-grid fermion of the operator; ``x0`` an optional full-grid
    initial guess (its checkerboard-cb part seeds the solver).
    """

    def __init__(self, solver, cb: int = 1) -> None:
        if cb not in (0, 1):
            raise GridError(f"checkerboard must be 0 or 1, got {cb!r}")
        self.solver = solver
        self.cb = cb

    def __call__(self, op, b: Lattice, x0: Lattice | None = None) -> tuple[Lattice, SolverRecord]:
        return self.solve(op, b, x0)

    def solve(self, op, b: Lattice, x0: Lattice | None = None) -> tuple[Lattice, SolverRecord]:
        from ..algorithms import MdagMOperator
        from ..lattice import pick_checkerboard

        if isinstance(op, SchurDiagMooeeOperator):
            raise ConformabilityError(
                "schur_solve takes the fermion operator itself (e.g. WilsonFermion), not its Schur "
                "operator: it builds the Schur complement and reconstructs the full-grid solution")
        if b.grid != op.grid:
            raise ConformabilityError(
                f"schur_solve: the source {b} is not on the operator's full grid {op.grid}"
            )
        S = SchurOperator(op, self.cb)
        src = S.prepare_source(b)
        rhs = S.Mdag(src)
        guess = None if x0 is None else pick_checkerboard(self.cb, x0)
        res = self.solver(MdagMOperator(S), rhs, guess)
        x_cb, rec = res if isinstance(res, tuple) else (res, None)
        x = S.reconstruct(b, x_cb)
        if rec is not None:
            r = op.M(x)
            r @= b - r
            bb = norm2(b)
            rec.full_residual = math.sqrt(norm2(r) / bb) if bb > 0 else math.sqrt(norm2(r))
            rec.checkerboard = self.cb
        return x, rec


def schur_solve(op, b: Lattice, solver, cb: int = 1, x0: Lattice | None = None
                ) -> tuple[Lattice, SolverRecord]:
    """Solve ``op.M x = b`` by the Schur red-black method (see the module docstring); returns (x, record)."""
    return SchurRedBlackDiagMooeeSolve(solver, cb)(op, b, x0)
