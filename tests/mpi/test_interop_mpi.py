"""peek_site / poke_site and Lattice(grid, array) on a decomposed lattice: every rank sees the
whole-lattice result; np.asarray refuses with the collective alternative named."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import grids, layouts

import pygrid as pg
from pygrid.errors import GridError

DIMS = (4, 4, 4, 8)


@pytest.mark.parametrize("layout", layouts())
def test_peek_poke_and_arrays(layout):
    gd, _ = grids(DIMS, layout)
    r = np.random.default_rng(4)            # the same array on every rank
    a = r.standard_normal(DIMS + (4, 3)) + 1j * r.standard_normal(DIMS + (4, 3))
    f = pg.Lattice(gd, a)
    np.testing.assert_array_equal(f.to_numpy(), a)
    sites = [tuple(int(r.integers(0, L)) for L in DIMS) for _ in range(16)]
    for c in sites:
        np.testing.assert_array_equal(pg.peek_site(f, c), a[c])
        v = np.full((4, 3), complex(*c[:2]))
        pg.poke_site(f, c, v)
        a[c] = v
    np.testing.assert_array_equal(f.to_numpy(), a)
    half = pg.pick_checkerboard(1, f)
    odd = next(c for c in sites if sum(c) % 2 == 1)
    np.testing.assert_array_equal(pg.peek_site(half, odd), a[odd])
    with pytest.raises(GridError, match="to_numpy\\(\\) on every rank"):
        np.asarray(f)
