"""Device reductions as C kernels (CUDA and OpenCL dialects of :mod:`.codegen_c`): one pass over the field.

Each thread sums its part of a field in the accumulation precision (double, or float
on a device without double) and writes one row of partial sums; the rows are added
afterwards (on the device by the GPU backends, on the host by sycl).  There is no
shared memory and no barrier, so the same source runs on a GPU, on a SYCL device and,
one thread after another, under the SIMT emulation.  Buffers are the
``real[osites][ncomp][2][nsimd]`` field buffers (docs/design.md)::

    pg_norm2(a, part, n, R)                    row g: sum of a[i]^2, i = g, g + R, ... < n
    pg_inner(a, b, part, m, R)                 row g: Re, Im of sum conj(a) b over the complex
                                               numbers g, g + R, ... < m (m = osites ncomp NS)
    pg_site_sum(a, part, osites, ncomp, P)     row c P + p: Re, Im of component c summed over the
                                               outer sites p, p + P, ... and every lane
    pg_slice_sum(a, table, part, m, ncomp, S)  row t ncomp + c: Re, Im of component c summed over
                                               the m (outer site, lane) entries of slice t

In the OpenCL dialect ``pg_norm2`` and ``pg_inner`` read OpenCL vectors of ``W`` lanes
(:func:`vector_width`) and write rows of ``W`` (norm2) or ``2 W`` (inner) partial sums::

    pg_norm2(a, part, n, R, L)   n vectors of W reals
    pg_inner(a, b, part, m, R, L)  m vectors of W complex numbers (a real and an imaginary vector)

Rows come in groups of ``L`` and each group sums one contiguous chunk of the vectors, its rows
taking every ``L``-th one.  The CPU OpenCL runtime vectorises a kernel across its work-items:
the strided scalar loop then runs a gather per vector, where explicit vectors in contiguous
chunks (``L`` 1) stream; a GPU wants neighbouring rows on neighbouring vectors (``L`` a
work-group).

Pointers come first, then ``long`` integers; ``R`` rows of ``width`` accumulation reals
each.  A backend launches at least ``plan.rows`` threads; threads past it return.  The
lane count ``NS`` is a constant of the source (one program per lane count), so the
divisions by it are shifts: a 64-bit division by a variable costs a GPU tens of
instructions per complex number.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import codegen_c

_CTYPE = {"float64": "double", "float32": "float"}

#: the kernels of :func:`source`
KERNELS = ("pg_norm2", "pg_inner", "pg_site_sum", "pg_slice_sum")

#: reals or complex numbers each row of a strided reduction sums at least
GRAIN = 64

#: the bytes of the widest OpenCL vector the reductions load (one AVX-512 register, one cache line)
VECTOR_BYTES = 64

#: vectors whose squares the OpenCL vector norm2 adds in single before one widening to double
GROUP = 4


def vector_width(nsimd, real_dtype):
    """Lanes of the OpenCL vectors ``pg_norm2`` and ``pg_inner`` load: the largest power of two
    dividing ``nsimd`` within :data:`VECTOR_BYTES` (1: scalars)."""
    ns = int(nsimd)
    w = 1
    while ns % (2 * w) == 0 and 2 * w * np.dtype(real_dtype).itemsize <= VECTOR_BYTES:
        w *= 2
    return w


def _opencl_vector_kernels(D, real, acc, nsimd, W):
    """``pg_norm2`` and ``pg_inner`` of the OpenCL dialect: vectors of W lanes, contiguous chunks."""
    G, R = D["global"], D["restrict"]
    if W == 1:
        va = acc
        load = lambda i, p: f"({acc})({p}[{i}])"  # noqa: E731
        store = lambda v, i: f"part[{i}] = {v}"  # noqa: E731
    else:
        va = f"{acc}{W}"
        load = lambda i, p: f"convert_{va}(vload{W}({i}, {p}))"  # noqa: E731
        store = lambda v, i: f"vstore{W}({v}, {i}, part)"  # noqa: E731
    # the rows' chunks: group w = g / L of rows sums the vectors [w C, (w + 1) C), row g every L-th
    head = """    const long g = get_global_id(0);
    if (g >= R) return;
    const long w = g / L, j = g - w * L, C = (n + R - 1) / R * L;
    const long end = (w + 1) * C < n ? (w + 1) * C : n;"""
    a, p = f"{G}const {real}* {R} a", f"{G}{acc}* {R} part"
    # norm2 of single into double sums: the squares of GROUP vectors added in single, then widened
    # once (as reductions_numba.SINGLE_GROUP; on the CPU OpenCL device 1.3x, where the inner
    # product, its products formed the same way, ran no faster and stays widened a real at a time)
    grouped = W > 1 and real != acc
    vr = f"{real}{W}"
    n_group = ""
    if grouped:
        idx = [f"i + {k} * L" for k in range(GROUP)]
        sq = codegen_c.tree_sum([f"x{k} * x{k}" for k in range(GROUP)])
        xs = ", ".join(f"x{k} = vload{W}({i}, a)" for k, i in enumerate(idx))
        n_group = f"""
    for (; i + {GROUP - 1} * L < end; i += {GROUP} * L) {{
        const {vr} {xs};
        s += convert_{va}({sq});
    }}"""
    return f"""#define NQ {int(nsimd) // W}L
{D["kernel"]} pg_norm2({a}, {p}, const long n, const long R, const long L)
{{
{head}
    {va} s = 0;
    long i = w * C + j;{n_group}
    for (; i < end; i += L) {{ const {va} x = {load("i", "a")}; s += x * x; }}
    {store("s", "g")};
}}
{D["kernel"]} pg_inner({a}, {G}const {real}* {R} b, {p}, const long n, const long R, const long L)
{{
{head}
    {va} sr = 0, si = 0;
    for (long i = w * C + j; i < end; i += L) {{
        const long oc = i / NQ, r = oc * NQ + i, q = r + NQ;  /* vectors: NQ real, then NQ imaginary */
        const {va} ar = {load("r", "a")}, ai = {load("q", "a")}, br = {load("r", "b")}, bi = {load("q", "b")};
        sr += ar * br + ai * bi;
        si += ar * bi - ai * br;
    }}
    {store("sr", "2 * g")};
    {store("si", "2 * g + 1")};
}}
"""


def _strided_kernels(K, a, p, G, R, real, acc, idx, loads):
    """``pg_norm2`` and ``pg_inner`` of the CUDA dialect: neighbouring threads on neighbouring
    numbers (coalesced), each thread ``loads`` real or complex numbers R apart at a time into as
    many accumulators.  A GPU thread issues its next loads only after the adds of the last ones:
    the loads in flight are the resident threads times ``loads``, and a GPU needs megabytes in
    flight to reach its bandwidth."""
    U = int(loads)
    ks = range(U)
    acc_n = ", ".join(f"s{k} = 0" for k in ks)
    acc_i = ", ".join(f"sr{k} = 0, si{k} = 0" for k in ks)
    sum_n = codegen_c.tree_sum([f"s{k}" for k in ks])
    sum_r, sum_i = (codegen_c.tree_sum([f"{v}{k}" for k in ks]) for v in ("sr", "si"))
    n_body = "\n".join(f"        {{ const {acc} x = a[i + {k} * R]; s{k} += x * x; }}" for k in ks)

    def complex_at(k, j):
        return f"""        {{
            const long c = {j}, oc = c / NS;
            const long r = oc * 2 * NS + (c - oc * NS), q = r + NS;
            const {acc} ar = a[r], ai = a[q], br = b[r], bi = b[q];
            sr{k} += ar * br + ai * bi;
            si{k} += ar * bi - ai * br;
        }}"""

    i_body = "\n".join(complex_at(k, f"i + {k} * R") for k in ks)
    return f"""{K} pg_norm2({a}, {p}, const long n, const long R)
{{
    const long g = {idx};
    if (g >= R) return;
    {acc} {acc_n};
    long i = g;
    for (; i + {U - 1} * R < n; i += {U} * R) {{
{n_body}
    }}
    for (; i < n; i += R) {{ const {acc} x = a[i]; s0 += x * x; }}
    part[g] = {sum_n};
}}
{K} pg_inner({a}, {G}const {real}* {R} b, {p}, const long m, const long R)
{{
    const long g = {idx};
    if (g >= R) return;
    {acc} {acc_i};
    long i = g;
    for (; i + {U - 1} * R < m; i += {U} * R) {{
{i_body}
    }}
    for (; i < m; i += R) {{
{complex_at(0, "i")}
    }}
    part[2 * g] = {sum_r};
    part[2 * g + 1] = {sum_i};
}}
"""


def source(dialect, real_dtype, acc_dtype, nsimd, loads=1):
    """The four reduction kernels reading ``real_dtype`` buffers of ``nsimd`` lanes, summing in
    ``acc_dtype``; in the CUDA dialect each thread of ``pg_norm2`` and ``pg_inner`` loads ``loads``
    numbers at a time (:func:`_strided_kernels`)."""
    D = codegen_c.DIALECTS[dialect]
    G, R = D["global"], D["restrict"]
    real, acc = _CTYPE[str(np.dtype(real_dtype))], _CTYPE[str(np.dtype(acc_dtype))]
    pre = D["preamble"]["float64"] if "double" in (real, acc) else ""
    idx, K = D["thread_index"], D["kernel"]
    a, p = f"{G}const {real}* {R} a", f"{G}{acc}* {R} part"
    if dialect == "opencl":
        first = _opencl_vector_kernels(D, real, acc, nsimd, vector_width(nsimd, real_dtype))
    else:
        first = _strided_kernels(K, a, p, G, R, real, acc, idx, loads)
    return f"""{pre}
#define NS {int(nsimd)}L
{first}{K} pg_site_sum({a}, {p}, const long osites, const long ncomp, const long P)
{{
    const long g = {idx};
    if (g >= ncomp * P) return;
    const long c = g / P, q = g - c * P;
    {acc} sr = 0, si = 0;
    for (long o = q; o < osites; o += P) {{
        const long base = (o * ncomp + c) * 2 * NS;
        for (long l = 0; l < NS; ++l) {{ sr += a[base + l]; si += a[base + NS + l]; }}
    }}
    part[2 * g] = sr;
    part[2 * g + 1] = si;
}}
{K} pg_slice_sum({a}, {G}const int* {R} table, {p}, const long m, const long ncomp, const long S)
{{
    const long g = {idx};
    if (g >= S * ncomp) return;
    const long t = g / ncomp, c = g - t * ncomp;
    {acc} sr = 0, si = 0;
    for (long j = 0; j < m; ++j) {{
        const long f = table[t * m + j];
        const long o = f / NS, l = f - o * NS;
        const long base = (o * ncomp + c) * 2 * NS + l;
        sr += a[base];
        si += a[base + NS];
    }}
    part[2 * g] = sr;
    part[2 * g + 1] = si;
}}
"""


#: pointer arguments of each kernel, in order ('a' a field, 'b' a field, 't' an int table, 'p' the partials)
POINTERS = {"pg_norm2": "ap", "pg_inner": "abp", "pg_site_sum": "ap", "pg_slice_sum": "atp"}


def emulation_wrappers(real_dtype, acc_dtype, dialect="cuda"):
    """``pygrid_launch_<kernel>(void** a, long* ints, int blocks, int threads)`` for the SIMT emulation."""
    real, acc = _CTYPE[str(np.dtype(real_dtype))], _CTYPE[str(np.dtype(acc_dtype))]
    cast = {"a": f"(const {real}*)", "b": f"(const {real}*)", "t": "(const int*)", "p": f"({acc}*)"}
    vec = 3 if dialect == "opencl" else 2
    nints = {"pg_norm2": vec, "pg_inner": vec, "pg_site_sum": 3, "pg_slice_sum": 3}
    out = []
    for name in KERNELS:
        ptrs = [f"{cast[k]}a[{i}]" for i, k in enumerate(POINTERS[name])]
        ints = [f"ints[{i}]" for i in range(nints[name])]
        out.append(f'extern "C" void pygrid_launch_{name}(void** a, long* ints, int blocks, int threads)\n'
                   f"{{ SIMT_LAUNCH(blocks, threads, {name}({', '.join(ptrs + ints)})); }}\n")
    return "\n".join(out)


@dataclass(frozen=True)
class Plan:
    """One reduction launch: the kernel, its integer arguments, and the partial sums it leaves.

    ``rows`` threads write ``width`` reals each; the result is the rows summed in
    consecutive groups of ``group`` (:func:`finish`).
    """

    name: str
    ints: tuple
    rows: int
    width: int
    group: int


def _rows(n, max_rows):
    return int(max(1, min(max_rows, -(-int(n) // GRAIN))))


def _vector_plan(name, units, W, width, max_rows, stride):
    """Rows of the OpenCL vector kernels: at most ``max_rows``, each summing at least GRAIN / W
    vectors, in whole groups of ``stride``."""
    L = max(1, int(stride))
    R = max(1, min(int(max_rows), -(-int(units) * W // GRAIN))) if units else 1
    R = -(-R // L) * L
    return Plan(name, (int(units), R, L), R, width * W, R)


def plan_norm2(shape, max_rows, dialect="cuda", dtype=None, stride=1):
    """``pg_norm2`` over a buffer of ``shape``; in the OpenCL dialect rows come in groups of
    ``stride`` (``dtype`` the buffer's, for its vector width)."""
    n = int(np.prod(shape, dtype=np.int64))
    if dialect == "opencl":
        W = vector_width(shape[3], dtype)
        return _vector_plan("pg_norm2", n // W, W, 1, max_rows, stride)
    R = _rows(n, max_rows)
    return Plan("pg_norm2", (n, R), R, 1, R)


def plan_inner(shape, max_rows, dialect="cuda", dtype=None, stride=1):
    """``pg_inner`` over two buffers of ``shape`` (arguments as :func:`plan_norm2`)."""
    osites, ncomp, _, ns = shape
    m = int(osites) * int(ncomp) * int(ns)
    if dialect == "opencl":
        W = vector_width(ns, dtype)
        return _vector_plan("pg_inner", m // W, W, 2, max_rows, stride)
    R = _rows(m, max_rows)
    return Plan("pg_inner", (m, R), R, 2, R)


def plan_site_sum(shape, max_rows):
    osites, ncomp = int(shape[0]), int(shape[1])
    P = int(max(1, min(osites, max_rows // ncomp)))
    return Plan("pg_site_sum", (osites, ncomp, P), ncomp * P, 2, P)


def plan_slice_sum(shape, table_shape):
    ncomp = int(shape[1])
    nslices, m = (int(s) for s in table_shape)
    return Plan("pg_slice_sum", (m, ncomp, nslices), nslices * ncomp, 2, 1)


def partial_sums(plan, part):
    """The partial sums ``part`` (``rows * width`` reals, numpy or CuPy) added in their groups:
    an array (rows // group, width) of the same kind."""
    return part[: plan.rows * plan.width].reshape(plan.rows // plan.group, plan.group, plan.width).sum(axis=1)


def finish(plan, sums, ncomp=None):
    """The reduction's value from :func:`partial_sums` brought to the host (a numpy array)."""
    sums = np.asarray(sums, dtype=np.float64)
    if plan.name == "pg_norm2":
        return float(sums[0].sum())
    if plan.name == "pg_inner":  # a row: the real parts' sums, then the imaginary parts'
        half = plan.width // 2
        return complex(sums[0, :half].sum(), sums[0, half:].sum())
    c = sums[:, 0] + 1j * sums[:, 1]
    if plan.name == "pg_slice_sum":
        return c.reshape(-1, ncomp)
    return c
