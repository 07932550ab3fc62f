"""Host arrays whose data start on a cache-line boundary.

numpy aligns its allocations to 16 bytes only: a large one comes from mmap at 16
bytes past a page boundary.  A field stored that way has every 64-byte AVX-512 load
and every other 32-byte AVX2 load split across two cache lines, which the hand-
unrolled kernels pay for on every vector.  Field buffers are allocated here instead.
"""
from __future__ import annotations

import numpy as np

#: bytes: a cache line, and the widest SIMD vector (AVX-512)
ALIGN = 64


def aligned_empty(shape, dtype, align: int = ALIGN) -> np.ndarray:
    """An uninitialised C-contiguous array of ``shape`` and ``dtype`` whose data start at a
    multiple of ``align`` bytes (a power of two).  Its memory is owned by a byte buffer that
    the array keeps alive as its base."""
    if align <= 0 or align & (align - 1):
        raise ValueError(f"aligned_empty: align must be a positive power of two, got {align}")
    dtype = np.dtype(dtype)
    shape = (int(shape),) if np.isscalar(shape) else tuple(int(n) for n in shape)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + align, dtype=np.uint8)
    start = -raw.ctypes.data % align
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def aligned_zeros(shape, dtype, align: int = ALIGN) -> np.ndarray:
    """:func:`aligned_empty`, filled with zeros."""
    a = aligned_empty(shape, dtype, align)
    a.fill(0)
    return a
