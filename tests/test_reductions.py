"""Reductions against numpy: norm2, inner_product, sum, slice_sum."""
import numpy as np
import pytest
from conftest import COMPILED, backend, grid, grid5, pool_field, random_field
from hypothesis import given, settings, strategies as st

import pygrid as pg

TYPES = [
    pg.Complex,
    pg.Real,
    pg.ColourMatrix(),
    pg.SpinColourVector(),
    pg.LorentzColourMatrix(),
    pg.ColourVector(2),
]


@pytest.mark.parametrize("precision", ["double", "single"])
@pytest.mark.parametrize("t", TYPES, ids=str)
def test_reductions_match_numpy(t, precision):
    g = grid((4, 4, 4, 8), (1, 1, 1, 4))
    a, b = pool_field(g, t, precision, 0), pool_field(g, t, precision, 1)
    x, y = a.to_numpy().astype(np.complex128), b.to_numpy().astype(np.complex128)
    rtol = 1e-12 if precision == "double" else 1e-6
    for name in (COMPILED, "numpy"):
        with backend(name):
            assert np.isclose(pg.norm2(a), np.vdot(x, x).real, rtol=rtol)
            ip = pg.inner_product(a, b)
            assert isinstance(ip, complex)
            assert np.isclose(ip, np.vdot(x, y), rtol=rtol)
            s = pg.sum(a)
            assert s.shape == t.shape
            assert np.allclose(s, x.sum(axis=(0, 1, 2, 3)), rtol=rtol, atol=rtol * np.abs(x).sum())
            for mu in range(4):
                ss = pg.slice_sum(a, mu)
                assert ss.shape == (g.gdims[mu],) + t.shape
                axes = tuple(d for d in range(4) if d != mu)
                assert np.allclose(ss, x.sum(axis=axes), rtol=rtol, atol=rtol * np.abs(x).sum())


def test_reductions_of_expressions():
    g = grid()
    U = pool_field(g, pg.ColourMatrix(), "double")
    psi = pool_field(g, pg.SpinColourVector(), "double")
    ua, pa = U.to_numpy(), psi.to_numpy()
    up = np.einsum("...ab,...sb->...sa", ua, pa)
    assert np.isclose(pg.norm2(U * psi), np.vdot(up, up).real, rtol=1e-12)
    assert np.isclose(pg.inner_product(psi, U * psi), np.vdot(pa, up), rtol=1e-12)
    assert np.allclose(pg.sum(pg.trace(U)), np.trace(ua, axis1=-2, axis2=-1).sum())


def test_reductions_5d_and_red_black():
    g5 = grid5(4)
    f = random_field(g5, pg.SpinColourVector())
    a = f.to_numpy()
    assert np.isclose(pg.norm2(f), np.vdot(a, a).real, rtol=1e-12)
    assert np.allclose(pg.slice_sum(f, 0), a.sum(axis=(1, 2, 3, 4)))
    full = random_field(grid(), pg.ColourVector())
    e, o = pg.pick_checkerboard(0, full), pg.pick_checkerboard(1, full)
    assert np.isclose(pg.norm2(e) + pg.norm2(o), pg.norm2(full), rtol=1e-12)
    assert np.allclose(pg.sum(e) + pg.sum(o), pg.sum(full))
    ea = e.to_numpy()
    assert np.isclose(pg.inner_product(e, e), np.vdot(ea, ea), rtol=1e-12)


def test_norm2_single_accumulates_in_double():
    """The sum of 512 equal terms in double, where a sum in single would round: each |z|^2 formed in
    single (openmp) or in double (the device backends), both exact sums of their terms."""
    g = grid((4, 4, 4, 8), (1, 1, 1, 4))
    f = pg.LatticeComplex(g, precision="single")
    f.from_numpy(np.full(g.lshape, 1 + 1e-4, dtype=np.complex64))
    term = np.float32(1 + 1e-4)
    n = pg.norm2(f)
    assert min(abs(n - 512 * float(term * term)), abs(n - 512 * float(term) ** 2)) < 1e-12 * n


@settings(max_examples=60, deadline=None)
@given(osites=st.integers(1, 40), ncomp=st.integers(1, 12), ns=st.sampled_from([1, 2, 4, 8, 16]),
       rows=st.sampled_from([1, 3, 64, 4096]), stride=st.sampled_from([1, 2, 3, 64]),
       loads=st.sampled_from([1, 2, 4]), dialect=st.sampled_from(["cuda", "opencl"]),
       single=st.booleans(), seed=st.integers(0, 2**16))
def test_device_reduction_kernels_match_numpy(osites, ncomp, ns, rows, stride, loads, dialect, single,
                                              seed):
    """The reduction kernels of every device backend (reduction_kernels.py) under the SIMT
    emulation: any shape, any cap on their rows of partial sums, both dialects, in the CUDA
    dialect any count of loads a thread, and in the OpenCL dialect's vector kernels any count of
    rows a chunk."""
    from pygrid.accelerator import host, reduction_kernels
    from pygrid.accelerator.emulated_backend import EmulatedSIMTBackend

    be = EmulatedSIMTBackend(dialect)
    be.REDUCE_ROWS, be.REDUCE_STRIDE, be.REDUCE_LOADS = rows, stride, loads
    rng = np.random.default_rng(seed)
    dt = np.float32 if single else np.float64
    a, b = (rng.normal(size=(osites, ncomp, 2, ns)).astype(dt) for _ in range(2))
    rtol = 1e-12  # both sum the same reals in double
    if single and dialect == "opencl":
        # the vector norm2 adds four vectors' squares in single before widening (GROUP): each
        # widened term within 3 * 2^-24 of its exact value
        assert reduction_kernels.GROUP <= 4
        assert abs(be.norm2(a) - host.norm2(a)) <= 2.0**-22 * host.norm2(a) + 1e-12
    else:
        assert np.isclose(be.norm2(a), host.norm2(a), rtol=rtol)
    assert np.isclose(be.inner_product(a, b), host.inner_product(a, b), rtol=rtol, atol=1e-12)
    assert np.allclose(be.site_sum(a), host.site_sum(a), rtol=rtol, atol=1e-12)
    table = rng.permutation(osites * ns).astype(np.int32)[: (osites * ns // 3) * 3].reshape(3, -1)
    assert np.allclose(be.slice_sum(a, table), host.slice_sum(a, table), rtol=rtol, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(osites=st.integers(1, 300), ncomp=st.integers(1, 13), ns=st.sampled_from([4, 8]),
       nblocks=st.integers(1, 8), single=st.booleans(), seed=st.integers(0, 2**16))
def test_openmp_reduction_blocks_match_numpy(osites, ncomp, ns, nblocks, single, seed):
    """The openmp reduction kernels run block by block as the parallel driver splits a launch
    (block b = [b n // nb, (b + 1) n // nb)): each block's partial lands in its own slot, and
    an odd count of components takes the remainder of the unrolled loop over its streams."""
    from pygrid.accelerator import host, reductions_numba as rn

    nblocks = min(nblocks, osites)
    dt = np.float32 if single else np.float64
    rng = np.random.default_rng(seed)
    a, b = (rng.normal(size=(osites, ncomp, 2, ns)).astype(dt) for _ in range(2))
    k = rn.kernels(ns, dt)
    n2, pr, pi = np.full(nblocks, np.nan), np.full(nblocks, np.nan), np.full(nblocks, np.nan)
    for blk in range(nblocks):
        lo, hi = blk * osites // nblocks, (blk + 1) * osites // nblocks
        k.norm2_block(lo, hi, a.reshape(-1), ncomp, osites, n2)
        k.inner_block(lo, hi, a.reshape(-1), b.reshape(-1), ncomp, osites, pr, pi)
    if single:
        # four complex numbers' products formed and added in single (two roundings in a product, two
        # levels of adds), the sums in double: each term within 4 * 2^-24 of the sizes of its products
        assert rn.SINGLE_GROUP <= 4
        ar, ai, br, bi = (v.astype(np.float64) for v in (a[:, :, 0], a[:, :, 1], b[:, :, 0], b[:, :, 1]))
        tol_n = 2.0**-21 * (ar**2 + ai**2).sum() + 1e-12
        tol_re = 2.0**-21 * (abs(ar * br) + abs(ai * bi)).sum() + 1e-12
        tol_im = 2.0**-21 * (abs(ar * bi) + abs(ai * br)).sum() + 1e-12
    else:
        tol_n = 1e-12 * host.norm2(a)
        tol_re = tol_im = 1e-12 * (abs(host.inner_product(a, b)) + 1)
    want = host.inner_product(a, b)
    assert abs(n2.sum() - host.norm2(a)) <= tol_n
    assert abs(pr.sum() - want.real) <= tol_re and abs(pi.sum() - want.imag) <= tol_im


def test_openmp_kept_reductions_follow_the_fields_and_the_threads(monkeypatch):
    """A reduction on buffers seen before runs the launch kept from the first call (on the openmp
    backend) on the buffers' current contents; a call while the kept partials are in use, or
    with another thread count, takes the unkept path; the entry goes with its buffer."""
    import gc
    import weakref

    from pygrid.accelerator import host, reductions_numba as rn

    with backend("openmp"):
        be = pg.get_backend()
        g = pg.GridCartesian((8, 8, 8, 8))
        x, y = pg.LatticeFermion(g), pg.LatticeFermion(g)
        for seed in (1, 2, 3):
            pg.ParallelRNG(g, [seed, 2, 3, 4]).gaussian(x)
            pg.ParallelRNG(g, [seed, 5, 6, 7]).gaussian(y)
            with x.view(pg.CpuRead) as a, y.view(pg.CpuRead) as b:
                want_n, want_i = host.norm2(a), host.inner_product(a, b)
            assert np.isclose(pg.norm2(x), want_n, rtol=1e-12)
            assert np.isclose(pg.inner_product(x, y), want_i, rtol=1e-12)
            # from the second call on, the kept launch: no kernel lookup
            monkeypatch.setattr(rn, "kernels", lambda *a: pytest.fail("not the kept launch"))
        monkeypatch.undo()
        with x._kernel_view(pg.AcceleratorRead) as a, y._kernel_view(pg.AcceleratorRead) as b:
            kept = rn._KEPT[(id(a), 0)], rn._KEPT[(id(a), id(b))]
            assert kept[0].take(be, (a,))          # as another thread's call holds it
            try:
                assert np.isclose(rn.norm2(be, a), want_n, rtol=1e-12)
            finally:
                kept[0].lock.release()
            threads = be.threads()
            if be.blocks(a.nbytes) > 1:             # a machine with one core has no other split
                try:
                    be.set_threads(1)
                    assert not kept[1].take(be, (a, b))
                    assert np.isclose(rn.inner_product(be, a, b), want_i, rtol=1e-12)
                finally:
                    be.set_threads(threads)
            keys, buffer = [(id(a), 0), (id(a), id(b))], weakref.ref(a)
        del a, b, x, kept
        gc.collect()
        with y.view(pg.CpuRead):       # the manager frees the dead field's buffer at the next open
            pass
        gc.collect()
        # (a device cache may keep the host buffer for reuse: its entry stays as long)
        assert buffer() is not None or not any(k in rn._KEPT for k in keys)
        if pg.memory.get_manager().device.name == "unified":
            assert buffer() is None
