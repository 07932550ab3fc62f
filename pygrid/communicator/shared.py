"""Memory the ranks of one node share, through MPI-3 shared-memory windows, and the zero-byte
messages that say when it may be read.

A halo that travels as a message between two ranks of one node is copied by MPI through its own
shared-memory queues, on the ranks' threads, inside their MPI calls: at 8^4 a rank's Dirac call
spent 50 us of its 250 in MPI's tests and wait.  In a window allocated by
``MPI_Win_allocate_shared`` on the node's communicator every rank of the node can load and store
every other's segment directly; a rank writes its halo rows into its own segment, its neighbours
read them there, and a zero-byte message per neighbour (persistent requests, started every call)
orders the writes and the reads.  MPI still does all of it: the memory, the ordering (``MPI_Win_sync``
around each message) and the messages.

A window is freed collectively (``MPI_Win_free``); a garbage collector would free them at
different times on different ranks, so :class:`SharedSegments` are kept until the program ends.
"""
from __future__ import annotations

import atexit

import numpy as np

#: a segment's start on a page, so that the rows of every rank's segment sit on cache lines
PAGE = 4096

_KEPT = []  # every window made: freed with MPI at exit, never by a rank on its own
_SIGNALS = []  # every set of persistent requests, freed before MPI finalizes (which warns of them)


@atexit.register
def _free_signals():
    # registered after mpi4py's own exit handler (imported first), so this runs before it
    for s in _SIGNALS:
        s.free()
    _SIGNALS.clear()


class SharedSegments:
    """One segment of ``nbytes`` for each rank of the node, every one readable and writable by
    every rank of the node (a collective call over ``node``, the node's communicator).
    ``segment(i)`` is node rank ``i``'s segment as a uint8 array; ``sync()`` orders this rank's
    loads and stores on the window against the other ranks' (``MPI_Win_sync``), and must come
    between a write and the message that announces it, and between that message and the read."""

    def __init__(self, MPI, node, nbytes):
        size = max(PAGE, -(-int(nbytes) // PAGE) * PAGE)
        info = MPI.Info.Create()
        info.Set("alloc_shared_noncontig", "true")   # each rank's segment on its own pages
        self.win = MPI.Win.Allocate_shared(size, 1, info=info, comm=node)
        info.Free()
        self.win.Lock_all(MPI.MODE_NOCHECK)
        self.nbytes = int(nbytes)
        self._segments = []
        for i in range(node.Get_size()):
            mem, _ = self.win.Shared_query(i)
            a = np.frombuffer(mem, np.uint8)
            if a.ctypes.data % 64:
                raise RuntimeError(f"MPI placed node rank {i}'s shared segment off a cache line")
            self._segments.append(a[:self.nbytes])
        _KEPT.append(self)

    def segment(self, node_rank):
        return self._segments[node_rank]

    def sync(self):
        self.win.Sync()


class Signals:
    """Zero-byte messages to ``to`` and from ``frm`` (world ranks) on ``comm`` under ``tag``, as
    persistent requests: ``start()`` posts one each way for every rank listed, ``test()`` says
    whether all arrived, ``wait()`` blocks until they have."""

    def __init__(self, MPI, comm, to, frm, tag):
        self._MPI = MPI
        self._buf = np.zeros(1, np.uint8)
        self.reqs = [comm.Recv_init([self._buf, 0, MPI.BYTE], r, tag) for r in frm]
        self.reqs += [comm.Send_init([self._buf, 0, MPI.BYTE], r, tag) for r in to]
        self.active = False
        _SIGNALS.append(self)

    def free(self):
        if self.active:    # a call cut short: waiting at exit could wait forever
            return
        for r in self.reqs:
            r.Free()
        self.reqs = []

    def start(self):
        self._MPI.Prequest.Startall(self.reqs)
        self.active = True

    def test(self):
        if self.active and self._MPI.Request.Testall(self.reqs):
            self.active = False
        return not self.active

    def wait(self):
        if self.active:
            self._MPI.Request.Waitall(self.reqs)
            self.active = False
