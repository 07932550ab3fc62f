"""NERSC gauge configuration files (Grid, MILC, CPS, the NERSC archive).

Layout: an ASCII header between ``BEGIN_HEADER`` and ``END_HEADER`` lines of
``KEY = value`` pairs, then the binary payload: sites lexicographic with x
fastest, then y, z, t; per site the links mu = 0..3, each 3x3 matrix row-major
(``4D_SU3_GAUGE_3x3``) or its first two rows (``4D_SU3_GAUGE``, the third row
reconstructed as conj(row0 x row1)), each complex number as (re, im) in the
FLOATING_POINT format: IEEE64BIG, IEEE32BIG, IEEE64 / IEEE64LITTLE,
IEEE32 / IEEE32LITTLE.

On a grid split over ranks reading and writing are collective (every rank
calls them); see _stream.py for who reads and writes what.
"""
from __future__ import annotations

import getpass
import math
import os
import platform
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..cartesian import GridCartesian
    from ..lattice import Lattice

from ._field import check_gauge_field, copy_field, gauge_statistics, reader_target
from ._parallel import on_every_rank
from ._stream import Payload, PayloadSums, read_payload, write_file, write_payload
from .checksums import NerscChecksum, ScidacChecksum
from .errors import ChecksumError, FormatError, TruncatedFileError, dims_text, number_text, shown
from .header import STAT_FLOOR, Header, printed_tolerance

__all__ = ["read_nersc", "write_nersc", "read_nersc_header", "FLOATING_POINT", "DATATYPES"]

#: FLOATING_POINT value -> numpy dtype of one real.
FLOATING_POINT = {
    "IEEE64BIG": ">f8", "IEEE32BIG": ">f4",
    "IEEE64": "<f8", "IEEE64LITTLE": "<f8", "IEEE32": "<f4", "IEEE32LITTLE": "<f4",
}
#: DATATYPE value (upper case) -> stored rows per matrix.
DATATYPES = {"4D_SU3_GAUGE": 2, "4D_SU3_GAUGE_3X3": 3}

_MAX_HEADER = 1 << 16


def read_nersc_header(f, path=""):
    """Parse the header at the start of binary stream f; returns a Header (f left at the payload)."""
    first = f.readline(4096)
    if first.strip() != b"BEGIN_HEADER":
        raise FormatError(
            f"{path}: not a NERSC file (the first line is {first[:40]!r}, expected BEGIN_HEADER)"
        )
    h = Header()
    while True:
        line = f.readline(4096)
        if not line:
            raise TruncatedFileError(f"{path}: the NERSC header has no END_HEADER line (truncated file?)")
        if f.tell() > _MAX_HEADER:
            raise FormatError(f"{path}: no END_HEADER in the first {_MAX_HEADER} bytes; not a NERSC header")
        text = line.decode("latin-1")
        if "END_HEADER" in text:
            break
        if "=" in text:
            key, val = text.split("=", 1)
            key = "".join(key.split()).upper()
            if key:
                h[key] = val.strip()
    h.data_start = f.tell()
    h.format = "nersc"
    h.path = path
    return h


def _interpret(h, path, payload_bytes):
    dt = h.get("DATATYPE", "")
    rows = DATATYPES.get(dt.upper())
    if rows is None:
        raise FormatError(f"{path}: unknown DATATYPE {shown(dt)}; pygrid reads "
                          f"{', '.join(sorted(set(k.replace('3X3', '3x3') for k in DATATYPES)))}")
    try:
        dims = tuple(int(h[f"DIMENSION_{i + 1}"]) for i in range(4))
    except (KeyError, ValueError):
        raise FormatError(f"{path}: the header needs integer DIMENSION_1..DIMENSION_4, got "
                          f"{[shown(h.get(f'DIMENSION_{i + 1}')) for i in range(4)]}") from None
    if any(d <= 0 for d in dims):
        raise FormatError(f"{path}: bad dimensions {dims_text(dims)} in the header (each must be positive)")
    fp = h.get("FLOATING_POINT", "").upper()
    if not fp:
        # old files without the field: the size decides, big-endian as the NERSC archive
        vol = dims[0] * dims[1] * dims[2] * dims[3]
        fp = {4: "IEEE32BIG", 8: "IEEE64BIG"}.get(payload_bytes // max(vol * 4 * rows * 6, 1), "")
        if not fp or payload_bytes % (vol * 4 * rows * 6):
            n32 = vol * 4 * rows * 6 * 4
            raise FormatError(f"{path}: no FLOATING_POINT in the header, and the payload of {payload_bytes} "
                              f"bytes fits neither 32- nor 64-bit data for the header's dimensions "
                              f"{dims_text(dims)} ({n32} or {2 * n32} bytes)")
    if fp not in FLOATING_POINT:
        raise FormatError(f"{path}: unknown FLOATING_POINT {shown(h.get('FLOATING_POINT'))}; pygrid reads "
                          + ", ".join(FLOATING_POINT))
    h.dims = dims
    h.data_type = "4D_SU3_GAUGE" if rows == 2 else "4D_SU3_GAUGE_3x3"
    h.floating_point = fp
    return Payload(FLOATING_POINT[fp], rows)


def _hex(h, key, path):
    v = h.get(key, "").strip()
    if not v:
        return None
    try:
        return int(v, 16) & 0xFFFFFFFF
    except ValueError:
        raise FormatError(f"{path}: {key} {shown(v)} is not a hexadecimal number") from None


def _float(h, key, path):
    v = h.get(key, "").strip()
    if not v:
        return None, ""
    try:
        return float(v), v
    except ValueError:
        raise FormatError(f"{path}: {key} {shown(v)} is not a number") from None


def verify_statistics(U, h, items, itemsize, path):
    """Check plaquette and link trace against printed values; items: [(check, header value text)]."""
    if not any(text for _, text in items):
        return
    plaq, ltr = gauge_statistics(U)
    found = {"plaquette": plaq, "link_trace": ltr}
    for check, text in items:
        if not text:
            continue
        try:
            expected = float(text)
        except ValueError:  # checked for NERSC headers already; an ILDG usqcdInfo may hold anything
            raise FormatError(f"{path}: the file's {check} {shown(text)} is not a number") from None
        # the data's rounding: the coarser of the file's reals and the field's
        tol = printed_tolerance(text) + STAT_FLOOR[min(itemsize, U.real_dtype.itemsize)]
        h.checks[check] = (expected, found[check])
        # an infinite value in the file matches nothing ("1e999" would have an infinite tolerance)
        if not (math.isfinite(expected) and abs(found[check] - expected) <= tol):
            raise ChecksumError(check, shown(text), f"{found[check]:.12g}", path,
                                f"tolerance {tol:.1e}: half the last printed digit plus the data's rounding")


def read_nersc(path: str | os.PathLike, grid: GridCartesian | None = None, into: Lattice | None = None,
               precision: str | None = None, verify: bool = True, progress: bool | None = None
               ) -> tuple[Lattice, Header]:
    """Read a NERSC configuration: returns (U, header).

    ``grid``: the grid to read onto (its dimensions must match the file's);
    created from the header when None.  ``into``: an existing LatticeGaugeField
    to fill (then returned as U); it is left unchanged if anything fails.
    ``precision``: of the new field ('double' default; ``into`` decides otherwise).
    ``verify``: check CHECKSUM, LINK_TRACE and PLAQUETTE (and SCIDAC_CHECKSUMA/B
    when present and non-zero) against the data; a mismatch raises ChecksumError.
    ``progress``: None shows a progress line for payloads over 100 MB.
    Errors: FormatError (not NERSC, unknown DATATYPE/FLOATING_POINT, dimensions
    that do not match the grid, payload of the wrong size), TruncatedFileError,
    ChecksumError.

    Under MPI the call is collective over the grid's ranks (the job's, when the
    grid comes from the header): rank 0 parses the header, every rank reads its
    own block of the file and checks it against the header as part of the
    global checksums, and every error is raised on every rank.  Every rank
    returns the same header.
    """
    path = os.fspath(path)
    grid, precision, (h, payload, have) = reader_target("read_nersc", path, grid, into, precision,
                                                lambda: _read_meta(path))
    # the per-site CRC32s cost more than everything else: only when the header has them to check
    want_scidac = bool(_hex(h, "SCIDAC_CHECKSUMA", path) or _hex(h, "SCIDAC_CHECKSUMB", path))
    sums = PayloadSums(payload, want_scidac)

    def read_mine():
        with open(path, "rb") as f:
            return read_payload(f, h.data_start, grid, payload, precision, sums, path, progress)

    U = on_every_rank(grid.comm, read_mine)
    nersc, suma, sumb = sums.combined(grid.comm)
    h.checksums = {"nersc": nersc}
    if want_scidac:
        h.checksums.update(scidac_suma=suma, scidac_sumb=sumb)
    if verify:
        _verify(U, h, payload, path)
    if into is not None:
        copy_field(U, into)
        U = into
    return U, h


def _read_meta(path):
    """(header, payload, payload bytes in the file) of a NERSC file: what rank 0 reads for every rank.

    The payload's size is checked against the header here, before anything the
    header declares (a grid, a field) is built.
    """
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        h = read_nersc_header(f, path)
    have = size - h.data_start
    payload = _interpret(h, path, have)
    _check_size(h, payload, have, path)
    return h, payload, have


def _check_size(h, payload, have, path):
    """The payload's size against the header: FormatError when the header's dimensions (or its
    DATATYPE or FLOATING_POINT) do not match the file, TruncatedFileError when the file ends
    after its header or inside a site."""
    want = payload.nbytes(h.dims)
    if have == want:
        return
    sb = payload.site_bytes
    dims = dims_text(h.dims)
    need = (f"{path}: the header's dimensions {dims} ({h.data_type}, {h.floating_point}: {sb} bytes per "
            f"site) need a payload of {number_text(want)} bytes, the file holds {have} after its header")
    if have == 0:
        raise TruncatedFileError(f"{need}: the file ends after its header (truncated file)")
    others = [f"{dt} with {bits}-bit reals" for dt, rows in (("4D_SU3_GAUGE_3x3", 3), ("4D_SU3_GAUGE", 2))
              for bits in (64, 32) if Payload(f">f{bits // 8}", rows).nbytes(h.dims) == have]
    sites = f" ({have // sb} whole sites, {number_text(want // sb)} expected)" if have % sb == 0 else ""
    if others:
        raise FormatError(f"{need}{sites}: the header's dimensions, DATATYPE or FLOATING_POINT do not match "
                          f"the file's size ({have} bytes is the size of {dims} as {others[0]})")
    if sites:
        raise FormatError(f"{need}{sites}: the header's dimensions do not match the file's size")
    if have < want:
        raise TruncatedFileError(f"{need}, ending inside site {have // sb} (truncated file)")
    raise FormatError(f"{need} ({have - want} trailing bytes, not a whole number of sites)")


def _verify(U, h, payload, path):
    """The header's checks against the data read (h.checksums): every rank has the same values, so
    every rank raises the same ChecksumError."""
    found = h.checksums["nersc"]
    expected = _hex(h, "CHECKSUM", path)
    if expected is not None:
        h.checks["checksum"] = (expected, found)
        if expected != found:
            raise ChecksumError("checksum", f"{expected:08x}", f"{found:08x}", path,
                                "32-bit sum of the payload's words")
    for key, name in (("SCIDAC_CHECKSUMA", "scidac_suma"), ("SCIDAC_CHECKSUMB", "scidac_sumb")):
        e = _hex(h, key, path)
        if e:  # Grid writes 0 when it did not compute them
            val = h.checksums[name]
            h.checks[key.lower()] = (e, val)
            if e != val:
                raise ChecksumError(key.lower(), f"{e:x}", f"{val:x}", path, "SciDAC CRC32 checksum")
    _, lt_text = _float(h, "LINK_TRACE", path)
    _, pl_text = _float(h, "PLAQUETTE", path)
    verify_statistics(U, h, [("link_trace", lt_text), ("plaquette", pl_text)], payload.dtype.itemsize, path)


_ORDER = ["HDR_VERSION", "DATATYPE", "STORAGE_FORMAT", "DIMENSION_1", "DIMENSION_2", "DIMENSION_3",
          "DIMENSION_4", "LINK_TRACE", "PLAQUETTE", "BOUNDARY_1", "BOUNDARY_2", "BOUNDARY_3", "BOUNDARY_4",
          "CHECKSUM", "SCIDAC_CHECKSUMA", "SCIDAC_CHECKSUMB", "ENSEMBLE_ID", "ENSEMBLE_LABEL",
          "SEQUENCE_NUMBER", "CREATOR", "CREATOR_HARDWARE", "CREATION_DATE", "ARCHIVE_DATE", "FLOATING_POINT"]


def _header_bytes(fields):
    lines = ["BEGIN_HEADER"]
    for k in _ORDER:
        pad = "  " if k == "PLAQUETTE" else " "  # Grid's spelling
        lines.append(f"{k}{pad}= {fields[k]}")
    lines.append("END_HEADER")
    return ("\n".join(lines) + "\n").encode("ascii", errors="replace")


def _creator():
    try:
        return getpass.getuser()
    except Exception:
        return "pygrid"


def write_nersc(path: str | os.PathLike, U: Lattice, two_row: bool = False, precision: str = "double",
                endian: str = "big", ensemble_id: str = "pygrid", ensemble_label: str = "",
                sequence_number: int = 1, boundary: tuple[str, ...] = ("PERIODIC",) * 4,
                progress: bool | None = None) -> Header:
    """Write U as a NERSC file, atomically; returns the Header written.

    ``two_row``: 4D_SU3_GAUGE (two rows per matrix) instead of 4D_SU3_GAUGE_3x3.
    ``precision``: 'double' (IEEE64) or 'single' (IEEE32); ``endian`` 'big'
    (IEEE64BIG, the standard, and what Grid writes) or 'little' (IEEE64, as Grid names it).
    The header carries CHECKSUM, SCIDAC_CHECKSUMA/B, PLAQUETTE, LINK_TRACE,
    dimensions, boundaries, FLOATING_POINT and DATATYPE in Grid's layout.  The
    file appears under ``path`` only when complete (temporary file, fsync, rename).

    Under MPI the call is collective over U's ranks: rank 0 alone writes, receiving
    the field slab by slab from the other ranks, so the file is byte for byte the
    one a single rank writes (the plaquette and link trace are summed exactly,
    independently of the decomposition).  Every rank returns the same header, and
    none returns before the file is in place.
    """
    path = os.fspath(path)
    check_gauge_field(U, "write_nersc")
    if precision not in ("double", "single"):
        raise FormatError(f"write_nersc: precision must be 'double' or 'single', got {precision!r}")
    if endian not in ("big", "little"):
        raise FormatError(f"write_nersc: endian must be 'big' or 'little', got {endian!r}")
    bits = 64 if precision == "double" else 32
    fp = f"IEEE{bits}BIG" if endian == "big" else f"IEEE{bits}"
    rows = 2 if two_row else 3
    payload = Payload(FLOATING_POINT[fp], rows)
    if len(boundary) != 4:
        raise FormatError(f"write_nersc: boundary needs 4 entries, got {boundary!r}")
    plaq, ltr = gauge_statistics(U)
    digits = 15 if bits == 64 else 8

    def body(f, slabs):
        # on rank 0 alone: the date and host in the header are rank 0's
        fields = _fields(U.grid.gdims, two_row, fp, plaq, ltr, digits, ensemble_id, ensemble_label,
                         sequence_number, boundary)
        nsum = NerscChecksum(">u4" if endian == "big" else "<u4")
        ssum = ScidacChecksum()
        head = _header_bytes(fields)
        f.write(head)
        write_payload(f, slabs, U.grid.gdims, payload, (nsum, ssum), path, progress)
        fields["CHECKSUM"] = f"{nsum.value:08x}"
        fields["SCIDAC_CHECKSUMA"] = f"{ssum.suma:08x}"
        fields["SCIDAC_CHECKSUMB"] = f"{ssum.sumb:08x}"
        final = _header_bytes(fields)
        assert len(final) == len(head)
        f.seek(0)
        f.write(final)
        return fields, len(final), (nsum.value, ssum.suma, ssum.sumb)

    fields, data_start, (nersc, suma, sumb) = write_file(path, U, payload, body)
    h = Header(fields)
    h.format, h.path, h.dims = "nersc", path, tuple(U.grid.gdims)
    h.data_type, h.floating_point, h.data_start = fields["DATATYPE"], fp, data_start
    h.checksums = {"nersc": nersc, "scidac_suma": suma, "scidac_sumb": sumb}
    h.checks = {"plaquette": (plaq, plaq), "link_trace": (ltr, ltr), "checksum": (nersc, nersc)}
    return h


def _fields(gdims, two_row, fp, plaq, ltr, digits, ensemble_id, ensemble_label, sequence_number, boundary):
    """The header fields, checksums zero (filled in once the payload is written)."""
    date = time.strftime("%a %b %d %H:%M:%S %Y %Z")
    fields = {
        "HDR_VERSION": "1.0",
        "DATATYPE": "4D_SU3_GAUGE" if two_row else "4D_SU3_GAUGE_3x3",
        "STORAGE_FORMAT": "1.0",
        "LINK_TRACE": f"{ltr:.{digits}g}",
        "PLAQUETTE": f"{plaq:.{digits}g}",
        "CHECKSUM": "00000000",
        "SCIDAC_CHECKSUMA": "00000000",
        "SCIDAC_CHECKSUMB": "00000000",
        "ENSEMBLE_ID": str(ensemble_id),
        "ENSEMBLE_LABEL": str(ensemble_label),
        "SEQUENCE_NUMBER": str(int(sequence_number)),
        "CREATOR": _creator(),
        "CREATOR_HARDWARE": "-".join(
            [platform.node(), platform.machine(), platform.system(), platform.release()]
        ),
        "CREATION_DATE": date,
        "ARCHIVE_DATE": date,
        "FLOATING_POINT": fp,
    }
    for i, d in enumerate(gdims):
        fields[f"DIMENSION_{i + 1}"] = str(d)
        fields[f"BOUNDARY_{i + 1}"] = str(boundary[i])
    return fields
