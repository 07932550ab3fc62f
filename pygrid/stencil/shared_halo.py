"""A halo that the neighbouring ranks of the node write straight into this rank's memory.

Where every rank's neighbours share its node (``Communicator.node_ranks``), the halo rows need
not be messages.  Every rank's halo array lives in a segment of an MPI shared
window (:class:`pygrid.communicator.shared.SharedSegments`), and a rank packs its face rows for
rank ``me - Delta`` directly into that rank's halo, at the rows where the message would have
landed: the packed order of the faces is the halo's order on every rank, as every rank has the
same layout.  A zero-byte message to each rank written to, and one from each rank that writes
here, says the rows are complete (:class:`pygrid.communicator.shared.Signals`).

Two halo arrays, used on alternate calls, let a rank write the next call's rows while its
neighbour may still read the last ones.  The call after that writes the first array again; by
then this rank has received the neighbour's signal of the call in between, which the neighbour
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
    """This rank's two halo arrays in the node's shared memory (``halo[k]``, (nhalo, *row_shape)),
    and where each call's rows go: ``targets[k]``, (first row, end row, the flat rows they are
    written to) for each run of consecutive points written to one rank.

    A point whose face rows hold lanes of two ranks (a SIMD dimension split over ranks) is packed
    into this rank's own halo, as the lanes that stay; after the pack its remote rows are copied
    to each neighbour's receive rows (``post``), and the neighbours' rows merged into the halo by
    lane (``complete``), as the message path does with received rows.

    A call takes ``k = next()``, writes its targets, ``post(k)``s, and ``complete(k)``s before it
    reads ``halo[k]``."""

    def __init__(self, plan, row_shape, dtype):
        comm = plan.comm
        node = comm.node_ranks()
        me = comm.rank
        dtype = np.dtype(dtype)
        row_shape = tuple(row_shape)
        row = int(np.prod(row_shape))
        runs, sends, merges, extra = [], [], [], 0   # extra: receive rows of the merged faces
        for p in plan.active:
            pt = plan.points[p]
            to = pt.groups[0][2] if pt.direct else me
            if runs and runs[-1][2] == to and runs[-1][1] == pt.offset:
                runs[-1][1] += pt.nface
            else:
                runs.append([pt.offset, pt.offset + pt.nface, to])
            if pt.direct:
                continue
            for kidx, mask, to, frm in pt.groups:
                rows = (slice(pt.offset + kidx.start, pt.offset + kidx.stop) if isinstance(kidx, slice)
                        else pt.offset + kidx)
                n = index_rows(kidx)
                sends.append((rows, extra, n, to))
                merges.append((rows, mask, extra, n, frm))
                extra += n
        n, m = plan.nhalo * row, extra * row
        self.comm, self.calls = comm, 0
        self.segments = comm.shared_segments((2 * n + 2 * m) * dtype.itemsize)

        def flat(rank):
            return self.segments.segment(node[rank]).view(dtype)

        def received(rank, k, at, count):   # receive rows of the merged faces
            start = 2 * n + k * m + at * row
            return flat(rank)[start:start + count * row].reshape((count,) + row_shape)

        self.halo = [flat(me)[k * n:(k + 1) * n].reshape((plan.nhalo,) + row_shape) for k in (0, 1)]
        self.targets = [[(a, b, flat(to)[k * n + a * row:k * n + b * row]) for a, b, to in runs]
                        for k in (0, 1)]
        self.sends = [[(rows, received(to, k, at, c)) for rows, at, c, to in sends] for k in (0, 1)]
        self.merges = [[(rows, mask, received(me, k, at, c)) for rows, mask, at, c, _ in merges]
                       for k in (0, 1)]
        to = {r for _, _, r in runs if r != me} | {s[3] for s in sends}
        frm = {pt.groups[0][3] for pt in (plan.points[p] for p in plan.active) if pt.direct}
        frm |= {g[4] for g in merges}
        self.signals = comm.signals(sorted(to), sorted(frm), TAG)
        self.bytes = (sum(b - a for a, b, r in runs if r != me) + extra) * row * dtype.itemsize
        self.writes = sum(1 for r in runs if r[2] != me) + len(sends)
        self._t0 = 0.0

    def next(self):
        """The halo array (0 or 1) this call writes and reads."""
        k = self.calls & 1
        self.calls += 1
        return k

    def post(self, k):
        """The rows written: copy the remote lanes of merged faces to the neighbours, order the
        writes, and signal every rank written to."""
        halo = self.halo[k]
        for rows, dest in self.sends[k]:
            if isinstance(rows, slice):
                dest[...] = halo[rows]
            else:
                np.take(halo, rows, axis=0, out=dest)
        self.segments.sync()
        self._t0 = time.perf_counter()
        self.signals.start()
        st = self.comm.stats
        st.shared_bytes += self.bytes
        st.shared_writes += self.writes
        st.exchanges += 1

    def complete(self, k):
        """Wait for every neighbour's signal, then merge their lanes of merged faces: this rank's
        halo of the call may be read after it."""
        signals, st = self.signals, self.comm.stats
        if signals.test():
            blocked = 0.0
        else:
            t = time.perf_counter()
            signals.wait()
            blocked = time.perf_counter() - t
        self.segments.sync()
        halo = self.halo[k]
        for rows, mask, buf in self.merges[k]:
            merge_lanes(halo, rows, mask, buf)
        st.comm_s += time.perf_counter() - self._t0
        st.exposed_s += blocked
