"""The hand-unrolled hopping term on a lattice split over ranks, as one call of its launches.

A call packs the face half spinors for the neighbouring ranks, computes the interior sites while
they travel, then the boundary sites from the halo (:func:`pygrid.qcd.unrolled_launch.run_unrolled`).
The halo goes one of two ways:

* through the node's shared memory (:mod:`pygrid.stencil.shared_halo`) where every rank's
  neighbours share its node: the pack writes the rows into this rank's own shared memory, the
  neighbours read them there, and the interior runs as one launch, since there is nothing for
  MPI to move meanwhile;
* as MPI messages otherwise: the interior runs in pieces, with a test between them, because MPI
  moves data only inside its calls.

A :class:`SplitHop` holds the call's launches, each bound to its arguments: made once for a kept
call (``bind_unrolled``), whose next calls run no other Python; made for the one call on the
checked path, with launches looked up by the launch state.  Ctrl-C is deferred while a call runs
(:func:`pygrid.memory.interrupts.defer_in`): one rank left halfway would leave its neighbours
waiting for its rows.
"""
from __future__ import annotations

import functools
import time

from ..accelerator.host import read_only
from ..memory import interrupts

interrupts.defer_in(__file__)


class SplitHop:
    """One hop on a lattice split over ranks, its launches bound: ``packs[k]`` the face rows of
    halo array ``k`` (one array on the message path), ``pieces`` the interior, ``boundary[k]`` the
    boundary sites reading halo array ``k``.  Calling it runs the hop."""

    __slots__ = ("st", "shared", "packs", "pieces", "boundary", "stats", "held")

    def __init__(self, st, packs, pieces, boundary, held):
        self.st, self.shared, self.stats = st, st.shared, st.stencil.plan.comm.stats
        self.packs, self.pieces, self.boundary = packs, pieces, boundary
        self.held = held  # the launches' arguments: a bound launch holds them weakly

    def __call__(self):
        stats = self.stats
        t = time.perf_counter()
        shared = self.shared
        if shared is not None:
            k = shared.next()
            for launch in self.packs[k]:
                launch()
            stats.pack_s += time.perf_counter() - t
            shared.post()
            for launch in self.pieces:
                launch()
            shared.complete(k)
            self.boundary[k]()
            return
        self.packs[0][0]()
        st = self.st
        exchange = st.stencil.plan.start(st.packed, st.halo)
        stats.pack_s += time.perf_counter() - t
        for launch in self.pieces:
            launch()
            exchange.test()
        exchange.wait()
        self.boundary[0]()


def _nothing():
    pass


def split_hop(backend, st, args, interior, boundary, link_halo, tables, dag, kept=False):
    """The :class:`SplitHop` of the launch state ``st`` (``unrolled_launch._LaunchState``) for the
    kernel arguments ``args`` (before ``sites, halo, ubh``), the kernels ``interior`` and
    ``boundary`` (the latter with the halo branches), the links of the halo ``link_halo`` (whole),
    the compressed links' phase tables ``tables`` (or ()) and the adjoint or not (``dag``).
    ``kept``: each launch bound once (``backend.bind_kernel``), for a call that runs again on the
    same buffers; else looked up by ``st.launcher`` for this call."""
    held = []
    if kept:
        def bind(kernel, a, n):
            held.append(a)
            return functools.partial(backend.bind_kernel(kernel, *a).again, n) if n else _nothing
    else:
        def bind(kernel, a, n):
            return functools.partial(st.launcher(backend, kernel, a), n, *a) if n else _nothing

    psi, Ls = args[1], st.Ls
    links = read_only(link_halo.reshape(-1))
    nb = len(st.boundary)
    sh = st.shared
    if sh is not None:
        packs = [[bind(st.pack, (psi, rows, mus, signs[dag], Ls, dest), len(rows))
                  for (rows, mus, signs), (_, _, dest) in zip(st.pack_runs, sh.targets[k])] for k in (0, 1)]
        halos = st.shared_halos
        pieces = [bind(interior, args + (st.interior, halos[0], links) + tables, len(st.interior))]
        ends = [bind(boundary, args + (st.boundary, halos[k], links) + tables, nb) for k in (0, 1)]
        return SplitHop(st, packs, pieces, ends, held)
    halo = read_only(st.halo_flat)
    packs = [[bind(st.pack, (psi, st.rows, st.mus, st.signs[dag], Ls, st.packed_flat), len(st.rows))]]
    pieces = [bind(interior, args + (part, halo, links) + tables, len(part)) for part in st.pieces]
    ends = [bind(boundary, args + (st.boundary, halo, links) + tables, nb)]
    return SplitHop(st, packs, pieces, ends, held)
