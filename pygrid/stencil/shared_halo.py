"""A halo that the neighbouring ranks of the node write straight into this rank's memory.

Where every rank's neighbours share its node (``Communicator.node_ranks``) and each point's face
travels whole (a :class:`pygrid.stencil.halo.PointHalo` that is ``direct``: no lanes merged), the
halo rows need not be messages.  Every rank's halo array lives in a segment of an MPI shared
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

#: the tag of the signals (the halo messages use ``64 * point + group``, below 64 * 64)
TAG = 30001


def shared_halo(plan, row_shape, dtype):
    """The :class:`SharedHalo` of ``plan`` for halo rows of ``row_shape`` and ``dtype``, made once
    per plan (a collective call on the plan's communicator the first time), or None where the
    rows must travel as messages: some rank has a neighbour on another node, or a face whose
    lanes are merged."""
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
            pt = plan.points[p]
            ok = ok and pt.direct and all(to in node and frm in node for _, _, to, frm in pt.groups)
        hit = plan._shared_usable = bool(comm.max(0 if ok else 1) == 0)
    return hit


class SharedHalo:
    """This rank's two halo arrays in the node's shared memory (``halo[k]``, (nhalo, *row_shape)),
    where each call's rows go to (``targets[k]``: (first row, end row, the flat rows of the
    rank they go to) for each run of consecutive points written to one rank), and the signals.
    A call takes ``k = next()``, writes its targets, ``post()``s, and ``complete()``s before it
    reads ``halo[k]``."""

    def __init__(self, plan, row_shape, dtype):
        comm = plan.comm
        node = comm.node_ranks()
        dtype = np.dtype(dtype)
        row = int(np.prod(row_shape))
        n = plan.nhalo * row
        self.comm, self.calls = comm, 0
        self.segments = comm.shared_segments(2 * n * dtype.itemsize)

        def rows(rank, k):
            return self.segments.segment(node[rank]).view(dtype)[k * n:(k + 1) * n]

        self.halo = [rows(comm.rank, k).reshape((plan.nhalo,) + tuple(row_shape)) for k in (0, 1)]
        runs = []   # [first row, end row, rank]
        for p in plan.active:
            pt = plan.points[p]
            to = pt.groups[0][2]
            if runs and runs[-1][2] == to and runs[-1][1] == pt.offset:
                runs[-1][1] += pt.nface
            else:
                runs.append([pt.offset, pt.offset + pt.nface, to])
        self.targets = [[(a, b, rows(to, k)[a * row:b * row]) for a, b, to in runs] for k in (0, 1)]
        to = sorted({r for _, _, r in runs})
        frm = sorted({pt.groups[0][3] for pt in (plan.points[p] for p in plan.active)})
        self.signals = comm.signals(to, frm, TAG)
        self.bytes = n * dtype.itemsize
        self.writes = len(runs)
        self._t0 = 0.0

    def next(self):
        """The halo array (0 or 1) this call writes and reads."""
        k = self.calls & 1
        self.calls += 1
        return k

    def post(self):
        """The rows written: order the writes, and signal every rank written to."""
        self.segments.sync()
        self._t0 = time.perf_counter()
        self.signals.start()
        st = self.comm.stats
        st.shared_bytes += self.bytes
        st.shared_writes += self.writes
        st.exchanges += 1

    def complete(self):
        """Wait for every neighbour's signal; this rank's halo of the call may be read after it."""
        signals, st = self.signals, self.comm.stats
        if signals.test():
            blocked = 0.0
        else:
            t = time.perf_counter()
            signals.wait()
            blocked = time.perf_counter() - t
        self.segments.sync()
        st.comm_s += time.perf_counter() - self._t0
        st.exposed_s += blocked
