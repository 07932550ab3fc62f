"""Kernel IR -> C for the GPU backends: CUDA C (CUDA and HIP through CuPy) and OpenCL C (SYCL through dpctl).

One emitter, two dialects; what differs (kernel qualifiers, address spaces,
the thread index, fp64 enabling) is the small table ``DIALECTS``.

The kernel is SIMT: one thread per (outer site, lane), the lane fastest, so
consecutive threads read and write consecutive addresses of the
``[osites][ncomp][2][nsimd]`` buffers (coalesced)::

    idx = global thread index;  o = idx / NS;  l = idx % NS

A shifted read (``cshift``) is Grid's ``coalescedReadPermute``: the thread reads
outer site ``nbr[o]`` at lane ``lanes[perm[o] * NS + l]`` (row 0 of ``lanes`` is
the identity), so a load is only a different base index, never a copy.

Each IR value of the thread is either read in place (unshifted or shifted
loads, constants from the coefficient vector) or held in two small private
arrays ``vK_r[n]``, ``vK_i[n]`` (real and imaginary parts).  The result is
written to ``out`` only at the end, so in-place evaluation (``x @= 2 * x``) is
safe: every thread reads only its own site before it writes it.

Products and remaps walk the lowering's CSR tables, passed as kernel
arguments (``int`` rows; remap coefficients as real pairs in the kernel's
precision), exactly like the OpenMP backend's operation library.

Kernel arguments, in order (the same for every dialect and backend)::

    out, in0..in{S-1}, (nb_k, pm_k, ln_k) per shift table, T0..T{N-1}, coefs, osites

with ``real`` = double or float, integer tables ``const int*`` and ``osites`` an ``int``.
"""
from __future__ import annotations

import hashlib

KERNEL_NAME = "pygrid_kernel"

DIALECTS = {
    "cuda": {
        "preamble": {"float64": "", "float32": ""},
        "kernel": 'extern "C" __global__ void',
        "global": "",
        "restrict": "__restrict__",
        "thread_index": "(long)blockIdx.x * (long)blockDim.x + (long)threadIdx.x",
    },
    "opencl": {
        "preamble": {"float64": "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n", "float32": ""},
        "kernel": "__kernel void",
        "global": "__global ",
        "restrict": "restrict",
        "thread_index": "(long)get_global_id(0)",
    },
}
# HIP compiles the CUDA dialect unchanged (hipRTC accepts it; CuPy for ROCm hipifies the rest)
DIALECTS["hip"] = DIALECTS["cuda"]

_CTYPE = {"float64": "double", "float32": "float"}
_CMP = {"<": "<", "<=": "<=", ">": ">", ">=": ">="}


def arg_kinds(ir):
    """(name, kind) of each kernel argument; kind is 'out', 'real', 'int', 'rtable', 'coefs' or 'osites'."""
    args = [("out", "out")] + [(f"in{s}", "real") for s in range(len(ir.slots))]
    for sh in range(ir.nshifts):
        args += [(f"nb{sh}", "int"), (f"pm{sh}", "int"), (f"ln{sh}", "int")]
    for t, tab in enumerate(ir.tables):
        args.append((f"T{t}", "int" if tab.dtype.kind in "iu" else "rtable"))
    args += [("coefs", "coefs"), ("osites", "osites")]
    return args


def kernel_source(ir, nsimd, alias, dtype="float64", dialect="cuda"):
    """Source of ``pygrid_kernel`` for ``ir`` with ``nsimd`` lanes of ``dtype`` reals in ``dialect``."""
    D = DIALECTS[dialect]
    NS = int(nsimd)
    real = _CTYPE[str(dtype)]
    G = D["global"]
    # with an aliased output the result buffer is also an input: no restrict on the reals then
    R = "" if alias else " " + D["restrict"]

    params = []
    for name, kind in arg_kinds(ir):
        if kind == "out":
            params.append(f"{G}{real}*{R} {name}")
        elif kind in ("real", "rtable", "coefs"):
            params.append(f"{G}const {real}*{R} {name}")
        elif kind == "int":
            params.append(f"{G}const int* {D['restrict']} {name}")
        else:
            params.append(f"const int {name}")

    lines = [
        f"/* pygrid generated kernel: {dialect}, {real}, nsimd={NS}, ops={len(ir.ops)} */",
        D["preamble"][str(dtype)].rstrip("\n"),
        f"{D['kernel']} {KERNEL_NAME}(",
        "    " + ",\n    ".join(params) + ")",
        "{",
        f"    const long idx = {D['thread_index']};",
        f"    if (idx >= (long)osites * {NS}) return;",
        f"    const int o = (int)(idx / {NS});",
        f"    const int l = (int)(idx - (long)o * {NS});",
    ]

    def emit(text, indent=1):
        lines.append("    " * indent + text)

    # accessors: value v, component expression c -> (re, im) C expressions
    acc = {}

    def re(v, c):
        return acc[v][0](c)

    def im(v, c):
        return acc[v][1](c)

    def local(v):
        acc[v] = (lambda c, v=v: f"v{v}_r[{c}]", lambda c, v=v: f"v{v}_i[{c}]")

    S2 = 2 * NS
    for v, op in enumerate(ir.ops):
        kind = op[0]
        n = ir.ncomp(v)
        if kind == "load":
            _, slot, sh = op
            if sh < 0:
                emit(f"const long b{v} = (long)o * {n * S2} + l;")
            else:
                emit(f"const long b{v} = (long)nb{sh}[o] * {n * S2} + ln{sh}[pm{sh}[o] * {NS} + l];")
            acc[v] = (lambda c, v=v, s=slot: f"in{s}[b{v} + ({c}) * {S2}]",
                      lambda c, v=v, s=slot: f"in{s}[b{v} + ({c}) * {S2} + {NS}]")
            continue
        if kind == "const":
            off = op[1]
            acc[v] = (lambda c, off=off: f"coefs[2 * ({off} + ({c}))]",
                      lambda c, off=off: f"coefs[2 * ({off} + ({c})) + 1]")
            continue
        emit(f"{real} v{v}_r[{n}], v{v}_i[{n}];")
        if kind == "contract":
            _, a, b, _loops, (ts, tia, tib), ca, cb, nout = op
            sa = "-" if ca else ""
            sb = "-" if cb else ""
            emit(f"for (int c = 0; c < {nout}; ++c) {{")
            emit(f"{real} sr = 0, si = 0;", 2)
            emit(f"for (int k = T{ts}[c]; k < T{ts}[c + 1]; ++k) {{", 2)
            emit(f"const int ja = T{tia}[k], jb = T{tib}[k];", 3)
            emit(f"const {real} ar = {re(a, 'ja')}, ai = {sa}{im(a, 'ja')};", 3)
            emit(f"const {real} br = {re(b, 'jb')}, bi = {sb}{im(b, 'jb')};", 3)
            emit("sr += ar * br - ai * bi;", 3)
            emit("si += ar * bi + ai * br;", 3)
            emit("}", 2)
            emit(f"v{v}_r[c] = sr; v{v}_i[c] = si;", 2)
            emit("}")
        elif kind == "remap":
            _, a, (ts, tia, tcf), conj, nout = op
            sa = "-" if conj else ""
            emit(f"for (int c = 0; c < {nout}; ++c) {{")
            emit(f"{real} sr = 0, si = 0;", 2)
            emit(f"for (int k = T{ts}[c]; k < T{ts}[c + 1]; ++k) {{", 2)
            emit(f"const int ja = T{tia}[k];", 3)
            emit(f"const {real} cr = T{tcf}[2 * k], ci = T{tcf}[2 * k + 1];", 3)
            emit(f"const {real} ar = {re(a, 'ja')}, ai = {sa}{im(a, 'ja')};", 3)
            emit("sr += cr * ar - ci * ai;", 3)
            emit("si += cr * ai + ci * ar;", 3)
            emit("}", 2)
            emit(f"v{v}_r[c] = sr; v{v}_i[c] = si;", 2)
            emit("}")
        elif kind == "lincomb":
            terms = op[1]
            ks = []
            for j, (_, c, sign) in enumerate(terms):
                neg = "-" if sign < 0 else ""
                if c >= 0:
                    emit(f"const {real} k{v}_{j}r = {neg}coefs[{2 * c}], k{v}_{j}i = {neg}coefs[{2 * c + 1}];")
                    ks.append((f"k{v}_{j}r", f"k{v}_{j}i"))
                else:
                    ks.append((f"({real}){float(sign)!r}", None))
            emit(f"for (int c = 0; c < {n}; ++c) {{")
            rs, is_ = [], []
            for (t, _, _), (kr, ki) in zip(terms, ks):
                xr, xi = re(t, "c"), im(t, "c")
                if ki is None:
                    rs.append(f"{kr} * {xr}")
                    is_.append(f"{kr} * {xi}")
                else:
                    rs.append(f"{kr} * {xr} - {ki} * {xi}")
                    is_.append(f"{kr} * {xi} + {ki} * {xr}")
            emit(f"v{v}_r[c] = {' + '.join(rs)};", 2)
            emit(f"v{v}_i[c] = {' + '.join(is_)};", 2)
            emit("}")
        elif kind == "where":
            _, m, a, b, _n = op
            emit(f"const int m{v} = {re(m, '0')} != 0;")
            emit(f"for (int c = 0; c < {n}; ++c) {{")
            emit(f"v{v}_r[c] = m{v} ? {re(a, 'c')} : {re(b, 'c')};", 2)
            emit(f"v{v}_i[c] = m{v} ? {im(a, 'c')} : {im(b, 'c')};", 2)
            emit("}")
        elif kind == "compare":
            _, a, b, cmp = op
            emit(f"v{v}_r[0] = ({re(a, '0')} {_CMP[cmp]} {re(b, '0')}) ? ({real})1 : ({real})0;")
            emit(f"v{v}_i[0] = 0;")
        else:
            raise ValueError(f"unknown IR op {kind}")
        local(v)
    res = ir.result
    emit(f"const long bo = (long)o * {ir.out_ncomp * S2} + l;")
    emit(f"for (int c = 0; c < {ir.out_ncomp}; ++c) {{")
    emit(f"out[bo + c * {S2}] = {re(res, 'c')};", 2)
    emit(f"out[bo + c * {S2} + {NS}] = {im(res, 'c')};", 2)
    emit("}")
    lines.append("}")
    return "\n".join(x for x in lines if x != "") + "\n"


def source_hash(source, extra=""):
    return hashlib.sha1((source + "\0" + extra).encode()).hexdigest()[:24]


def launch_dims(osites, nsimd, threads_per_block):
    """(blocks, threads per block) covering osites * nsimd threads."""
    total = int(osites) * int(nsimd)
    tpb = max(1, int(threads_per_block))
    return max(1, -(-total // tpb)), tpb


def kernel_args(ir, out, inputs, shifts, coefs, rdt):
    """The kernel's arrays in argument order (numpy, contiguous, right dtypes), without ``osites``.

    Real tables (remap coefficients) are converted to the kernel's precision;
    coefficients become interleaved (re, im) reals, at least two of them.
    """
    import numpy as np

    arrs = [out] + list(inputs)
    for s in shifts:
        arrs += [np.ascontiguousarray(x, dtype=np.int32).reshape(-1) for x in s]
    for t in ir.tables:
        if t.dtype.kind in "iu":
            arrs.append(np.ascontiguousarray(t, dtype=np.int32).reshape(-1))
        else:
            arrs.append(np.ascontiguousarray(t, dtype=rdt).reshape(-1))
    cf = np.zeros(max(2, 2 * len(coefs)), dtype=rdt)
    cf[0:2 * len(coefs):2] = np.real(coefs)
    cf[1:2 * len(coefs):2] = np.imag(coefs)
    arrs.append(cf)
    return arrs
