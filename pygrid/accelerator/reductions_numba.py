"""Reductions for the OpenMP backend: numba kernels over blocks of outer sites.

Each block writes one partial sum (accumulated in double, whatever the field's
precision) and the host adds the partials.  Not numpy: ``np.dot`` runs on
OpenBLAS's own thread pool, which competes with the kernels' OpenMP threads for the
cores and made a CG several times slower on a small machine.

``fastmath`` lets LLVM reorder the sums, which is what makes them vector
instructions (a strict left-to-right sum waits on every add).
"""
from __future__ import annotations

import numpy as np
from numba import njit

U = np.uint64


_jit = njit(nogil=True, cache=True, fastmath=True, error_model="numpy", boundscheck=False)


@_jit
def norm2_block(lo, hi, a, stride, partial):
    s = 0.0
    for i in range(U(lo) * U(stride), U(hi) * U(stride)):
        x = np.float64(a[i])
        s += x * x
    partial[lo] = s


@_jit
def inner_block(lo, hi, a, b, ncomp, ns, partial_re, partial_im):
    """sum conj(a) b over [o][c][re, im][lane] blocks."""
    sr = 0.0
    si = 0.0
    n2 = U(2 * ns)
    NS = U(ns)
    for q in range(U(lo) * U(ncomp), U(hi) * U(ncomp)):
        p = q * n2
        for l in range(NS):
            ar = np.float64(a[p + l])
            ai = np.float64(a[p + NS + l])
            br = np.float64(b[p + l])
            bi = np.float64(b[p + NS + l])
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
