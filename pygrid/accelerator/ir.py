"""Kernel IR: what one site computes, in complex arithmetic over flattened components.

A ``KernelIR`` is a list of operations (frozen dataclasses, one per kind), each
producing one value: a site tensor of ``ncomp`` complex components (two real
planes and ``nsimd`` lanes each in the kernels).  Operands name earlier values
by their position in ``ops``; tables are indices into ``KernelIR.tables``.

==========  ===============================================================
``Load``     field ``slot`` read at x, or through shift table ``shift``
``Const``    constant tensor: coefficients ``offset .. offset + ncomp``
``Contract`` out[o] += A[i] * B[j] over the terms of CSR tables
             (``start``, ``ia``, ``ib``), operands conjugated on request
``Remap``    out[o] += c * A[i] over CSR tables (``start``, ``ia``, ``coef``)
``LinComb``  sum of ``Term`` (value, coefficient index or None for 1, sign)
``Where``    per lane: ``a`` where ``mask`` != 0, else ``b``
``Compare``  1.0 or 0.0 per lane (a Real), ``a op b`` on the real parts
==========  ===============================================================

Contraction and remap terms are grouped by output component: the terms of
component ``c`` are rows ``start[c] .. start[c + 1]`` of the other tables.

The IR and its tables are structural: they do not depend on the data or on
the numbers in the expression (those live in the coefficient vector), so a
kernel compiled once serves every evaluation of the same shape of expression.
Produced by ``expr/lower.py``; consumed by the numpy evaluator (``numpy_backend.py``), the numba
generator (``codegen_numba.py``) and the C generator (``codegen_c.py``). It lives with the
backends that consume it, below the expression layer.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Load:
    slot: int
    shift: int  # index of the shift table, -1 for the site itself
    ncomp: int


@dataclass(frozen=True)
class Const:
    offset: int  # first complex coefficient
    ncomp: int


@dataclass(frozen=True)
class Contract:
    a: int
    b: int
    start: int  # table: CSR row starts per output component
    ia: int  # table: component of a per term
    ib: int  # table: component of b per term
    conj_a: bool
    conj_b: bool
    ncomp: int


@dataclass(frozen=True)
class Remap:
    a: int
    start: int  # table: CSR row starts per output component
    ia: int  # table: component of a per term
    coef: int  # table: (re, im) coefficient per term, float64
    conj: bool
    ncomp: int


@dataclass(frozen=True)
class Term:
    value: int
    coef: int | None  # complex coefficient index; None multiplies by 1
    sign: int  # +1 or -1


@dataclass(frozen=True)
class LinComb:
    terms: tuple[Term, ...]
    ncomp: int


@dataclass(frozen=True)
class Where:
    mask: int
    a: int
    b: int
    ncomp: int


@dataclass(frozen=True)
class Compare:
    a: int
    b: int
    op: str  # '<', '<=', '>' or '>='
    ncomp: int = 1


Op = Load | Const | Contract | Remap | LinComb | Where | Compare

COMPARISONS = ("<", "<=", ">", ">=")


def operands(op: Op) -> tuple[int, ...]:
    """The values ``op`` reads."""
    if isinstance(op, Contract):
        return (op.a, op.b)
    if isinstance(op, Remap):
        return (op.a,)
    if isinstance(op, LinComb):
        return tuple(t.value for t in op.terms)
    if isinstance(op, Where):
        return (op.mask, op.a, op.b)
    if isinstance(op, Compare):
        return (op.a, op.b)
    return ()


def csr_rows(start: np.ndarray) -> np.ndarray:
    """The output component of each term, from CSR row starts."""
    return np.repeat(np.arange(len(start) - 1), np.diff(start))


@dataclass
class KernelIR:
    ops: list[Op] = field(default_factory=list)
    tables: list[np.ndarray] = field(default_factory=list)  # int32 rows or float64 coefficients
    slots: list[int] = field(default_factory=list)  # ncomp per field slot
    nshifts: int = 0
    out_ncomp: int = 0
    result: int = -1
    ncoef: int = 0  # reals in the coefficient vector
    _key: str | None = field(default=None, repr=False, compare=False)

    def ncomp(self, v: int) -> int:
        return self.ops[v].ncomp

    def contract_tables(self, op: Contract) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(start, ia, ib) of a contraction."""
        return self.tables[op.start], self.tables[op.ia], self.tables[op.ib]

    def remap_tables(self, op: Remap) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(start, ia, coefficients as an (nterms, 2) array of re, im) of a remap."""
        return self.tables[op.start], self.tables[op.ia], self.tables[op.coef].reshape(-1, 2)

    def key(self) -> str:
        """A digest of the structure (ops, tables, slots): the same in every process.

        Computed once, when the lowering has finished building the IR (every launch asks)."""
        if self._key is not None:
            return self._key
        h = hashlib.sha1()
        h.update(repr((self.ops, self.slots, self.nshifts, self.out_ncomp, self.result, self.ncoef)).encode())
        for t in self.tables:
            h.update(str(t.dtype).encode() + str(t.shape).encode())
            h.update(np.ascontiguousarray(t).tobytes())
        self._key = h.hexdigest()
        return self._key


@dataclass
class Launch:
    """Everything a backend needs to run a lowered expression."""

    ir: KernelIR
    fields: list  # field objects, one per slot
    shifts: list  # (slot, disp) per shift table index
    coefs: np.ndarray  # complex coefficients, flattened as reals
