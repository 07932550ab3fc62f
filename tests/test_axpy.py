"""pg.axpy, pg.axpy_norm2 and pg.axpy_xpay (the solvers' fused vector updates) against numpy, on every
backend."""
import numpy as np
import pytest
from conftest import COMPILED, TOL, backend, grid, random_field
from hypothesis import given, settings, strategies as st

import pygrid as pg
from pygrid.errors import ConformabilityError, SiteTypeError

TYPES = [pg.Complex, pg.Real, pg.ColourVector(), pg.SpinColourVector()]

#: which of z, x, y are one field: z fresh; z is x; z is y; x is y; all three one field
ALIASES = ["fresh", "z=x", "z=y", "x=y", "all"]


def fields(g, t, precision, alias):
    x, y = random_field(g, t, precision), random_field(g, t, precision)
    if alias == "x=y":
        y = x
    if alias == "all":
        y = x
    z = {"z=x": x, "z=y": y, "all": x}.get(alias)
    if z is None:
        z = pg.Lattice(g, t, precision)
    return z, x, y


def run(fn, alias, a, t, precision):
    g = grid((4, 4, 4, 8), (1, 1, 1, 4), precision=precision)
    z, x, y = fields(g, t, precision, alias)
    want = a * x.to_numpy().astype(np.complex128) + y.to_numpy().astype(np.complex128)
    got = fn(z, a, x, y)
    return z, want, got


@pytest.mark.parametrize("name", [COMPILED, "numpy"])
@pytest.mark.parametrize("precision", ["double", "single"])
@pytest.mark.parametrize("alias", ALIASES)
def test_axpy_and_axpy_norm2_match_numpy(name, precision, alias):
    with backend(name):
        for a in (0.37, -1.5 + 0.25j, 2):
            z, want, got = run(pg.axpy, alias, a, pg.SpinColourVector(), precision)
            assert got is z
            np.testing.assert_allclose(z.to_numpy(), want, rtol=0, atol=TOL[precision] * np.abs(want).max())
            z, want, n = run(pg.axpy_norm2, alias, a, pg.SpinColourVector(), precision)
            np.testing.assert_allclose(z.to_numpy(), want, rtol=0, atol=TOL[precision] * np.abs(want).max())
            # the norm of z as written, accumulated in double (in single each |z|^2 formed in single)
            zz = z.to_numpy().astype(np.complex128)
            assert isinstance(n, float)
            rel = 1e-12 if precision == "double" else 2.0**-22
            assert abs(n - np.vdot(zz, zz).real) <= rel * np.vdot(zz, zz).real


@pytest.mark.skipif(COMPILED != "openmp", reason="the openmp backend's kernel (reductions_numba)")
@pytest.mark.parametrize("precision", ["double", "single"])
@pytest.mark.parametrize("alias", ALIASES)
def test_axpy_into_a_field_apart_streams_past_the_caches(precision, alias, monkeypatch):
    """Over STREAM_BYTES (lowered here to take a small lattice) axpy into a fresh z writes it with
    non-temporal stores; aliased calls keep cached stores.  Either way z is a x + y."""
    from pygrid.accelerator import host, reductions_numba as rn

    monkeypatch.setattr(host, "STREAM_BYTES", 0)
    taken = []
    monkeypatch.setattr(rn, "streams", lambda *a, f=host.streams: taken.append(f(*a)) or taken[-1])
    with backend(COMPILED):
        for a in (0.37, -1.5 + 0.25j):
            z, want, got = run(pg.axpy, alias, a, pg.SpinColourVector(), precision)
            np.testing.assert_allclose(z.to_numpy(), want, rtol=0, atol=TOL[precision] * np.abs(want).max())
    assert taken and all(t == (alias in ("fresh", "x=y")) for t in taken), taken


def test_axpy_streams_only_into_a_large_aligned_field_apart(monkeypatch):
    from pygrid.accelerator import host

    g = grid((4, 4, 4, 4))
    psi = random_field(g, pg.SpinColourVector())
    out = pg.Lattice(g, pg.SpinColourVector())
    with out.view(pg.CpuWrite) as o, psi.view(pg.CpuRead) as p:
        assert not host.streams(o, [p], g.nsimd)      # 2 x 96 KiB: in the caches
        monkeypatch.setattr(host, "STREAM_BYTES", 0)
        assert host.streams(o, [p], g.nsimd)
        assert not host.streams(o, [o], g.nsimd)
        raw = np.empty(o.size + 8, o.dtype)     # numpy aligns to 16 bytes: one real past is off a vector
        assert raw.ctypes.data % 16 == 0
        assert not host.streams(raw[1:o.size + 1].reshape(o.shape), [p], g.nsimd)


@settings(max_examples=25, deadline=None)
@given(t=st.sampled_from(TYPES), alias=st.sampled_from(ALIASES), re=st.floats(-3, 3), im=st.floats(-3, 3),
       single=st.booleans(), rb=st.booleans(), norm=st.booleans())
def test_fused_updates_agree_with_the_expression(t, alias, re, im, single, rb, norm):
    """Any site type, checkerboard, precision and aliasing: the fused kernel writes what
    ``z @= a * x + y`` writes (a real coefficient on Real fields)."""
    precision = "single" if single else "double"
    a = complex(re, 0.0 if t.is_real else im)
    g = grid((4, 4, 4, 8), (1, 1, 1, 4), precision=precision)
    if rb:
        g = pg.GridRedBlackCartesian(g)
    z, x, y = fields(g, t, precision, alias)
    if rb:
        for f in {id(f): f for f in (z, x, y)}.values():
            f.checkerboard = 1
    expected = pg.Lattice(g, t, precision, checkerboard=z.checkerboard)
    expected @= a * x + y
    n = pg.axpy_norm2(z, a, x, y) if norm else pg.axpy(z, a, x, y)
    scale = max(1.0, float(np.abs(expected.to_numpy()).max()))
    np.testing.assert_allclose(z.to_numpy(), expected.to_numpy(), rtol=0, atol=TOL[precision] * scale)
    if norm:
        assert np.isclose(n, pg.norm2(expected), rtol=1e-5 if single else 1e-12)


def test_fused_updates_take_the_expression_path_for_what_they_do_not_fuse():
    g = grid()
    x, y = random_field(g, pg.ColourVector()), random_field(g, pg.ColourVector())
    z = pg.Lattice(g, pg.ColourVector())
    X, Y = x.to_numpy(), y.to_numpy()
    # an expression operand, a field coefficient
    pg.axpy(z, 0.5, x * 2.0, y)
    np.testing.assert_allclose(z.to_numpy(), X + Y, atol=1e-13)
    c = random_field(g, pg.Complex)
    n = pg.axpy_norm2(z, c, x, y)
    want = c.to_numpy()[..., None] * X + Y
    np.testing.assert_allclose(z.to_numpy(), want, atol=1e-13)
    assert np.isclose(n, np.vdot(want, want).real, rtol=1e-12)
    # errors come from the expression's checks, and leave z as it was
    before = z.to_numpy()
    other = random_field(grid((4, 4, 4, 8)), pg.ColourVector())
    with pytest.raises(ConformabilityError):
        pg.axpy(z, 1.0, x, other)
    with pytest.raises(SiteTypeError):
        pg.axpy(z, 1.0, x, random_field(g, pg.SpinColourVector()))
    r = random_field(g, pg.Real)
    with pytest.raises(SiteTypeError):
        pg.axpy(r, 1j, r, r)
    with pytest.raises(SiteTypeError, match="writes into a field"):
        pg.axpy(x * 1.0, 1.0, x, y)
    np.testing.assert_array_equal(z.to_numpy(), before)


def test_openmp_fused_updates_keep_their_launch(monkeypatch):
    """From the second call on the same fields the kept launch runs, with the call's coefficient."""
    from pygrid.accelerator import reductions_numba as rn

    with backend("openmp"):
        g = grid((4, 4, 8, 8))  # fields of 196 KB: a launch of two blocks, three fields under 2 MB
        x, y = random_field(g, pg.SpinColourVector()), random_field(g, pg.SpinColourVector())
        X, Y = x.to_numpy(), y.to_numpy()
        z = pg.Lattice(g, pg.SpinColourVector())
        pg.axpy(z, 1.0, x, y)
        pg.axpy_norm2(y, 1.0, x, y)
        Y = X + Y
        monkeypatch.setattr(rn, "kernels", lambda *a: pytest.fail("not the kept launch"))
        for a in (0.5, -2.0 + 1j):
            pg.axpy(z, a, x, y)
            np.testing.assert_allclose(z.to_numpy(), a * X + Y, atol=1e-12)
            n = pg.axpy_norm2(y, a, x, y)
            Y = a * X + Y
            np.testing.assert_allclose(y.to_numpy(), Y, atol=1e-12)
            assert np.isclose(n, np.vdot(Y, Y).real, rtol=1e-12)


@pytest.mark.parametrize("name", [COMPILED, "numpy"])
@pytest.mark.parametrize("precision", ["double", "single"])
def test_axpy_xpay_matches_numpy(name, precision):
    """x = a p + x, then p = r + b p with the p before, for real and complex coefficients; the
    second call on the same fields (the kept launch on openmp) with other coefficients."""
    with backend(name):
        g = grid((4, 4, 8, 8), (1, 1, 1, 4), precision=precision)
        x, p, r = (random_field(g, pg.SpinColourVector(), precision) for _ in range(3))
        X, P, R = (f.to_numpy().astype(np.complex128) for f in (x, p, r))
        for a, b in ((0.37, -1.25), (-1.5 + 0.25j, 0.5j), (2, 3)):
            pg.axpy_xpay(x, a, p, r, b)
            X, P = a * P + X, R + b * P
            for f, want in ((x, X), (p, P)):
                tol = TOL[precision] * np.abs(want).max()
                np.testing.assert_allclose(f.to_numpy(), want, rtol=0, atol=tol)
        np.testing.assert_array_equal(r.to_numpy(), R.astype(r.to_numpy().dtype))


@settings(max_examples=20, deadline=None)
@given(t=st.sampled_from(TYPES), a=st.floats(-3, 3), b=st.floats(-3, 3), im=st.floats(-2, 2),
       single=st.booleans(), rb=st.booleans())
def test_axpy_xpay_agrees_with_the_two_expressions(t, a, b, im, single, rb):
    precision = "single" if single else "double"
    a = complex(a, 0.0 if t.is_real else im)
    g = grid((4, 4, 4, 8), (1, 1, 1, 4), precision=precision)
    if rb:
        g = pg.GridRedBlackCartesian(g)
    x, p, r = (random_field(g, t, precision) for _ in range(3))
    if rb:
        for f in (x, p, r):
            f.checkerboard = 0
    ex, ep = x.copy(), p.copy()
    ex @= a * p + x
    ep @= r + b * p
    pg.axpy_xpay(x, a, p, r, b)
    for f, e in ((x, ex), (p, ep)):
        scale = max(1.0, float(np.abs(e.to_numpy()).max()))
        np.testing.assert_allclose(f.to_numpy(), e.to_numpy(), rtol=0, atol=TOL[precision] * scale)


def test_axpy_xpay_refuses_shared_fields_and_other_types():
    g = grid()
    x, p, r = (random_field(g, pg.ColourVector()) for _ in range(3))
    before = [f.to_numpy() for f in (x, p, r)]
    for args in ((x, 1.0, x, r, 2.0), (x, 1.0, p, p, 2.0), (x, 1.0, p, x, 2.0)):
        with pytest.raises(ConformabilityError, match="three different fields"):
            pg.axpy_xpay(*args)
    with pytest.raises(SiteTypeError, match="must be a field"):
        pg.axpy_xpay(x, 1.0, p * 2.0, r, 1.0)
    with pytest.raises(ConformabilityError):
        pg.axpy_xpay(x, 1.0, p, random_field(grid((4, 4, 4, 8)), pg.ColourVector()), 1.0)
    for f, b in zip((x, p, r), before):
        np.testing.assert_array_equal(f.to_numpy(), b)


class _ReturnsNew:
    """An operator whose M and Mdag accept out= but return a new field (the Wilson operator's)."""

    def __init__(self, D):
        self.D = D

    def M(self, x, out=None):
        return self.D.M(x)

    def Mdag(self, x, out=None):
        return self.D.Mdag(x)


@pytest.mark.parametrize("kind", ["wilson", "schur", "returns a new field"])
def test_mdagm_apply_and_norm_is_the_inner_product(kind):
    """``(Mdag M p, |M p|^2)`` against ``A.M(p)`` and ``<p, A p>``, on the fields' current contents,
    the later calls through the kept intermediate and the operator's M and Mdag called directly."""
    from pygrid.algorithms import MdagMOperator

    g = grid()
    U = pg.qcd.random_gauge(g, pg.ParallelRNG(g, [1, 2, 3, 4]))
    D = pg.qcd.WilsonFermion(U, 0.1)
    if kind == "schur":
        op = pg.qcd.SchurDiagMooeeOperator(D, 1)
        p, out = op.new_fermion(), op.new_fermion()
        p @= pg.pick_checkerboard(1, random_field(g, pg.SpinColourVector()))
    else:
        op = D if kind == "wilson" else _ReturnsNew(D)
        p, out = random_field(g, pg.SpinColourVector()), pg.LatticeFermion(g)
    A = MdagMOperator(op)
    for k in range(3):  # the later calls reuse the kept intermediate
        p @= (1.5 + k) * p
        got, n = A.apply_and_norm(p, out=out)
        assert got is out
        want = A.M(p)
        np.testing.assert_allclose(out.to_numpy(), want.to_numpy(), atol=1e-12)
        assert np.isclose(n, pg.inner_product(p, want).real, rtol=1e-12)
