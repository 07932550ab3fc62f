"""Mixed-precision conjugate gradient by defect correction."""
from __future__ import annotations

import time

from ..lattice import Lattice, convert, norm2
from .base import MixedPrecisionSolver, SolverError, SolverRecord, rel
from .cg import ConjugateGradient, cg_in_double
from .log import SolverLog
from .operators import apply_M, mixed_operators

__all__ = ["MixedPrecisionConjugateGradient"]


class MixedPrecisionConjugateGradient(MixedPrecisionSolver):
    """Mixed-precision CG: single-precision inner CG, double-precision outer defect correction.

    ``x, record = MixedPrecisionConjugateGradient(tol=1e-10)(op, b, x0=None, op_single=None)``

    Each outer step computes the true residual ``r = b - A x`` in double
    precision, solves ``A_s e = r`` in single precision with CG to relative
    tolerance ``inner_tol`` (at most ``maxiter`` inner iterations), and adds
    ``e`` to ``x`` in double.  It stops when ``|r| <= tol |b|``, so the
    tolerance is reached in double precision.  ``A_s`` is ``op_single`` if
    given, else ``op.converted('single', native=True)`` (see the operator
    protocol: on single precision's own SIMD layout where the operator offers it, and ``r`` and
    ``e`` moved onto its ``grid`` and back).
    ``op`` must be Hermitian positive definite, as for CG.  ``b`` and ``x0`` are
    only read, as for CG: the solution is a new double-precision field.

    Where single precision cannot follow the system (an operator nearly singular at its rounding),
    the true residual stops falling from one outer step to the next: the rest of the solve is then
    :class:`ConjugateGradient` in double, from the solution so far (from the guess where the
    corrections made it worse), and says so, as :class:`ReliableUpdateConjugateGradient` does.

    The record's ``iterations`` counts inner iterations over all outer steps (and those of CG in
    double, ``double_iterations``), ``outer_iterations`` the outer steps, ``inner_iterations`` each
    inner solve's count, and ``history`` the true residual at each outer step.
    """

    def __init__(self, tol=1e-8, inner_tol=1e-5, maxiter=1000, outer_maxiter=20, verbose=None,
                 raise_on_fail=False, log_every=10, name="MixedPrecisionConjugateGradient"):
        if not tol > 0 or not inner_tol > 0:
            raise ValueError(f"{name}: tol and inner_tol must be positive, got {tol!r}, {inner_tol!r}")
        self.tol = float(tol)
        self.inner_tol = float(inner_tol)
        self.maxiter = int(maxiter)
        self.outer_maxiter = int(outer_maxiter)
        self.verbose = verbose
        self.raise_on_fail = raise_on_fail
        self.log_every = log_every
        self.name = name

    def solve(self, op, b: Lattice, x0: Lattice | None = None, op_single=None
              ) -> tuple[Lattice, SolverRecord]:
        log = SolverLog(self.name, self.verbose)
        t0 = time.perf_counter()
        A, A_s, g_s, b = mixed_operators(op, b, op_single)
        # Inner solves log their own progress only at debug level.
        inner_verbose = "debug" if log.enabled("debug") else "error"
        inner = ConjugateGradient(self.inner_tol, self.maxiter, verbose=inner_verbose,
                                  log_every=self.log_every, name=self.name + " (inner)")

        bb = norm2(b)
        x = b.new_like() if x0 is None else convert(x0, "double") if x0.precision != "double" else x0.copy()
        r = b.new_like()
        Ax = b.new_like()
        history, inner_its = [], []
        applications = 0
        flops = 0.0
        converged = False
        reason = None
        outer = 0
        res = None
        lost = False
        while True:
            if x0 is None and outer == 0:
                r = b.copy()  # x = 0: r = b without applying A
            else:
                apply_M(A, x, out=Ax)
                applications += 1
                r @= b - Ax
            rr = norm2(r)
            res = rel(rr, bb)
            history.append(res)
            if bb == 0.0 or res <= self.tol:
                converged = True
                break
            if outer >= self.outer_maxiter:
                reason = f"outer iteration limit {self.outer_maxiter} reached"
                break
            if len(history) >= 2 and res >= history[-2]:
                lost = True
                break
            outer += 1
            # The inner tolerance: inner_tol, but no tighter than needed to finish.
            inner.tol = max(self.inner_tol, 0.5 * self.tol / res)
            e, irec = inner.solve(A_s, convert(r, "single", grid=g_s), true_residual=False)
            inner_its.append(irec.iterations)
            applications += irec.operator_applications
            flops += irec.flops or 0.0
            x @= x + convert(e, "double", grid=x.grid)
            if log.enabled("iterative"):
                log.iterative("%s: outer %d residual %.2e inner iterations %d time %.3g s", self.name,
                              outer, res, irec.iterations, time.perf_counter() - t0)
        double_its = 0
        if lost:
            # single precision cannot follow this system: CG in double takes over
            worse = res > history[0]
            log.message("%s: in single precision the true residual (%.2e) did not fall in outer step %d: "
                        "ConjugateGradient in double goes on from %s", self.name, res, outer,
                        "the guess" if worse else "the solution so far")
            # a solution made worse holds grown low modes whose rounding would stay in the residual
            x, converged, reason, rr, runs = cg_in_double(self, A, b, bb, x0 if worse else x, self.maxiter)
            for run in runs:
                double_its += run.iterations
                applications += run.operator_applications
                flops += run.flops or 0.0
            res = rel(rr, bb)
            history.append(res)
        elapsed = time.perf_counter() - t0
        rec = SolverRecord(self.name, converged, sum(inner_its) + double_its, res, history, elapsed,
                           flops or None, self.tol, applications, outer_iterations=outer,
                           inner_iterations=inner_its, reason=reason, double_iterations=double_its)
        if converged:
            log.message("%s converged in %d iterations (%d outer), true residual %.2e, time %.3g s",
                        self.name, rec.iterations, outer, res, elapsed)
        else:
            log.warning("%s did not converge: residual %.2e after %d outer, %d inner iterations, "
                        "tolerance %.2e", self.name, res, outer, rec.iterations, self.tol)
            if self.raise_on_fail:
                raise SolverError(self.name, rec.iterations, res, self.tol, rec, reason)
        return x, rec
