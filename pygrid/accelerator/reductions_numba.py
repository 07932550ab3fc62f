"""Reductions for the OpenMP backend: numba kernels over blocks of outer sites.

Each block writes one partial sum (accumulated in double, whatever the field's
precision) and the host adds the partials.  Not numpy: ``np.dot`` runs on
OpenBLAS's own thread pool, which competes with the kernels' OpenMP threads for the
cores and made a CG several times slower on a small machine.

The kernels are generated per lane count and precision with explicit SIMD
vectors (:mod:`.simd_numba`): one component's lanes are one vector, widened to
double, with an independent accumulator per product so that the adds do not
wait on each other.  A loop over the lanes of one component is too short for
LLVM's vectoriser, which left the inner product scalar.
"""
from __future__ import annotations

import numpy as np

from . import simd_numba
from .compile_cache import load_module
from .host import read_only

_modules: dict = {}


def source(nsimd: int, dtype: str) -> str:
    """Source of ``norm2_block`` and ``inner_block`` for buffers of ``nsimd`` lanes of ``dtype`` reals."""
    return f'''# reductions, Nsimd {int(nsimd)}, {dtype}; simd_numba version {simd_numba.VERSION}
import numpy as np
from numba import njit

from pygrid.accelerator.simd_numba import vdouble, vfma, vload, vsplat, vsum

NS = {int(nsimd)}
U = np.uint64
S1 = U(NS)
S2 = U(2 * NS)
_jit = njit(nogil=True, cache=True, error_model="numpy", boundscheck=False)


@_jit
def norm2_block(lo, hi, a, ncomp, partial):
    """partial[lo] = sum of squares of outer sites [lo, hi)."""
    s0 = vsplat(0.0, NS)
    s1 = vsplat(0.0, NS)
    for q in range(U(lo) * U(ncomp), U(hi) * U(ncomp)):
        p = q * S2
        x = vdouble(vload(a, p, NS))
        y = vdouble(vload(a, p + S1, NS))
        s0 = vfma(x, x, s0)
        s1 = vfma(y, y, s1)
    partial[lo] = vsum(s0 + s1)


@_jit
def inner_block(lo, hi, a, b, ncomp, partial_re, partial_im):
    """partial[lo] = sum of conj(a) b over outer sites [lo, hi)."""
    rr = vsplat(0.0, NS)
    ii = vsplat(0.0, NS)
    ri = vsplat(0.0, NS)
    ir = vsplat(0.0, NS)
    for q in range(U(lo) * U(ncomp), U(hi) * U(ncomp)):
        p = q * S2
        ar = vdouble(vload(a, p, NS))
        ai = vdouble(vload(a, p + S1, NS))
        br = vdouble(vload(b, p, NS))
        bi = vdouble(vload(b, p + S1, NS))
        rr = vfma(ar, br, rr)
        ii = vfma(ai, bi, ii)
        ri = vfma(ar, bi, ri)
        ir = vfma(ai, br, ir)
    partial_re[lo] = vsum(rr + ii)
    partial_im[lo] = vsum(ri - ir)
'''


def kernels(nsimd: int, dtype):
    m = _modules.get((nsimd, dtype))  # keyed by the dtype object: str(dtype) costs microseconds a call
    if m is None:
        key = (int(nsimd), str(np.dtype(dtype)))
        m = _modules[(nsimd, dtype)] = load_module(source(*key), "pygrid_red",
                                                   label=f"the reductions ({key[1]}, Nsimd {key[0]})")
    return m


def norm2(backend, a):
    n = a.shape[0]
    partial = np.zeros(n)
    backend.accelerator_for(n, kernels(a.shape[3], a.dtype).norm2_block, read_only(a.reshape(-1)), a.shape[1],
                            partial)
    return float(partial.sum())


def inner_product(backend, a, b):
    n = a.shape[0]
    pr, pi = np.zeros(n), np.zeros(n)
    backend.accelerator_for(n, kernels(a.shape[3], a.dtype).inner_block, read_only(a.reshape(-1)),
                            read_only(b.reshape(-1)), a.shape[1], pr, pi)
    return complex(pr.sum(), pi.sum())
