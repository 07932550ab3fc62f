"""The bandwidth roofline: numba copy, triad and fill kernels over 1-d arrays of any real dtype,
and the copy that moves as many bytes as the kernel it is the ceiling for."""
from __future__ import annotations

import numpy as np

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
