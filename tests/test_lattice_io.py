"""to_numpy / from_numpy: round trips for every type, both precisions, red-black and 5D grids;
the coordinate order [x, y, z, t, *site] and the red-black stored-site convention."""
import numpy as np
import pytest
from conftest import grid, grid5

import pygrid as pg

TYPES = [pg.Complex, pg.Real, pg.ColourVector(), pg.ColourMatrix(), pg.SpinColourVector(),
         pg.SpinColourMatrix(), pg.LorentzColourMatrix(), pg.SpinMatrix(), pg.SpinVector(),
         pg.ColourVector(2), pg.ColourMatrix(2), pg.LorentzComplex()]
GRIDS = {
    "4444": lambda: grid(),
    "4448-1114": lambda: grid((4, 4, 4, 8), (1, 1, 1, 4)),
    "4448-2211": lambda: grid((4, 4, 4, 8), (2, 2, 1, 1)),
    "single-default": lambda: grid(precision="single"),
    "5d": lambda: grid5(4),
    "rb": lambda: grid().red_black,
    "rb5d": lambda: grid5(2).red_black,
}


def _random(shape, dtype, rng):
    a = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal(shape)
    return a.astype(dtype)


@pytest.mark.parametrize("gname", sorted(GRIDS))
@pytest.mark.parametrize("precision", ["double", "single"])
def test_round_trip_every_type(gname, precision):
    g = GRIDS[gname]()
    rng = np.random.default_rng(1)
    for t in TYPES:
        for cb in ((0, 1) if g.checkerboarded else (None,)):
            f = pg.Lattice(g, t, precision, checkerboard=cb)
            assert np.array_equal(f.to_numpy(), np.zeros(g.lshape + t.shape))  # fields start at zero
            a = _random(g.lshape + t.shape, f.dtype, rng)
            f.from_numpy(a)
            b = f.to_numpy()
            assert b.shape == g.lshape + t.shape and b.dtype == f.dtype
            assert np.array_equal(a, b), (t, cb)
            assert (
                f.dtype
                == {
                    ("double", True): np.float64,
                    ("double", False): np.complex128,
                    ("single", True): np.float32,
                    ("single", False): np.complex64,
                }[precision, t.is_real]
            )


def test_buffer_layout_matches_design():
    """buffer (osites, ncomp, 2, nsimd); site x_d = o_d + rdims[d] * l_d, dim 0 fastest."""
    g = grid((4, 4, 4, 8), (1, 1, 2, 2))
    f = pg.LatticeColourVector(g)
    a = _random(g.lshape + (3,), np.complex128, np.random.default_rng(2))
    f.from_numpy(a)
    with f.view(pg.CpuRead) as buf:
        assert buf.shape == (g.osites, 3, 2, g.nsimd)
        r = g.rdims
        for x, y, z, t in [(0, 0, 0, 0), (1, 2, 3, 5), (3, 1, 2, 7), (2, 3, 1, 4)]:
            o = x % r[0] + r[0] * (y % r[1] + r[1] * (z % r[2] + r[2] * (t % r[3])))
            sl = [x // r[0], y // r[1], z // r[2], t // r[3]]
            lane = sl[0] + 1 * (sl[1] + 1 * (sl[2] + 2 * sl[3]))
            assert np.allclose(buf[o, :, 0, lane] + 1j * buf[o, :, 1, lane], a[x, y, z, t])


def test_from_numpy_converts_precision_and_real_input():
    g = grid()
    f = pg.LatticeColourMatrix(g, precision="single")
    a = _random(g.lshape + (3, 3), np.complex128, np.random.default_rng(3))
    f.from_numpy(a)
    assert np.array_equal(f.to_numpy(), a.astype(np.complex64))
    r = np.random.default_rng(4).standard_normal(g.lshape + (3, 3))
    f.from_numpy(r)
    assert np.array_equal(f.to_numpy(), r.astype(np.complex64))
    c = pg.LatticeReal(g).from_numpy(r[..., 0, 0].astype(np.float32))
    assert np.array_equal(c.to_numpy(), r[..., 0, 0].astype(np.float32).astype(np.float64))


def test_red_black_convention_and_pick_set():
    g = grid()
    full = pg.LatticeSpinColourVector(g)
    a = _random(g.lshape + (4, 3), np.complex128, np.random.default_rng(5))
    full.from_numpy(a)
    back = pg.LatticeSpinColourVector(g)
    for cb in (0, 1):
        h = pg.pick_checkerboard(cb, full)
        assert h.checkerboard == cb and h.grid == g.red_black
        ha = h.to_numpy()
        xh, y, z, t = np.indices(g.red_black.lshape)
        x = 2 * xh + (cb + y + z + t) % 2  # the documented stored-site convention
        assert np.array_equal(ha, a[x, y, z, t])
        pg.set_checkerboard(back, h)
    assert np.array_equal(back.to_numpy(), a)


def test_red_black_5d_convention():
    g = grid5(2)
    full = pg.LatticeColourVector(g)
    a = _random(g.lshape + (3,), np.complex128, np.random.default_rng(6))
    full.from_numpy(a)
    for cb in (0, 1):
        ha = pg.pick_checkerboard(cb, full).to_numpy()
        s, xh, y, z, t = np.indices(g.red_black.lshape)
        assert np.array_equal(ha, a[s, 2 * xh + (cb + y + z + t) % 2, y, z, t])


def test_convert_precision():
    g = grid()
    f = pg.LatticeFermion(g)
    a = _random(g.lshape + (4, 3), np.complex128, np.random.default_rng(7))
    f.from_numpy(a)
    s = pg.convert(f, "single")
    assert s.precision == "single" and np.array_equal(s.to_numpy(), a.astype(np.complex64))
    d = pg.convert(s, "double")
    assert np.array_equal(d.to_numpy(), a.astype(np.complex64).astype(np.complex128))


@pytest.mark.parametrize("five_d", [False, True])
def test_convert_onto_another_simd_layout(five_d):
    """convert(x, precision, grid=): the same sites on another layout, full fields and red-black ones,
    against numpy; a grid of another lattice refused by name."""
    g4d = pg.GridCartesian([4, 4, 4, 8])
    g4s = pg.GridCartesian([4, 4, 4, 8], precision="single")   # twice the lanes
    assert g4s.nsimd == 2 * g4d.nsimd
    gd, gs = (pg.GridCartesian5D(g4d, 2), pg.GridCartesian5D(g4s, 2)) if five_d else (g4d, g4s)
    f = pg.LatticeFermion(gd)
    a = _random(gd.lshape + (4, 3), np.complex128, np.random.default_rng(8))
    f.from_numpy(a)
    s = pg.convert(f, "single", grid=gs)
    assert s.grid == gs and s.precision == "single" and np.array_equal(s.to_numpy(), a.astype(np.complex64))
    back = pg.convert(s, "double", grid=gd)
    assert back.grid == gd and np.array_equal(back.to_numpy(), a.astype(np.complex64).astype(np.complex128))
    same = pg.convert(f, "double", grid=gs)   # a layout change alone
    assert np.array_equal(same.to_numpy(), a)
    for cb in (0, 1):
        h = pg.pick_checkerboard(cb, f)
        hs = pg.convert(h, "single", grid=gs)   # a full grid given: its red-black half
        assert hs.grid == gs.red_black and hs.checkerboard == cb
        assert np.array_equal(hs.to_numpy(), h.to_numpy().astype(np.complex64))
        assert np.array_equal(pg.pick_checkerboard(cb, s).to_numpy(), hs.to_numpy())
        assert np.array_equal(pg.convert(hs, "double", grid=gd.red_black).to_numpy(),
                              h.to_numpy().astype(np.complex64).astype(np.complex128))
    with pytest.raises(pg.ConformabilityError, match="does not hold the sites"):
        pg.convert(f, "single", grid=pg.GridCartesian([4, 4, 8, 4]))
    with pytest.raises(pg.ConformabilityError, match="must be a pygrid grid"):
        pg.convert(f, "single", grid=(4, 4, 4, 8))


def test_to_numpy_is_a_copy():
    g = grid()
    f = pg.LatticeComplex(g)
    a = f.to_numpy()
    a[...] = 5
    assert np.all(f.to_numpy() == 0)
