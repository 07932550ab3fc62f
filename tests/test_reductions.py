"""Reductions against numpy: norm2, inner_product, sum, slice_sum."""
import numpy as np
import pytest
from conftest import COMPILED, backend, grid, grid5, pool_field, random_field

import pygrid as pg

TYPES = [
    pg.Complex,
    pg.Real,
    pg.ColourMatrix(),
    pg.SpinColourVector(),
    pg.LorentzColourMatrix(),
    pg.ColourVector(2),
]


@pytest.mark.parametrize("precision", ["double", "single"])
@pytest.mark.parametrize("t", TYPES, ids=str)
def test_reductions_match_numpy(t, precision):
    g = grid((4, 4, 4, 8), (1, 1, 1, 4))
    a, b = pool_field(g, t, precision, 0), pool_field(g, t, precision, 1)
    x, y = a.to_numpy().astype(np.complex128), b.to_numpy().astype(np.complex128)
    rtol = 1e-12 if precision == "double" else 1e-6
    for name in (COMPILED, "numpy"):
        with backend(name):
            assert np.isclose(pg.norm2(a), np.vdot(x, x).real, rtol=rtol)
            ip = pg.inner_product(a, b)
            assert isinstance(ip, complex)
            assert np.isclose(ip, np.vdot(x, y), rtol=rtol)
            s = pg.sum(a)
            assert s.shape == t.shape
            assert np.allclose(s, x.sum(axis=(0, 1, 2, 3)), rtol=rtol, atol=rtol * np.abs(x).sum())
            for mu in range(4):
                ss = pg.slice_sum(a, mu)
                assert ss.shape == (g.gdims[mu],) + t.shape
                axes = tuple(d for d in range(4) if d != mu)
                assert np.allclose(ss, x.sum(axis=axes), rtol=rtol, atol=rtol * np.abs(x).sum())


def test_reductions_of_expressions():
    g = grid()
    U = pool_field(g, pg.ColourMatrix(), "double")
    psi = pool_field(g, pg.SpinColourVector(), "double")
    ua, pa = U.to_numpy(), psi.to_numpy()
    up = np.einsum("...ab,...sb->...sa", ua, pa)
    assert np.isclose(pg.norm2(U * psi), np.vdot(up, up).real, rtol=1e-12)
    assert np.isclose(pg.inner_product(psi, U * psi), np.vdot(pa, up), rtol=1e-12)
    assert np.allclose(pg.sum(pg.trace(U)), np.trace(ua, axis1=-2, axis2=-1).sum())


def test_reductions_5d_and_red_black():
    g5 = grid5(4)
    f = random_field(g5, pg.SpinColourVector())
    a = f.to_numpy()
    assert np.isclose(pg.norm2(f), np.vdot(a, a).real, rtol=1e-12)
    assert np.allclose(pg.slice_sum(f, 0), a.sum(axis=(1, 2, 3, 4)))
    full = random_field(grid(), pg.ColourVector())
    e, o = pg.pick_checkerboard(0, full), pg.pick_checkerboard(1, full)
    assert np.isclose(pg.norm2(e) + pg.norm2(o), pg.norm2(full), rtol=1e-12)
    assert np.allclose(pg.sum(e) + pg.sum(o), pg.sum(full))
    ea = e.to_numpy()
    assert np.isclose(pg.inner_product(e, e), np.vdot(ea, ea), rtol=1e-12)


def test_norm2_single_accumulates_in_double():
    g = grid((4, 4, 4, 8), (1, 1, 1, 4))
    f = pg.LatticeComplex(g, precision="single")
    f.from_numpy(np.full(g.lshape, 1 + 1e-4, dtype=np.complex64))
    want = 512 * float(np.float32(1 + 1e-4)) ** 2
    assert abs(pg.norm2(f) - want) < 1e-9 * want
