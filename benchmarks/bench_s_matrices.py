"""The s matrices of domain wall: O(Ls) kernels against the dense Ls x Ls kernel they replaced.

    python benchmarks/bench_s_matrices.py [--grid 16.16.16.16] [--Ls 8,16]

MooeeInv (two sweeps against the dense inverse), Mooee (a bidiagonal
multiply against the dense multiply that skips zeros) and the sum
``y + M5D x`` inside ``M`` (the accumulating multiply against the dense
two-matrix kernel).  Times both on half a lattice (one checkerboard of a 5D fermion, double precision,
random data), best of 5 calls after 2 warm-up calls, and checks that they agree.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import pygrid as pg
from pygrid.qcd.domain_wall import bidiag_apply, bidiag_multiply, s_apply


def best_of(f, n=5):
    f()
    f()
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return min(ts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", default="16.16.16.16")
    ap.add_argument("--Ls", default="8,16")
    args = ap.parse_args()
    dims = tuple(int(x) for x in args.grid.split("."))
    grid = pg.GridCartesian(dims)
    op4 = pg.qcd.gauge.unit_gauge(grid)
    for Ls in (int(x) for x in args.Ls.split(",")):
        op = pg.qcd.DomainWallFermion(op4, Ls, 0.1, 1.8)
        x = np.random.default_rng(0).normal(size=(Ls * grid.osites // 2, 12, 2, grid.nsimd))
        dense, sweep = np.empty_like(x), np.empty_like(x)
        td = best_of(lambda: s_apply(dense, x, op._mats["MooeeInv"], Ls=Ls))
        ts = best_of(lambda: bidiag_apply(sweep, x, op._sweeps["MooeeInv"], Ls))
        err = agreement(dense, sweep)
        print(
            f"MooeeInv Ls {Ls} {args.grid} half-checkerboard: dense {td * 1e3:.1f} ms, sweep "
            f"{ts * 1e3:.1f} ms, "
            f"{td / ts:.1f}x (max rel. difference {err:.1e})"
        )
        td = best_of(lambda: s_apply(dense, x, op._mats["Mooee"], Ls=Ls))
        ts = best_of(lambda: bidiag_multiply(sweep, x, op._banded["Mooee"], Ls))
        err = agreement(dense, sweep)
        print(
            f"Mooee    Ls {Ls} {args.grid} half-checkerboard: dense {td * 1e3:.1f} ms, banded "
            f"{ts * 1e3:.1f} ms, "
            f"{td / ts:.1f}x (max rel. difference {err:.1e})"
        )
        # the sum inside M: out = out + M5D x (the dense kernel with the identity, or an accumulating
        # multiply)
        y = np.random.default_rng(1).normal(size=x.shape)

        def dense_sum():
            dense[...] = y
            s_apply(dense, dense, op._mats["one"], x, op._mats["M5D"], Ls=Ls)

        def banded_sum():
            sweep[...] = y
            bidiag_multiply(sweep, x, op._banded["M5D"], Ls, accumulate=True)

        td, ts = best_of(dense_sum), best_of(banded_sum)
        err = agreement(dense, sweep)
        print(
            f"y + M5D x Ls {Ls} {args.grid} half-checkerboard (both including a copy to the output): "
            f"dense {td * 1e3:.1f} ms, banded {ts * 1e3:.1f} ms, {td / ts:.1f}x (max rel. difference "
            f"{err:.1e})"
        )


def agreement(dense, other):
    """The max relative difference of the two results; exits when they disagree."""
    err = np.abs(dense - other).max() / np.abs(dense).max()
    if not err <= 1e-12:
        raise SystemExit(f"the O(Ls) kernel disagrees with the dense one: max rel. difference {err:.1e}")
    return err


if __name__ == "__main__":
    main()
