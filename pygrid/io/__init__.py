"""Gauge configuration files: NERSC and ILDG/SciDAC (LIME), read and written with checksums.

    import pygrid.io
    U, header = pg.io.read_nersc("ckpoint_lat.1000")          # grid from the header
    pg.io.read_ildg("conf.lime", into=U)                       # U unchanged on any error
    pg.io.write_nersc("out.nersc", U, two_row=True)            # atomic: temp file, fsync, rename
    pg.io.write_ildg("out.lime", U, precision="single")

Reads stream the payload in slabs of time slices; every check (checksum,
plaquette, link trace) failing raises ChecksumError, a malformed or mismatched
file FormatError, a short file TruncatedFileError (a FormatError).  See docs/io.md.
"""
from __future__ import annotations

from .checksums import nersc_checksum, scidac_checksum
from .errors import ChecksumError, FormatError, TruncatedFileError
from .header import Header
from .ildg import read_ildg, write_ildg
from .nersc import read_nersc, write_nersc


def detect_format(path):
    """'nersc' or 'ildg' from the first bytes of the file; FormatError otherwise."""
    from .lime import is_lime

    with open(path, "rb") as f:
        head = f.read(64)
    if is_lime(head):
        return "ildg"
    if head.lstrip().startswith(b"BEGIN_HEADER"):
        return "nersc"
    raise FormatError(f"{path}: neither a NERSC file (BEGIN_HEADER) nor a LIME/ILDG file (magic 0x456789ab)")


def read_gauge(path, grid=None, into=None, precision=None, verify=True, progress=None):
    """Read a NERSC or ILDG configuration, whichever the file is: (U, header)."""
    reader = read_ildg if detect_format(path) == "ildg" else read_nersc
    return reader(path, grid=grid, into=into, precision=precision, verify=verify, progress=progress)


__all__ = ["read_nersc", "write_nersc", "read_ildg", "write_ildg", "read_gauge", "detect_format",
           "ChecksumError", "FormatError", "TruncatedFileError", "Header", "nersc_checksum",
           "scidac_checksum"]
