"""Rows of a field buffer brought to the host: the faces a rank sends to its neighbours.

Only the listed rows leave the device: a host buffer is indexed with numpy, a
device buffer goes through the backend's gather kernel
(:mod:`pygrid.accelerator.layout_kernels`) into a host array.
"""
from __future__ import annotations

import functools

import numpy as np

_row_maps = {}


def host_rows(backend, a, rows, Ls=1):
    """The 4D outer sites ``rows`` of buffer ``a`` (all Ls slices each) as a host array
    (len(rows), Ls * ncomp, 2, nsimd): numpy indexing for a host buffer, the backend's gather
    kernel for a device buffer, so only these rows leave the device."""
    ncomp, ns = a.shape[1], a.shape[3]
    if isinstance(a, np.ndarray):
        return a.reshape(-1, Ls * ncomp, 2, ns)[rows]
    key = (id(rows), int(Ls), int(ns))
    hit = _row_maps.get(key)
    if hit is None or hit[0] is not rows:
        if len(_row_maps) > 256:
            _row_maps.clear()
        sites = (np.asarray(rows, np.int64)[:, None] * Ls + np.arange(Ls)).reshape(-1)
        om = np.ascontiguousarray(np.repeat(sites[:, None], ns, axis=1), np.int32)
        lm = np.ascontiguousarray(np.broadcast_to(np.arange(ns, dtype=np.int32), om.shape))
        hit = _row_maps[key] = (rows, om, lm)
    out = np.empty((len(rows) * Ls, ncomp, 2, ns), a.dtype)
    backend.relayout("gather", out, a, hit[1], hit[2])
    return out.reshape(len(rows), Ls * ncomp, 2, ns)


@functools.lru_cache(maxsize=32)
def all_rows(n):
    """Every row index of an n-row buffer (kept, so that device gathers reuse their maps)."""
    rows = np.arange(n, dtype=np.int32)
    rows.setflags(write=False)
    return rows
