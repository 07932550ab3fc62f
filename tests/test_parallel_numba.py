"""The openmp backend's accelerator_for: blocks of outer sites on OpenMP threads, one driver per arity
calling each kernel by address."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from numba import njit, typeof, types
from numba._dispatcher import compute_fingerprint as _fp

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


def _runs_through(key, d):
    """Whether the launch of ``key`` goes through the driver ``d``: the dispatcher before the first
    call, the compiled entry point of one of its overloads after."""
    drive = parallel_numba._launches[key][0]
    return drive is d or drive in {cres.entry_point for cres in d.overloads.values()}


def test_one_cached_driver_serves_every_kernel_of_the_same_arity():
    owner, starts, out = np.zeros(10, np.int64), np.zeros(10, np.int64), np.zeros(10)
    parallel_numba.parallel_for(2, 10, mark_block, owner, starts)
    parallel_numba.parallel_for(2, 10, count_block, out, 1.0)
    d = parallel_numba.driver(2)
    assert d.__module__.startswith("pygrid_par_") and parallel_numba.driver(2) is d
    assert _runs_through((mark_block, (_fp(owner), _fp(starts))), d)
    assert _runs_through((count_block, (_fp(out), _fp(1.0))), d)
    src = parallel_numba.driver_source(2)
    assert "call_kernel(address" in src and "mark_block" not in src
    # a driver cached by another version of this module is never loaded: the source names its digest
    assert parallel_numba._own_digest() in src


def test_the_driver_calls_the_kernel_by_address_without_linking_it():
    """numba links a kernel called by name into its caller and compiles it again; the driver
    holds only an indirect call, so its machine code never contains the kernel's."""
    a = np.zeros(64)
    parallel_numba.parallel_for(2, 64, count_block, a, 2.0)
    np.testing.assert_array_equal(a, 2.0)
    sig = (types.int64, types.int64, typeof(a), types.float64)
    kernel_name = count_block.overloads[sig].fndesc.llvm_func_name
    # the driver's source compiled afresh here (code loaded from numba's disk cache cannot be inspected)
    ns = {}
    exec(parallel_numba.driver_source(2).replace("cache=True", "cache=False"), ns)
    b = np.zeros(64)
    failed = np.zeros(2, np.uint8)
    address = parallel_numba._launches[(count_block, (_fp(b), _fp(2.0)))][1]
    assert ns["drive"](address, 2, 64, failed, b, 2.0) == 0
    np.testing.assert_array_equal(b, 2.0)
    llvm = ns["drive"].inspect_llvm()
    assert llvm and all("inttoptr" in text for text in llvm.values())
    assert all(kernel_name not in text for text in llvm.values())
    # the check sees a kernel called by name: the linked driver holds it
    parallel_numba._drive_linked(count_block, 2, 64, (a, 2.0))
    assert any(kernel_name in text for text in parallel_numba._drive_linked.inspect_llvm().values())


def test_each_argument_type_signature_gets_its_own_kernel_address():
    """The address is that of the overload for the arguments' exact types: a read-only array,
    an integer for a float, another dtype each run the kernel compiled for them."""
    @njit(nogil=True)
    def scale(lo, hi, out, x, b):
        for i in range(lo, hi):
            out[i] += x * b[i]

    b = np.arange(100.0)
    ro = b.view()
    ro.flags.writeable = False
    out = np.zeros(100)
    runs = [(2.0, b), (1.0, ro), (1, b), (np.float32(0.5), b.astype(np.float32))]
    for x, arr in runs:
        parallel_numba.parallel_for(3, 100, scale, out, x, arr)
    np.testing.assert_array_equal(out, 4.5 * b)
    addresses = {v[1] for k, v in parallel_numba._launches.items() if k[0] is scale}
    assert len(addresses) == len(runs) and 0 not in addresses


def test_kernel_defined_in_a_function_runs_through_the_shared_driver():
    @njit(nogil=True)
    def add(lo, hi, a, x):
        for i in range(lo, hi):
            a[i] += x

    a = np.zeros(1000)
    parallel_numba.parallel_for(3, 1000, add, a, 2.0)
    np.testing.assert_array_equal(a, 2.0)
    assert _runs_through((add, (_fp(a), _fp(2.0))), parallel_numba.driver(2))


def test_later_launches_call_the_drivers_entry_point():
    """After the first launch of a kernel on arguments of some types, the next ones skip numba's
    dispatch: they call the compiled entry point of the driver's overload for those types."""
    @njit(nogil=True)
    def twice(lo, hi, a, x):
        for i in range(lo, hi):
            a[i] += 2 * x

    a = np.zeros(50)
    key = (twice, (_fp(a), _fp(1.5)))
    parallel_numba.parallel_for(2, 50, twice, a, 1.5)
    entry = parallel_numba._launches[key][0]
    assert entry in {cres.entry_point for cres in parallel_numba.driver(2).overloads.values()}
    parallel_numba.parallel_for(2, 50, twice, a, 1.5)
    parallel_numba.parallel_for(3, 49, twice, a, 1.5)
    assert parallel_numba._launches[key][0] is entry
    np.testing.assert_array_equal(a[:49], 9.0)
    assert a[49] == 6.0


@njit(nogil=True)
def refuse_site(lo, hi, a, bad):
    for i in range(lo, hi):
        if i == bad:
            raise ValueError("this site is refused")
        a[i] = 1.0


def test_an_exception_in_a_kernel_reaches_the_caller():
    a = np.zeros(16)
    with pytest.raises(ValueError, match="this site is refused"):
        parallel_numba.parallel_for(2, 16, refuse_site, a, 7)
    parallel_numba.parallel_for(2, 16, refuse_site, a, -1)
    np.testing.assert_array_equal(a, 1.0)
    # and through the driver's entry point, which the launches after the first call
    assert not isinstance(parallel_numba._launches[(refuse_site, (_fp(a), _fp(7)))][0], type(refuse_site))
    with pytest.raises(ValueError, match="this site is refused"):
        parallel_numba.parallel_for(2, 16, refuse_site, a, 3)


@njit(nogil=True)
def refuse_once(lo, hi, a, armed):
    for i in range(lo, hi):
        if lo > 0 and armed[0]:
            armed[0] = 0
            raise ValueError("refused once")
        a[i] = 1.0


@pytest.mark.parametrize("nblocks", [2, 3])
def test_an_exception_on_a_worker_thread_reaches_the_caller(nblocks):
    """numba's parallel loop drops an exception raised on a worker thread: the driver reports the
    block, which runs again on the calling thread and raises there, through the dispatcher and
    through the entry point alike; one that does not repeat is reported as such."""
    a = np.zeros(60)
    for bad in (59, 30, 59):
        with pytest.raises(ValueError, match="this site is refused"):
            parallel_numba.parallel_for(nblocks, 60, refuse_site, a, bad)
    armed = np.ones(1, np.int64)
    with pytest.raises(RuntimeError, match="refuse_once raised an exception on a worker thread"):
        parallel_numba.parallel_for(nblocks, 60, refuse_once, a, armed)
    parallel_numba.parallel_for(nblocks, 60, refuse_once, a, armed)
    np.testing.assert_array_equal(a, 1.0)


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
        before = set(parallel_numba._launches)
        b @= pg.transpose(pg.conjugate(a)) * pg.adj(a) - 0.25 * a   # a shape no other test uses
        assert (len(set(parallel_numba._launches) - before) > 0) == new_driver
        np.testing.assert_allclose(b.to_numpy(), np.swapaxes(np.conj(a.to_numpy()), -1, -2)
                                   @ np.swapaxes(np.conj(a.to_numpy()), -1, -2) - 0.25 * a.to_numpy(),
                                   rtol=1e-12, atol=1e-12)


def test_bound_kernel_runs_through_the_entry_point_from_its_second_launch():
    """A kernel bound to its arguments' types (Bound, the backend's bind_kernel) launches like
    parallel_for: every site once, its exception as itself, the entry point after the first call."""
    a = np.zeros(40)
    bound = parallel_numba.Bound(refuse_site, (a, 7))
    with pytest.raises(ValueError, match="this site is refused"):
        bound(2, 40, a, 7)
    bound(3, 40, a, -1)
    np.testing.assert_array_equal(a, 1.0)
    entry = bound._entry
    assert entry in {cres.entry_point for cres in parallel_numba.driver(2).overloads.values()}
    for bad in (19, 39):                               # the calling thread's block, a worker's
        with pytest.raises(ValueError, match="this site is refused"):
            bound(2, 40, a, bad)
    assert bound._entry is entry
    # parallel_for finds the same entry point for these types
    assert parallel_numba._launches[(refuse_site, (_fp(a), _fp(7)))][0] is entry


@pytest.mark.parametrize("osites", [5, 4096])
def test_backend_bind_kernel_covers_all_sites(osites):
    be = OpenMPBackend()
    be.set_threads(2)
    out = np.zeros(osites)
    launch = be.bind_kernel(count_block, out, 1.5)
    for _ in range(3):
        launch(osites, out, 1.5)
    np.testing.assert_array_equal(out, 4.5)
    seen = []
    be.bind_kernel(lambda lo, hi, tag: seen.append((lo, hi, tag)), "x")(osites, "y")
    assert seen == [(0, osites, "y")]
