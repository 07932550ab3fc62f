"""Checksums of gauge configuration payloads.

NERSC (the CHECKSUM header field)
    The 32-bit unsigned sum, wrapping modulo 2**32, of the payload read as
    32-bit words in the file's byte order (IEEE64BIG: big-endian words).  For
    64-bit data this is the sum of both halves of every double; the order of
    the halves does not matter.  Computed over the data exactly as stored (two
    rows for 4D_SU3_GAUGE, three for 4D_SU3_GAUGE_3x3).  As in Grid's
    BinaryIO::NerscChecksum and the NERSC archive header definition.

SciDAC (the scidac-checksum record, and SCIDAC_CHECKSUMA/B in Grid's NERSC headers)
    For every site with global lexicographic index r (x fastest, then y, z, t):
    c = CRC32 (zlib, initial value 0) of the site's bytes as stored in the file;
    suma ^= rotl32(c, r mod 29); sumb ^= rotl32(c, r mod 31).  Both start at 0
    and are printed in lower-case hex.  As in QIO/QMP's DML_checksum_accum and
    Grid's BinaryIO::ScidacChecksum.
"""
from __future__ import annotations

import zlib

import numpy as np

_MASK = 0xFFFFFFFF


def nersc_checksum(data, word_dtype=">u4", start=0):
    """Add the 32-bit words of ``data`` (bytes-like, length a multiple of 4) to ``start``, mod 2**32."""
    words = np.frombuffer(data, dtype=word_dtype)
    return (int(start) + int(words.sum(dtype=np.uint64))) & _MASK


class NerscChecksum:
    """Accumulates the NERSC checksum: ``update(data, site_bytes=None, first_site=None)``."""

    def __init__(self, word_dtype=">u4"):
        self.word_dtype = word_dtype
        self.value = 0

    def update(self, data, site_bytes=None, first_site=None):
        self.value = nersc_checksum(data, self.word_dtype, self.value)
        return self


def rotl32(c, r):
    """Rotate 32-bit values ``c`` left by ``r`` bits (arrays; r in 0..31)."""
    c = np.asarray(c, dtype=np.uint64)
    r = np.asarray(r, dtype=np.uint64)
    return ((c << r) | (c >> (np.uint64(32) - r))) & np.uint64(_MASK)


class ScidacChecksum:
    """Accumulates the SciDAC checksum over consecutive sites: ``update(data, site_bytes, first_site)``."""

    def __init__(self):
        self.suma = 0
        self.sumb = 0

    def update(self, data, site_bytes, first_site):
        mv = memoryview(data).cast("B")
        n = len(mv) // site_bytes
        if n * site_bytes != len(mv):
            raise ValueError("ScidacChecksum.update: data is not a whole number of sites")
        crc = np.fromiter((zlib.crc32(mv[i * site_bytes:(i + 1) * site_bytes]) for i in range(n)),
                          dtype=np.uint64, count=n)
        rank = np.arange(first_site, first_site + n, dtype=np.uint64)
        self.suma ^= int(np.bitwise_xor.reduce(rotl32(crc, rank % np.uint64(29)))) if n else 0
        self.sumb ^= int(np.bitwise_xor.reduce(rotl32(crc, rank % np.uint64(31)))) if n else 0
        return self

    def hex(self):
        return f"{self.suma:x}", f"{self.sumb:x}"


def scidac_checksum(data, site_bytes, first_site=0):
    """(suma, sumb) of a contiguous run of sites starting at global index ``first_site``."""
    s = ScidacChecksum().update(data, site_bytes, first_site)
    return s.suma, s.sumb
