"""Fields on a lattice split over the job's ranks agree with the same fields on one rank.

Expressions, shifts (across ranks, and in dimensions split over both ranks and
SIMD lanes), checkerboards, the RNG and numpy interop are bit-identical; sums
agree to rounding (1e-13 relative).
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import WORLD, grids, layouts, same_everywhere

import pygrid as pg

DIMS = (4, 4, 4, 8)
SUM_RTOL = 1e-13


def cases():
    out = [(layout, None) for layout in layouts()]
    # the time dimension split over ranks and over SIMD lanes at once
    if WORLD.size == 2:
        out.append(((1, 1, 1, 2), (1, 1, 2, 2)))
    elif WORLD.size == 4:
        out.append(((1, 1, 2, 2), (1, 2, 1, 2)))
    return out


CASES = cases()
IDS = [".".join(map(str, m)) + ("" if s is None else "-simd" + ".".join(map(str, s))) for m, s in CASES]


def random_array(shape, seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


def both(layout, simd, dims=DIMS):
    kw = {} if simd is None else {"simd_layout": simd}
    return grids(dims, layout, **kw)


@pytest.mark.parametrize("layout,simd", CASES, ids=IDS)
def test_numpy_round_trip_and_local_block(layout, simd):
    g, _ = both(layout, simd)
    a = random_array(DIMS + (3, 3), 1)
    f = pg.LatticeColourMatrix(g).from_numpy(a)
    np.testing.assert_array_equal(f.to_numpy(), a)
    local = f.to_local_numpy()
    assert local.shape == g.ldims + (3, 3)
    np.testing.assert_array_equal(local, a[tuple(slice(s, s + l) for s, l in zip(g.lstart, g.ldims))])


@pytest.mark.parametrize("layout,simd", CASES, ids=IDS)
def test_expressions_with_shifts(layout, simd):
    a, b = random_array(DIMS + (3, 3), 2), random_array(DIMS + (3, 3), 3)
    res = []
    for g in both(layout, simd):
        A = pg.LatticeColourMatrix(g).from_numpy(a)
        B = pg.LatticeColourMatrix(g).from_numpy(b)
        e = A * pg.cshift(B, 3, 1) + pg.adj(pg.cshift(A, 0, -1)) * pg.cshift(pg.cshift(B, 3, -1), 2, 1)
        e = e - 0.5 * pg.cshift(pg.cshift(A, 1, 1), 3, 2) * B
        res.append(pg.eval(e).to_numpy())
    np.testing.assert_array_equal(same_everywhere(res[0]), res[1])


@pytest.mark.parametrize("layout,simd", CASES, ids=IDS)
def test_shift_in_place_and_plaquette(layout, simd):
    a = random_array(DIMS + (3, 3), 4)
    res = []
    for g in both(layout, simd):
        A = pg.LatticeColourMatrix(g).from_numpy(a)
        A @= pg.cshift(A, 3, -1) + pg.cshift(A, 1, 1)  # the destination is read shifted
        U = pg.qcd.random_gauge(g, pg.ParallelRNG(g, [7, 7]))
        res.append((A.to_numpy(), pg.qcd.plaquette(U)))
    np.testing.assert_array_equal(res[0][0], res[1][0])
    assert res[0][1] == pytest.approx(res[1][1], rel=SUM_RTOL)


@pytest.mark.parametrize("layout,simd", CASES, ids=IDS)
def test_reductions(layout, simd):
    a, b = random_array(DIMS + (4, 3), 5), random_array(DIMS + (4, 3), 6)
    res = []
    for g in both(layout, simd):
        A = pg.LatticeFermion(g).from_numpy(a)
        B = pg.LatticeFermion(g).from_numpy(b)
        res.append([pg.norm2(A), pg.inner_product(A, B), pg.sum(A)] +
                   [pg.slice_sum(A, d) for d in range(4)])
    assert same_everywhere(np.array(res[0][0])) == pytest.approx(res[1][0], rel=SUM_RTOL)
    assert res[0][1] == pytest.approx(res[1][1], rel=SUM_RTOL)
    for x, y in zip(res[0][2:], res[1][2:]):
        np.testing.assert_allclose(x, y, rtol=SUM_RTOL, atol=1e-12)
    np.testing.assert_allclose(res[0][2], a.sum(axis=(0, 1, 2, 3)), rtol=1e-12)


@pytest.mark.parametrize("layout,simd", CASES, ids=IDS)
def test_rng_same_field_for_any_decomposition(layout, simd):
    res = []
    for g in both(layout, simd):
        rng = pg.ParallelRNG(g, [1, 2, 3])
        f = pg.LatticeFermion(g)
        rng.gaussian(f)
        U = pg.LatticeGaugeField(g)
        rng.random_sun(U)
        h = pg.LatticeFermion(g.red_black, checkerboard=1)
        rng.uniform(h)
        res.append([f.to_numpy(), U.to_numpy(), h.to_numpy()])
    for x, y in zip(*res):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("layout,simd", CASES, ids=IDS)
def test_checkerboards_coordinates_and_red_black_shifts(layout, simd):
    a = random_array(DIMS + (4, 3), 8)
    res = []
    for g in both(layout, simd):
        f = pg.LatticeFermion(g).from_numpy(a)
        e, o = pg.pick_checkerboard(0, f), pg.pick_checkerboard(1, f)
        shifted = pg.eval(pg.cshift(e, 3, 1) + pg.cshift(e, 0, -1))  # even -> odd sites
        back = pg.LatticeFermion(g)
        pg.set_checkerboard(back, o)
        pg.set_checkerboard(back, pg.eval(2.0 * e))
        t = pg.coordinate(g, 3)
        res.append([e.to_numpy(), shifted.to_numpy(), back.to_numpy(), t.to_numpy()])
    for x, y in zip(*res):
        np.testing.assert_array_equal(x, y)


def test_processor_grid_and_neighbours():
    for layout in layouts():
        g = pg.GridCartesian(DIMS, mpi_layout=layout)
        coors = same_everywhere(np.array(WORLD.allgather(list(g.processor_coor))))
        assert len({tuple(c) for c in coors}) == WORLD.size  # every rank its own block
        for mu in range(4):
            for step in (1, -1):
                want = list(g.processor_coor)
                want[mu] = (want[mu] + step) % layout[mu]
                assert list(coors[g.neighbour_rank(mu, step)]) == want
        assert g.lstart == tuple(c * l for c, l in zip(g.processor_coor, g.ldims))


def test_layout_errors():
    with pytest.raises(pg.GridError, match="asks for"):
        pg.GridCartesian(DIMS, mpi_layout=(1, 1, 1, WORLD.size * 2))
    if WORLD.size > 1:
        with pytest.raises(pg.GridError, match="not divisible"):
            pg.GridCartesian((4, 4, 4, 3 * WORLD.size + 1), mpi_layout=(1, 1, 1, WORLD.size))
        g = pg.GridCartesian((4, 4, 4, 2 * WORLD.size), mpi_layout=(1, 1, 1, WORLD.size))
        f = pg.LatticeComplex(g)
        with pytest.raises(pg.GridError, match="reaches past the neighbouring rank"):
            pg.eval(pg.cshift(f, 3, 2))
        with pytest.raises(pg.ShapeError, match="whole lattice"):
            f.from_numpy(np.zeros(g.ldims))


def test_scalar_sums_keep_their_type():
    """Numbers go through a numpy buffer (not pickled), and come back as the type they went in."""
    n, r = WORLD.size, WORLD.rank + 1
    total = n * (n + 1) // 2
    cases = [(1.5 * r, 1.5 * total, float), ((1 + 2j) * r, (1 + 2j) * total, complex),
             (3 * r, 3 * total, int),
             (np.float32(0.25 * r), np.float32(0.25 * total), np.float32),
             (np.complex64(1j * r), np.complex64(1j * total), np.complex64),
             (np.int32(r), np.int32(total), np.int32), (10**30 * r, 10**30 * total, int), (True, n, int)]
    for value, want, kind in cases:
        got = WORLD.sum(value)
        assert got == want and type(got) is kind, (value, got)
    assert WORLD.max(2.5 * r) == 2.5 * n and WORLD.max(-r) == -1


def test_the_launchers_rank_on_the_node_is_mpis():
    """rank_on_this_node, read from the launcher's environment before MPI starts (a GPU backend
    takes its device by it), is this rank's place among the ranks sharing its node as MPI counts
    them, and ranks_on_this_node their number."""
    from pygrid.communicator import rank_on_this_node, ranks_on_this_node

    node = WORLD.node_ranks()
    assert rank_on_this_node() == node[WORLD.rank]
    assert ranks_on_this_node() == len(node)
