"""Fields and arrays: np.asarray, Lattice(grid, array), peek/poke of one site, read-only views and
DLPack, checked against to_numpy()/from_numpy() and the documented SIMD layout."""
from __future__ import annotations

import numpy as np
import pytest

import pygrid as pg
from pygrid.errors import GridError, ShapeError, SiteTypeError
from pygrid.memory import MemoryManager, State

DIMS = (4, 4, 4, 8)

SHAPES = {
    (): "Complex",
    (3,): "ColourVector",
    (3, 3): "ColourMatrix",
    (4,): "SpinVector",
    (4, 4): "SpinMatrix",
    (4, 3): "SpinColourVector",
    (4, 4, 3, 3): "SpinColourMatrix",
    (4, 3, 3): "LorentzColourMatrix",
}


@pytest.fixture(scope="module")
def grid():
    return pg.GridCartesian(DIMS)


def _random(shape, dtype=np.complex128, seed=0):
    r = np.random.default_rng(seed)
    a = r.standard_normal(shape) + 1j * r.standard_normal(shape)
    return a.astype(dtype)


@pytest.mark.parametrize("site", list(SHAPES))
def test_lattice_from_array_infers_site_type_and_precision(grid, site):
    a = _random(DIMS + site)
    f = pg.Lattice(grid, a)
    assert str(f.site_type).startswith(SHAPES[site]) and f.site_shape == site
    assert f.precision == "double"
    np.testing.assert_array_equal(f.to_numpy(), a)
    # np.asarray gives the same array back: natural coordinates, a copy
    b = np.asarray(f)
    np.testing.assert_array_equal(b, a)
    b[...] = 0
    np.testing.assert_array_equal(f.to_numpy(), a)
    s = pg.Lattice(grid, a.astype(np.complex64))
    assert s.precision == "single"
    np.testing.assert_array_equal(s.to_numpy(), a.astype(np.complex64))
    assert pg.Lattice(grid, a, precision="single").precision == "single"


def test_asarray_options_and_refusals(grid):
    f = pg.Lattice(grid, _random(DIMS + (3,)))
    assert np.asarray(f, dtype=np.complex64).dtype == np.complex64
    np.testing.assert_array_equal(np.array(f), f.to_numpy())
    with pytest.raises(ValueError, match="always a copy"):
        np.asarray(f, copy=False)
    # a real array makes a complex field (real parts), an expression result converts too
    r = np.random.default_rng(1).standard_normal(DIMS)
    c = pg.Lattice(grid, r)
    assert c.site_type == pg.Complex and np.array_equal(c.to_numpy(), r.astype(complex))
    np.testing.assert_allclose(np.asarray(pg.eval(c * 2)), 2 * r)
    # another field is an array too: Lattice(grid, field) copies it
    d = pg.Lattice(grid, f)
    np.testing.assert_array_equal(d.to_numpy(), f.to_numpy())
    assert d._buf is not f._buf


def test_lattice_from_array_errors(grid):
    with pytest.raises(SiteTypeError, match=r"no site type has the tensor shape \(5, 2\)"):
        pg.Lattice(grid, np.zeros(DIMS + (5, 2)))
    with pytest.raises(ShapeError, match="leading axes"):
        pg.Lattice(grid, np.zeros((4, 4, 4, 4, 3)))
    with pytest.raises(ShapeError, match="numeric"):
        pg.Lattice(grid, np.full(DIMS, "x"))
    with pytest.raises(SiteTypeError, match="site type"):
        pg.Lattice(grid, 5)


def test_red_black_arrays(grid):
    rb = grid.red_black
    a = _random(rb.gshape + (4, 3), seed=3)
    f = pg.Lattice(rb, a, checkerboard=1)
    assert f.checkerboard == 1
    np.testing.assert_array_equal(np.asarray(f), a)


def _global_sites(dims, n, seed):
    r = np.random.default_rng(seed)
    return [tuple(int(r.integers(0, L)) for L in dims) for _ in range(n)]


@pytest.mark.parametrize("site", [(), (4, 3), (4, 3, 3)])
def test_peek_and_poke_one_site(grid, site):
    a = _random(DIMS + site, seed=5)
    f = pg.Lattice(grid, a)
    for c in _global_sites(DIMS, 6, seed=len(site)):
        np.testing.assert_array_equal(pg.peek_site(f, c), a[c])
        v = _random(site, seed=sum(c))
        pg.poke_site(f, c, v)
        a[c] = v
        np.testing.assert_array_equal(f.to_numpy(), a)
    assert np.isscalar(pg.peek_site(pg.Lattice(grid, np.ones(DIMS)), (0, 0, 0, 0)))


def test_peek_and_poke_red_black_and_5d(grid):
    rb = grid.red_black
    full = _random(DIMS + (4, 3), seed=7)
    F = pg.Lattice(grid, full)
    for cb in (0, 1):
        half = pg.pick_checkerboard(cb, F)
        for c in _global_sites(DIMS, 12, seed=cb):
            if sum(c) % 2 == cb:
                np.testing.assert_array_equal(pg.peek_site(half, c), full[c])
                pg.poke_site(half, c, np.zeros((4, 3)))
                full[c] = 0
            else:
                with pytest.raises(GridError, match="is (even|odd), and the field holds the"):
                    pg.peek_site(half, c)
        pg.set_checkerboard(F, half)
    np.testing.assert_array_equal(F.to_numpy(), full)
    assert rb is half.grid
    g5 = pg.GridCartesian5D(grid, 4)
    f5 = pg.Lattice(g5, _random((4,) + DIMS + (4, 3), seed=8))
    np.testing.assert_array_equal(pg.peek_site(f5, (3, 1, 2, 3, 7)), f5.to_numpy()[3, 1, 2, 3, 7])


def test_peek_and_poke_errors_leave_the_field(grid):
    a = _random(DIMS + (3,), seed=9)
    f = pg.Lattice(grid, a)
    with pytest.raises(GridError, match="not a site of the 4.4.4.8 lattice"):
        pg.peek_site(f, (0, 0, 0, 8))
    with pytest.raises(GridError, match="not a site"):
        pg.peek_site(f, (0, 0, 0))
    with pytest.raises(GridError, match="coordinate must be"):
        pg.poke_site(f, 3, np.zeros(3))
    with pytest.raises(ShapeError, match=r"shaped \(3,\), the value is \(3, 3\)"):
        pg.poke_site(f, (0, 0, 0, 0), np.zeros((3, 3)))
    with pytest.raises(ShapeError, match="complex value for a Real field"):
        pg.poke_site(pg.LatticeReal(grid), (0, 0, 0, 0), 1j)
    np.testing.assert_array_equal(f.to_numpy(), a)


def test_read_views_are_read_only(grid):
    a = _random(DIMS + (3,), seed=10)
    f = pg.Lattice(grid, a)
    for mode in (pg.CpuRead, pg.AcceleratorRead):
        with f.view(mode) as v:
            host = np.asarray(v) if isinstance(v, np.ndarray) else None
            if host is not None:
                assert not v.flags.writeable
            with pytest.raises(ValueError, match="read-only"):
                v[0, 0, 0, 0] = 1.0
    for mode in (pg.ViewMode.CpuWrite, pg.ViewMode.AcceleratorWrite):
        with f.view(mode) as v:
            if isinstance(v, np.ndarray):
                assert v.flags.writeable
    np.testing.assert_array_equal(f.to_numpy(), a)


def test_read_views_on_a_separate_device_are_read_only(grid):
    mm = MemoryManager("emulated", 1 << 24)
    f = pg.Lattice(grid, pg.ColourVector(), manager=mm)
    for mode in (pg.CpuRead, pg.AcceleratorRead):
        with f.view(mode) as v:
            assert not v.flags.writeable
    assert mm.state(f._key) is State.Consistent


def test_dlpack_shares_the_simd_layout(grid):
    a = _random(DIMS + (4, 3), seed=11)
    f = pg.Lattice(grid, a)
    assert f.__dlpack_device__() == (1, 0)
    x = np.from_dlpack(f)
    assert x.shape == (grid.osites, 12, 2, grid.nsimd) and x.dtype == np.float64
    # the documented layout: grid.buffer_to_sites gives natural coordinates, (re, im) last
    sites = grid.buffer_to_sites(x)
    np.testing.assert_array_equal(sites[..., 0] + 1j * sites[..., 1], a.reshape(DIMS + (12,)))
    # writes on either side are seen by the other
    x *= 2
    np.testing.assert_array_equal(f.to_numpy(), 2 * a)
    f @= f + f
    np.testing.assert_array_equal(grid.buffer_to_sites(x)[..., 0], 4 * a.real.reshape(DIMS + (12,)))
    # copy=True exports a copy
    y = np.from_dlpack(f, copy=True)
    y[...] = 0
    np.testing.assert_array_equal(f.to_numpy(), 4 * a)


def test_from_dlpack_adopts_memory(grid):
    st = pg.SpinColourVector()
    raw = np.random.default_rng(12).standard_normal((grid.osites, 12, 2, grid.nsimd))
    f = pg.from_dlpack(raw, grid, st)
    assert f.precision == "double"

    def natural(buf):
        sites = grid.buffer_to_sites(buf)
        return (sites[..., 0] + 1j * sites[..., 1]).reshape(DIMS + (4, 3))

    np.testing.assert_array_equal(f.to_numpy(), natural(raw))
    raw[5, 3, 1, 2] = 42.0                     # a write into the producer's array is the field's
    np.testing.assert_array_equal(f.to_numpy(), natural(raw))
    assert (f.to_numpy().imag == 42.0).sum() == 1
    g = pg.from_dlpack(f, grid, st)            # two fields, one memory
    g @= 3 * g
    np.testing.assert_array_equal(f.to_numpy(), g.to_numpy())
    single = pg.from_dlpack(raw.astype(np.float32), grid, st)
    assert single.precision == "single"
    with pytest.raises(ShapeError, match=r"shaped \(.*\) in the SIMD layout"):
        pg.from_dlpack(raw, grid, pg.ColourVector())
    with pytest.raises(ShapeError, match="float64 or float32"):
        pg.from_dlpack(raw.astype(np.int64), grid, st)
    ro = raw.copy()
    ro.flags.writeable = False
    with pytest.raises(ShapeError, match="read-only"):
        pg.from_dlpack(ro, grid, st)
    with pytest.raises(ShapeError, match="does not export DLPack"):
        pg.from_dlpack([1, 2], grid, st)


def test_shared_host_memory_stays_current_on_a_separate_device(grid):
    """The write-through rule of an exported field, on a device with its own memory."""
    mm = MemoryManager("emulated", 1 << 24)
    a = _random(DIMS + (3,), seed=13)
    f = pg.Lattice(grid, pg.ColourVector(), manager=mm).from_numpy(a)
    with f.view(pg.AcceleratorRead):
        pass
    with f.view(pg.ViewMode.AcceleratorWrite) as d:   # the device copy alone is current now
        d *= 2
    assert mm.state(f._key) is State.AcceleratorDirty
    x = np.from_dlpack(f)                              # export copies it back first
    assert mm.entry_info(f._key)["shared"]
    np.testing.assert_array_equal(grid.buffer_to_sites(x)[..., 0], 2 * a.real.reshape(DIMS + (3,)))
    x *= 3                                             # the host side writes ...
    with f.view(pg.AcceleratorRead) as d:              # ... and the next device view sees it
        np.testing.assert_array_equal(d, x)
    expected = x + 1
    with f.view(pg.ViewMode.AcceleratorWrite) as d:    # a device write ...
        d += 1
    np.testing.assert_array_equal(x, expected)         # ... is on the host at its close
    assert mm.state(f._key) is State.Consistent
    before = x.copy()
    with pytest.raises(RuntimeError):                  # a failed device write leaves the host as it was
        with f.view(pg.ViewMode.AcceleratorWrite) as d:
            d[...] = np.nan
            raise RuntimeError("kernel failed")
    np.testing.assert_array_equal(x, before)
    with f.view(pg.AcceleratorRead) as d:
        np.testing.assert_array_equal(d, before)
