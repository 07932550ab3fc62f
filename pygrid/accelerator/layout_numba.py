"""The layout moves of the CPU's threaded backend (``relayout``: checkerboard gathers and scatters,
component pokes) as compiled loops over host buffers shaped (osites, ncomp, 2, nsimd).

numpy's fancy indexing through the lane axis (``pygrid.accelerator.host.relayout``, which the numpy
backend keeps) takes a quarter of a second for one checkerboard of a 24^4 gauge field, and an
operator picks two of them each time it is made; these loops move each site's planes in place
(docs/performance.md, "Making an operator").  The maps are those of
:mod:`pygrid.accelerator.layout_kernels`::

    gather:   out[o, p, l] = in[om[o, l], p, lm[o, l]]
    scatter:  out[om[o, l], p, lm[o, l]] = in[o, p, l]
    setcomp:  out[o, cout[k], :, :] = in[o, cin[k], :, :]
"""
from __future__ import annotations

import numpy as np
from numba import njit

from . import host

_jit = njit(nogil=True, cache=True, error_model="numpy", boundscheck=False)

#: buffers (in and out together) of fewer bytes than this move through numpy: 9 ms on 28 MB against
#: 3.7 ms compiled, and a loop's first compile on a machine takes 0.5 s
COMPILED_BYTES = 32 << 20


@_jit
def _gather(out, inp, om, lm):
    n, planes, ns = out.shape[0], out.shape[1] * out.shape[2], out.shape[3]
    o4 = out.reshape(n, planes, ns)
    i4 = inp.reshape(inp.shape[0], planes, inp.shape[3])
    for o in range(n):
        for lane in range(ns):
            s, t = om[o, lane], lm[o, lane]
            for p in range(planes):
                o4[o, p, lane] = i4[s, p, t]


@_jit
def _scatter(out, inp, om, lm):
    n, planes, ns = inp.shape[0], inp.shape[1] * inp.shape[2], inp.shape[3]
    o4 = out.reshape(out.shape[0], planes, out.shape[3])
    i4 = inp.reshape(n, planes, ns)
    for o in range(n):
        for lane in range(ns):
            s, t = om[o, lane], lm[o, lane]
            for p in range(planes):
                o4[s, p, t] = i4[o, p, lane]


@_jit
def _setcomp(out, inp, cout, cin):
    for o in range(out.shape[0]):
        for k in range(len(cout)):
            a, b = cout[k], cin[k]
            for r in range(2):
                for lane in range(out.shape[3]):
                    out[o, a, r, lane] = inp[o, b, r, lane]


def relayout(kind, out, inp, om=None, lm=None) -> None:
    """The backend ``relayout`` (contract.py) on host arrays: the loops above for C-contiguous
    buffers from :data:`COMPILED_BYTES` on (a gather or scatter between precisions casts as it
    moves: ``pg.convert`` onto another SIMD layout), numpy (:func:`pygrid.accelerator.host.relayout`)
    for the rest (and for the precision casts on one layout, which numpy already does in one
    pass)."""
    if (kind in ("gather", "scatter", "setcomp") and out.nbytes + inp.nbytes >= COMPILED_BYTES
            and (out.dtype == inp.dtype or kind != "setcomp") and out.ndim == 4
            and inp.ndim == 4 and out.flags.c_contiguous and inp.flags.c_contiguous
            and out.flags.writeable):
        if kind == "setcomp":
            _setcomp(out, host.read_only(inp), host.read_only(np.asarray(om)), host.read_only(np.asarray(lm)))
            return
        maps = om.shape == lm.shape == ((out if kind == "gather" else inp).shape[0],
                                        (out if kind == "gather" else inp).shape[3])
        if maps:
            (_gather if kind == "gather" else _scatter)(out, host.read_only(inp), host.read_only(om),
                                                        host.read_only(lm))
            return
    host.relayout(kind, out, inp, om, lm)
