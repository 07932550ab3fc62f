"""What every solver shares: the result record, the error, small helpers."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..errors import PyGridError
from ..lattice import inner_product
from .operators import apply_M

__all__ = ["SolverError", "SolverRecord"]


class SolverError(PyGridError, RuntimeError):
    """A solver did not reach its tolerance and was asked to raise (``raise_on_fail=True``).

    Attributes: ``solver`` (name), ``iterations``, ``residual`` (relative
    residual reached), ``tol`` and ``record`` (the full :class:`SolverRecord`).
    """

    def __init__(self, solver, iterations, residual, tol, record=None, reason=None):
        self.solver = solver
        self.iterations = iterations
        self.residual = residual
        self.tol = tol
        self.record = record
        why = f" ({reason})" if reason else ""
        super().__init__(
            f"{solver} did not converge{why}: relative residual {residual:.3e} after "
            f"{iterations} iterations, tolerance {tol:.3e}; raise maxiter, loosen tol or "
            f"check that the operator suits this solver"
        )


@dataclass
class SolverRecord:
    """What a solve did.

    converged      whether the solver's residual reached ``tol`` (relative to |b|)
    iterations     Krylov iterations (for mixed precision: inner iterations, all outer steps)
    true_residual  |b - A x| / |b| recomputed from the returned x in the solver's precision
    history        relative residual after each iteration (mixed precision: the true
                   residual at the start of each outer step and after the last)
    time           wall-clock seconds
    flops          estimated floating-point operations: linear algebra, plus the
                   operator's if it has ``flops_per_apply``; None if unknown
    double_iterations  the mixed-precision solvers: the iterations of CG in double once single
                   precision no longer followed the system (0 where none were); None for the others
    """

    solver: str
    converged: bool
    iterations: int
    true_residual: float
    history: list[float] = field(default_factory=list)
    time: float = 0.0
    flops: float | None = None
    tol: float = 0.0
    operator_applications: int = 0
    outer_iterations: int | None = None
    inner_iterations: list[int] = field(default_factory=list)
    reason: str | None = None
    double_iterations: int | None = None

    def __str__(self):
        state = "converged" if self.converged else "NOT converged"
        return (f"{self.solver} {state} in {self.iterations} iterations, true residual "
                f"{self.true_residual:.2e}, time {self.time:.3g} s")


def vector_flops(b):
    """Real flops of one complex axpy on a field like b (8 per complex component)."""
    return 8.0 * b.grid.osites * b.grid.nsimd * b.site_type.ncomp


def curvature(A, p, Ap, and_norm):
    """``<p, A p>`` with ``A p`` written into ``Ap``: as ``|M p|^2`` where A is ``M^dag M`` and offers
    ``apply_and_norm`` (one field read, and never negative by rounding), else as an inner product;
    and the reason CG breaks down on it, or None."""
    if and_norm is not None:
        pAp = and_norm(p, out=Ap)[1]
    else:
        apply_M(A, p, out=Ap)
        pAp = inner_product(p, Ap).real
    if pAp > 0.0 and math.isfinite(pAp):
        return pAp, None
    return pAp, f"breakdown: <p, A p> = {pAp:.3e}; the operator is not positive definite"


def rel(num2, den2):
    return math.sqrt(max(num2, 0.0) / den2) if den2 > 0 else math.sqrt(max(num2, 0.0))


def finish(solver, log, A, *, converged, k, true_res, final_res, history, elapsed, vector_flops_per_iter,
           applications, reason=None):
    """The record of a finished solve, its log line, and the error if asked to raise."""
    flops = vector_flops_per_iter * k
    fpa = getattr(A, "flops_per_apply", None)
    if fpa:
        flops += applications * fpa
    rec = SolverRecord(solver.name, bool(converged), k, true_res, history, elapsed, flops, solver.tol,
                       applications, reason=reason)
    if converged:
        log.message("%s converged in %d iterations, true residual %.2e, time %.3g s",
                    solver.name, k, true_res, elapsed)
    else:
        log.warning("%s did not converge in %d iterations: residual %.2e, tolerance %.2e",
                    solver.name, k, final_res, solver.tol)
        if solver.raise_on_fail:
            raise SolverError(solver.name, k, final_res, solver.tol, rec, reason)
    return rec


class MixedPrecisionSolver:
    """The call of the solvers that iterate in single precision: ``solver(op, b, x0=None,
    op_single=None)``."""

    def __call__(self, op, b, x0=None, op_single=None):
        return self.solve(op, b, x0, op_single)


class IterativeSolver:
    """What every Krylov solver here shares: its options, checked, and the call form."""

    def __init__(self, tol, maxiter, verbose, raise_on_fail, log_every, name):
        if not tol > 0:
            raise ValueError(f"{name}: tol must be positive, got {tol!r}")
        if int(maxiter) < 0:
            raise ValueError(f"{name}: maxiter must be >= 0, got {maxiter!r}")
        self.tol = float(tol)
        self.maxiter = int(maxiter)
        self.verbose = verbose
        self.raise_on_fail = raise_on_fail
        self.log_every = max(1, int(log_every))
        self.name = name

    def __call__(self, op, b, x0=None):
        return self.solve(op, b, x0)
