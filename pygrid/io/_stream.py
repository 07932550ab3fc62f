"""Streaming a gauge field payload to and from a file in slabs of time slices, on one rank or many.

Reading: every rank reads its own block of sites straight from the file (a
filesystem every rank sees), in slabs of its local time slices, and
accumulates the checksums of its own sites; ``PayloadSums.combined`` then
combines them over the ranks.  Peak memory: the new field plus one slab
(default about 8 MB) of whole x rows of the rank's block.

Writing: rank 0 alone writes the file.  Slab by slab of whole global time
slices, every rank sends rank 0 its part of the slab (``payload_slabs``) and
rank 0 writes the slab in file order and accumulates its checksums, exactly as
on one rank, so the bytes do not depend on the decomposition.  Peak memory:
each rank its field plus its part of a slab; rank 0 also two slabs.
"""
from __future__ import annotations

import dataclasses
import math
import zlib

import numpy as np

from ._field import SliceReader, SliceWriter, new_gauge_field, reconstruct_third_row
from ._parallel import root_outcome
from .atomic import AtomicWriter
from .checksums import rotl32
from .errors import TruncatedFileError
from .progress import Progress

#: Target size of one slab of time slices in bytes (at least one slice is used).
SLAB_BYTES = 8 * 2 ** 20

#: Message tag of the slabs sent to rank 0 (halo exchanges use 64 * point + group, far below)
_SLAB_TAG = 30000


class Payload:
    """How the field is stored: ``dtype`` of one real (e.g. '>f8'), ``rows`` 2 or 3 per matrix."""

    def __init__(self, dtype, rows):
        self.dtype = np.dtype(dtype)
        self.rows = int(rows)
        self.site_reals = 4 * self.rows * 3 * 2
        self.site_bytes = self.site_reals * self.dtype.itemsize

    def nbytes(self, gdims):
        # exact integers: a header's dimensions may be anything, and an int64 product would wrap
        return math.prod(int(d) for d in gdims) * self.site_bytes

    @property
    def word_dtype(self):
        """32-bit words in the file's byte order (the NERSC checksum's unit)."""
        return np.dtype("u4").newbyteorder(self.dtype.byteorder)


def _slices_per_slab(slice_bytes, slab_bytes):
    return max(1, int(slab_bytes or SLAB_BYTES) // slice_bytes)


def _label(what, path, comm):
    return f"{what} {path}" if comm.size == 1 else f"{what} {path} (rank 0's part)"


# ---- reading ------------------------------------------------------------------

class PayloadSums:
    """Checksums of the sites this rank read: the NERSC word sum and, if ``scidac``, SciDAC suma/sumb.

    Both are defined site by site over global indices and combine over ranks:
    the NERSC sum by adding modulo 2**32, the SciDAC sums by XOR.
    """

    def __init__(self, payload, scidac):
        self.words = payload.word_dtype
        self.site_bytes = payload.site_bytes
        self.scidac = bool(scidac)
        self.nersc = self.suma = self.sumb = 0

    def add(self, data, sites):
        """``data``: bytes of consecutive stored sites, as in the file; ``sites``: their global indices."""
        self.nersc = (
            self.nersc + int(np.frombuffer(data, dtype=self.words).sum(dtype=np.uint64))
        ) & 0xFFFFFFFF
        if not self.scidac:
            return
        mv, sb = memoryview(data).cast("B"), self.site_bytes
        n = len(sites)
        crc = np.fromiter((zlib.crc32(mv[i * sb:(i + 1) * sb]) for i in range(n)), dtype=np.uint64, count=n)
        r = np.asarray(sites, dtype=np.uint64)
        if n:
            self.suma ^= int(np.bitwise_xor.reduce(rotl32(crc, r % np.uint64(29))))
            self.sumb ^= int(np.bitwise_xor.reduce(rotl32(crc, r % np.uint64(31))))

    def combined(self, comm):
        """(nersc, suma, sumb) over the sites of every rank: collective, the same on every rank."""
        parts = comm.allgather((self.nersc, self.suma, self.sumb)) if comm.size > 1 else [
            (self.nersc, self.suma, self.sumb)]
        nersc, suma, sumb = 0, 0, 0
        for n, a, b in parts:
            nersc, suma, sumb = (nersc + n) & 0xFFFFFFFF, suma ^ a, sumb ^ b
        return nersc, suma, sumb


def _read_exact(f, out, pos, end, total, path):
    """Fill the contiguous array ``out`` from byte ``pos`` of f; TruncatedFileError if the file ends first.

    ``end`` is the byte where the payload (``total`` bytes) ends.
    """
    mv = memoryview(out.reshape(-1).view(np.uint8))
    f.seek(pos)
    got = f.readinto(mv)
    while got < len(mv):
        more = f.readinto(mv[got:])
        if not more:
            raise TruncatedFileError(
                f"{path}: the file ends {end - pos - got} bytes before the end of its "
                f"{total}-byte payload (truncated copy or interrupted write?)")
        got += more


def _read_runs(grid, t, nt):
    """The contiguous file ranges covering this rank's block in global slices t..t+nt-1, as
    (index into the (nt, lz, ly, X) slab, first site, site count): whole x rows are read, so a
    rank whose block splits x reads the rows' other sites too and drops them."""
    X, Y, Z, _ = grid.gdims
    _, y0, z0, _ = grid.lstart
    _, ly, lz, _ = grid.ldims
    if ly == Y and lz == Z:  # whole slices: one range for the slab
        return [((slice(None),), t * Z * Y * X, nt * Z * Y * X)]
    if ly == Y:  # whole y-x planes: one range per slice
        return [((i,), ((t + i) * Z + z0) * Y * X, lz * Y * X) for i in range(nt)]
    return [((i, j), (((t + i) * Z + z0 + j) * Y + y0) * X, ly * X) for i in range(nt) for j in range(lz)]


def _site_indices(grid, t, nt):
    """Global lexicographic index of every site of this rank's block in slices t..t+nt-1,
    in (t, z, y, x) order."""
    X, Y, Z, _ = grid.gdims
    x0, y0, z0, _ = grid.lstart
    lx, ly, lz, _ = grid.ldims
    ts, zs = np.arange(t, t + nt)[:, None, None, None], np.arange(z0, z0 + lz)[None, :, None, None]
    ys, xs = np.arange(y0, y0 + ly)[None, None, :, None], np.arange(x0, x0 + lx)[None, None, None, :]
    return (((ts * Z + zs) * Y + ys) * X + xs).reshape(-1)


def read_payload(f, start, grid, payload, precision, sums, path="", progress=None, slab_bytes=None):
    """Read this rank's block of the payload that begins at byte ``start`` of f into a new
    LatticeGaugeField; returns the field.  ``sums`` (PayloadSums) gets the checksums of the
    block's sites.  Raises TruncatedFileError if the file ends early.

    Not collective by itself: the caller shares failures (``_parallel.on_every_rank``).
    """
    X, Y, Z, T = grid.gdims
    x0, _, _, t0 = grid.lstart
    lx, ly, lz, lt = grid.ldims
    sb = payload.site_bytes
    total = payload.nbytes(grid.gdims)
    k = _slices_per_slab(lz * ly * X * sb, slab_bytes)
    U = new_gauge_field(grid, precision)
    raw = np.empty((k, lz, ly, X, payload.site_reals), dtype=payload.dtype)
    mine = lt * lz * ly * X * sb
    prog = Progress(_label("reading", path, grid.comm), mine, progress if grid.comm.rank == 0 else False)
    done = 0
    try:
        with SliceWriter(U) as w:
            for tl in range(0, lt, k):
                nt = min(k, lt - tl)
                slab = raw[:nt]
                for idx, site, _n in _read_runs(grid, t0 + tl, nt):
                    _read_exact(f, slab[idx], start + site * sb, start + total, total, path)
                block = slab if lx == X else np.ascontiguousarray(slab[:, :, :, x0:x0 + lx])
                sums.add(memoryview(block.reshape(-1).view(np.uint8)),
                         _site_indices(grid, t0 + tl, nt) if sums.scidac else ())
                arr = block.reshape((nt, lz, ly, lx, 4, payload.rows, 3, 2))
                for i in range(nt):
                    # NaN and inf are data (checked, if at all, by the checksums): no floating-point warnings
                    with np.errstate(all="ignore"):
                        a = arr[i].astype(U.real_dtype)
                        if payload.rows == 2:
                            a = reconstruct_third_row(a)
                    w.put(tl + i, a)
                done += nt * lz * ly * X * sb
                prog.update(done)
    finally:
        prog.close()
    return U


# ---- writing ------------------------------------------------------------------

def _t_overlap(block, t0, nt):
    """The global slices a..b-1 that a rank's block (slices of x, y, z, t) shares with t0..t0+nt-1."""
    a, b = max(block[3].start, t0), min(block[3].stop, t0 + nt)
    return (a, b) if a < b else None


def _file_part(reader, grid, payload, a, b, out):
    """Fill ``out`` (b - a, lz, ly, lx, 4, rows, 3, 2) with this rank's slices a..b-1 in the file's type."""
    for t in range(a, b):
        out[t - a] = reader.get(t - grid.lstart[3])[..., :payload.rows, :, :]


def _as_bytes(a):
    return a.reshape(-1).view(np.uint8)


class _Untracked:
    """Keeps the slab messages out of the communicator's statistics, which count halo traffic."""

    def __init__(self, stats):
        self.stats = stats

    def __enter__(self):
        self.saved = dataclasses.asdict(self.stats)

    def __exit__(self, *exc):
        for k, v in self.saved.items():
            setattr(self.stats, k, v)
        return False


def payload_slabs(U, payload, slab_bytes=None):
    """The payload in file order, slab by slab of whole global time slices.

    Collective: every rank must run the generator to its end.  Rank 0 gets
    ``(t0, array (nt, Z, Y, X, 4, rows, 3, 2))`` in the file's real type (one
    buffer, reused: write it before the next step); the other ranks get
    ``(t0, None)`` after sending rank 0 their part of the slab.
    """
    g, comm = U.grid, U.grid.comm
    X, Y, Z, T = g.gdims
    lx, ly, lz, _ = g.ldims
    k = _slices_per_slab(X * Y * Z * payload.site_bytes, slab_bytes)
    site = (4, payload.rows, 3, 2)
    blocks = [g.block_of(r) for r in range(comm.size)]
    out = np.empty((k, Z, Y, X) + site, dtype=payload.dtype) if comm.rank == 0 else None
    with SliceReader(U) as reader, _Untracked(comm.stats):
        for t0 in range(0, T, k):
            nt = min(k, T - t0)
            if comm.rank == 0:
                _gather_slab(reader, g, payload, blocks, t0, nt, out)
                yield t0, out[:nt]
                continue
            ab = _t_overlap(blocks[comm.rank], t0, nt)
            if ab is not None:
                part = np.empty((ab[1] - ab[0], lz, ly, lx) + site, dtype=payload.dtype)
                _file_part(reader, g, payload, *ab, part)
                comm.exchange([(_as_bytes(part), 0, _SLAB_TAG)], []).wait()
            yield t0, None


def _gather_slab(reader, grid, payload, blocks, t0, nt, out):
    """On rank 0: ``out[:nt]`` := global slices t0..t0+nt-1, its own part copied, the others' received."""
    lx, ly, lz, _ = grid.ldims
    site = (4, payload.rows, 3, 2)
    recvs, places = [], []
    for r in range(1, len(blocks)):
        ab = _t_overlap(blocks[r], t0, nt)
        if ab is not None:
            buf = np.empty((ab[1] - ab[0], lz, ly, lx) + site, dtype=payload.dtype)
            recvs.append((_as_bytes(buf), r, _SLAB_TAG))
            places.append((blocks[r], ab, buf))
    reqs = grid.comm.exchange([], recvs) if recvs else None
    ab = _t_overlap(blocks[0], t0, nt)
    if ab is not None:
        bx, by, bz, _ = blocks[0]
        if len(blocks) == 1:  # one rank: straight into the slab, no second copy
            _file_part(reader, grid, payload, *ab, out[ab[0] - t0:ab[1] - t0])
        else:
            part = np.empty((ab[1] - ab[0], lz, ly, lx) + site, dtype=payload.dtype)
            _file_part(reader, grid, payload, *ab, part)
            out[ab[0] - t0:ab[1] - t0, bz, by, bx] = part
    if reqs is not None:
        reqs.wait()
    for (bx, by, bz, _), (a, b), buf in places:
        out[a - t0:b - t0, bz, by, bx] = buf


def write_payload(f, slabs, gdims, payload, accumulators=(), path="", progress=None):
    """On rank 0: write ``slabs`` (from payload_slabs) at f's current position; returns the byte count.

    ``accumulators``: objects with ``update(data, site_bytes, first_site)`` fed each slab's bytes.
    """
    X, Y, Z, _ = gdims
    v3 = X * Y * Z
    total = payload.nbytes(gdims)
    prog = Progress(f"writing {path}", total, progress)
    done = 0
    try:
        for t0, a in slabs:
            data = memoryview(_as_bytes(a))
            for acc in accumulators:
                acc.update(data, payload.site_bytes, t0 * v3)
            f.write(data)
            done += len(data)
            prog.update(done)
    finally:
        prog.close()
    return total


def write_file(path, U, payload, body, slab_bytes=None):
    """Rank 0 writes ``path`` atomically as ``body(f, slabs)`` while the other ranks feed it their
    blocks through ``slabs`` (payload_slabs); collective.

    Every rank returns body's result, or raises rank 0's error; the call returns
    on no rank before the file is complete and in place.
    """
    comm = U.grid.comm
    slabs = payload_slabs(U, payload, slab_bytes)
    result = own = None
    if comm.rank == 0:
        try:
            with AtomicWriter(path) as f:
                result = body(f, slabs)
        except Exception as e:
            if comm.size == 1:
                raise
            own = e
    if comm.size > 1:
        # the other ranks send their parts; after a failure rank 0 still receives them, so none waits forever
        for _ in slabs:
            pass
    slabs.close()
    return root_outcome(comm, own, result)
