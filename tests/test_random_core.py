"""pygrid.random: Philox known answers, statistics, site keying, SU(N), ParallelRNG.

ParallelRNG is tested here against a small fake field/grid implementing the
interface it relies on (grid.global_site_indices, field.from_numpy, site_shape,
is_real, dtype, checkerboard, site_type); integration with real Lattices is
tested elsewhere.
"""

import itertools

import numpy as np
import pytest

from pygrid.errors import ConfigError, PyGridError, SiteTypeError
from pygrid.random import (
    ParallelRNG,
    RandomError,
    gaussian,
    gaussian_array,
    random_bits,
    random_sun_array,
    random_sun_near_identity_array,
    seed_to_key,
    sun_from_ginibre,
    uniform,
    uniform_array,
)
from pygrid.random.counter import make_counters

KEY = (0x12345678, 0x9ABCDEF0)

# --------------------------------------------------------------------------
# Philox4x32-10 known answers (Random123 kat_vectors)
# --------------------------------------------------------------------------

KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    (
        (0xFFFFFFFF,) * 4,
        (0xFFFFFFFF, 0xFFFFFFFF),
        (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD),
    ),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
]


@pytest.mark.parametrize("ctr,key,expected", KAT)
def test_philox_known_answers(ctr, key, expected):
    out = random_bits(key, np.array(ctr, dtype=np.uint32))
    assert out.dtype == np.uint32 and out.shape == (4,)
    assert tuple(int(x) for x in out) == expected


def test_philox_batched_matches_single():
    rng = np.random.default_rng(0)
    ctrs = rng.integers(0, 2**32, size=(5, 7, 4), dtype=np.uint64).astype(np.uint32)
    ctrs[0, 0] = KAT[2][0]
    batch = random_bits(KAT[2][1], ctrs)
    assert batch.shape == (5, 7, 4)
    assert tuple(int(x) for x in batch[0, 0]) == KAT[2][2]
    for i, j in [(1, 2), (4, 6), (3, 0)]:
        np.testing.assert_array_equal(batch[i, j], random_bits(KAT[2][1], ctrs[i, j]))


def test_philox_rejects_bad_input():
    with pytest.raises(RandomError):
        random_bits((0, 2**32), np.zeros(4, np.uint32))
    with pytest.raises(RandomError):
        random_bits((0, 0), np.zeros((2, 3), np.uint32))
    with pytest.raises(PyGridError):
        uniform(KEY, np.array([-1]), 0, 2)
    with pytest.raises(ValueError):
        uniform(KEY, np.array([1]), 2**32, 2)


def test_counter_layout():
    g = np.array([5, 2**32 + 7, 2**64 - 1], dtype=np.uint64)
    c = make_counters(g, 9, 3)
    assert c.shape == (3, 3, 4)
    np.testing.assert_array_equal(c[1, 2], [7, 1, 9, 2])
    np.testing.assert_array_equal(c[2, 0], [0xFFFFFFFF, 0xFFFFFFFF, 9, 0])
    # Real 2b uses words 0,1 of block b; real 2b+1 words 2,3.
    bits = random_bits(KEY, c[0, 1])
    u = uniform(KEY, g[:1], 9, 4)[0]
    assert u[2] == ((int(bits[0]) >> 5) * 2**26 + (int(bits[1]) >> 6)) * 2.0**-53
    assert u[3] == ((int(bits[2]) >> 5) * 2**26 + (int(bits[3]) >> 6)) * 2.0**-53


# --------------------------------------------------------------------------
# uniform / gaussian statistics (deterministic keys: bounds are ~5 sigma)
# --------------------------------------------------------------------------

N_STAT = 1_000_000


def test_uniform_moments_and_range():
    u = uniform(KEY, np.arange(N_STAT // 4), 3, 4).ravel()
    assert u.dtype == np.float64 and u.size == N_STAT
    assert u.min() >= 0.0 and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 5 * np.sqrt(1 / 12 / N_STAT)
    assert abs(u.var() - 1 / 12) < 5 * np.sqrt((1 / 80 - 1 / 144) / N_STAT)
    # histogram: 20 bins, chi^2 with 19 dof, generous bound
    counts, _ = np.histogram(u, bins=20, range=(0, 1))
    expected = N_STAT / 20
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 60
    # 53-bit resolution: integer multiples of 2**-53 using the low bits too
    k = u[:10000] * 2.0**53
    assert np.all(k == np.floor(k))
    assert np.any(k % 2 == 1)


def test_uniform_odd_nreal_is_prefix():
    idx = np.arange(100)
    a = uniform(KEY, idx, 0, 7)
    b = uniform(KEY, idx, 0, 8)
    assert a.shape == (100, 7)
    np.testing.assert_array_equal(a, b[:, :7])


def test_gaussian_moments():
    z = gaussian(KEY, np.arange(N_STAT // 4), 4, 4).ravel()
    assert np.all(np.isfinite(z))
    assert abs(z.mean()) < 5 * np.sqrt(1 / N_STAT)
    assert abs(z.var() - 1) < 5 * np.sqrt(2 / N_STAT)
    assert abs(np.mean(z**3)) < 5 * np.sqrt(15 / N_STAT)
    assert abs(np.mean(z**4) - 3) < 5 * np.sqrt(96 / N_STAT)
    # fraction within one sigma: 0.682689...
    frac = np.mean(np.abs(z) < 1)
    p = 0.6826894921370859
    assert abs(frac - p) < 5 * np.sqrt(p * (1 - p) / N_STAT)
    # Box-Muller pairs are uncorrelated
    pairs = gaussian(KEY, np.arange(N_STAT // 2), 5, 2)
    r = np.corrcoef(pairs[:, 0], pairs[:, 1])[0, 1]
    assert abs(r) < 5 / np.sqrt(N_STAT / 2)


def test_streams_independent():
    idx = np.arange(200_000)
    a = uniform(KEY, idx, 0, 2).ravel()
    b = uniform(KEY, idx, 1, 2).ravel()
    assert not np.any(a == b)
    r = np.corrcoef(a, b)[0, 1]
    assert abs(r) < 5 / np.sqrt(a.size)
    # neighbouring sites and neighbouring reals within a site uncorrelated too
    r_site = np.corrcoef(a[0:-2:2], a[2::2])[0, 1]
    r_j = np.corrcoef(a[0::2], a[1::2])[0, 1]
    assert abs(r_site) < 5 / np.sqrt(a.size / 2)
    assert abs(r_j) < 5 / np.sqrt(a.size / 2)


def test_keys_distinct():
    idx = np.arange(1000)
    a = uniform((1, 0), idx, 0, 4)
    b = uniform((0, 1), idx, 0, 4)
    c = uniform((1, 0), idx, 0, 4)
    np.testing.assert_array_equal(a, c)
    assert not np.any(a == b)


def test_site_keyed_independent_of_shape_and_order():
    rng = np.random.default_rng(1)
    idx = rng.permutation(4096).astype(np.int64) * 1_000_003 + 2**40
    ref = uniform(KEY, idx, 7, 5)
    perm = rng.permutation(idx.size)
    np.testing.assert_array_equal(uniform(KEY, idx[perm], 7, 5), ref[perm])
    np.testing.assert_array_equal(
        uniform(KEY, idx.reshape(16, 8, 32), 7, 5), ref.reshape(16, 8, 32, 5)
    )
    np.testing.assert_array_equal(uniform(KEY, idx[100:200], 7, 5), ref[100:200])
    np.testing.assert_array_equal(uniform(KEY, idx.astype(np.uint64), 7, 5), ref)
    gref = gaussian(KEY, idx, 7, 6)
    np.testing.assert_array_equal(gaussian(KEY, idx[perm][::-1], 7, 6), gref[perm][::-1])
    # chunked array fills give the same as one-shot generation
    big = np.arange(300_000)
    a = uniform_array(KEY, big, 2, (4,), True)
    u = uniform(KEY, big, 2, 8)
    np.testing.assert_array_equal(a.view(np.float64).reshape(-1, 8), u)


# --------------------------------------------------------------------------
# SU(N)
# --------------------------------------------------------------------------


def _check_sun(u, tol=1e-12):
    n = u.shape[-1]
    eye = np.eye(n)
    uu = np.conj(np.swapaxes(u, -1, -2)) @ u
    assert np.abs(uu - eye).max() < tol
    assert np.abs(np.linalg.det(u) - 1).max() < tol


@pytest.mark.parametrize("n", [2, 3, 4])
def test_sun_from_ginibre_unitary_det1(n):
    rng = np.random.default_rng(n)
    z = rng.normal(size=(500, n, n)) + 1j * rng.normal(size=(500, n, n))
    _check_sun(sun_from_ginibre(z))


def test_random_sun_array_shapes_and_keying():
    idx = np.arange(60).reshape(3, 20)
    u = random_sun_array(KEY, idx, 11, (4, 3, 3))
    assert u.shape == (3, 20, 4, 3, 3) and u.dtype == np.complex128
    _check_sun(u)
    # the four links of a site are different
    assert np.abs(u[:, :, 0] - u[:, :, 1]).min() > 0
    perm = np.random.default_rng(2).permutation(60)
    u2 = random_sun_array(KEY, idx.ravel()[perm], 11, (4, 3, 3))
    np.testing.assert_allclose(u2, u.reshape(60, 4, 3, 3)[perm], rtol=0, atol=1e-14)
    u32 = random_sun_array(KEY, idx, 11, (4, 3, 3), dtype=np.complex64)
    assert u32.dtype == np.complex64
    np.testing.assert_allclose(u32, u, atol=1e-6)
    with pytest.raises(SiteTypeError):
        random_sun_array(KEY, idx, 0, (4, 3))


def test_haar_su3_moments():
    n = 40_000
    u = random_sun_array(KEY, np.arange(n), 12, (3, 3))
    _check_sun(u)
    tr = np.trace(u, axis1=-2, axis2=-1)
    assert abs(tr.mean()) < 0.04  # E tr U = 0, std of mean 1/sqrt(2n) per part
    assert abs(np.mean(np.abs(tr) ** 2) - 1) < 0.05  # E |tr U|^2 = 1
    # SU(3), not U(3): E (tr U)^3 = 1 (the singlet in 3x3x3); it is 0 for U(3)
    assert abs(np.mean(tr**3) - 1) < 0.1
    # each entry |U_ij|^2 has mean 1/N
    assert np.abs(np.mean(np.abs(u) ** 2, axis=0) - 1 / 3).max() < 0.01
    # phases of the top-left entries uniform: mean of U_00 ~ 0
    assert abs(u[:, 0, 0].mean()) < 0.02


def test_haar_su2_moments():
    u = random_sun_array(KEY, np.arange(40_000), 13, (2, 2))
    _check_sun(u)
    tr = np.trace(u, axis1=-2, axis2=-1)
    assert np.abs(tr.imag).max() < 1e-12  # SU(2) traces are real
    assert abs(tr.real.mean()) < 0.03
    assert abs(np.mean(tr.real**2) - 1) < 0.04


def test_near_identity():
    idx = np.arange(2000)
    u = random_sun_near_identity_array(KEY, idx, 3, 0.01, (3, 3))
    _check_sun(u)
    dist = np.abs(u - np.eye(3)).max(axis=(-1, -2))
    assert dist.max() < 0.2 and dist.mean() > 1e-4
    # generator normalisation: U ~ 1 + i eps H, sum_a w_a^2 = 2 tr H^2, E = N^2-1
    eps = 1e-4
    u = random_sun_near_identity_array(KEY, idx, 3, eps, (3, 3))
    h = (u - np.conj(np.swapaxes(u, -1, -2))) / (2j * eps)
    w2 = 2 * np.trace(h @ h, axis1=-2, axis2=-1).real
    assert abs(w2.mean() - 8) < 0.5


# --------------------------------------------------------------------------
# Seeds
# --------------------------------------------------------------------------


def test_seed_to_key():
    assert seed_to_key(5) == seed_to_key([5]) == seed_to_key(np.array([5]))
    keys = [seed_to_key(s) for s in ([1, 2, 3, 4], [4, 3, 2, 1], [1, 2, 3, 4, 0], [-1, 2, 3, 4],
                                     [0], 0, [2**64 + 1], [1], [2**64 - 1])]
    assert len(set(keys[:4] + keys[5:6] + keys[6:])) == 8
    for k in keys:
        assert all(0 <= w < 2**32 for w in k)
    # pinned: keys must not change between releases or platforms
    assert seed_to_key([1, 2, 3, 4]) == (225191878, 3447299572)
    assert seed_to_key(5) == (1213817204, 685434678)
    with pytest.raises(ConfigError):
        seed_to_key([])
    with pytest.raises(ConfigError):
        seed_to_key([1.5])
    with pytest.raises(ConfigError):
        seed_to_key("abc")


# --------------------------------------------------------------------------
# ParallelRNG against a fake field implementing the lattice interface
# --------------------------------------------------------------------------


class FakeSiteType:
    def __init__(self, site_shape, nc=None):
        self.colour_matrix = nc is not None
        self.nc = nc


class FakeGrid:
    """A rank's block of a global lattice: ldims = gdims / procs at block ``coord``."""

    def __init__(self, gdims, procs=None, coord=None):
        self.gdimensions = tuple(gdims)
        procs = procs or (1,) * len(gdims)
        coord = coord or (0,) * len(gdims)
        self.ldims = tuple(g // p for g, p in zip(gdims, procs))
        self.offset = tuple(c * l for c, l in zip(coord, self.ldims))

    def global_coords(self):
        axes = [np.arange(o, o + l) for o, l in zip(self.offset, self.ldims)]
        return np.meshgrid(*axes, indexing="ij")

    def global_site_indices(self, checkerboard=None):
        x = self.global_coords()
        idx = np.zeros(self.ldims, dtype=np.int64)
        stride = 1
        for d in range(len(self.ldims)):  # dimension 0 fastest
            idx += x[d] * stride
            stride *= self.gdimensions[d]
        if checkerboard is None:
            return idx
        # half field: x-dimension compressed, keep sites of parity == checkerboard
        parity = sum(x) % 2
        moved = np.moveaxis(idx, 0, -1)
        mask = np.moveaxis(parity, 0, -1) == checkerboard
        half = moved[mask].reshape(moved.shape[:-1] + (moved.shape[-1] // 2,))
        return np.moveaxis(half, -1, 0)


class FakeField:
    def __init__(self, grid, site_shape=(), dtype=np.complex128, checkerboard=None, nc=None):
        self.grid = grid
        self.site_shape = tuple(site_shape)
        self.dtype = np.dtype(dtype)
        self.is_real = self.dtype.kind == "f"
        self.checkerboard = checkerboard
        self.site_type = FakeSiteType(site_shape, nc)
        self.data = None

    def from_local_numpy(self, a):
        shape = self.grid.global_site_indices(self.checkerboard).shape + self.site_shape
        assert a.shape == shape, (a.shape, shape)
        assert a.dtype == self.dtype, (a.dtype, self.dtype)
        self.data = a.copy()

    def to_numpy(self):
        return self.data

    from_numpy = from_local_numpy


G = (4, 4, 2, 6)


def test_prng_uniform_complex_and_real():
    grid = FakeGrid(G)
    rng = ParallelRNG(grid, [1, 2, 3, 4])
    f = FakeField(grid, (4, 3))
    assert rng.uniform(f, low=-2.0, high=3.0) is f
    a = f.to_numpy()
    assert a.shape == G + (4, 3)
    for part in (a.real, a.imag):
        assert part.min() >= -2 and part.max() < 3
        assert abs(part.mean() - 0.5) < 0.3
    assert abs(np.corrcoef(a.real.ravel(), a.imag.ravel())[0, 1]) < 0.1
    r = FakeField(grid, (), np.float64)
    rng.uniform(r)
    assert r.to_numpy().dtype == np.float64 and r.to_numpy().shape == G
    assert 0 <= r.to_numpy().min() and r.to_numpy().max() < 1
    assert rng.stream == 2


def test_prng_single_precision():
    grid = FakeGrid(G)
    f64 = FakeField(grid, (3,), np.complex128)
    f32 = FakeField(grid, (3,), np.complex64)
    ParallelRNG(grid, 7).gaussian(f64)
    ParallelRNG(grid, 7).gaussian(f32)
    assert f32.to_numpy().dtype == np.complex64
    np.testing.assert_allclose(f32.to_numpy(), f64.to_numpy(), rtol=1e-6, atol=1e-6)
    r32 = FakeField(grid, (), np.float32)
    ParallelRNG(grid, 7).uniform(r32)
    assert r32.to_numpy().dtype == np.float32 and r32.to_numpy().max() < 1


def test_uniform_float32_never_reaches_high():
    # values of u within 2**-25 of 1 round to 1.0f; they must be clamped below high
    idx = np.arange(2000)
    a = uniform_array(KEY, idx, 0, (), False, 0.0, 1.0, np.float32)
    assert a.max() < 1
    # [1, 1 + 2**-20) in float32 has 8 values; u > 15/16 would round up to high
    high = 1.0 + 2.0**-20
    a = uniform_array(KEY, idx, 0, (), False, 1.0, high, np.float32)
    assert a.min() >= 1 and a.max() < np.float32(high)
    assert a.max() == np.nextafter(np.float32(high), np.float32(0))


def test_prng_gaussian_convention():
    grid = FakeGrid((8, 8, 8, 8))
    rng = ParallelRNG(grid, 3)
    f = FakeField(grid, (4,))
    rng.gaussian(f, sigma=2.0)
    z = f.to_numpy().ravel()
    n = z.size
    # real and imaginary parts each N(0, sigma^2): E|z|^2 = 2 sigma^2 = 8
    assert abs(z.real.var() - 4) < 5 * 4 * np.sqrt(2 / n)
    assert abs(z.imag.var() - 4) < 5 * 4 * np.sqrt(2 / n)
    assert abs(np.mean(np.abs(z) ** 2) - 8) < 0.2
    r = FakeField(grid, (), np.float64)
    rng.gaussian(r, sigma=0.5)
    assert abs(r.to_numpy().std() - 0.5) < 0.02


def test_prng_sequences_and_seeds():
    grid = FakeGrid(G)

    def run(seed):
        rng = ParallelRNG(grid, seed)
        out = []
        for _ in range(3):
            f = FakeField(grid, (3, 3))
            rng.gaussian(f)
            out.append(f.to_numpy())
        return out

    a, b, c = run([1, 2, 3, 4]), run([1, 2, 3, 4]), run([1, 2, 3, 5])
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert not np.any(a[0] == a[1]) and not np.any(a[1] == a[2])
    for x, y in zip(a, c):
        assert not np.any(x == y)


def test_prng_state_roundtrip():
    grid = FakeGrid(G)
    rng = ParallelRNG(grid, 11)
    rng.uniform(FakeField(grid))
    state = rng.get_state()
    f1 = rng.uniform(FakeField(grid)).to_numpy()
    other = ParallelRNG(grid, 0)
    other.set_state(state)
    np.testing.assert_array_equal(other.uniform(FakeField(grid)).to_numpy(), f1)


def test_prng_decomposition_independent():
    """Filling per-rank blocks gives the single-rank field, for two decompositions."""
    gdims = (4, 4, 4, 8)
    whole = FakeField(FakeGrid(gdims), (4, 3, 3), nc=3)
    ParallelRNG(whole.grid, 42).random_su3(whole)
    ref = whole.to_numpy()
    for procs in [(1, 2, 1, 2), (2, 1, 2, 4)]:
        out = np.empty_like(ref)
        for coord in itertools.product(*(range(p) for p in procs)):
            g = FakeGrid(gdims, procs, coord)
            f = FakeField(g, (4, 3, 3), nc=3)
            ParallelRNG(g, 42).random_sun(f)
            sl = tuple(slice(o, o + l) for o, l in zip(g.offset, g.ldims))
            out[sl] = f.to_numpy()
        np.testing.assert_allclose(out, ref, rtol=0, atol=1e-14)


def test_prng_checkerboard_matches_full():
    grid = FakeGrid(G)
    full = FakeField(grid, (2,))
    ParallelRNG(grid, 9).uniform(full)
    full_idx = grid.global_site_indices(None).ravel()
    full_vals = full.to_numpy().reshape(-1, 2)
    lookup = dict(zip(full_idx.tolist(), range(full_idx.size)))
    for cb in (0, 1):
        half = FakeField(grid, (2,), checkerboard=cb)
        ParallelRNG(grid, 9).uniform(half)
        hidx = grid.global_site_indices(cb).ravel()
        assert hidx.size == full_idx.size // 2
        rows = [lookup[g] for g in hidx.tolist()]
        np.testing.assert_array_equal(half.to_numpy().reshape(-1, 2), full_vals[rows])


def test_prng_random_sun_fields():
    grid = FakeGrid(G)
    rng = ParallelRNG(grid, [5, 6])
    u = FakeField(grid, (4, 3, 3), nc=3)
    rng.random_sun(u)
    _check_sun(u.to_numpy())
    c = FakeField(grid, (2, 2), nc=2)
    rng.random_sun(c)
    _check_sun(c.to_numpy())
    w = FakeField(grid, (4, 3, 3), np.complex64, nc=3)
    rng.random_su3(w)
    assert w.to_numpy().dtype == np.complex64
    _check_sun(w.to_numpy().astype(np.complex128), tol=1e-5)
    n = FakeField(grid, (3, 3), nc=3)
    rng.random_su3_near_identity(n, 0.05)
    _check_sun(n.to_numpy())
    assert np.abs(n.to_numpy() - np.eye(3)).max() < 0.5
    with pytest.raises(SiteTypeError):
        rng.random_sun(FakeField(grid, (4, 3)))
    with pytest.raises(SiteTypeError):
        rng.random_sun(FakeField(grid, (4, 4)))  # square spin matrix, not colour
    with pytest.raises(SiteTypeError):
        rng.random_sun(FakeField(grid, (3, 3), np.float64, nc=3))


def test_fill_array_helper():
    rng = ParallelRNG(None, 1)
    idx = np.arange(10)
    a = rng._fill_array(idx, (3,), True, "gaussian")
    b = rng._fill_array(idx, (3,), True, "gaussian")
    assert a.shape == (10, 3) and a.dtype == np.complex128
    assert not np.any(a == b)
    np.testing.assert_array_equal(a, gaussian_array(seed_to_key(1), idx, 0, (3,), True))
    u = rng._fill_array(idx, (3, 3), True, "sun")
    _check_sun(u)
