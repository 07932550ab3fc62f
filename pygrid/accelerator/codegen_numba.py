"""Kernel IR -> numba source for the OpenMP backend.

A generated kernel processes outer sites [lo, hi); the backend's
accelerator_for splits the outer sites over threads and calls it once per
block (numba ``nogil``), so scratch tensors are allocated once per block.
The per-site body is a sequence of calls to the small operations of
``numba_ops`` on flat arrays with offsets: they are compiled once per lane
count and precision, so a new expression compiles only its own short loop.

The kernels are not ``parallel=True``: numba's parfor passes about double the
compile time of a kernel; the backend runs the blocks from a small cached
parallel driver (:mod:`.parallel_numba`) instead.
"""
from __future__ import annotations

import hashlib

from . import ir as IR
from .numba_ops import OP_NAMES, ops_source

_CMP = {"<": 0, "<=": 1, ">": 2, ">=": 3}


def kernel_signature(ir):
    args = ["lo", "hi", "out"] + [f"in{s}" for s in range(len(ir.slots))]
    for sh in range(ir.nshifts):
        args += [f"nb{sh}", f"pm{sh}", f"ln{sh}"]
    args += [f"T{t}" for t in range(len(ir.tables))] + ["coefs"]
    return args


def ops_module_name(nsimd, dtype):
    return "pygrid_ops_" + hashlib.sha1(ops_source(nsimd, dtype).encode()).hexdigest()[:16]


def kernel_source(ir, nsimd, alias, dtype="float64"):
    """Python source of ``kernel(lo, hi, out, in..., shift tables..., tables..., coefs)``.

    Every array argument is flat (C order of the (osites, ncomp, 2, nsimd) buffer).
    """
    NS = int(nsimd)
    lines = [
        "import numpy as np",
        "from numba import njit",
        f"from {ops_module_name(NS, dtype)} import {', '.join(OP_NAMES)}",
        "",
        "@njit(fastmath=True, cache=True, nogil=True, error_model='numpy', boundscheck=False)",
        f"def kernel({', '.join(kernel_signature(ir))}):",
    ]

    def emit(indent, text):
        lines.append("    " * indent + text)

    res = ir.result
    direct = not alias and not isinstance(ir.ops[res], IR.Load)
    loc = {}  # value -> (array, offset expression)
    for v, op in enumerate(ir.ops):
        n = op.ncomp
        if isinstance(op, IR.Load) and op.shift < 0:
            loc[v] = (f"in{op.slot}", f"b{op.slot}")
            continue
        if direct and v == res:
            loc[v] = ("out", "bo")
        else:
            loc[v] = (f"v{v}", "0")
            emit(1, f"v{v} = np.empty({n * 2 * NS}, dtype=out.dtype)")
        if isinstance(op, IR.Const):
            emit(1, f"fill(v{v}, 0, coefs, {op.offset}, {n})")
        elif isinstance(op, IR.LinComb):
            for j, t in enumerate(op.terms):
                neg = "-" if t.sign < 0 else ""
                if t.coef is not None:
                    emit(1, f"k{v}_{j}r = {neg}coefs[{2 * t.coef}]")
                    emit(1, f"k{v}_{j}i = {neg}coefs[{2 * t.coef + 1}]")
                else:
                    emit(1, f"k{v}_{j}r = Z({float(t.sign)})")
                    emit(1, f"k{v}_{j}i = Z(0.0)")
    emit(1, "for o in range(lo, hi):")
    emit(2, f"bo = o * {ir.out_ncomp * 2 * NS}")
    for slot, n in enumerate(ir.slots):
        if any(isinstance(op, IR.Load) and op.slot == slot and op.shift < 0 for op in ir.ops):
            emit(2, f"b{slot} = o * {n * 2 * NS}")
    for v, op in enumerate(ir.ops):
        n = op.ncomp
        d = ", ".join(loc[v])
        if isinstance(op, IR.Load):
            sh = op.shift
            if sh >= 0:
                emit(2, f"load(v{v}, in{op.slot}, nb{sh}[o] * {n * 2 * NS}, pm{sh}[o], ln{sh}, {n})")
        elif isinstance(op, IR.Const):
            continue
        elif isinstance(op, IR.Contract):
            emit(
                2,
                f"contract({d}, {n}, {', '.join(loc[op.a])}, {', '.join(loc[op.b])}, "
                f"T{op.start}, T{op.ia}, T{op.ib}, {-1.0 if op.conj_a else 1.0}, "
                f"{-1.0 if op.conj_b else 1.0})",
            )
        elif isinstance(op, IR.Remap):
            emit(2, f"remap({d}, {n}, {', '.join(loc[op.a])}, T{op.start}, T{op.ia}, T{op.coef}, "
                    f"{-1.0 if op.conj else 1.0})")
        elif isinstance(op, IR.LinComb):
            for call in _lincomb_calls(v, op, d, [", ".join(loc[t.value]) for t in op.terms], n):
                emit(2, call)
        elif isinstance(op, IR.Where):
            emit(
                2,
                f"select({d}, {', '.join(loc[op.mask])}, {', '.join(loc[op.a])}, {', '.join(loc[op.b])}, "
                f"{n})",
            )
        elif isinstance(op, IR.Compare):
            emit(2, f"compare({d}, {', '.join(loc[op.a])}, {', '.join(loc[op.b])}, {_CMP[op.op]})")
        else:
            raise ValueError(f"unknown IR op {type(op).__name__}")
    if not direct:
        emit(2, f"copy(out, bo, {', '.join(loc[res])}, {ir.out_ncomp})")
    return "\n".join(lines) + "\n"


def _lincomb_calls(v, op, d, x, n):
    """The ops computing the linear combination ``op`` (value ``v``, written at ``d``) of the tensors
    at ``x``: a term of coefficient +-1 (``coef`` None) takes an op without its multiply."""
    terms = op.terms
    unit = [t.coef is None for t in terms]
    k = [f"k{v}_{j}r, k{v}_{j}i" for j in range(len(terms))]
    if len(terms) == 1:
        if unit[0]:
            return [f"{'copy' if terms[0].sign > 0 else 'neg'}({d}, {x[0]}, {n})"]
        return [f"scale({d}, {x[0]}, {k[0]}, {n})"]
    s0, s1 = terms[0].sign > 0, terms[1].sign > 0
    if unit[0] and unit[1] and (s0 or s1):
        first = f"add({d}, {x[0]}, {x[1]}, {n})" if s0 and s1 else \
            f"sub({d}, {x[0]}, {x[1]}, {n})" if s0 else f"sub({d}, {x[1]}, {x[0]}, {n})"
    elif unit[1] and not unit[0]:
        first = f"axpy_{'add' if s1 else 'sub'}({d}, {x[0]}, {k[0]}, {x[1]}, {n})"
    elif unit[0] and not unit[1]:
        first = f"axpy_{'add' if s0 else 'sub'}({d}, {x[1]}, {k[1]}, {x[0]}, {n})"
    else:
        first = f"axpby({d}, {x[0]}, {k[0]}, {x[1]}, {k[1]}, {n})"
    calls = [first]
    for j in range(2, len(terms)):
        if unit[j]:
            calls.append(f"acc_{'add' if terms[j].sign > 0 else 'sub'}({d}, {x[j]}, {n})")
        else:
            calls.append(f"axpy({d}, {x[j]}, {k[j]}, {n})")
    return calls
