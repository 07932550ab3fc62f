"""Whether the machine gives the benchmark's threads a core each, measured when the benchmark runs.

On a virtual machine the CPUs the guest sees are the host's to share: two of them may be two
hardware threads of one core, or the host may run something else on one of them for a while.
Then a kernel on two threads runs at about the speed of one, and every figure taken meanwhile
is low by up to half.  The probe runs a compute-bound loop (independent multiply and add
chains on registers that fill a core's floating-point pipes, no memory traffic) as one block
on the calling thread, then as one block on each of the backend's threads at once, and gives
the ratio of the work done per second: ``threads`` when every thread had a core, about 1 when
they shared one.  It says nothing of the memory system: caches or bandwidth taken by the host's
other tenants do not show in it.
"""
from __future__ import annotations

import statistics
import time

#: outer sites of the probe's block per thread: the parallel launch must reach the backend's
#: ``min_parallel_osites``, below which it runs on the calling thread
SITES_PER_BLOCK = 256
#: seconds one block of the probe takes on one thread (its repeat count is calibrated to it)
BLOCK_SECONDS = 0.004
#: (one block, all blocks) pairs timed; the medians are compared
PAIRS = 5

_kernel = None


def probe_kernel():
    """``spin(lo, hi, out, reps)``: out[i] = the sum of 12 chains of ``reps`` multiplies and adds seeded
    by i, for i in [lo, hi) (numba, ``nogil``; compiled once, then from numba's cache).  Twelve
    independent chains keep a core's floating-point pipes busy (two multiply and two add pipes
    at 3 cycles each on Zen): two hardware threads of one core share those pipes and should show
    as little more than one (the project's machines present one thread per core, so only two
    threads on one CPU have been measured: 0.99x)."""
    global _kernel
    if _kernel is None:
        from numba import njit

        @njit(nogil=True, cache=True)
        def spin(lo, hi, out, reps):
            for i in range(lo, hi):
                a = 1.0 + i * 1e-6
                a0, a1, a2, a3, a4, a5 = a, a + 0.1, a + 0.2, a + 0.3, a + 0.4, a + 0.5
                a6, a7, a8, a9, a10, a11 = a + 0.6, a + 0.7, a + 0.8, a + 0.9, a + 1.0, a + 1.1
                for _ in range(reps):
                    a0 = a0 * 0.999999 + 1e-6
                    a1 = a1 * 0.999999 + 1e-6
                    a2 = a2 * 0.999999 + 1e-6
                    a3 = a3 * 0.999999 + 1e-6
                    a4 = a4 * 0.999999 + 1e-6
                    a5 = a5 * 0.999999 + 1e-6
                    a6 = a6 * 0.999999 + 1e-6
                    a7 = a7 * 0.999999 + 1e-6
                    a8 = a8 * 0.999999 + 1e-6
                    a9 = a9 * 0.999999 + 1e-6
                    a10 = a10 * 0.999999 + 1e-6
                    a11 = a11 * 0.999999 + 1e-6
                out[i] = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11

        _kernel = spin
    return _kernel


def thread_scaling(backend=None, pairs: int = PAIRS) -> float | None:
    """How many threads' worth of work the backend's threads did together, now: ``n * t1 / tn`` for
    one block alone (t1) and ``n`` blocks at once (tn), medians over ``pairs`` alternated pairs.
    None where there is nothing to measure: one thread, or a backend whose kernels do not run
    on this host's threads (a GPU)."""
    import numpy as np

    from ..accelerator.backends import get_backend

    backend = get_backend() if backend is None else backend
    if backend.name != "openmp":
        return None
    n = backend.blocks(SITES_PER_BLOCK * backend.threads())
    if n < 2:
        return None
    spin = probe_kernel()
    osites = SITES_PER_BLOCK * n
    out = np.zeros(osites)
    reps = 64
    spin(0, SITES_PER_BLOCK, out, reps)
    t = 0.0
    while reps < 1 << 24:
        t0 = time.perf_counter()
        spin(0, SITES_PER_BLOCK, out, reps)
        t = time.perf_counter() - t0
        if t >= BLOCK_SECONDS / 4:
            break
        reps *= 4
    reps = max(1, int(reps * BLOCK_SECONDS / max(t, 1e-9)))
    backend.accelerator_for(osites, spin, out, reps)
    one, all_ = [], []
    for _ in range(int(pairs)):
        t0 = time.perf_counter()
        spin(0, SITES_PER_BLOCK, out, reps)
        one.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        backend.accelerator_for(osites, spin, out, reps)
        all_.append(time.perf_counter() - t0)
    return n * statistics.median(one) / statistics.median(all_)


def scaling_line(label: str, threads: int, speedup: float | None) -> str | None:
    """The benchmark's line for a probe result (None: no line), flagging a machine that gave its
    threads less than three quarters of a core each."""
    if speedup is None:
        return None
    line = f"  {label:<15} {threads} threads did {speedup:.2f}x one thread's work (compute-bound probe)"
    if speedup < 0.75 * threads:
        line += ("\n  note: the threads shared cores with each other or with the host's other work "
                 "meanwhile: figures taken now run low")
    return line
