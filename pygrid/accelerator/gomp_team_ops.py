"""numba intrinsics for :mod:`.gomp_team`: libgomp's region and thread numbers, an address as a
pointer, and an atomic counter.  The symbols are external to the compiled code; :mod:`.gomp_team`
gives their addresses to the JIT's linker before anything using them is compiled or loaded from
numba's cache."""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.extending import intrinsic

_I8P = ir.IntType(8).as_pointer()
_I32 = ir.IntType(32)
_I64 = ir.IntType(64)


@intrinsic
def as_pointer(typingctx, address):
    """The integer ``address`` as a ``void *`` (for ``numba.carray``)."""
    if not isinstance(address, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        return builder.inttoptr(args[0], _I8P)

    return types.voidptr(address), codegen


@intrinsic
def gomp_parallel(typingctx, body, task, nthreads):
    """``GOMP_parallel(body, task, nthreads, 0)``, ``body`` the name (a literal string) of the
    region's function, ``void body(void *task)``: the body on a team of ``nthreads`` threads (the
    caller is thread 0), returning when every thread has left it."""
    if (not isinstance(body, types.StringLiteral) or not isinstance(task, types.Integer)
            or not isinstance(nthreads, types.Integer)):
        return None
    name = body.literal_value

    def codegen(context, builder, sig, args):
        body_ty = ir.FunctionType(ir.VoidType(), [_I8P])
        body = cgutils.get_or_insert_function(builder.module, body_ty, name)
        fnty = ir.FunctionType(ir.VoidType(), [body_ty.as_pointer(), _I8P, _I32, _I32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "GOMP_parallel")
        builder.call(fn, [body, builder.inttoptr(args[1], _I8P), builder.trunc(args[2], _I32),
                          ir.Constant(_I32, 0)])
        return context.get_dummy_value()

    return types.none(body, task, nthreads), codegen


def _omp_int(name):
    def impl(typingctx):
        def codegen(context, builder, sig, args):
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_I32, []), name)
            return builder.sext(builder.call(fn, []), ir.IntType(64))

        return types.int64(), codegen

    impl.__name__ = name
    return intrinsic(impl)


#: ``omp_get_thread_num()`` inside the region
thread_num = _omp_int("omp_get_thread_num")
#: ``omp_get_num_threads()`` inside the region
team_size = _omp_int("omp_get_num_threads")


@intrinsic
def fetch_add(typingctx, address, value):
    """``__atomic_fetch_add((int64_t *) address, value, relaxed)``: the value before the add.  Relaxed
    order: the counters hand out pieces of work, each value once; the region's end orders the
    data the pieces wrote."""
    if not isinstance(address, types.Integer) or not isinstance(value, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        ptr = builder.inttoptr(args[0], _I64.as_pointer())
        return builder.atomic_rmw("add", ptr, context.cast(builder, args[1], sig.args[1], types.int64),
                                  "monotonic")

    return types.int64(address, value), codegen
