"""ILDG gauge configurations in LIME, with the SciDAC records and checksum.

Records read: ``ildg-format`` (XML: field su3gauge, precision 32/64, lx ly lz lt),
``ildg-binary-data`` (big-endian reals; sites x fastest then y, z, t; per site
mu = 0..3, each 3x3 matrix row-major, complex as (re, im)), ``scidac-checksum``
(XML suma/sumb, verified), ``scidac-private-file-xml`` / ``scidac-private-record-xml``
(used for dimensions and precision when a plain SciDAC file has no ildg-format),
``scidac-file-xml`` / ``scidac-record-xml`` (a usqcdInfo plaq/linktr there is
verified), ``ildg-data-lfn``.  Other records are ignored.

Written (the order of Grid's IldgWriter, without its Grid-private records):

    message 1: scidac-private-file-xml (MB), scidac-file-xml (ME, usqcdInfo)
    message 2: scidac-private-record-xml (MB), scidac-record-xml (usqcdInfo), ildg-format,
               ildg-data-lfn, ildg-binary-data, scidac-checksum (ME)

On a grid split over ranks reading and writing are collective (every rank
calls them); see _stream.py for who reads and writes what.
"""
from __future__ import annotations

import os
import re
import time
import warnings
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..cartesian import GridCartesian
    from ..lattice import Lattice

from ._field import check_gauge_field, copy_field, gauge_statistics, reader_target
from ._parallel import on_every_rank
from ._stream import Payload, PayloadSums, read_payload, write_file, write_payload
from .checksums import NerscChecksum, ScidacChecksum
from .errors import ChecksumError, FormatError, TruncatedFileError, dims_text, number_text, shown
from .header import Header
from .lime import LimeWriter, is_lime, read_record_data, read_records

__all__ = ["read_ildg", "write_ildg"]

BINARY_TYPES = ("ildg-binary-data", "scidac-binary-data")
_XML_TYPES = ("ildg-format", "scidac-checksum", "scidac-private-file-xml", "scidac-private-record-xml",
              "scidac-file-xml", "scidac-record-xml", "ildg-data-lfn")


def xml_value(text, tag):
    """Text of the first <tag> element (any namespace prefix), stripped; None if absent."""
    # [^<>]: every scan stops at the next tag, so damaged XML costs linear, not quadratic, time
    m = re.search(r"<\s*(?:[\w.-]+:)?" + re.escape(tag) + r"(?:\s[^<>]*)?>([^<]*)<", text or "")
    return m.group(1).strip() if m else None


def _int(text, tag, path, rtype):
    v = xml_value(text, tag)
    try:
        return int(v)
    except (TypeError, ValueError):
        raise FormatError(f"{path}: {rtype} has no integer <{tag}> (found {shown(v)})") from None


def _layout(h, path):
    """(dims, itemsize) from ildg-format, else from the SciDAC private records."""
    fmt = h.get("ildg-format")
    if fmt is not None:
        field = (xml_value(fmt, "field") or "").strip()
        if field.lower() != "su3gauge":
            raise FormatError(f"{path}: ildg-format field {shown(field)} is not su3gauge (unknown data type)")
        prec = _int(fmt, "precision", path, "ildg-format")
        dims = tuple(_int(fmt, t, path, "ildg-format") for t in ("lx", "ly", "lz", "lt"))
        h.data_type = "su3gauge"
    else:
        rec, fil = h.get("scidac-private-record-xml"), h.get("scidac-private-file-xml")
        if rec is None or fil is None:
            raise FormatError(f"{path}: no ildg-format record (nor SciDAC private file and record XML): "
                              f"not a gauge configuration")
        dt = xml_value(rec, "datatype") or ""
        if "colormatrix" not in dt.lower() or xml_value(rec, "colors") not in ("3", None) or \
                xml_value(rec, "datacount") != "4":
            count = shown(xml_value(rec, "datacount"))
            raise FormatError(f"{path}: SciDAC datatype {shown(dt)} (datacount {count}) "
                              f"is not an SU(3) gauge field (unknown data type)")
        p = (xml_value(rec, "precision") or "").upper()
        if p not in ("F", "D"):
            raise FormatError(f"{path}: SciDAC precision {shown(p)}, expected F or D")
        prec = 32 if p == "F" else 64
        try:
            dims = tuple(int(x) for x in (xml_value(fil, "dims") or "").split())
        except ValueError:
            dims = ()
        if len(dims) != 4:
            raise FormatError(
                f"{path}: scidac-private-file-xml dims {shown(xml_value(fil, 'dims'))} are not 4 integers"
            )
        h.data_type = dt
    if prec not in (32, 64):
        raise FormatError(f"{path}: precision {prec}; ILDG stores 32 or 64 bits")
    if any(d <= 0 for d in dims):
        raise FormatError(f"{path}: bad dimensions {dims_text(dims)} (each must be positive)")
    h.dims = dims
    h.floating_point = f"IEEE{prec}BIG"
    return prec // 8


def read_ildg(path: str | os.PathLike, grid: GridCartesian | None = None, into: Lattice | None = None,
              precision: str | None = None, verify: bool = True, progress: bool | None = None
              ) -> tuple[Lattice, Header]:
    """Read an ILDG (or SciDAC) gauge configuration: returns (U, header).

    Arguments as read_nersc.  Verifies the SciDAC checksum record (a file without
    one is read with a warning) and, when a usqcdInfo record carries them, the
    plaquette and link trace.  ``header`` maps record types to their text (XML)
    and has ``records`` (the LIME records), ``dims``, ``floating_point``,
    ``checks`` and ``checksums``.  Collective under MPI, as read_nersc.
    """
    path = os.fspath(path)
    grid, precision, (h, binary, itemsize) = reader_target("read_ildg", path, grid, into, precision,
                                                lambda: _read_meta(path))
    payload = _payload(itemsize)
    sums = PayloadSums(payload, scidac=True)

    def read_mine():
        with open(path, "rb") as f:
            return read_payload(f, binary.offset, grid, payload, precision, sums, path, progress)

    U = on_every_rank(grid.comm, read_mine)
    nersc, suma, sumb = sums.combined(grid.comm)
    h.checksums = {"nersc": nersc, "scidac_suma": suma, "scidac_sumb": sumb}
    if verify:
        _verify(U, h, itemsize, path)
    if into is not None:
        copy_field(U, into)
        U = into
    return U, h


def _payload(itemsize):
    return Payload(">f8" if itemsize == 8 else ">f4", 3)


def _read_meta(path):
    """(header, binary record, bytes per real) of a LIME file: what rank 0 reads for every rank.

    The binary record's length is checked against the dimensions here, before
    anything they declare (a grid, a field) is built.
    """
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        if not is_lime(f.read(4)):
            raise FormatError(f"{path}: not a LIME file (no magic number 0x456789ab at the start)")
        try:
            records, cut = read_records(f, size, path), None
        except TruncatedFileError as e:
            if getattr(e, "partial", None) is None:
                raise
            records, cut = e.records + [e.partial], e
        h = Header()
        h.format, h.path = "ildg", path
        h.records = records
        binary = None
        for r in records:
            if r.type in BINARY_TYPES and binary is None:
                binary = r
            elif r.type in _XML_TYPES and r.type not in h and (cut is None or r is not cut.partial):
                if r.type == "scidac-checksum" and binary is None:
                    continue  # a checksum belongs to the binary record it follows
                h[r.type] = read_record_data(f, r, path=path).rstrip(b"\0").decode("utf-8", errors="replace")
    if cut is not None:
        # a record runs past the end of the file; when it is the binary record and its length is not
        # the one the dimensions give, the length is at fault (or the dimensions), not the file's end
        if binary is cut.partial:
            try:
                itemsize = _layout(h, path)
            except FormatError:
                raise cut from None
            _check_binary(h, binary, itemsize, path, size - binary.offset)
        raise cut
    if binary is None:
        raise FormatError(f"{path}: no ildg-binary-data record")
    itemsize = _layout(h, path)
    _check_binary(h, binary, itemsize, path)
    return h, binary, itemsize


def _check_binary(h, binary, itemsize, path, left=None):
    """FormatError when the binary record's length is not what the dimensions and precision give."""
    want = _payload(itemsize).nbytes(h.dims)
    if binary.length != want:
        more = "" if left is None else f", and the file holds {left} bytes after the record's header"
        raise FormatError(f"{path}: {binary.type} declares {binary.length} bytes, the dimensions "
                          f"{dims_text(h.dims)} of {itemsize * 8}-bit su3gauge data need "
                          f"{number_text(want)}{more}: "
                          f"the record's length does not match the file's dimensions")


def _verify(U, h, itemsize, path):
    """The file's checks against the data read (h.checksums): every rank has the same values, so
    every rank raises the same ChecksumError."""
    suma, sumb = h.checksums["scidac_suma"], h.checksums["scidac_sumb"]
    ck = h.get("scidac-checksum")
    if ck is None:
        warnings.warn(f"{path}: no scidac-checksum record; the data cannot be verified", stacklevel=3)
    else:
        try:
            ea, eb = int(xml_value(ck, "suma"), 16), int(xml_value(ck, "sumb"), 16)
        except (TypeError, ValueError):
            raise FormatError(f"{path}: malformed scidac-checksum record {ck[:200]!r}") from None
        h.checks["scidac_checksum"] = ((ea, eb), (suma, sumb))
        if (ea, eb) != (suma, sumb):
            raise ChecksumError("scidac_checksum", f"suma {ea:x} sumb {eb:x}",
                                f"suma {suma:x} sumb {sumb:x}", path, "per-site CRC32 of the binary data")
    info = next((h[k] for k in ("scidac-record-xml", "scidac-file-xml")
                 if k in h and xml_value(h[k], "plaq") is not None), None)
    if info is not None:
        from .nersc import verify_statistics

        verify_statistics(U, h, [("link_trace", xml_value(info, "linktr") or ""),
                                 ("plaquette", xml_value(info, "plaq") or "")], itemsize, path)


_XML_HEAD = '<?xml version="1.0" encoding="UTF-8"?>\n'


def _usqcd_info(plaq, ltr, digits, info):
    return (f"{_XML_HEAD}<usqcdInfo><version>1.0</version><plaq>{plaq:.{digits}g}</plaq>"
            f"<linktr>{ltr:.{digits}g}</linktr><info>{info}</info></usqcdInfo>")


def write_ildg(path: str | os.PathLike, U: Lattice, precision: str = "double", lfn: str = "",
               info: str = "written by pygrid", progress: bool | None = None) -> Header:
    """Write U as an ILDG file (LIME, big-endian, with SciDAC records and checksum), atomically.

    ``precision``: 'double' (64-bit) or 'single' (32-bit); ``lfn``: the ILDG
    logical file name for the ildg-data-lfn record.  Returns the Header written.

    Under MPI the call is collective over U's ranks, as write_nersc: rank 0 alone
    writes, the file is byte for byte the one a single rank writes, every rank
    returns the same header and none returns before the file is in place.
    """
    path = os.fspath(path)
    check_gauge_field(U, "write_ildg")
    if precision not in ("double", "single"):
        raise FormatError(f"write_ildg: precision must be 'double' or 'single', got {precision!r}")
    bits = 64 if precision == "double" else 32
    payload = Payload(">f8" if bits == 64 else ">f4", 3)
    X, Y, Z, T = U.grid.gdims
    plaq, ltr = gauge_statistics(U)
    digits = 15 if bits == 64 else 8
    usqcd = _usqcd_info(plaq, ltr, digits, info)

    def body(f, slabs):
        # on rank 0 alone: the date in the record XML is rank 0's
        recs = _records(U.grid.gdims, bits, usqcd, lfn)
        nsum, ssum = NerscChecksum(">u4"), ScidacChecksum()
        w = LimeWriter(f)
        w.write_record("scidac-private-file-xml", recs["scidac-private-file-xml"], mb=True)
        w.write_record("scidac-file-xml", recs["scidac-file-xml"], me=True)
        w.write_record("scidac-private-record-xml", recs["scidac-private-record-xml"], mb=True)
        w.write_record("scidac-record-xml", recs["scidac-record-xml"])
        w.write_record("ildg-format", recs["ildg-format"])
        w.write_record("ildg-data-lfn", recs["ildg-data-lfn"])
        w.begin_record("ildg-binary-data", payload.nbytes(U.grid.gdims))
        write_payload(f, slabs, U.grid.gdims, payload, (nsum, ssum), path, progress)
        w.end_record()
        recs["scidac-checksum"] = (f"{_XML_HEAD}<scidacChecksum><version>1.0</version>"
                                   f"<suma>{ssum.suma:x}</suma><sumb>{ssum.sumb:x}</sumb></scidacChecksum>")
        w.write_record("scidac-checksum", recs["scidac-checksum"], me=True)
        return recs, (nsum.value, ssum.suma, ssum.sumb)

    recs, (nersc, suma, sumb) = write_file(path, U, payload, body)
    h = Header(recs)
    h.format, h.path, h.dims = "ildg", path, (X, Y, Z, T)
    h.data_type, h.floating_point = "su3gauge", f"IEEE{bits}BIG"
    h.checksums = {"nersc": nersc, "scidac_suma": suma, "scidac_sumb": sumb}
    h.checks = {"plaquette": (plaq, plaq), "link_trace": (ltr, ltr),
                "scidac_checksum": ((suma, sumb), (suma, sumb))}
    return h


def _records(gdims, bits, usqcd, lfn):
    """The XML records of a written file, by type (the checksum record follows the payload)."""
    X, Y, Z, T = gdims
    letter = "D" if bits == 64 else "F"
    date = time.strftime("%a %b %d %H:%M:%S %Y %Z")
    return {
        "scidac-private-file-xml": (f"{_XML_HEAD}<scidacFile><version>1.1</version><spacetime>4</spacetime>"
                                    f"<dims>{X} {Y} {Z} {T} </dims><volfmt>0</volfmt></scidacFile>"),
        "scidac-file-xml": usqcd,
        "scidac-private-record-xml": (f"{_XML_HEAD}<scidacRecord><version>1.1</version><date>{date}</date>"
                                      f"<recordtype>0</recordtype><datatype>QDP_{letter}3_ColorMatrix</datatype>"
                                      f"<precision>{letter}</precision><colors>3</colors><spins>4</spins>"
                                      f"<typesize>{18 * bits // 8}</typesize><datacount>4</datacount>"
                                      f"</scidacRecord>"),
        "scidac-record-xml": usqcd,
        "ildg-format": (f'{_XML_HEAD}<ildgFormat xmlns="http://www.lqcd.org/ildg" '
                        f'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" '
                        f'xsi:schemaLocation="http://www.lqcd.org/ildg http://www.lqcd.org/ildg/filefmt.xsd">'
                        f"<version>1.0</version><field>su3gauge</field><precision>{bits}</precision>"
                        f"<lx>{X}</lx><ly>{Y}</ly><lz>{Z}</lz><lt>{T}</lt></ildgFormat>"),
        "ildg-data-lfn": lfn,
    }
