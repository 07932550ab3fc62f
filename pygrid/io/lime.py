"""LIME containers (the record format under ILDG and SciDAC files), read and written here.

A LIME file is a sequence of records.  Each record is a 144-byte big-endian
header followed by its data, zero-padded to a multiple of 8 bytes:

    offset  size  field
    0       4     magic number 0x456789ab
    4       2     LIME format version (1)
    6       2     flags: bit 15 MB (message begin), bit 14 ME (message end), others 0
    8       8     data length in bytes, without the padding
    16      128   record type, an ASCII string padded with NULs

Records are grouped into messages: the first record of a message has MB set,
the last ME.
"""
from __future__ import annotations

import struct

from .errors import FormatError, TruncatedFileError, shown

LIME_MAGIC = 0x456789AB
LIME_VERSION = 1
MB_FLAG = 0x8000
ME_FLAG = 0x4000
HEADER = struct.Struct(">IHHQ128s")
HEADER_BYTES = HEADER.size  # 144


def padding(n):
    """Zero bytes after n data bytes to reach a multiple of 8."""
    return (-n) % 8


def pack_header(rtype, length, mb, me):
    t = rtype.encode("ascii")
    if len(t) > 128:
        raise FormatError(f"LIME record type {rtype!r} is longer than 128 bytes")
    flags = (MB_FLAG if mb else 0) | (ME_FLAG if me else 0)
    return HEADER.pack(LIME_MAGIC, LIME_VERSION, flags, int(length), t.ljust(128, b"\0"))


class Record:
    """One record: ``type``, ``offset`` of its data in the file, ``length``, ``mb``, ``me``, ``version``."""

    __slots__ = ("type", "offset", "length", "mb", "me", "version", "header_offset")

    def __init__(self, rtype, offset, length, mb, me, version, header_offset):
        self.type, self.offset, self.length = rtype, offset, length
        self.mb, self.me, self.version, self.header_offset = mb, me, version, header_offset

    def __repr__(self):
        return (f"Record({self.type!r}, offset={self.offset}, length={self.length}, "
                f"MB={int(self.mb)}, ME={int(self.me)})")


def is_lime(first_bytes):
    return len(first_bytes) >= 4 and struct.unpack(">I", first_bytes[:4])[0] == LIME_MAGIC


def read_records(f, size, path=""):
    """List the records of the LIME stream f (size bytes long), without reading their data.

    Raises FormatError on a bad magic number or version, TruncatedFileError when a
    header or a record's data runs past the end of the file.  A TruncatedFileError for
    a record's data carries ``records`` (the complete records before it) and
    ``partial`` (the Record whose declared length passes the end), so that a reader
    can tell a cut file from a length that disagrees with the file's metadata.
    """
    records = []
    pos = 0
    while pos < size:
        f.seek(pos)
        raw = f.read(HEADER_BYTES)
        if len(raw) < HEADER_BYTES:
            if not raw.strip(b"\0"):
                break  # trailing zero padding
            raise TruncatedFileError(f"{path}: the file ends inside a LIME record header at byte {pos}")
        magic, version, flags, length, rtype = HEADER.unpack(raw)
        if magic != LIME_MAGIC:
            raise FormatError(f"{path}: bad LIME record header at byte {pos}: magic 0x{magic:08x}, "
                              f"expected 0x{LIME_MAGIC:08x} (not a LIME file, or corrupted)")
        if version != LIME_VERSION:
            raise FormatError(
                f"{path}: LIME record at byte {pos} has version {version}; pygrid reads version 1"
            )
        name = rtype.split(b"\0", 1)[0].decode("ascii", errors="replace")
        data = pos + HEADER_BYTES
        rec = Record(name, data, length, bool(flags & MB_FLAG), bool(flags & ME_FLAG), version, pos)
        if data + length > size:
            e = TruncatedFileError(
                f"{path}: LIME record {shown(name)} at byte {pos} declares {length} bytes of data, but the "
                f"file holds {size - data} bytes after its header (truncated file, or a damaged length)"
            )
            e.records, e.partial = records, rec
            raise e
        records.append(rec)
        pos = data + length + padding(length)
    return records


def read_record_data(f, rec, limit=1 << 24, path=""):
    """The data of a (small, e.g. XML) record as bytes."""
    if rec.length > limit:
        raise FormatError(f"{path}: LIME record {shown(rec.type)} of {rec.length} bytes is too large "
                          f"for metadata (at most {limit} bytes)")
    f.seek(rec.offset)
    return f.read(rec.length)


class LimeWriter:
    """Writes records to a binary stream: ``write_record(type, data, mb, me)``, or for large
    data ``begin_record(type, length, mb, me)``, write the data to ``stream``, ``end_record()``."""

    def __init__(self, stream):
        self.stream = stream
        self._open = None

    def write_record(self, rtype, data, mb=False, me=False):
        if isinstance(data, str):
            data = data.encode("utf-8")
        self.begin_record(rtype, len(data), mb, me)
        self.stream.write(data)
        self.end_record()

    def begin_record(self, rtype, length, mb=False, me=False):
        if self._open is not None:
            raise FormatError("LimeWriter: a record is still open")
        self.stream.write(pack_header(rtype, length, mb, me))
        self._open = (rtype, int(length), self.stream.tell())

    def end_record(self):
        rtype, length, start = self._open
        written = self.stream.tell() - start
        if written != length:
            raise FormatError(
                f"LimeWriter: record {rtype!r} announced {length} bytes, {written} were written"
            )
        self.stream.write(b"\0" * padding(length))
        self._open = None
