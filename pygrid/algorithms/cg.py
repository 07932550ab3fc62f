"""Conjugate gradient for Hermitian positive definite operators."""
from __future__ import annotations

import math
import time

from ..lattice import Lattice, axpy, axpy_norm2, axpy_xpay, convert, norm2
from .base import IterativeSolver, SolverRecord, curvature, finish, rel, vector_flops
from .log import SolverLog
from .operators import apply_M, as_hermitian

__all__ = ["ConjugateGradient"]


class ConjugateGradient(IterativeSolver):
    """Conjugate gradient: ``x, record = ConjugateGradient(tol=1e-8)(op, b, x0=None)``.

    Solves ``A x = b`` for Hermitian positive definite ``A``: ``op`` is a
    :class:`HermitianOperator` (e.g. ``MdagMOperator(wilson)``), any object
    with ``M(x, out=None)`` whose ``M`` is HPD, or a function returning a
    field or expression.  Stops when ``|r| <= tol |b|`` for the iterated
    residual ``r``; then recomputes the true residual ``|b - A x| / |b|``.
    ``x0`` (the initial guess) is copied, never written: the solution is a new
    field, and an interrupted solve leaves ``b`` and ``x0`` as they were.

    ``maxiter``        iteration limit
    ``verbose``        None (follow ``pygrid.current_config().log``), a Grid log level
                       name, a bool or 0-3; see :mod:`pygrid.algorithms.log`
    ``log_every``      iterations between progress lines at level 'iterative'
    ``raise_on_fail``  raise :class:`SolverError` if ``tol`` was not reached
    ``name``           the name used in log lines and errors
    """

    def __init__(self, tol: float = 1e-8, maxiter: int = 1000, verbose: str | bool | None = None,
                 raise_on_fail: bool = False, log_every: int = 10, name: str = "ConjugateGradient") -> None:
        super().__init__(tol, maxiter, verbose, raise_on_fail, log_every, name)

    def solve(self, op, b: Lattice, x0: Lattice | None = None, true_residual: bool = True
              ) -> tuple[Lattice, SolverRecord]:
        A = as_hermitian(op)
        log = SolverLog(self.name, self.verbose)
        t0 = time.perf_counter()
        applications = 0

        bb = norm2(b)
        history = []
        if x0 is None:
            x = b.new_like()
            r = b.copy()
            rr = bb
        else:
            x = x0.copy()
            Ax = apply_M(A, x)
            applications += 1
            r = b.new_like()
            r @= b - Ax
            rr = norm2(r)
        if bb == 0.0:
            # b = 0: the solution is x = 0 exactly.
            x = b.new_like()
            rec = SolverRecord(self.name, True, 0, 0.0, [], time.perf_counter() - t0, 0.0, self.tol,
                               applications)
            log.message("%s: zero source, solution is zero", self.name)
            return x, rec

        target = self.tol * self.tol * bb
        p = r.copy()
        Ap = b.new_like()
        k = 0
        converged = rr <= target
        reason = None
        if log.enabled("iterative"):
            log.iterative("%s: iteration 0 residual %.2e tolerance %.2e", self.name, rel(rr, bb), self.tol)
        and_norm = getattr(A, "apply_and_norm", None)
        while not converged and k < self.maxiter:
            pAp, reason = curvature(A, p, Ap, and_norm)
            applications += 1
            if reason is not None:
                log.warning("%s: %s at iteration %d", self.name, reason, k)
                break
            a = rr / pAp
            rr_new = axpy_norm2(r, -a, Ap, r)
            k += 1
            history.append(rel(rr_new, bb))
            if rr_new <= target:
                axpy(x, a, p, x)
                converged = True
                rr = rr_new
                break
            beta = rr_new / rr
            rr = rr_new
            # x += a p and p = r + beta p in one pass that reads p once
            axpy_xpay(x, a, p, r, beta)
            if k % self.log_every == 0 and log.enabled("iterative"):
                log.iterative("%s: iteration %d residual %.2e time %.3g s", self.name, k,
                              history[-1], time.perf_counter() - t0)

        if true_residual:
            Ax = apply_M(A, x, out=Ap)
            applications += 1
            r @= b - Ax
            true_res = rel(norm2(r), bb)
        else:
            true_res = rel(rr, bb)
        elapsed = time.perf_counter() - t0
        rec = finish(self, log, A, converged=converged, k=k, true_res=true_res, final_res=rel(rr, bb),
                     history=history, elapsed=elapsed, vector_flops_per_iter=4.5 * vector_flops(b),
                     applications=applications, reason=reason)
        return x, rec


def cg_in_double(solver, A, b, bb, x, maxiter):
    """The rest of a mixed-precision ``solver``'s solve where single precision cannot follow the
    system: CG in double from ``x`` (None: zero; in single: converted, only read), started again
    from its solution while its iterated residual has converged and its true one has not but has
    fallen.  Returns the solution, whether it converged (its true residual at ``solver.tol``), why
    not, ``|b - A x|^2`` and the record of each CG."""
    runs, last = [], math.inf
    if x is not None and x.precision != "double":
        x = convert(x, "double")
    while True:
        cg = ConjugateGradient(solver.tol, max(0, maxiter), solver.verbose, log_every=solver.log_every,
                               name=f"{solver.name} (in double)")
        x, rec = cg.solve(A, b, x)
        runs.append(rec)
        maxiter -= rec.iterations
        rr = rec.true_residual ** 2 * bb
        if rec.true_residual <= solver.tol:
            return x, True, None, rr, runs
        if not rec.converged:
            return x, False, rec.reason, rr, runs
        if rec.true_residual >= last:
            return x, False, (f"stagnated in double: the true residual ({rec.true_residual:.2e}) did not "
                              "fall when CG started again"), rr, runs
        last = rec.true_residual
