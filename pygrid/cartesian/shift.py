"""Neighbour tables: where a shifted read finds its data, outer site and lane.

A read of field(x + disp) at outer site o comes from one outer site o' for
all lanes, with the lanes rotated when the shift wraps around a virtual node
(Grid's permute).  The table stores o' per outer site and an index into a
small list of distinct lane maps; index 0 is always the identity, so kernels
read unpermuted neighbours with unit stride.
"""
from __future__ import annotations

import functools

import numpy as np

from ..errors import GridError


def shifted_checkerboard(grid, cb, disp):
    if not grid.checkerboarded:
        return None
    odd = sum(disp[d] for d in grid.parity_dims) % 2
    return cb ^ odd


@functools.lru_cache(maxsize=256)
def shift_table(grid, cb, disp):
    """Tables for reading field(x + disp) into a field of the shifted checkerboard.

    Returns (nbr int32[osites], perm int32[osites], lanes int32[nperm, nsimd], dest_cb).
    Single rank: the lattice is periodic within the local volume.
    """
    disp = tuple(int(d) for d in disp)
    if len(disp) != grid.nd:
        raise GridError(f"shift {disp} has {len(disp)} entries; the grid has {grid.nd} dimensions")
    dest_cb = shifted_checkerboard(grid, cb, disp)
    x = grid.full_coords(dest_cb)  # (osites, nsimd, nd) full local coords of destination sites
    y = (x + np.array(disp)) % np.array(grid.ldims)
    if grid.checkerboarded:
        y = y.copy()
        y[..., grid.cb_dim] //= 2
    src_o, src_l = grid.outer_lane_of(y)
    nbr = src_o[:, 0]
    if np.any(src_o != nbr[:, None]):
        raise GridError(
            f"shift {disp} on {grid} is not lane-uniform; use a simd_layout with even outer extents"
        )
    maps, perm = np.unique(src_l, axis=0, return_inverse=True)
    ident = np.arange(grid.nsimd)
    # put the identity first so that kernels can test perm == 0
    order = sorted(range(len(maps)), key=lambda i: 0 if np.array_equal(maps[i], ident) else 1)
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    lanes = maps[order]
    if not np.array_equal(lanes[0], ident):
        lanes = np.vstack([ident, lanes])
        rank += 1
    perm = rank[perm.reshape(-1)]
    out = (
        np.ascontiguousarray(nbr, dtype=np.int32),
        np.ascontiguousarray(perm, dtype=np.int32),
        np.ascontiguousarray(lanes, dtype=np.int32),
        dest_cb,
    )
    for a in out[:3]:
        a.setflags(write=False)
    return out
