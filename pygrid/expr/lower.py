"""Lowering an expression tree to kernel IR, with common-subexpression elimination.

:func:`lower_cached` keeps the IR of each expression shape: a solver builds the
same few expressions every iteration, and lowering one (tables, CSE, the IR's
digest) costs tens of microseconds of Python, as much as the kernel of a small
field.  The shape is a signature of everything lowering reads except the
coefficient values and which fields are read; one pass over the tree gives it,
the fields and the coefficients in the order lowering would give them.
"""
from __future__ import annotations

import numpy as np

from ..accelerator import ir as IR
from ..errors import SiteTypeError
from ..tensors import algebra
from ..tensors.sitetype import LEVELS
from .nodes import Compare, Const, Contract, Leaf, LinComb, Mul, Scalar, Unary, Where


def _read_as(e):
    """An operand of a product read through adj/transpose/conjugate: (operand, conj, transposed levels).

    The product's loops then index the operand transposed and flip the sign of
    its imaginary part, so adj(U) * psi makes no temporary.
    """
    if (
        isinstance(e, Unary)
        and e.kind in ("adj", "conjugate", "transpose")
        and not isinstance(e.children[0], Const)
    ):
        child = e.children[0]
        if e.kind == "adj":
            return child, True, LEVELS
        if e.kind == "conjugate":
            return child, True, ()
        return child, False, e.levels
    return e, False, ()


class _Lowerer:
    def __init__(self):
        self.ir = IR.KernelIR()
        self.memo = {}  # structural key -> value id (CSE)
        self.slot_of = {}  # id(field) -> slot
        self.fields = []
        self.shift_of = {}
        self.shifts = []
        self.coefs = []
        self.table_of = {}

    def emit(self, op):
        if op in self.memo:
            return self.memo[op]
        self.ir.ops.append(op)
        v = len(self.ir.ops) - 1
        self.memo[op] = v
        return v

    def table(self, arr):
        key = (arr.dtype.str, arr.shape, arr.tobytes())
        if key not in self.table_of:
            self.ir.tables.append(arr)
            self.table_of[key] = len(self.ir.tables) - 1
        return self.table_of[key]

    def coef(self, values):
        off = len(self.coefs)
        self.coefs.extend(np.asarray(values, dtype=np.complex128).reshape(-1))
        return off

    def slot(self, f):
        k = id(f)
        if k not in self.slot_of:
            self.slot_of[k] = len(self.fields)
            self.fields.append(f)
            self.ir.slots.append(f.site_type.ncomp)
        return self.slot_of[k]

    def lower(self, e):
        if isinstance(e, Leaf):
            s = self.slot(e.field)
            sh = -1
            if any(e.disp):
                k = (s, e.disp)
                if k not in self.shift_of:
                    self.shift_of[k] = len(self.shifts)
                    self.shifts.append(k)
                sh = self.shift_of[k]
            return self.emit(IR.Load(s, sh, e.field.site_type.ncomp))
        if isinstance(e, Mul):
            a, b = e.children
            if isinstance(a, Const) or isinstance(b, Const):
                c, f = (a, b) if isinstance(a, Const) else (b, a)
                r = algebra.const_product(c.site_type, c.const.values, f.site_type, c is a)
                return self.remap(self.lower(f), r, False)
            (a, ca, ta), (b, cb, tb) = _read_as(a), _read_as(b)
            out, spec = algebra.product_spec(a.site_type, b.site_type, ta, tb)
            va, vb = self.lower(a), self.lower(b)
            return self.contract(va, vb, spec, ca, cb, out.ncomp)
        if isinstance(e, Contract):
            a, b = e.children
            _, spec = algebra.product_spec(a.site_type, b.site_type, kind=e.kind)
            va, vb = self.lower(a), self.lower(b)
            return self.contract(va, vb, spec, e.conj_a, e.conj_b, e.site_type.ncomp)
        if isinstance(e, Unary):
            return self.remap(self.lower(e.children[0]), e.remap, e.conj)
        if isinstance(e, LinComb):
            terms = []
            for t, scale, sign in e.terms:
                if isinstance(t, (Scalar, Const)):
                    val = (
                        t.value * algebra.identity_values(e.site_type)
                        if isinstance(t, Scalar)
                        else t.const.values
                    )
                    if t.site_type.levels != e.site_type.levels and isinstance(t, Const):
                        raise SiteTypeError(f"cannot add the constant {t.const} to a {e.site_type} field")
                    v = self.emit(IR.Const(self.coef(val), e.site_type.ncomp))
                else:
                    v = self.lower(t)
                c = None if scale is None else self.coef([scale])
                terms.append(IR.Term(v, c, sign))
            return self.emit(IR.LinComb(tuple(terms), e.site_type.ncomp))
        if isinstance(e, Where):
            m, a, b = (self.lower(c) for c in e.children)
            return self.emit(IR.Where(m, a, b, e.site_type.ncomp))
        if isinstance(e, Compare):
            a, b = (self.lower(c) for c in e.children)
            return self.emit(IR.Compare(a, b, e.op))
        if isinstance(e, Scalar):  # e.g. the 2 of coordinate(grid, 3) < 2
            return self.emit(IR.Const(self.coef([e.value]), 1))
        if isinstance(e, Const):
            return self.emit(IR.Const(self.coef(e.const.values), e.site_type.ncomp))
        raise TypeError(f"cannot lower {type(e).__name__}")

    def csr(self, out_index, nout):
        """Rows grouped by output component: (order, start table id)."""
        order = np.argsort(out_index, kind="stable")
        start = np.searchsorted(out_index[order], np.arange(nout + 1)).astype(np.int32)
        return order, self.table(start)

    def contract(self, va, vb, spec, ca, cb, nout):
        tab = algebra.spec_table(spec)
        order, ts = self.csr(tab[:, 0], nout)
        tab = tab[order]
        ia = self.table(np.ascontiguousarray(tab[:, 1]))
        ib = self.table(np.ascontiguousarray(tab[:, 2]))
        return self.emit(IR.Contract(va, vb, ts, ia, ib, bool(ca), bool(cb), nout))

    def remap(self, v, r, conj):
        nout = r.out_type.ncomp
        order, ts = self.csr(r.rows[:, 0], nout)
        rows = r.rows[order]
        cf = np.ascontiguousarray(np.stack([r.coefs.real, r.coefs.imag], axis=1)[order], dtype=np.float64)
        ia = self.table(np.ascontiguousarray(rows[:, 1], dtype=np.int32))
        return self.emit(IR.Remap(v, ts, ia, self.table(cf), bool(conj), nout))


def lower(expr, out_ncomp):
    lw = _Lowerer()
    lw.ir.result = lw.lower(expr)
    lw.ir.nshifts = len(lw.shifts)
    lw.ir.out_ncomp = out_ncomp
    coefs = np.asarray(lw.coefs, dtype=np.complex128)
    lw.ir.ncoef = 2 * len(coefs)
    return IR.Launch(lw.ir, lw.fields, lw.shifts, coefs)


#: expression signature -> (IR, shifts); cleared when full (programs use a handful of shapes)
_shapes: dict = {}
SHAPES_MAX = 512


def _shape(e, fields, slot_of, coefs):
    """The signature of ``e``; appends the fields it reads (first read first) and its coefficients,
    in the order :class:`_Lowerer` takes them."""
    if isinstance(e, Leaf):
        s = slot_of.get(id(e.field))
        if s is None:
            s = slot_of[id(e.field)] = len(fields)
            fields.append(e.field)
        return ("L", s, e.disp, e.field.site_type.key)
    if isinstance(e, LinComb):
        terms = []
        for t, scale, sign in e.terms:
            if isinstance(t, Scalar):
                unit = algebra.identity_values(e.site_type)
                coefs.extend(np.asarray(t.value * unit, np.complex128).reshape(-1))
                ts = ("S",)
            elif isinstance(t, Const):
                coefs.extend(t.const.values)
                ts = ("C", t.site_type.key)
            else:
                ts = _shape(t, fields, slot_of, coefs)
            if scale is not None:
                coefs.append(complex(scale))
            terms.append((ts, scale is None, sign))
        return ("+", e.site_type.key, tuple(terms))
    if isinstance(e, Mul):
        a, b = e.children
        if isinstance(a, Const) or isinstance(b, Const):
            c, f = (a, b) if isinstance(a, Const) else (b, a)
            return ("*c", c.const.key(), c is a, _shape(f, fields, slot_of, coefs))
        return ("*", _shape(a, fields, slot_of, coefs), _shape(b, fields, slot_of, coefs))
    if isinstance(e, Unary):
        return ("U", e.kind, e.remap.key(), e.conj, e.levels, _shape(e.children[0], fields, slot_of, coefs))
    if isinstance(e, Contract):
        a, b = e.children
        return ("K", e.kind, _shape(a, fields, slot_of, coefs), _shape(b, fields, slot_of, coefs))
    if isinstance(e, Where):
        return ("W", e.site_type.key) + tuple(_shape(c, fields, slot_of, coefs) for c in e.children)
    if isinstance(e, Compare):
        a, b = e.children
        return ("<", e.op, _shape(a, fields, slot_of, coefs), _shape(b, fields, slot_of, coefs))
    if isinstance(e, Scalar):
        coefs.append(e.value)
        return ("S",)
    if isinstance(e, Const):
        coefs.extend(e.const.values)
        return ("C", e.site_type.key)
    raise TypeError(f"cannot lower {type(e).__name__}")


def signature(expr, out_ncomp):
    """``(signature, fields, coefs)`` of ``expr`` evaluated into a field of ``out_ncomp``
    components: the key of its shape, the fields it reads (first read first) and its coefficients,
    in the order :func:`lower` gives them."""
    fields, coefs = [], []
    return (_shape(expr, fields, {}, coefs), out_ncomp), fields, coefs


def lower_signed(expr, sig, fields, coefs):
    """:func:`lower` of ``expr``, whose :func:`signature` is ``(sig, fields, coefs)``, with the IR
    of a shape seen before taken from the cache; ``(launch, known)``, ``known`` whether the shape
    is in the cache now (a shape whose lowering read other fields or coefficients than its
    signature pass is not, so a signature that missed something costs time, never a wrong kernel:
    a caller keeping anything under ``sig`` keeps it only when ``known``)."""
    hit = _shapes.get(sig)
    if hit is not None:
        return IR.Launch(hit[0], fields, hit[1], np.asarray(coefs, dtype=np.complex128)), True
    launch = lower(expr, sig[1])
    known = (len(launch.fields) == len(fields) and all(a is b for a, b in zip(launch.fields, fields))
             and np.array_equal(launch.coefs, np.asarray(coefs, dtype=np.complex128)))
    if known:
        if len(_shapes) >= SHAPES_MAX:
            _shapes.clear()
        _shapes[sig] = (launch.ir, launch.shifts)
    return launch, known


def lower_cached(expr, out_ncomp):
    """:func:`lower`, with the IR of an expression shape seen before taken from the cache."""
    return lower_signed(expr, *signature(expr, out_ncomp))[0]
