"""The openmp backend's driver on libgomp's region (pygrid.accelerator.gomp_team): which driver
launches take, which thread runs which block, a kept launch's thread-count check."""
import numba
import numpy as np
import pytest
from numba import njit

from pygrid.accelerator import gomp_team, parallel_numba
from pygrid.accelerator.backends import get_backend
from pygrid.accelerator.gomp_team_ops import team_size, thread_num


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
