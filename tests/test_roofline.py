"""The bandwidth roofline's copies (pygrid.bench.roofline): the streaming copy against numpy, and
the roofline as the faster of the two host copies."""
import numpy as np
import pytest

from pygrid.bench.roofline import host_copies, measure_copy, stream_copy_kernel, touched
from pygrid.memory.aligned import aligned_empty


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("n", [1, 7, 16, 1001, 40000, (1 << 20) // 8 * 3 + 5])
def test_stream_copy_copies_every_element(dtype, n):
    # lengths short of a cache line, with a tail after the last whole line, and on both sides of
    # the parallel threshold (1 MiB)
    src = touched(n, dtype, 3)
    dst = aligned_empty(n, dtype)
    dst[:] = -1
    stream_copy_kernel(dst, src)
    np.testing.assert_array_equal(dst, src)


def test_stream_copy_refuses_unaligned_arrays_and_leaves_the_output():
    src = touched(1024, np.float64, 1)
    raw = aligned_empty(1032, np.float64)
    dst = raw[1:1025]  # 8 bytes past a cache line
    dst[:] = 5.0
    with pytest.raises(ValueError, match="aligned to 64 bytes"):
        stream_copy_kernel(dst, src)
    assert (dst == 5.0).all()


def test_the_roofline_is_the_faster_copy():
    def timer(seconds):
        def t(fn, label):
            fn()
            return seconds[label.rsplit(", ", 1)[1]], 0.0, 1
        return t

    for fast in ("cached stores", "streaming stores"):
        seconds = {"cached stores": 2.0, "streaming stores": 2.0}
        seconds[fast] = 1.0
        roof = measure_copy(1 << 16, "double", timer(seconds))
        assert roof.seconds == 1.0 and fast in roof.description
    kernels = host_copies(4096, np.float32, timer({"cached stores": 1.0, "streaming stores": 1.0}), "x")
    assert [k.name for k in kernels] == ["copy", "copy_stream"]
    assert all(k.nbytes == 2 * 4096 * 4 for k in kernels)
