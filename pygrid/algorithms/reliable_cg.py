"""Conjugate gradient in single precision with reliable updates in double."""
from __future__ import annotations

import time

from ..lattice import Lattice, axpy, axpy_norm2, axpy_xpay, convert, inner_product, norm2
from .base import IterativeSolver, MixedPrecisionSolver, SolverRecord, curvature, finish, rel, vector_flops
from .cg import cg_in_double
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
    replaces the iterated one, and the search direction, made orthogonal to it again, carries on
    (as QUDA's and Grid's reliable-update solvers do).  :class:`MixedPrecisionConjugateGradient`
    restarts CG at each correction and loses its search directions: on an ill-conditioned system it
    needs more iterations than CG in double, this solver about as many on the Wilson and domain-wall
    systems measured (docs/performance.md, "Solvers").

    It stops when the true residual ``|b - A x| <= tol |b|`` (in double).  Where single precision
    cannot follow the system (an operator nearly singular at single precision's rounding), the
    rest of the solve is :class:`ConjugateGradient` in double, from the solution so far (from the
    guess where single precision has made it worse; started again from its own solution while its
    true residual, not its iterated one, is above ``tol`` and still falls), and says so: when the
    true residual has not fallen over ``max_stalls`` updates in a row, when it is more than
    ``max_drift`` times the iterated one, or when ``<p, A_s p>`` breaks down.  The record's
    ``history`` holds the iterated residual of each iteration, ``outer_iterations`` the number of
    reliable updates, ``double_iterations`` the iterations of that CG in double (0 where there were
    none).  ``b`` and ``x0`` are only read; the solution is a new double field.
    """

    def __init__(self, tol: float = 1e-8, maxiter: int = 10000, delta: float = 0.2, max_stalls: int = 5,
                 max_drift: float = 1.25, verbose: str | bool | None = None, raise_on_fail: bool = False,
                 log_every: int = 10, name: str = "ReliableUpdateConjugateGradient") -> None:
        super().__init__(tol, maxiter, verbose, raise_on_fail, log_every, name)
        if not 0.0 < delta < 1.0:
            raise ValueError(f"{name}: delta must be between 0 and 1, got {delta!r}")
        if int(max_stalls) < 1:
            raise ValueError(f"{name}: max_stalls must be at least 1, got {max_stalls!r}")
        if not float(max_drift) > 1.0:
            raise ValueError(f"{name}: max_drift must be above 1, got {max_drift!r}")
        self.delta = float(delta)
        self.max_stalls = int(max_stalls)
        self.max_drift = float(max_drift)

    @staticmethod
    def _start(A, b, bb, x0):
        """x (the guess in double, or zero), r = b - A x, |r|^2 and the operator applications."""
        if x0 is None:
            return b.new_like(), b.copy(), bb, 0
        x = convert(x0, "double") if x0.precision != "double" else x0.copy()
        r = b.new_like()
        r @= b - apply_M(A, x)
        return x, r, norm2(r), 1

    def solve(self, op, b: Lattice, x0: Lattice | None = None, op_single=None
              ) -> tuple[Lattice, SolverRecord]:
        log = SolverLog(self.name, self.verbose)
        t0 = time.perf_counter()
        A, A_s, g_s, b = mixed_operators(op, b, op_single)
        bb = norm2(b)
        x, r, rr, applications = self._start(A, b, bb, x0)
        if bb == 0.0:
            log.message("%s: zero source, solution is zero", self.name)
            return b.new_like(), SolverRecord(self.name, True, 0, 0.0, [], time.perf_counter() - t0, 0.0,
                                              self.tol, applications, outer_iterations=0, double_iterations=0)

        target = self.tol * self.tol * bb
        delta2 = self.delta * self.delta
        r_s = convert(r, "single", grid=g_s)
        p_s = r_s.copy()
        e_s = r_s.new_like()            # the steps since the last update (zero)
        Ap_s = r_s.new_like()
        Ax = b.new_like()
        rr_s = norm2(r_s)
        rr_max, rr_start, best = rr_s, rr, rr
        history, updates, stalls, k = [], 0, 0, 0
        converged, reason, lost = rr <= target, None, None
        and_norm = getattr(A_s, "apply_and_norm", None)
        if log.enabled("iterative"):
            log.iterative("%s: iteration 0 residual %.2e tolerance %.2e", self.name, rel(rr, bb), self.tol)
        while not converged and k < self.maxiter:
            pAp, lost = curvature(A_s, p_s, Ap_s, and_norm)
            applications += 1
            if lost is None:
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
                axpy(e_s, a, p_s, e_s)
            # the reliable update: the correction into x, and the true residual in double
            x @= x + convert(e_s, "double", grid=x.grid)
            e_s.fill(0)
            apply_M(A, x, out=Ax)
            applications += 1
            r @= b - Ax
            rr = norm2(r)
            updates += 1
            if log.enabled("iterative"):
                log.iterative("%s: reliable update %d at iteration %d: true residual %.2e, iterated %.2e",
                              self.name, updates, k, rel(rr, bb), history[-1] if history else 1.0)
            if rr <= target:
                converged = True
                break
            stalls = 0 if rr < best else stalls + 1
            best = min(best, rr)
            if lost is None and stalls >= self.max_stalls:
                lost = f"the true residual ({rel(rr, bb):.2e}) has not fallen over {stalls} reliable updates"
            elif lost is None and rel(rr, rr_new) > self.max_drift:
                lost = (f"the true residual ({rel(rr, bb):.2e}) is {rel(rr, rr_new):.3g} times the iterated "
                        "one")
            if lost is not None:
                break
            r_s = convert(r, "single", grid=g_s)
            rr_new = norm2(r_s)
            # the search direction made orthogonal to the new residual again (as QUDA does), then
            # p = r + beta p on the true residual
            axpy(p_s, -inner_product(r_s, p_s) / rr_new, r_s, p_s)
            beta, rr_s, rr_max = rr_new / rr_s, rr_new, rr_new
            axpy(p_s, beta, p_s, r_s)
        double_iterations = 0
        if lost is not None:
            # single precision cannot follow this system: CG in double takes over
            worse = rr > rr_start
            log.message("%s: in single precision at iteration %d %s: ConjugateGradient in double goes on "
                        "from %s", self.name, k, lost, "the guess" if worse else "the solution so far")
            # a solution made worse holds grown low modes whose rounding would stay in the residual
            x, converged, reason, rr, runs = cg_in_double(self, A, b, bb, x0 if worse else x,
                                                          self.maxiter - k)
            for rec in runs:
                k += rec.iterations
                double_iterations += rec.iterations
                history += rec.history
                applications += rec.operator_applications
        elif k and not converged and reason is None:
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
        rec.double_iterations = double_iterations
        return x, rec
