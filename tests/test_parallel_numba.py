"""The openmp backend's accelerator_for: blocks of outer sites on OpenMP threads, one driver calling
each kernel by address with its arguments packed into words (or, for other argument types, one
driver per arity)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from numba import njit, typeof, types
from numba._dispatcher import compute_fingerprint as _fp
from numba.core import cgutils
from numba.extending import intrinsic

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
    drive = parallel_numba._launches[key].drive
    return drive is d or drive in {cres.entry_point for cres in d.overloads.values()}


def test_one_cached_driver_serves_every_kernel():
    owner, starts, out = np.zeros(10, np.int64), np.zeros(10, np.int64), np.zeros(10)
    parallel_numba.parallel_for(2, 10, mark_block, owner, starts)
    parallel_numba.parallel_for(2, 10, count_block, out, 1.0)
    d = parallel_numba.packed_driver()
    assert d.__module__.startswith(("pygrid_gomp_", "pygrid_par_")) and parallel_numba.packed_driver() is d
    for key in ((mark_block, (_fp(owner), _fp(starts))), (count_block, (_fp(out), _fp(1.0)))):
        assert _runs_through(key, d)
        assert parallel_numba._launches[key].packing is not None
    np.testing.assert_array_equal(out, 1.0)
    src = parallel_numba.driver_source(1)
    assert "call_kernel(address" in src and "mark_block" not in src
    # a driver or packing cached by another version of this module is never loaded: the sources
    # name its digest
    assert parallel_numba._own_digest() in src
    assert parallel_numba._own_digest() in parallel_numba.packed_source("B")


def test_the_driver_calls_the_kernel_by_address_without_linking_it():
    """numba links a kernel called by name into its caller and compiles it again; the driver and
    the call that unpacks the arguments hold only indirect calls, so their machine code never
    contains the kernel's."""
    a = np.zeros(64)
    parallel_numba.parallel_for(2, 64, count_block, a, 2.0)
    np.testing.assert_array_equal(a, 2.0)
    sig = (types.int64, types.int64, typeof(a), types.float64)
    kernel_name = count_block.overloads[sig].fndesc.llvm_func_name
    # the sources compiled afresh here (code loaded from numba's disk cache cannot be inspected)
    launch = parallel_numba._launches[(count_block, (_fp(a), _fp(2.0)))]
    spec = ";".join(parallel_numba._type_code(typeof(x)) for x in (a, 2.0))
    ns, nd = {}, {}
    exec(parallel_numba.packed_source(spec).replace("cache=True", "cache=False"), ns)
    exec(parallel_numba.driver_source(1).replace("cache=True", "cache=False"), nd)
    b = np.zeros(64)
    words = np.zeros(launch.packing.nwords, np.uint64)
    ns["pack"](words, launch.address, b, 2.0)
    tramp = parallel_numba._address(ns["tramp"], (words,))
    failed = np.zeros(2, np.uint8)
    assert nd["drive"](tramp, 2, 64, failed, words) == 0
    np.testing.assert_array_equal(b, 2.0)
    for f in (ns["tramp"], nd["drive"]):
        llvm = f.inspect_llvm()
        assert llvm and all("inttoptr" in text for text in llvm.values())
        assert all(kernel_name not in text for text in llvm.values())
    # the check sees a kernel called by name: the linked driver holds it
    parallel_numba._drive_linked(count_block, 2, 64, (a, 2.0))
    assert any(kernel_name in text for text in parallel_numba._drive_linked.inspect_llvm().values())


@njit(nogil=True)
def every_type(lo, hi, out, flag, i32, f32, z, ro, grid, mask):
    for i in range(lo, hi):
        out[i] = (1.0 if flag else 0.0) + i32 + f32 + z.real - z.imag + ro[i] + grid[i % 3, i % 2] + mask[i]


def test_packed_arguments_of_every_supported_type():
    """Booleans, integers, floats and complex numbers, read-only and strided arrays reach the kernel
    through the packed words as they are; a tuple argument takes a driver typed by its arguments."""
    out = np.zeros(40)
    ro = np.arange(40.0)
    ro.flags.writeable = False
    grid = np.arange(18.0).reshape(3, 6)[:, ::3]   # not contiguous
    mask = np.arange(40) % 2 == 0                   # a boolean array: its dtype reads "|b1"
    args = (out, True, np.int32(-3), np.float32(0.25), 2.5 - 1.5j, ro, grid, mask)
    parallel_numba.parallel_for(3, 40, every_type, *args)
    i = np.arange(40)
    np.testing.assert_array_equal(out, 1.0 - 3 + 0.25 + 2.5 + 1.5 + ro + grid[i % 3, i % 2] + mask)
    launch = parallel_numba._launches[(every_type, tuple(map(_fp, args)))]
    assert launch.packing is not None and launch.drive is not parallel_numba.driver(len(args))

    @njit(nogil=True)
    def with_tuple(lo, hi, out, pair):
        for i in range(lo, hi):
            out[i] = pair[0] * pair[1]

    parallel_numba.parallel_for(2, 40, with_tuple, out, (2.0, 3.0))
    np.testing.assert_array_equal(out, 6.0)
    launch = parallel_numba._launches[(with_tuple, (_fp(out), _fp((2.0, 3.0))))]
    assert launch.packing is None and _runs_through((with_tuple, (_fp(out), _fp((2.0, 3.0)))),
                                                    parallel_numba.driver(2))


def test_a_bound_launch_again_on_its_own_arguments():
    """``Bound.again`` runs on the arguments it was bound with, packed once; an exception reaches the
    caller; a launch whose argument died refuses instead of reading freed memory."""
    a, bad = np.zeros(30), 7
    bound = parallel_numba.Bound(refuse_site, (a, -1))
    bound.again(2, 30)
    bound.again(3, 30)
    np.testing.assert_array_equal(a, 1.0)
    b = np.zeros(30)
    bound(2, 30, b, -1)     # other arrays of the same types: packed for this call
    np.testing.assert_array_equal(b, 1.0)
    a[:] = 0
    bound.again(1, 30)      # one block: on the calling thread, through the entry points
    np.testing.assert_array_equal(a, 1.0)
    refusing = parallel_numba.Bound(refuse_site, (a, bad))
    for nblocks in (2, 1):
        with pytest.raises(ValueError, match="this site is refused"):
            refusing.again(nblocks, 30)
        with pytest.raises(ValueError, match="this site is refused"):
            refusing(nblocks, 30, a, bad)
    gone = parallel_numba.Bound(refuse_site, (np.zeros(30), -1))
    with pytest.raises(RuntimeError, match="outlived one of its arguments"):
        gone.again(2, 30)


def test_a_bound_launch_runner_repeats_it():
    """``Bound.runner(nblocks, osites)`` is ``again`` with its lookups done once: the same sites
    written, and the kernel's exception raised, in blocks and on the calling thread."""
    a = np.zeros(30)
    bound = parallel_numba.Bound(refuse_site, (a, -1))
    bound.again(2, 30)      # the driver's first launch compiles and keeps its entry point
    for nblocks in (2, 3, 1):
        a[:] = 0
        run = bound.runner(nblocks, 30)
        run()
        np.testing.assert_array_equal(a, 1.0)
    a[:] = 0
    bound.runner(2, 20)()
    np.testing.assert_array_equal(a[:20], 1.0)
    np.testing.assert_array_equal(a[20:], 0.0)
    refusing = parallel_numba.Bound(refuse_site, (a, 7))
    refusing.runner(2, 30)   # before any launch: it runs through again
    for nblocks in (2, 1):
        with pytest.raises(ValueError, match="this site is refused"):
            refusing.runner(nblocks, 30)()


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
    addresses = {v.address for k, v in parallel_numba._launches.items() if k[0] is scale}
    assert len(addresses) == len(runs) and 0 not in addresses


def test_kernel_defined_in_a_function_runs_through_the_shared_driver():
    @njit(nogil=True)
    def add(lo, hi, a, x):
        for i in range(lo, hi):
            a[i] += x

    a = np.zeros(1000)
    parallel_numba.parallel_for(3, 1000, add, a, 2.0)
    np.testing.assert_array_equal(a, 2.0)
    assert _runs_through((add, (_fp(a), _fp(2.0))), parallel_numba.packed_driver())


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
    launch = parallel_numba._launches[key]
    entry = launch.drive
    assert entry in {cres.entry_point for cres in parallel_numba.packed_driver().overloads.values()}
    assert not isinstance(launch.packing.pack, type(twice))     # and the packing's
    parallel_numba.parallel_for(2, 50, twice, a, 1.5)
    parallel_numba.parallel_for(3, 49, twice, a, 1.5)
    assert parallel_numba._launches[key].drive is entry
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
    assert not isinstance(parallel_numba._launches[(refuse_site, (_fp(a), _fp(7)))].drive, type(refuse_site))
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
@pytest.mark.parametrize("min_bytes", [0, None])
def test_backend_accelerator_for_covers_all_sites(osites, min_bytes):
    be = OpenMPBackend()
    be.set_threads(2)
    if min_bytes is not None:   # every launch split over the threads, else none of these
        be.min_parallel_bytes = min_bytes
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
    colour_matrix_bytes = 9 * 16   # a complex 3x3 matrix in double, per site
    assert (small.osites * small.nsimd * colour_matrix_bytes < backend.min_parallel_bytes
            <= large.osites * large.nsimd * colour_matrix_bytes)
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
    entry = bound._launch.drive
    assert entry in {cres.entry_point for cres in parallel_numba.packed_driver().overloads.values()}
    for bad in (19, 39):                               # the calling thread's block, a worker's
        with pytest.raises(ValueError, match="this site is refused"):
            bound(2, 40, a, bad)
    assert bound._launch.drive is entry
    # parallel_for finds the same launch for these types
    assert parallel_numba._launches[(refuse_site, (_fp(a), _fp(7)))] is bound._launch


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


@intrinsic
def _has_owner(typingctx, arr):
    """Whether the array argument carries its memory's owner (numba's meminfo), whose reference
    count numba then keeps with atomic operations."""
    def codegen(context, builder, sig, args):
        meminfo = context.make_array(sig.args[0])(context, builder, args[0]).meminfo
        return builder.icmp_unsigned("!=", meminfo, cgutils.get_null_value(meminfo.type))

    return types.boolean(arr), codegen


@njit(nogil=True)
def note_owner(lo, hi, a, owned):
    owned[0] = 1 if _has_owner(a) else 0
    for i in range(lo, hi):
        a[i] += 1.0


def test_one_block_runs_on_packed_arguments():
    """A bound launch of one block, on its own arguments or on others, hands the kernel its arrays
    without their owners, as the threads' blocks get them: every reference count the kernel keeps
    on them is then a no-op instead of an atomic operation (which waits for the stores streamed
    past the caches before it)."""
    a, owned = np.zeros(30), np.full(1, 7, np.int64)
    note_owner(0, 30, a, owned)             # through numba's dispatch: unboxed, with the owner
    assert owned[0] == 1
    bound = parallel_numba.Bound(note_owner, (a, owned))
    b = np.zeros(30)
    bound(1, 30, b, owned)
    assert owned[0] == 0
    np.testing.assert_array_equal(b, 1.0)
    owned[0] = 7
    bound.again(1, 30)
    assert owned[0] == 0
    np.testing.assert_array_equal(a, 2.0)


def test_one_thread_launch_of_a_large_field_runs_on_packed_arguments():
    """On one thread a launch too large for the calling thread alone at several threads runs packed,
    as a block of the threads does; a small one goes straight to the kernel."""
    be = OpenMPBackend()
    a, owned = np.zeros(64), np.full(1, 7, np.int64)
    try:
        be.set_threads(1)
        be.min_parallel_bytes = 0
        be.accelerator_for(64, note_owner, a, owned)
        assert owned[0] == 0
        be.min_parallel_bytes = 1 << 20
        be.accelerator_for(64, note_owner, a, owned)
        assert owned[0] == 1
        np.testing.assert_array_equal(a, 2.0)
    finally:
        be.set_threads(2)
