"""Shared machinery of ``pygrid benchmark``: timing, the bandwidth roofline, progress, output.

Every benchmark kind (``pygrid.bench.axpy``, ``su3``, ``memory``, ``cache``,
``wilson``, ``dwf``) builds a :class:`Run` for one (grid, precision): a list of
:class:`Kernel` results, each a time per call with the flop and byte counts used,
and the bandwidth roofline measured in the same run (a parallel numba copy of an
array of the same size as the kernel's fields).  ``roofline GFlop/s = copy GB/s *
flops / bytes``: what the kernel would reach if it moved its bytes at copy speed.
"""
from __future__ import annotations

import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "BenchmarkUnavailable", "Kernel", "Run", "Progress", "Timer", "time_kernel",
    "copy_kernel", "triad_kernel", "fill_kernel", "measure_copy", "touched", "real_bytes",
    "format_run", "format_seconds", "compile_times", "set_numba_threads",
]

#: Target of the automatic iteration count: about this many seconds of timing per kernel.
TARGET_SECONDS = 2.0
#: Bounds on the automatic iteration count.
MIN_ITERATIONS, MAX_ITERATIONS = 3, 100000


class BenchmarkUnavailable(Exception):
    """A benchmark kind that cannot run here (operator missing): the CLI exits with status 2."""


def real_bytes(precision: str) -> int:
    """Bytes of one real number in ``precision``."""
    return 8 if precision == "double" else 4


def real_dtype(precision: str):
    return np.float64 if precision == "double" else np.float32


# ---------------------------------------------------------------------------
# progress line
# ---------------------------------------------------------------------------

class Progress:
    """A progress line on stderr.

    On a terminal the line is rewritten in place with ``\\r``; otherwise (CI
    logs, pipes) each step is one short line of its own, so logs stay readable.
    ``quiet=True`` prints nothing.
    """

    def __init__(self, stream=None, quiet=False):
        self.stream = sys.stderr if stream is None else stream
        self.quiet = quiet
        try:
            self.tty = self.stream.isatty()
        except (AttributeError, ValueError):
            self.tty = False
        self._width = 0
        self._last = None

    def update(self, text: str, force=False):
        if self.quiet:
            return
        if self.tty:
            text = text[:100]
            pad = max(0, self._width - len(text))
            self.stream.write("\r" + text + " " * pad)
            self._width = len(text)
            self.stream.flush()
        elif force or text != self._last:
            # one short line per step; the per-iteration updates are tty-only
            self.stream.write("[pygrid] " + text[:72] + "\n")
            self.stream.flush()
        self._last = text

    def step(self, text: str):
        """A new step (printed on a terminal and in logs)."""
        self.update(text, force=True)

    def tick(self, text: str):
        """A frequent update (printed on a terminal only)."""
        if self.tty:
            self.update(text)

    def clear(self):
        if self.quiet or not self.tty or not self._width:
            return
        self.stream.write("\r" + " " * self._width + "\r")
        self.stream.flush()
        self._width = 0


# ---------------------------------------------------------------------------
# timing
# ---------------------------------------------------------------------------

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
    from ..communicator import world

    comm = world() if comm is None else comm
    for i in range(warmup):
        if progress:
            progress.tick(f"{label}: warm-up {i + 1}/{warmup}")
        fn()
    ts = []
    if iterations is None:
        t0 = time.perf_counter()
        fn()
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
        ts.append(time.perf_counter() - t0)
        if progress and len(ts) % every == 0:
            progress.tick(f"{label}: {len(ts)}/{n} calls, {time.perf_counter() - t_start:.1f} s")
    if comm.size > 1:
        return comm.max(statistics.median(ts)), comm.max(min(ts)), len(ts)
    return statistics.median(ts), min(ts), len(ts)


NO_NUMPY_UNDER_MPI = ("no numpy baseline under MPI: it would run the whole lattice on every rank; "
                      "compare with a one-rank run on the local volume instead")


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
        mean = [comm.sum(v) / size / n for v in (st.bytes_sent, st.messages, st.comm_s, st.exposed_s, st.pack_s)]
        hidden = 0.0 if mean[2] <= 0 else max(0.0, 1 - mean[3] / mean[2])
        extra["ranks"] = (f"{size} ranks, --mpi {dotted(grid.mpi_layout)}, {dotted(grid.ldims)} sites per rank; "
                          "rates above are per rank, the slowest rank's time")
        extra["halo"] = f"{mean[0] / 1e6:.3f} MB sent per call and rank, in {mean[1]:.0f} messages"
        extra["comms"] = (f"{format_seconds(mean[2]).strip()} in flight per call, {format_seconds(mean[3]).strip()} "
                          f"exposed: {100 * hidden:.0f}% hidden by computation; packing "
                          f"{format_seconds(mean[4]).strip()}")
        extra["_mpi"] = {"ranks": size, "mpi_layout": list(grid.mpi_layout), "local_dims": list(grid.ldims),
                         "halo_bytes_per_call": mean[0], "messages_per_call": mean[1], "comm_seconds_per_call": mean[2],
                         "exposed_seconds_per_call": mean[3], "pack_seconds_per_call": mean[4], "hidden_fraction": hidden}
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


# ---------------------------------------------------------------------------
# bandwidth kernels (numba, parallel); arrays are 1-d, any real dtype
# ---------------------------------------------------------------------------

_kernels = {}


def _numba_kernels():
    if not _kernels:
        import numba

        @numba.njit(parallel=True, cache=True)
        def copy(dst, src):
            for i in numba.prange(src.shape[0]):
                dst[i] = src[i]

        @numba.njit(parallel=True, cache=True)
        def triad(a, b, c, s):
            for i in numba.prange(a.shape[0]):
                a[i] = b[i] + s * c[i]

        @numba.njit(parallel=True, cache=True)
        def fill(a, seed):
            # distinct, non-zero values: every page is written before it is timed
            for i in numba.prange(a.shape[0]):
                a[i] = 1.0 + ((i * 2654435761 + seed) % 1000003) * 1e-6

        @numba.njit(cache=True)
        def copy_serial(dst, src):
            for i in range(src.shape[0]):
                dst[i] = src[i]

        @numba.njit(cache=True)
        def triad_serial(a, b, c, s):
            for i in range(a.shape[0]):
                a[i] = b[i] + s * c[i]

        _kernels.update(copy=copy, triad=triad, fill=fill, copy_serial=copy_serial,
                        triad_serial=triad_serial)
    return _kernels


#: Arrays smaller than this are copied on one thread: waking the thread pool
#: costs more than it saves (the openmp backend does the same for small fields).
PARALLEL_MIN_BYTES = 1 << 20


def copy_kernel(dst, src):
    k = _numba_kernels()
    (k["copy"] if src.nbytes >= PARALLEL_MIN_BYTES else k["copy_serial"])(dst, src)


def triad_kernel(a, b, c, s):
    k = _numba_kernels()
    (k["triad"] if a.nbytes >= PARALLEL_MIN_BYTES else k["triad_serial"])(a, b, c, a.dtype.type(s))


def fill_kernel(a, seed=0):
    _numba_kernels()["fill"](a, seed)


def touched(n, dtype, seed=0):
    """A 1-d array of ``n`` reals, every element written (never time untouched memory)."""
    a = np.empty(int(n), dtype=dtype)
    fill_kernel(a, seed)
    return a


def measure_copy(traffic, precision, timer, label="roofline copy"):
    """The parallel numba copy that moves ``traffic`` bytes (read + write): the roofline.

    ``traffic`` is what the measured kernel moves per call, so the copy has the
    same working set and meets the same caches: a copy of one field while the
    kernel streams three would sit in the last-level cache and overstate the
    bandwidth.  Returns a :class:`Kernel` (bytes = read + write).
    """
    from ..accelerator.backends import get_backend

    dtype = real_dtype(precision)
    n = max(1, int(traffic) // 2 // np.dtype(dtype).itemsize)
    backend = get_backend()
    device_copy = backend.bench_copy(n, dtype)
    if device_copy is not None:  # a device with its own memory: its own copy kernel is the ceiling
        t, tmin, it = timer(device_copy, label)
        what = f"{backend.name} device copy (hand-written kernel) moving as many bytes as the kernel"
    else:
        src, dst = touched(n, dtype, 1), touched(n, dtype, 2)
        t, tmin, it = timer(lambda: copy_kernel(dst, src), label)
        what = "numba copy moving as many bytes as the kernel (read + write); parallel from 1 MiB up"
    return Kernel("copy", "roofline", t, tmin, it, sites=n, flops_per_site=0,
                  bytes_per_site=2 * np.dtype(dtype).itemsize, description=what)


# ---------------------------------------------------------------------------
# results
# ---------------------------------------------------------------------------

@dataclass
class Kernel:
    """One timed kernel: seconds per call and the counts its rates use."""

    name: str
    role: str                     # "pygrid", "numpy" (baseline), "roofline", "memory", "cache"
    seconds: float                # median per call
    seconds_min: float
    iterations: int
    sites: int                    # sites (or elements) per call
    flops_per_site: float
    bytes_per_site: float
    description: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def flops(self):
        return self.flops_per_site * self.sites

    @property
    def nbytes(self):
        return self.bytes_per_site * self.sites

    @property
    def gflops(self):
        return self.flops / self.seconds / 1e9 if self.seconds > 0 else 0.0

    @property
    def gbps(self):
        return self.nbytes / self.seconds / 1e9 if self.seconds > 0 else 0.0

    def roofline_gflops(self, copy_gbps):
        if not self.bytes_per_site or not copy_gbps:
            return None
        return copy_gbps * self.flops_per_site / self.bytes_per_site

    def to_dict(self, copy_gbps=None):
        d = {
            "role": self.role,
            "description": self.description,
            "seconds_per_call": self.seconds,
            "seconds_min": self.seconds_min,
            "iterations": self.iterations,
            "sites": self.sites,
            "flops_per_site": self.flops_per_site,
            "bytes_per_site": self.bytes_per_site,
            "flops_per_call": self.flops,
            "bytes_per_call": self.nbytes,
            "gflops": self.gflops,
            "gbps": self.gbps,
        }
        roof = self.roofline_gflops(copy_gbps) if self.flops_per_site else None
        d["roofline_gflops"] = roof
        d["roofline_percent"] = (100.0 * self.gbps / copy_gbps) if copy_gbps else None
        d.update(self.extra)
        return d


@dataclass
class Run:
    """Every kernel of one kind on one (grid, precision)."""

    kind: str
    grid: tuple
    precision: str
    simd_layout: tuple
    nsimd: int
    kernels: list = field(default_factory=list)
    roofline: Kernel | None = None
    main: str | None = None           # name of the headline kernel
    baseline: str | None = None       # name of the numpy baseline it is compared with
    notes: list = field(default_factory=list)
    extra: dict = field(default_factory=dict)

    def kernel(self, name):
        for k in self.kernels:
            if k.name == name:
                return k
        if self.roofline is not None and self.roofline.name == name:
            return self.roofline
        raise KeyError(name)

    @property
    def copy_gbps(self):
        return self.roofline.gbps if self.roofline is not None else None

    @property
    def speedup(self):
        if self.main and self.baseline:
            return self.kernel(self.baseline).seconds / self.kernel(self.main).seconds
        return None

    def to_dict(self):
        c = self.copy_gbps
        d = {
            "kind": self.kind,
            "grid": list(self.grid),
            "volume": int(np.prod(self.grid)),
            "precision": self.precision,
            "simd_layout": list(self.simd_layout),
            "nsimd": self.nsimd,
            "main_kernel": self.main,
            "baseline_kernel": self.baseline,
            "speedup_vs_numpy": self.speedup,
            "roofline": None if self.roofline is None else {
                "copy_gbps": self.roofline.gbps,
                "copy_bytes_per_call": self.roofline.nbytes,
                "seconds_per_call": self.roofline.seconds,
                "iterations": self.roofline.iterations,
            },
            "kernels": {k.name: k.to_dict(c) for k in self.kernels},
            "notes": list(self.notes),
        }
        d.update(self.extra)
        return d


def format_seconds(t):
    if t >= 1:
        return f"{t:8.3f} s "
    if t >= 1e-3:
        return f"{t * 1e3:8.3f} ms"
    return f"{t * 1e6:8.2f} us"


def _count(v):
    return f"{v:g}" if isinstance(v, float) and v != int(v) else f"{int(v)}"


def format_run(run: Run) -> str:
    """The per-kernel lines of one run, Grid-benchmark style with the counts stated."""
    c = run.copy_gbps
    lines = [f"{run.kind} on {'.'.join(map(str, run.grid))}, {run.precision} precision, "
             f"Nsimd {run.nsimd}, simd layout {'.'.join(map(str, run.simd_layout))}"]
    if run.roofline is not None:
        r = run.roofline
        if r.description.startswith("numba"):
            how = "numba copy (" + ("parallel" if r.nbytes // 2 >= PARALLEL_MIN_BYTES else "one thread") + ")"
        else:
            how = r.description.split(" moving")[0]
        lines.append(f"  bandwidth roofline: {how} of {r.nbytes // 2:.0f} B -> "
                     f"{r.gbps:.2f} GB/s ({format_seconds(r.seconds).strip()} per call, {r.iterations} calls)")
    name_w = max([len(k.name) for k in run.kernels] + [6])
    for k in run.kernels:
        parts = [f"  {k.name:<{name_w}}  {format_seconds(k.seconds)}/call"]
        if k.flops_per_site:
            parts.append(f"{k.gflops:9.3f} GFlop/s [{_count(k.flops_per_site)} flop/site]")
        if k.bytes_per_site:
            parts.append(f"{k.gbps:9.3f} GB/s [{_count(k.bytes_per_site)} B/site]")
        if c and k.bytes_per_site and k.role != "roofline":
            roof = k.roofline_gflops(c)
            if k.flops_per_site and roof:
                parts.append(f"{100 * k.gflops / roof:5.1f}% of roofline {roof:.2f} GFlop/s")
            else:
                parts.append(f"{100 * k.gbps / c:5.1f}% of copy bandwidth")
        parts.append(f"({k.iterations} calls)")
        lines.append("  ".join(parts))
        for key, val in k.extra.items():
            if key.startswith("_"):
                continue
            lines.append(f"  {'':<{name_w}}    {key}: {val}")
    if run.speedup is not None:
        lines.append(f"  {run.main} vs numpy ({run.baseline}): {run.speedup:.2f}x faster"
                     if run.speedup >= 1 else
                     f"  {run.main} vs numpy ({run.baseline}): {1 / run.speedup:.2f}x slower")
    for n in run.notes:
        lines.append(f"  note: {n}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# compile cost (used by benchmarks/bench_core.py)
# ---------------------------------------------------------------------------

_PROBE = """
import sys, time
t0 = time.perf_counter()
import pygrid as pg
t1 = time.perf_counter()
g = pg.GridCartesian([4, 4, 4, 4])
x = pg.LatticeFermion(g); y = pg.LatticeFermion(g); U = pg.LatticeColourMatrix(g)
t2 = time.perf_counter()
y @= pg.adj(U) * pg.cshift(x, 2, 1) + ({tag} + 0.25j) * pg.cshift(x, 1, -2) * {tag}
t3 = time.perf_counter()
print(t1 - t0, t3 - t2)
"""


def compile_times():
    """Compile time of a new expression, and loading it from the disk cache in a new process."""
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, PYGRID_CACHE_DIR=d, NUMBA_CACHE_DIR=os.path.join(d, "numba"))
        code = _PROBE.replace("{tag}", "1.5")
        runs = []
        for _ in range(2):
            r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                               check=True)
            runs.append([float(v) for v in r.stdout.split()])
    return {"import_seconds": runs[1][0], "first_compile_seconds": runs[0][1],
            "disk_cache_load_seconds": runs[1][1]}


# ---------------------------------------------------------------------------
# grids and the context every kind receives
# ---------------------------------------------------------------------------

@dataclass
class Context:
    """What a benchmark kind needs besides its grid: timing, progress and options."""

    timer: Timer
    progress: Progress
    simd_layout: tuple | None = None
    Ls: int = 8
    seed: tuple = (1, 2, 3, 4)


def dotted(dims):
    return ".".join(str(int(d)) for d in dims)


def make_grid(dims, precision, simd_layout=None):
    """``pg.GridCartesian`` for the flags; a bad combination raises ConfigError naming them."""
    import pygrid as pg
    from pygrid.errors import ConfigError, GridError

    try:
        return pg.GridCartesian(list(dims), simd_layout=simd_layout, precision=precision)
    except GridError as e:
        what = f"--grid {dotted(dims)}"
        if simd_layout is not None:
            what += f" --simd {dotted(simd_layout)}"
        raise ConfigError(f"{what}: {e}") from None


def new_run(kind, grid, precision):
    return Run(kind, tuple(grid.gdims), precision, tuple(grid.simd_layout), grid.nsimd)


def lanes_note(grid, precision):
    """A note when the lattice is too small for the full SIMD width."""
    from pygrid.cartesian.simd import default_nsimd

    full = default_nsimd(precision)
    if grid.nsimd < full:
        return (f"the lattice is too small for {full} SIMD lanes in {precision}: "
                f"using Nsimd {grid.nsimd}")
    return None
