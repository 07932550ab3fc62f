"""The metadata returned by the readers and writers."""
from __future__ import annotations

import math
import re


class Header(dict):
    """The file's metadata as a dict of strings (NERSC header fields; for ILDG the
    record contents by LIME type), with attributes:

    ``format``      'nersc' or 'ildg'
    ``path``        the file
    ``dims``        (X, Y, Z, T)
    ``data_type``   '4D_SU3_GAUGE', '4D_SU3_GAUGE_3x3' or 'su3gauge'
    ``floating_point``  'IEEE64BIG', 'IEEE32BIG', 'IEEE64LITTLE', ...
    ``checks``      {name: (expected, found)} of every check done (or, after a write, the values written)
    ``checksums``   {name: int} checksums of the payload (computed)
    """

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.format = None
        self.path = None
        self.dims = None
        self.data_type = None
        self.floating_point = None
        self.checks = {}
        self.checksums = {}
        self.data_start = None
        self.records = None


_NUM = re.compile(r"^\s*[+-]?(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?\s*$")


def printed_tolerance(text):
    """Half a unit in the last digit of a printed decimal number ('0.5876' -> 5e-5)."""
    m = _NUM.match(text or "")
    if not m or not (m.group(1) or m.group(2)):
        return 0.0
    ndec = len(m.group(2) or "")
    digits = (m.group(3) or "0").lstrip("+-").lstrip("0")
    if len(digits) > 5:  # an exponent past any float's range (and past what int() parses)
        return math.inf if not m.group(3).startswith("-") else 0.0
    scale = int(m.group(3) or 0) - ndec
    if scale > 300:
        return math.inf
    return 0.5 * 10.0 ** max(scale, -400)


#: Floor of the plaquette / link-trace tolerance by stored precision (rounding of
#: the data and summation order in the writing code), added to printed_tolerance.
STAT_FLOOR = {4: 1e-6, 8: 1e-10}
