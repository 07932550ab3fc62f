"""Property-based tests: random expression trees over random site types and
precisions, evaluated by the openmp backend, by the numpy evaluator and by an
independent numpy interpreter of the same tree (einsum, np.roll, conj/swapaxes)
on to_numpy() arrays.

Every distinct tree shape compiles a numba kernel, so the example counts are
modest and the runs derandomized (reproducible in CI).
"""
import numpy as np
import pytest
from conftest import COMPILED, GAMMA, TOL, grid, pool_field
from hypothesis import HealthCheck, Phase, given, settings, strategies as st

import pygrid as pg

# no shrinking: every shrink step compiles new kernels (minutes); the failing tree is printed as drawn
SETTINGS = dict(deadline=None, derandomize=True, suppress_health_check=list(HealthCheck),
                print_blob=True, phases=[Phase.explicit, Phase.reuse, Phase.generate])

# site types by name: (constructor, levels (lorentz, spin, colour) as (kind, n))
S, V, M = "s", "v", "m"
TYPES = {
    "Complex": (lambda: pg.Complex, ((S, 1), (S, 1), (S, 1))),
    "CV": (lambda: pg.ColourVector(), ((S, 1), (S, 1), (V, 3))),
    "CM": (lambda: pg.ColourMatrix(), ((S, 1), (S, 1), (M, 3))),
    "SCV": (lambda: pg.SpinColourVector(), ((S, 1), (V, 4), (V, 3))),
    "SCM": (lambda: pg.SpinColourMatrix(), ((S, 1), (M, 4), (M, 3))),
    "LCM": (lambda: pg.LorentzColourMatrix(), ((V, 4), (S, 1), (M, 3))),
    "CV2": (lambda: pg.ColourVector(2), ((S, 1), (S, 1), (V, 2))),
    "CM2": (lambda: pg.ColourMatrix(2), ((S, 1), (S, 1), (M, 2))),
}
# products A * B -> C allowed by the level algebra, keyed by the result
PRODUCTS = {
    "CV": [("CM", "CV")],
    "CM": [("CM", "CM")],
    "SCV": [("SCM", "SCV"), ("CM", "SCV")],
    "SCM": [("SCM", "SCM"), ("CM", "SCM"), ("SCM", "CM")],
    "LCM": [("LCM", "CM"), ("CM", "LCM")],
    "CV2": [("CM2", "CV2")],
    "CM2": [("CM2", "CM2")],
    "Complex": [("Complex", "Complex")],
}
TRACEABLE = ["CM", "SCM", "CM2"]  # trace(T) is a Complex
GAMMAS = {"X": pg.Gamma.X, "Y": pg.Gamma.Y, "Z": pg.Gamma.Z, "T": pg.Gamma.T, "Five": pg.Gamma.Five,
          "XFive": pg.Gamma.X * pg.Gamma.Five, "1-T": 1 - pg.Gamma.T, "ZY": pg.Gamma.Z * pg.Gamma.Y}
GAMMA_NP = dict(GAMMA, XFive=GAMMA["X"] @ GAMMA["Five"], **{"1-T": np.eye(4) - GAMMA["T"]},
                ZY=GAMMA["Z"] @ GAMMA["Y"])
NUMBERS = st.sampled_from([2.0, -0.5, 1.25, 1j, 0.5 - 0.75j, -2j, 3])


def has_vector(t):
    return any(k == V for k, _ in TYPES[t][1])


def trees(t, depth):
    """A strategy of trees (nested tuples) whose value has site type t."""
    leaf = st.tuples(st.just("leaf"), st.just(t), st.integers(0, 1))
    if depth == 0:
        return leaf
    sub = lambda u=t: trees(u, depth - 1)  # noqa: E731
    opts = [
        leaf,
        st.tuples(st.sampled_from(["+", "-"]), sub(), sub()),
        st.tuples(st.just("num*"), NUMBERS, sub()),
        st.tuples(st.just("conj"), sub()),
        st.tuples(st.just("adj"), sub()),
        st.tuples(st.just("transpose"), sub()),
        st.tuples(st.just("cshift"), sub(), st.integers(0, 3), st.integers(-3, 3)),
        st.tuples(st.just("*"), st.sampled_from(PRODUCTS[t])).flatmap(
            lambda p: st.tuples(st.just("*"), trees(p[1][0], depth - 1), trees(p[1][1], depth - 1))),
        st.tuples(st.just("where"), st.integers(0, 3), st.integers(1, 3), sub(), sub()),
        st.tuples(st.just("cplx*"), trees("Complex", 0), sub()),
    ]
    if not has_vector(t):
        opts.append(st.tuples(st.just("+num"), NUMBERS, sub()))
    if t == "Complex":
        opts.append(
            st.sampled_from(TRACEABLE).flatmap(lambda u: st.tuples(st.just("trace"), trees(u, depth - 1)))
        )
    if TYPES[t][1][1][0] != S:  # a spin level: gamma matrices
        opts.append(st.tuples(st.just("gamma*"), st.sampled_from(sorted(GAMMAS)), sub()))
    if TYPES[t][1][1][0] == M:
        opts.append(st.tuples(st.just("*gamma"), sub(), st.sampled_from(sorted(GAMMAS))))
    return st.one_of(*opts)


class Env:
    def __init__(self, g, precision):
        self.g, self.precision = g, precision

    def coordinate(self, mu):
        c = pg.coordinate(self.g, mu)
        return c if self.precision == "double" else pg.convert(c, "single")

    def field(self, t, i):
        return pool_field(self.g, TYPES[t][0](), self.precision, i)


def build(node, env):
    """The pygrid expression of a tree."""
    k = node[0]
    if k == "leaf":
        return env.field(node[1], node[2])
    if k in "+-":
        a, b = build(node[1], env), build(node[2], env)
        return a + b if k == "+" else a - b
    if k == "num*":
        return node[1] * build(node[2], env)
    if k == "+num":
        return build(node[2], env) + node[1]
    if k == "conj":
        return pg.conjugate(build(node[1], env))
    if k == "adj":
        return pg.adj(build(node[1], env))
    if k == "transpose":
        return pg.transpose(build(node[1], env))
    if k == "cshift":
        return pg.cshift(build(node[1], env), node[2], node[3])
    if k == "*":
        return build(node[1], env) * build(node[2], env)
    if k == "cplx*":
        return build(node[1], env) * build(node[2], env)
    if k == "trace":
        return pg.trace(build(node[1], env))
    if k == "gamma*":
        return GAMMAS[node[1]] * build(node[2], env)
    if k == "*gamma":
        return build(node[1], env) * GAMMAS[node[2]]
    if k == "where":
        # pg.coordinate always makes a double-precision Real field: convert it for single-precision trees
        return pg.where(env.coordinate(node[1]) < node[2], build(node[3], env), build(node[4], env))
    raise AssertionError(k)


def type_of(node):
    k = node[0]
    if k == "leaf":
        return node[1]
    if k == "trace":
        return "Complex"
    if k == "*":
        a, b = type_of(node[1]), type_of(node[2])
        return next(c for c, ps in PRODUCTS.items() if (a, b) in ps)
    if k == "cplx*":
        return type_of(node[2])
    if k == "where":
        return type_of(node[3])
    if k in ("num*", "+num", "gamma*"):
        return type_of(node[2])
    return type_of(node[1])


def _site_axes(t):
    """Letters for the site axes of type t, per level: ([lorentz], [spin], [colour])."""
    out, pool = [], iter("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    for kind, _ in TYPES[t][1]:
        out.append([next(pool) for _ in range({S: 0, V: 1, M: 2}[kind])])
    return out


def np_eval(node, env, arrays):
    """Direct numpy interpretation of a tree on to_numpy() arrays [x, y, z, t, *site]."""
    k = node[0]
    if k == "leaf":
        return arrays[(node[1], node[2])]
    if k in "+-":
        a, b = np_eval(node[1], env, arrays), np_eval(node[2], env, arrays)
        return a + b if k == "+" else a - b
    if k == "num*":
        return node[1] * np_eval(node[2], env, arrays)
    if k == "+num":
        t = type_of(node[2])
        unit = np.ones(())
        for kind, n in TYPES[t][1]:
            if kind == M:
                unit = np.multiply.outer(unit, np.eye(n))
        # reorder the outer product's axes (l l' s s' c c') - already in level order
        return np_eval(node[2], env, arrays) + node[1] * unit
    if k in ("conj", "adj", "transpose"):
        a = np_eval(node[1], env, arrays)
        if k in ("conj", "adj"):
            a = np.conj(a)
        if k in ("adj", "transpose"):
            pos = 4
            for kind, _ in TYPES[type_of(node[1])][1]:
                if kind == M:
                    a = np.swapaxes(a, pos, pos + 1)
                pos += {S: 0, V: 1, M: 2}[kind]
        return a
    if k == "cshift":
        return np.roll(np_eval(node[1], env, arrays), -node[3], axis=node[2])
    if k == "*":
        ta, tb = type_of(node[1]), type_of(node[2])
        A, B = np_eval(node[1], env, arrays), np_eval(node[2], env, arrays)
        la, lb = _site_axes(ta), [[c.upper() for c in lv] for lv in _site_axes(tb)]
        sa, sb, so = "", "", ""
        for (ka, _), (kb, _), xa, xb in zip(TYPES[ta][1], TYPES[tb][1], la, lb):
            if ka == S:
                sb += "".join(xb)
                so += "".join(xb)
            elif kb == S:
                sa += "".join(xa)
                so += "".join(xa)
            elif ka == M and kb == M:  # a_ik b_kj
                sa += xa[0] + xa[1]
                sb += xa[1] + xb[1]
                so += xa[0] + xb[1]
            else:  # matrix * vector: a_ik b_k
                sa += xa[0] + xa[1]
                sb += xa[1]
                so += xa[0]
        return np.einsum(f"...{sa},...{sb}->...{so}", A, B)
    if k == "cplx*":
        c = np_eval(node[1], env, arrays)
        a = np_eval(node[2], env, arrays)
        return c.reshape(c.shape + (1,) * (a.ndim - 4)) * a
    if k == "trace":
        a = np_eval(node[1], env, arrays)
        while a.ndim > 4:
            a = np.trace(a, axis1=4, axis2=5)
        return a
    if k in ("gamma*", "*gamma"):
        if k == "gamma*":
            G, a, t = GAMMA_NP[node[1]], np_eval(node[2], env, arrays), type_of(node[2])
        else:
            G, a, t = GAMMA_NP[node[2]], np_eval(node[1], env, arrays), type_of(node[1])
        spin = 4 + {S: 0, V: 1, M: 2}[TYPES[t][1][0][0]]
        if k == "gamma*":
            return np.moveaxis(np.tensordot(G, a, axes=([1], [spin])), 0, spin)
        return np.moveaxis(np.tensordot(a, G, axes=([spin + 1], [0])), -1, spin + 1)
    if k == "where":
        c = np.indices(env.g.lshape)[node[1]] < node[2]
        a, b = np_eval(node[3], env, arrays), np_eval(node[4], env, arrays)
        return np.where(c.reshape(c.shape + (1,) * (a.ndim - 4)), a, b)
    raise AssertionError(k)


def leaves(node):
    if node[0] == "leaf":
        yield (node[1], node[2])
        return
    for c in node[1:]:
        if isinstance(c, tuple) and c and isinstance(c[0], str):
            yield from leaves(c)


def abs_scale(node, env, arrays):
    """A bound on the magnitudes met while evaluating (for the rounding tolerance)."""
    absarr = {k: np.abs(v) for k, v in arrays.items()}
    return 1.0 + float(np.max(np.abs(np_eval(_abs_tree(node), env, absarr))))


def _abs_tree(node):
    """The same tree with every sign/phase made positive (adj/conj/trace/gamma keep magnitudes bounded)."""
    k = node[0]
    if k == "leaf":
        return node
    if k in "+-":
        return ("+", _abs_tree(node[1]), _abs_tree(node[2]))
    if k in ("num*", "+num"):
        return (k, abs(node[1]), _abs_tree(node[2]))
    if k in ("conj", "adj", "transpose", "trace"):
        return (k, _abs_tree(node[1]))
    if k == "cshift":
        return (k, _abs_tree(node[1]), node[2], node[3])
    if k in ("*", "cplx*"):
        return (k, _abs_tree(node[1]), _abs_tree(node[2]))
    if k == "gamma*":
        return ("num*", 2.0, _abs_tree(node[2]))
    if k == "*gamma":
        return ("num*", 2.0, _abs_tree(node[1]))
    if k == "where":
        return ("+", _abs_tree(node[3]), _abs_tree(node[4]))
    raise AssertionError(k)


GRIDS = [((4, 4, 4, 4), None), ((4, 4, 4, 8), (1, 1, 1, 4)), ((4, 4, 4, 8), (2, 2, 1, 1))]


def check_tree(node, gi, precision):
    dims, simd = GRIDS[gi]
    env = Env(grid(dims, simd), precision)
    expr = build(node, env)
    arrays = {k: env.field(*k).to_numpy() for k in set(leaves(node))}
    want = np_eval(node, env, arrays)
    pg.set_backend("numpy")
    try:
        ref = pg.eval(expr).to_numpy()
    finally:
        pg.set_backend(COMPILED)
    got = pg.eval(expr).to_numpy()
    scale = abs_scale(node, env, arrays)
    tol = TOL[precision] * scale
    assert got.shape == want.shape == ref.shape
    assert np.max(np.abs(got - ref)) <= tol, (f"{COMPILED} vs numpy backend", node)
    assert np.max(np.abs(ref - want)) <= tol, ("numpy backend vs numpy formula", node)
    return got


@settings(max_examples=25, **SETTINGS)
@given(data=st.data())
def test_random_expression_trees(data):
    t = data.draw(st.sampled_from(sorted(TYPES)), label="site type")
    node = data.draw(trees(t, 2), label="tree")
    gi = data.draw(st.integers(0, len(GRIDS) - 1), label="grid")
    precision = data.draw(st.sampled_from(["double", "single"]), label="precision")
    check_tree(node, gi, precision)


@settings(max_examples=8, **SETTINGS)
@given(mu=st.integers(0, 3), disp=st.integers(-3, 3), gi=st.integers(0, 2),
       precision=st.sampled_from(["double", "single"]), t=st.sampled_from(["CM", "SCV", "CV2"]))
def test_shifted_product_against_einsum(mu, disp, gi, precision, t):
    """U(x) * X(x + disp mu) + 0.5j X: one kernel shape per type and precision, every shift."""
    a = "CM2" if t == "CV2" else "CM"
    node = ("+", ("*", ("leaf", a, 0), ("cshift", ("leaf", t, 0), mu, disp)), ("num*", 0.5j, ("leaf", t, 1)))
    check_tree(node, gi, precision)


# a few fixed trees that must always be exercised, whatever hypothesis draws
FIXED = [
    ("SCV", ("gamma*", "Five", ("*", ("leaf", "CM", 0), ("cshift", ("leaf", "SCV", 1), 3, -1)))),
    ("Complex", ("trace", ("*", ("adj", ("leaf", "SCM", 0)), ("*gamma", ("leaf", "SCM", 1), "XFive")))),
    (
        "LCM",
        (
            "-",
            ("*", ("leaf", "LCM", 0), ("adj", ("leaf", "CM", 1))),
            ("+", ("leaf", "LCM", 1), ("conj", ("leaf", "LCM", 0))),
        ),
    ),
    (
        "CM2",
        (
            "+num",
            0.5 - 1j,
            ("where", 2, 2, ("transpose", ("leaf", "CM2", 0)), ("cshift", ("leaf", "CM2", 1), 1, 2)),
        ),
    ),
]


@pytest.mark.parametrize("precision", ["double", "single"])
@pytest.mark.parametrize("i", range(len(FIXED)))
def test_fixed_trees(i, precision):
    t, node = FIXED[i]
    assert type_of(node) == t
    check_tree(node, i % len(GRIDS), precision)


def _renumber(node, k):
    """The same tree shape with other numbers (coefficients, where thresholds)."""
    if not isinstance(node, tuple):
        return node
    if node[0] in ("num*", "+num"):
        return (node[0], node[1] * (k + 1.5), _renumber(node[2], k))
    if node[0] == "where":
        return ("where", node[1], node[2] + k, _renumber(node[3], k), _renumber(node[4], k))
    return tuple(_renumber(c, k) for c in node)


@settings(max_examples=60, **SETTINGS)
@given(data=st.data())
def test_cached_lowering_equals_lowering(data):
    """An expression whose shape was lowered before takes its IR from the cache: the same IR,
    fields and coefficients as lowering it afresh, whatever the numbers and fields in it."""
    from pygrid.expr.lower import lower, lower_cached
    from pygrid.expr.nodes import as_expr

    t = data.draw(st.sampled_from(sorted(TYPES)), label="site type")
    node = data.draw(trees(t, 2), label="tree")
    env = Env(grid(*GRIDS[0]), "double")
    ncomp = TYPES[t][0]().ncomp
    first = lower_cached(as_expr(build(node, env)), ncomp)         # the shape is now cached
    other = _renumber(node, data.draw(st.integers(1, 3), label="renumber"))
    e = as_expr(build(other, env))
    got, want = lower_cached(e, ncomp), lower(e, ncomp)
    assert got.ir is first.ir                                       # taken from the cache
    assert got.ir.key() == want.ir.key()
    assert [id(f) for f in got.fields] == [id(f) for f in want.fields]
    assert got.shifts == want.shifts
    np.testing.assert_array_equal(got.coefs, want.coefs)
