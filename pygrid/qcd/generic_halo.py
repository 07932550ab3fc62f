"""The spinor halo of the generic Dirac kernel on a lattice split over ranks.

Each rank projects its face rows to half spinors where its fields live, with the
generated :data:`pygrid.qcd.kernels_generic.WILSON_PACK` (on the device for a GPU
or the SYCL device), brings that packed array to the host, and exchanges it with
its neighbours by MPI (:meth:`pygrid.stencil.halo.HaloPlan.start`).  The
hopping kernels read the halo's rows as projected half spinors: a face row
crosses the device's bus and the network as 6 complex numbers a slice, not 12.

The packed and halo arrays are kept from call to call with the plan's tables,
per backend (a fresh array of their size would page-fault on every call).  On a
device backend the pack writes into a device array kept likewise, copied to the
host after it (:meth:`pygrid.accelerator.contract.Backend.copy_to_host`), the
host arrays are the backend's
(:meth:`~pygrid.accelerator.contract.Backend.host_array`: page-locked on a GPU),
and the links' halo an operator keeps is copied to the device once.
"""
from __future__ import annotations

import time
import weakref

import numpy as np

from ..accelerator.host import read_only
from . import kernels_generic as kg
from .halo_faces import face_tables, packed_arrays


class GenericHalo:
    """The face rows of ``plan`` (a :class:`pygrid.stencil.halo.HaloPlan`) for 5D fields of ``Ls``
    slices (1 in 4D), their directions and projector signs, and the host arrays they travel in."""

    def __init__(self, plan, Ls, nsimd, dtype):
        # the plan held weakly: this object lives in a table keyed by it, until it dies
        self.plan, self.Ls, self.nsimd, self.dtype = weakref.ref(plan), int(Ls), int(nsimd), np.dtype(dtype)
        rows, mus, signs = face_tables(plan, self.dtype)
        self.rows, self.mus = read_only(rows), read_only(mus)
        self.signs = {dag: read_only(s) for dag, s in signs.items()}
        self._links = {}  # (backend, link halo) ids -> (backend, the link halo's weak ref, its device copy)
        self._arrays = {}  # backend id -> its _Arrays
        self._exchange = None  # (the backend's _Arrays, the messages in flight) between start and finish

    def arrays(self, backend):
        """The packed rows and the halo of ``backend``, on the host and where its kernels use them."""
        hit = self._arrays.get(id(backend))
        if hit is None or hit.backend is not backend:
            hit = self._arrays[id(backend)] = _Arrays(backend, self.plan(), self.Ls, self.nsimd, self.dtype)
        return hit

    def start(self, backend, psi, dag):
        """Pack the halo of ``psi`` (the buffer the hop reads, on ``backend``) for Dhop or, ``dag``,
        its adjoint, and post its messages; :meth:`finish` completes them."""
        t = time.perf_counter()
        a = self.arrays(backend)
        backend.launch(kg.WILSON_PACK, dict(packed=a.device_packed, psi=psi, rows=self.rows, mus=self.mus,
                                            signs=self.signs[bool(dag)], nrows=len(self.rows), Ls=self.Ls),
                       self.nsimd, self.dtype)
        backend.copy_to_host(a.device_packed, a.packed_rows)
        plan = self.plan()
        plan.comm.stats.pack_s += time.perf_counter() - t
        self._exchange = (a, plan.start(a.packed, a.halo))

    def finish(self):
        """The halo :meth:`start` posted, completed: ``(nhalo * Ls, 6, 2, nsimd)`` rows where the
        backend's kernels read them (on its device), valid until the next :meth:`start`."""
        a, exchange = self._exchange
        self._exchange = None
        exchange.wait()
        a.backend.copy_from_host(a.device_halo, a.halo_rows)
        return a.device_halo

    def links(self, backend, link_halo):
        """``link_halo``, the host rows of the halo's links (an operator's, kept unchanged until its
        gauge field is written, when it makes a new array), as ``backend``'s kernels read it: copied
        to its device once (:meth:`pygrid.accelerator.contract.Backend.device_copy`), not at every
        launch.  A copy lives as long as its host array (the operator's, until its links change)."""
        key = (id(backend), id(link_halo))
        hit = self._links.get(key)
        if hit is None or hit[0] is not backend or hit[1]() is not link_halo:
            dev = backend.device_copy(link_halo)
            if dev is link_halo:  # the backend's kernels read host arrays: nothing to keep
                return dev
            hit = self._links[key] = (backend, weakref.ref(link_halo), dev)
            weakref.finalize(link_halo, self._links.pop, key, None)
        return hit[2]


class _Arrays:
    """One backend's arrays of a :class:`GenericHalo`: the packed face rows and the halo on the
    host (the backend's :meth:`~pygrid.accelerator.contract.Backend.host_array`; ``packed`` and
    ``halo`` as :meth:`pygrid.stencil.halo.HaloPlan.start` takes them, ``packed_rows`` and
    ``halo_rows`` a row a slice as the kernels read them), and where its kernels use them."""

    def __init__(self, backend, plan, Ls, nsimd, dtype):
        self.backend = backend
        packed, self.packed, self.halo = packed_arrays(plan, (Ls, 6, 2, nsimd), dtype, backend.host_array)
        self.packed_rows = packed.reshape(-1, 6, 2, nsimd)
        self.halo_rows = self.halo.reshape(-1, 6, 2, nsimd)
        self.device_packed = backend.device_copy(self.packed_rows)
        self.device_halo = backend.device_copy(self.halo_rows)


_halos = {}


def generic_halo(plan, Ls, nsimd, dtype):
    """The :class:`GenericHalo` of ``plan``, kept per (plan, Ls, nsimd, dtype) while the plan lives."""
    key = (id(plan), int(Ls), int(nsimd), np.dtype(dtype).char)
    hit = _halos.get(key)
    if hit is None or hit.plan() is not plan:
        hit = _halos[key] = GenericHalo(plan, Ls, nsimd, dtype)
        weakref.finalize(plan, _halos.pop, key, None)
    return hit
