"""The kept views of the solvers' vector updates and reductions (pygrid.lattice.kept): from the
second call on the same fields they run without the general views, with the call's coefficients,
and wherever the fields, their checkerboards, the backend or a view in the way differ they take
the general path and behave as it does."""
import gc

import numpy as np
import pytest
from conftest import backend, grid, random_field

import pygrid as pg
from pygrid.lattice import kept as K, ops

CALLS = {
    "axpy": lambda f, a: pg.axpy(f[0], a, f[1], f[2]),
    "axpy_norm2": lambda f, a: pg.axpy_norm2(f[0], a, f[1], f[2]),
    "axpy_xpay": lambda f, a: pg.axpy_xpay(f[0], a, f[1], f[2], 0.5 - 0.25j),
    "norm2": lambda f, a: pg.norm2(f[0]),
    "inner_product": lambda f, a: pg.inner_product(f[0], f[1]),
}


def three(g, precision="double"):
    return [random_field(g, pg.SpinColourVector(), precision) for _ in range(3)]


def expected(name, f, a):
    """The call's results and fields on copies, through the expression path (the reference)."""
    z, x, y = (v.to_numpy().astype(np.complex128) for v in f)
    if name in ("axpy", "axpy_norm2"):
        z = a * x + y
        return (np.vdot(z, z).real if name == "axpy_norm2" else None), (z, x, y)
    if name == "axpy_xpay":
        return None, (a * x + z, y + (0.5 - 0.25j) * x, y)
    if name == "norm2":
        return np.vdot(z, z).real, (z, x, y)
    return np.vdot(z, x), (z, x, y)


def check(name, f, a):
    want, fields = expected(name, f, a)
    got = CALLS[name](f, a)
    if want is not None:
        assert np.isclose(got, want, rtol=1e-12)
    for v, w in zip(f, fields):
        np.testing.assert_allclose(v.to_numpy(), w, rtol=0, atol=1e-12 * np.abs(w).max())


@pytest.mark.parametrize("name", list(CALLS))
def test_second_call_takes_the_kept_views(name, monkeypatch):
    if not pg.memory.get_manager().device.unified:
        pytest.skip("views are kept on a unified device only")
    g = grid((4, 4, 4, 8), (1, 1, 1, 4))
    f = three(g)
    check(name, f, 0.3)
    assert any(k[0] == name for k in K._kept)
    # from now on the general views would fail the test
    monkeypatch.setattr(ops, "kernel_views", lambda *a: pytest.fail("not the kept views"))
    for a in (-1.25 + 0.5j, 2.0, np.float32(0.5)):
        check(name, f, a)


@pytest.mark.parametrize("name", list(CALLS))
def test_other_fields_a_changed_checkerboard_or_another_backend_take_the_general_path(name, monkeypatch):
    g = grid((4, 4, 4, 8), (1, 1, 1, 4))
    f = [pg.pick_checkerboard(0, v) for v in three(g)]
    check(name, f, 0.3)
    other = [pg.pick_checkerboard(0, v) for v in three(g)]
    check(name, other, -0.7j)
    check(name, f, 1.5)
    first = pg.get_backend()
    with backend("numpy"):
        if pg.get_backend() is not first:   # the kept views' backend must not run meanwhile
            monkeypatch.setattr(first, name, lambda *a: pytest.fail("the kept backend ran"), raising=False)
        check(name, f, 0.25)
    monkeypatch.undo()
    # a field moved to the other checkerboard: the general path's checks decide, as without keeping
    f[1].checkerboard = 1 - f[1].checkerboard
    if name == "norm2":
        check(name, f, 0.5)
        return
    with pytest.raises(pg.errors.PyGridError):
        CALLS[name](f, 0.5)


@pytest.mark.parametrize("name", ["axpy", "axpy_xpay", "norm2"])
def test_a_cpu_view_in_the_way_gives_the_general_paths_outcome(name):
    """A CPU view open on a field the update writes (or any field, for the write of a CPU view):
    the kept views must not let the kernel past the conflict the general views report."""
    if not pg.memory.get_manager().device.unified:
        pytest.skip("views are kept on a unified device only")
    g = grid((4, 4, 4, 8), (1, 1, 1, 4))

    def outcome(keep_first):
        f = three(g)
        if keep_first:
            CALLS[name](f, 0.3)
        before = [v.to_numpy() for v in f]
        mode = pg.CpuWrite if name == "norm2" else pg.CpuRead
        with f[0].view(mode):
            try:
                CALLS[name](f, 0.3)
                err = None
            except Exception as e:  # noqa: BLE001 - the outcome is what is compared
                err = type(e)
        changed = [not np.array_equal(v.to_numpy(), b) for v, b in zip(f, before)]
        return err, changed

    assert outcome(True) == outcome(False)


def test_a_dead_field_takes_its_entry_and_a_non_unified_device_keeps_none():
    g = grid((4, 4, 4, 8), (1, 1, 1, 4))
    f = three(g)
    pg.axpy(f[0], 0.3, f[1], f[2])
    key = ("axpy", id(f[0]), id(f[1]), id(f[2]))
    unified = pg.memory.get_manager().device.unified
    assert (key in K._kept) == unified
    del f
    gc.collect()
    assert key not in K._kept


@pytest.mark.parametrize("name", list(CALLS))
def test_the_backends_kept_launch_runs_with_nothing_between(name, monkeypatch):
    """Where the backend kept the call's launch (``kept_update``, openmp), the next call on the same
    fields runs that launch through a ``memory.KeptLaunch``: neither the views' opens nor the
    backend's call, with the call's coefficients."""
    if not hasattr(pg.get_backend(), "kept_update") or not pg.memory.get_manager().device.unified:
        pytest.skip("a backend that keeps its launches, on a unified device")
    g = grid((4, 4, 4, 8), (1, 1, 1, 4))
    f = three(g)
    check(name, f, 0.3)
    # this test's entry: earlier tests' fields may not have been collected yet
    (k,) = [v for key, v in K._kept.items() if key[0] == name and key[1] == id(f[0])]
    assert k.bound is not None and k.kept_launch is not None
    monkeypatch.setattr(pg.memory.Views, "run_on", lambda *a: pytest.fail("the views were opened"))
    monkeypatch.setattr(pg.get_backend(), name, lambda *a: pytest.fail("the backend's call ran"))
    for a in (-1.25 + 0.5j, 2.0, np.float32(0.5)):
        check(name, f, a)


def test_a_kept_launch_split_for_other_threads_is_not_run(monkeypatch):
    """A reduction's partial sums are one per block of the launch that kept them: after the thread
    count changes the kept launch is refused (the general path sums right), and a launch that
    would be split otherwise now is not kept."""
    b = pg.get_backend()
    if b.name != "openmp" or b.threads() < 2 or not pg.memory.get_manager().device.unified:
        pytest.skip("the openmp backend on two or more threads, on a unified device")
    monkeypatch.setattr(b, "min_parallel_bytes", 0)
    g = grid((4, 4, 4, 8), (1, 1, 1, 4))
    f = three(g)
    threads = b.threads()
    try:
        for name in ("norm2", "inner_product", "axpy_norm2"):
            check(name, f, 0.3)
            (k,) = [v for key, v in K._kept.items() if key[0] == name and key[1] == id(f[0])]
            assert k.kept_launch is not None and k.bound.nblocks == threads
            b.set_threads(1)
            assert K.launch(k, (0.3, 0.0)) is None
            check(name, f, 0.7)
            b.set_threads(threads)
        K._kept.clear()
        check("norm2", f, 0.3)
        b.set_threads(1)        # between the backend's call and the keeping of its launch
        (k,) = [v for key, v in K._kept.items() if key[0] == "norm2"]
        assert k.bound.prepared() is None
    finally:
        b.set_threads(threads)
