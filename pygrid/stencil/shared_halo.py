"""A halo that the ranks of a node read straight from each other's memory.

Where every rank's neighbours share its node (``Communicator.node_ranks``), the halo rows need
not be messages.  Every rank packs its face rows into its own segment of an MPI shared window
(:class:`pygrid.communicator.shared.SharedSegments`), in the halo's order (every rank has the same
layout, so the rows rank ``me - Delta`` needs from this one sit where its halo keeps them), and
signals its neighbours with a zero-byte message each
(:class:`pygrid.communicator.shared.Signals`); a neighbour that has the signal reads the rows.

Two packed arrays, used on alternate calls, let a rank pack the next call's rows while its
neighbour may still read the last ones.  The call after that packs the first array again; by
then this rank has received each neighbour's signal of the call in between, which the neighbour
sends only after it finished reading the first array.  Every rank must therefore make the same
sequence of calls on one plan, as the messages require as well.
"""
from __future__ import annotations

import time

import numpy as np

from .halo import index_rows, merge_lanes

#: the tag of the signals (the halo messages use ``64 * point + group``, below 64 * 64)
TAG = 30001


def shared_halo(plan, row_shape, dtype):
    """The :class:`SharedHalo` of ``plan`` for halo rows of ``row_shape`` and ``dtype``, made once
    per plan (a collective call on the plan's communicator the first time), or None where the
    rows must travel as messages: some rank has a neighbour on another node."""
    cache = plan._shared_halos
    key = (tuple(int(n) for n in row_shape), np.dtype(dtype).char)
    if key not in cache:
        cache[key] = SharedHalo(plan, key[0], dtype) if usable(plan) else None
    return cache[key]


def usable(plan):
    """Whether every rank can take its halo of ``plan`` through shared memory (a collective call
    the first time, kept on the plan: the ranks must agree)."""
    hit = plan._shared_usable
    if hit is None:
        comm = plan.comm
        node = comm.node_ranks()
        ok = bool(plan.nhalo) and bool(node)
        for p in plan.active:
            ok = ok and all(to in node and frm in node for _, _, to, frm in plan.points[p].groups)
        hit = plan._shared_usable = bool(comm.max(0 if ok else 1) == 0)
    return hit


class SharedHalo:
    """This rank's packed face rows and halo in the node's shared memory, two of each, used on
    alternate calls (``k``).

    A call packs every face row into this rank's own ``packed[k]`` (nhalo, *row_shape), in the
    order of the halo (the pack's one target, ``targets[k]``), then ``post()``s: a signal to each
    neighbour.  ``complete(k)`` waits for the neighbours' signals and fills this rank's halo from
    their packed rows: each point's rows from the rank they come from, and, for a face whose rows
    hold lanes of two ranks (a SIMD dimension split over ranks), this rank's own rows with the
    neighbours' lanes merged in, as the message path does with received rows.  Where every row
    comes whole from one neighbour, in the halo's order (two ranks split in one dimension), the
    kernel reads that neighbour's packed rows in place: ``halo[k]`` is then that array.

    Each rank writes only its own memory: a store to a line another core holds waits for that
    line (a pack into the neighbour's memory ran 23 us for 49 KB at 8^4, into its own 3 us),
    while the reads of the rows can overlap."""

    def __init__(self, plan, row_shape, dtype):
        comm = plan.comm
        node = comm.node_ranks()
        me = comm.rank
        dtype = np.dtype(dtype)
        row_shape = tuple(row_shape)
        row = int(np.prod(row_shape))
        n = plan.nhalo * row
        shape = (plan.nhalo,) + row_shape
        copies, merges = [], []   # (halo rows, source rank), (halo rows, lanes, source rank)
        for p in plan.active:
            pt = plan.points[p]
            rows = slice(pt.offset, pt.offset + pt.nface)
            if pt.direct:
                copies.append((rows, pt.groups[0][3]))
                continue
            copies.append((rows, me))
            for kidx, mask, _, frm in pt.groups:
                at = (slice(pt.offset + kidx.start, pt.offset + kidx.stop) if isinstance(kidx, slice)
                      else pt.offset + kidx)
                merges.append((at, mask, frm))
        in_place = not merges and len({r for _, r in copies}) == 1 and copies[0][1] != me
        self.comm, self.calls = comm, 0
        self.segments = comm.shared_segments((2 if in_place else 4) * n * dtype.itemsize)

        def packed(rank, k):
            return self.segments.segment(node[rank]).view(dtype)[k * n:(k + 1) * n].reshape(shape)

        self.packed = [packed(me, k) for k in (0, 1)]
        self.targets = [[(0, plan.nhalo, self.packed[k].reshape(-1))] for k in (0, 1)]
        if in_place:
            self.halo = [packed(copies[0][1], k) for k in (0, 1)]
            self.copies = self.merges = [[], []]
        else:
            self.halo = [self.segments.segment(node[me]).view(dtype)[(2 + k) * n:(3 + k) * n].reshape(shape)
                         for k in (0, 1)]
            self.copies = [[(self.halo[k][rows], packed(r, k)[rows]) for rows, r in copies] for k in (0, 1)]
            self.merges = [[(at, mask, packed(r, k)) for at, mask, r in merges] for k in (0, 1)]
        # every neighbour both ways: a rank overwrites its packed rows only after each rank that
        # reads them has signalled a later call (the Wilson stencil's neighbours come in pairs, but
        # the signals do not rely on it)
        peers = sorted({r for _, r in copies if r != me} | {r for _, _, r in merges}
                       | {g[2] for p in plan.active for g in plan.points[p].groups})
        self.signals = comm.signals(peers, peers, TAG)
        remote = sum(index_rows(rows) for rows, r in copies if r != me) + sum(
            index_rows(at) for at, _, _ in merges)
        self.bytes = remote * row * dtype.itemsize
        self.transfers = sum(1 for _, r in copies if r != me) + len(merges)
        self._t0 = 0.0

    def next(self):
        """The packed rows and halo (0 or 1) this call writes and reads."""
        k = self.calls & 1
        self.calls += 1
        return k

    def post(self):
        """This rank's rows packed: order the writes and signal every neighbour."""
        self.segments.sync()
        self._t0 = time.perf_counter()
        self.signals.start()
        st = self.comm.stats
        st.shared_bytes += self.bytes
        st.shared_transfers += self.transfers
        st.exchanges += 1

    def complete(self, k):
        """Wait for every neighbour's signal, then fill the halo from their packed rows (nothing to
        do where the kernel reads them in place): ``halo[k]`` may be read after it."""
        signals, st = self.signals, self.comm.stats
        if signals.test():
            blocked = 0.0
        else:
            t = time.perf_counter()
            signals.wait()
            blocked = time.perf_counter() - t
        self.segments.sync()
        for dest, src in self.copies[k]:
            dest[...] = src
        halo = self.halo[k]
        for rows, mask, src in self.merges[k]:
            merge_lanes(halo, rows, mask, src[rows])
        st.comm_s += time.perf_counter() - self._t0
        st.exposed_s += blocked
