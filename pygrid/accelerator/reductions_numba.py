"""Reductions and the solvers' fused vector updates for the OpenMP backend: numba kernels over
blocks of outer sites.

Each block of a launch writes one partial sum into its own slot (accumulated in
double, whatever the field's precision; in single the products of a few complex
numbers are formed and added in single, then widened: :data:`SINGLE_GROUP`) and the
host adds the partials.
Not numpy: ``np.dot`` runs on OpenBLAS's own thread pool, which competes with the
kernels' OpenMP threads for the cores and made a CG several times slower on a small
machine.

The kernels are generated per lane count and precision with explicit SIMD
vectors (:mod:`.simd_numba`): one component's lanes are one vector, widened to
double, with independent accumulators (:data:`NORM2_UNROLL`, :data:`INNER_UNROLL`) so
that the FMAs do not wait on each other.  A loop
over the lanes of one component is too short for LLVM's vectoriser, which left the
inner product scalar.

``axpy`` (z = a x + y) and ``axpy_norm2`` (the same and the norm of z in the same pass, as
Grid's CG does it) are one kernel each on any buffers of one shape, z possibly x or y: a
solver's vector updates without an expression's construction and lowering, and in
``axpy_norm2`` without the second pass over z that a separate norm would read.
``axpy_xpay`` (x = a p + x, then p = r + b p) is CG's two updates that read p, in one
pass that reads p once.
"""
from __future__ import annotations

import threading

import numpy as np

from . import simd_numba
from .codegen_c import tree_sum
from .compile_cache import load_module
from .host import KeptBinding, holds_a_buffer, keep, launch_bytes, read_only, streams

_modules: dict = {}


#: components per loop iteration of norm2 and of the inner product, each into its own accumulators.
#: An FMA waits 4-5 cycles for the one before it on the same accumulator: norm2's two chains a
#: component held a core to about 45 GB/s from L2 (AVX2, Zen 3), four ran 56-62; the inner
#: product's four chains already ran 69, and eight spilled (51-61)
NORM2_UNROLL = 2
INNER_UNROLL = 1

#: in single, complex numbers per widening to double: their products are formed and added in
#: single, and one sum widened.  Widening each one's product held a core to 58-62 GB/s even from
#: L1 on AVX2 (Zen 3: two ``vcvtps2pd`` per vector of 8 floats), and two cores to 73-86% of the
#: copy at 16^4.  Each widened sum is within (2 + log2 G) 2^-24 of the sum of its products' sizes
#: (Grid sums a whole site, 12 complex numbers of a spinor, in single before its double sum)
SINGLE_GROUP = 4

#: parts of a block that norm2 and the inner product read side by side, each a stream of its own:
#: past L2 a core keeps more lines in flight over more streams.  One core on AVX2 (Zen 3), GB/s
#: read in double from 16 MB (L3) and 64 MB: norm2 37 and 18 on one stream, 50 and 23 on two, 59 and
#: 25 on four; the inner product (two fields) 31 and 21 on one part each, 42 and 23 on two; in
#: single norm2 24 and 21 on one stream, 51 and 30 on four; in L1 and L2 within the spread
NORM2_STREAMS = 4
INNER_STREAMS = 2


def source(nsimd: int, dtype: str, norm2_unroll: int = NORM2_UNROLL, inner_unroll: int = INNER_UNROLL,
           group: int = SINGLE_GROUP, norm2_streams: int = NORM2_STREAMS,
           inner_streams: int = INNER_STREAMS) -> str:
    """Source of ``norm2_block`` and ``inner_block`` for buffers of ``nsimd`` lanes of ``dtype`` reals."""
    R, RI = int(norm2_unroll), int(inner_unroll)
    NS_, IS_ = int(norm2_streams), int(inner_streams)

    def lines(body, ind="        "):
        return "\n".join(ind + x for x in body)

    # In single the products of ``group`` complex numbers (|x|^2; the real and imaginary parts of
    # conj(a) b) are formed and added in single, and their sum widened once: see SINGLE_GROUP.
    pair = dtype == "float32"
    G = int(group) if pair else 1

    def nbody(qs, k):
        if pair:
            out = []
            for g, q in enumerate(qs):
                out += [f"x{k}_{g} = vload(a, ({q}) * S2, NS)", f"y{k}_{g} = vload(a, ({q}) * S2 + S1, NS)"]
            prods = [f"vfma(x{k}_{g}, x{k}_{g}, y{k}_{g} * y{k}_{g})" for g in range(len(qs))]
            return out + [f"s{k} = s{k} + vdouble({tree_sum(prods)})"]
        (q,) = qs
        return [f"x{k} = vdouble(vload(a, ({q}) * S2, NS))", f"y{k} = vdouble(vload(a, ({q}) * S2 + S1, NS))",
                f"s{k} = vfma(x{k}, x{k}, s{k})", f"t{k} = vfma(y{k}, y{k}, t{k})"]

    def ibody(qs, k):
        if pair:
            out = []
            for g, q in enumerate(qs):
                out += [f"p = ({q}) * S2",
                        f"ar{g} = vload(a, p, NS)", f"ai{g} = vload(a, p + S1, NS)",
                        f"br{g} = vload(b, p, NS)", f"bi{g} = vload(b, p + S1, NS)"]
            re = [f"vfma(ar{g}, br{g}, ai{g} * bi{g})" for g in range(len(qs))]
            im = [f"vfms(ai{g}, br{g}, ar{g} * bi{g})" for g in range(len(qs))]
            return out + [f"rr{k} = rr{k} + vdouble({tree_sum(re)})",
                          f"ri{k} = ri{k} + vdouble({tree_sum(im)})"]
        (q,) = qs
        return [f"p = ({q}) * S2",
                "ar = vdouble(vload(a, p, NS))", "ai = vdouble(vload(a, p + S1, NS))",
                "br = vdouble(vload(b, p, NS))", "bi = vdouble(vload(b, p + S1, NS))",
                f"rr{k} = vfma(ar, br, rr{k})", f"ii{k} = vfma(ai, bi, ii{k})",
                f"ri{k} = vfma(ar, bi, ri{k})", f"ir{k} = vfma(ai, br, ir{k})"]

    z_norm = lines(["s = s + vdouble(vfma(zr, zr, zi * zi))"] if pair else
                   ["s = vfma(zr, zr, s)", "t = vfma(zi, zi, t)"])
    zero = "vsplat(0.0, NS)"
    n_acc = ("s",) if pair else ("s", "t")
    i_acc = ("rr", "ri") if pair else ("rr", "ii", "ri", "ir")
    n_init = lines([f"{v}{k} = {zero}" for v in n_acc for k in range(R * NS_)], "    ")
    i_init = lines([f"{v}{k} = {zero}" for k in range(RI * IS_) for v in i_acc], "    ")

    def at(t, k):  # stream t's components of step k: stream t starts H components after stream t-1
        return [f"q + {f'U({t}) * H + ' if t else ''}U({k * G + g})" for g in range(G)]

    n_main = lines([x for t in range(NS_) for k in range(R) for x in nbody(at(t, k), t * R + k)])
    i_main = lines([x for t in range(IS_) for k in range(RI) for x in ibody(at(t, k), t * RI + k)])
    # the components past the streams' last whole steps, one at a time
    n_tail = f"    for q in range(q2, q1):\n{lines(nbody(['q'], 0))}\n" if R * G * NS_ > 1 else ""
    i_tail = f"    for q in range(q2, q1):\n{lines(ibody(['q'], 0))}\n" if RI * G * IS_ > 1 else ""
    n_sum = " + ".join(f"s{k}" if pair else f"(s{k} + t{k})" for k in range(R * NS_))
    re_sum = " + ".join(f"rr{k}" if pair else f"(rr{k} + ii{k})" for k in range(RI * IS_))
    im_sum = " + ".join(f"ri{k}" if pair else f"(ri{k} - ir{k})" for k in range(RI * IS_))
    head = f"# reductions, Nsimd {int(nsimd)}, {dtype}, unrolled {R}, {RI}, group {G}, streams {NS_}, {IS_}"
    return f'''{head}; simd_numba {simd_numba.VERSION}
import numpy as np
from numba import njit

from pygrid.accelerator.simd_numba import (store_fence, vdouble, vfma, vfms, vload, vsplat, vstore,
                                           vstoret_nt, vsum)

NS = {int(nsimd)}
Z = np.{dtype}
U = np.uint64
S1 = U(NS)
S2 = U(2 * NS)
R = U({R * G})
RI = U({RI * G})
_jit = njit(nogil=True, cache=True, error_model="numpy", boundscheck=False)


@njit(nogil=True, cache=True, inline="always")
def block(lo, n, nb):
    """The index of the block of [0, n) split into nb that starts at lo (lo = b * n // nb)."""
    return (lo * nb + n - 1) // n if n > 0 else 0


@_jit
def norm2_block(lo, hi, a, ncomp, n, partial):
    """partial[b] = sum of squares of outer sites [lo, hi), block b of len(partial) over [0, n)."""
{n_init}
    q0, q1 = U(lo) * U(ncomp), U(hi) * U(ncomp)
    H = (q1 - q0) // U({NS_}) // R * R
    for q in range(q0, q0 + H, R):
{n_main}
    q2 = q0 + U({NS_}) * H
{n_tail}    partial[block(lo, n, len(partial))] = vsum({n_sum})


@_jit
def inner_block(lo, hi, a, b, ncomp, n, partial_re, partial_im):
    """partial[k] = sum of conj(a) b over outer sites [lo, hi), block k of len(partial_re) over [0, n)."""
{i_init}
    q0, q1 = U(lo) * U(ncomp), U(hi) * U(ncomp)
    H = (q1 - q0) // U({IS_}) // RI * RI
    for q in range(q0, q0 + H, RI):
{i_main}
    q2 = q0 + U({IS_}) * H
{i_tail}    k = block(lo, n, len(partial_re))
    partial_re[k] = vsum({re_sum})
    partial_im[k] = vsum({im_sum})


@njit(nogil=True, cache=True, inline="always")
def caxpy(x, y, p, Ar, Ai):
    """The planes of (Ar + i Ai) x + y for the component whose real plane starts at p."""
    xr = vload(x, p, NS)
    xi = vload(x, p + S1, NS)
    return vfms(Ai, xi, vfma(Ar, xr, vload(y, p, NS))), vfma(Ai, xr, vfma(Ar, xi, vload(y, p + S1, NS)))


@njit(nogil=True, cache=True, inline="always")
def axpy_comp(z, x, y, p, Ar, Ai):
    """z = (Ar + i Ai) x + y for the component whose real plane starts at p; returns z's planes
    (every load before the stores: z may be x or y)."""
    zr, zi = caxpy(x, y, p, Ar, Ai)
    vstore(z, p, zr)
    vstore(z, p + S1, zi)
    return zr, zi


@_jit
def axpy_block(lo, hi, z, x, y, ncomp, a):
    """z = (a[0] + i a[1]) x + y on outer sites [lo, hi)."""
    Ar = vsplat(Z(a[0]), NS)
    Ai = vsplat(Z(a[1]), NS)
    for q in range(U(lo) * U(ncomp), U(hi) * U(ncomp)):
        axpy_comp(z, x, y, q * S2, Ar, Ai)


@_jit
def axpy_stream_block(lo, hi, z, x, y, ncomp, a):
    """axpy_block with z written past the caches (z apart from x and y, aligned to a vector)."""
    Ar = vsplat(Z(a[0]), NS)
    Ai = vsplat(Z(a[1]), NS)
    for q in range(U(lo) * U(ncomp), U(hi) * U(ncomp)):
        vstoret_nt(z, q * S2, caxpy(x, y, q * S2, Ar, Ai))
    store_fence()


@_jit
def axpy_norm2_block(lo, hi, z, x, y, ncomp, a, n, partial):
    """axpy_block, and partial[b] = the sum of squares of z over [lo, hi) as written (block b of
    len(partial) over [0, n))."""
    Ar = vsplat(Z(a[0]), NS)
    Ai = vsplat(Z(a[1]), NS)
    s = vsplat(0.0, NS)
    t = vsplat(0.0, NS)
    for q in range(U(lo) * U(ncomp), U(hi) * U(ncomp)):
        zr, zi = axpy_comp(z, x, y, q * S2, Ar, Ai)
{z_norm}
    partial[block(lo, n, len(partial))] = vsum(s + t)


@_jit
def axpy_xpay_block(lo, hi, x, p, r, ncomp, c):
    """x = (c[0] + i c[1]) p + x, then p = r + (c[2] + i c[3]) p (the p before, in both), on outer
    sites [lo, hi)."""
    Ar = vsplat(Z(c[0]), NS)
    Ai = vsplat(Z(c[1]), NS)
    Br = vsplat(Z(c[2]), NS)
    Bi = vsplat(Z(c[3]), NS)
    for q in range(U(lo) * U(ncomp), U(hi) * U(ncomp)):
        o = q * S2
        pr = vload(p, o, NS)
        pi = vload(p, o + S1, NS)
        xr = vfms(Ai, pi, vfma(Ar, pr, vload(x, o, NS)))
        xi = vfma(Ai, pr, vfma(Ar, pi, vload(x, o + S1, NS)))
        nr = vfms(Bi, pi, vfma(Br, pr, vload(r, o, NS)))
        ni = vfma(Bi, pr, vfma(Br, pi, vload(r, o + S1, NS)))
        vstore(x, o, xr)
        vstore(x, o + S1, xi)
        vstore(p, o, nr)
        vstore(p, o + S1, ni)
'''


def kernels(nsimd: int, dtype):
    m = _modules.get((nsimd, dtype))  # keyed by the dtype object: str(dtype) costs microseconds a call
    if m is None:
        key = (int(nsimd), str(np.dtype(dtype)))
        m = _modules[(nsimd, dtype)] = load_module(source(*key), "pygrid_red",
                                                   label=f"the reductions ({key[1]}, Nsimd {key[0]})")
    return m


# One partial sum per block of the launch, not per site: allocating, faulting in and adding an
# array of 8 bytes a site took about 11 us of a 130 us norm2 at 16^4 in double.
#
# A solver reduces the same few fields every iteration, and the views hand out the same buffers
# each time: a call on buffers seen before runs the launch bound to them (the backend's
# ``bind_kernel``) into the partial sums kept with it.  What that skips (the kernel lookup, the
# flat aliases, the partials' allocation, the launch lookup) is Python that runs with the caches
# full of the field just read, several microseconds each.

def norm2(backend, a):
    key = _KEYS["norm2"]((a,))
    kept = _KEPT.get(key)
    if kept is not None and kept.take(backend, (a,)):
        return kept.run_held()[0]
    n = a.shape[0]
    partial = np.zeros(backend.blocks(a.nbytes))
    args = (read_only(a.reshape(-1)), a.shape[1], n, partial)
    kernel = kernels(a.shape[3], a.dtype).norm2_block
    backend.accelerator_for(n, kernel, *args)
    _keep(backend, kernel, args, (partial,), key, (a,))
    return _total(partial)


def inner_product(backend, a, b):
    key = _KEYS["inner_product"]((a, b))
    kept = _KEPT.get(key)
    if kept is not None and kept.take(backend, (a, b)):
        re, im = kept.run_held()
        return complex(re, im)
    n = a.shape[0]
    nb = backend.blocks(a.nbytes)
    pr, pi = np.zeros(nb), np.zeros(nb)
    args = (read_only(a.reshape(-1)), read_only(b.reshape(-1)), a.shape[1], n, pr, pi)
    kernel = kernels(a.shape[3], a.dtype).inner_block
    backend.accelerator_for(n, kernel, *args)
    _keep(backend, kernel, args, (pr, pi), key, (a, b))
    return complex(_total(pr), _total(pi))


def axpy(backend, z, a, x, y):
    """z = a x + y (a complex) on buffers of one shape and dtype; z may be x or y."""
    _axpy(backend, z, complex(a), x, y, False)


def axpy_norm2(backend, z, a, x, y):
    """:func:`axpy`, returning the sum of squares of z as written (one pass)."""
    return _axpy(backend, z, complex(a), x, y, True)


def _axpy(backend, z, a, x, y, norm):
    key = _KEYS["axpy_norm2" if norm else "axpy"]((z, x, y))
    kept = _KEPT.get(key)
    if kept is not None and kept.take(backend, (z, x, y)):
        r = kept.run_held((a.real, a.imag))
        return r[0] if norm else None
    n = z.shape[0]
    # z's flat alias writable, x's and y's read-only even where they are z (the same memory: each
    # component is read before it is written)
    head = (z.reshape(-1), read_only(x.reshape(-1)), read_only(y.reshape(-1)), z.shape[1],
            np.array([a.real, a.imag]))
    mod = kernels(z.shape[3], z.dtype)
    partials = (np.zeros(backend.blocks(z.nbytes)),) if norm else ()
    tail = (n, *partials) if norm else ()
    if norm:
        kernel = mod.axpy_norm2_block
    else:
        far = streams(z, (x, y), z.shape[3], backend.threads())
        kernel = mod.axpy_stream_block if far else mod.axpy_block
    backend.accelerator_for(n, kernel, *head, *tail)
    _keep(backend, kernel, head + tail, partials, key, (z, x, y), n=n, nhead=len(head))
    return _total(partials[0]) if norm else None


def axpy_xpay(backend, x, a, p, r, b):
    """x = a p + x, then p = r + b p with the p before (a, b complex), on three distinct buffers of
    one shape and dtype, in one pass."""
    key = _KEYS["axpy_xpay"]((x, p, r))
    a, b = complex(a), complex(b)
    kept = _KEPT.get(key)
    if kept is not None and kept.take(backend, (x, p, r)):
        kept.run_held((a.real, a.imag, b.real, b.imag))
        return
    n = x.shape[0]
    args = (x.reshape(-1), p.reshape(-1), read_only(r.reshape(-1)), x.shape[1],
            np.array([a.real, a.imag, b.real, b.imag]))
    kernel = kernels(x.shape[3], x.dtype).axpy_xpay_block
    backend.accelerator_for(n, kernel, *args)
    _keep(backend, kernel, args, (), key, (x, p, r), n=n)


#: :data:`_KEYS` of a call's buffers -> _Kept
_KEPT: dict = {}
MAX_KEPT = 64


class _Kept(KeptBinding):
    """A reduction's or update's launch on the flat aliases of its buffers and the partial sums it
    writes: ``bound.again(osites)`` on ``args`` (the update's coefficients written into the last
    array of ``head`` first)."""

    __slots__ = ("head", "partials")

    def serves(self, backend, buffers):
        """Whether this launch serves ``buffers`` on ``backend`` now."""
        refs = self.refs
        for i in range(len(buffers)):
            if refs[i]() is not buffers[i]:
                return False
        return self.backend is backend and backend.blocks(self.nbytes) == self.nblocks

    def take(self, backend, buffers):
        """True, holding the lock, when this launch serves ``buffers`` on ``backend`` now."""
        return self.serves(backend, buffers) and self.lock.acquire(False)

    def set_coefficients(self, coefs):
        c = self.head[-1]   # the coefficients' array, where the bound launch reads them
        for i in range(len(coefs)):
            c[i] = coefs[i]

    def totals(self):
        return [_total(p) for p in self.partials]


#: the keys of :data:`_KEPT` per call, from its buffers
_KEYS = {"norm2": lambda b: (id(b[0]), 0), "inner_product": lambda b: (id(b[0]), id(b[1])),
         "axpy": lambda b: (False, id(b[0]), id(b[1]), id(b[2])),
         "axpy_norm2": lambda b: (True, id(b[0]), id(b[1]), id(b[2])),
         "axpy_xpay": lambda b: ("xp", id(b[0]), id(b[1]), id(b[2]))}


def kept_update(backend, name, buffers):
    """The :class:`_Kept` launch of the last call of ``name`` on ``buffers`` (in the call's order),
    where it serves them on ``backend``; else None."""
    kept = _KEPT.get(_KEYS[name](buffers))
    return kept if kept is not None and kept.serves(backend, buffers) else None


def _keep(backend, kernel, args, partials, key, buffers, n=None, nhead=None):
    """Keep the launch of ``kernel`` on ``args`` for the next call on ``buffers`` (``head``: the
    first ``nhead`` of them, all by default)."""
    bind = getattr(backend, "kept_launch", None)
    # the flat aliases hold the memory's owner, not a buffer that is a view of it
    if bind is None or holds_a_buffer(args, buffers):
        return
    kept = _Kept()
    kept.backend = backend
    kept.osites = args[-len(partials) - 1] if n is None else n
    kept.nbytes = launch_bytes(args)
    kept.nblocks = backend.blocks(kept.nbytes)
    # the updates without partial sums write each outer site alone: their pieces may go to any thread
    kept.bound, kept.partials = bind(kernel, args, kept.nblocks, balance=not partials), partials
    kept.head = args if nhead is None else args[:nhead]
    kept.args = args   # held: the bound launch holds its arguments weakly
    kept.lock = threading.Lock()
    keep(_KEPT, key, kept, buffers, MAX_KEPT)


def _total(partial):
    # the blocks' partial sums in order; a list's sum, not numpy's: a handful of numbers, in a
    # call whose Python runs with the caches full of the field it has just read
    return float(sum(partial.tolist()))
