"""Errors of pygrid.io: every one a pygrid.PyGridError (and a ValueError)."""
from __future__ import annotations

from ..errors import PyGridError


class FormatError(PyGridError, ValueError):
    """The file is not what it claims: unknown data type or floating point format,
    a malformed header or LIME record, dimensions that do not match the grid,
    a payload of the wrong size."""


class TruncatedFileError(FormatError):
    """The file ends before its payload does (an interrupted copy or write)."""


class ChecksumError(PyGridError, ValueError):
    """A check of the data against the file's metadata failed.

    ``check`` names it ('checksum', 'plaquette', 'link_trace', 'scidac_checksum',
    ...), ``expected`` is the value the file states, ``found`` the value computed
    from the data read.
    """

    def __init__(self, check, expected, found, path=None, detail=""):
        self.check = check
        self.expected = expected
        self.found = found
        self.path = path
        where = f"{path}: " if path else ""
        extra = f" ({detail})" if detail else ""
        super().__init__(f"{where}{check} mismatch: the file says {expected}, the data give {found}{extra}; "
                         f"the file is damaged or was written with other conventions")
