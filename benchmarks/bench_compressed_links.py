"""The Wilson operator's hops with its links read whole and compressed, alternating in one process.

    python benchmarks/bench_compressed_links.py [--grid 24.24.24.24] [--precision double]
        [--calls Dhop,Meooe] [--rounds 9]

Two ``WilsonFermion`` operators on the same gauge field (antiperiodic in time), one with
``compress_links=False`` and one with ``compress_links=True`` (two rows of each SU(3) link read,
the third rebuilt: ``pygrid.qcd.kernels_wilson.compress_links``; by default an operator
compresses on fields larger than the caches of an AVX-512 machine), each call timed for 0.4 s a
round, the operators alternating, so that the machine's slow and fast phases hit both alike.
Prints the median and best GFlop/s (Grid's 1320 flops a site; ``Meooe`` hops half the sites)
of each and the median of the paired ratios, after checking that both give the same result.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import pygrid as pg
import pygrid.qcd  # noqa: F401  (pg.qcd)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", default="24.24.24.24")
    ap.add_argument("--precision", choices=("double", "single"), default="double")
    ap.add_argument("--calls", default="Dhop,Meooe")
    ap.add_argument("--rounds", type=int, default=9)
    args, rest = ap.parse_known_args(argv)
    pg.init(rest)
    dims = [int(x) for x in args.grid.split(".")]
    prec = args.precision
    grid = pg.GridCartesian(dims, precision=prec)
    U = pg.qcd.random_gauge(grid, pg.ParallelRNG(grid, [1, 2, 3, 4]), precision=prec)
    psi = pg.LatticeFermion(grid, prec)
    pg.ParallelRNG(grid, [5, 6]).gaussian(psi)
    odd = pg.pick_checkerboard(1, psi)
    ops = {c: pg.qcd.WilsonFermion(U, 0.1, boundary_phases=[1, 1, 1, -1], compress_links=c)
           for c in (False, True)}
    calls = [c.strip() for c in args.calls.split(",") if c.strip()]
    bad = [c for c in calls if c not in ("Dhop", "Meooe")]
    if bad:
        raise SystemExit(f"--calls: {', '.join(bad)}; choose from Dhop, Meooe")
    sites = int(np.prod(dims))
    tol = 1e-12 if prec == "double" else 1e-5
    print(f"Wilson hops, links whole and compressed, {args.grid}, {prec}, {pg.get_backend().describe()}, "
          f"{time.strftime('%H:%M:%S', time.gmtime())} UTC; {args.rounds} alternating rounds")
    for name in calls:
        src = psi if name == "Dhop" else odd
        outs = {c: ops[c].new_fermion(None if name == "Dhop" else 0) for c in ops}
        run = {c: (lambda c=c: getattr(ops[c], name)(src, out=outs[c])) for c in ops}
        for c in ops:
            run[c]()
        if not ops[True].reads_compressed_links(None if name == "Dhop" else 1):
            raise SystemExit("the operator with compress_links=True reads its links whole "
                             "(they are not SU(3) times a phase, or the backend runs the generic kernel)")
        want = outs[False].to_numpy()
        err = np.abs(outs[True].to_numpy() - want).max() / np.abs(want).max()
        if not err <= tol:
            raise SystemExit(f"{name}: compressed and whole links disagree: max rel. difference {err:.1e}")
        flops = 1320 * sites // (1 if name == "Dhop" else 2)
        rates = {c: [] for c in ops}
        for _ in range(args.rounds):
            for c in ops:
                n, t0 = 0, time.perf_counter()
                while time.perf_counter() - t0 < 0.4:
                    run[c]()
                    n += 1
                rates[c].append(flops * n / (time.perf_counter() - t0) / 1e9)
        for c, r in rates.items():
            print(f"  {name:<6} links {'compressed' if c else 'whole':<11} median {np.median(r):7.2f}  "
                  f"best {max(r):7.2f} GFlop/s")
        paired = np.median(np.array(rates[True]) / np.array(rates[False]))
        print(f"  {name:<6} compressed / whole: median {paired:.3f} (results agree to {err:.1e})")


if __name__ == "__main__":
    main()
