"""Explicit SIMD vectors for numba kernels: Grid's vector classes, as a numba type.

A ``SimdVector(dtype, width)`` value is one LLVM vector register (``<4 x double>``,
``<8 x float>``, ...), so a hand-written kernel holds the lanes of a site
in one variable instead of ``width`` scalars that LLVM's SLP vectoriser may or
may not merge.  Why this exists: the lane-unrolled form makes numba's frontend
work on ``width`` times more statements (compile time grows faster than
linearly with function size) and leaves register allocation across a large
kernel body to chance; with vectors the kernel source is ``width`` times
shorter and every operation is a vector instruction by construction.

Operations (all usable only inside numba-compiled code):

* ``vload(a, i, W)`` / ``vstore(a, i, v)``: ``W`` (an integer literal or a
  module-level constant) consecutive elements of the array ``a`` (1D, or C-contiguous of any
  shape) from flat index ``i``;
* ``vzero(v)``: a zero vector of ``v``'s type; ``vsplat(x, W)``;
* ``a + b``, ``a - b``, ``a * b``, ``a / b``, ``-a`` on vectors, ``x * v`` with a scalar;
* ``vsqrt(v)``: the square root of every lane;
* ``vdouble(v)``: the lanes widened to float64 (sums of single-precision fields
  are accumulated in double); ``vsum(v)``: the sum of the lanes, a scalar;
* ``vfma(a, b, c)`` = ``a * b + c`` (``llvm.fmuladd``: fused where the CPU has FMA);
* ``vfms(a, b, c)`` = ``c - a * b``;
* ``vxor(v, X)``: lane ``l`` of the result is lane ``l ^ X`` of ``v`` (``X`` a
  literal): the lane swap of a SIMD-split dimension, one shuffle instruction;
* ``vpermute(v, lanes, off)``: lane ``l`` from lane ``lanes[off + l]`` (any map,
  run-time table);
* ``prefetch(a, i)``: software prefetch of the cache line holding ``a[i]``
  (``llvm.prefetch``, read, into all cache levels); ``prefetch_l2(a, i)``: the
  same into L2 and below (``prefetcht1`` on x86), which leaves L1 to the data
  in use when the prefetched set is larger than L1; ``prefetch_lines(a, i, N)`` and
  ``prefetch_l2_lines(a, i, N)``: the N cache lines from ``a[i]`` on, one statement
  for numba (whose front end pays per statement: a kernel's cold compile);
* ``vcmatvec(m, b, h, N, ADJ)``: an N x N complex matrix stored at ``m[b:]``
  (row-major elements, each a real then an imaginary vector of the lanes), or
  its adjoint for ``ADJ`` 1, times the complex N-vectors of the tuple ``h``
  (re, im of each component in turn; several vectors one after the other),
  each matrix element loaded once for all of them.  One call to numba, however
  many operations: a Dirac kernel built from these compiles in a fraction of
  the time the same arithmetic written out in vector operations takes, since
  numba's front end pays per statement;
* ``vthirdrow(m, b, ftab, k, W)``: the third row of a 3 x 3 matrix stored as its first two rows
  (12 vectors at ``m[b:]``), ``f conj(row0 x row1)``, with ``f`` the complex lane vector of row
  ``k`` of ``ftab`` (re then im vector; row 0 is 1 and is not read): six vectors, the row of an
  SU(3) matrix times a phase; ``vcmatvec3(m, b, r, h, ADJ)``: ``vcmatvec`` of that matrix, its
  first two rows read at ``m[b:]`` and its third the six vectors ``r``.  A link is then read in
  two thirds of the bytes.

Tuples of vectors, each operation one statement for numba however long the tuple:

* ``vloadt(a, i, N, W)`` / ``vstoret(a, i, t)``: N consecutive vectors of W lanes from ``a[i:]``;
  ``vstoret_nt(a, i, t)``: ``vstoret`` with non-temporal stores, which write past the
  caches (every vector's address a multiple of its size), and ``store_fence()``, which
  orders them before the stores that follow (``sfence`` on x86): a kernel whose result
  is not read again soon leaves the caches to its inputs;
* ``vcaxpy(g, x, y, PHASE)``: ``x + g * i**PHASE * y`` on tuples of complex
  numbers (re, im vectors in turn); ``g`` a vector, or None for 1; ``x`` None for 0;
* ``vscalet(s, t)``: every vector of ``t`` times the vector ``s``;
* ``vpermt(t, px, lanes, off)``: every vector permuted, lane ``l`` from lane
  ``l ^ px`` when ``px`` (run-time) is a power of two below the width (one shuffle
  each), else from ``lanes[off + l]``;
* ``vproj2(a, i, g, XA, YA, PA, XB, YB, PB, W)``: a Wilson spin projection, the two
  ``vcaxpy(g, <6 vectors at vector offset X>, <6 at Y>, P)`` of a half spinor in one
  statement; ``vrecon2(acc, i, wf, wb, g, UA, LA, PA, UB, LB, PB, INIT)``: the spinors
  rebuilt from the half spinors of a direction's forward and backward points (12 vectors
  each; ``wb`` None for one point) stored into (INIT 1) or added to ``acc[i:]``. A Dirac
  kernel's point is then three statements for numba (the projection, the lane permute,
  ``vcmatvec``), and a direction's two points one more (the reconstruction).
* ``vpin(t)``: the tuple ``t`` unchanged, a point that LLVM's scheduler does not move loads,
  stores or arithmetic across (no instruction is emitted).

Fast-math flags are set on the arithmetic (the kernels are written for it).
"""
from __future__ import annotations

import operator

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.errors import TypingError
from numba.extending import intrinsic, models, overload, register_model

_FAST = ("fast",)
#: fast but for reassociation: sums that must add their terms in the order written, as a kernel
#: whose order pins its sums does (kernels_wilson's register order), to give its bits
_ORDERED = ("nnan", "ninf", "nsz", "arcp", "contract", "afn")

#: bumped whenever the code generated by these operations changes: kernels put it in their
#: source so that numba's on-disk cache (keyed on the kernel source) does not serve stale code
VERSION = 14


class SimdVector(types.Type):
    """``width`` lanes of a float32/float64 dtype held as one LLVM vector value."""

    def __init__(self, dtype, width):
        self.dtype = dtype
        self.width = int(width)
        super().__init__(name=f"SimdVector({dtype}, {self.width})")


@register_model(SimdVector)
class _SimdVectorModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        elt = dmm.lookup(fe_type.dtype).get_value_type()
        super().__init__(dmm, fe_type, ir.VectorType(elt, fe_type.width))


def _literal_int(t, what):
    if isinstance(t, types.IntegerLiteral):
        return int(t.literal_value)
    raise TypingError(f"{what} must be an integer literal or module-level constant, got {t}")


def _float_array(a, what):
    # the index is flat: a 1D array, or a C-contiguous one of any shape
    if not (isinstance(a, types.Array) and (a.ndim == 1 or a.layout == "C")
            and a.dtype in (types.float32, types.float64)):
        raise TypingError(f"{what} needs a 1D or C-contiguous float32/float64 array, got {a}")


def _vtype(context, vt):
    return context.get_value_type(vt)


def _pointer(context, builder, arrty, arr, idx, vt):
    ary = context.make_array(arrty)(context, builder, arr)
    ptr = builder.gep(ary.data, [idx])
    return builder.bitcast(ptr, _vtype(context, vt).as_pointer())


def _splat(builder, ty, value):
    """A vector of type ty with every lane = value."""
    v = ir.Constant(ty, ir.Undefined)
    for l in range(ty.count):
        v = builder.insert_element(v, value, ir.Constant(ir.IntType(32), l))
    return v


@intrinsic
def vload(typingctx, a, i, w):
    _float_array(a, "vload")
    width = _literal_int(w, "vload width")
    if not isinstance(i, types.Integer):
        raise TypingError(f"vload index must be an integer, got {i}")
    vt = SimdVector(a.dtype, width)

    def codegen(context, builder, sig, args):
        ptr = _pointer(context, builder, sig.args[0], args[0], args[1], vt)
        return builder.load(ptr, align=context.get_abi_sizeof(context.get_value_type(a.dtype)))

    return vt(a, i, w), codegen


@intrinsic
def vstore(typingctx, a, i, v):
    _float_array(a, "vstore")
    if not (isinstance(v, SimdVector) and v.dtype == a.dtype):
        raise TypingError(f"vstore of {v} into an array of {a.dtype}")

    def codegen(context, builder, sig, args):
        ptr = _pointer(context, builder, sig.args[0], args[0], args[1], v)
        builder.store(args[2], ptr, align=context.get_abi_sizeof(context.get_value_type(a.dtype)))
        return context.get_dummy_value()

    return types.void(a, i, v), codegen


@intrinsic
def vzero(typingctx, v):
    if not isinstance(v, SimdVector):
        raise TypingError(f"vzero needs a SimdVector, got {v}")

    def codegen(context, builder, sig, args):
        return ir.Constant(_vtype(context, v), None)

    return v(v), codegen


@intrinsic
def vsplat(typingctx, x, w):
    if x not in (types.float32, types.float64):
        raise TypingError(f"vsplat needs a float32/float64 scalar, got {x}")
    vt = SimdVector(x, _literal_int(w, "vsplat width"))

    def codegen(context, builder, sig, args):
        return _splat(builder, _vtype(context, vt), args[0])

    return vt(x, w), codegen


def _binary(op):
    @intrinsic
    def impl(typingctx, a, b):
        if not (isinstance(a, SimdVector) and a == b):
            raise TypingError(f"SIMD {op} of {a} and {b}")

        def codegen(context, builder, sig, args):
            return getattr(builder, op)(args[0], args[1], flags=_FAST)

        return a(a, b), codegen

    return impl


_vadd, _vsub, _vmul, _vdiv = _binary("fadd"), _binary("fsub"), _binary("fmul"), _binary("fdiv")


@intrinsic
def _vneg(typingctx, a):
    def codegen(context, builder, sig, args):
        return builder.fneg(args[0], flags=_FAST)

    return a(a), codegen


@intrinsic
def _vscale(typingctx, x, v):
    if not (isinstance(v, SimdVector) and isinstance(x, types.Float)):
        raise TypingError(f"SIMD scale of {v} by {x}")

    def codegen(context, builder, sig, args):
        s = context.cast(builder, args[0], x, v.dtype)
        return builder.fmul(_splat(builder, _vtype(context, v), s), args[1], flags=_FAST)

    return v(x, v), codegen


def _is_vec(*ts):
    return all(isinstance(t, SimdVector) for t in ts)


@overload(operator.add)
def _ov_add(a, b):
    if _is_vec(a, b):
        return lambda a, b: _vadd(a, b)


@overload(operator.sub)
def _ov_sub(a, b):
    if _is_vec(a, b):
        return lambda a, b: _vsub(a, b)


@overload(operator.mul)
def _ov_mul(a, b):
    if _is_vec(a, b):
        return lambda a, b: _vmul(a, b)
    if isinstance(a, types.Float) and _is_vec(b):
        return lambda a, b: _vscale(a, b)
    if isinstance(b, types.Float) and _is_vec(a):
        return lambda a, b: _vscale(b, a)


@overload(operator.truediv)
def _ov_div(a, b):
    if _is_vec(a, b):
        return lambda a, b: _vdiv(a, b)


@intrinsic
def vsqrt(typingctx, a):
    """Square root of every lane (``llvm.sqrt``)."""
    if not _is_vec(a):
        raise TypingError(f"vsqrt of {a}")

    def codegen(context, builder, sig, args):
        vt = args[0].type
        name = f"llvm.sqrt.v{vt.count}{'f64' if isinstance(vt.element, ir.DoubleType) else 'f32'}"
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vt, [vt]), name)
        return builder.call(fn, [args[0]])

    return a(a), codegen


@intrinsic
def vdouble(typingctx, a):
    """Every lane as a float64 (``fpext``; float64 lanes unchanged)."""
    if not _is_vec(a):
        raise TypingError(f"vdouble of {a}")
    vt = SimdVector(types.float64, a.width)

    def codegen(context, builder, sig, args):
        if a.dtype == types.float64:
            return args[0]
        return builder.fpext(args[0], _vtype(context, vt))

    return vt(a), codegen


@intrinsic
def vsum(typingctx, a):
    """The sum of the lanes (a pairwise tree of shuffles and adds)."""
    if not _is_vec(a) or a.width & (a.width - 1):
        raise TypingError(f"vsum of {a}: a vector of a power-of-two width")

    def codegen(context, builder, sig, args):
        v, n = args[0], a.width
        while n > 1:
            n //= 2
            half = ir.VectorType(ir.IntType(32), n)
            lo = builder.shuffle_vector(v, v, ir.Constant(half, list(range(n))))
            hi = builder.shuffle_vector(v, v, ir.Constant(half, list(range(n, 2 * n))))
            v = builder.fadd(lo, hi, flags=_FAST)
        return builder.extract_element(v, ir.Constant(ir.IntType(32), 0))

    return a.dtype(a), codegen


@overload(operator.neg)
def _ov_neg(a):
    if _is_vec(a):
        return lambda a: _vneg(a)


def _fmuladd(builder, x, y, z):
    vt = x.type
    name = f"llvm.fmuladd.v{vt.count}{'f64' if isinstance(vt.element, ir.DoubleType) else 'f32'}"
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vt, [vt, vt, vt]), name)
    return builder.call(fn, [x, y, z])


@intrinsic
def vfma(typingctx, a, b, c):
    """a * b + c."""
    if not (_is_vec(a, b, c) and a == b == c):
        raise TypingError(f"vfma of {a}, {b}, {c}")

    def codegen(context, builder, sig, args):
        return _fmuladd(builder, *args)

    return a(a, b, c), codegen


@intrinsic
def vfms(typingctx, a, b, c):
    """c - a * b."""
    if not (_is_vec(a, b, c) and a == b == c):
        raise TypingError(f"vfms of {a}, {b}, {c}")

    def codegen(context, builder, sig, args):
        return _fmuladd(builder, builder.fneg(args[0], flags=_FAST), args[1], args[2])

    return a(a, b, c), codegen


@intrinsic
def vxor(typingctx, v, x):
    if not _is_vec(v):
        raise TypingError(f"vxor needs a SimdVector, got {v}")
    mask = _literal_int(x, "vxor lane mask")
    if not 0 <= mask < v.width:
        raise TypingError(f"vxor mask {mask} out of range for {v.width} lanes")

    def codegen(context, builder, sig, args):
        m = ir.Constant(ir.VectorType(ir.IntType(32), v.width), [l ^ mask for l in range(v.width)])
        return builder.shuffle_vector(args[0], ir.Constant(args[0].type, ir.Undefined), m)

    return v(v, x), codegen


@intrinsic
def vpermute(typingctx, v, lanes, off):
    if not (_is_vec(v) and isinstance(lanes, types.Array) and isinstance(lanes.dtype, types.Integer)):
        raise TypingError(f"vpermute of {v} with lane table {lanes}")

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[1])(context, builder, args[1])
        i64 = ir.IntType(64)
        base = context.cast(builder, args[2], sig.args[2], types.int64)
        out = ir.Constant(args[0].type, ir.Undefined)
        for l in range(v.width):
            src = builder.load(builder.gep(ary.data, [builder.add(base, ir.Constant(i64, l))]))
            out = builder.insert_element(
                out, builder.extract_element(args[0], src), ir.Constant(ir.IntType(32), l)
            )
        return out

    return v(v, lanes, off), codegen


def _prefetch(locality):
    def impl(typingctx, a, i):
        if not isinstance(a, types.Array):
            raise TypingError(f"prefetch needs an array, got {a}")

        def codegen(context, builder, sig, args):
            ary = context.make_array(sig.args[0])(context, builder, args[0])
            ptr = builder.bitcast(builder.gep(ary.data, [args[1]]), ir.IntType(8).as_pointer())
            i32 = ir.IntType(32)
            ftype = ir.FunctionType(ir.VoidType(), [ptr.type, i32, i32, i32])
            fn = cgutils.get_or_insert_function(builder.module, ftype, "llvm.prefetch.p0i8")
            # read (0), the locality, data cache (1)
            builder.call(fn, [ptr, ir.Constant(i32, 0), ir.Constant(i32, locality), ir.Constant(i32, 1)])
            return context.get_dummy_value()

        return types.void(a, i), codegen

    return impl


prefetch = intrinsic(_prefetch(3))
prefetch_l2 = intrinsic(_prefetch(2))


def _prefetch_lines(locality):
    def impl(typingctx, a, i, n):
        if not isinstance(a, types.Array):
            raise TypingError(f"prefetch_lines needs an array, got {a}")
        N = _literal_int(n, "prefetch_lines count")

        def codegen(context, builder, sig, args):
            ary = context.make_array(sig.args[0])(context, builder, args[0])
            base = context.cast(builder, args[1], sig.args[1], types.uint64)
            line = max(1, 64 // context.get_abi_sizeof(context.get_value_type(a.dtype)))
            i32 = ir.IntType(32)
            ptype = ir.IntType(8).as_pointer()
            ftype = ir.FunctionType(ir.VoidType(), [ptype, i32, i32, i32])
            fn = cgutils.get_or_insert_function(builder.module, ftype, "llvm.prefetch.p0i8")
            for q in range(N):
                at = builder.add(base, ir.Constant(base.type, q * line))
                ptr = builder.bitcast(builder.gep(ary.data, [at]), ptype)
                builder.call(fn, [ptr, ir.Constant(i32, 0), ir.Constant(i32, locality), ir.Constant(i32, 1)])
            return context.get_dummy_value()

        return types.void(a, i, n), codegen

    return impl


prefetch_lines = intrinsic(_prefetch_lines(3))
prefetch_l2_lines = intrinsic(_prefetch_lines(2))


def _matvec(builder, element, x, N, ADJ, nvec):
    """The N x N complex matrix of ``element(i, j) = (re, im)`` (its adjoint for ``ADJ``) times the
    ``nvec`` complex N-vectors of the flat re/im list ``x``: the flat list of the products.  Each
    element is asked for once, where it is first used (a load there keeps few values live)."""
    out = [None] * len(x)
    for i in range(N):
        for j in range(N):
            ur, ui = element(j, i) if ADJ else element(i, j)
            for v in range(nvec):
                o = 2 * N * v
                hr, hi = x[o + 2 * j], x[o + 2 * j + 1]
                r, im = out[o + 2 * i], out[o + 2 * i + 1]
                if j == 0:
                    r, im = builder.fmul(ur, hr, flags=_FAST), builder.fmul(ur, hi, flags=_FAST)
                else:
                    r, im = _fmuladd(builder, ur, hr, r), _fmuladd(builder, ur, hi, im)
                nui = builder.fneg(ui, flags=_FAST)
                if ADJ:  # conj(m) h: re += ui hi, im -= ui hr
                    r, im = _fmuladd(builder, ui, hi, r), _fmuladd(builder, nui, hr, im)
                else:
                    r, im = _fmuladd(builder, nui, hi, r), _fmuladd(builder, ui, hr, im)
                out[o + 2 * i], out[o + 2 * i + 1] = r, im
    return out


@intrinsic
def vcmatvec(typingctx, m, b, h, n, adj):
    _float_array(m, "vcmatvec")
    N = _literal_int(n, "vcmatvec matrix size")
    ADJ = _literal_int(adj, "vcmatvec adjoint flag")
    if not (isinstance(h, types.UniTuple) and isinstance(h.dtype, SimdVector) and h.dtype.dtype == m.dtype
            and len(h) % (2 * N) == 0 and len(h) > 0):
        raise TypingError(f"vcmatvec needs a tuple of 2*{N}*k SimdVectors of {m.dtype}, got {h}")
    if not isinstance(b, types.Integer):
        raise TypingError(f"vcmatvec offset must be an integer, got {b}")
    vt = h.dtype
    nvec = len(h) // (2 * N)

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        base = context.cast(builder, args[1], sig.args[1], types.uint64)
        ptype = _vtype(context, vt).as_pointer()
        align = context.get_abi_sizeof(context.get_value_type(m.dtype))
        x = [builder.extract_value(args[2], k) for k in range(len(h))]

        def load(k):  # real plane k of the matrix (element k // 2, re/im)
            at = builder.add(base, ir.Constant(base.type, k * vt.width))
            return builder.load(builder.bitcast(builder.gep(ary.data, [at]), ptype), align=align)

        out = _matvec(builder, lambda i, j: (load(2 * (N * i + j)), load(2 * (N * i + j) + 1)), x, N, ADJ,
                      nvec)
        return context.make_tuple(builder, sig.return_type, out)

    return h(m, b, h, n, adj), codegen


def _third_row(builder, a, b):
    """conj(a x b) for the complex 3-vectors ``a``, ``b`` given as (re, im) pairs: the third row of
    an SU(3) matrix whose first two rows are ``a`` and ``b``."""
    out = []
    for i, j in ((1, 2), (2, 0), (0, 1)):  # element c = 0, 1, 2 of the row
        (pr, pi), (qr, qi), (rr, ri), (sr, si) = a[i], b[j], a[j], b[i]
        # x = p q - r s; the row element is conj(x) = (x_r, -x_i)
        xr = _fmuladd(builder, pr, qr, builder.fneg(builder.fmul(pi, qi, flags=_FAST), flags=_FAST))
        xr = builder.fsub(xr, _fmuladd(builder, rr, sr, builder.fneg(builder.fmul(ri, si, flags=_FAST),
                                                                        flags=_FAST)), flags=_FAST)
        xi = _fmuladd(builder, pr, qi, builder.fmul(pi, qr, flags=_FAST))
        xi = builder.fsub(xi, _fmuladd(builder, rr, si, builder.fmul(ri, sr, flags=_FAST)), flags=_FAST)
        out.append((xr, builder.fneg(xi, flags=_FAST)))
    return out


def _phase_third_row(context, builder, m, arr, base, ftab, tab, kk, vt):
    """The third row (3 (re, im) pairs) of the two-row matrix at ``arr[base:]``, times row ``kk`` of
    the factor table (skipped where ``kk`` is 0)."""
    rows = _load_vectors(context, builder, m, arr, base, 0, 12, vt)
    elements = [[(rows[2 * (3 * i + j)], rows[2 * (3 * i + j) + 1]) for j in range(3)] for i in range(2)]
    third = _third_row(builder, elements[0], elements[1])
    before = builder.block
    with builder.if_then(builder.icmp_unsigned("!=", kk, ir.Constant(kk.type, 0)), likely=False):
        at = builder.mul(kk, ir.Constant(kk.type, 2 * vt.width))
        fr, fi = _load_vectors(context, builder, ftab, tab, at, 0, 2, vt)
        scaled = []
        for xr, xi in third:
            yr = _fmuladd(builder, fr, xr, builder.fneg(builder.fmul(fi, xi, flags=_FAST), flags=_FAST))
            yi = _fmuladd(builder, fr, xi, builder.fmul(fi, xr, flags=_FAST))
            scaled.append((yr, yi))
        inside = builder.block
    merged = []
    for (xr, xi), (yr, yi) in zip(third, scaled):
        pair = []
        for plain, with_f in ((xr, yr), (xi, yi)):
            phi = builder.phi(xr.type)
            phi.add_incoming(with_f, inside)
            phi.add_incoming(plain, before)
            pair.append(phi)
        merged.append(tuple(pair))
    return merged


@intrinsic
def vthirdrow(typingctx, m, b, ftab, k, w):
    _float_array(m, "vthirdrow")
    _float_array(ftab, "vthirdrow factor table")
    W = _literal_int(w, "vthirdrow width")
    vt = SimdVector(m.dtype, W)
    tt = types.UniTuple(vt, 6)

    def codegen(context, builder, sig, args):
        base = context.cast(builder, args[1], sig.args[1], types.uint64)
        kk = context.cast(builder, args[3], sig.args[3], types.uint64)
        third = _phase_third_row(context, builder, m, args[0], base, ftab, args[2], kk, vt)
        return context.make_tuple(builder, tt, [x for pair in third for x in pair])

    return tt(m, b, ftab, k, w), codegen


@intrinsic
def vcmatvec3(typingctx, m, b, r, h, adj):
    _float_array(m, "vcmatvec3")
    ADJ = _literal_int(adj, "vcmatvec3 adjoint flag")
    vt = _vec_tuple(h, "vcmatvec3", 6)
    _vec_tuple(r, "vcmatvec3 third row", 6)

    def codegen(context, builder, sig, args):
        base = context.cast(builder, args[1], sig.args[1], types.uint64)
        third = _elements(builder, args[2], 6)

        def element(i, j):
            if i == 2:
                return third[2 * j], third[2 * j + 1]
            return tuple(_load_vectors(context, builder, m, args[0], base, 2 * (3 * i + j), 2, vt))

        x = _elements(builder, args[3], len(h))
        return context.make_tuple(builder, sig.return_type, _matvec(builder, element, x, 3, ADJ, len(h) // 6))

    return h(m, b, r, h, adj), codegen


def _vec_tuple(t, what, n=None):
    if not (isinstance(t, types.UniTuple) and isinstance(t.dtype, SimdVector)):
        raise TypingError(f"{what} needs a tuple of SimdVectors, got {t}")
    if n is not None and len(t) % n:
        raise TypingError(f"{what} needs a tuple of a multiple of {n} SimdVectors, got {len(t)}")
    return t.dtype


def _elements(builder, value, n):
    return [builder.extract_value(value, k) for k in range(n)]


@intrinsic
def vloadt(typingctx, a, i, n, w):
    _float_array(a, "vloadt")
    N, W = _literal_int(n, "vloadt count"), _literal_int(w, "vloadt width")
    if not isinstance(i, types.Integer):
        raise TypingError(f"vloadt index must be an integer, got {i}")
    vt = SimdVector(a.dtype, W)
    tt = types.UniTuple(vt, N)

    def codegen(context, builder, sig, args):
        base = context.cast(builder, args[1], sig.args[1], types.uint64)
        return context.make_tuple(builder, tt, _load_vectors(context, builder, a, args[0], base, 0, N, vt))

    return tt(a, i, n, w), codegen


def _load_vectors(context, builder, arrty, arr, base, first, n, vt):
    """The n vectors of ``vt`` at ``arr[base + first * W:]`` (base a uint64 value, first a constant)."""
    align = context.get_abi_sizeof(context.get_value_type(arrty.dtype))
    out = []
    for k in range(first, first + n):
        at = builder.add(base, ir.Constant(base.type, k * vt.width))
        out.append(builder.load(_pointer(context, builder, arrty, arr, at, vt), align=align))
    return out


def _store_vectors(context, builder, arrty, arr, base, first, values, vt):
    """Store ``values`` (vectors of ``vt``) at ``arr[base + first * W:]``."""
    align = context.get_abi_sizeof(context.get_value_type(arrty.dtype))
    for k, v in enumerate(values, first):
        at = builder.add(base, ir.Constant(base.type, k * vt.width))
        builder.store(v, _pointer(context, builder, arrty, arr, at, vt), align=align)


def _storet(name, nontemporal):
    """The tuple store ``name(a, i, t)``; ``nontemporal``: stores past the caches, each aligned to
    its vector (LLVM's ``!nontemporal`` needs the vector's own alignment to emit them)."""

    def impl(typingctx, a, i, t):
        _float_array(a, name)
        vt = _vec_tuple(t, name)
        if vt.dtype != a.dtype:
            raise TypingError(f"{name} of {t} into an array of {a.dtype}")

        def codegen(context, builder, sig, args):
            align = context.get_abi_sizeof(context.get_value_type(a.dtype))
            if nontemporal:
                align *= vt.width
            base = context.cast(builder, args[1], sig.args[1], types.uint64)
            nt = builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)]) if nontemporal else None
            for k, v in enumerate(_elements(builder, args[2], len(t))):
                at = builder.add(base, ir.Constant(base.type, k * vt.width))
                st = builder.store(v, _pointer(context, builder, sig.args[0], args[0], at, vt), align=align)
                if nt is not None:
                    st.set_metadata("nontemporal", nt)
            return context.get_dummy_value()

        return types.void(a, i, t), codegen

    impl.__name__ = name
    return impl


vstoret = intrinsic(_storet("vstoret", False))
#: ``vstoret`` past the caches: the address of every vector a multiple of its size; the kernel calls
#: :func:`store_fence` before it returns
vstoret_nt = intrinsic(_storet("vstoret_nt", True))


@intrinsic
def unowned(typingctx, a):
    """The array ``a`` without its owner (numba's meminfo) and parent object: numba's reference
    counts on it are then no-ops.  A kernel rebinds its array arguments so at its top, which the
    caller keeps alive for the call: an unboxed array's counts are atomic operations, which numba
    issues per site where an inlined helper takes the array, and an atomic operation waits for the
    streamed stores before it.  Any other argument comes back as it is, so a kernel can rebind
    every parameter without keeping a list of which are arrays."""
    if not isinstance(a, types.Array):
        return a(a), lambda context, builder, sig, args: args[0]

    def codegen(context, builder, sig, args):
        ary = context.make_array(a)(context, builder, value=args[0])
        ary.meminfo = cgutils.get_null_value(ary.meminfo.type)
        ary.parent = cgutils.get_null_value(ary.parent.type)
        return ary._getvalue()

    return a(a), codegen


@intrinsic
def store_fence(typingctx):
    """Orders the non-temporal stores before it ahead of every later store (``sfence`` on x86)."""

    def codegen(context, builder, sig, args):
        if "x86" in builder.module.triple or "i686" in builder.module.triple:
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []),
                                                "llvm.x86.sse.sfence")
            builder.call(fn, [])
        else:
            builder.fence("seq_cst")
        return context.get_dummy_value()

    return types.void(), codegen


@intrinsic
def vcaxpy(typingctx, g, x, y, phase):
    vt = _vec_tuple(y, "vcaxpy", 2)
    PH = _literal_int(phase, "vcaxpy phase") % 4
    if not (g == types.none or g == vt):
        raise TypingError(f"vcaxpy factor must be a {vt} or None, got {g}")
    if not (x == types.none or x == y):
        raise TypingError(f"vcaxpy of {x} and {y}")

    def codegen(context, builder, sig, args):
        ys = _elements(builder, args[2], len(y))
        xs = None if x == types.none else _elements(builder, args[1], len(y))
        gv = None if g == types.none else args[0]
        return context.make_tuple(builder, sig.return_type, _caxpy(builder, gv, xs, ys, PH))

    return y(g, x, y, phase), codegen


def _caxpy(builder, g, xs, ys, phase, flags=_FAST):
    """The vectors of ``x + g * i**phase * y`` for complex numbers as (re, im) vectors in turn:
    ``g`` a vector value or None for 1, ``xs`` None for 0; ``flags`` those of the add."""
    out = []
    for c in range(0, len(ys), 2):
        yr, yi = ys[c], ys[c + 1]
        # i**PHASE * y as (re, im) with signs: 1, i, -1, -i
        tr, ti, sr, si = ((yr, yi, 1, 1), (yi, yr, -1, 1), (yr, yi, -1, -1), (yi, yr, 1, -1))[phase % 4]
        for t, sg, k in ((tr, sr, 0), (ti, si, 1)):
            f = t if sg > 0 else builder.fneg(t, flags=_FAST)
            if xs is None:
                r = f if g is None else builder.fmul(g, f, flags=_FAST)
            elif g is None:
                r = builder.fadd(xs[c + k], f, flags=flags)
            else:
                r = _fmuladd(builder, g, f, xs[c + k])
            out.append(r)
    return out


def _caxpy2(builder, g, xs, fs, bs, pf, pb):
    """The vectors of ``(x + g * i**pf * f) + g * i**pb * b``, added in that order."""
    return _caxpy(builder, g, _caxpy(builder, g, xs, fs, pf, _ORDERED), bs, pb, _ORDERED)


@intrinsic
def vcaxpy2(typingctx, g, x, f, b, pf, pb):
    """``(x + g * i**PF * f) + g * i**PB * b`` (``g`` None for 1; phases literal), its terms added in
    that order: a direction's two points added as one point then the other, to the bits of a
    kernel that adds them a point at a time."""
    vt = _vec_tuple(x, "vcaxpy2", 2)
    PF, PB = (_literal_int(t, "vcaxpy2 phase") % 4 for t in (pf, pb))
    if not (g == types.none or g == vt) or f != x or b != x:
        raise TypingError(f"vcaxpy2 of {x}, {f}, {b} with factor {g}")

    def codegen(context, builder, sig, args):
        n = len(x)
        xs, fs, bs = (_elements(builder, args[k], n) for k in (1, 2, 3))
        gv = None if g == types.none else args[0]
        return context.make_tuple(builder, sig.return_type, _caxpy2(builder, gv, xs, fs, bs, PF, PB))

    return x(g, x, f, b, pf, pb), codegen


@intrinsic
def vproj2(typingctx, a, i, g, xa, ya, pa, xb, yb, pb, w):
    """Both spins of a half spinor, one statement: ``vcaxpy(g, vloadt(a, i + XA * W, 6, W),
    vloadt(a, i + YA * W, 6, W), PA)`` then the same with XB, YB, PB (vector offsets and
    phases literal)."""
    _float_array(a, "vproj2")
    W = _literal_int(w, "vproj2 width")
    offs = [_literal_int(t, "vproj2 offset or phase") for t in (xa, ya, pa, xb, yb, pb)]
    vt = SimdVector(a.dtype, W)
    if g != vt:
        raise TypingError(f"vproj2 factor must be a {vt}, got {g}")
    if not isinstance(i, types.Integer):
        raise TypingError(f"vproj2 index must be an integer, got {i}")
    tt = types.UniTuple(vt, 12)

    def codegen(context, builder, sig, args):
        base = context.cast(builder, args[1], sig.args[1], types.uint64)
        out = []
        for x0, y0, ph in (offs[:3], offs[3:]):
            xs = _load_vectors(context, builder, a, args[0], base, x0, 6, vt)
            ys = _load_vectors(context, builder, a, args[0], base, y0, 6, vt)
            out += _caxpy(builder, args[2], xs, ys, ph)
        return context.make_tuple(builder, tt, out)

    return tt(a, i, g, xa, ya, pa, xb, yb, pb, w), codegen


@intrinsic
def vrecon2(typingctx, acc, i, wf, wb, g, ua, la, pa, ub, lb, pb, init):
    """The spinors rebuilt from the half spinors of a direction's two points, ``wf`` of (1 + g
    gamma) and ``wb`` of (1 - g gamma) (12 vectors each: both spins), into ``acc[i:]``, one
    statement: spin a's 6 vectors at vector offset UA get ``wf[:6] + wb[:6]`` and those at LA get
    ``g * i**PA * (wf[:6] - wb[:6])``, the same with UB, LB, PB and ``[6:]``; stored when ``INIT``
    is 1, added to what is there when 0 (offsets, phases and INIT literal), wf first, then wb
    (:func:`vcaxpy2`), as a point at a time adds them.  ``wb`` None: the spinor rebuilt from one
    point's ``wf`` of (1 + g gamma)."""
    _float_array(acc, "vrecon2")
    vt = _vec_tuple(wf, "vrecon2", 12)
    if len(wf) != 12 or not (wb == wf or wb == types.none) or g != vt or vt.dtype != acc.dtype:
        raise TypingError(f"vrecon2 of {wf} and {wb} with factor {g} into {acc}")
    offs = [_literal_int(t, "vrecon2 offset or phase") for t in (ua, la, pa, ub, lb, pb)]
    INIT = _literal_int(init, "vrecon2 init")

    def codegen(context, builder, sig, args):
        base = context.cast(builder, args[1], sig.args[1], types.uint64)
        fs = _elements(builder, args[2], 12)
        bs = None if wb == types.none else _elements(builder, args[3], 12)
        for (up, low, ph), k in ((offs[:3], slice(0, 6)), (offs[3:], slice(6, 12))):
            if INIT and bs is None:
                hu, hl = fs[k], _caxpy(builder, args[4], None, fs[k], ph)
            elif INIT:
                hu = [builder.fadd(f, b, flags=_FAST) for f, b in zip(fs[k], bs[k])]
                diffs = [builder.fsub(f, b, flags=_FAST) for f, b in zip(fs[k], bs[k])]
                hl = _caxpy(builder, args[4], None, diffs, ph)
            else:
                au, al = (_load_vectors(context, builder, acc, args[0], base, at, 6, vt) for at in (up, low))
                if bs is None:
                    hu, hl = _caxpy(builder, None, au, fs[k], 0), _caxpy(builder, args[4], al, fs[k], ph)
                else:
                    hu = _caxpy2(builder, None, au, fs[k], bs[k], 0, 0)
                    hl = _caxpy2(builder, args[4], al, fs[k], bs[k], ph, ph + 2)
            _store_vectors(context, builder, acc, args[0], base, up, hu, vt)
            _store_vectors(context, builder, acc, args[0], base, low, hl, vt)
        return context.get_dummy_value()

    return types.void(acc, i, wf, wb, g, ua, la, pa, ub, lb, pb, init), codegen


@intrinsic
def vscalet(typingctx, s, t):
    vt = _vec_tuple(t, "vscalet")
    if s != vt:
        raise TypingError(f"vscalet factor must be a {vt}, got {s}")

    def codegen(context, builder, sig, args):
        out = [builder.fmul(args[0], v, flags=_FAST) for v in _elements(builder, args[1], len(t))]
        return context.make_tuple(builder, sig.return_type, out)

    return t(s, t), codegen


@intrinsic
def vpermt(typingctx, t, px, lanes, off):
    vt = _vec_tuple(t, "vpermt")
    if not (isinstance(px, types.Integer) and isinstance(lanes, types.Array)
            and isinstance(lanes.dtype, types.Integer) and isinstance(off, types.Integer)):
        raise TypingError(f"vpermt of {t} with lane mask {px}, table {lanes}, offset {off}")
    W = vt.width

    def codegen(context, builder, sig, args):
        n = len(t)
        vals = _elements(builder, args[0], n)
        i32, i64 = ir.IntType(32), ir.IntType(64)
        und = ir.Constant(vals[0].type, ir.Undefined)
        sel = context.cast(builder, args[1], sig.args[1], types.int64)
        merge = builder.append_basic_block("vpermt.merge")
        table = builder.append_basic_block("vpermt.table")
        sw = builder.switch(sel, table)
        incoming = []
        x = 1
        while x < W:
            blk = builder.append_basic_block(f"vpermt.xor{x}")
            sw.add_case(ir.Constant(i64, x), blk)
            builder.position_at_end(blk)
            mask = ir.Constant(ir.VectorType(i32, W), [l ^ x for l in range(W)])
            res = context.make_tuple(builder, sig.return_type,
                                     [builder.shuffle_vector(v, und, mask) for v in vals])
            incoming.append((res, builder.block))
            builder.branch(merge)
            x <<= 1
        builder.position_at_end(table)
        ary = context.make_array(sig.args[2])(context, builder, args[2])
        base = context.cast(builder, args[3], sig.args[3], types.int64)
        src = [builder.load(builder.gep(ary.data, [builder.add(base, ir.Constant(i64, l))]))
               for l in range(W)]
        out = []
        for v in vals:
            r = und
            for l in range(W):
                r = builder.insert_element(r, builder.extract_element(v, src[l]), ir.Constant(i32, l))
            out.append(r)
        incoming.append((context.make_tuple(builder, sig.return_type, out), builder.block))
        builder.branch(merge)
        builder.position_at_end(merge)
        phi = builder.phi(incoming[0][0].type)
        for v, b in incoming:
            phi.add_incoming(v, b)
        return phi

    return t(t, px, lanes, off), codegen


@intrinsic
def vpin(typingctx, t):
    """The vectors of ``t`` unchanged, held in registers at this point: an empty inline-assembly
    statement that reads and writes them and clobbers memory, so LLVM neither reassociates a sum
    across it nor moves a load or store over it (it emits no instruction)."""
    vt = _vec_tuple(t, "vpin")
    n = len(t)

    def codegen(context, builder, sig, args):
        ty = _vtype(context, vt)
        xs = _elements(builder, args[0], n)
        cons = ",".join(["=v"] * n + [str(k) for k in range(n)] + ["~{memory}"])
        ft = ir.FunctionType(ir.LiteralStructType([ty] * n), [ty] * n)
        res = builder.asm(ft, "", cons, xs, True)
        return context.make_tuple(builder, sig.return_type, [builder.extract_value(res, k) for k in range(n)])

    return t(t), codegen

