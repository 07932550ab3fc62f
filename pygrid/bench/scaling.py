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

#: outer sites of the probe's block per thread
SITES_PER_BLOCK = 256
#: seconds one block of the probe takes on one thread (its repeat count is calibrated to it)
BLOCK_SECONDS = 0.004
#: (one block, all blocks) pairs timed; the medians are compared
PAIRS = 5
#: the short launches of the probe: blocks of about this many seconds (a Wilson Dhop at 8^4 runs
#: blocks of 40-90 us), and their pairs
SHORT_BLOCK_SECONDS = 40e-6
SHORT_PAIRS = 101

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


def thread_scaling(backend=None, pairs: int = PAIRS, block_seconds: float = BLOCK_SECONDS) -> float | None:
    """How many threads' worth of work the backend's threads did together, now: ``n * t1 / tn`` for
    one block alone (t1) and ``n`` blocks at once (tn), each block taking about ``block_seconds``
    on one thread, medians over ``pairs`` alternated pairs.  None where there is nothing to
    measure: one thread, or a backend whose kernels do not run on this host's threads (a GPU).

    With blocks of tens of microseconds (:data:`SHORT_BLOCK_SECONDS`, :data:`SHORT_PAIRS`) the
    figure includes the time the threads take to start each launch: a thread that sleeps between
    launches, or that the host has descheduled, shows there and not in long blocks."""

    from ..accelerator.backends import get_backend

    backend = get_backend() if backend is None else backend
    n = probe_threads(backend)
    if n < 2:
        return None
    spin = probe_kernel()
    osites = SITES_PER_BLOCK * n
    out = probe_output(backend, osites)
    reps = max(1, int(block_seconds * _reps_per_second(spin, out)))
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


def probe(backend=None) -> tuple[float | None, float | None]:
    """:func:`thread_scaling` in long blocks and in short launches: what a benchmark prints."""
    speedup = thread_scaling(backend)
    if speedup is None:
        return None, None
    return speedup, thread_scaling(backend, SHORT_PAIRS, SHORT_BLOCK_SECONDS)


def probe_threads(backend) -> int:
    """The threads the probe runs on: the blocks a launch of the backend splits into (0 for a
    backend whose kernels do not run on this host's threads)."""
    if backend.name != "openmp":
        return 0
    return backend.blocks(backend.min_parallel_bytes)


def probe_output(backend, osites: int):
    """The probe's output for ``osites`` outer sites, of at least the backend's
    ``min_parallel_bytes``: the launch's first argument decides whether it is split over the
    threads, and the probe's few numbers a site would not."""
    import numpy as np

    return np.zeros(max(osites, -(-backend.min_parallel_bytes // 8)))


_rate = None


def _reps_per_second(spin, out):
    """The probe's repeat count per second of one block on one thread (measured once a process)."""
    global _rate
    if _rate is None:
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
        _rate = reps / max(t, 1e-9)
    return _rate


def scaling_line(label: str, threads: int, speedup: float | None, short: float | None = None) -> str | None:
    """The benchmark's line for a probe result, ``speedup`` in long blocks and ``short`` in short
    launches (None: no line), flagging threads that had less than three quarters of a core each,
    or that were that slow to start short launches."""
    if speedup is None:
        return None
    line = f"  {label:<15} {threads} threads did {speedup:.2f}x one thread's work (compute-bound probe)"
    if short is not None:
        line += f", {short:.2f}x in launches of {SHORT_BLOCK_SECONDS * 1e6:.0f} us"
    if speedup < 0.75 * threads:
        line += ("\n  note: the threads shared cores with each other or with the host's other work "
                 "meanwhile: figures taken now run low")
    elif short is not None and short < 0.75 * threads:
        line += ("\n  note: the threads were slow to start short launches meanwhile: kernels of tens of "
                 "microseconds (small lattices) run low now")
    return line
