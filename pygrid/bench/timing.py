"""How benchmark kernels are timed: warm-up, automatic iteration counts, MPI-synchronised timing,
and the halo traffic of operators timed on a lattice split over ranks."""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass

from .progress import Progress
from .report import format_seconds
from .units import dotted

#: Target of the automatic iteration count: about this many seconds of timing per kernel.
TARGET_SECONDS = 2.0
#: Bounds on the automatic iteration count.
MIN_ITERATIONS, MAX_ITERATIONS = 3, 100000


@dataclass
class Timer:
    """How kernels are timed: fixed ``iterations`` or automatic (None), after ``warmup`` calls."""

    iterations: int | None = None
    warmup: int = 2
    target: float = TARGET_SECONDS
    progress: Progress | None = None

    def __call__(self, fn, label="", target=None, max_warmup=None):
        warmup = self.warmup if max_warmup is None else min(self.warmup, max_warmup)
        return time_kernel(fn, self.iterations, warmup, self.target if target is None else target,
                           self.progress, label)


def time_kernel(fn, iterations=None, warmup=2, target=TARGET_SECONDS, progress=None, label="", comm=None):
    """Time ``fn()``: ``warmup`` untimed calls, then ``iterations`` timed ones.

    With ``iterations=None`` a first timed call estimates how many calls make
    ``target`` seconds (between 3 and 100000).  Returns ``(median seconds per
    call, min seconds, number of timed calls)``.  Under MPI (``comm``, default
    the program's communicator) every rank makes the same number of calls,
    starting together, and the times are those of the slowest rank.
    """
    from ..accelerator.backends import get_backend
    from ..communicator import world

    comm = world() if comm is None else comm
    sync = get_backend().synchronize
    for i in range(warmup):
        if progress:
            progress.tick(f"{label}: warm-up {i + 1}/{warmup}")
        fn()
        sync()
    ts = []
    if iterations is None:
        t0 = time.perf_counter()
        fn()
        sync()
        first = time.perf_counter() - t0
        ts.append(first)
        n = int(min(MAX_ITERATIONS, max(MIN_ITERATIONS, math.ceil(target / max(first, 1e-7)))))
    else:
        n = int(iterations)
    if comm.size > 1:
        n = comm.max(n)
        comm.barrier()
    every = max(1, n // 20)
    t_start = time.perf_counter()
    while len(ts) < n:
        t0 = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t0)
        if progress and len(ts) % every == 0:
            progress.tick(f"{label}: {len(ts)}/{n} calls, {time.perf_counter() - t_start:.1f} s")
    if comm.size > 1:
        return comm.max(statistics.median(ts)), comm.max(min(ts)), len(ts)
    return statistics.median(ts), min(ts), len(ts)




def time_operator(ctx, fn, label, grid):
    """Time an operator call on ``grid`` with :class:`Timer` ``ctx.timer``, and its halo traffic.

    Returns (seconds, min seconds, calls, extra lines).  On a lattice split over
    ranks the extra lines give the whole job's rate, the halo bytes and messages
    per call and rank, and the communication time and how much of it computation hid.
    """
    comm = grid.comm
    calls = [0]

    def counted():
        calls[0] += 1
        fn()

    comm.stats.reset()
    t, tmin, it = ctx.timer(counted, label)
    extra = {}
    if grid.decomposed:
        st = comm.stats
        n, size = calls[0], comm.size
        mean = [
            comm.sum(v) / size / n for v in (st.bytes_sent, st.messages, st.comm_s, st.exposed_s, st.pack_s)
        ]
        hidden = 0.0 if mean[2] <= 0 else max(0.0, 1 - mean[3] / mean[2])
        extra["ranks"] = (
            f"{size} ranks, --mpi {dotted(grid.mpi_layout)}, {dotted(grid.ldims)} sites per rank; "
            "rates above are per rank, the slowest rank's time"
        )
        extra["halo"] = f"{mean[0] / 1e6:.3f} MB sent per call and rank, in {mean[1]:.0f} messages"
        extra["comms"] = (
            f"{format_seconds(mean[2]).strip()} in flight per call, {format_seconds(mean[3]).strip()} "
            f"exposed: {100 * hidden:.0f}% hidden by computation; packing "
            f"{format_seconds(mean[4]).strip()}"
        )
        extra["_mpi"] = {
            "ranks": size,
            "mpi_layout": list(grid.mpi_layout),
            "local_dims": list(grid.ldims),
            "halo_bytes_per_call": mean[0],
            "messages_per_call": mean[1],
            "comm_seconds_per_call": mean[2],
            "exposed_seconds_per_call": mean[3],
            "pack_seconds_per_call": mean[4],
            "hidden_fraction": hidden,
        }
    return t, tmin, it, extra


def mpi_summary(kernel, grid):
    """The whole-job line of a kernel timed per rank (None on one rank)."""
    if not grid.decomposed:
        return None
    size = grid.comm.size
    return (f"{kernel.name} on all {size} ranks: {kernel.gflops * size:.3f} GFlop/s "
            f"({kernel.gflops:.3f} GFlop/s per rank)")


def set_numba_threads(n):
    """Use ``n`` threads for numba's parallel loops (clamped to what numba started with)."""
    import numba

    n = max(1, min(int(n), numba.config.NUMBA_NUM_THREADS))
    numba.set_num_threads(n)
    return n
