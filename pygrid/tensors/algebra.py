"""Index tables for the site algebra, level by level, as Grid does it.

Every operation on site tensors is one of two sparse patterns over flattened
components, which the kernel generators turn into small loops:

* a contraction  out[o] += A[a] * B[b]          (table rows (o, a, b))
* a remap        out[o] += coef * A[a]          (table rows (o, a) and coefs)

Products, traces, transposes, peeks, gamma matrices and inner/outer products
are all built from these tables; the tables are structural (they depend on
the types only), so kernels are cached by them.
"""
from __future__ import annotations

import functools
import itertools

import numpy as np

from ..errors import SiteTypeError
from .sitetype import LEVELS, MATRIX, SCALAR, VECTOR, Level, SiteType


def _level_product(name, la: Level, lb: Level):
    """(result level, [(out idx, a idx, b idx)]) for one level of a product."""
    ka, kb = la.kind, lb.kind
    if ka != SCALAR and kb != SCALAR and la.n != lb.n:
        raise SiteTypeError(
            f"{name} level: cannot multiply {la.describe()} by {lb.describe()} (sizes differ)"
        )
    if ka == SCALAR and kb == SCALAR:
        return la, [((), (), ())]
    if ka == SCALAR:
        return lb, [(i, (), i) for i in np.ndindex(*lb.shape)]
    if kb == SCALAR:
        return la, [(i, i, ()) for i in np.ndindex(*la.shape)]
    n = la.n
    if ka == MATRIX and kb == MATRIX:
        return la, [((i, j), (i, k), (k, j)) for i in range(n) for j in range(n) for k in range(n)]
    if ka == MATRIX and kb == VECTOR:
        return lb, [((i,), (i, k), (k,)) for i in range(n) for k in range(n)]
    raise SiteTypeError(
        f"{name} level: {la.describe()} times {lb.describe()} is not defined; "
        "use local_inner_product or outer_product for two vectors"
    )


def _flatten(shape, idx):
    return int(np.ravel_multi_index(idx, shape)) if shape else 0


def _combine(ta_shape, tb_shape, out_shape, per_level):
    rows = []
    for combo in itertools.product(*per_level):
        o = sum((c[0] for c in combo), ())
        a = sum((c[1] for c in combo), ())
        b = sum((c[2] for c in combo), ())
        rows.append((_flatten(out_shape, o), _flatten(ta_shape, a), _flatten(tb_shape, b)))
    return np.array(rows, dtype=np.int32).reshape(-1, 3)


@functools.cache
def product(ta: SiteType, tb: SiteType):
    """Result type and contraction table of ta * tb."""
    levels, per_level = [], []
    for name, la, lb in zip(LEVELS, ta.levels, tb.levels):
        lv, rows = _level_product(name, la, lb)
        levels.append(lv)
        per_level.append(rows)
    out = SiteType(*levels, is_real=ta.is_real and tb.is_real)
    return out, _combine(ta.shape, tb.shape, out.shape, per_level)


@functools.cache
def inner(ta: SiteType, tb: SiteType):
    """Table of local_inner_product: sum_i conj(a[i]) b[i] into a Complex."""
    if ta.levels != tb.levels:
        raise SiteTypeError(f"local_inner_product needs two fields of the same site type, got {ta} and {tb}")
    n = ta.ncomp
    return SiteType(is_real=ta.is_real and tb.is_real), np.array(
        [(0, i, i) for i in range(n)], dtype=np.int32
    )


@functools.cache
def outer(ta: SiteType, tb: SiteType):
    """Result type and table of outer_product: a[i] conj(b[j]) per vector level."""
    levels, per_level = [], []
    for name, la, lb in zip(LEVELS, ta.levels, tb.levels):
        if la.kind == SCALAR and lb.kind == SCALAR:
            levels.append(la)
            per_level.append([((), (), ())])
        elif la.kind == VECTOR and lb.kind == VECTOR and la.n == lb.n:
            levels.append(Level(MATRIX, la.n))
            per_level.append([((i, j), (i,), (j,)) for i in range(la.n) for j in range(la.n)])
        else:
            raise SiteTypeError(
                f"outer_product: {name} level {la.describe()} with {lb.describe()}; "
                "need two vectors of one size"
            )
    out = SiteType(*levels, is_real=ta.is_real and tb.is_real)
    return out, _combine(ta.shape, tb.shape, out.shape, per_level)


# ---- remaps: out[o] = sum coef * A[a] --------------------------------------

class Remap:
    """A sparse linear map between the components of two site types."""

    def __init__(self, out_type, rows, coefs):
        self.out_type = out_type
        self.rows = np.array(rows, dtype=np.int32).reshape(-1, 2)
        self.coefs = np.array(coefs, dtype=np.complex128).reshape(-1)

    def key(self):
        return (self.out_type, self.rows.tobytes(), self.coefs.tobytes())

    def apply(self, a):
        """Apply to an array (..., ncomp_in) -> (..., ncomp_out); numpy reference path."""
        out = np.zeros(a.shape[:-1] + (self.out_type.ncomp,), dtype=np.result_type(a, np.complex64))
        for (o, i), c in zip(self.rows, self.coefs):
            out[..., o] += c * a[..., i]
        return out


def _remap_levels(t: SiteType, out_levels, per_level, coef_fn=None):
    out = SiteType(*out_levels, is_real=t.is_real)
    rows, coefs = [], []
    for combo in itertools.product(*per_level):
        o = sum((c[0] for c in combo), ())
        a = sum((c[1] for c in combo), ())
        c = 1.0
        for part in combo:
            c *= part[2] if len(part) > 2 else 1.0
        rows.append((_flatten(out.shape, o), _flatten(t.shape, a)))
        coefs.append(c)
    return Remap(out, rows, coefs)


def _identity_level(lv):
    return [(i, i) for i in np.ndindex(*lv.shape)]


@functools.cache
def transpose(t: SiteType, levels=LEVELS):
    per = []
    for name, lv in zip(LEVELS, t.levels):
        if lv.kind == MATRIX and name in levels:
            per.append([((i, j), (j, i)) for i in range(lv.n) for j in range(lv.n)])
        else:
            per.append(_identity_level(lv))
    return _remap_levels(t, t.levels, per)


@functools.cache
def identity_map(t: SiteType):
    return _remap_levels(t, t.levels, [_identity_level(lv) for lv in t.levels])


@functools.cache
def trace(t: SiteType, levels=LEVELS):
    traced = [lv.kind for name, lv in zip(LEVELS, t.levels) if name in levels]
    if MATRIX not in traced and VECTOR in traced:
        raise SiteTypeError(f"trace of a {t}: it has no matrix level to trace (a vector is not traced; "
                            f"for a sum of components use pg.sum or an inner product)")
    out_levels, per = [], []
    for name, lv in zip(LEVELS, t.levels):
        if name in levels and lv.kind == MATRIX:
            out_levels.append(Level())
            per.append([((), (i, i)) for i in range(lv.n)])
        elif name in levels and lv.kind == VECTOR and len(levels) == 1:
            raise SiteTypeError(f"trace over the {name} level of {t}: that level is a vector, not a matrix")
        else:
            out_levels.append(lv)
            per.append(_identity_level(lv))
    return _remap_levels(t, out_levels, per)


@functools.cache
def peek(t: SiteType, level: str, idx: tuple):
    lv = t.level(level)
    if lv.kind == SCALAR:
        raise SiteTypeError(f"peek on the {level} level of {t}: that level is a scalar")
    if len(idx) != len(lv.shape) or any(not 0 <= i < n for i, n in zip(idx, lv.shape)):
        raise SiteTypeError(f"peek index {idx} out of range for the {level} level {lv.describe()}")
    out_levels, per = [], []
    for name, l in zip(LEVELS, t.levels):
        if name == level:
            out_levels.append(Level())
            per.append([((), tuple(idx))])
        else:
            out_levels.append(l)
            per.append(_identity_level(l))
    return _remap_levels(t, out_levels, per)


def const_product(tc: SiteType, values: np.ndarray, t: SiteType, const_on_left: bool):
    """Fold a constant site tensor into a remap of the field it multiplies."""
    if const_on_left:
        out, table = product(tc, t)
        rows = [(o, b, values[a]) for o, a, b in table]
    else:
        out, table = product(t, tc)
        rows = [(o, a, values[b]) for o, a, b in table]
    rows = [r for r in rows if r[2] != 0]
    out = SiteType(*out.levels, is_real=t.is_real and bool(np.all(np.imag(values) == 0)))
    return Remap(out, [(o, a) for o, a, _ in rows], [c for _, _, c in rows])


def identity_values(t: SiteType):
    """Flattened components of the unit tensor of a type whose levels are matrices or scalars."""
    for name, lv in zip(LEVELS, t.levels):
        if lv.kind == VECTOR:
            raise SiteTypeError(
                f"cannot add a number to {t}: its {name} level is a vector "
                "(a number means a multiple of the unit matrix)"
            )
    vals = np.ones((1,), dtype=np.complex128)
    for lv in t.levels:
        if lv.kind == MATRIX:
            vals = np.multiply.outer(vals, np.eye(lv.n)).reshape(-1)
    return vals.reshape(-1)


# ---- loop specifications of contractions -------------------------------------
#
# The compiled backends do not walk tables for products: they emit small loop
# nests with compile-time bounds, which LLVM unrolls and keeps in registers.
# A spec is a tuple with one entry per level: (pattern, n, transpose_a, transpose_b)
# with pattern one of SS SV VS SM MS MM MV (products), iS iV iM (inner product
# terms), oS oV (outer product).  ``spec_loops`` turns it into loop variables
# and index expressions; ``spec_table`` enumerates the same loops into a table.

def _pattern(kind_a, kind_b):
    return {SCALAR: "S", VECTOR: "V", MATRIX: "M"}[kind_a] + {SCALAR: "S", VECTOR: "V", MATRIX: "M"}[kind_b]


@functools.cache
def product_spec(ta: SiteType, tb: SiteType, trans_a=(), trans_b=(), kind="product"):
    """(result type, loop spec) of ta * tb (or local_inner_product / outer_product).

    trans_a / trans_b name the levels at which an operand is read transposed,
    so adj(U) * psi needs no temporary.
    """
    if kind == "product":
        out, _ = product(ta, tb)
        spec = []
        for name, la, lb in zip(LEVELS, ta.levels, tb.levels):
            spec.append((_pattern(la.kind, lb.kind), max(la.n, lb.n), name in trans_a, name in trans_b))
    elif kind == "local_inner_product":
        out, _ = inner(ta, tb)
        spec = [("i" + _pattern(la.kind, la.kind)[0], la.n, name in trans_a, name in trans_b)
                for name, la in zip(LEVELS, ta.levels)]
    else:
        out, _ = outer(ta, tb)
        spec = [
            ("o" + _pattern(la.kind, la.kind)[0], la.n, False, False) for name, la in zip(LEVELS, ta.levels)
        ]
    return out, tuple(spec)


def _mat(i, j, n, t):
    return f"({j})*{n}+({i})" if t else f"({i})*{n}+({j})"


def spec_loops(spec):
    """Loop variables and flat index expressions of a spec.

    Returns (out_vars, sum_vars, out_index, a_index, b_index): vars are
    (name, extent) pairs, indices Python expressions over them.
    """
    out_vars, sum_vars = [], []
    parts = {"o": [], "a": [], "b": []}  # per level: (local expr, size)
    for L, (pat, n, ta, tb) in enumerate(spec):
        i, j, k = f"i{L}", f"j{L}", f"k{L}"
        if pat == "SS" or pat in ("iS", "oS"):
            loc = {"o": ("0", 1), "a": ("0", 1), "b": ("0", 1)}
        elif pat == "SV":
            out_vars.append((i, n))
            loc = {"o": (i, n), "a": ("0", 1), "b": (i, n)}
        elif pat == "VS":
            out_vars.append((i, n))
            loc = {"o": (i, n), "a": (i, n), "b": ("0", 1)}
        elif pat == "SM":
            out_vars += [(i, n), (j, n)]
            loc = {"o": (_mat(i, j, n, False), n * n), "a": ("0", 1), "b": (_mat(i, j, n, tb), n * n)}
        elif pat == "MS":
            out_vars += [(i, n), (j, n)]
            loc = {"o": (_mat(i, j, n, False), n * n), "a": (_mat(i, j, n, ta), n * n), "b": ("0", 1)}
        elif pat == "MM":
            out_vars += [(i, n), (j, n)]
            sum_vars.append((k, n))
            loc = {
                "o": (_mat(i, j, n, False), n * n),
                "a": (_mat(i, k, n, ta), n * n),
                "b": (_mat(k, j, n, tb), n * n),
            }
        elif pat == "MV":
            out_vars.append((i, n))
            sum_vars.append((k, n))
            loc = {"o": (i, n), "a": (_mat(i, k, n, ta), n * n), "b": (k, n)}
        elif pat == "iV":
            sum_vars.append((i, n))
            loc = {"o": ("0", 1), "a": (i, n), "b": (i, n)}
        elif pat == "iM":
            sum_vars += [(i, n), (j, n)]
            loc = {"o": ("0", 1), "a": (_mat(i, j, n, False), n * n), "b": (_mat(i, j, n, False), n * n)}
        elif pat == "oV":
            out_vars += [(i, n), (j, n)]
            loc = {"o": (_mat(i, j, n, False), n * n), "a": (i, n), "b": (j, n)}
        else:
            raise SiteTypeError(f"no loop pattern for {pat}")
        for w in parts:
            parts[w].append(loc[w])

    def flat(ps):
        terms, stride = [], 1
        for expr, size in reversed(ps):
            if expr != "0":
                terms.append(f"({expr})*{stride}" if stride != 1 else f"({expr})")
            stride *= size
        return " + ".join(reversed(terms)) if terms else "0"

    return out_vars, sum_vars, flat(parts["o"]), flat(parts["a"]), flat(parts["b"])


@functools.cache
def spec_table(spec):
    """The contraction table (rows out, a, b) that the loop nest of ``spec`` walks."""
    out_vars, sum_vars, oi, ai, bi = spec_loops(spec)
    names = [v for v, _ in out_vars + sum_vars]
    ranges = [range(n) for _, n in out_vars + sum_vars]
    code = compile(f"({oi}, {ai}, {bi})", "<spec>", "eval")
    rows = [eval(code, {}, dict(zip(names, vals))) for vals in itertools.product(*ranges)]
    return np.array(rows, dtype=np.int32).reshape(-1, 3)
