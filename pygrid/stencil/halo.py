"""Halos: the neighbours that live on another rank, and the messages that bring them.

Every rank has the same local layout, so the neighbour of a site for a
displacement d is, in local coordinates, the periodic one of the single-rank
table (``pygrid.cartesian.shift.shift_table``): outer site ``nbr[o]`` with the
lane map of ``perm[o]``.  What changes under MPI is only *which rank* holds it:
the rank at offset Delta = floor((x + d) / L) in the processor grid, per lane.

A *face* site o is an outer site with at least one lane whose neighbour is
remote.  Its halo row k is a whole outer site in the source layout, read by the
unchanged lane permute: lane m of the row comes from rank me + Delta(o, l) for
the destination lane l with ``lanes[perm[o]][l] == m``.  Kernels see the row at
index ``osites + offset_p + k`` of the neighbour table.

Because the layout is the same everywhere, the rows that rank r needs from rank
r + Delta are the rows that rank r - Delta needs from r: each rank packs its own
rows ``nbr[face]`` (the *packed* array, possibly spin-projected), sends the
rows of each Delta group to rank me - Delta, and receives the same count from
me + Delta.  When a dimension is split over both ranks and lanes, only some
lanes of a face row are remote; the row starts as this rank's packed row and
the received lanes are merged in (Grid's CommsMerge).
"""
from __future__ import annotations

import functools
import time

import numpy as np

from ..cartesian.shift import shift_table
from ..communicator import rank_of
from ..errors import GridError


class PointHalo:
    """The face of one displacement: rows, halo offset and the message groups."""

    __slots__ = ("face", "rows", "offset", "groups", "direct", "nface")

    def __init__(self, face, rows, offset, groups, direct):
        self.face = face        # int32 (nface,): destination outer sites that read the halo
        self.rows = rows        # int32 (nface,): the source outer sites each rank packs (nbr[face])
        self.offset = offset    # first halo row of this point
        self.groups = groups    # [(rows of the group, remote lanes, send_to, recv_from)]
        self.direct = direct    # one group covering every lane of every row: receive straight into the halo
        self.nface = len(face)


class HaloPlan:
    """Neighbour tables with halo rows, for ``grid``, source checkerboard ``cb`` and displacements ``disps``.

    ``neighbours[p, o]`` (int32): the source outer site, or ``osites + halo row``;
    ``perm[p, o]`` / ``lanes[p]``: the lane maps of the single-rank table;
    ``points[p]``: a :class:`PointHalo`; ``nhalo``: rows of the halo array;
    ``interior``: outer sites none of whose neighbours is in the halo, ``boundary`` the others.
    """

    def __init__(self, grid, cb, disps):
        self.grid = grid
        self.comm = grid.comm
        self.disps = [tuple(int(v) for v in d) for d in disps]
        osites = grid.osites
        me = np.array(grid.processor_coor)
        P = np.array(grid.mpi_layout)
        L = np.array(grid.ldims)
        for d in self.disps:
            for mu, (dm, p, l) in enumerate(zip(d, P, L)):
                if p > 1 and abs(dm) >= l:
                    raise GridError(f"a shift by {dm} in dimension {mu} reaches past the neighbouring rank "
                                    f"(local extent {l}); shift in steps smaller than the local extent")
        self.neighbours = np.empty((len(self.disps), osites), np.int32)
        self.perm = []
        self.lanes = []
        self.points = []
        offset = 0
        touched = np.zeros(osites, bool)
        for p, d in enumerate(self.disps):
            nbr, perm, lanes, dest_cb = shift_table(grid, cb, d)
            self.perm.append(perm)
            self.lanes.append(lanes)
            x = grid.full_coords(dest_cb)  # (osites, nsimd, nd) local coordinates
            delta = np.floor_divide(x + np.array(d), L)
            delta[..., P == 1] = 0
            remote = np.any(delta != 0, axis=-1)  # (osites, nsimd)
            face = np.nonzero(np.any(remote, axis=1))[0].astype(np.int32)
            rows = nbr[face].astype(np.int32)
            groups = []
            if len(face):
                dl = delta[face]  # (nface, nsimd, nd)
                src_lane = lanes[perm[face]]  # (nface, nsimd): source lane read by each destination lane
                for g in np.unique(dl[remote[face]], axis=0):
                    hit = np.all(dl == g, axis=-1)  # (nface, nsimd) by destination lane
                    mask = np.zeros_like(hit)
                    np.put_along_axis(mask, src_lane, hit, axis=1)
                    kidx = np.nonzero(np.any(mask, axis=1))[0]
                    m = mask[kidx]
                    if len(kidx) and np.array_equal(kidx, np.arange(kidx[0], kidx[-1] + 1)):
                        kidx = slice(int(kidx[0]), int(kidx[-1]) + 1)  # a view, not a gather
                    groups.append(
                        (kidx, _lane_selector(m), rank_of(tuple(me - g), P), rank_of(tuple(me + g), P))
                    )
            direct = (len(groups) == 1 and index_rows(groups[0][0]) == len(face)
                      and isinstance(groups[0][1], slice) and groups[0][1] == slice(0, grid.nsimd, 1))
            self.points.append(PointHalo(face, rows, offset, groups, direct))
            self.neighbours[p] = nbr
            self.neighbours[p, face] = osites + offset + np.arange(len(face))
            touched[face] = True
            offset += len(face)
        self.nhalo = offset
        self.active = [p for p, pt in enumerate(self.points) if pt.nface]
        self._recv = {}  # receive buffers of lane-merged rows, by (row shape, dtype)
        self._shared_halos = {}  # pygrid.stencil.shared_halo: by (row shape, dtype)
        self._shared_usable = None
        self.interior = np.nonzero(~touched)[0].astype(np.int32)
        self.boundary = np.nonzero(touched)[0].astype(np.int32)
        for a in (self.neighbours, self.interior, self.boundary):
            a.setflags(write=False)

    def start(self, packed, halo):
        """Post the messages of every point with a face: ``packed[p]`` holds this rank's rows
        ``points[p].rows`` in the layout the kernel reads (first axis the row, lanes last);
        ``halo`` is the (nhalo, ...) array the kernel reads.  Returns an :class:`Exchange`."""
        sends, recvs, merges = [], [], []
        for p in self.active:
            pt = self.points[p]
            rows = halo[pt.offset:pt.offset + pt.nface]
            if pt.direct:
                _, _, to, frm = pt.groups[0]
                recvs.append((rows, frm, 64 * p))
                sends.append((packed[p] if packed[p].flags.c_contiguous else np.ascontiguousarray(packed[p]),
                              to, 64 * p))
                continue
            rows[...] = packed[p]  # the lanes that stay on this rank
            for gi, (kidx, mask, to, frm) in enumerate(pt.groups):
                buf = self._buffer(p, gi, index_rows(kidx), rows.shape[1:], rows.dtype)
                recvs.append((buf, frm, 64 * p + gi))
                sends.append((np.ascontiguousarray(packed[p][kidx]), to, 64 * p + gi))
                where = (slice(pt.offset + kidx.start, pt.offset + kidx.stop) if isinstance(kidx, slice)
                         else pt.offset + kidx)
                merges.append((where, mask, buf))
        return Exchange(self.comm.exchange(sends, recvs), merges, halo)

    def _buffer(self, p, g, n, shape, dtype):
        # kept from call to call: a fresh buffer of this size would page-fault on every exchange
        key = (p, g, shape, np.dtype(dtype).char)
        buf = self._recv.get(key)
        if buf is None:
            buf = self._recv[key] = np.empty((n,) + tuple(shape), dtype)
        return buf


class Exchange:
    """Messages in flight; ``test()`` lets them progress, ``wait()`` completes them and merges lanes."""

    def __init__(self, requests, merges, halo):
        self.requests, self.merges, self.halo = requests, merges, halo

    def test(self):
        return self.requests.test()

    def wait(self):
        self.requests.wait()
        for idx, lanes, buf in self.merges:
            merge_lanes(self.halo, idx, lanes, buf)
        self.merges = []
        return self.halo


def merge_lanes(halo, idx, lanes, buf):
    """The remote ``lanes`` of ``buf`` (received rows) into the halo rows ``idx`` (a slice or
    indices): a lane slice, or a (rows, nsimd) mask."""
    if isinstance(lanes, np.ndarray):  # a lane mask per row
        m = lanes.reshape(lanes.shape[:1] + (1,) * (buf.ndim - 2) + lanes.shape[1:])
        rows = halo[idx]
        np.copyto(rows, buf, where=m)
        halo[idx] = rows
    elif isinstance(idx, slice):
        halo[idx][..., lanes] = buf[..., lanes]
    else:
        halo[idx, ..., lanes] = buf[..., lanes]


def index_rows(kidx):
    """How many rows a slice or an index array picks."""
    return kidx.stop - kidx.start if isinstance(kidx, slice) else len(kidx)


def _lane_selector(mask):
    """The remote lanes of a group: a slice when every row has the same evenly spaced ones
    (a strided copy merges them), else the (rows, nsimd) mask itself."""
    if np.all(mask == mask[:1]):
        lanes = np.nonzero(mask[0])[0]
        step = int(lanes[1] - lanes[0]) if len(lanes) > 1 else 1
        if np.array_equal(lanes, np.arange(lanes[0], lanes[-1] + 1, step)):
            return slice(int(lanes[0]), int(lanes[-1]) + 1, step)
    return mask


@functools.lru_cache(maxsize=256)
def halo_plan(grid, cb, disps):
    """The cached :class:`HaloPlan` of ``grid`` for source checkerboard ``cb`` and a tuple of
    displacements."""
    return HaloPlan(grid, cb, disps)


def exchange_rows(plan, buf, rows_of=None):
    """The halo of a raw field buffer (osites, ...) for every point of ``plan``, unprojected, completed.

    ``rows_of(buf, rows)`` gives the host array of the listed rows (default: numpy indexing, for a
    host buffer; a device buffer needs a gather to the host)."""
    t = time.perf_counter()
    packed = [buf[pt.rows] if rows_of is None else rows_of(buf, pt.rows) for pt in plan.points]
    halo = np.empty((plan.nhalo,) + tuple(packed[0].shape[1:]), buf.dtype)
    plan.comm.stats.pack_s += time.perf_counter() - t
    return plan.start(packed, halo).wait()
