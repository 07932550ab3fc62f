"""Kernel IR: what one site computes, in complex arithmetic over flattened components.

Values are site tensors of ``ncomp`` complex components (two real planes and
``nsimd`` lanes each in the kernels).  Operations, each a tuple:

  ('load', slot, shift)                       field slot read at x (+ shift table, -1 for none)
  ('const', coef, ncomp)                      constant tensor from the coefficient vector
  ('contract', a, b, loops, table, conj_a, conj_b, nout)
                                              out[o] += A[i] * B[j]: ``loops`` is the loop nest
                                              (out vars, sum vars, out/a/b index expressions),
                                              ``table`` the same terms enumerated
  ('remap', a, table, conj, nout)             out[o] += c * A[i]
  ('lincomb', ((v, coef|-1, sign), ...), n)  sum of scaled values
  ('where', mask, a, b, n)                    per lane: a if mask != 0 else b
  ('compare', a, b, op)                       1.0 or 0.0 per lane (Real)

The IR and its tables are structural: they do not depend on the data or on
the numbers in the expression (those live in the coefficient vector), so a
kernel compiled once serves every evaluation of the same shape of expression.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np


@dataclass
class KernelIR:
    ops: list = field(default_factory=list)
    tables: list = field(default_factory=list)  # numpy arrays (int32 rows or float64 coefs)
    slots: list = field(default_factory=list)  # ncomp per field slot
    nshifts: int = 0
    out_ncomp: int = 0
    result: int = -1
    ncoef: int = 0  # reals in the coefficient vector

    def ncomp(self, v):
        op = self.ops[v]
        kind = op[0]
        if kind == "load":
            return self.slots[op[1]]
        if kind in ("const", "lincomb", "where"):
            return op[-1]
        if kind in ("contract", "remap"):
            return op[-1]
        if kind == "compare":
            return 1
        raise ValueError(kind)

    def key(self):
        h = hashlib.sha1()
        h.update(repr((self.ops, self.slots, self.nshifts, self.out_ncomp, self.result, self.ncoef)).encode())
        for t in self.tables:
            h.update(str(t.dtype).encode() + str(t.shape).encode())
            h.update(np.ascontiguousarray(t).tobytes())
        return h.hexdigest()


@dataclass
class Launch:
    """Everything a backend needs to run a lowered expression."""

    ir: KernelIR
    fields: list  # field objects, one per slot
    shifts: list  # (slot, disp) per shift table index
    coefs: np.ndarray  # complex coefficients, flattened as reals
