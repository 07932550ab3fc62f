"""Conjugate gradient in single precision with reliable updates in double."""
from __future__ import annotations

import time

from ..lattice import Lattice, axpy, axpy_norm2, axpy_xpay, convert, norm2
from .base import IterativeSolver, MixedPrecisionSolver, SolverRecord, curvature, finish, rel, vector_flops
from .log import SolverLog
from .operators import apply_M, mixed_operators

__all__ = ["ReliableUpdateConjugateGradient"]


class ReliableUpdateConjugateGradient(MixedPrecisionSolver, IterativeSolver):
    """CG whose iterations run in single precision, corrected in double without a restart.

    ``x, record = ReliableUpdateConjugateGradient(tol=1e-10)(op, b, x0=None, op_single=None)``

    The Krylov iteration (the operator, the residual and the search direction) runs on ``A_s``,
    ``op_single`` if given, else ``op.converted('single', native=True)`` (on single precision's own
    SIMD layout where the operator offers it; the fields follow the operator's ``grid``), and sums
    its steps in a single precision correction.  Whenever the iterated residual has fallen by
    ``delta`` since the last update (``|r| < delta max|r|``), or below the tolerance, the correction
    is added to the solution in double, the true residual ``b - A x`` is computed in double and
    replaces the iterated one, and the search direction carries on (as QUDA's and Grid's
    reliable-update solvers do).  :class:`MixedPrecisionConjugateGradient` restarts CG at each
    correction and loses its search directions: on an ill-conditioned system it needs more
    iterations than CG in double, this solver fewer (docs/performance.md, "Solvers").

    It stops when the true residual ``|b - A x| <= tol |b|`` (in double).  The record's
    ``history`` holds the iterated residual of each iteration, ``outer_iterations`` the number of
    reliable updates.  ``b`` and ``x0`` are only read; the solution is a new double field.
    A solve whose true residual has not fallen over ``max_stalls`` updates in a row stops as
    stagnated: single precision cannot resolve the system further.
    """

    def __init__(self, tol: float = 1e-8, maxiter: int = 10000, delta: float = 0.1, max_stalls: int = 5,
                 verbose: str | bool | None = None, raise_on_fail: bool = False, log_every: int = 10,
                 name: str = "ReliableUpdateConjugateGradient") -> None:
        super().__init__(tol, maxiter, verbose, raise_on_fail, log_every, name)
        if not 0.0 < delta < 1.0:
            raise ValueError(f"{name}: delta must be between 0 and 1, got {delta!r}")
        if int(max_stalls) < 1:
            raise ValueError(f"{name}: max_stalls must be at least 1, got {max_stalls!r}")
        self.delta = float(delta)
        self.max_stalls = int(max_stalls)

    def solve(self, op, b: Lattice, x0: Lattice | None = None, op_single=None
              ) -> tuple[Lattice, SolverRecord]:
        log = SolverLog(self.name, self.verbose)
        t0 = time.perf_counter()
        A, A_s, g_s, b = mixed_operators(op, b, op_single)
        bb = norm2(b)
        applications = 0
        if x0 is None:
            x = b.new_like()
            r = b.copy()
            rr = bb
        else:
            x = convert(x0, "double") if x0.precision != "double" else x0.copy()
            r = b.new_like()
            r @= b - apply_M(A, x)
            applications += 1
            rr = norm2(r)
        if bb == 0.0:
            log.message("%s: zero source, solution is zero", self.name)
            return b.new_like(), SolverRecord(self.name, True, 0, 0.0, [], time.perf_counter() - t0, 0.0,
                                              self.tol, applications, outer_iterations=0)

        target = self.tol * self.tol * bb
        delta2 = self.delta * self.delta
        r_s = convert(r, "single", grid=g_s)
        p_s = r_s.copy()
        e_s = r_s.new_like()            # the steps since the last update
        e_s.fill(0)
        Ap_s = r_s.new_like()
        Ax = b.new_like()
        rr_s = norm2(r_s)
        rr_max = rr_s
        history, updates, stalls, k = [], 0, 0, 0
        converged, reason = rr <= target, None
        best = rr
        and_norm = getattr(A_s, "apply_and_norm", None)
        if log.enabled("iterative"):
            log.iterative("%s: iteration 0 residual %.2e tolerance %.2e", self.name, rel(rr, bb), self.tol)
        while not converged and k < self.maxiter:
            pAp, reason = curvature(A_s, p_s, Ap_s, and_norm)
            applications += 1
            if reason is not None:
                log.warning("%s: %s at iteration %d", self.name, reason, k)
                break
            a = rr_s / pAp
            rr_new = axpy_norm2(r_s, -a, Ap_s, r_s)
            k += 1
            history.append(rel(rr_new, bb))
            if rr_new > delta2 * rr_max and rr_new > target:
                rr_max = max(rr_max, rr_new)
                beta, rr_s = rr_new / rr_s, rr_new
                axpy_xpay(e_s, a, p_s, r_s, beta)   # e += a p, then p = r + beta p
                if k % self.log_every == 0 and log.enabled("iterative"):
                    log.iterative("%s: iteration %d residual %.2e time %.3g s", self.name, k,
                                  history[-1], time.perf_counter() - t0)
                continue
            # the reliable update: the correction into x, and the true residual in double
            axpy(e_s, a, p_s, e_s)
            x @= x + convert(e_s, "double", grid=x.grid)
            e_s.fill(0)
            apply_M(A, x, out=Ax)
            applications += 1
            r @= b - Ax
            rr = norm2(r)
            updates += 1
            if log.enabled("iterative"):
                log.iterative("%s: reliable update %d at iteration %d: true residual %.2e, iterated %.2e",
                              self.name, updates, k, rel(rr, bb), history[-1])
            if rr <= target:
                converged = True
                break
            stalls = stalls + 1 if rr >= best else 0
            best = min(best, rr)
            if stalls >= self.max_stalls:
                reason = (f"stagnated: the true residual did not fall over {stalls} reliable updates "
                          f"({rel(rr, bb):.2e})")
                log.warning("%s: %s", self.name, reason)
                break
            r_s = convert(r, "single", grid=g_s)
            rr_new = norm2(r_s)
            beta, rr_s, rr_max = rr_new / rr_s, rr_new, rr_new
            axpy(p_s, beta, p_s, r_s)           # p = r + beta p, on the true residual
        if k and not converged and reason is None:
            # out of iterations: the steps since the last update still count
            x @= x + convert(e_s, "double", grid=x.grid)
            r @= b - apply_M(A, x, out=Ax)
            applications += 1
            rr = norm2(r)
        elapsed = time.perf_counter() - t0
        rec = finish(self, log, A, converged=converged, k=k, true_res=rel(rr, bb), final_res=rel(rr, bb),
                     history=history, elapsed=elapsed, vector_flops_per_iter=4.5 * vector_flops(b),
                     applications=applications, reason=reason)
        rec.outer_iterations = updates
        return x, rec
