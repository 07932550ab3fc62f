"""``pygrid selftest``: every operator on the active backend against numpy, then the Dirac benchmarks.

    pygrid selftest --accelerator cuda [--grid 8.8.8.8] [--precision both] [--no-benchmark]
                    [any other flag of pygrid benchmark, for the benchmarks]

For whoever has a GPU (or any backend): each check computes on the device and
compares with a numpy formula evaluated on the host from ``to_numpy()`` arrays
(np.roll, einsum; no pygrid kernel is involved in a reference).  One line per
check with its error and tolerance; then ``pygrid benchmark wilson`` and
``pygrid benchmark dwf`` on the same backend.  The exit status is 1 when a
check fails.
"""
from __future__ import annotations

import time

import numpy as np

TOL = {"double": 1e-11, "single": 2e-5}
G5 = np.diag([1, 1, -1, -1]).astype(complex)


def _relerr(got, want):
    return float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-300))


def _g5(a):
    return np.einsum("st,...tc->...sc", G5, a)


class _Checks:
    def __init__(self, out):
        self.out = out
        self.failed = 0
        self.passed = 0

    def __call__(self, name, got, want, tol):
        err = _relerr(got, want)
        ok = bool(np.isfinite(err) and err <= tol)
        self.passed += ok
        self.failed += not ok
        self.out(f"  {'ok  ' if ok else 'FAIL'} {name:<44} rel. error {err:.1e} (tolerance {tol:.0e})")


def _checks(precision, dims, check):
    import pygrid as pg

    from .qcd.fifth_dim import fifth_dim_hop_matrices
    from .qcd.reference import dhop as dhop_reference

    tol = TOL[precision]
    grid = pg.GridCartesian(list(dims), precision=precision)
    rng = pg.ParallelRNG(grid, [2026, 11])
    U = pg.qcd.random_gauge(grid, rng, precision=precision)
    psi, chi = pg.LatticeFermion(grid, precision), pg.LatticeFermion(grid, precision)
    rng.gaussian(psi)
    rng.gaussian(chi)
    V = pg.LatticeColourMatrix(grid, precision)
    rng.gaussian(V)
    Un, pn, cn, Vn = U.to_numpy(), psi.to_numpy(), chi.to_numpy(), V.to_numpy()

    # expressions, shifts and reductions
    check("axpy z = a x + y", pg.eval(0.5 * psi + chi).to_numpy(), 0.5 * pn + cn, tol)
    check("su3 product U V", pg.eval(V * V).to_numpy(), np.einsum("...ab,...bc->...ac", Vn, Vn), tol)
    check("adj(V) cshift(psi, t, -1)", pg.eval(pg.adj(V) * pg.cshift(psi, 3, -1)).to_numpy(),
          np.einsum("...ba,...sb->...sa", Vn.conj(), np.roll(pn, 1, axis=3)), tol)
    check("norm2", np.array(pg.norm2(psi)), np.array(np.vdot(pn, pn).real), tol)
    check("inner_product", np.array(pg.inner_product(psi, chi)), np.array(np.vdot(pn, cn)), tol)

    # Wilson
    mass = 0.1
    D = pg.qcd.WilsonFermion(U, mass)
    ref = dhop_reference(Un, pn)
    check("Wilson Dhop", D.Dhop(psi).to_numpy(), ref, tol)
    check("Wilson M", D.M(psi).to_numpy(), (4 + mass) * pn + ref, tol)
    check(
        "Wilson Mdag = g5 M g5",
        D.Mdag(psi).to_numpy(),
        (4 + mass) * pn + _g5(dhop_reference(Un, _g5(pn))),
        tol,
    )
    full = pg.LatticeFermion(grid, precision)
    pg.set_checkerboard(full, D.Meooe(pg.pick_checkerboard(0, psi)))
    odd = np.indices(dims).sum(axis=0) % 2 == 1
    check("Wilson Meooe (even -> odd)", full.to_numpy()[odd],
          dhop_reference(Un, np.where(odd[..., None, None], 0, pn))[odd], tol)

    # Möbius domain wall: M = Dw (b + c S) + (1 - S), S from its matrices in s
    Ls, M5, b, c, m = 4, 1.8, 1.5, 0.5, 0.05
    op = pg.qcd.MobiusFermion(U, Ls, m, M5, b, c)
    psi5 = op.new_fermion()
    pg.ParallelRNG(op.grid5, [7]).gaussian(psi5)
    p5 = psi5.to_numpy()
    S = fifth_dim_hop_matrices(Ls, m)

    def smat(A, v):  # A (2, Ls, Ls) on the chiralities of v[s, x, y, z, t, spin, colour]
        out = np.empty_like(v)
        out[..., :2, :] = np.einsum("st,t...->s...", A[0], v[..., :2, :])
        out[..., 2:, :] = np.einsum("st,t...->s...", A[1], v[..., 2:, :])
        return out

    one = np.broadcast_to(np.eye(Ls), (2, Ls, Ls))
    t = smat(b * one + c * S, p5)
    dw = (4 - M5) * t + np.stack([dhop_reference(Un, t[s]) for s in range(Ls)])
    check("Mobius M (Ls 4, b 1.5, c 0.5)", op.M(psi5).to_numpy(), dw + smat(one - S, p5), tol)
    o5 = pg.pick_checkerboard(1, psi5)

    def odd_sites(half):
        f = op.new_fermion()
        pg.set_checkerboard(f, half)
        return f.to_numpy()[:, odd]

    check("Mobius Mooee MooeeInv = 1", odd_sites(op.Mooee(op.MooeeInv(o5))), p5[:, odd], tol)
    check("Mobius MooeeDag MooeeInvDag = 1", odd_sites(op.MooeeDag(op.MooeeInvDag(o5))), p5[:, odd], tol)

    # a Schur (even-odd) CG solve of the Wilson operator, its residual recomputed in numpy
    schur = pg.qcd.SchurDiagMooeeOperator(D)
    src = schur.prepare_source(psi)
    x, rec = pg.algorithms.ConjugateGradient(tol=1e-8 if precision == "double" else 1e-5,
                                             maxiter=2000).solve(schur.MdagM, schur.Mdag(src))
    sol = schur.reconstruct(psi, x).to_numpy()
    check(
        f"Wilson Schur CG solve ({rec.iterations} iterations)",
        (4 + mass) * sol + dhop_reference(Un, sol),
        pn,
        1e-6 if precision == "double" else 1e-3,
    )


def run(argv):
    """Entry point of ``pygrid selftest`` (argv: its flags); returns the exit status."""
    import pygrid as pg

    from .cli import _benchmark_parser, check_memory
    from .config import ConfigError, current

    if any(a in ("-h", "--help") for a in argv):
        print(__doc__.strip())
        return 0
    check_only = "--no-benchmark" in argv
    argv = [a for a in argv if a != "--no-benchmark"]
    rest = pg.init(argv)
    # the benchmark flags (--precision, --iterations, ...) are checked before anything runs
    args = _benchmark_parser().parse_args(["wilson"] + rest)
    if args.sweep or args.json or args.plot:
        raise ConfigError("pygrid selftest: --sweep, --json and --plot belong to pygrid benchmark")
    cfg = current()
    dims = tuple(cfg.grid or (8, 8, 8, 8))
    check_memory([dims], ("double",), 1, "--grid")
    backend = pg.get_backend()
    print(f"pygrid selftest on {backend.describe()}, lattice {'.'.join(map(str, dims))}", flush=True)
    check = _Checks(lambda s: print(s, flush=True))
    precisions = ("double", "single") if args.precision == "both" else (args.precision,)
    t0 = time.perf_counter()
    for prec in precisions:
        print(f"{prec} precision:", flush=True)
        _checks(prec, dims, check)
    print(
        f"{check.passed} passed, {check.failed} failed ({time.perf_counter() - t0:.1f} s, compile time "
        "included)",
        flush=True,
    )
    if check.failed or check_only:
        return 1 if check.failed else 0
    from .cli import main as cli_main

    status = 0
    for kind in ("wilson", "dwf"):
        status |= cli_main(["benchmark", kind] + argv)
    return status
