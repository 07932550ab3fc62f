"""The openmp backend's accelerator_for: blocks of outer sites on OpenMP threads, per-kernel drivers."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from numba import njit

from pygrid.accelerator import parallel_numba
from pygrid.accelerator.openmp_backend import OpenMPBackend


@njit(nogil=True, cache=True)
def count_block(lo, hi, out, weight):
    for i in range(lo, hi):
        out[i] += weight


@njit(nogil=True, cache=True)
def mark_block(lo, hi, owner, starts):
    for i in range(lo, hi):
        owner[i] += 1
    if hi > lo:
        starts[lo] = 1


@given(osites=st.integers(0, 300), nblocks=st.integers(1, 7))
@settings(max_examples=40, deadline=None)
def test_every_site_once_in_contiguous_blocks(osites, nblocks):
    owner = np.zeros(osites, np.int64)
    starts = np.zeros(max(osites, 1), np.int64)
    parallel_numba.parallel_for(nblocks, osites, mark_block, owner, starts)
    assert (owner == 1).all()
    # the block starts are those of an even split
    bounds = [b * osites // nblocks for b in range(nblocks + 1)]
    expected = {lo for lo, hi in zip(bounds, bounds[1:]) if hi > lo}
    assert set(np.flatnonzero(starts[:osites])) == expected


def test_module_kernel_gets_a_cached_driver_module():
    d = parallel_numba.driver(mark_block, 2)
    assert d.__module__.startswith("pygrid_par_")
    assert parallel_numba.driver(mark_block, 2) is d
    src = parallel_numba.driver_source(__name__, "mark_block", 2, "abc")
    assert f"from {__name__} import mark_block as kernel" in src and "abc" in src
    # a changed kernel module gets another driver module (its source names the module digest)
    assert parallel_numba.driver_source(__name__, "mark_block", 2, "abd") != src


def test_kernel_defined_in_a_function_runs_through_the_generic_driver():
    @njit(nogil=True)
    def add(lo, hi, a, x):
        for i in range(lo, hi):
            a[i] += x

    a = np.zeros(1000)
    parallel_numba.parallel_for(3, 1000, add, a, 2.0)
    np.testing.assert_array_equal(a, 2.0)
    assert not getattr(parallel_numba.driver(add, 2), "__module__", "").startswith("pygrid_par_")


def test_python_callable_runs_on_the_calling_thread():
    seen = []
    parallel_numba.parallel_for(4, 10, lambda lo, hi, tag: seen.append((lo, hi, tag)), "x")
    assert seen == [(0, 10, "x")]


@pytest.mark.parametrize("osites", [5, 4096])
def test_backend_accelerator_for_covers_all_sites(osites):
    be = OpenMPBackend()
    be.set_threads(2)
    out = np.zeros(osites)
    be.accelerator_for(osites, count_block, out, 1.5)
    np.testing.assert_array_equal(out, 1.5)


def test_expression_launch_compiles_its_driver_only_when_it_uses_the_threads():
    """A small field runs on the calling thread, so its expression compiles no parallel driver;
    a large one has its driver compiled with the kernel, before any view opens."""
    import pygrid as pg

    backend = pg.get_backend()
    if backend.name != "openmp" or backend._blocks() < 2:
        pytest.skip("needs the openmp backend on two or more threads")
    small = pg.GridCartesian([4, 4, 4, 4])                  # 32 outer sites
    large = pg.GridCartesian([8, 8, 16, 8], simd_layout=[1, 1, 1, 1])   # 8192
    assert small.osites < backend.min_parallel_osites <= large.osites
    for grid, new_driver in ((small, False), (large, True)):
        a, b = pg.LatticeColourMatrix(grid), pg.LatticeColourMatrix(grid)
        pg.ParallelRNG(grid, [7]).gaussian(a)
        before = set(parallel_numba._drivers)
        b @= pg.transpose(pg.conjugate(a)) * pg.adj(a) - 0.25 * a   # a shape no other test uses
        assert (len(set(parallel_numba._drivers) - before) > 0) == new_driver
        np.testing.assert_allclose(b.to_numpy(), np.swapaxes(np.conj(a.to_numpy()), -1, -2)
                                   @ np.swapaxes(np.conj(a.to_numpy()), -1, -2) - 0.25 * a.to_numpy(),
                                   rtol=1e-12, atol=1e-12)
