"""The lazy expression tree.

Arithmetic on fields builds nodes; nothing is computed until ``eval`` or
``@=``.  Each node knows its site type, grid, checkerboard and precision, so a
mismatch raises at the line that wrote it, not inside a kernel.
"""
from __future__ import annotations

import numbers

import numpy as np

from ..cartesian.shift import shifted_checkerboard
from ..errors import ConformabilityError, SiteTypeError
from ..tensors import algebra
from ..tensors.constant import ConstTensor
from ..tensors.sitetype import LEVELS, SCALAR, Complex, Real, SiteType


class FieldBase:
    """What the expression engine needs of a field (the Lattice implements it).

    Attributes: grid, checkerboard, site_type, precision; method view(mode).
    """

    __array_priority__ = 1000


class ExprOps:
    """Operators shared by fields and expression nodes: they build the tree."""

    __array_priority__ = 1000

    def __add__(self, other):
        return add(self, other, 1)

    def __radd__(self, other):
        return add(other, self, 1)

    def __sub__(self, other):
        return add(self, other, -1)

    def __rsub__(self, other):
        return add(other, self, -1)

    def __neg__(self):
        return mul(-1.0, self)

    def __pos__(self):
        return as_expr(self)

    def __mul__(self, other):
        return mul(self, other)

    def __rmul__(self, other):
        return mul(other, self)

    def __truediv__(self, other):
        if isinstance(other, numbers.Number):
            return mul(1.0 / other, self)
        raise SiteTypeError("fields can only be divided by numbers")

    def _cmp(self, other, op):
        return Compare(as_expr(self), as_expr(other), op)

    def __lt__(self, other):
        return self._cmp(other, "<")

    def __le__(self, other):
        return self._cmp(other, "<=")

    def __gt__(self, other):
        return self._cmp(other, ">")

    def __ge__(self, other):
        return self._cmp(other, ">=")


class Expr(ExprOps):
    site_type: SiteType
    grid = None
    checkerboard = None
    precision = None
    children: tuple = ()

    def __bool__(self):
        raise TypeError(
            "a pygrid expression has no truth value; evaluate it with pg.eval or compare reductions"
        )

    def __repr__(self):
        return f"<{type(self).__name__} {self.site_type} on {self.grid}>"


def _conform(name, *nodes):
    """Grid, checkerboard and precision shared by the operands that have them."""
    grid = cb = prec = None
    first = None
    for n in nodes:
        if n.grid is None:
            continue
        if first is None:
            first, grid, cb, prec = n, n.grid, n.checkerboard, n.precision
            continue
        if n.grid is grid and n.checkerboard == cb and n.precision == prec:
            continue
        if n.grid != grid:
            raise ConformabilityError(f"{name}: operands live on different grids, {grid} and {n.grid}")
        if n.checkerboard != cb:
            raise ConformabilityError(
                f"{name}: operands are on different checkerboards ({_cbname(cb)} and "
                f"{_cbname(n.checkerboard)})"
            )
        if n.precision != prec:
            raise ConformabilityError(
                f"{name}: operands have different precisions ({prec} and {n.precision}); convert one with "
                "pg.convert"
            )
    return grid, cb, prec


def _cbname(cb):
    return {None: "full grid", 0: "even", 1: "odd"}[cb]


class Leaf(Expr):
    """A field read at x + disp (disp = 0 for a plain read)."""

    def __init__(self, field, disp=None):
        self.field = field
        self.grid = grid = field.grid
        self.site_type = field.site_type
        self.precision = field.precision
        if disp is None or not any(disp):
            self.disp = (0,) * grid.nd
            self.checkerboard = field.checkerboard
        else:
            self.disp = tuple(disp)
            self.checkerboard = shifted_checkerboard(grid, field.checkerboard, self.disp)


#: the number types a Scalar takes without the abstract base class's (slower) check
_NUMBERS = (float, int, complex)


class Scalar(Expr):
    """A Python number in an expression (passed to the kernel at run time)."""

    def __init__(self, value):
        if type(value) not in _NUMBERS and (not isinstance(value, numbers.Number) or isinstance(value, bool)):
            raise SiteTypeError(f"cannot use {value!r} in a field expression")
        self.value = complex(value)
        self.site_type = Real if self.value.imag == 0 else Complex


class Const(Expr):
    """A constant site tensor (gamma matrix, ...)."""

    def __init__(self, const: ConstTensor):
        self.const = const
        self.site_type = const.site_type


class Mul(Expr):
    def __init__(self, a, b):
        self.children = (a, b)
        self.grid, self.checkerboard, self.precision = _conform("*", a, b)
        self.site_type = algebra.product(a.site_type, b.site_type)[0]
        if isinstance(a, Const) or isinstance(b, Const):
            c, f = (a, b) if isinstance(a, Const) else (b, a)
            self.site_type = algebra.const_product(c.site_type, c.const.values, f.site_type, c is a).out_type


class LinComb(Expr):
    """sum_i sign_i * scale_i * term_i, flattened from + - and number * expr."""

    def __init__(self, terms):
        # one pass over the terms: a solver builds a sum at every iteration
        self.terms = terms = tuple(terms)  # (expr, scale complex or None, sign)
        self.children = children = tuple(t[0] for t in terms)
        self.grid, self.checkerboard, self.precision = _conform("+", *children)
        ref = numbers_ = None
        real = True
        for t, scale, _ in terms:
            st = t.site_type
            if isinstance(t, Scalar):
                numbers_ = True  # numbers become multiples of the unit tensor below
            elif ref is None:
                ref = st
            elif st is not ref and st.levels_key != ref.levels_key:
                raise SiteTypeError(f"cannot add {ref} and {st}: site types differ")
            if real and not (st.is_real and (scale is None or complex(scale).imag == 0)):
                real = False
        if ref is None:
            ref = children[0].site_type
        self.site_type = ref if ref.is_real == real else SiteType(*ref.levels, is_real=real)
        if numbers_ and ref.levels != Complex.levels:
            algebra.identity_values(self.site_type)  # raises if a number cannot be added


class Unary(Expr):
    """A sparse remap of one operand: adj, conjugate, transpose, trace, peek."""

    def __init__(self, kind, a, remap, conj, levels=LEVELS):
        self.kind = kind
        self.levels = tuple(levels)
        self.children = (a,)
        self.remap = remap
        self.conj = conj
        self.grid, self.checkerboard, self.precision = a.grid, a.checkerboard, a.precision
        self.site_type = SiteType(
            *remap.out_type.levels, is_real=a.site_type.is_real and remap.out_type.is_real
        )


class Contract(Expr):
    """local_inner_product (conj a) and outer_product (conj b)."""

    def __init__(self, kind, a, b):
        self.kind = kind
        self.children = (a, b)
        self.grid, self.checkerboard, self.precision = _conform(kind, a, b)
        fn = algebra.inner if kind == "local_inner_product" else algebra.outer
        self.site_type, self.table = fn(a.site_type, b.site_type)
        self.conj_a = kind == "local_inner_product"
        self.conj_b = kind == "outer_product"


class Where(Expr):
    def __init__(self, mask, a, b):
        self.children = (mask, a, b)
        if any(lv.kind != SCALAR for lv in mask.site_type.levels):
            raise SiteTypeError(f"where: the mask must be a Complex or Real field, got {mask.site_type}")
        if a.site_type.levels != b.site_type.levels:
            raise SiteTypeError(
                f"where: both branches must have one site type, got {a.site_type} and {b.site_type}"
            )
        self.grid, self.checkerboard, self.precision = _conform("where", mask, a, b)
        self.site_type = SiteType(*a.site_type.levels, is_real=a.site_type.is_real and b.site_type.is_real)


class Compare(Expr):
    def __init__(self, a, b, op):
        for x in (a, b):
            if any(lv.kind != SCALAR for lv in x.site_type.levels):
                raise SiteTypeError(f"comparison '{op}' needs Real or Complex operands, got {x.site_type}")
        self.children = (a, b)
        self.op = op
        self.grid, self.checkerboard, self.precision = _conform(op, a, b)
        self.site_type = Real


# ---- construction helpers ----------------------------------------------------

def as_expr(x):
    if isinstance(x, Expr):
        return x
    if isinstance(x, FieldBase):
        return Leaf(x)
    if type(x) in _NUMBERS:
        return Scalar(x)
    if isinstance(x, ConstTensor):
        return Const(x)
    if isinstance(x, numbers.Number) and not isinstance(x, bool):
        return Scalar(x)
    if isinstance(x, np.generic) and np.isscalar(x):
        return Scalar(x.item())
    raise SiteTypeError(f"cannot use an object of type {type(x).__name__} in a field expression")


def _terms(e, sign=1, scale=None):
    """Flatten nested sums and number * expr into LinComb terms."""
    if isinstance(e, LinComb):
        out = []
        for t, s, sg in e.terms:
            sc = s if scale is None else (scale if s is None else s * scale)
            out += [(t, sc, sg * sign)]
        return out
    return [(e, scale, sign)]


def add(a, b, sign):
    a, b = as_expr(a), as_expr(b)
    if isinstance(a, (Scalar, Const)) and isinstance(b, (Scalar, Const)):
        return as_expr(_const_value(a) + sign * _const_value(b))
    # a literal 0 is the start of sum(...) or a loop accumulator: no term at all
    if isinstance(b, Scalar) and b.value == 0:
        return a
    if isinstance(a, Scalar) and a.value == 0:
        return b if sign > 0 else mul(-1.0, b)
    return LinComb(_terms(a) + _terms(b, sign))


def _const_value(e):
    return e.value if isinstance(e, Scalar) else e.const


def mul(a, b):
    # a number times a field or expression, the commonest product: no Scalar node for the number
    if type(a) in _NUMBERS or type(b) in _NUMBERS:
        n, e = (a, b) if type(a) in _NUMBERS else (b, a)
        e = as_expr(e)
        if not isinstance(e, (Scalar, Const)):
            return LinComb(_terms(e, 1, complex(n)))
    a, b = as_expr(a), as_expr(b)
    if isinstance(a, (Scalar, Const)) and isinstance(b, (Scalar, Const)):
        return as_expr(_const_value(a) * _const_value(b))
    if isinstance(a, Scalar) or isinstance(b, Scalar):
        s, e = (a, b) if isinstance(a, Scalar) else (b, a)
        return LinComb(_terms(e, 1, s.value))
    return Mul(a, b)


def shift(e, dim, disp):
    """cshift pushed down to the leaves: one fused neighbour read per leaf."""
    e = as_expr(e)
    if e.grid is None:
        return e
    nd = e.grid.nd
    if not isinstance(dim, (int, np.integer)) or not 0 <= dim < nd:
        raise ConformabilityError(f"cshift: dimension {dim!r} out of range 0..{nd - 1}")
    if not isinstance(disp, (int, np.integer)):
        raise ConformabilityError(f"cshift: displacement must be an integer, got {disp!r}")
    return _shift(e, int(dim), int(disp))


def _shift(e, dim, disp):
    if isinstance(e, (Scalar, Const)):
        return e
    if isinstance(e, Leaf):
        d = list(e.disp)
        d[dim] += disp
        return Leaf(e.field, d)
    if isinstance(e, LinComb):
        return LinComb([(_shift(t, dim, disp), s, sg) for t, s, sg in e.terms])
    if isinstance(e, Mul):
        return Mul(*(_shift(c, dim, disp) for c in e.children))
    if isinstance(e, Unary):
        return Unary(e.kind, _shift(e.children[0], dim, disp), e.remap, e.conj, e.levels)
    if isinstance(e, Contract):
        return Contract(e.kind, *(_shift(c, dim, disp) for c in e.children))
    if isinstance(e, Where):
        return Where(*(_shift(c, dim, disp) for c in e.children))
    if isinstance(e, Compare):
        return Compare(_shift(e.children[0], dim, disp), _shift(e.children[1], dim, disp), e.op)
    raise TypeError(f"cannot shift {type(e).__name__}")


def unary(kind, x, **kw):
    e = as_expr(x)
    t = e.site_type
    if isinstance(e, Scalar):
        v = e.value
        return as_expr({"adj": v.conjugate(), "conjugate": v.conjugate()}.get(kind, v))
    if kind == "adj":
        r, conj = algebra.transpose(t), True
    elif kind == "conjugate":
        r, conj = algebra.identity_map(t), True
    elif kind == "transpose":
        r, conj = algebra.transpose(t, kw.get("levels", LEVELS)), False
    elif kind == "trace":
        r, conj = algebra.trace(t, kw.get("levels", LEVELS)), False
    elif kind == "peek":
        r, conj = algebra.peek(t, kw["level"], tuple(kw["index"])), False
    else:
        raise ValueError(kind)
    if isinstance(e, Const):
        vals = r.apply(np.conj(e.const.values) if conj else e.const.values)
        return Const(ConstTensor(r.out_type, vals))
    return Unary(kind, e, r, conj, kw.get("levels", LEVELS))
