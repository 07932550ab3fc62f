"""The explicit SIMD vector operations for numba kernels, lane by lane against numpy."""
import platform

import numpy as np
import pytest
from numba import njit
from numba.core.errors import TypingError

from pygrid.accelerator.simd_numba import (
    prefetch,
    prefetch_l2,
    prefetch_l2_lines,
    prefetch_lines,
    store_fence,
    vcaxpy,
    vcaxpy2,
    vcmatvec,
    vdouble,
    vfma,
    vfms,
    vload,
    vloadt,
    vpermt,
    vpermute,
    vpin,
    vproj2,
    vrecon2,
    vscalet,
    vsplat,
    vstore,
    vstoret,
    vstoret_nt,
    vsum,
    vxor,
    vzero,
)

U = np.uint64


def _kernel(w):
    @njit(fastmath=True)
    def k(a, b, c, out, lanes):
        for v in range(a.size // w):
            i = U(v * w)
            prefetch(a, i)
            prefetch_l2(b, i)
            x, y, z = vload(a, i, w), vload(b, i, w), vload(c, i, w)
            vstore(out, U(0 * a.size) + i, x + y)
            vstore(out, U(1 * a.size) + i, x - y)
            vstore(out, U(2 * a.size) + i, x * y)
            vstore(out, U(3 * a.size) + i, -x + 0.5 * y + z * 2.0)
            vstore(out, U(4 * a.size) + i, vfma(x, y, z))
            vstore(out, U(5 * a.size) + i, vfms(x, y, z))
            vstore(out, U(6 * a.size) + i, vxor(x, 1) + vzero(x) + vsplat(a[0], w))
            vstore(out, U(7 * a.size) + i, vpermute(y, lanes, v * w))
    return k


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 prefetch instructions")
def test_prefetch_levels_in_the_machine_code():
    """prefetch fills every level (prefetcht0), prefetch_l2 stops at L2 (prefetcht1)."""
    k = _kernel(4)
    a = np.arange(8.0)
    k(a, a, a, np.zeros(64), np.zeros(8, np.int64))
    asm = k.inspect_asm(k.signatures[0])
    assert "prefetcht0" in asm and "prefetcht1" in asm


@pytest.mark.parametrize("w", [2, 4, 8, 16])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_operations_lane_by_lane(w, dtype):
    rng = np.random.default_rng(w)
    nv = 3
    a, b, c = (rng.normal(size=nv * w).astype(dtype) for _ in range(3))
    lanes = np.concatenate([rng.permutation(w) for _ in range(nv)]).astype(np.int64)
    out = np.zeros(8 * nv * w, dtype)
    _kernel(w)(a, b, c, out, lanes)
    got = out.reshape(8, nv, w)
    A, B, C = (x.reshape(nv, w) for x in (a, b, c))
    perm = lanes.reshape(nv, w)
    want = [A + B, A - B, A * B, -A + 0.5 * B + 2 * C, A * B + C, C - A * B,
            A[:, np.arange(w) ^ 1] + a[0], np.take_along_axis(B, perm, axis=1)]
    tol = 1e-12 if dtype == np.float64 else 1e-5
    for k, wv in enumerate(want):
        np.testing.assert_allclose(got[k], wv, rtol=tol, atol=tol, err_msg=f"operation {k}")


@pytest.mark.parametrize("w", [1, 2, 8, 16])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_widen_and_sum_the_lanes(w, dtype):
    @njit
    def k(a, out):
        x = vdouble(vload(a, U(0), w))
        vstore(out, U(0), x)
        return vsum(x), vsum(vload(a, U(0), w))

    a = (np.random.default_rng(w).normal(size=w) * 1e3).astype(dtype)
    out = np.zeros(w)
    total, total_own = k(a, out)
    np.testing.assert_array_equal(out, a.astype(np.float64))     # exact: every float32 is a float64
    assert abs(total - a.astype(np.float64).sum()) < 1e-9 * np.abs(a).sum()
    assert isinstance(total_own, float) and abs(total_own - total) < (1e-3 if dtype == np.float32 else 1e-9)


def test_misuse_is_a_typing_error():
    @njit
    def width_not_literal(a, w):
        return vload(a, U(0), w)

    @njit
    def mixed(a, b):
        return vload(a, U(0), 4) + vload(b, U(0), 4)

    @njit
    def xor_out_of_range(a):
        vstore(a, U(0), vxor(vload(a, U(0), 4), 4))

    with pytest.raises(TypingError, match="literal"):
        width_not_literal(np.zeros(8), 4)
    with pytest.raises(TypingError, match="SIMD"):
        mixed(np.zeros(8), np.zeros(8, np.float32))
    with pytest.raises(TypingError, match="out of range"):
        xor_out_of_range(np.zeros(8))



def _matvec_kernel(w, n, nvec, adj):
    k = 2 * n * nvec
    src = [
        "def f(m, x, out):",
        "    h = (" + ", ".join(f"vload(x, U({c * w}), {w})" for c in range(k)) + ",)",
        f"    r = vcmatvec(m, U({w}) - U({w}), h, {n}, {adj})",
    ] + [f"    vstore(out, U({c * w}), r[{c}])" for c in range(k)]
    ns = {"vload": vload, "vstore": vstore, "vcmatvec": vcmatvec, "U": U}
    exec("\n".join(src), ns)
    return njit(fastmath=True)(ns["f"])


@pytest.mark.parametrize("n,nvec", [(3, 1), (3, 2), (2, 3)])
@pytest.mark.parametrize("adj", [0, 1])
@pytest.mark.parametrize("dtype,w", [(np.float64, 8), (np.float32, 4)])
def test_complex_matrix_times_vectors_against_numpy(n, nvec, adj, dtype, w):
    """vcmatvec: lane by lane, M (or M^dag) times every vector of the tuple."""
    rng = np.random.default_rng(7 * n + nvec + adj)
    M = rng.normal(size=(w, n, n)) + 1j * rng.normal(size=(w, n, n))
    X = rng.normal(size=(w, nvec, n)) + 1j * rng.normal(size=(w, nvec, n))
    # the SIMD layout: element (i, j) of M is a real then an imaginary vector of the w lanes
    m = np.stack([M.real, M.imag], axis=-1).transpose(1, 2, 3, 0).reshape(-1).astype(dtype)
    x = np.stack([X.real, X.imag], axis=-1).transpose(1, 2, 3, 0).reshape(-1).astype(dtype)
    out = np.zeros_like(x)
    _matvec_kernel(w, n, nvec, adj)(m, x, out)
    A = M.conj().transpose(0, 2, 1) if adj else M
    want = np.einsum("lij,lvj->lvi", A, X)
    got = out.reshape(nvec, n, 2, w)
    got = (got[:, :, 0] + 1j * got[:, :, 1]).transpose(2, 0, 1)
    tol = 1e-12 if dtype == np.float64 else 2e-5
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_complex_matrix_times_vectors_misuse():
    @njit
    def odd_tuple(m):
        return vcmatvec(m, U(0), (vload(m, U(0), 4),), 3, 0)

    with pytest.raises(TypingError, match="vcmatvec needs a tuple"):
        odd_tuple(np.zeros(72))


@njit(fastmath=True)
def _tuple_ops(a, b, g, out, lanes, px):
    x = vloadt(a, U(0), 6, 8)
    y = vloadt(b, U(0), 6, 8)
    gv = vload(g, U(0), 8)
    vstoret(out, U(0 * 48), vcaxpy(gv, x, y, 0))
    vstoret(out, U(1 * 48), vcaxpy(gv, x, y, 1))
    vstoret(out, U(2 * 48), vcaxpy(gv, x, y, 2))
    vstoret(out, U(3 * 48), vcaxpy(gv, x, y, 3))
    vstoret(out, U(4 * 48), vcaxpy(None, x, y, 1))
    vstoret(out, U(5 * 48), vcaxpy(gv, None, y, 3))
    vstoret(out, U(6 * 48), vscalet(gv, x))
    vstoret(out, U(7 * 48), vpermt(x, px, lanes, 0))


@pytest.mark.parametrize("px", [1, 2, 4, 3, 0])
def test_tuple_operations_against_numpy(px):
    """vloadt/vstoret, vcaxpy with every phase and None, vscalet, vpermt (xor and table paths)."""
    rng = np.random.default_rng(px)
    a, b, g = rng.normal(size=48), rng.normal(size=48), rng.normal(size=8)
    lanes = rng.permutation(8).astype(np.int64)
    out = np.zeros(8 * 48)
    _tuple_ops(a, b, g, out, lanes, px)
    got = out.reshape(8, 3, 2, 8)
    z = lambda v: v.reshape(3, 2, 8)[:, 0] + 1j * v.reshape(3, 2, 8)[:, 1]  # noqa: E731
    X, Y = z(a), z(b)
    res = got[:, :, 0] + 1j * got[:, :, 1]
    for k, ph in enumerate((1, 1j, -1, -1j)):
        np.testing.assert_allclose(res[k], X + g * ph * Y, atol=1e-13)
    np.testing.assert_allclose(res[4], X + 1j * Y, atol=1e-13)
    np.testing.assert_allclose(res[5], -1j * g * Y, atol=1e-13)
    np.testing.assert_allclose(res[6], g * X, atol=1e-13)
    src = np.arange(8) ^ px if px in (1, 2, 4) else lanes
    np.testing.assert_allclose(got[7], a.reshape(3, 2, 8)[:, :, src], atol=0)


@njit(fastmath=True)
def _ordered_sums(x, f, b, g, out):
    # x loaded last: LLVM's reassociation, were it allowed, would add the earlier values first
    fs, bs = vloadt(f, U(0), 6, 8), vloadt(b, U(0), 6, 8)
    gv = vload(g, U(0), 8)
    xs = vloadt(x, U(0), 6, 8)
    vstoret(out, U(0), vcaxpy2(None, xs, fs, bs, 0, 0))
    vstoret(out, U(48), vcaxpy2(gv, xs, fs, bs, 1, 3))
    vstoret(out, U(96), vcaxpy2(gv, xs, fs, bs, 2, 0))


def test_vcaxpy2_adds_its_terms_in_the_order_written():
    """vcaxpy2(g, x, f, b, PF, PB) is (x + g i**PF f) + g i**PB b, rounded in that order even in a
    fastmath function (the bits of adding f then b a point at a time): for g = +-1 (the Dirac
    kernels' signs) numpy's sequential sums give the same bits, on random data and on data where
    x + (f + b) differs (x = 1, f = 1e16, b = -1e16)."""
    rng = np.random.default_rng(5)
    z = lambda v: v.reshape(3, 2, 8)[:, 0] + 1j * v.reshape(3, 2, 8)[:, 1]  # noqa: E731
    for x, f, b in ((rng.normal(size=48), rng.normal(size=48), rng.normal(size=48)),
                    (np.ones(48), np.full(48, 1e16), np.full(48, -1e16))):
        g = rng.choice([-1.0, 1.0], size=8)
        out = np.zeros(3 * 48)
        _ordered_sums(x, f, b, g, out)
        X, F, B = z(x), z(f), z(b)
        res = [z(out[k * 48:(k + 1) * 48]) for k in range(3)]
        np.testing.assert_array_equal(res[0], (X + F) + B)
        np.testing.assert_array_equal(res[1], (X + g * 1j * F) + g * -1j * B)
        np.testing.assert_array_equal(res[2], (X + g * -1 * F) + g * B)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 prefetch instructions")
@pytest.mark.parametrize("dtype, lines", [(np.float64, 3), (np.float32, 5)])
def test_prefetch_lines_prefetch_each_line_once(dtype, lines):
    """prefetch_lines(a, i, N) and prefetch_l2_lines: one prefetch per cache line (64 bytes) of
    a[i:], at the level of prefetch and prefetch_l2; a count that is not a literal is refused."""
    @njit
    def k(a, i):
        prefetch_lines(a, U(i), lines)
        prefetch_l2_lines(a, U(i) + U(1), lines)

    a = np.zeros(256, dtype)
    k(a, 8)
    asm = k.inspect_asm(k.signatures[0])
    assert asm.count("prefetcht0") == lines and asm.count("prefetcht1") == lines

    @njit
    def bad(a, n):
        prefetch_lines(a, U(0), n)

    with pytest.raises(TypingError, match="prefetch_lines count"):
        bad(a, 3)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_streaming_tuple_store(dtype):
    """vstoret_nt writes what vstoret writes, with non-temporal stores on x86 followed by the
    fence; an array of another dtype is refused."""
    from pygrid.memory.aligned import aligned_empty

    w = 8
    @njit
    def k(a, out):
        for i in range(a.size // (6 * w)):
            vstoret_nt(out, U(i * 6 * w), vloadt(a, U(i * 6 * w), 6, w))
        store_fence()

    a = np.random.default_rng(1).normal(size=6 * w * 5).astype(dtype)
    out = aligned_empty(a.shape, dtype)
    out[:] = 0
    k(a, out)
    np.testing.assert_array_equal(out, a)
    if platform.machine() in ("x86_64", "AMD64"):
        asm = k.inspect_asm(k.signatures[0])
        assert "vmovnt" in asm and "sfence" in asm

    @njit
    def bad(a, out):
        vstoret_nt(out, U(0), vloadt(a, U(0), 2, w))

    with pytest.raises(TypingError, match="vstoret_nt of"):
        bad(np.zeros(16), np.zeros(16, np.float32))


@njit(fastmath=True)
def _spinor_ops(psi, g, acc, add, out, one):
    gv = vload(g, U(0), 4)
    # every phase on each spin: (0, 18, 1), (6, 12, 3); then (12, 0, 0), (18, 6, 2)
    vstoret(out, U(0), vproj2(psi, U(0), gv, 0, 18, 1, 6, 12, 3, 4))
    vstoret(out, U(48), vproj2(psi, U(0), gv, 12, 0, 0, 18, 6, 2, 4))
    wf, wb = vloadt(psi, U(0), 12, 4), vloadt(psi, U(48), 12, 4)
    vrecon2(acc, U(0), wf, wb, gv, 0, 18, 3, 6, 12, 1, 1)
    vrecon2(add, U(0), wf, wb, gv, 12, 0, 2, 18, 6, 0, 0)
    vrecon2(one, U(0), wf, None, gv, 0, 18, 3, 6, 12, 1, 1)  # one point: wf alone


def test_spinor_projection_and_reconstruction_against_numpy():
    """vproj2 (two vcaxpy of loaded spins) and vrecon2 (two half spinors' sum stored, or added,
    into the upper spins and their difference times g i**PHASE into the lower ones; with wb None,
    one half spinor) against numpy, every phase."""
    W = 4
    rng = np.random.default_rng(3)
    psi, g = rng.normal(size=24 * W), rng.normal(size=W)
    acc, add0 = np.full(24 * W, np.nan), rng.normal(size=24 * W)
    add, out, one = add0.copy(), np.zeros(24 * W), np.full(24 * W, np.nan)
    _spinor_ops(psi, g, acc, add, out, one)

    def spin(v, k):  # spin k of a spinor in the SIMD layout: (colour, lane) complex
        c = v.reshape(12, 2, W)[3 * k:3 * k + 3]
        return c[:, 0] + 1j * c[:, 1]

    ph = (1, 1j, -1, -1j)
    want = [spin(psi, 0) + g * ph[1] * spin(psi, 3), spin(psi, 1) + g * ph[3] * spin(psi, 2),
            spin(psi, 2) + g * ph[0] * spin(psi, 0), spin(psi, 3) + g * ph[2] * spin(psi, 1)]
    for k in range(4):
        np.testing.assert_allclose(spin(out, k), want[k], atol=1e-13)
    # the two spins of wf + wb and of wf - wb (wb: psi's spins 2 and 3)
    h0, h1 = spin(psi, 0) + spin(psi, 2), spin(psi, 1) + spin(psi, 3)
    d0, d1 = spin(psi, 0) - spin(psi, 2), spin(psi, 1) - spin(psi, 3)
    np.testing.assert_allclose(spin(acc, 0), h0, atol=1e-13)
    np.testing.assert_allclose(spin(acc, 3), g * ph[3] * d0, atol=1e-13)
    np.testing.assert_allclose(spin(acc, 1), h1, atol=1e-13)
    np.testing.assert_allclose(spin(acc, 2), g * ph[1] * d1, atol=1e-13)
    np.testing.assert_allclose(spin(add, 2), spin(add0, 2) + h0, atol=1e-13)
    np.testing.assert_allclose(spin(add, 0), spin(add0, 0) + g * ph[2] * d0, atol=1e-13)
    np.testing.assert_allclose(spin(add, 3), spin(add0, 3) + h1, atol=1e-13)
    np.testing.assert_allclose(spin(add, 1), spin(add0, 1) + g * ph[0] * d1, atol=1e-13)
    f0, f1 = spin(psi, 0), spin(psi, 1)  # wf's two spins, rebuilt alone
    np.testing.assert_allclose(spin(one, 0), f0, atol=0)
    np.testing.assert_allclose(spin(one, 3), g * ph[3] * f0, atol=1e-13)
    np.testing.assert_allclose(spin(one, 1), f1, atol=0)
    np.testing.assert_allclose(spin(one, 2), g * ph[1] * f1, atol=1e-13)


def test_spinor_operations_misuse():
    @njit
    def short_tuple(a, g):
        w = vloadt(a, U(0), 6, 4)
        vrecon2(a, U(0), w, w, vload(g, U(0), 4), 0, 18, 3, 6, 12, 1, 1)

    with pytest.raises(TypingError, match="vrecon2 needs a tuple of a multiple of 12"):
        short_tuple(np.zeros(96), np.zeros(4))

    @njit
    def unlike_pair(a, g):
        vrecon2(a, U(0), vloadt(a, U(0), 12, 4), vloadt(a, U(0), 24, 4), vload(g, U(0), 4),
                0, 18, 3, 6, 12, 1, 1)

    with pytest.raises(TypingError, match="vrecon2 of"):
        unlike_pair(np.zeros(96), np.zeros(4))



@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="an x86 register constraint")
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_pinned_vectors_keep_their_values_and_order_memory(dtype):
    """vpin hands back its vectors unchanged, as an inline-assembly statement that clobbers memory
    (what keeps LLVM from moving loads over it); sums and memory around it are as written."""
    w = 16 // np.dtype(dtype).itemsize  # 128-bit vectors: a register on every x86-64 host

    @njit(fastmath=True)
    def k(a, out):
        t = vloadt(a, U(0), 4, w)
        vstore(out, U(0), t[0] + t[1])
        p = vpin(t)
        s = vload(out, U(0), w) + p[2] + p[3]
        vstoret(out, U(w), p)
        vstore(out, U(5 * w), s)

    a = np.random.default_rng(3).standard_normal(4 * w).astype(dtype)
    out = np.zeros(6 * w, dtype)
    k(a, out)
    np.testing.assert_array_equal(out[w:5 * w], a)
    np.testing.assert_allclose(out[5 * w:], a.reshape(4, w).sum(axis=0), rtol=1e-6)
    ir = k.inspect_llvm(k.signatures[0])
    assert 'asm sideeffect "", "=v,=v,=v,=v,0,1,2,3,~{memory}"' in ir
    with pytest.raises(TypingError, match="vpin"):
        njit(lambda a: vpin(a[0]))(a)
