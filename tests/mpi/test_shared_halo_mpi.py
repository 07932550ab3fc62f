"""The Dirac halo through the node's shared memory (pygrid.stencil.shared_halo) against one rank and
against the halo as MPI messages, over repeated calls on the same fields (the kept calls, which
alternate the two halo arrays) and after the links change under a kept call."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conftest import WORLD, grids, same_everywhere

import pygrid as pg
from pygrid import config
from pygrid.cartesian.simd import default_nsimd, default_simd_layout
from pygrid.memory import ViewMode
from pygrid.stencil.shared_halo import usable

#: split in t, which the default SIMD layout leaves without lanes: every face travels whole
LAYOUT = {2: (1, 1, 1, 2), 4: (1, 1, 1, 4)}.get(WORLD.size)
DIMS = (4, 4, 4, 4 * WORLD.size)
NSIMD = default_nsimd("double")
#: two lanes in t: each face row holds lanes of two ranks, merged after the neighbours wrote theirs
MERGED = default_simd_layout((4, 4, 4), NSIMD // 2) + (2,)
CPU = pg.get_backend().name in ("openmp", "numpy")

pytestmark = pytest.mark.skipif(LAYOUT is None or not CPU,
                                reason="a split over 2 or 4 ranks, and the hand-unrolled kernel (CPU)")


@pytest.fixture(params=[True, False], ids=["shared", "messages"])
def shm(request):
    before = config.current()
    config.set_current(dataclasses.replace(before, shm_halo=request.param))
    yield request.param
    config.set_current(before)


def _operators(g, Ls):
    rng = pg.ParallelRNG(g, [21, 22])
    U = pg.qcd.random_gauge(g, rng)
    if Ls is None:
        return pg.qcd.WilsonFermion(U, 0.1), g
    D = pg.qcd.DomainWallFermion(U, Ls, 0.1, 1.8)
    return D, D.new_fermion().grid


@pytest.mark.parametrize("lanes", ["whole", "merged"])
@pytest.mark.parametrize("Ls", [None, 4], ids=["wilson", "dwf"])
def test_repeated_calls_match_one_rank(shm, Ls, lanes):
    """Six calls on the same fields, the source rewritten before each: every result equals the
    one-rank operator's, and the halo went the configured way."""
    g, g1 = grids(DIMS, LAYOUT, **({"simd_layout": MERGED} if lanes == "merged" else {}))
    D, gf = _operators(g, Ls)
    D1, gf1 = _operators(g1, Ls)
    psi, out = pg.LatticeFermion(gf), pg.LatticeFermion(gf)
    psi1, out1 = pg.LatticeFermion(gf1), pg.LatticeFermion(gf1)
    stats = g.comm.stats
    for i in range(6):
        if i == 1:
            stats.reset()   # after the first call, which exchanged the links' halo as messages
        pg.ParallelRNG(gf, [30 + i]).gaussian(psi)
        pg.ParallelRNG(gf1, [30 + i]).gaussian(psi1)
        D.Dhop(psi, out=out, dag=bool(i % 3 == 2))
        D1.Dhop(psi1, out=out1, dag=bool(i % 3 == 2))
        np.testing.assert_array_equal(same_everywhere(out.to_numpy()), out1.to_numpy())
    plan = (D if Ls is None else D._w).stencil.plan
    assert usable(plan)
    assert all(plan.points[p].direct for p in plan.active) == (lanes == "whole")
    if shm:
        assert stats.shared_transfers >= 5 and stats.messages == 0
    else:
        assert stats.shared_transfers == 0 and stats.messages >= 5


def test_links_written_under_a_kept_call(shm):
    """A kept call reads the links' halo of its making; once the links are written it takes the
    checked path again: the hop is linear in the links, so negating them negates the result."""
    g, _ = grids(DIMS, LAYOUT)
    D, gf = _operators(g, None)
    psi, out = pg.LatticeFermion(gf), pg.LatticeFermion(gf)
    pg.ParallelRNG(gf, [40]).gaussian(psi)
    for _ in range(3):      # the third call runs kept
        D.Dhop(psi, out=out)
    assert [c.guard is not None for c in D._hop_calls.values()] == [True]
    before = out.to_numpy()
    with D.links.view(ViewMode.CpuWrite) as u:
        u *= -1
    D.Dhop(psi, out=out)
    np.testing.assert_array_equal(out.to_numpy(), -before)
    D.Dhop(psi, out=out)
    np.testing.assert_array_equal(out.to_numpy(), -before)


def test_schur_cg_through_shared_memory_matches_messages():
    """A Schur CG, thousands of kept even-odd hops, gives the same solution through shared memory
    as through messages (the same arithmetic: bit for bit)."""
    res = []
    for shared in (True, False):
        before = config.current()
        config.set_current(dataclasses.replace(before, shm_halo=shared))
        try:
            g, _ = grids(DIMS, LAYOUT)
            D, gf = _operators(g, None)
            src = pg.LatticeFermion(gf)
            pg.ParallelRNG(gf, [50]).gaussian(src)
            cg = pg.algorithms.ConjugateGradient(tol=1e-10, maxiter=500)
            solve = pg.qcd.SchurRedBlackDiagMooeeSolve(cg)
            x, r = solve(D, src)
            res.append((x.to_numpy(), r.iterations))
        finally:
            config.set_current(before)
    np.testing.assert_array_equal(res[0][0], res[1][0])
    assert res[0][1] == res[1][1]
