"""The per-site operations that generated OpenMP kernels call, one small function each.

A generated kernel is a loop over outer sites calling these functions on
flat arrays with offsets; the functions are compiled once per lane count and
precision and reused by every expression, so a new expression compiles only
its short loop.  Measured here: a 38-operation Wilson-like expression as one
inlined body took 17-23 s to compile; numba's frontend cost grows with the
size of the function it lowers, not with how often a function is called.

Every function works on site tensors stored as [component][re, im][lane];
``NS`` (lanes) is a compile-time constant so the lane loops vectorise.
"""
from __future__ import annotations

OPS_TEMPLATE = '''
import numpy as np
from numba import njit

NS = {NS}
_jit = njit(fastmath=True, cache=True, nogil=True, error_model="numpy", boundscheck=False)


@_jit
def load(d, src, soff, p, lanes, n):
    """d = the neighbour's tensor at src[soff:], lanes permuted by row p of lanes (0: none)."""
    if p == 0:
        for i in range(n * 2 * NS):
            d[i] = src[soff + i]
    else:
        po = p * NS
        for i in range(n * 2):
            for l in range(NS):
                d[i * NS + l] = src[soff + i * NS + lanes[po + l]]


@_jit
def fill(d, doff, coefs, coff, n):
    """d = the constant tensor coefs[coff:] (complex pairs) on every lane."""
    for c in range(n):
        cr = coefs[2 * (coff + c)]
        ci = coefs[2 * (coff + c) + 1]
        for l in range(NS):
            d[doff + c * 2 * NS + l] = cr
            d[doff + c * 2 * NS + NS + l] = ci


@_jit
def contract(d, doff, nout, a, aoff, b, boff, tab, sa, sb):
    """d[o] = sum over table rows (o, i, j) of A[i] * B[j]; sa, sb = -1 read A, B conjugated."""
    for i in range(nout * 2 * NS):
        d[doff + i] = 0.0
    for k in range(tab.shape[0] // 3):
        o = doff + tab[3 * k] * 2 * NS
        x = aoff + tab[3 * k + 1] * 2 * NS
        y = boff + tab[3 * k + 2] * 2 * NS
        for l in range(NS):
            ar = a[x + l]
            ai = sa * a[x + NS + l]
            br = b[y + l]
            bi = sb * b[y + NS + l]
            d[o + l] += ar * br - ai * bi
            d[o + NS + l] += ar * bi + ai * br


@_jit
def remap(d, doff, nout, a, aoff, rows, cf, sa):
    """d[o] = sum over rows (o, i) of c * A[i]; sa = -1 reads A conjugated."""
    for i in range(nout * 2 * NS):
        d[doff + i] = 0.0
    for k in range(rows.shape[0] // 2):
        o = doff + rows[2 * k] * 2 * NS
        x = aoff + rows[2 * k + 1] * 2 * NS
        cr = cf[2 * k]
        ci = cf[2 * k + 1]
        for l in range(NS):
            ar = a[x + l]
            ai = sa * a[x + NS + l]
            d[o + l] += cr * ar - ci * ai
            d[o + NS + l] += cr * ai + ci * ar


@_jit
def scale(d, doff, x, xoff, cr, ci, n):
    """d = c * x."""
    for c in range(n):
        p = c * 2 * NS
        for l in range(NS):
            xr = x[xoff + p + l]
            xi = x[xoff + p + NS + l]
            d[doff + p + l] = cr * xr - ci * xi
            d[doff + p + NS + l] = cr * xi + ci * xr


@_jit
def axpy(d, doff, x, xoff, cr, ci, n):
    """d += c * x."""
    for c in range(n):
        p = c * 2 * NS
        for l in range(NS):
            xr = x[xoff + p + l]
            xi = x[xoff + p + NS + l]
            d[doff + p + l] += cr * xr - ci * xi
            d[doff + p + NS + l] += cr * xi + ci * xr


@_jit
def axpby(d, doff, x, xoff, ar, ai, y, yoff, br, bi, n):
    """d = a x + b y: the common two-term sum in one pass."""
    for c in range(n):
        p = c * 2 * NS
        for l in range(NS):
            xr = x[xoff + p + l]
            xi = x[xoff + p + NS + l]
            yr = y[yoff + p + l]
            yi = y[yoff + p + NS + l]
            d[doff + p + l] = ar * xr - ai * xi + br * yr - bi * yi
            d[doff + p + NS + l] = ar * xi + ai * xr + br * yi + bi * yr


@_jit
def select(d, doff, m, moff, a, aoff, b, boff, n):
    """Per lane: d = a where the mask's real part is non-zero, else b."""
    for c in range(n):
        for r in range(2):
            p = c * 2 * NS + r * NS
            for l in range(NS):
                d[doff + p + l] = a[aoff + p + l] if m[moff + l] != 0 else b[boff + p + l]


@_jit
def compare(d, doff, a, aoff, b, boff, op):
    """d = 1.0 or 0.0 per lane from real parts; op 0 <, 1 <=, 2 >, 3 >=."""
    for l in range(NS):
        x = a[aoff + l]
        y = b[boff + l]
        if op == 0:
            t = x < y
        elif op == 1:
            t = x <= y
        elif op == 2:
            t = x > y
        else:
            t = x >= y
        d[doff + l] = 1.0 if t else 0.0
        d[doff + NS + l] = 0.0


@_jit
def copy(d, doff, x, xoff, n):
    for i in range(n * 2 * NS):
        d[doff + i] = x[xoff + i]
'''

OP_NAMES = ("load", "fill", "contract", "remap", "scale", "axpy", "axpby", "select", "compare", "copy")


def ops_source(nsimd):
    return OPS_TEMPLATE.format(NS=int(nsimd))
