"""Counter-based random numbers: Philox4x32-10 in vectorised numpy.

A counter-based generator is a keyed bijection ``bits = philox(key, counter)``:
no state, so the numbers for a lattice site are a pure function of
(key, global site index, stream, position within the site). That is what makes
a pygrid random field independent of the SIMD layout, the thread count and the
MPI decomposition: every rank computes exactly the numbers of its own sites.

Philox4x32-10 is the generator of Salmon, Moraes, Dror and Shaw, "Parallel
random numbers: as easy as 1, 2, 3" (SC11), as implemented in Random123; the
tests check it against Random123's known-answer vectors (kat_vectors).

Counter layout used by :func:`uniform` and :func:`gaussian` (one Philox call
gives four 32-bit words, i.e. two 53-bit doubles)::

    counter = (g & 0xffffffff, g >> 32, stream, block)

with ``g`` the global site index (0 <= g < 2**64), ``stream`` the call number
(0 <= stream < 2**32) and ``block = j // 2`` for real number ``j`` of the site.
Real ``j = 2*block`` takes words 0, 1 of the block, ``j = 2*block + 1`` words 2, 3.
Distinct (g, stream, block) are distinct counters, so every (site, stream, j)
gets its own bits, and the numbers of a site do not depend on which other sites
are generated with it or in what order.
"""

from __future__ import annotations

import numpy as np

from ..errors import PyGridError

__all__ = [
    "philox4x32",
    "random_bits",
    "make_counters",
    "uniform",
    "gaussian",
    "MAX_STREAM",
]

# Philox4x32 constants (Random123 philox.h).
_M0 = np.uint64(0xD2511F53)
_M1 = np.uint64(0xCD9E8D57)
_W0 = np.uint64(0x9E3779B9)
_W1 = np.uint64(0xBB67AE85)
_MASK32 = np.uint64(0xFFFFFFFF)
_SHIFT32 = np.uint64(32)

MAX_STREAM = 2**32 - 1
"""Largest stream number (the stream occupies one 32-bit counter word)."""

_TWO_M53 = 2.0**-53
_TWO_26 = 67108864.0  # 2**26


class RandomError(PyGridError, ValueError):
    """Bad key, counter, site index or stream handed to the random generator."""


def _check_key(key) -> tuple[np.uint64, np.uint64]:
    try:
        k0, k1 = (int(k) for k in key)
    except (TypeError, ValueError) as exc:
        raise RandomError(f"a Philox key is a pair of 32-bit unsigned ints, got {key!r}") from exc
    for k in (k0, k1):
        if not 0 <= k <= 0xFFFFFFFF:
            raise RandomError(f"Philox key words must be in [0, 2**32), got {key!r}")
    return np.uint64(k0), np.uint64(k1)


def philox4x32(key, counters, rounds: int = 10) -> np.ndarray:
    """Philox4x32 with ``rounds`` rounds (10 is the standard, crush-resistant choice).

    ``key`` is a pair of 32-bit ints, ``counters`` an integer array of shape (..., 4)
    holding 32-bit words; returns a uint32 array of the same shape.
    """
    k0, k1 = _check_key(key)
    ctr = np.asarray(counters)
    if ctr.ndim == 0 or ctr.shape[-1] != 4:
        raise RandomError(f"Philox counters must have shape (..., 4), got {ctr.shape}")
    if ctr.dtype != np.uint32:
        if not np.issubdtype(ctr.dtype, np.integer):
            raise RandomError(f"Philox counters must be integers, got dtype {ctr.dtype}")
        if ctr.size and (ctr.min() < 0 or ctr.max() > 0xFFFFFFFF):
            raise RandomError("Philox counter words must be in [0, 2**32)")
    # 32x32 -> 64-bit products are exact in uint64.
    c0 = ctr[..., 0].astype(np.uint64)
    c1 = ctr[..., 1].astype(np.uint64)
    c2 = ctr[..., 2].astype(np.uint64)
    c3 = ctr[..., 3].astype(np.uint64)
    for r in range(rounds):
        if r:
            k0 = (k0 + _W0) & _MASK32
            k1 = (k1 + _W1) & _MASK32
        p0 = c0 * _M0
        p1 = c2 * _M1
        c0, c1, c2, c3 = (
            (p1 >> _SHIFT32) ^ c1 ^ k0,
            p1 & _MASK32,
            (p0 >> _SHIFT32) ^ c3 ^ k1,
            p0 & _MASK32,
        )
    out = np.empty(ctr.shape, dtype=np.uint32)
    out[..., 0] = c0
    out[..., 1] = c1
    out[..., 2] = c2
    out[..., 3] = c3
    return out


def random_bits(key, counters) -> np.ndarray:
    """Philox4x32-10: ``key`` (uint32, uint32), ``counters`` (..., 4) uint32 -> uint32 (..., 4)."""
    return philox4x32(key, counters, rounds=10)


def _site_index_array(site_index) -> np.ndarray:
    idx = np.asarray(site_index)
    if idx.dtype == np.uint64:
        return idx
    if not np.issubdtype(idx.dtype, np.integer):
        raise RandomError(f"site indices must be integers, got dtype {idx.dtype}")
    if idx.size and idx.min() < 0:
        raise RandomError("site indices must be non-negative")
    return idx.astype(np.uint64)


def _check_stream(stream) -> int:
    s = int(stream)
    if not 0 <= s <= MAX_STREAM:
        raise RandomError(f"stream must be in [0, 2**32), got {stream!r}")
    return s


def make_counters(site_index, stream: int, nblocks: int) -> np.ndarray:
    """Counters (*site_index.shape, nblocks, 4) uint32 = (g lo, g hi, stream, block)."""
    g = _site_index_array(site_index)
    s = _check_stream(stream)
    if nblocks < 0 or nblocks > 2**32:
        raise RandomError(f"number of counter blocks out of range: {nblocks}")
    ctr = np.empty(g.shape + (nblocks, 4), dtype=np.uint32)
    ctr[..., 0] = (g & _MASK32).astype(np.uint32)[..., None]
    ctr[..., 1] = (g >> _SHIFT32).astype(np.uint32)[..., None]
    ctr[..., 2] = np.uint32(s)
    ctr[..., 3] = np.arange(nblocks, dtype=np.uint32)
    return ctr


def uniform(key, site_index, stream: int, nreal: int) -> np.ndarray:
    """Uniform doubles in [0, 1) with 53-bit resolution, shape (*site_index.shape, nreal).

    Real ``j`` of site ``g`` is a function of (key, g, stream, j) only.
    """
    nreal = int(nreal)
    if nreal < 0:
        raise RandomError(f"nreal must be non-negative, got {nreal}")
    g = _site_index_array(site_index)
    nblocks = (nreal + 1) // 2
    bits = random_bits(key, make_counters(g, stream, nblocks))  # (..., nblocks, 4)
    # words (0,1) -> real 2b, words (2,3) -> real 2b+1; 27 + 26 bits = 53 bits.
    bits = bits.reshape(g.shape + (2 * nblocks, 2))
    hi = (bits[..., 0] >> np.uint32(5)).astype(np.float64)
    lo = (bits[..., 1] >> np.uint32(6)).astype(np.float64)
    u = (hi * _TWO_26 + lo) * _TWO_M53
    return u[..., :nreal]


def gaussian(key, site_index, stream: int, nreal: int) -> np.ndarray:
    """Standard normal doubles, shape (*site_index.shape, nreal), by Box-Muller.

    Normals ``2p`` and ``2p + 1`` come from uniforms ``2p`` and ``2p + 1`` of the same
    (site, stream): radius from the first, angle from the second. This shares the
    counter space of :func:`uniform`, so never use one stream for both.
    """
    nreal = int(nreal)
    if nreal < 0:
        raise RandomError(f"nreal must be non-negative, got {nreal}")
    npair = (nreal + 1) // 2
    u = uniform(key, site_index, stream, 2 * npair)
    u1 = u[..., 0::2]
    u2 = u[..., 1::2]
    r = np.sqrt(-2.0 * np.log1p(-u1))  # 1 - u1 in (0, 1]: log is finite
    theta = (2.0 * np.pi) * u2
    z = np.empty(u.shape, dtype=np.float64)
    z[..., 0::2] = r * np.cos(theta)
    z[..., 1::2] = r * np.sin(theta)
    return z[..., :nreal]
