"""The bandwidth roofline: numba copy, triad and fill kernels over 1-d arrays of any real dtype,
and the copy that moves as many bytes as the kernel it is the ceiling for.

A copy with ordinary stores reads each destination line before writing it (write-allocate), so
out of the caches it moves three bytes for the two it is credited with; the Dirac kernels stream
their results past the caches and pay no such read.  The roofline is therefore the faster of two
copies: cached stores (fastest while the arrays fit in the caches) and streaming, non-temporal
stores (fastest out of them: 1.6-1.8x on the AVX2 machine at 255 MB, 2026-11-29).
"""
from __future__ import annotations

import numpy as np

from ..memory.aligned import aligned_empty
from .report import Kernel
from .units import PARALLEL_MIN_BYTES, real_dtype

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

        @numba.njit(parallel=True, cache=True, fastmath=True)
        def read(a):
            s = a.dtype.type(0)
            for i in numba.prange(a.shape[0]):
                s += a[i]
            return s

        @numba.njit(cache=True)
        def copy_serial(dst, src):
            for i in range(src.shape[0]):
                dst[i] = src[i]

        @numba.njit(cache=True)
        def triad_serial(a, b, c, s):
            for i in range(a.shape[0]):
                a[i] = b[i] + s * c[i]

        _kernels.update(copy=copy, triad=triad, fill=fill, read=read, copy_serial=copy_serial,
                        triad_serial=triad_serial)
    return _kernels


_STREAM_SOURCE = """
import numba
import numpy as np
from pygrid.accelerator.simd_numba import store_fence, vloadt, vstoret_nt

W = {lanes}
CHUNK = 4096  # cache lines a parallel step


@numba.njit(cache=True, inline="always")
def lines(dst, src, lo, hi):
    for i in range(lo, hi):
        vstoret_nt(dst, np.uint64(i * W), vloadt(src, np.uint64(i * W), 1, W))
    store_fence()


@numba.njit(parallel=True, cache=True)
def stream(dst, src):
    n = src.shape[0] // W
    for c in numba.prange((n + CHUNK - 1) // CHUNK):
        lines(dst, src, c * CHUNK, min(n, (c + 1) * CHUNK))
    for i in range(n * W, src.shape[0]):
        dst[i] = src[i]


@numba.njit(cache=True)
def stream_serial(dst, src):
    n = src.shape[0] // W
    lines(dst, src, 0, n)
    for i in range(n * W, src.shape[0]):
        dst[i] = src[i]
"""


def _stream_kernels(dtype):
    """The copy with streaming stores for reals of ``dtype``: a cache line (64 bytes) a step, its
    store past the caches; the elements after the last whole line copied plainly."""
    from ..accelerator.compile_cache import load_module

    return load_module(_STREAM_SOURCE.format(lanes=64 // np.dtype(dtype).itemsize), "pygrid_copy",
                       label="the streaming copy")


def copy_kernel(dst, src):
    k = _numba_kernels()
    (k["copy"] if src.nbytes >= PARALLEL_MIN_BYTES else k["copy_serial"])(dst, src)


def stream_copy_kernel(dst, src):
    """``dst[:] = src`` with streaming (non-temporal) stores; both arrays aligned to 64 bytes."""
    if dst.ctypes.data % 64 or src.ctypes.data % 64:
        raise ValueError("stream_copy_kernel needs arrays aligned to 64 bytes (pygrid.memory.aligned)")
    m = _stream_kernels(src.dtype)
    (m.stream if src.nbytes >= PARALLEL_MIN_BYTES else m.stream_serial)(dst, src)


def triad_kernel(a, b, c, s):
    k = _numba_kernels()
    (k["triad"] if a.nbytes >= PARALLEL_MIN_BYTES else k["triad_serial"])(a, b, c, a.dtype.type(s))


def read_kernel(a):
    """The sum of ``a``: a parallel pass that only reads."""
    return _numba_kernels()["read"](a)


def fill_kernel(a, seed=0):
    _numba_kernels()["fill"](a, seed)


def touched(n, dtype, seed=0):
    """A 1-d array of ``n`` reals, every element written (never time untouched memory)."""
    a = aligned_empty(int(n), dtype)
    fill_kernel(a, seed)
    return a


def host_copies(n, dtype, timer, label):
    """The two host copies of ``n`` reals (cached and streaming stores), each a timed
    :class:`Kernel` (bytes = read + write)."""
    src, dst = touched(n, dtype, 1), touched(n, dtype, 2)
    out = []
    for name, fn, stores in (("copy", copy_kernel, "cached stores"),
                             ("copy_stream", stream_copy_kernel, "streaming stores")):
        t, tmin, it = timer(lambda fn=fn: fn(dst, src), f"{label}, {stores}")
        out.append(Kernel(name, "roofline", t, tmin, it, sites=n, flops_per_site=0,
                          bytes_per_site=2 * np.dtype(dtype).itemsize,
                          description=f"numba copy with {stores} moving as many bytes as the kernel "
                                      "(read + write); parallel from 1 MiB up"))
    if not np.array_equal(dst, src):
        raise RuntimeError(f"{label}: the copies did not copy")
    return out


def measure_copies(traffic, precision, timer, label="roofline copy"):
    """The copies that move ``traffic`` bytes (read + write), each a timed :class:`Kernel`: a
    device's own copy kernel, or on the host the two of :func:`host_copies`."""
    from ..accelerator.backends import get_backend

    dtype = real_dtype(precision)
    n = max(1, int(traffic) // 2 // np.dtype(dtype).itemsize)
    device_copy = get_backend().bench_copy(n, dtype)
    if device_copy is None:
        return host_copies(n, dtype, timer, label)
    t, tmin, it = timer(device_copy, label)
    what = f"{get_backend().name} device copy (hand-written kernel) moving as many bytes as the kernel"
    return [Kernel("copy", "roofline", t, tmin, it, sites=n, flops_per_site=0,
                   bytes_per_site=2 * np.dtype(dtype).itemsize, description=what)]


def measure_copy(traffic, precision, timer, label="roofline copy"):
    """The roofline: the fastest of :func:`measure_copies`.

    ``traffic`` is what the measured kernel moves per call, so the copy has the
    same working set and meets the same caches: a copy of one field while the
    kernel streams three would sit in the last-level cache and overstate the
    bandwidth.
    """
    return min(measure_copies(traffic, precision, timer, label), key=lambda k: k.seconds)
