"""Compiled helpers of :func:`pygrid.qcd.compressed_links.compress_links`: the determinant of every
link of a host link buffer, and the check of each rebuilt third row with the packing of the first
two rows.

The buffers are shaped (osites, 36, 2, nsimd): four 3x3 complex matrices a site, row by row, real
and imaginary planes, the lanes last.  An operator compresses its links on its first hop after each
write of them (every step of a gauge update), so this is compiled: one link of one lane at a time,
in double precision whatever the buffer's, with no work arrays (docs/performance.md, "Links read
compressed").
"""
from __future__ import annotations

import numpy as np
from numba import njit

_jit = njit(nogil=True, cache=True, error_model="numpy", boundscheck=False)


@njit(nogil=True, cache=True, inline="always")
def _element(buf, s, k, lane):
    return complex(np.float64(buf[s, k, 0, lane]), np.float64(buf[s, k, 1, lane]))


@njit(nogil=True, cache=True, inline="always")
def _row(buf, s, k, lane):
    """The row of three complex elements from element k of site s, in one lane."""
    return _element(buf, s, k, lane), _element(buf, s, k + 1, lane), _element(buf, s, k + 2, lane)


@njit(nogil=True, cache=True, inline="always")
def _norm(c):
    """|c|^2 (the largest of them is taken before one square root, not each)."""
    return c.real * c.real + c.imag * c.imag


@_jit
def link_dets(buf, out, at):
    """``out[at + 4 * s + mu, lane]`` = det of the link of direction mu at outer site s, that lane."""
    for s in range(buf.shape[0]):
        for mu in range(4):
            b = 9 * mu
            row = at + 4 * s + mu
            for lane in range(buf.shape[3]):
                a00, a01, a02 = _row(buf, s, b, lane)
                a10, a11, a12 = _row(buf, s, b + 3, lane)
                a20, a21, a22 = _row(buf, s, b + 6, lane)
                out[row, lane] = (a00 * (a11 * a22 - a12 * a21) - a01 * (a10 * a22 - a12 * a20)
                                  + a02 * (a10 * a21 - a11 * a20))


@_jit
def pack_rows(buf, index, at, table, rows):
    """The first two rows of every link of ``buf`` into ``rows`` (shaped (4, osites, 6, 2, nsimd),
    direction by direction); returns the largest difference between a link's third row and the one
    rebuilt as ``table[index[at + 4 * s + mu]] * conj(row0 x row1)``."""
    worst = 0.0
    for s in range(buf.shape[0]):
        for mu in range(4):
            b = 9 * mu
            z = index[at + 4 * s + mu]
            for k in range(6):
                for ri in range(2):
                    for lane in range(buf.shape[3]):
                        rows[mu, s, k, ri, lane] = buf[s, b + k, ri, lane]
            for lane in range(buf.shape[3]):
                x0, x1, x2 = _row(buf, s, b, lane)
                y0, y1, y2 = _row(buf, s, b + 3, lane)
                ph = complex(table[z, 0, lane], table[z, 1, lane])
                d0 = _norm(ph * (x1 * y2 - x2 * y1).conjugate() - _element(buf, s, b + 6, lane))
                d1 = _norm(ph * (x2 * y0 - x0 * y2).conjugate() - _element(buf, s, b + 7, lane))
                d2 = _norm(ph * (x0 * y1 - x1 * y0).conjugate() - _element(buf, s, b + 8, lane))
                worst = max(worst, d0, d1, d2)
    return np.sqrt(worst)
