"""What one core of this machine sustains: vector FMAs and vector loads from L1, in one process.

    python benchmarks/bench_cpu_limits.py

The Wilson kernel's cost per site and point is counted in these two resources
(docs/performance.md): the ratio of the two rates, measured in the same run, is
independent of the clock, which moves with the machine's phases.  Both loops
use the kernels' own vector type (pygrid.accelerator.simd_numba), double
precision, 4 lanes, one thread:

* FMA: 8 independent chains of ``x = m * x + c`` (enough to cover the latency);
* load: 16 loads of 32 bytes (every one from L1, from a 64-byte aligned
  buffer) feeding 8 FMA chains, so that the loads, not the FMAs, are the limit
  if the core sustains fewer than 4 per FMA latency.
"""
from __future__ import annotations

import time

import numpy as np
from numba import njit

from pygrid.accelerator.simd_numba import vfma, vload, vstore

U = np.uint64


@njit(fastmath=True, nogil=True)
def _fma(a, n):
    x0 = vload(a, 0, 4); x1 = vload(a, 4, 4); x2 = vload(a, 8, 4); x3 = vload(a, 12, 4)  # noqa: E702
    x4 = vload(a, 16, 4); x5 = vload(a, 20, 4); x6 = vload(a, 24, 4); x7 = vload(a, 28, 4)  # noqa: E702
    m = vload(a, 32, 4)
    c = vload(a, 36, 4)
    for _ in range(n):
        x0 = vfma(m, x0, c); x1 = vfma(m, x1, c); x2 = vfma(m, x2, c); x3 = vfma(m, x3, c)  # noqa: E702
        x4 = vfma(m, x4, c); x5 = vfma(m, x5, c); x6 = vfma(m, x6, c); x7 = vfma(m, x7, c)  # noqa: E702
    vstore(a, 0, x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7)


@njit(fastmath=True, nogil=True)
def _loads(a, n):
    x0 = vload(a, 0, 4); x1 = vload(a, 4, 4); x2 = vload(a, 8, 4); x3 = vload(a, 12, 4)  # noqa: E702
    x4 = vload(a, 16, 4); x5 = vload(a, 20, 4); x6 = vload(a, 24, 4); x7 = vload(a, 28, 4)  # noqa: E702
    for i in range(n):
        b = U((i & 31) * 64)
        x0 = vfma(vload(a, b + U(0), 4), vload(a, b + U(4), 4), x0)
        x1 = vfma(vload(a, b + U(8), 4), vload(a, b + U(12), 4), x1)
        x2 = vfma(vload(a, b + U(16), 4), vload(a, b + U(20), 4), x2)
        x3 = vfma(vload(a, b + U(24), 4), vload(a, b + U(28), 4), x3)
        x4 = vfma(vload(a, b + U(32), 4), vload(a, b + U(36), 4), x4)
        x5 = vfma(vload(a, b + U(40), 4), vload(a, b + U(44), 4), x5)
        x6 = vfma(vload(a, b + U(48), 4), vload(a, b + U(52), 4), x6)
        x7 = vfma(vload(a, b + U(56), 4), vload(a, b + U(60), 4), x7)
    vstore(a, 0, x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7)


def _aligned(n):
    raw = np.full(n + 8, 0.5)
    s = ((-raw.ctypes.data) % 64) // 8
    return raw[s:s + n]


def _rate(f, a, n, per_iter, reps=5):
    f(a, 10)
    best = 0.0
    for _ in range(reps):
        t = time.perf_counter()
        f(a, n)
        best = max(best, per_iter * n / (time.perf_counter() - t))
    return best


def main():
    a = _aligned(40)
    a[32:36] = 0.999
    fma = _rate(_fma, a, 50_000_000, 8)
    loads = _rate(_loads, _aligned(64 * 33), 50_000_000, 16)
    print(f"FMA:  {fma / 1e9:6.2f} G vector FMAs/s ({8 * fma / 1e9:.1f} GFlop/s double, one core)")
    print(f"load: {loads / 1e9:6.2f} G vector loads/s from L1")
    print(f"loads per FMA the core sustains: {loads / fma:.2f} "
          f"(a core with 2 FMA pipes and 2 vector load ports would show 1)")


if __name__ == "__main__":
    main()
