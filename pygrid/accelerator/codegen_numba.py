"""Kernel IR -> numba source for the OpenMP backend.

The kernel processes outer sites [lo, hi): the backend's accelerator_for
splits the outer sites over threads and calls it once per block (numba
``nogil``), so scratch tensors are allocated once per block.  The per-site
body is small loops over tensor components with the SIMD lane loop innermost
and a compile-time trip count, so LLVM turns it into vector instructions.
Table sizes are read at run time, so expressions of the same shape share one
compiled kernel whatever their site types.

Every array is passed flattened and indexed with explicit offsets: numba's
lowering of multi-dimensional indexing dominates compile time (measured here:
200 four-index accesses took 23.6 s to compile, the same as flat accesses 5.4 s).

Why not ``parallel=True``: measured here, the parfor passes double numba's
compile time (4.2 s against 2.3 s for a two-shift kernel) and the loaded
kernel is no faster than blocks on a thread pool.
"""
from __future__ import annotations


class _Src:
    def __init__(self):
        self.lines = []

    def __call__(self, indent, text):
        self.lines.append("    " * indent + text)


def kernel_signature(ir):
    args = ["lo", "hi", "out"] + [f"in{s}" for s in range(len(ir.slots))]
    for sh in range(ir.nshifts):
        args += [f"nb{sh}", f"pm{sh}", f"ln{sh}"]
    args += [f"T{t}" for t in range(len(ir.tables))] + ["coefs"]
    return args


def kernel_source(ir, nsimd, alias):
    """Python source of ``kernel(lo, hi, out, in..., shift tables..., tables..., coefs)``."""
    NS = int(nsimd)
    src = _Src()
    src(0, "import numpy as np")
    src(0, "from numba import njit")
    src(0, "")
    src(0, "@njit(fastmath=True, cache=True, nogil=True, error_model='numpy', boundscheck=False)")
    src(0, f"def kernel({', '.join(kernel_signature(ir))}):")
    res = ir.result
    direct = not alias and ir.ops[res][0] != "load"

    def off(c, r, l):
        r = f"{int(r) * NS}" if str(r).isdigit() else f"({r}) * {NS}"
        return f"({c}) * {2 * NS} + {r} + {l}"

    def acc(v, c, r, l):
        op = ir.ops[v]
        if op[0] == "load" and op[2] < 0:
            return f"in{op[1]}[b{op[1]} + {off(c, r, l)}]"
        if direct and v == res:
            return f"out[bo + {off(c, r, l)}]"
        return f"v{v}[{off(c, r, l)}]"

    for v, op in enumerate(ir.ops):
        kind = op[0]
        n = ir.ncomp(v)
        if kind == "load":
            if op[2] >= 0:
                src(1, f"v{v} = np.empty({n * 2 * NS}, dtype=out.dtype)")
        elif not (direct and v == res):
            src(1, f"v{v} = np.empty({n * 2 * NS}, dtype=out.dtype)")
        if kind == "const":
            src(1, f"for c in range({n}):")
            src(2, f"for l in range({NS}):")
            src(3, f"v{v}[{off('c', 0, 'l')}] = coefs[2 * ({op[1]} + c)]")
            src(3, f"v{v}[{off('c', 1, 'l')}] = coefs[2 * ({op[1]} + c) + 1]")
        if kind == "lincomb":
            for j, (_, c, _) in enumerate(op[1]):
                if c >= 0:
                    src(1, f"k{v}_{j}r = coefs[{2 * c}]")
                    src(1, f"k{v}_{j}i = coefs[{2 * c + 1}]")
    src(1, "for o in range(lo, hi):")
    src(2, f"bo = o * {ir.out_ncomp * 2 * NS}")
    for slot, n in enumerate(ir.slots):
        if any(op[0] == "load" and op[1] == slot and op[2] < 0 for op in ir.ops):
            src(2, f"b{slot} = o * {n * 2 * NS}")
    for v, op in enumerate(ir.ops):
        kind = op[0]
        n = ir.ncomp(v)
        d = lambda c, r, l: acc(v, c, r, l)  # noqa: E731
        if kind == "load":
            _, slot, sh = op
            if sh < 0:
                continue
            # neighbours are staged in scratch: unit stride when unpermuted, a lane gather at the wrap
            src(2, f"s_ = nb{sh}[o] * {n * 2 * NS}")
            src(2, f"p_ = pm{sh}[o] * {NS}")
            src(2, "if p_ == 0:")
            src(3, f"for i in range({n * 2 * NS}):")
            src(4, f"v{v}[i] = in{slot}[s_ + i]")
            src(2, "else:")
            src(3, f"for i in range({n * 2}):")
            src(4, f"for l in range({NS}):")
            src(5, f"v{v}[i * {NS} + l] = in{slot}[s_ + i * {NS} + ln{sh}[p_ + l]]")
        elif kind == "const":
            continue
        elif kind == "contract":
            _, a, b, (out_vars, sum_vars, oi, ai, bi), _t, ca, cb, nout = op
            sa = "-" if ca else ""
            sb = "-" if cb else ""
            ind = 2
            for var, ext in out_vars:
                src(ind, f"for {var} in range({ext}):")
                ind += 1
            src(ind, f"for l in range({NS}):")
            src(ind + 1, f"{d(oi, 0, 'l')} = 0.0")
            src(ind + 1, f"{d(oi, 1, 'l')} = 0.0")
            for var, ext in sum_vars:
                src(ind, f"for {var} in range({ext}):")
                ind += 1
            src(ind, f"for l in range({NS}):")
            src(ind + 1, f"ar = {acc(a, ai, 0, 'l')}")
            src(ind + 1, f"ai = {sa}{acc(a, ai, 1, 'l')}")
            src(ind + 1, f"br = {acc(b, bi, 0, 'l')}")
            src(ind + 1, f"bi = {sb}{acc(b, bi, 1, 'l')}")
            src(ind + 1, f"{d(oi, 0, 'l')} += ar * br - ai * bi")
            src(ind + 1, f"{d(oi, 1, 'l')} += ar * bi + ai * br")
        elif kind == "remap":
            _, a, (rt, ct), conj, nout = op
            sa = "-" if conj else ""
            _zero(src, d, nout, NS)
            src(2, f"for k in range(T{rt}.shape[0] // 2):")
            src(3, f"io = T{rt}[2 * k]")
            src(3, f"ia = T{rt}[2 * k + 1]")
            src(3, f"cr = T{ct}[2 * k]")
            src(3, f"ci = T{ct}[2 * k + 1]")
            src(3, f"for l in range({NS}):")
            src(4, f"ar = {acc(a, 'ia', 0, 'l')}")
            src(4, f"ai = {sa}{acc(a, 'ia', 1, 'l')}")
            src(4, f"{d('io', 0, 'l')} += cr * ar - ci * ai")
            src(4, f"{d('io', 1, 'l')} += cr * ai + ci * ar")
        elif kind == "lincomb":
            _, terms, n = op
            re, im = [], []
            for j, (u, c, sign) in enumerate(terms):
                s = "+" if sign > 0 else "-"
                ur, ui = acc(u, "c", 0, "l"), acc(u, "c", 1, "l")
                if c < 0:
                    re.append(f"{s} {ur}")
                    im.append(f"{s} {ui}")
                else:
                    re.append(f"{s} (k{v}_{j}r * {ur} - k{v}_{j}i * {ui})")
                    im.append(f"{s} (k{v}_{j}r * {ui} + k{v}_{j}i * {ur})")
            src(2, f"for c in range({n}):")
            src(3, f"for l in range({NS}):")
            src(4, f"{d('c', 0, 'l')} = {' '.join(re)}")
            src(4, f"{d('c', 1, 'l')} = {' '.join(im)}")
        elif kind == "where":
            _, m, a, b, n = op
            src(2, f"for c in range({n}):")
            src(3, "for r in range(2):")
            src(4, f"for l in range({NS}):")
            src(5, f"{d('c', 'r', 'l')} = {acc(a, 'c', 'r', 'l')} if {acc(m, 0, 0, 'l')} != 0 "
                   f"else {acc(b, 'c', 'r', 'l')}")
        elif kind == "compare":
            _, a, b, cmp = op
            src(2, f"for l in range({NS}):")
            src(3, f"{d(0, 0, 'l')} = 1.0 if {acc(a, 0, 0, 'l')} {cmp} {acc(b, 0, 0, 'l')} else 0.0")
            src(3, f"{d(0, 1, 'l')} = 0.0")
        else:
            raise ValueError(f"unknown IR op {kind}")
    if not direct:
        src(2, f"for c in range({ir.out_ncomp}):")
        src(3, "for r in range(2):")
        src(4, f"for l in range({NS}):")
        src(5, f"out[bo + {off('c', 'r', 'l')}] = {acc(res, 'c', 'r', 'l')}")
    src(0, "")
    return "\n".join(src.lines) + "\n"


def _zero(src, d, n, NS):
    src(2, f"for c in range({n}):")
    src(3, f"for l in range({NS}):")
    src(4, f"{d('c', 0, 'l')} = 0.0")
    src(4, f"{d('c', 1, 'l')} = 0.0")
