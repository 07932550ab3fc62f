"""Field buffers start on a cache-line boundary (pygrid.memory.aligned)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as hs

import pygrid as pg
from pygrid.memory import EmulatedDevice, UnifiedDevice
from pygrid.memory.aligned import ALIGN, aligned_empty, aligned_zeros


@settings(max_examples=60, deadline=None)
@given(shape=hs.lists(hs.integers(0, 9), min_size=0, max_size=4),
       dtype=hs.sampled_from([np.float32, np.float64, np.complex128, np.int8]),
       align=hs.sampled_from([1, 16, 64, 256, 4096]))
def test_aligned_empty_has_the_shape_dtype_and_alignment(shape, dtype, align):
    a = aligned_empty(shape, dtype, align)
    assert a.shape == tuple(shape) and a.dtype == np.dtype(dtype)
    assert a.flags.c_contiguous and a.flags.writeable
    assert a.size == 0 or a.ctypes.data % align == 0  # an empty array has no data to place
    a[...] = 1  # the whole extent is writable memory of its own
    assert a.nbytes == int(np.prod(shape)) * np.dtype(dtype).itemsize


def test_aligned_zeros_is_zero_and_outlives_its_maker():
    a = aligned_zeros((1000, 3), np.float64)
    assert not a.any()
    b = a[::2]
    del a
    b[...] = 2.0  # the byte buffer is kept alive by the view chain
    assert (b == 2.0).all()


@pytest.mark.parametrize("align", [0, -64, 48])
def test_aligned_empty_rejects_an_alignment_that_is_not_a_power_of_two(align):
    with pytest.raises(ValueError, match="power of two"):
        aligned_empty((4,), np.float64, align)


@pytest.mark.parametrize("precision", ["double", "single"])
def test_field_buffers_start_on_a_cache_line(precision):
    grid = pg.GridCartesian([4, 4, 4, 8], precision=precision)
    fields = [pg.LatticeFermion(grid, precision), pg.LatticeColourMatrix(grid, precision),
              pg.LatticeGaugeField(grid, precision),
              pg.LatticeFermion(pg.GridCartesian5D(grid, 4), precision),
              pg.LatticeComplex(pg.GridRedBlackCartesian(grid), precision)]
    for f in fields:
        with f.view(pg.CpuRead) as v:
            assert v.ctypes.data % ALIGN == 0, type(f).__name__


@pytest.mark.parametrize("device", [UnifiedDevice, EmulatedDevice])
def test_device_allocations_start_on_a_cache_line(device):
    d = device()
    a = d.alloc(8 * 7 * 5, np.float64, (7, 5))
    assert a.shape == (7, 5) and a.ctypes.data % ALIGN == 0
    d.free(a)
