"""Whether a core's throughput moves while its clock stays: vector FMAs against a latency-bound
integer chain, on each CPU in turn, round after round.

    python benchmarks/bench_core_sharing.py [--rounds 100] [--pause 0.05]

Each round runs, on one CPU (the process pinned to it), a loop of independent vector FMA chains
in registers (its pace set by the core's FMA throughput) and a chain of dependent integer
multiply-adds (its pace set by their latency, that is by the clock), each for a few
milliseconds, and prints the FMA loop's rate over the chain's (FMA iterations per chain step);
the summary gives them relative to the CPU's 90th percentile, its quiet level.  A drop of the
ratio is throughput lost at an unchanged clock: on a virtual machine, another tenant's thread
on the same physical core (its second hardware thread) takes the FMA and load units the loop
needs and leaves the chain, one multiply and one add in flight, nearly as fast.  The pygrid
kernels in cache are throughput-bound like the FMA loop: in such a period a Dirac call's blocks
on that CPU run up to 2x longer (docs/performance.md, "Balanced launches").
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np
from numba import njit

from pygrid.accelerator.simd_numba import vfma, vload, vstore
from pygrid.cartesian.simd import host_simd_bits

W = max(2, host_simd_bits() // 64)   # doubles in a vector register


@njit(fastmath=True, nogil=True)
def _fma(a, n):
    x0 = vload(a, 0, W); x1 = vload(a, W, W); x2 = vload(a, 2 * W, W); x3 = vload(a, 3 * W, W)  # noqa: E702
    x4 = vload(a, 4 * W, W); x5 = vload(a, 5 * W, W); x6 = vload(a, 6 * W, W); x7 = vload(a, 7 * W, W)  # noqa: E702
    m = vload(a, 8 * W, W)
    c = vload(a, 9 * W, W)
    for _ in range(n):
        x0 = vfma(m, x0, c); x1 = vfma(m, x1, c); x2 = vfma(m, x2, c); x3 = vfma(m, x3, c)  # noqa: E702
        x4 = vfma(m, x4, c); x5 = vfma(m, x5, c); x6 = vfma(m, x6, c); x7 = vfma(m, x7, c)  # noqa: E702
    vstore(a, 0, x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7)


@njit(nogil=True)
def _chain(n, x):
    # each step needs the last: a multiply and an add in flight, whatever the other thread does
    for i in range(n):
        x = x * 6364136223846793005 + i
    return x


def _seconds(f, *a):
    t = time.perf_counter()
    f(*a)
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--pause", type=float, default=0.05, help="seconds between rounds")
    args = ap.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    a = np.full(10 * W, 0.999)
    a[9 * W:] = 1e-3
    _fma(a, 10)
    _chain(10, 1)
    nf, nc = 200_000, 2_000_000
    ratios = {c: [] for c in cpus}
    try:
        for r in range(args.rounds):
            row = []
            for c in cpus:
                os.sched_setaffinity(0, {c})
                tf = _seconds(_fma, a, nf)
                tc = _seconds(_chain, nc, 7)
                ratios[c].append((nf / tf) / (nc / tc))
                row.append(ratios[c][-1])
            print(f"  round {r:4d} " + "  ".join(f"cpu {c}: {x:7.3f}" for c, x in zip(cpus, row)), flush=True)
            time.sleep(args.pause)
    finally:
        os.sched_setaffinity(0, set(cpus))
    print(f"vector width {W} doubles; FMA-loop rate / integer-chain rate, relative to each CPU's 90th "
          "percentile:")
    for c in cpus:
        x = np.array(ratios[c]) / np.percentile(ratios[c], 90)
        print(f"  cpu {c}: median {np.median(x):.3f}, 10th percentile {np.percentile(x, 10):.3f}, "
              f"min {x.min():.3f}; rounds below 0.85: {np.mean(x < 0.85) * 100:.0f}%")


if __name__ == "__main__":
    main()
