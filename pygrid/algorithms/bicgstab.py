"""BiCGStab for general (non-Hermitian) operators."""
from __future__ import annotations

import math
import time

from ..lattice import Lattice, axpy, axpy_norm2, inner_product, norm2
from .base import IterativeSolver, SolverRecord, finish, rel, vector_flops
from .log import SolverLog
from .operators import apply_M, as_operator

__all__ = ["BiCGStab"]


class BiCGStab(IterativeSolver):
    """Stabilised biconjugate gradient (van der Vorst): ``x, record = BiCGStab(tol)(op, b, x0=None)``.

    Solves ``op.M x = b`` for a general non-singular ``op.M`` (``op`` follows
    the operator protocol, or is a function returning a field/expression).
    Only ``M`` is applied, twice per iteration.  Stops when the iterated
    residual ``|r| <= tol |b|``; the true residual is recomputed at the end.
    Options, and what happens to ``b`` and ``x0`` (nothing), as for :class:`ConjugateGradient`.
    """

    def __init__(self, tol: float = 1e-8, maxiter: int = 1000, verbose: str | bool | None = None,
                 raise_on_fail: bool = False, log_every: int = 10, name: str = "BiCGStab") -> None:
        super().__init__(tol, maxiter, verbose, raise_on_fail, log_every, name)

    def solve(self, op, b: Lattice, x0: Lattice | None = None) -> tuple[Lattice, SolverRecord]:
        A = as_operator(op)
        log = SolverLog(self.name, self.verbose)
        t0 = time.perf_counter()
        applications = 0
        bb = norm2(b)
        if bb == 0.0:
            rec = SolverRecord(self.name, True, 0, 0.0, [], time.perf_counter() - t0, 0.0, self.tol, 0)
            return b.new_like(), rec
        if x0 is None:
            x = b.new_like()
            r = b.copy()
        else:
            x = x0.copy()
            r = b.new_like()
            r @= b - apply_M(A, x)
            applications += 1
        rr = norm2(r)
        target = self.tol * self.tol * bb
        rhat = r.copy()
        p = b.new_like()
        v = b.new_like()
        t = b.new_like()
        rho = alpha = omega = 1.0 + 0.0j
        history = []
        converged = rr <= target
        reason = None
        k = 0
        while not converged and k < self.maxiter:
            rho_new = inner_product(rhat, r)
            if rho_new == 0 or not math.isfinite(abs(rho_new)):
                reason = f"breakdown: <rhat, r> = {rho_new}"
                break
            if k == 0:
                p = r.copy()
            else:
                beta = (rho_new / rho) * (alpha / omega)
                p @= r + beta * (p - omega * v)
            rho = rho_new
            apply_M(A, p, out=v)
            applications += 1
            rv = inner_product(rhat, v)
            if rv == 0:
                reason = "breakdown: <rhat, A p> = 0"
                break
            alpha = rho / rv
            ss = axpy_norm2(r, -alpha, v, r)  # r is now s
            k += 1
            if ss <= target:
                axpy(x, alpha, p, x)
                rr = ss
                history.append(rel(rr, bb))
                converged = True
                break
            apply_M(A, r, out=t)
            applications += 1
            tt = norm2(t)
            if tt == 0:
                reason = "breakdown: |A s| = 0"
                axpy(x, alpha, p, x)
                rr = ss
                break
            omega = inner_product(t, r) / tt
            x @= x + alpha * p + omega * r
            rr = axpy_norm2(r, -omega, t, r)
            history.append(rel(rr, bb))
            if rr <= target:
                converged = True
                break
            if omega == 0:
                reason = "breakdown: omega = 0"
                break
            if k % self.log_every == 0 and log.enabled("iterative"):
                log.iterative("%s: iteration %d residual %.2e time %.3g s", self.name, k, history[-1],
                              time.perf_counter() - t0)
        if reason:
            log.warning("%s: %s at iteration %d", self.name, reason, k)

        r @= b - apply_M(A, x, out=t)
        applications += 1
        true_res = rel(norm2(r), bb)
        elapsed = time.perf_counter() - t0
        rec = finish(self, log, A, converged=converged, k=k, true_res=true_res, final_res=rel(rr, bb),
                     history=history, elapsed=elapsed, vector_flops_per_iter=7.0 * vector_flops(b),
                     applications=applications, reason=reason)
        return x, rec
