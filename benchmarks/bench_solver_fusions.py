"""What the solver's fused steps save: the same CG with and without them, alternating in one process.

    python benchmarks/bench_solver_fusions.py [--what updates|xp|kept|dwf-schur|mobius-schur|links]
        [--grid 8.8.8.8]
        [--Ls 8] [--precision double] [--iterations 20] [--rounds 9]

``updates``: CG on the Wilson Schur operator's normal equations, its loop written once
with the fused updates (``pg.axpy``, ``pg.axpy_norm2``, ``<p, A p>`` as ``|M p|^2`` from
``MdagMOperator.apply_and_norm``) and once with expression updates (``x @= x + a * p``) and
the inner product, as the library's CG was written before them.  ``xp``: the fused loop
with x and p updated by a kernel each and by one kernel (``pg.axpy_xpay``).  ``kept``: the library's CG
on the Wilson (or, with ``--Ls`` above 1, domain-wall) Schur operator with the updates' and
reductions' views kept for their fields (``pygrid.lattice.kept``) and opened afresh each call.
``dwf-schur``: the library's
CG on the domain-wall (Shamir) Schur operator, with its two fused hops and with the
operator's hooks switched off (``MooeeInv`` and ``Mooee psi - t`` as kernels of their own).
``mobius-schur``: the same on the Möbius operator (b = 1.5, c = 0.5), whose fused hops also
take ``b + c S^dag`` after the adjoint hop (without them: ``b + c S`` and ``b + c S^dag`` as
kernels of their own as well).  ``links``: the library's CG on the Schur operators of two Wilson
operators on the same gauge field (antiperiodic in time), one reading its links whole and one
compressed (``compress_links=False`` and ``True``; by default an operator compresses them on
fields larger than the caches).

Rounds alternate between the two, so the machine's slow and fast phases hit both alike; the
median time per iteration of each and the median of the paired ratios are printed, after a
check that both reach the same result.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import pygrid as pg
import pygrid.qcd  # noqa: F401  (pg.qcd)
from pygrid.algorithms import ConjugateGradient, MdagMOperator
from pygrid.algorithms.operators import apply_M
from pygrid.qcd.schur import SchurOperator


def expression_cg(A, b, n):
    """n CG iterations with expression updates and the inner product; returns (x, |r|^2)."""
    x, r, rr = b.new_like(), b.copy(), pg.norm2(b)
    p, Ap = r.copy(), b.new_like()
    for _ in range(n):
        apply_M(A, p, out=Ap)
        a = rr / pg.inner_product(p, Ap).real
        x @= x + a * p
        r @= r - a * Ap
        rr, rr_old = pg.norm2(r), rr
        p @= r + (rr / rr_old) * p
    return x, rr


def fused_cg(A, b, n):
    """The same iterations with the fused updates, x and p in one kernel each."""
    x, r, rr = b.new_like(), b.copy(), pg.norm2(b)
    p, Ap = r.copy(), b.new_like()
    for _ in range(n):
        a = rr / A.apply_and_norm(p, out=Ap)[1]
        pg.axpy(x, a, p, x)
        rr, rr_old = pg.axpy_norm2(r, -a, Ap, r), rr
        pg.axpy(p, rr / rr_old, p, r)
    return x, rr


def fused_xp_cg(A, b, n):
    """The same with x and p updated by one kernel (``pg.axpy_xpay``), as the library's CG."""
    x, r, rr = b.new_like(), b.copy(), pg.norm2(b)
    p, Ap = r.copy(), b.new_like()
    for _ in range(n):
        a = rr / A.apply_and_norm(p, out=Ap)[1]
        rr, rr_old = pg.axpy_norm2(r, -a, Ap, r), rr
        pg.axpy_xpay(x, a, p, r, rr / rr_old)
    return x, rr


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--what", default="updates",
                    choices=("updates", "xp", "kept", "dwf-schur", "mobius-schur", "links"))
    ap.add_argument("--grid", default="8.8.8.8")
    ap.add_argument("--Ls", type=int, default=8)
    ap.add_argument("--precision", choices=("double", "single"), default="double")
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=9)
    args, rest = ap.parse_known_args(argv)
    pg.init(rest)
    dims = tuple(int(v) for v in args.grid.split("."))
    grid = pg.GridCartesian(dims, precision=args.precision)
    U = pg.qcd.random_gauge(grid, pg.ParallelRNG(grid, [1, 2, 3, 4]), precision=args.precision)
    if args.what == "links":
        D = None
    elif args.what in ("updates", "xp") or (args.what == "kept" and args.Ls == 1):
        D = pg.qcd.WilsonFermion(U, 0.01)
    elif args.what == "kept":
        D = pg.qcd.DomainWallFermion(U, args.Ls, 0.01, 1.8)
    else:
        D = (pg.qcd.DomainWallFermion(U, args.Ls, 0.01, 1.8) if args.what == "dwf-schur" else
             pg.qcd.MobiusFermion(U, args.Ls, 0.01, 1.8, 1.5, 0.5))
        if D._mpc_start is None or D._mpc_end is None:
            raise SystemExit("this operator has no fused Schur hops")
    if args.what == "links":
        ops = {c: MdagMOperator(SchurOperator(pg.qcd.WilsonFermion(
            U, 0.01, boundary_phases=[1, 1, 1, -1], compress_links=c), 1)) for c in (False, True)}
        A = ops[False]
    else:
        A = MdagMOperator(SchurOperator(D, 1))
    b = A.op.new_fermion()
    pg.ParallelRNG(b.grid, [5, 6, 7, 8]).gaussian(b)
    n = args.iterations
    if args.what == "updates":
        variants = {"expression updates": lambda: expression_cg(A, b, n)[0],
                    "fused updates": lambda: fused_cg(A, b, n)[0]}
    elif args.what == "xp":
        variants = {"x, p apart": lambda: fused_cg(A, b, n)[0],
                    "x, p in one": lambda: fused_xp_cg(A, b, n)[0]}
    elif args.what == "links":
        cg = ConjugateGradient(1e-150, maxiter=n, verbose="error")
        variants = {"links whole": lambda: cg(ops[False], b)[0],
                    "links compressed": lambda: cg(ops[True], b)[0]}
    elif args.what == "kept":
        from pygrid.lattice import kept

        found = kept.kept
        cg = ConjugateGradient(1e-150, maxiter=n, verbose="error")

        def solve(on):
            kept.kept = found if on else (lambda key, fields: None)
            try:
                x, rec = cg(A, b)
            finally:
                kept.kept = found
            if rec.iterations != n:
                raise SystemExit(f"CG stopped after {rec.iterations} of {n} iterations")
            return x

        variants = {"views opened": lambda: solve(False), "views kept": lambda: solve(True)}
    else:
        hooks = (D._mpc_start, D._mpc_end)
        # a tolerance no run of this length reaches (the iterated residual falls by a factor of
        # 3-10 an iteration), so that every solve runs the n iterations the time is divided by
        cg = ConjugateGradient(1e-150, maxiter=n, verbose="error")

        def solve(on):
            D._mpc_start, D._mpc_end = hooks if on else (None, None)
            x, rec = cg(A, b)
            if rec.iterations != n:
                raise SystemExit(f"CG stopped after {rec.iterations} of {n} iterations")
            return x

        variants = {"separate kernels": lambda: solve(False), "fused hops": lambda: solve(True)}
    xs = [f() for f in variants.values()]     # compiles, and the check
    ref = np.abs(xs[0].to_numpy()).max()
    diff = np.abs(xs[1].to_numpy() - xs[0].to_numpy()).max() / ref
    if not diff <= (1e-10 if args.precision == "double" else 1e-4):
        raise SystemExit(f"the variants' solutions disagree: max rel. difference {diff:.1e}")
    times = {k: [] for k in variants}
    for _ in range(args.rounds):
        for k, f in variants.items():
            t0 = time.perf_counter()
            f()
            times[k].append((time.perf_counter() - t0) / n * 1e3)
    (k0, t0), (k1, t1) = times.items()
    what = {"updates": "Wilson", "xp": "Wilson", "links": "Wilson", "dwf-schur": f"domain wall Ls {args.Ls}",
            "kept": "Wilson" if args.Ls == 1 else f"domain wall Ls {args.Ls}",
            "mobius-schur": f"Möbius domain wall Ls {args.Ls}"}[args.what]
    print(f"CG on the {what} Schur operator, {args.grid}, {args.precision}, {pg.get_backend().describe()}, "
          f"{time.strftime('%H:%M:%S', time.gmtime())} UTC; {args.rounds} alternating rounds of {n} "
          f"iterations; results agree to {diff:.1e}")
    for k, t in times.items():
        print(f"  {k:<20} median {np.median(t):9.3f} ms per iteration ({min(t):.3f}-{max(t):.3f})")
    print(f"  ratio {k1} / {k0}: median {np.median(np.array(t1) / np.array(t0)):.3f}")


if __name__ == "__main__":
    main()
