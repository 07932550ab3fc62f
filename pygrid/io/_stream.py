"""Streaming a gauge field payload to and from a file in slabs of time slices.

Peak memory while reading is the new field plus one slab (default about
8 MB); while writing, the field plus one slab.  Checksums are accumulated on
the bytes of each slab as they pass.
"""
from __future__ import annotations

import numpy as np

from ._field import SliceReader, SliceWriter, new_gauge_field, reconstruct_third_row
from .errors import TruncatedFileError
from .progress import Progress

#: Target size of one slab of time slices in bytes (at least one slice is used).
SLAB_BYTES = 8 * 2 ** 20


class Payload:
    """How the field is stored: ``dtype`` of one real (e.g. '>f8'), ``rows`` 2 or 3 per matrix."""

    def __init__(self, dtype, rows):
        self.dtype = np.dtype(dtype)
        self.rows = int(rows)
        self.site_reals = 4 * self.rows * 3 * 2
        self.site_bytes = self.site_reals * self.dtype.itemsize

    def nbytes(self, gdims):
        return int(np.prod(gdims)) * self.site_bytes


def _slab_plan(gdims, payload, slab_bytes):
    X, Y, Z, T = gdims
    v3 = X * Y * Z
    per_slice = v3 * payload.site_bytes
    k = max(1, int(slab_bytes) // per_slice)
    return X, Y, Z, T, v3, per_slice, k


def read_payload(f, grid, payload, precision, accumulators=(), path="", progress=None, slab_bytes=None):
    """Read the payload at f's current position into a new LatticeGaugeField; returns the field.

    ``accumulators``: objects with ``update(data, site_bytes, first_site)`` fed each slab's bytes.
    Raises TruncatedFileError if the file ends early.
    """
    X, Y, Z, T, v3, per_slice, k = _slab_plan(grid.gdims, payload, slab_bytes or SLAB_BYTES)
    total = T * per_slice
    U = new_gauge_field(grid, precision)
    real = U.real_dtype
    buf = bytearray(k * per_slice)
    prog = Progress(f"reading {path}", total, progress)
    done = 0
    try:
        with SliceWriter(U) as w:
            for t0 in range(0, T, k):
                nt = min(k, T - t0)
                want = nt * per_slice
                mv = memoryview(buf)[:want]
                got = f.readinto(mv)
                while got < want:
                    more = f.readinto(mv[got:])
                    if not more:
                        raise TruncatedFileError(
                            f"{path}: the file ends {total - done - got} bytes before the end of its "
                            f"{total}-byte payload (truncated copy or interrupted write?)")
                    got += more
                for acc in accumulators:
                    acc.update(mv, payload.site_bytes, t0 * v3)
                arr = np.frombuffer(mv, dtype=payload.dtype).reshape((nt, Z, Y, X, 4, payload.rows, 3, 2))
                for i in range(nt):
                    a = arr[i].astype(real)
                    if payload.rows == 2:
                        a = reconstruct_third_row(a)
                    w.put(t0 + i, a)
                done += want
                prog.update(done)
    finally:
        prog.close()
    return U


def write_payload(f, U, payload, accumulators=(), path="", progress=None, slab_bytes=None):
    """Write U's payload at f's current position in file order; returns the byte count."""
    X, Y, Z, T, v3, per_slice, k = _slab_plan(U.grid.gdims, payload, slab_bytes or SLAB_BYTES)
    total = T * per_slice
    out = np.empty((k, Z, Y, X, 4, payload.rows, 3, 2), dtype=payload.dtype)
    prog = Progress(f"writing {path}", total, progress)
    done = 0
    try:
        with SliceReader(U) as r:
            for t0 in range(0, T, k):
                nt = min(k, T - t0)
                for i in range(nt):
                    out[i] = r.get(t0 + i)[..., :payload.rows, :, :]
                data = memoryview(out[:nt].reshape(-1).view(np.uint8))
                for acc in accumulators:
                    acc.update(data, payload.site_bytes, t0 * v3)
                f.write(data)
                done += nt * per_slice
                prog.update(done)
    finally:
        prog.close()
    return total
