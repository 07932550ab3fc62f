"""Independent numpy references shared by the tests: written from docs/conventions.md, not from
pygrid's kernels.

The QCD references (Dhop, plaquette, link trace, the gamma matrices typed in from
docs/conventions.md) live in :mod:`pygrid.qcd.reference`, shared with the benchmarks'
checks; tests that use the gamma matrices also pin pygrid's own constants
(tests/test_expr.py).  The IO checksum reference is here.
"""
import zlib

from pygrid.qcd.reference import (  # noqa: F401 - the tests import the references from here
    GAMMA_5,
    GAMMA_MU,
    GAMMA_T,
    GAMMA_X,
    GAMMA_Y,
    GAMMA_Z,
    dhop as dhop_ref,
    link_trace as link_trace_ref,
    plaquette as plaquette_ref,
)


def scidac_ref(payload, site_bytes):
    """SciDAC checksum by its definition: per-site CRC32 rotated by rank mod 29 / mod 31, XORed."""
    a = b = 0
    for r in range(len(payload) // site_bytes):
        c = zlib.crc32(payload[r * site_bytes:(r + 1) * site_bytes]) & 0xFFFFFFFF
        ra, rb = r % 29, r % 31
        a ^= ((c << ra) | (c >> (32 - ra))) & 0xFFFFFFFF
        b ^= ((c << rb) | (c >> (32 - rb))) & 0xFFFFFFFF
    return a, b
