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


#: A timed sample is a batch of back-to-back calls lasting about this long (one call where a call
#: takes longer), timed as a whole, as Grid's benchmarks time their loops: timing each call alone
#: added 0.15-0.2 us a call of the timer's own Python (6% of a ``pg.norm2`` at 4^4, 0.6% of a Wilson
#: Dhop at 8^4, AVX-512 machine).
BATCH_SECONDS = 1e-3
#: At least this many samples where the calls allow: a batch holds at most calls // MIN_SAMPLES.
MIN_SAMPLES = 20


def time_kernel(fn, iterations=None, warmup=2, target=TARGET_SECONDS, progress=None, label="", comm=None):
    """Time ``fn()``: ``warmup`` untimed calls, then ``iterations`` timed ones.

    With ``iterations=None`` a first timed call estimates how many calls make
    ``target`` seconds (between 3 and 100000).  The timed calls run in batches of
    about :data:`BATCH_SECONDS`, each ending with the backend's synchronize (a GPU's
    launches return before their kernels run); a sample is a batch's time per call.
    Returns ``(median seconds per call over the samples, the fastest sample's, number
    of timed calls)``.  Under MPI (``comm``, default the program's communicator) every
    rank makes the same calls in the same batches, starting together, and the times
    are those of the slowest rank.
    """
    from ..accelerator.backends import get_backend
    from ..communicator import world

    comm = world() if comm is None else comm
    sync = get_backend().synchronize
    clock = time.perf_counter
    per_call = None
    for i in range(warmup):
        if progress:
            progress.tick(f"{label}: warm-up {i + 1}/{warmup}")
        t0 = clock()
        fn()
        sync()
        per_call = clock() - t0
    samples, done = [], 0
    if iterations is None:
        t0 = clock()
        fn()
        sync()
        per_call = clock() - t0
        samples.append(per_call)
        done = 1
        n = int(min(MAX_ITERATIONS, max(MIN_ITERATIONS, math.ceil(target / max(per_call, 1e-7)))))
    else:
        n = int(iterations)
    batch = 1 if per_call is None else max(1, min(n // MIN_SAMPLES, int(BATCH_SECONDS / max(per_call, 1e-9))))
    if comm.size > 1:
        n, batch = comm.max(n), comm.max(batch)
        comm.barrier()
    every = max(1, n // 20)
    t_start = clock()
    while done < n:
        k = min(batch, n - done)
        t0 = clock()
        for _ in range(k):
            fn()
        sync()
        samples.append((clock() - t0) / k)
        before, done = done, done + k
        if progress and done // every != before // every:
            progress.tick(f"{label}: {done}/{n} calls, {clock() - t_start:.1f} s")
    if comm.size > 1:
        return comm.max(statistics.median(samples)), comm.max(min(samples)), n
    return statistics.median(samples), min(samples), n


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
    # the calls counted only where the halo statistics are divided by them: the counter's frame is
    # Python around each call
    t, tmin, it = ctx.timer(counted if grid.decomposed else fn, label)
    extra = {}
    if grid.decomposed:
        st = comm.stats
        n, size = calls[0], comm.size
        counts = (st.bytes_sent + st.shared_bytes, st.messages, st.comm_s, st.exposed_s, st.pack_s,
                  st.shared_bytes, st.shared_transfers)
        mean = [comm.sum(v) / size / n for v in counts]
        hidden = 0.0 if mean[2] <= 0 else max(0.0, 1 - mean[3] / mean[2])
        extra["ranks"] = (
            f"{size} ranks, --mpi {dotted(grid.mpi_layout)}, {dotted(grid.ldims)} sites per rank; "
            "rates above are per rank, the slowest rank's time"
        )
        # the links' halo of the first call travels as messages: a fraction of one per call
        how = [f"{mean[1]:.0f} messages"] if round(mean[1]) or not mean[6] else []
        if mean[6]:
            how.append(f"{mean[6]:.0f} transfer{'' if round(mean[6]) == 1 else 's'} through the node's "
                       "shared memory")
        extra["halo"] = f"{mean[0] / 1e6:.3f} MB sent per call and rank, in " + " and ".join(how)
        from ..accelerator.backends import get_backend

        early = get_backend().asynchronous
        if early:  # the host's wait says nothing of what the device did meanwhile
            exposed = (f"{format_seconds(mean[3]).strip()} of it the host waited, while the device ran the "
                       "interior")
        else:
            exposed = f"{format_seconds(mean[3]).strip()} exposed: {100 * hidden:.0f}% hidden by computation"
        extra["comms"] = (f"{format_seconds(mean[2]).strip()} in flight per call, {exposed}; packing "
                          f"{format_seconds(mean[4]).strip()}")
        extra["_mpi"] = {
            "ranks": size,
            "mpi_layout": list(grid.mpi_layout),
            "local_dims": list(grid.ldims),
            "halo_bytes_per_call": mean[0],
            "messages_per_call": mean[1],
            "shared_bytes_per_call": mean[5],
            "shared_transfers_per_call": mean[6],
            "comm_seconds_per_call": mean[2],
            "exposed_seconds_per_call": mean[3],
            "pack_seconds_per_call": mean[4],
            "hidden_fraction": None if early else hidden,
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
