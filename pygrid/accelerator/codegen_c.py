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

The IR's tables are structural (part of ``ir.key()``), so the emitter reads
them here and unrolls everything: each product and remap becomes one sum of
terms per output component with its structure constants as literals, zero
coefficients dropped and +-1, +-i folded into signs; ``lincomb``, ``where``
and ``compare`` are unrolled over components.  Every real lives in its own
scalar register (``const real v3_0r = ...;``), never in an indexed private
array, which compilers may leave in memory.  Only the components that the result depends on are computed
(and only those are read from the inputs), and an exact zero is known at
generation time and never materialised.

The result is written to ``out`` only at the end, after every input component
the thread needs has been read into a register, so in-place evaluation
(``x @= transpose(x)``) is safe: every thread reads only its own site before
it writes it; with ``alias`` the pointers also lose ``restrict``.

Kernel arguments, in order (the same for every dialect and backend)::

    out, in0..in{S-1}, (nb_k, pm_k, ln_k) per shift table, coefs, osites

with ``real`` = double or float, the shift tables ``const int*``, ``coefs`` the
expression's complex coefficients as interleaved (re, im) reals and ``osites``
an ``int``.
"""
from __future__ import annotations

import hashlib
import math
import re as _re

from . import ir as IR


def tree_sum(terms):
    """Source of the sum of the expressions ``terms`` as a balanced tree of additions: log2(n)
    levels of roundings where a chain has n - 1 (two for four terms)."""
    while len(terms) > 1:
        terms = [f"({terms[i]} + {terms[i + 1]})" if i + 1 < len(terms) else terms[i]
                 for i in range(0, len(terms), 2)]
    return terms[0]


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
#: lane counts of the OpenCL vector form ('opencl-simd'): the widths of OpenCL's vector types
VECTOR_WIDTHS = (2, 4, 8, 16)
_CMP = {"<": "<", "<=": "<=", ">": ">", ">=": ">="}
_IDENT = _re.compile(r"[A-Za-z_]\w*\Z")


def arg_kinds(ir):
    """(name, kind) of each kernel argument; kind is 'out', 'real', 'int', 'coefs' or 'osites'."""
    args = [("out", "out")] + [(f"in{s}", "real") for s in range(len(ir.slots))]
    for sh in range(ir.nshifts):
        args += [(f"nb{sh}", "int"), (f"pm{sh}", "int"), (f"ln{sh}", "int")]
    args += [("coefs", "coefs"), ("osites", "osites")]
    return args


def _literal(x, dtype):
    """C literal of the real ``x`` to full double precision, ``f``-suffixed in a single precision kernel."""
    x = float(x)
    if not math.isfinite(x):
        raise ValueError(f"non-finite structure constant {x} in a kernel table")
    return repr(x) + ("f" if dtype == "float32" else "")


def _needed(ir):
    """For each value, the set of its components that the result depends on."""
    need = [set() for _ in ir.ops]
    need[ir.result] = set(range(ir.out_ncomp))
    for v in range(len(ir.ops) - 1, -1, -1):
        cs = need[v]
        if not cs:
            continue
        op = ir.ops[v]
        if isinstance(op, IR.Contract):
            start, ia, ib = ir.contract_tables(op)
            for c in cs:
                for k in range(start[c], start[c + 1]):
                    need[op.a].add(int(ia[k]))
                    need[op.b].add(int(ib[k]))
        elif isinstance(op, IR.Remap):
            start, ia, cf = ir.remap_tables(op)
            for c in cs:
                for k in range(start[c], start[c + 1]):
                    if cf[k, 0] != 0 or cf[k, 1] != 0:
                        need[op.a].add(int(ia[k]))
        elif isinstance(op, IR.LinComb):
            for t in op.terms:
                need[t.value] |= cs
        elif isinstance(op, IR.Where):
            need[op.mask].add(0)
            need[op.a] |= cs
            need[op.b] |= cs
        elif isinstance(op, IR.Compare):
            need[op.a].add(0)
            need[op.b].add(0)
    return need


def kernel_source(ir, nsimd, alias, dtype="float64", dialect="cuda"):
    """Source of ``pygrid_kernel`` for ``ir`` with ``nsimd`` lanes of ``dtype`` reals in ``dialect``."""
    vec = dialect == "opencl-simd"  # a work-item a site, its lanes one OpenCL vector
    D = DIALECTS["opencl" if vec else dialect]
    NS = int(nsimd)
    if vec and NS not in VECTOR_WIDTHS:
        raise ValueError(f"the OpenCL vector form takes Nsimd in {VECTOR_WIDTHS}, not {NS}")
    dtype = str(dtype)
    real = _CTYPE[dtype]
    # the type of a value: one lane's real, or the site's lanes
    vt = f"{real}{NS}" if vec else real
    G = D["global"]
    # with an aliased output the result buffer is also an input: no restrict on the reals then
    R = "" if alias else " " + D["restrict"]
    zero = f"(({vt})(0))" if vec else f"({real})0"
    # a comparison's result (OpenCL: -1 or 0 in each lane)
    cmp_t = ("long" if real == "double" else "int") + str(NS)

    params = []
    for name, kind in arg_kinds(ir):
        if kind == "out":
            params.append(f"{G}{real}*{R} {name}")
        elif kind in ("real", "coefs"):
            params.append(f"{G}const {real}*{R} {name}")
        elif kind == "int":
            params.append(f"{G}const int* {D['restrict']} {name}")
        else:
            params.append(f"const int {name}")

    lines = [
        f"/* pygrid generated kernel: {dialect}, {real}, nsimd={NS}, ops={len(ir.ops)} */",
        D["preamble"][dtype].rstrip("\n"),
        vector_gather(real, NS) if vec and ir.nshifts else "",
        f"{vector_kernel(vt) if vec else D['kernel']} {KERNEL_NAME}(",
        "    " + ",\n    ".join(params) + ")",
        "{",
    ] + thread_coords(dialect, "osites", NS)

    def emit(text):
        lines.append("    " + text)

    def define(name, terms):
        """The real ``sum(sign * expr)`` as an atom: None for an empty sum, a bare variable as itself."""
        if not terms:
            return None
        if len(terms) == 1 and terms[0][0] > 0 and _IDENT.match(terms[0][1]):
            return terms[0][1]
        s = "".join((" - " if sg < 0 else " + ") + e for sg, e in terms)
        s = "-" + s[3:] if s.startswith(" - ") else s[3:]
        emit(f"const {vt} {name} = {s};")
        return name

    def scaled(coef, x):
        """``coef * x`` as a signed term, or None when it is exactly zero."""
        if x is None or coef == 0:
            return None
        if abs(coef) == 1:
            return (1 if coef > 0 else -1, x)
        return (1 if coef > 0 else -1, f"{_literal(abs(coef), dtype)} * {x}")

    def add(terms, t):
        if t is not None:
            terms.append(t)

    def get(v, c):
        return val[v][c]  # a KeyError here is a component that _needed missed

    need = _needed(ir)
    val = [None] * len(ir.ops)  # value -> {component: (re atom | None, im atom | None)}, None = exact zero
    S2 = 2 * NS
    shift_done = set()
    for v, op in enumerate(ir.ops):
        n = op.ncomp
        cs = sorted(need[v])
        val[v] = {}
        if not cs:
            continue
        if isinstance(op, IR.Load):
            slot, sh = op.slot, op.shift
            lane = "" if vec else " + l"
            if sh < 0:
                emit(f"const long b{v} = (long)o * {n * S2}{lane};")
            else:
                if sh not in shift_done:
                    shift_done.add(sh)
                    emit(f"const long s{sh}o = (long)nb{sh}[o];")
                    if vec:  # the row of the lane table (0: the identity)
                        emit(f"const long s{sh}p = (long)pm{sh}[o];")
                    else:
                        emit(f"const int s{sh}l = ln{sh}[pm{sh}[o] * {NS} + l];")
                emit(f"const long b{v} = s{sh}o * {n * S2}" + ("" if vec else f" + s{sh}l") + ";")
            for c in cs:
                if vec:
                    r, i = (f"vload{NS}(0, in{slot} + b{v} + {c * S2 + k})" for k in (0, NS))
                    if sh >= 0:  # a permuted row's lanes one by one (a shuffle a load compiled for minutes)
                        r, i = (f"(s{sh}p ? pg_gather{NS}(in{slot} + b{v} + {c * S2 + k}, "
                                f"ln{sh} + s{sh}p * {NS}) : {x})" for k, x in ((0, r), (NS, i)))
                else:
                    r = f"in{slot}[b{v} + {c * S2}]" if c else f"in{slot}[b{v}]"
                    i = f"in{slot}[b{v} + {c * S2 + NS}]"
                val[v][c] = (define(f"v{v}_{c}r", [(1, r)]), define(f"v{v}_{c}i", [(1, i)]))
        elif isinstance(op, IR.Const):
            off = op.offset
            for c in cs:
                val[v][c] = (define(f"v{v}_{c}r", [(1, f"coefs[{2 * (off + c)}]")]),
                             define(f"v{v}_{c}i", [(1, f"coefs[{2 * (off + c) + 1}]")]))
        elif isinstance(op, IR.Contract):
            a, b = op.a, op.b
            start, ia, ib = ir.contract_tables(op)
            sa = -1 if op.conj_a else 1
            sb = -1 if op.conj_b else 1
            for c in cs:
                rt, it = [], []
                for k in range(start[c], start[c + 1]):
                    ar, ai = get(a, int(ia[k]))
                    br, bi = get(b, int(ib[k]))
                    # (ar + i sa ai)(br + i sb bi)
                    if ar is not None and br is not None:
                        rt.append((1, f"{ar} * {br}"))
                    if ai is not None and bi is not None:
                        rt.append((-sa * sb, f"{ai} * {bi}"))
                    if ar is not None and bi is not None:
                        it.append((sb, f"{ar} * {bi}"))
                    if ai is not None and br is not None:
                        it.append((sa, f"{ai} * {br}"))
                val[v][c] = (define(f"v{v}_{c}r", rt), define(f"v{v}_{c}i", it))
        elif isinstance(op, IR.Remap):
            a = op.a
            start, ia, cf = ir.remap_tables(op)
            sa = -1 if op.conj else 1
            for c in cs:
                rt, it = [], []
                for k in range(start[c], start[c + 1]):
                    cr, ci = float(cf[k, 0]), float(cf[k, 1])
                    ar, ai = get(a, int(ia[k]))
                    # (cr + i ci)(ar + i sa ai)
                    add(rt, scaled(cr, ar))
                    add(rt, scaled(-ci * sa, ai))
                    add(it, scaled(cr * sa, ai))
                    add(it, scaled(ci, ar))
                val[v][c] = (define(f"v{v}_{c}r", rt), define(f"v{v}_{c}i", it))
        elif isinstance(op, IR.LinComb):
            for j, t in enumerate(op.terms):
                if t.coef is not None:
                    neg = "-" if t.sign < 0 else ""
                    c = t.coef
                    emit(
                        f"const {real} k{v}_{j}r = {neg}coefs[{2 * c}], k{v}_{j}i = {neg}coefs[{2 * c + 1}];"
                    )
            for comp in cs:
                rt, it = [], []
                for j, t in enumerate(op.terms):
                    xr, xi = get(t.value, comp)
                    if t.coef is None:
                        add(rt, scaled(t.sign, xr))
                        add(it, scaled(t.sign, xi))
                        continue
                    kr, ki = f"k{v}_{j}r", f"k{v}_{j}i"
                    if xr is not None:
                        rt.append((1, f"{kr} * {xr}"))
                        it.append((1, f"{ki} * {xr}"))
                    if xi is not None:
                        rt.append((-1, f"{ki} * {xi}"))
                        it.append((1, f"{kr} * {xi}"))
                val[v][comp] = (define(f"v{v}_{comp}r", rt), define(f"v{v}_{comp}i", it))
        elif isinstance(op, IR.Where):
            a, b = op.a, op.b
            mr = get(op.mask, 0)[0]
            if vec:
                emit(f"const {cmp_t} m{v} = {mr if mr is not None else zero} != {zero};")
            else:
                emit(f"const int m{v} = {mr if mr is not None else zero} != 0;")
            for c in cs:
                parts = []
                for k, x, y in ((0, get(a, c)[0], get(b, c)[0]), (1, get(a, c)[1], get(b, c)[1])):
                    if x is None and y is None:
                        parts.append(None)
                    else:
                        xs, ys = (x if x is not None else zero), (y if y is not None else zero)
                        e = f"select({ys}, {xs}, m{v})" if vec else f"m{v} ? {xs} : {ys}"
                        parts.append(define(f"v{v}_{c}{'ri'[k]}", [(1, e)]))
                val[v][c] = tuple(parts)
        elif isinstance(op, IR.Compare):
            x, y = get(op.a, 0)[0], get(op.b, 0)[0]
            xs, ys = (x if x is not None else zero), (y if y is not None else zero)
            if vec:
                e = f"select({zero}, (({vt})(1)), {xs} {_CMP[op.op]} {ys})"
            else:
                e = f"({xs} {_CMP[op.op]} {ys}) ? ({real})1 : {zero}"
            val[v][0] = (define(f"v{v}_0r", [(1, e)]), None)
        else:
            raise ValueError(f"unknown IR op {type(op).__name__}")
    res = ir.result
    emit(f"const long bo = (long)o * {ir.out_ncomp * S2}" + ("" if vec else " + l") + ";")
    for c in range(ir.out_ncomp):
        r, i = (x if x is not None else zero for x in get(res, c))
        if vec:
            emit(f"vstore{NS}({r}, 0, out + bo + {c * S2});")
            emit(f"vstore{NS}({i}, 0, out + bo + {c * S2 + NS});")
        else:
            emit(f"out[{f'bo + {c * S2}' if c else 'bo'}] = {r};")
            emit(f"out[bo + {c * S2 + NS}] = {i};")
    lines.append("}")
    return "\n".join(x for x in lines if x != "") + "\n"


def vector_kernel(vt):
    """The qualifiers of a kernel in the OpenCL vector form: ``vec_type_hint`` tells the CPU OpenCL
    compiler the kernel is vectorised already (without it, it tries again across work-items, and a
    large kernel of vectors took minutes to build)."""
    return f"__kernel __attribute__((vec_type_hint({vt}))) void"


def vector_gather(real, NS):
    """``pg_gather<NS>(p, ln)``: the lanes ``p[ln[0]], ..., p[ln[NS-1]]`` as one vector."""
    return (f"static inline {real}{NS} pg_gather{NS}(__global const {real}* p, __global const int* ln)\n"
            f"{{ {real} t[{NS}]; for (int k = 0; k < {NS}; ++k) t[k] = p[ln[k]]; return vload{NS}(0, t); }}")


def source_hash(source, extra=""):
    return hashlib.sha1((source + "\0" + extra).encode()).hexdigest()[:24]


def thread_coords(dialect, total, nsimd, o="o"):
    """Lines that define the thread's site index ``o`` and lane ``l`` (both ``long``).

    CUDA and HIP: one 1D range over ``total * nsimd`` threads, lanes fastest (consecutive
    threads, consecutive addresses), rounded up to whole blocks (:func:`launch_dims`), so
    threads past the end return.  OpenCL: a 2D range (:func:`site_groups`), the lane its
    dimension 0 and the site its dimension 1, sites past the end returning.  The CPU OpenCL
    runtime vectorises over dimension 0, and a lane that is the work-item id itself gives it
    consecutive addresses; the lane found by a division from one 1D id made it gather every
    load (the generated axpy ran 4-8x slower, ``benchmarks/bench_sycl_ndrange.py``).
    """
    NS = int(nsimd)
    if dialect == "opencl-simd":
        return [f"    const long {o} = (long)get_global_id(0);", f"    if ({o} >= (long)({total})) return;"]
    if dialect == "opencl":
        return ["    const long l = (long)get_global_id(0);",
                f"    const long {o} = (long)get_global_id(1);",
                f"    if ({o} >= (long)({total})) return;"]
    return [f"    const long idx = {DIALECTS[dialect]['thread_index']};",
            f"    if (idx >= (long)({total}) * {NS}) return;",
            f"    const long {o} = idx / {NS};", f"    const long l = idx - {o} * {NS};"]


def launch_shape(dialect, sites, nsimd, threads_per_block):
    """(blocks, threads) of a launch of ``sites`` outer sites by ``nsimd`` lanes as the SIMT
    emulation's wrappers take them (:func:`emulation_launch`): CUDA's blocks of threads, or
    OpenCL's work-groups and sites a group; the OpenCL vector form ('opencl-simd') one
    work-item a site."""
    if dialect == "opencl":
        return site_groups(sites, nsimd, threads_per_block)
    if dialect == "opencl-simd":
        return launch_dims(sites, 1, threads_per_block)
    return launch_dims(sites, nsimd, threads_per_block)


def emulation_launch(source, call):
    """The SIMT emulation's launch of ``call`` (``simt_emulation.h``) for a kernel of ``source``,
    whose first line names its dialect and ``nsimd=``: ``blocks`` and ``threads`` as
    :func:`launch_shape` gives them."""
    first = source.lstrip().split("\n", 1)[0]
    m = _HEADER.search(first)
    if m is None:
        raise ValueError(f"no 'dialect, real, nsimd=N' in the kernel's first line: {first!r}")
    if m.group(1) == "opencl":
        return f"SIMT_LAUNCH_2D(blocks, threads, {int(m.group(2))}, {call})"
    return f"SIMT_LAUNCH(blocks, threads, {call})"


#: the dialect and lane count in the first line of a generated kernel (this module's and covariant's)
_HEADER = _re.compile(r"\b(cuda|hip|opencl-simd|opencl), (?:double|float|float64|float32), nsimd=(\d+)")


def site_groups(sites, nsimd, threads_per_block):
    """(groups, sites a group) of an OpenCL kernel's 2D range (:func:`thread_coords`): work-groups
    of ``nsimd`` lanes by about ``threads_per_block / nsimd`` sites, enough to cover ``sites``."""
    spg = max(1, int(threads_per_block) // int(nsimd))
    return max(1, -(-int(sites) // spg)), spg


def threads_per_block():
    """Threads per block (work-items per work-group) of a device launch: ``--accelerator-threads``."""
    from ..config import current

    return int(current().accelerator_threads)


def launch_dims(osites, nsimd, threads_per_block):
    """(blocks, threads per block) covering osites * nsimd threads."""
    total = int(osites) * int(nsimd)
    tpb = max(1, int(threads_per_block))
    return max(1, -(-total // tpb)), tpb


def shift_arrays(shifts):
    """The shift tables' arrays in argument order, as the kernels take them (contiguous int32, flat)."""
    import numpy as np

    return [np.ascontiguousarray(x, dtype=np.int32).reshape(-1) for s in shifts for x in s]


def kernel_args(ir, out, inputs, shifts, coefs, rdt):
    """The kernel's arrays in argument order (numpy, contiguous, right dtypes), without ``osites``."""
    from .host import coef_reals

    return [out] + list(inputs) + shift_arrays(shifts) + [coef_reals(coefs, rdt)]
