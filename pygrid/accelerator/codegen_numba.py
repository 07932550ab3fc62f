"""Kernel IR -> numba source for the OpenMP backend.

The accelerator_for pattern on the CPU: a ``prange`` over chunks of outer
sites (scratch tensors allocated once per chunk), a per-site body of small
loops over tensor components, and the SIMD lane loop innermost with a
compile-time trip count, so LLVM turns it into vector instructions.  Table
sizes are read at run time, so expressions of the same shape share one
compiled kernel whatever their site types.
"""
from __future__ import annotations


class _Src:
    def __init__(self):
        self.lines = []

    def __call__(self, indent, text):
        self.lines.append("    " * indent + text)


def kernel_source(ir, nsimd, alias):
    """Python source of a numba kernel ``kernel(nchunk, out, in..., shift tables..., tables..., coefs)``."""
    NS = int(nsimd)
    args = ["nchunk", "out"] + [f"in{s}" for s in range(len(ir.slots))]
    for sh in range(ir.nshifts):
        args += [f"nb{sh}", f"pm{sh}", f"ln{sh}"]
    args += [f"T{t}" for t in range(len(ir.tables))] + ["coefs"]
    src = _Src()
    src(0, "import numpy as np")
    src(0, "from numba import njit, prange")
    src(0, "")
    src(0, "@njit(parallel=True, fastmath=True, cache=True, nogil=True, error_model='numpy')")
    src(0, f"def kernel({', '.join(args)}):")
    src(1, "osites = out.shape[0]")
    src(1, "for ch in prange(nchunk):")
    src(2, "lo = (ch * osites) // nchunk")
    src(2, "hi = ((ch + 1) * osites) // nchunk")
    res = ir.result
    direct = not alias and ir.ops[res][0] not in ("load",)
    body = []  # (indent, text) lines of the per-site body
    # prologue: scratch buffers and coefficients
    for v, op in enumerate(ir.ops):
        kind = op[0]
        n = ir.ncomp(v)
        if kind == "load":
            if op[2] >= 0:
                src(2, f"b{v} = np.empty(({n}, 2, {NS}), dtype=out.dtype)")
        elif kind == "const":
            src(2, f"v{v} = np.empty(({n}, 2, {NS}), dtype=out.dtype)")
            src(2, f"for c in range({n}):")
            src(3, f"for l in range({NS}):")
            src(4, f"v{v}[c, 0, l] = coefs[2 * ({op[1]} + c)]")
            src(4, f"v{v}[c, 1, l] = coefs[2 * ({op[1]} + c) + 1]")
        elif not (direct and v == res):
            src(2, f"v{v} = np.empty(({n}, 2, {NS}), dtype=out.dtype)")
        if kind == "lincomb":
            for j, (_, c, _) in enumerate(op[1]):
                if c >= 0:
                    src(2, f"k{v}_{j}r = coefs[{2 * c}]")
                    src(2, f"k{v}_{j}i = coefs[{2 * c + 1}]")
    if alias or not direct:
        pass
    src(2, "for o in range(lo, hi):")
    if direct:
        src(3, "dst = out[o]")
    for v, op in enumerate(ir.ops):
        kind = op[0]
        d = "dst" if (direct and v == res) else f"v{v}"
        n = ir.ncomp(v)
        if kind == "load":
            _, slot, sh = op
            if sh < 0:
                src(3, f"v{v} = in{slot}[o]")
            else:
                src(3, f"p_ = pm{sh}[o]")
                src(3, f"s_ = in{slot}[nb{sh}[o]]")
                src(3, "if p_ == 0:")
                src(4, f"v{v} = s_")
                src(3, "else:")
                src(4, f"lm_ = ln{sh}[p_]")
                src(4, f"for c in range({n}):")
                src(5, "for r in range(2):")
                src(6, f"for l in range({NS}):")
                src(7, f"b{v}[c, r, l] = s_[c, r, lm_[l]]")
                src(4, f"v{v} = b{v}")
        elif kind == "const":
            pass
        elif kind == "contract":
            _, a, b, t, ca, cb, nout = op
            sa = "-" if ca else ""
            sb = "-" if cb else ""
            _zero(src, d, NS)
            src(3, f"for k in range(T{t}.shape[0]):")
            src(4, f"io = T{t}[k, 0]")
            src(4, f"ia = T{t}[k, 1]")
            src(4, f"ib = T{t}[k, 2]")
            src(4, f"for l in range({NS}):")
            src(5, f"ar = v{a}[ia, 0, l]")
            src(5, f"ai = {sa}v{a}[ia, 1, l]")
            src(5, f"br = v{b}[ib, 0, l]")
            src(5, f"bi = {sb}v{b}[ib, 1, l]")
            src(5, f"{d}[io, 0, l] += ar * br - ai * bi")
            src(5, f"{d}[io, 1, l] += ar * bi + ai * br")
        elif kind == "remap":
            _, a, (rt, ct), conj, nout = op
            sa = "-" if conj else ""
            _zero(src, d, NS)
            src(3, f"for k in range(T{rt}.shape[0]):")
            src(4, f"io = T{rt}[k, 0]")
            src(4, f"ia = T{rt}[k, 1]")
            src(4, f"cr = T{ct}[k, 0]")
            src(4, f"ci = T{ct}[k, 1]")
            src(4, f"for l in range({NS}):")
            src(5, f"ar = v{a}[ia, 0, l]")
            src(5, f"ai = {sa}v{a}[ia, 1, l]")
            src(5, f"{d}[io, 0, l] += cr * ar - ci * ai")
            src(5, f"{d}[io, 1, l] += cr * ai + ci * ar")
        elif kind == "lincomb":
            _, terms, n = op
            re, im = [], []
            for j, (u, c, sign) in enumerate(terms):
                s = "+" if sign > 0 else "-"
                if c < 0:
                    re.append(f"{s} v{u}[c, 0, l]")
                    im.append(f"{s} v{u}[c, 1, l]")
                else:
                    re.append(f"{s} (k{v}_{j}r * v{u}[c, 0, l] - k{v}_{j}i * v{u}[c, 1, l])")
                    im.append(f"{s} (k{v}_{j}r * v{u}[c, 1, l] + k{v}_{j}i * v{u}[c, 0, l])")
            src(3, f"for c in range({n}):")
            src(4, f"for l in range({NS}):")
            src(5, f"{d}[c, 0, l] = {' '.join(re)}")
            src(5, f"{d}[c, 1, l] = {' '.join(im)}")
        elif kind == "where":
            _, m, a, b, n = op
            src(3, f"for c in range({n}):")
            src(4, "for r in range(2):")
            src(5, f"for l in range({NS}):")
            src(6, f"{d}[c, r, l] = v{a}[c, r, l] if v{m}[0, 0, l] != 0 else v{b}[c, r, l]")
        elif kind == "compare":
            _, a, b, cmp = op
            src(3, f"for l in range({NS}):")
            src(4, f"{d}[0, 0, l] = 1.0 if v{a}[0, 0, l] {cmp} v{b}[0, 0, l] else 0.0")
            src(4, f"{d}[0, 1, l] = 0.0")
        else:
            raise ValueError(f"unknown IR op {kind}")
    if not direct:
        n = ir.out_ncomp
        src(3, "dst = out[o]")
        src(3, f"for c in range({n}):")
        src(4, "for r in range(2):")
        src(5, f"for l in range({NS}):")
        src(6, f"dst[c, r, l] = v{res}[c, r, l]")
    src(0, "")
    return "\n".join(src.lines) + "\n"


def _zero(src, d, NS):
    src(3, f"for c in range({d}.shape[0]):")
    src(4, f"for l in range({NS}):")
    src(5, f"{d}[c, 0, l] = 0.0")
    src(5, f"{d}[c, 1, l] = 0.0")
