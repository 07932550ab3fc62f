"""ParallelRNG: layout-independent random lattice fields.

Every number is a pure function of (seed, global site index, stream, position
within the site) through the Philox4x32-10 counter-based generator
(:mod:`pygrid.random.counter`), so a seed gives the same field whatever the
SIMD layout, thread count, MPI decomposition or checkerboarding: a red-black
half field gets exactly the numbers of those sites in a full field filled by
the same call number.

Conventions
-----------
* ``seed`` is an int or a sequence of ints (Grid style, ``[1, 2, 3, 4]``); an int
  ``s`` is the same seed as ``[s]``. It is folded into the 64-bit Philox key with
  the splitmix64 finaliser (:func:`seed_to_key`): stable across runs, Python
  versions and platforms (never Python's ``hash()``).
* Each fill consumes one stream number (``rng.stream``, starting at 0 and
  incremented per call), so successive calls differ and two RNGs with the same
  seed produce the same sequence of fields.
* ``gaussian`` on complex fields: real and imaginary parts are each independent
  N(0, sigma^2), as Grid does (``ComplexD(normal(gen), normal(gen))``), so
  ``E|z|^2 = 2 sigma^2``.
* ``uniform`` on complex fields: real and imaginary parts each independent
  uniform in [low, high).
* Within a site the reals are taken in C order of ``site_shape`` with, for
  complex fields, (real, imaginary) innermost.
* Numbers are generated in float64 and cast for single-precision fields.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable

import numpy as np

from ..errors import ConfigError, SiteTypeError
from . import counter as _counter
from .counter import MAX_STREAM, RandomError

__all__ = [
    "ParallelRNG",
    "seed_to_key",
    "uniform_array",
    "gaussian_array",
    "sun_from_ginibre",
    "random_sun_array",
    "random_sun_near_identity_array",
]

_M64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_TAG = 0x7079677269642D31  # "pygrid-1": bump to change every seed's key on purpose

# Sites generated per chunk aim at about this many reals (bounds temporaries).
_CHUNK_REALS = 1 << 21


def _mix64(z: int) -> int:
    """splitmix64 finaliser (Steele, Lea, Flood 2014): a bijection of 64-bit ints."""
    z &= _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def seed_to_key(seed) -> tuple[int, int]:
    """Fold an int or a sequence of ints (any size, any sign) into a Philox key.

    Length, sign and every 64-bit word of each int are mixed in, so ``[1, 2]``,
    ``[2, 1]``, ``[1, 2, 0]`` and ``[-1, 2]`` all give different keys.
    """
    if isinstance(seed, (str, bytes)):
        raise ConfigError(f"a seed is an int or a list of ints, got {seed!r}")
    if isinstance(seed, np.ndarray):
        seeds = seed.ravel().tolist()
    elif isinstance(seed, Iterable):
        seeds = list(seed)
    else:
        seeds = [seed]
    if not seeds:
        raise ConfigError("an empty seed list: give at least one int, e.g. [1, 2, 3, 4]")
    try:
        seeds = [operator.index(s) for s in seeds]
    except TypeError as exc:
        raise ConfigError(f"a seed is an int or a list of ints, got {seed!r}") from exc
    h = _mix64(_TAG ^ len(seeds))
    for s in seeds:
        a = abs(s)
        words = []
        while a or not words:
            words.append(a & _M64)
            a >>= 64
        h = _mix64(((h + _GOLDEN) & _M64) ^ ((len(words) << 1) | (s < 0)))
        for w in words:
            h = _mix64(((h + _GOLDEN) & _M64) ^ w)
    return (h & 0xFFFFFFFF, h >> 32)


# ---------------------------------------------------------------------------
# Array-level fills: (key, global site indices, stream) -> numbers per site.
# Easy to call without any lattice; ParallelRNG is a thin layer on top.
# ---------------------------------------------------------------------------


def _generate(kind: str, key, idx, stream: int, nreal: int, out_flat: np.ndarray, post):
    """Fill ``out_flat`` (nsites, nreal) chunk by chunk with ``post(numbers)``."""
    flat = np.asarray(idx).reshape(-1)
    nsites = flat.shape[0]
    step = max(1, _CHUNK_REALS // max(nreal, 1))
    gen = _counter.uniform if kind == "uniform" else _counter.gaussian
    for start in range(0, nsites, step):
        stop = min(nsites, start + step)
        out_flat[start:stop] = post(gen(key, flat[start:stop], stream, nreal))
    return out_flat


def _shape_nreal(site_shape, is_complex):
    site_shape = tuple(int(n) for n in site_shape)
    ncomp = int(np.prod(site_shape, dtype=np.int64))
    return site_shape, ncomp * (2 if is_complex else 1)


def _default_dtype(is_complex):
    return np.dtype(np.complex128 if is_complex else np.float64)


def _as_output(real_flat, idx_shape, site_shape, is_complex, dtype):
    dtype = np.dtype(dtype)
    if is_complex:
        if dtype.kind != "c":
            raise RandomError(f"a complex fill needs a complex dtype, got {dtype}")
        real_dtype = np.dtype(np.float32 if dtype == np.complex64 else np.float64)
        real_flat = np.ascontiguousarray(real_flat, dtype=real_dtype)
        out = real_flat.view(dtype)
    else:
        if dtype.kind != "f":
            raise RandomError(f"a real fill needs a real float dtype, got {dtype}")
        out = real_flat.astype(dtype, copy=False)
    return out.reshape(tuple(idx_shape) + site_shape)


def _real_buffer(nsites, nreal, is_complex, dtype):
    dtype = np.dtype(dtype) if dtype is not None else _default_dtype(is_complex)
    if dtype in (np.complex64, np.float32):
        real_dtype = np.float32
    else:
        real_dtype = np.float64
    return dtype, np.empty((nsites, nreal), dtype=real_dtype)


def uniform_array(key, idx, stream: int, site_shape=(), is_complex=True,
                  low=0.0, high=1.0, dtype=None) -> np.ndarray:
    """Uniform numbers in [low, high), shape ``idx.shape + site_shape``.

    Complex: real and imaginary parts independent. ``dtype`` defaults to
    complex128 / float64; single-precision results are cast from float64.
    """
    idx = np.asarray(idx)
    site_shape, nreal = _shape_nreal(site_shape, is_complex)
    dtype, buf = _real_buffer(idx.size, nreal, is_complex, dtype)
    low = float(low)
    scale = float(high) - low
    _generate("uniform", key, idx, stream, nreal, buf, lambda u: low + scale * u)
    if scale > 0:
        # low + scale*u, or the cast to float32, can round up to high: keep [low, high).
        np.minimum(buf, np.nextafter(buf.dtype.type(high), buf.dtype.type(low)), out=buf)
    return _as_output(buf, idx.shape, site_shape, is_complex, dtype)


def gaussian_array(key, idx, stream: int, site_shape=(), is_complex=True,
                   sigma=1.0, dtype=None) -> np.ndarray:
    """Normal numbers, shape ``idx.shape + site_shape``.

    Real fields: N(0, sigma^2). Complex: real and imaginary parts each N(0, sigma^2).
    """
    idx = np.asarray(idx)
    site_shape, nreal = _shape_nreal(site_shape, is_complex)
    dtype, buf = _real_buffer(idx.size, nreal, is_complex, dtype)
    sigma = float(sigma)
    _generate("gaussian", key, idx, stream, nreal, buf, lambda z: sigma * z)
    return _as_output(buf, idx.shape, site_shape, is_complex, dtype)


def sun_from_ginibre(z: np.ndarray) -> np.ndarray:
    """Map complex Gaussian (Ginibre) matrices (..., N, N) to Haar-random SU(N).

    Q R = z (batched QR), Q's columns are multiplied by the phases of R's diagonal
    (Mezzadri, "How to generate random matrices from the classical compact groups",
    2007), which makes Q Haar on U(N); then Q / det(Q)^(1/N) (principal root) is
    Haar on SU(N): the map commutes with left multiplication by SU(N).
    """
    z = np.asarray(z, dtype=np.complex128)
    if z.ndim < 2 or z.shape[-1] != z.shape[-2]:
        raise SiteTypeError(f"sun_from_ginibre needs (..., N, N) matrices, got shape {z.shape}")
    n = z.shape[-1]
    q, r = np.linalg.qr(z)
    d = np.diagonal(r, axis1=-2, axis2=-1)
    absd = np.abs(d)
    ph = np.where(absd > 0, d / np.where(absd > 0, absd, 1.0), 1.0)
    q = q * ph[..., None, :]
    det = np.linalg.det(q)
    root = np.exp(1j * np.angle(det) / n)  # |det| = 1 up to rounding
    return q / root[..., None, None]


def _colour_dims(site_shape):
    site_shape = tuple(int(n) for n in site_shape)
    if len(site_shape) < 2 or site_shape[-1] != site_shape[-2] or site_shape[-1] < 1:
        raise SiteTypeError(
            f"random_sun needs a site type whose innermost level is an N x N colour "
            f"matrix, got site shape {site_shape}"
        )
    return site_shape, site_shape[-1]


def random_sun_array(key, idx, stream: int, site_shape=(3, 3), dtype=None) -> np.ndarray:
    """Haar-random SU(N) matrices, shape ``idx.shape + site_shape``, site_shape[-2:] == (N, N).

    Each matrix is :func:`sun_from_ginibre` of a Ginibre matrix whose entries have
    real and imaginary parts N(0, 1) drawn as by :func:`gaussian_array`.
    """
    idx = np.asarray(idx)
    site_shape, n = _colour_dims(site_shape)
    dtype = np.dtype(np.complex128 if dtype is None else dtype)
    z = gaussian_array(key, idx, stream, site_shape, True, 1.0, np.complex128)
    u = sun_from_ginibre(z)
    return u.astype(dtype, copy=False)


def random_sun_near_identity_array(key, idx, stream: int, eps: float,
                                   site_shape=(3, 3), dtype=None) -> np.ndarray:
    """SU(N) matrices ``exp(i eps H)`` near the identity, shape ``idx.shape + site_shape``.

    ``H = sum_a w_a T^a`` with ``w_a`` independent N(0, 1) and generators normalised
    ``tr(T^a T^b) = delta_ab / 2``, built as the traceless Hermitian part of a
    Ginibre matrix; the exponential is taken exactly through ``eigh``, so the
    result is unitary with det 1 to rounding for any ``eps``.
    """
    idx = np.asarray(idx)
    site_shape, n = _colour_dims(site_shape)
    dtype = np.dtype(np.complex128 if dtype is None else dtype)
    a = gaussian_array(key, idx, stream, site_shape, True, 1.0, np.complex128)
    h = (a + np.conj(np.swapaxes(a, -1, -2))) / (2.0 * np.sqrt(2.0))
    tr = np.trace(h, axis1=-2, axis2=-1).real / n
    h = h - tr[..., None, None] * np.eye(n)
    lam, v = np.linalg.eigh(h)
    ph = np.exp(1j * float(eps) * lam)
    u = (v * ph[..., None, :]) @ np.conj(np.swapaxes(v, -1, -2))
    return u.astype(dtype, copy=False)


# ---------------------------------------------------------------------------
# The field-level generator
# ---------------------------------------------------------------------------


class ParallelRNG:
    """Layout-independent parallel random number generator for lattice fields.

    ``ParallelRNG(grid, seed)``: ``seed`` an int or a list of ints. Fills work on
    any field of ``grid`` (full or checkerboarded) through ``field.grid
    .global_site_indices(field.checkerboard)`` and ``field.from_local_numpy``; every
    fill uses a new stream, so successive fills are independent.
    """

    def __init__(self, grid, seed):
        self.grid = grid
        self.seed = list(seed) if isinstance(seed, Iterable) and not isinstance(seed, (str, bytes)) else seed
        self.key = seed_to_key(seed)
        self.stream = 0

    def __repr__(self):
        return f"ParallelRNG(seed={self.seed!r}, stream={self.stream})"

    # -- streams --------------------------------------------------------------

    def _next_stream(self) -> int:
        s = self.stream
        if s > MAX_STREAM:
            raise RandomError(
                "this ParallelRNG has used all 2**32 streams; make a new one with another seed"
            )
        self.stream = s + 1
        return s

    def get_state(self) -> dict:
        """Seed key and stream counter, enough to resume the sequence (checkpointing)."""
        return {"key": tuple(self.key), "stream": self.stream}

    def set_state(self, state: dict) -> None:
        key = tuple(int(k) for k in state["key"])
        _counter._check_key(key)
        stream = int(state["stream"])
        if not 0 <= stream <= MAX_STREAM + 1:
            raise RandomError(f"stream out of range: {stream}")
        self.key = key
        self.stream = stream

    # -- plumbing -------------------------------------------------------------

    def _indices(self, field) -> np.ndarray:
        if self.grid is not None and field.grid is not self.grid:
            # Same global lattice on another grid object (other SIMD layout) is fine;
            # only insist on matching global dimensions when both grids expose them.
            gd_self = getattr(self.grid, "gdimensions", None)
            gd_field = getattr(field.grid, "gdimensions", None)
            if gd_self is not None and gd_field is not None and tuple(gd_self) != tuple(gd_field):
                from ..errors import ConformabilityError

                raise ConformabilityError(
                    f"field lives on a grid with global dimensions {tuple(gd_field)}, "
                    f"this ParallelRNG on {tuple(gd_self)}: make an RNG on the field's grid"
                )
        return np.asarray(field.grid.global_site_indices(field.checkerboard))

    def _fill_array(self, idx, site_shape, is_complex, kind="uniform", dtype=None, **kw):
        """Numbers for sites ``idx`` of a field with ``site_shape``; consumes one stream.

        ``kind`` is "uniform" (kw: low, high), "gaussian" (kw: sigma), "sun" or
        "sun_near_identity" (kw: eps). Lets tests and other packages fill raw arrays.
        """
        stream = self._next_stream()
        if kind == "uniform":
            return uniform_array(self.key, idx, stream, site_shape, is_complex,
                                 kw.get("low", 0.0), kw.get("high", 1.0), dtype)
        if kind == "gaussian":
            return gaussian_array(self.key, idx, stream, site_shape, is_complex,
                                  kw.get("sigma", 1.0), dtype)
        if kind == "sun":
            return random_sun_array(self.key, idx, stream, site_shape, dtype)
        if kind == "sun_near_identity":
            return random_sun_near_identity_array(self.key, idx, stream, kw["eps"],
                                                  site_shape, dtype)
        raise ValueError(f"unknown kind {kind!r}")

    @staticmethod
    def _colour_site_shape(field):
        site_shape = tuple(field.site_shape)
        st = getattr(field, "site_type", None)
        is_cm = getattr(st, "colour_matrix", None)
        if is_cm is None:
            is_cm = len(site_shape) >= 2 and site_shape[-1] == site_shape[-2]
        if not is_cm:
            raise SiteTypeError(
                f"random_sun needs a field of colour matrices (ColourMatrix, "
                f"LorentzColourMatrix, ...), got site shape {site_shape}"
            )
        if getattr(field, "is_real", False):
            raise SiteTypeError("random_sun needs a complex field, got a real one")
        nc = getattr(st, "nc", None)
        if nc is not None and site_shape[-2:] != (int(nc), int(nc)):
            raise SiteTypeError(
                f"site type says nc={nc} but the innermost site shape is {site_shape[-2:]}"
            )
        return site_shape

    # -- public fills ---------------------------------------------------------

    def uniform(self, field, low=0.0, high=1.0):
        """Fill ``field`` uniform in [low, high) (complex: real and imaginary parts independently)."""
        idx = self._indices(field)
        a = self._fill_array(idx, field.site_shape, not field.is_real, "uniform",
                             field.dtype, low=low, high=high)
        field.from_local_numpy(a)
        return field

    def gaussian(self, field, sigma=1.0):
        """Fill ``field`` with N(0, sigma^2) (complex: real and imaginary parts each N(0, sigma^2))."""
        idx = self._indices(field)
        a = self._fill_array(idx, field.site_shape, not field.is_real, "gaussian",
                             field.dtype, sigma=sigma)
        field.from_local_numpy(a)
        return field

    def random_sun(self, field):
        """Fill every colour matrix of ``field`` with a Haar-random SU(N) matrix."""
        site_shape = self._colour_site_shape(field)
        idx = self._indices(field)
        field.from_local_numpy(self._fill_array(idx, site_shape, True, "sun", field.dtype))
        return field

    random_su3 = random_sun

    def random_sun_near_identity(self, field, eps):
        """Fill every colour matrix with ``exp(i eps H)``, H a random su(N) element (w_a ~ N(0,1))."""
        site_shape = self._colour_site_shape(field)
        idx = self._indices(field)
        field.from_local_numpy(self._fill_array(idx, site_shape, True, "sun_near_identity",
                                          field.dtype, eps=eps))
        return field

    random_su3_near_identity = random_sun_near_identity
