"""Links read as the first two rows of each SU(3) matrix (QUDA's 12-real links).

A link ``U' = z U`` (U in SU(3), |z| = 1: a boundary phase or a twist) has the third row
``det(U') conj(row0 x row1)``, so the hop on fields larger than the caches reads 12 of its 18 reals
and rebuilds the rest (the ``compressed`` kernels of :mod:`pygrid.qcd.kernels_wilson` and
:data:`pygrid.qcd.kernels_generic.WILSON_HOP_LOCAL_C`).  :func:`compress_links` makes the rows and
their phase tables, checking every rebuilt row; :class:`CompressedLinks` holds them for a hop;
:func:`compression_pays` says where reading them compressed is faster.
"""
from __future__ import annotations

import numpy as np

from ..accelerator.caches import scaled
from ..errors import ConformabilityError
from . import link_rows
from .kernels_wilson import field_bytes

#: 4D fields (spinor in and out, the links read) of more bytes than this read their links compressed
#: (:func:`compression_pays`).  Set by the Schur CG, where the solver's vectors share the caches
#: with the hop's fields: AVX-512 machine, 2026-11-30, alternating processes (`bench_solvers.py
#: --operators wilson [--compress-links]`, three each), ms an iteration, compressed against whole
#: (the even-odd hop's fields in brackets): 12^4 double (16 MB) 1.45-1.62 against 1.65-1.85,
#: 12^3 x 16 double (21 MB) 2.35-2.46 against 2.62-2.67, 12^2 x 16^2 single (14 MB) 1.19-1.23
#: against 1.22-1.39; 12^4 single (8 MB) 0.63-0.66 against 0.54-0.55, 8^4 double (3 MB) 0.32-0.33
#: against 0.28.  A hop on its own keeps more of the caches (the full-grid hop of 12^4 double, 20
#: MB, ran 0.94-0.97x compressed on 2026-11-28, and at 16^4 single 0.92x with the accumulators
#: pinned), but inside the solve 16^4 single ran its iteration 1.08x faster compressed.
COMPRESS_BYTES = 12 << 20


#: most distinct phase vectors (a lane vector each) that compressed links may carry: the boundary
#: phases and twists of a fermion give a few (per direction: one inside, one on the edge, and the
#: lane patterns of an edge that a SIMD-split direction spreads over the lanes)
MAX_PHASES = 64


def compress_links(links, rtol=32.0):
    """The links of the host buffers ``links`` (each shaped (osites, 36, 2, nsimd), one lattice's
    links per buffer) stored as their first two rows, for the kernel of ``compressed=True``; None
    where a link is not an SU(3) matrix times a phase.

    A link ``U' = z U`` (U in SU(3), |z| = 1: a boundary phase or a twist on an SU(3) link) has the
    third row ``det(U') conj(row0 x row1)``, so the kernel reads 12 of its 18 reals and rebuilds the
    rest.  The phases ``det(U')`` are grouped into lane vectors (one per outer site and direction),
    of which a field has a few: ``ztab`` (shaped (K, 2, nsimd), re and im; row 0 is 1, which the
    kernel does not read) and, per buffer, ``zi`` (int32, ``4 * osite + mu``) the row of each.
    Every third row rebuilt from what is kept is checked against the stored one, to ``rtol``
    times the precision's epsilon: links that are not unitary to their precision (smeared,
    random complex matrices) return None, and the kernel reads them whole.

    The rows are stored direction by direction, shaped (4, osites, 6, 2, nsimd): the link of
    direction mu that the kernel reads backward at a site's neighbour then lies in a stream of that
    direction's links alone, a few slices behind the forward one (read from one array of four links a
    site, it lies four times further back; the kernel ran 1.08-1.19x in double at 16^4 and 24^4 this
    way, the even-odd hop 1.09-1.30x, AVX-512 and AVX2 code; docs/performance.md, "Links read
    compressed").

    Returns ``([(rows, zi) per buffer], ztab)``.
    """
    dtype = links[0].dtype
    W = links[0].shape[3]
    tol = rtol * float(np.finfo(dtype).eps)
    for buf in links:
        if buf.ndim != 4 or buf.shape[1:3] != (36, 2) or buf.dtype != dtype or buf.shape[3] != W:
            raise ConformabilityError(f"compress_links: a link buffer shaped {buf.shape} {buf.dtype}; "
                                      f"expected (n, 36, 2, {W}) {dtype}")
    starts = np.cumsum([0] + [4 * len(buf) for buf in links])
    f = np.empty((starts[-1], W), np.complex128)
    for buf, at in zip(links, starts):
        link_rows.link_dets(buf, f, at)
    if not np.all(np.isfinite(f)):
        return None
    # the phases grouped greedily, each group's vector the first met (row 0 is 1 exactly: the
    # kernel skips it), to within the tolerance of the check below
    table = [np.ones(W, np.complex128)]
    index = np.full(len(f), -1, np.int64)
    while True:
        index[(index < 0) & np.all(np.abs(f - table[-1]) <= tol, axis=1)] = len(table) - 1
        left = np.flatnonzero(index < 0)
        if not len(left):
            break
        if len(table) == MAX_PHASES:
            return None
        table.append(f[left[0]])
    table = np.array(table)
    planes = np.ascontiguousarray(np.stack([table.real, table.imag], axis=1))
    out = []
    for buf, at in zip(links, starts):
        rows = np.empty((4, len(buf), 6, 2, W), dtype)
        if not link_rows.pack_rows(buf, index, at, planes, rows) <= tol:
            return None
        out.append((rows, np.ascontiguousarray(index[at:at + 4 * len(buf)], np.int32)))
    ztab = np.ascontiguousarray(np.stack([table.real, table.imag], axis=1), dtype)
    return out, ztab


class CompressedLinks:
    """The links a hop reads (``uf`` at the output sites, ``ub`` at the source sites) as their first
    two rows, with their phase tables (:func:`compress_links`): what ``links_c`` of
    :func:`run_unrolled` takes.  Made by :meth:`of`."""

    __slots__ = ("uf", "ub", "zif", "zib", "ztab", "_copies", "__weakref__")
    #: rows of each link stored
    rows = 2

    def __init__(self, uf, ub, zif, zib, ztab, copies=None):
        self.uf, self.ub, self.zif, self.zib, self.ztab = uf, ub, zif, zib, ztab
        # the device copies of the arrays (device_copy), per backend; shared with the swapped twin
        self._copies = {} if copies is None else copies

    @classmethod
    def of(cls, uf, ub):
        """The compressed links of the host buffers ``uf`` and ``ub`` (the same on a full grid), or
        None where a link is not an SU(3) matrix times a phase."""
        bufs = [uf] if ub is uf else [uf, ub]
        made = compress_links(bufs)
        if made is None:
            return None
        rows, ztab = made
        (cf, zf), (cb, zb) = rows[0], rows[-1]
        return cls(cf, cb, zf, zb, ztab)

    def swapped(self):
        """The same compressed links for the hop that reads ``ub`` forward and ``uf`` backward (the
        even-odd hop from the other checkerboard), sharing the arrays."""
        return CompressedLinks(self.ub, self.uf, self.zib, self.zif, self.ztab, self._copies)

    def tables(self):
        """The kernel's last arguments."""
        return self.zif, self.zib, self.ztab

    def on(self, backend):
        """The arguments of the generic kernel on compressed links
        (:data:`pygrid.qcd.kernels_generic.WILSON_HOP_LOCAL_C`) on ``backend``: the rows and the
        phase table as field buffers, copied to its device once (:meth:`device_copy`)."""
        W = self.uf.shape[-1]

        def put(a, shape):
            key = (id(backend), id(a))
            hit = self._copies.get(key)
            if hit is None or hit[0] is not backend:
                hit = self._copies[key] = (backend, backend.device_copy(a.reshape(shape)))
            return hit[1]

        return dict(ufc=put(self.uf, (-1, 6, 2, W)), ubc=put(self.ub, (-1, 6, 2, W)), zif=self.zif,
                    zib=self.zib, ztab=put(self.ztab, (-1, 1, 2, W)), nuf=self.uf.shape[1],
                    nub=self.ub.shape[1])


def compression_pays(n4, nsimd, dtype, Ls=1, links=4):
    """Whether the hop on fields of ``n4`` 4D outer sites, reading ``links`` links a site from memory
    (4 on a full grid, where a link read forward at its site is read backward at a neighbour; 8 for
    the even-odd hop, whose forward and backward links are of the two checkerboards), reads its links
    compressed: 4D fields of more than ``COMPRESS_BYTES`` (scaled to the cache the kernels' threads
    reach, :func:`pygrid.accelerator.caches.scaled`).  Where the fields fit the caches the
    arithmetic that rebuilds the third rows costs more than the bytes it saves (docs/performance.md,
    "Links read compressed")."""
    return int(Ls) == 1 and field_bytes(n4, Ls, nsimd, dtype, links) > scaled(COMPRESS_BYTES)


class LinksByDirection:
    """The links a hop reads (``uf`` at the output sites, ``ub`` at the source sites) whole but
    stored direction by direction, shaped (4, osites, 9, 2, nsimd) as the compressed ones are: for
    the hand-unrolled kernel's tiled order on fields in the caches, where each pass over a tile
    reads one direction's links (``kernels_wilson.BY_DIRECTION``).  What ``links_c`` of
    :func:`pygrid.qcd.unrolled_launch.run_unrolled` takes, with :class:`CompressedLinks`' interface
    but no phase tables (the kernel reads none).  Made by :meth:`of`."""

    __slots__ = ("uf", "ub", "_tables", "__weakref__")
    #: rows of each link stored
    rows = 3

    def __init__(self, uf, ub, tables=None):
        self.uf, self.ub = uf, ub
        if tables is None:  # the kernel's signature's tables, never read
            W = uf.shape[-1]
            zi = np.zeros(4, np.int32)
            tables = (zi, zi, np.ones((1, 2, W), uf.dtype))
        self._tables = tables

    @staticmethod
    def _by_direction(buf):
        n, W = buf.shape[0], buf.shape[3]
        return np.ascontiguousarray(buf.reshape(n, 4, 9, 2, W).transpose(1, 0, 2, 3, 4))

    @classmethod
    def of(cls, uf, ub):
        """The links of the host buffers ``uf`` and ``ub`` (each shaped (osites, 36, 2, nsimd); the
        same on a full grid) stored direction by direction."""
        for buf in (uf, ub):
            if buf.ndim != 4 or buf.shape[1:3] != (36, 2):
                raise ConformabilityError(f"LinksByDirection: a link buffer shaped {buf.shape}; "
                                          "expected (n, 36, 2, nsimd)")
        f = cls._by_direction(uf)
        return cls(f, f if ub is uf else cls._by_direction(ub))

    def swapped(self):
        """The same links for the hop that reads ``ub`` forward and ``uf`` backward, sharing the
        arrays."""
        return LinksByDirection(self.ub, self.uf, self._tables)

    def tables(self):
        """The kernel's last arguments (not read)."""
        return self._tables
