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


def unique_rows(rows, base):
    """``np.unique(rows, axis=0, return_inverse=True)`` for rows of integers in [0, base): the
    distinct rows in lexicographic order and the index of each row's.  A row packs into one
    integer key where its digits fit 64 bits, so that the sort is of keys: ``np.unique`` along an
    axis sorts the rows as opaque records, 1.2 s of the first operator on 24^4 (3 stencils)."""
    rows = np.asarray(rows)
    bits = max(1, (int(base) - 1).bit_length())
    if rows.ndim != 2 or rows.shape[1] * bits > 64 or not len(rows):
        maps, inv = np.unique(rows, axis=0, return_inverse=True)
        return maps, inv.reshape(-1)
    if rows.min() < 0 or rows.max() >= base:
        raise GridError(f"unique_rows: entries outside [0, {base})")
    key = np.zeros(len(rows), np.uint64)
    for col in rows.T.astype(np.uint64):  # the first column most significant: lexicographic order
        key = (key << np.uint64(bits)) | col
    _, first, inv = np.unique(key, return_index=True, return_inverse=True)
    return rows[first], inv.reshape(-1)


def _source_sites(grid, x, disp):
    """:meth:`GridCartesian.outer_lane_of` the stored coordinates of ``x + disp`` (periodic): the
    (outer site, lane) each destination reads, a dimension at a time in int32 (the whole
    coordinate array at once, in int64 with a matrix product, took most of a table's time)."""
    src_o = np.zeros(x.shape[:2], np.int32)
    src_l = np.zeros(x.shape[:2], np.int32)
    so = sl = 1
    for d in range(grid.nd):
        c = x[..., d].astype(np.int32)
        if disp[d]:
            c += disp[d] % grid.ldims[d]
            c %= grid.ldims[d]
        if grid.checkerboarded and d == grid.cb_dim:
            c //= 2
        r = grid.rdims[d]
        if grid.simd_layout[d] == 1:
            src_o += c * so
        else:
            q, c = np.divmod(c, r)
            src_o += c * so
            src_l += q * sl
        so *= r
        sl *= grid.simd_layout[d]
    return src_o, src_l


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
    src_o, src_l = _source_sites(grid, x, disp)
    nbr = src_o[:, 0]
    if np.any(src_o != nbr[:, None]):
        raise GridError(
            f"shift {disp} on {grid} is not lane-uniform; use a simd_layout with even outer extents"
        )
    maps, perm = unique_rows(src_l, grid.nsimd)
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
