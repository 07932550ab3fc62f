"""The openmp backend's driver on libgomp's region (pygrid.accelerator.gomp_team): which driver
launches take, which thread runs which block, a kept launch's thread-count check."""
import numba
import numpy as np
import pytest
from numba import njit

from pygrid.accelerator import gomp_team, parallel_numba
from pygrid.accelerator.backends import get_backend
from pygrid.accelerator.gomp_team_ops import fetch_add, team_size, thread_num


@njit(nogil=True)
def which_thread(lo, hi, owner, team):
    for i in range(lo, hi):
        owner[i] = thread_num()
        team[i] = team_size()


def _numbas_threads_are_libgomps():
    from numba.np.ufunc import omppool

    return numba.threading_layer() == "omp" and omppool.openmp_vendor == "GNU"


def test_packed_launches_take_libgomps_region_where_numbas_threads_are_libgomps():
    get_backend()   # starts numba's threads, which picks the threading layer
    d = parallel_numba.packed_driver()
    if _numbas_threads_are_libgomps():
        assert "libgomp" in gomp_team._loaded_libgomp()
        assert d is gomp_team.driver() and d.__module__.startswith("pygrid_gomp_")
        src = gomp_team._source()
        # a driver cached by another version of either module is never loaded: the source names both
        assert parallel_numba._own_digest() in src and gomp_team._digest() in src
        assert "cache=True" in src and "cache=False" in gomp_team._source("x", hooks="some_module")
    else:
        assert gomp_team.driver() is None and d is parallel_numba.driver(1)


@pytest.mark.skipif(gomp_team.driver() is None, reason="numba's threads are not libgomp's here")
@pytest.mark.parametrize("nblocks", [2, 3])
def test_block_b_runs_on_thread_b_of_a_team_of_nblocks(nblocks):
    """As in the prange driver: one block per thread, block 0 on the calling thread (thread 0)."""
    owner, team = np.full(9, -1, np.int64), np.zeros(9, np.int64)
    parallel_numba.parallel_for(nblocks, 9, which_thread, owner, team)
    starts = [b * 9 // nblocks for b in range(nblocks)]
    assert (team == nblocks).all()
    assert [owner[s] for s in starts] == list(range(nblocks))
    for b in range(nblocks):
        lo, hi = starts[b], (b + 1) * 9 // nblocks
        assert (owner[lo:hi] == b).all()


@pytest.mark.skipif(gomp_team.driver() is None, reason="numba's threads are not libgomp's here")
def test_a_bound_launchs_task_runs_its_blocks_in_one_region():
    owner, team = np.full(12, -1, np.int64), np.zeros(12, np.int64)
    bound = parallel_numba.Bound(which_thread, (owner, team))
    bound.again(2, 12)      # compiles the driver and keeps its entry point
    owner[:] = -1
    run = bound.runner(2, 12)
    run()
    np.testing.assert_array_equal(owner, [0] * 6 + [1] * 6)
    np.testing.assert_array_equal(team, 2)


def test_a_kept_launch_follows_a_change_of_the_thread_count():
    """The runner checks its cell (the backend's thread count) and falls back when it changed."""
    owner, team = np.zeros(10, np.int64), np.zeros(10, np.int64)
    bound = parallel_numba.Bound(which_thread, (owner, team))
    bound.again(2, 10)
    cell, fell = [2], []
    run = bound.runner(2, 10, cell, lambda: fell.append(True))
    run()
    assert fell == []
    cell[0] = 3
    owner[:] = -1
    run()
    assert fell == [True] and (owner == -1).all()


def test_the_backends_kept_launch_takes_the_new_thread_count():
    b = get_backend("openmp")
    owner, team = np.full(64 * 1024, -1, np.int64), np.zeros(64 * 1024, np.int64)
    threads = b.threads()
    launch = b.bind_kernel(which_thread, owner, team)
    launch(owner.size, owner, team)
    go = launch.prepared(owner.size)
    try:
        b.set_threads(1)
        go()
        assert (team == 1).all() and (owner == 0).all()
        b.set_threads(2)
        go()
        assert (team == min(2, b._blocks())).all()
    finally:
        b.set_threads(threads)


def test_another_threading_layer_keeps_the_prange_driver():
    """Under numba's workqueue layer the region is not used: launches run through the prange
    driver, every site once, in a process of their own (the layer is fixed per process)."""
    import os
    import subprocess
    import sys

    code = (
        "import numpy as np, numba\n"
        "from numba import njit\n"
        "from pygrid.accelerator import gomp_team, parallel_numba\n"
        "from pygrid.accelerator.backends import get_backend\n"
        "get_backend()\n"
        "@njit(nogil=True)\n"
        "def mark(lo, hi, a):\n"
        "    for i in range(lo, hi):\n"
        "        a[i] += 1\n"
        "a = np.zeros(50)\n"
        "parallel_numba.parallel_for(3, 50, mark, a)\n"
        "assert numba.threading_layer() == 'workqueue'\n"
        "assert gomp_team.driver() is None and parallel_numba.packed_driver() is parallel_numba.driver(1)\n"
        "assert (a == 1).all()\n"
        "print('ok')\n")
    env = dict(os.environ, NUMBA_THREADING_LAYER="workqueue")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().endswith("ok")


@njit(nogil=True)
def log_pieces(lo, hi, count, log, spin, out):
    """Each site counted; each call's (lo, hi, thread) appended to ``log`` (row 0, column 0 the
    next free row); thread 1 works ``spin`` steps a site, so it runs slower than thread 0."""
    r = fetch_add(log.ctypes.data, 1) + 1
    log[r, 0], log[r, 1], log[r, 2] = lo, hi, thread_num()
    for i in range(lo, hi):
        count[i] += 1
        if thread_num() == 1:
            acc = 0.0
            for j in range(spin):
                acc += np.sin(j * 1e-3 + i)
            out[i] = acc


def _balanced_run(n, nblocks, piece_sites, spin):
    count, out = np.zeros(n, np.int64), np.zeros(n)
    log = np.zeros((n + 1, 3), np.int64)
    bound = parallel_numba.Bound(log_pieces, (count, log, spin, out))
    bound.again(nblocks, n)     # compiles the driver and keeps its entry point
    count[:], log[:] = 0, 0
    bound.runner(nblocks, n, piece_sites=piece_sites)()
    return count, log[1:log[0, 0] + 1]


@pytest.mark.skipif(gomp_team.driver() is None, reason="numba's threads are not libgomp's here")
@pytest.mark.parametrize("n, nblocks, piece_sites", [(400, 2, 10), (1001, 3, 7), (64, 2, 16), (50, 2, 30)])
def test_a_balanced_launch_cuts_each_block_into_halving_pieces_that_cover_it_once(n, nblocks, piece_sites):
    count, log = _balanced_run(n, nblocks, piece_sites, 0)
    assert (count == 1).all()
    k = gomp_team.pieces(n, nblocks, piece_sites)
    assert k == (1 if n // nblocks < 2 * piece_sites else int(np.log2(n // nblocks // piece_sites)) + 1)
    for b in range(nblocks):
        lo, hi = b * n // nblocks, (b + 1) * n // nblocks
        mine = sorted((int(a), int(e)) for a, e, _ in log if lo <= a < hi)
        assert len(mine) == k and mine[0][0] == lo and mine[-1][1] == hi
        assert all(mine[i][1] == mine[i + 1][0] for i in range(k - 1))
        sizes = [e - a for a, e in mine]
        # the first half of the block, then halves of what is left; the last at least piece_sites
        assert sizes[0] == ((hi - lo) - (hi - lo) // 2 if k > 1 else hi - lo)
        assert all(sizes[i] >= sizes[i + 1] for i in range(k - 2))
        assert k == 1 or sizes[-1] >= piece_sites


@pytest.mark.skipif(gomp_team.driver() is None or get_backend("openmp")._blocks() < 2,
                    reason="needs libgomp's team of two threads")
def test_the_faster_thread_takes_the_slower_threads_last_pieces():
    n = 400
    count, log = _balanced_run(n, 2, 10, 20000)
    assert (count == 1).all()
    # thread 1 is slow: thread 0 ran its own block and pieces of block 1 after it
    assert all(t == 0 for a, _, t in log if a < n // 2)
    assert any(t == 0 for a, _, t in log if a >= n // 2)
    whole_count, whole_log = _balanced_run(n, 2, 0, 20000)
    assert (whole_count == 1).all() and all((a >= n // 2) == (t == 1) for a, _, t in whole_log)


@njit(nogil=True)
def fail_at(lo, hi, a, at):
    for i in range(lo, hi):
        if i == at[0]:
            raise ValueError("site failed")
        a[i] += 1


@pytest.mark.skipif(gomp_team.driver() is None, reason="numba's threads are not libgomp's here")
def test_a_balanced_launch_raises_a_pieces_exception_and_the_next_launch_starts_clean():
    a, at = np.zeros(300), np.array([250])
    bound = parallel_numba.Bound(fail_at, (a, at))
    at[0] = -1
    bound.again(2, 300)
    run = bound.runner(2, 300, piece_sites=8)
    at[0] = 250
    with pytest.raises(ValueError, match="site failed"):
        run()
    at[0] = -1
    a[:] = 0
    run()   # the flags and counters of the failed launch are reset: nothing raised, every site once
    assert (a == 1).all()


def test_the_backends_balanced_launch_takes_pieces_of_min_piece_bytes():
    b = get_backend("openmp")
    if gomp_team.driver() is None or b._blocks() < 2:
        pytest.skip("needs libgomp's team of two threads")
    n = 64 * 1024
    count, out, log = np.zeros(n, np.int64), np.zeros(n), np.zeros((n + 1, 3), np.int64)
    launch = b.bind_kernel(log_pieces, count, log, 0, out, balance=True)
    launch(n, count, log, 0, out)
    go = launch.prepared(n)
    count[:], log[:] = 0, 0
    go()
    blocks = b.blocks(count.nbytes)
    piece = -(-b.min_piece_bytes * n // count.nbytes)
    assert (count == 1).all() and log[0, 0] == blocks * gomp_team.pieces(n, blocks, piece) > blocks


def test_kept_expressions_and_updates_take_balanced_launches_and_reductions_whole_blocks(monkeypatch):
    """An expression's kernel and the updates without partial sums (axpy) hand out pieces; a
    reduction (norm2, axpy_norm2), whose partial sums are indexed by block, runs whole blocks.
    The results are numpy's."""
    import pygrid as pg
    from pygrid.accelerator.openmp_backend import OpenMPBackend

    b = get_backend()
    if b.name != "openmp" or gomp_team.driver() is None or b._blocks() < 2:
        pytest.skip("balanced launches run on the openmp backend's libgomp region, two threads")
    monkeypatch.setattr(OpenMPBackend, "min_piece_bytes", 4096)
    tasks, task = [], gomp_team.task
    monkeypatch.setattr(gomp_team, "task", lambda *a, **k: tasks.append(task(*a, **k)) or tasks[-1])
    grid = pg.GridCartesian([8, 8, 8, 8])
    x, y, z = (pg.LatticeFermion(grid) for _ in range(3))
    pg.ParallelRNG(grid, [1, 2]).gaussian(x)
    pg.ParallelRNG(grid, [3, 4]).gaussian(y)
    xn, yn = x.to_numpy(), y.to_numpy()

    def pieces_of(call):
        del tasks[:]
        call()                  # checked: the launch is kept, its task words made
        call()                  # kept
        return [int(t[6]) for t in tasks]

    ks = pieces_of(lambda: z.assign(0.5 * x + y))
    assert ks and all(k > 2 for k in ks)
    np.testing.assert_allclose(z.to_numpy(), 0.5 * xn + yn, rtol=1e-14)
    ks = pieces_of(lambda: pg.axpy(z, 0.25, x, y))
    assert ks and all(k > 2 for k in ks)
    np.testing.assert_allclose(z.to_numpy(), 0.25 * xn + yn, rtol=1e-14)
    ks = pieces_of(lambda: pg.norm2(x))
    assert ks and all(k == 1 for k in ks)
    assert pg.norm2(x) == pytest.approx(float(np.sum(np.abs(xn) ** 2)), rel=1e-12)
    ks = pieces_of(lambda: pg.axpy_norm2(z, 0.5, x, y))
    assert ks and all(k == 1 for k in ks)
