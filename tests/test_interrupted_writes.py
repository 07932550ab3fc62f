"""``x @= expr`` that fails or is interrupted (Ctrl-C) leaves x, and every cached field, as they were.

Faults are injected where they happen for real: in the compile of a new kernel (seconds when the
cache is cold, so where a user presses Ctrl-C) and in the launch, on a device with memory of its
own (the emulated device, and USM on the sycl CPU device when dpctl is installed).
"""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from conftest import COMPILED

import pygrid as pg
import pygrid.accelerator.backends as _bk
from pygrid import memory as mem

DEVICES = [("emulated", COMPILED if COMPILED != "sycl" else "openmp")]
if importlib.util.find_spec("dpctl") is not None:
    DEVICES.append(("sycl", "sycl"))


@pytest.fixture(params=DEVICES, ids=[d for d, _ in DEVICES])
def device(request, monkeypatch):
    name, backend = request.param
    monkeypatch.setattr(mem, "_default", mem.get_manager())
    before = pg.get_backend().name
    _bk.set_backend(backend)
    m = mem.configure(device=name, device_mem_mb=1)
    yield m, pg.get_backend()
    _bk.set_backend(before)


def _fields(seed=0):
    g = pg.GridCartesian([4, 4, 4, 4])
    rng = np.random.default_rng(seed)
    a = [rng.normal(size=g.gshape + (3,)) + 1j * rng.normal(size=g.gshape + (3,)) for _ in range(3)]
    return [pg.Lattice(g, pg.ColourVector()).from_numpy(x) for x in a], a


@pytest.mark.parametrize("exc", [KeyboardInterrupt, RuntimeError])
def test_interrupted_compile_opens_no_view(device, monkeypatch, exc):
    m, backend = device
    (x, y, z), (xa, ya, za) = _fields()

    def compile_fails(*args, **kwargs):
        raise exc("injected during the compile")

    monkeypatch.setattr(backend, "prepare", compile_fails)
    monkeypatch.setattr(backend, "run", lambda *a, **k: pytest.fail("launched after a failed compile"))
    writes = m.write_count(x._key)
    before = m.stats()
    with pytest.raises(exc):
        x @= 2.0 * y + pg.cshift(z, 1, 1) * 1j
    assert m.write_count(x._key) == writes          # no view of x was opened
    assert m.stats() == before                      # nothing moved, nothing locked
    monkeypatch.undo()
    np.testing.assert_array_equal(x.to_numpy(), xa)
    x @= 2.0 * y + pg.cshift(z, 1, 1) * 1j          # and the same assignment works afterwards
    np.testing.assert_allclose(x.to_numpy(), 2.0 * ya + np.roll(za, -1, axis=1) * 1j, rtol=1e-13)


@pytest.mark.parametrize("exc", [KeyboardInterrupt, RuntimeError])
@pytest.mark.parametrize("on_device", [False, True])
def test_failed_launch_keeps_the_previous_contents(device, monkeypatch, exc, on_device):
    m, backend = device
    (x, y, z), (xa, ya, za) = _fields(1)
    if on_device:
        x @= x + 0.0                                # x's only current copy now on the device
        assert m.state(x._key) is pg.memory.State.AcceleratorDirty
    run = backend.run

    def launch_fails(ir, out, *args, **kwargs):
        if not on_device:
            run(ir, out, *args, **kwargs)           # the kernel ran (wrote out), then the launch failed
        raise exc("injected in the launch")

    monkeypatch.setattr(backend, "run", launch_fails)
    with pytest.raises(exc):
        x @= 3.0 * y - z
    monkeypatch.undo()
    assert m.stats()["open_views"] == 0
    np.testing.assert_array_equal(x.to_numpy(), xa)
    np.testing.assert_array_equal(y.to_numpy(), ya)
    x @= 3.0 * y - z
    np.testing.assert_allclose(x.to_numpy(), 3.0 * ya - za, rtol=1e-13)


def test_interrupt_in_the_first_compile_of_a_new_kernel(device, monkeypatch):
    """The report's case: x just filled from numpy, Ctrl-C during the first compile of x @= expr
    (a cold kernel cache: the compiler itself is interrupted)."""
    m, backend = device
    (x, y, z), (xa, ya, za) = _fields(2)
    monkeypatch.setattr(backend, "_kernels", {})   # nothing compiled yet in this process

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    if backend.name == "sycl":
        monkeypatch.setattr(backend, "_build", interrupted)
    else:
        monkeypatch.setattr("pygrid.accelerator.compile_cache.load_module", interrupted)
    before = m.stats()
    with pytest.raises(KeyboardInterrupt):
        x @= 5.0 * z - pg.cshift(y, 0, -1)
    assert m.stats() == before
    monkeypatch.undo()
    np.testing.assert_array_equal(x.to_numpy(), xa)
    x @= 5.0 * z - pg.cshift(y, 0, -1)
    np.testing.assert_allclose(x.to_numpy(), 5.0 * za - np.roll(ya, 1, axis=0), rtol=1e-13)


def test_ctrl_c_during_a_threaded_launch_returns_only_when_every_thread_is_done(ctrl_c_reaches_python):
    """A Ctrl-C during a launch on several threads is raised when the launch returns, with every
    block written: the views of the launch never close while a thread still writes the output."""
    import os
    import signal
    import threading

    from numba import njit

    from pygrid.accelerator.openmp_backend import OpenMPBackend

    @njit(nogil=True)
    def slow_kernel(lo, hi, out, work):
        for i in range(lo, hi):
            s = 0.0
            for j in range(work):
                s += np.sqrt(np.float64(i + j))
            out[i] = 1.0 + 0.0 * s

    backend = OpenMPBackend()
    backend.set_threads(2)
    out = np.zeros(2 * backend.min_parallel_bytes // 8)
    if backend.blocks(out.nbytes) < 2:
        pytest.skip("one thread for numba here")
    slow_kernel(0, 1, out, 1)                                   # compiled before the clock starts
    backend.accelerator_for(out.size, slow_kernel, out, 1)     # and its driver
    out[:] = 0.0
    ctrl_c = threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT))   # while the threads work
    ctrl_c.start()
    with pytest.raises(KeyboardInterrupt):
        backend.accelerator_for(out.size, slow_kernel, out, 12_000)        # 0.5-1 s
    ctrl_c.join()
    assert np.all(out == 1.0)                         # every thread had finished its share
