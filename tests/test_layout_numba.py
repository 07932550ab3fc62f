"""The openmp backend's compiled layout moves (pygrid.accelerator.layout_numba) against numpy's
fancy indexing (pygrid.accelerator.host.relayout, the numpy backend's), on random buffers and maps."""
import numpy as np
import pytest

from pygrid.accelerator import host, layout_numba

RNG = np.random.default_rng(11)


@pytest.fixture(autouse=True)
def compiled_on_small_buffers(monkeypatch):
    """The loops on these small buffers too (the backend takes numpy below COMPILED_BYTES)."""
    monkeypatch.setattr(layout_numba, "COMPILED_BYTES", 0)


def _maps(n_small, ns_small, n_big, ns_big, dtype):
    """Distinct (outer site, lane) pairs of the bigger side, one per site and lane of the smaller."""
    pick = RNG.permutation(n_big * ns_big)[:n_small * ns_small]
    return ((pick // ns_big).reshape(n_small, ns_small).astype(dtype),
            (pick % ns_big).reshape(n_small, ns_small).astype(dtype))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("index", [np.int32, np.int64])
def test_gather_and_scatter_against_numpy(dtype, index):
    big = RNG.normal(size=(10, 12, 2, 8)).astype(dtype)
    om, lm = _maps(6, 4, 10, 8, index)
    want = np.zeros((6, 12, 2, 4), dtype)
    got = np.full_like(want, np.nan)
    host.relayout("gather", want, big, om, lm)
    layout_numba.relayout("gather", got, big, om, lm)
    assert np.array_equal(got, want)

    small = RNG.normal(size=(6, 12, 2, 4)).astype(dtype)
    want, got = big.copy(), big.copy()
    host.relayout("scatter", want, small, om, lm)
    layout_numba.relayout("scatter", got, small, om, lm)
    assert np.array_equal(got, want) and not np.array_equal(got, big)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_setcomp_against_numpy(dtype):
    inp = RNG.normal(size=(7, 9, 2, 8)).astype(dtype)
    out = RNG.normal(size=(7, 36, 2, 8)).astype(dtype)
    cout, cin = np.arange(9, 18), RNG.permutation(9)
    want, got = out.copy(), out.copy()
    host.relayout("setcomp", want, inp, cout, cin)
    layout_numba.relayout("setcomp", got, inp, cout, cin)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("src, dst", [(np.float64, np.float32), (np.float32, np.float64)])
def test_gather_and_scatter_between_precisions(src, dst):
    """pg.convert onto another SIMD layout: the move and the cast in one loop, as numpy's astype."""
    big = RNG.normal(size=(10, 12, 2, 8)).astype(src)
    om, lm = _maps(6, 4, 10, 8, np.int64)
    got = np.full((6, 12, 2, 4), np.nan, dst)
    layout_numba.relayout("gather", got, big, om, lm)
    assert np.array_equal(got, big[om, :, :, lm].transpose(0, 2, 3, 1).astype(dst))
    small = RNG.normal(size=(6, 12, 2, 4)).astype(src)
    want, got = np.zeros(big.shape, dst), np.zeros(big.shape, dst)
    host.relayout("scatter", want, small.astype(dst), om, lm)
    layout_numba.relayout("scatter", got, small, om, lm)
    assert np.array_equal(got, want) and np.count_nonzero(got) == small.size


def test_what_the_loops_do_not_take_goes_to_numpy():
    """Precision casts on one layout and strided buffers: the same results through numpy."""
    big = RNG.normal(size=(10, 3, 2, 8))
    om, lm = _maps(5, 4, 10, 8, np.int64)
    for out in (np.zeros((5, 3, 2, 8))[..., ::2],):
        want = np.zeros(out.shape, out.dtype)
        host.relayout("gather", want, big, om, lm)
        layout_numba.relayout("gather", out, big, om, lm)
        assert np.array_equal(out, want)
    out = np.zeros(big.shape, np.float32)
    layout_numba.relayout("cast", out, big)
    assert np.array_equal(out, big.astype(np.float32))
