"""The spinor halo of the generic Dirac kernel on a lattice split over ranks.

Each rank projects its face rows to half spinors where its fields live, with the
generated :data:`pygrid.qcd.kernels_generic.WILSON_PACK` (on the device for a GPU
or the SYCL device), brings that packed array to the host, and exchanges it with
its neighbours by MPI (:meth:`pygrid.stencil.halo.HaloPlan.start`).  The
hopping kernels read the halo's rows as projected half spinors: a face row
crosses the device's bus and the network as 6 complex numbers a slice, not 12.

The packed and halo arrays are the host's, kept from call to call with the
plan's tables (a fresh array of their size would page-fault on every call).
"""
from __future__ import annotations

import time

import numpy as np

from ..accelerator.host import read_only
from . import kernels_generic as kg


class GenericHalo:
    """The face rows of ``plan`` (a :class:`pygrid.stencil.halo.HaloPlan`) for 5D fields of ``Ls``
    slices (1 in 4D), their directions and projector signs, and the host arrays they travel in."""

    def __init__(self, plan, Ls, nsimd, dtype):
        self.plan, self.Ls, self.nsimd, self.dtype = plan, int(Ls), int(nsimd), np.dtype(dtype)
        faces = [(p, pt) for p, pt in enumerate(plan.points) if pt.nface]
        self.rows = read_only(np.concatenate([pt.rows for _, pt in faces]).astype(np.int32))
        self.mus = read_only(np.concatenate([np.full(pt.nface, p % 4, np.int32) for p, pt in faces]))
        fwd = np.concatenate([np.full(pt.nface, p < 4) for p, pt in faces])
        # the hop's projector signs: (forward, backward) = (-1, +1) for Dhop, (+1, -1) for its adjoint
        self.signs = {dag: read_only(np.where(fwd, s, -s).astype(self.dtype))
                      for dag, s in ((False, -1.0), (True, 1.0))}
        row = (self.Ls, 6, 2, self.nsimd)
        packed = np.empty((len(self.rows),) + row, self.dtype)
        self.packed_sites = packed.reshape(-1, 6, 2, self.nsimd)  # the kernel's view: a row per slice
        self.packed, at = [packed[:0]] * len(plan.points), 0
        for p, pt in faces:
            self.packed[p] = packed[at:at + pt.nface]
            at += pt.nface
        self.halo = np.empty((plan.nhalo,) + row, self.dtype)
        self.halo_sites = self.halo.reshape(-1, 6, 2, self.nsimd)

    def exchange(self, backend, psi, dag):
        """The halo of ``psi`` (the buffer the hop reads, on ``backend``) for Dhop or, ``dag``, its
        adjoint, completed: ``(nhalo * Ls, 6, 2, nsimd)`` host rows, as the kernels read them."""
        t = time.perf_counter()
        backend.launch(kg.WILSON_PACK, dict(packed=self.packed_sites, psi=psi, rows=self.rows, mus=self.mus,
                                            signs=self.signs[bool(dag)], nrows=len(self.rows), Ls=self.Ls),
                       self.nsimd, self.dtype)
        self.plan.comm.stats.pack_s += time.perf_counter() - t
        self.plan.start(self.packed, self.halo).wait()
        return self.halo_sites


_halos = {}


def generic_halo(plan, Ls, nsimd, dtype):
    """The :class:`GenericHalo` of ``plan``, kept per (plan, Ls, nsimd, dtype)."""
    key = (id(plan), int(Ls), int(nsimd), np.dtype(dtype).char)
    hit = _halos.get(key)
    if hit is None or hit.plan is not plan:
        if len(_halos) > 64:
            _halos.clear()
        hit = _halos[key] = GenericHalo(plan, Ls, nsimd, dtype)
    return hit
