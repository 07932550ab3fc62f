"""Grids: SIMD layouts, outer sites, global site indices, red-black and 5D grids."""
import math
import os
import warnings

import numpy as np
import pytest
from conftest import grid

import pygrid as pg
from pygrid.cartesian.simd import default_nsimd


@pytest.mark.parametrize("dims", [(4, 4, 4, 4), (4, 4, 4, 8), (8, 8, 8, 16), (16, 4, 4, 4), (2, 2, 2, 2)])
@pytest.mark.parametrize("precision", ["double", "single"])
def test_default_simd_layout(dims, precision):
    g = pg.GridCartesian(list(dims), precision=precision)
    assert len(g.simd_layout) == 4
    assert math.prod(g.simd_layout) == g.nsimd
    assert g.nsimd <= default_nsimd(precision)
    if dims != (2, 2, 2, 2):  # big enough for a full register of lanes
        assert g.nsimd == default_nsimd(precision)
    assert all(d % s == 0 for d, s in zip(dims, g.simd_layout))
    assert g.rdims == tuple(d // s for d, s in zip(dims, g.simd_layout))
    assert g.osites == math.prod(g.rdims)
    assert g.osites * g.nsimd == math.prod(dims)
    assert g.gdims == dims and g.ldims == dims and g.lshape == dims and g.nd == 4


def test_host_nsimd_avx2_or_better():
    assert default_nsimd("single") == 2 * default_nsimd("double")
    assert default_nsimd("double") >= 2


@pytest.mark.parametrize("features,bits", [("-avx512f,+avx2,+fma", 256), ("+avx512f,+avx2,+fma", 512),
                                           ("-avx512f,-avx2,+sse4.2", 128)])
def test_simd_width_follows_what_numba_compiles_for(features, bits):
    """Told to compile for other features (``NUMBA_CPU_FEATURES``), numba emits no wider vectors
    than they allow: the lanes and the kernels' structure follow them, not the CPU underneath."""
    import subprocess
    import sys

    code = ("from pygrid.cartesian.simd import host_simd_bits, default_nsimd; "
            "print(host_simd_bits(), default_nsimd('double'), default_nsimd('single'))")
    env = dict(os.environ, NUMBA_CPU_FEATURES=features, NUMBA_CPU_NAME="generic")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(bits), str(max(2, bits // 64)), str(max(2, bits // 32))]


@pytest.mark.parametrize("simd", [(1, 1, 2, 2), (2, 2, 1, 1), (1, 1, 1, 4), (2, 1, 1, 2), (1, 1, 1, 1), None])
def test_explicit_layout(simd):
    g = grid((4, 4, 4, 8), simd)
    if simd is not None:
        assert g.simd_layout == simd
    assert g.osites * g.nsimd == 4 * 4 * 4 * 8


@pytest.mark.parametrize("simd", [(1, 1, 2, 2), (2, 2, 1, 1), (1, 1, 1, 4), None])
def test_global_site_indices_unique_and_covering(simd):
    g = grid((4, 4, 4, 8), simd)
    idx = g.global_site_indices()
    assert idx.shape == g.lshape
    assert np.array_equal(np.sort(idx.ravel()), np.arange(g.gsites))
    # lexicographic, dimension 0 fastest, indexed like to_numpy() [x, y, z, t]
    x, y, z, t = np.indices(g.lshape)
    assert np.array_equal(idx, x + 4 * (y + 4 * (z + 4 * t)))


@pytest.mark.parametrize("simd", [(1, 1, 2, 2), (1, 1, 1, 4)])
def test_outer_lane_map_is_a_bijection(simd):
    g = grid((4, 4, 4, 8), simd)
    c = g.stored_coords().reshape(-1, 4)
    assert len({tuple(r) for r in c}) == g.osites * g.nsimd
    o, l = g.outer_lane_of(g.stored_coords())
    assert np.array_equal(o, np.repeat(np.arange(g.osites)[:, None], g.nsimd, axis=1))
    assert np.array_equal(l, np.repeat(np.arange(g.nsimd)[None, :], g.osites, axis=0))
    # x_d = o_d + rdims[d] * l_d with dimension 0 fastest: outer site 1 is x = 1
    assert tuple(g.stored_coords()[1, 0]) == (1, 0, 0, 0)


@pytest.mark.parametrize(
    "dims,simd", [((4, 4, 4, 4), None), ((4, 4, 4, 8), (1, 1, 1, 4)), ((8, 4, 4, 4), (2, 1, 1, 2))]
)
def test_red_black_grid(dims, simd):
    g = grid(dims, simd)
    rb = g.red_black
    assert rb is g.red_black and rb.checkerboarded and not g.checkerboarded
    assert rb.lshape == (dims[0] // 2,) + dims[1:]
    assert rb.osites * rb.nsimd == math.prod(dims) // 2
    assert rb.simd_layout == g.simd_layout
    # each checkerboard covers exactly the sites of its parity
    seen = []
    for cb in (0, 1):
        idx = rb.global_site_indices(cb).ravel()
        x = idx % dims[0]
        y = (idx // dims[0]) % dims[1]
        z = (idx // (dims[0] * dims[1])) % dims[2]
        t = idx // (dims[0] * dims[1] * dims[2])
        assert np.all((x + y + z + t) % 2 == cb)
        seen.append(idx)
    assert np.array_equal(np.sort(np.concatenate(seen)), np.arange(math.prod(dims)))


def test_red_black_grid_needs_even_dims():
    with pytest.raises(pg.GridError):
        _ = pg.GridCartesian([5, 4, 4, 4], simd_layout=(1, 1, 1, 1)).red_black


def test_grid_5d():
    g4 = grid()
    g5 = pg.GridCartesian5D(g4, 6)
    assert g5.nd == 5 and g5.Ls == 6 and g5.grid4 is g4
    assert g5.gdims == (6, 4, 4, 4, 4) and g5.lshape == (6, 4, 4, 4, 4)
    assert g5.simd_layout == (1,) + g4.simd_layout  # s is never split over lanes
    assert g5.nsimd == g4.nsimd and g5.osites == 6 * g4.osites
    # s fastest in memory: consecutive outer sites are consecutive s
    assert tuple(g5.stored_coords()[1, 0]) == (1, 0, 0, 0, 0)
    idx = g5.global_site_indices()
    assert np.array_equal(np.sort(idx.ravel()), np.arange(6 * 256))
    rb = g5.red_black
    assert rb.lshape == (6, 2, 4, 4, 4)
    for cb in (0, 1):
        i = rb.global_site_indices(cb).ravel() // 6  # the 4D site
        x, y, z, t = i % 4, (i // 4) % 4, (i // 16) % 4, i // 64
        assert np.all((x + y + z + t) % 2 == cb)


def test_grid_equality_and_hash():
    a = pg.GridCartesian([4, 4, 4, 4], simd_layout=(1, 1, 2, 2))
    b = pg.GridCartesian([4, 4, 4, 4], simd_layout=(1, 1, 2, 2))
    c = pg.GridCartesian([4, 4, 4, 4], simd_layout=(2, 2, 1, 1))
    assert a == b and hash(a) == hash(b) and a != c
    assert a.red_black == b.red_black and a.red_black != a


def test_grid_3d_and_2d():
    for dims in ([4, 8, 4], [8, 8]):
        g = pg.GridCartesian(dims, simd_layout=(1,) * (len(dims) - 1) + (2,))
        assert g.nd == len(dims) and g.osites * g.nsimd == math.prod(dims)


@pytest.mark.parametrize("dims", [[4, 4, 4, 2 ** 31], [2 ** 20, 2 ** 20, 2 ** 20, 2 ** 5]])
def test_absurd_dimensions_are_a_grid_error_not_a_numpy_one(dims):
    with pytest.raises(pg.GridError, match="at most 2147483647 per dimension"):
        pg.GridCartesian(dims)


def test_a_lattice_too_small_for_the_simd_width_says_so():
    want = pg.cartesian.default_nsimd("double")           # what this machine's vectors hold
    with pytest.warns(pg.PerformanceWarning, match=f"can hold only Nsimd 1 of the {want} SIMD lanes"):
        g = pg.GridCartesian([2, 2, 2, 2])
    assert g.nsimd == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert pg.GridCartesian([8, 8, 8, 8]).nsimd == want     # a full layout warns nothing


def test_grid_without_dimensions_takes_those_of_the_grid_flag():
    from pygrid import config

    old = config.set_current(config.make_config(config.current(), grid=None))
    try:
        with pytest.raises(pg.GridError, match="takes them from --grid"):
            pg.GridCartesian()
        config.set_current(config.make_config(config.current(), grid=(4, 4, 4, 8)))
        assert pg.GridCartesian().gdims == (4, 4, 4, 8)
    finally:
        config.set_current(old)
