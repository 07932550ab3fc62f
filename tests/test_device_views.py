"""Host backends on fields held in a device's memory: their kernels get host views, never device arrays.

On a GPU the memory manager keeps fields in CuPy arrays, which numpy refuses to read
implicitly.  A user who switches to the numpy or openmp backend there (to debug, or
to check a result) must still get the right answer: the manager brings each field
to the host as for any CPU access.  The device below holds its buffers in an object
numpy cannot read, so any device buffer that reached a host kernel fails the test.
"""
import numpy as np
import pytest
from conftest import backend

import pygrid as pg
from pygrid import memory as mem
from pygrid.memory.devices import Device
from pygrid.qcd.reference import dhop as dhop_reference


class DeviceOnlyArray:
    """A buffer only its device's copies can reach, as a CuPy array is to numpy."""

    def __init__(self, shape, dtype):
        self.data = np.empty(shape, dtype)
        self.shape, self.dtype = self.data.shape, self.data.dtype

    def reshape(self, *shape):
        out = DeviceOnlyArray.__new__(DeviceOnlyArray)
        out.data = self.data.reshape(*shape)
        out.shape, out.dtype = out.data.shape, out.data.dtype
        return out

    def __array__(self, *args, **kwargs):
        raise TypeError("a device array reached numpy")


class DeviceOnlyMemory(Device):
    name = "device-only"
    unified = False

    def alloc(self, nbytes, dtype, shape):
        return DeviceOnlyArray(shape, dtype)

    def free(self, array):
        pass

    def to_device(self, host, dev):
        np.copyto(dev.data, host)

    def to_host(self, dev, host):
        np.copyto(host, dev.data)


@pytest.mark.parametrize("name", ["numpy", "openmp"])
def test_host_backends_compute_on_fields_in_device_memory(name, monkeypatch):
    monkeypatch.setattr(mem, "_default", mem.get_manager())
    m = mem.configure(device=DeviceOnlyMemory(), device_mem_mb=64)
    grid = pg.GridCartesian((4, 4, 4, 4))
    rng = pg.ParallelRNG(grid, [5, 3])
    U = pg.qcd.random_gauge(grid, rng)
    psi, chi = pg.LatticeFermion(grid), pg.LatticeFermion(grid)
    rng.gaussian(psi)
    rng.gaussian(chi)
    Un, pn, cn = U.to_numpy(), psi.to_numpy(), chi.to_numpy()
    for f in (U, psi, chi):  # every field's latest copy on the device, the host copies stale
        with f.view(pg.AcceleratorWrite):
            pass
    with backend(name):
        got = pg.eval(0.5 * psi + pg.cshift(chi, 3, 1)).to_numpy()
        assert np.allclose(got, 0.5 * pn + np.roll(cn, -1, axis=3), rtol=0, atol=1e-14)
        assert np.isclose(pg.norm2(psi), np.vdot(pn, pn).real, rtol=1e-13)
        assert np.isclose(pg.inner_product(psi, chi), np.vdot(pn, cn), rtol=1e-13)
        assert np.allclose(pg.sum(psi), pn.sum(axis=(0, 1, 2, 3)), rtol=1e-13)
        got = pg.qcd.WilsonFermion(U, 0.1).M(psi).to_numpy()
        assert np.allclose(got, 4.1 * pn + dhop_reference(Un, pn), rtol=0, atol=1e-13)
        out = pg.LatticeFermion(grid)
        with out.view(pg.AcceleratorWrite):
            pass
        out @= 2.0 * psi  # a result written on the host while the device copy was newest
    assert np.array_equal(out.to_numpy(), 2.0 * pn)
    assert m.stats()["d2h_count"] >= 3  # the fields came back from the device for the host kernels
