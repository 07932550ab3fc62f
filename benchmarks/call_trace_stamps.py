"""Timestamps of a launch's blocks for ``bench_call_trace.py``: the counter read as each block starts
and ends (``block_start``, ``block_end``, called by the traced driver's region) and, after the
region, the launch's first start to last end added to :data:`TOTALS` (``launch_end``).  A module
of its own so that the driver generated to call these functions imports the same arrays the
benchmark reads."""
from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.extending import intrinsic

#: the stamps of the last launch: each block's start and end (uint64 counter values)
MAX_BLOCKS = 64
STAMPS = np.zeros(2 * MAX_BLOCKS, np.uint64)
_STAMPS_AT = STAMPS.ctypes.data


@intrinsic
def _rdtsc(typingctx):
    def codegen(context, builder, sig, args):
        import llvmlite.ir as ir

        fnty = ir.FunctionType(ir.IntType(64), [])
        fn = builder.module.declare_intrinsic("llvm.readcyclecounter", fnty=fnty)
        return builder.call(fn, [])

    return types.uint64(), codegen


@intrinsic
def _stamp(typingctx, address, index):
    """Store the counter at ``((uint64 *) address)[index]``."""
    def codegen(context, builder, sig, args):
        import llvmlite.ir as ir

        i64 = ir.IntType(64)
        fn = builder.module.declare_intrinsic("llvm.readcyclecounter", fnty=ir.FunctionType(i64, []))
        ptr = builder.gep(builder.inttoptr(args[0], i64.as_pointer()), [args[1]])
        builder.store(builder.call(fn, []), ptr)
        return context.get_dummy_value()

    return types.none(types.int64, types.int64), codegen


@intrinsic
def _load(typingctx, address, index):
    """``((uint64 *) address)[index]``."""
    def codegen(context, builder, sig, args):
        import llvmlite.ir as ir

        i64 = ir.IntType(64)
        return builder.load(builder.gep(builder.inttoptr(args[0], i64.as_pointer()), [args[1]]))

    return types.uint64(types.int64, types.int64), codegen


@intrinsic
def _store(typingctx, address, index, value):
    """``((uint64 *) address)[index] = value``."""
    def codegen(context, builder, sig, args):
        import llvmlite.ir as ir

        i64 = ir.IntType(64)
        builder.store(args[2], builder.gep(builder.inttoptr(args[0], i64.as_pointer()), [args[1]]))
        return context.get_dummy_value()

    return types.none(types.int64, types.int64, types.uint64), codegen


#: the launches so far and the counter ticks of their blocks (first start to last end), summed
TOTALS = np.zeros(2, np.uint64)
_TOTALS_AT = TOTALS.ctypes.data


@njit(nogil=True)
def now():
    return _rdtsc()




@njit(nogil=True)
def block_start(b):
    if b < MAX_BLOCKS:
        _stamp(_STAMPS_AT, 2 * b)


@njit(nogil=True)
def block_end(b):
    if b < MAX_BLOCKS:
        _stamp(_STAMPS_AT, 2 * b + 1)


@njit(nogil=True)
def launch_end(nblocks):
    """TOTALS: one more launch, and its blocks' first start to last end."""
    first, last = _load(_STAMPS_AT, 0), _load(_STAMPS_AT, 1)
    for b in range(1, min(nblocks, MAX_BLOCKS)):
        first = min(first, _load(_STAMPS_AT, 2 * b))
        last = max(last, _load(_STAMPS_AT, 2 * b + 1))
    _store(_TOTALS_AT, 0, _load(_TOTALS_AT, 0) + np.uint64(1))
    _store(_TOTALS_AT, 1, _load(_TOTALS_AT, 1) + (last - first))
