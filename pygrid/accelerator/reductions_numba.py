"""Reductions for the OpenMP backend: numba kernels over blocks of outer sites.

Each block writes one partial sum (accumulated in double, whatever the field's
precision) and the host adds the partials.  Not numpy: ``np.dot`` runs on
OpenBLAS's own thread pool, which competes with the kernels' OpenMP threads for the
cores and made a CG several times slower on a small machine.
"""
from __future__ import annotations

import numpy as np
from numba import njit

U = np.uint64


@njit(nogil=True, cache=True, error_model="numpy", boundscheck=False)
def norm2_block(lo, hi, a, stride, partial):
    s = 0.0
    for i in range(U(lo) * U(stride), U(hi) * U(stride)):
        x = np.float64(a[i])
        s += x * x
    partial[lo] = s


@njit(nogil=True, cache=True, error_model="numpy", boundscheck=False)
def inner_block(lo, hi, a, b, ncomp, ns, partial_re, partial_im):
    """sum conj(a) b over [o][c][re, im][lane] blocks."""
    sr = 0.0
    si = 0.0
    n2 = U(2 * ns)
    for o in range(lo, hi):
        base = U(o) * U(ncomp) * n2
        for c in range(ncomp):
            p = base + U(c) * n2
            for l in range(ns):
                ar = np.float64(a[p + U(l)])
                ai = np.float64(a[p + U(ns + l)])
                br = np.float64(b[p + U(l)])
                bi = np.float64(b[p + U(ns + l)])
                sr += ar * br + ai * bi
                si += ar * bi - ai * br
    partial_re[lo] = sr
    partial_im[lo] = si


def norm2(backend, a):
    n = a.shape[0]
    partial = np.zeros(n)
    backend.accelerator_for(n, norm2_block, a.reshape(-1), a[0].size, partial)
    return float(partial.sum())


def inner_product(backend, a, b):
    n = a.shape[0]
    pr, pi = np.zeros(n), np.zeros(n)
    backend.accelerator_for(n, inner_block, a.reshape(-1), b.reshape(-1), a.shape[1], a.shape[3], pr, pi)
    return complex(pr.sum(), pi.sum())
