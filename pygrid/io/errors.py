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


def shown(value, limit=60):
    """``value`` for an error message: repr, with the middle of a long one left out."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit // 2]}...{text[-(limit // 2):]} ({len(str(value))} characters)"


def number_text(n):
    """An integer for an error message, shortened when it has more than 24 digits."""
    s = str(n)
    return s if len(s) <= 24 else f"{s[:10]}...({len(s)} digits)"


def dims_text(dims):
    """'8x8x8x16' for an error message."""
    return "x".join(number_text(d) for d in dims)
