"""cshift against np.roll: every dimension, displacements -3..3, several SIMD
layouts, both precisions, 5D grids and red-black fields; fused shifts inside
expressions against the unfused ones.

cshift(x, mu, disp)(x) = x(x + disp e_mu), i.e. np.roll(a, -disp, axis=mu).
"""
import numpy as np
import pytest
from conftest import GAMMA, assert_close, check_both, eval_both, grid, grid5, random_field, roll, spin_mul
from hypothesis import given, settings, strategies as st

import pygrid as pg

LAYOUTS = [(1, 1, 2, 2), (2, 2, 1, 1), (1, 1, 1, 4), None]
DISPS = range(-3, 4)


@pytest.mark.parametrize("precision", ["double", "single"])
@pytest.mark.parametrize("simd", LAYOUTS)
def test_cshift_matches_roll(simd, precision):
    g = grid((4, 4, 4, 8), simd, precision)
    x = random_field(g, pg.ColourVector(), precision)
    a = x.to_numpy()
    for mu in range(4):
        for d in DISPS:
            got = check_both(pg.cshift(x, mu, d), precision, want=roll(a, mu, d))
            # a pure data movement: exact
            assert np.array_equal(got, roll(a, mu, d)), (mu, d)


@pytest.mark.parametrize("disp", [4, -4, 5, -7, 8, 16])
def test_cshift_large_displacements(disp):
    g = grid((4, 4, 4, 8), (1, 1, 2, 2))
    x = random_field(g, pg.ColourVector())
    a = x.to_numpy()
    for mu in range(4):
        assert np.array_equal(pg.eval(pg.cshift(x, mu, disp)).to_numpy(), roll(a, mu, disp))


@pytest.mark.parametrize("precision", ["double", "single"])
def test_cshift_5d(precision):
    g = grid5(4)
    x = random_field(g, pg.SpinColourVector(), precision)
    a = x.to_numpy()
    assert a.shape == (4, 4, 4, 4, 4, 4, 3)
    for mu in range(5):
        for d in (-3, -1, 1, 2):
            check_both(pg.cshift(x, mu, d), precision, want=roll(a, mu, d))


@pytest.mark.parametrize("simd", [(1, 1, 2, 2), (1, 1, 1, 4), (2, 1, 1, 2)])
def test_cshift_red_black(simd):
    """A shift of a checkerboard is the checkerboard of the shifted full field; odd shifts flip parity."""
    g = grid((8, 4, 4, 8), simd)
    full = random_field(g, pg.ColourVector())
    fa = full.to_numpy()
    for cb in (0, 1):
        half = pg.pick_checkerboard(cb, full)
        assert half.checkerboard == cb
        for mu in range(4):
            for d in DISPS:
                e = pg.cshift(half, mu, d)
                assert e.checkerboard == cb ^ (d % 2)
                got, ref = eval_both(e)
                want_field = pg.Lattice(g, pg.ColourVector()).from_numpy(roll(fa, mu, d))
                want = pg.pick_checkerboard(cb ^ (d % 2), want_field).to_numpy()
                assert np.array_equal(got, want), (cb, mu, d)
                assert np.array_equal(ref, want), (cb, mu, d)


def test_cshift_red_black_5d():
    g = grid5(4)
    full = random_field(g, pg.ColourVector())
    fa = full.to_numpy()
    for cb in (0, 1):
        half = pg.pick_checkerboard(cb, full)
        for mu in range(5):
            for d in (-1, 1, 2):
                flip = 0 if mu == 0 else d % 2  # s is not a parity dimension
                e = pg.cshift(half, mu, d)
                assert e.checkerboard == cb ^ flip
                got = pg.eval(e).to_numpy()
                want = pg.pick_checkerboard(
                    cb ^ flip, pg.Lattice(g, pg.ColourVector()).from_numpy(roll(fa, mu, d))
                )
                assert np.array_equal(got, want.to_numpy()), (cb, mu, d)


def test_fused_equals_unfused():
    g = grid((4, 4, 4, 8))
    U = random_field(g, pg.ColourMatrix(), kind="su3")
    psi = random_field(g, pg.SpinColourVector())
    ua, pa = U.to_numpy(), psi.to_numpy()
    for mu in range(4):
        for d in (-1, 1, 3):
            tmp = pg.eval(pg.cshift(psi, mu, d))
            unfused = pg.eval(U * tmp).to_numpy()
            fused = check_both(U * pg.cshift(psi, mu, d),
                               want=np.einsum("xyztab,xyztsb->xyztsa", ua, roll(pa, mu, d)))
            assert_close(fused, unfused)


def test_wilson_like_hopping_term():
    """(1 - g_mu) U_mu(x) psi(x+mu) + (1 + g_mu) U_mu(x-mu)^dag psi(x-mu), one kernel.

    One direction only: the 8-direction kernel takes close to a minute to compile here."""
    g = grid((4, 4, 4, 4))
    U = random_field(g, pg.LorentzColourMatrix(), kind="su3")
    psi = random_field(g, pg.SpinColourVector())
    expr = None
    want = 0
    ua, pa = U.to_numpy(), psi.to_numpy()
    for mu in (2,):
        Umu = pg.peek_lorentz(U, mu)
        term = (1 - pg.Gamma.mu[mu]) * (Umu * pg.cshift(psi, mu, 1)) \
            + (1 + pg.Gamma.mu[mu]) * pg.cshift(pg.adj(Umu) * psi, mu, -1)
        expr = term if expr is None else expr + term
        G = GAMMA["XYZT"[mu]]
        fwd = np.einsum("xyztab,xyztsb->xyztsa", ua[..., mu, :, :], roll(pa, mu, 1))
        bwd = roll(np.einsum("xyztba,xyztsb->xyztsa", ua[..., mu, :, :].conj(), pa), mu, -1)
        want = want + fwd - spin_mul(G, fwd, 4) + bwd + spin_mul(G, bwd, 4)
    check_both(expr, want=want)


def test_nested_cshift():
    g = grid((4, 4, 4, 8), (1, 1, 1, 4))
    x = random_field(g, pg.ColourMatrix())
    a = x.to_numpy()
    check_both(pg.cshift(pg.cshift(x, 0, 1), 3, -2), want=roll(roll(a, 0, 1), 3, -2))
    check_both(pg.cshift(pg.cshift(pg.cshift(x, 1, 2), 2, 1), 1, 1), want=roll(roll(a, 1, 3), 2, 1))
    # shifts that cancel give the field back
    assert np.array_equal(pg.eval(pg.cshift(pg.cshift(x, 3, 3), 3, -3)).to_numpy(), a)
    # of a shifted field, evaluated then shifted again
    s = pg.eval(pg.cshift(x, 2, 1))
    assert np.array_equal(pg.eval(pg.cshift(s, 2, -1)).to_numpy(), a)


def test_cshift_of_an_expression():
    g = grid((4, 4, 4, 8))
    U = random_field(g, pg.ColourMatrix())
    V = random_field(g, pg.ColourMatrix())
    ua, va = U.to_numpy(), V.to_numpy()
    e = pg.cshift(U * pg.adj(V) + 2.0 * V, 3, -1)
    prod = np.einsum("xyztab,xyztcb->xyztac", ua, va.conj()) + 2.0 * va
    check_both(e, want=roll(prod, 3, -1))
    # cshift of an expression that itself holds a shift: (U(x+mu) V(x+mu+nu))
    e2 = pg.cshift(U * pg.cshift(V, 1, 1), 0, 1)
    check_both(e2, want=roll(np.einsum("xyztab,xyztbc->xyztac", ua, roll(va, 1, 1)), 0, 1))


def test_cshift_single_precision_expression():
    g = grid((4, 4, 4, 4), precision="single")
    U = random_field(g, pg.ColourMatrix(), "single", kind="su3")
    psi = random_field(g, pg.ColourVector(), "single")
    ua, pa = U.to_numpy(), psi.to_numpy()
    want = np.einsum("xyztab,xyztb->xyzta", ua, roll(pa, 2, -1)) + 0.5 * roll(pa, 1, 1)
    check_both(U * pg.cshift(psi, 2, -1) + 0.5 * pg.cshift(psi, 1, 1), "single", want=want)


@settings(max_examples=60, deadline=None)
@given(base=st.sampled_from([1, 2, 4, 8, 16, 32]), width=st.integers(1, 20), nrows=st.integers(1, 300),
       seed=st.integers(0, 2**31))
def test_unique_rows_matches_numpy(base, width, nrows, seed):
    """The shift tables' lane maps (a few distinct rows repeated) found as np.unique along axis 0
    finds them, packed into keys or not (wide rows of a large base do not fit 64 bits)."""
    from pygrid.cartesian.shift import unique_rows

    rng = np.random.default_rng(seed)
    distinct = rng.integers(0, base, (rng.integers(1, 6), width))
    rows = distinct[rng.integers(0, len(distinct), nrows)]
    maps, inv = unique_rows(rows, base)
    want_maps, want_inv = np.unique(rows, axis=0, return_inverse=True)
    assert np.array_equal(maps, want_maps)
    assert np.array_equal(inv, want_inv.reshape(-1))
    assert np.array_equal(maps[inv], rows)


def test_unique_rows_rejects_entries_out_of_range():
    from pygrid.cartesian.shift import unique_rows
    from pygrid.errors import GridError

    with pytest.raises(GridError, match=r"outside \[0, 4\)"):
        unique_rows(np.array([[0, 1], [4, 0]]), 4)


@settings(max_examples=40, deadline=None)
@given(simd=st.sampled_from([(1, 1, 2, 2), (1, 1, 1, 4), (2, 1, 1, 2), (2, 2, 2, 2), (1, 1, 1, 1)]),
       disp=st.lists(st.integers(-17, 17), min_size=4, max_size=4), red_black=st.booleans(),
       cb=st.sampled_from([0, 1]))
def test_source_sites_as_the_grid_finds_them(simd, disp, red_black, cb):
    """The shift tables' (outer site, lane) of x + disp, a dimension at a time, equal the grid's
    own ``outer_lane_of`` of the whole stored coordinate (the shift wraps periodically)."""
    from pygrid.cartesian.shift import _source_sites

    g = grid((8, 4, 4, 8), simd)
    if red_black:
        g = pg.pick_checkerboard(0, random_field(g, pg.ColourVector())).grid
    x = g.full_coords(cb if red_black else None)
    y = (x + np.array(disp)) % np.array(g.ldims)
    if red_black:
        y[..., g.cb_dim] //= 2
    want = g.outer_lane_of(y)
    got = _source_sites(g, x, tuple(disp))
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
