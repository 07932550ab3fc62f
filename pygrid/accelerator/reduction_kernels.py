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


def source(dialect, real_dtype, acc_dtype, nsimd):
    """The four reduction kernels reading ``real_dtype`` buffers of ``nsimd`` lanes, summing in
    ``acc_dtype``."""
    D = codegen_c.DIALECTS[dialect]
    G, R = D["global"], D["restrict"]
    real, acc = _CTYPE[str(np.dtype(real_dtype))], _CTYPE[str(np.dtype(acc_dtype))]
    pre = D["preamble"]["float64"] if "double" in (real, acc) else ""
    idx, K = D["thread_index"], D["kernel"]
    a, p = f"{G}const {real}* {R} a", f"{G}{acc}* {R} part"
    return f"""{pre}
#define NS {int(nsimd)}L
{K} pg_norm2({a}, {p}, const long n, const long R)
{{
    const long g = {idx};
    if (g >= R) return;
    {acc} s = 0;
    for (long i = g; i < n; i += R) {{ const {acc} x = a[i]; s += x * x; }}
    part[g] = s;
}}
{K} pg_inner({a}, {G}const {real}* {R} b, {p}, const long m, const long R)
{{
    const long g = {idx};
    if (g >= R) return;
    {acc} sr = 0, si = 0;
    for (long i = g; i < m; i += R) {{
        const long oc = i / NS;
        const long r = oc * 2 * NS + (i - oc * NS), q = r + NS;
        const {acc} ar = a[r], ai = a[q], br = b[r], bi = b[q];
        sr += ar * br + ai * bi;
        si += ar * bi - ai * br;
    }}
    part[2 * g] = sr;
    part[2 * g + 1] = si;
}}
{K} pg_site_sum({a}, {p}, const long osites, const long ncomp, const long P)
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


def emulation_wrappers(real_dtype, acc_dtype):
    """``pygrid_launch_<kernel>(void** a, long* ints, int blocks, int threads)`` for the SIMT emulation."""
    real, acc = _CTYPE[str(np.dtype(real_dtype))], _CTYPE[str(np.dtype(acc_dtype))]
    cast = {"a": f"(const {real}*)", "b": f"(const {real}*)", "t": "(const int*)", "p": f"({acc}*)"}
    nints = {"pg_norm2": 2, "pg_inner": 2, "pg_site_sum": 3, "pg_slice_sum": 3}
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


def plan_norm2(shape, max_rows):
    n = int(np.prod(shape, dtype=np.int64))
    R = _rows(n, max_rows)
    return Plan("pg_norm2", (n, R), R, 1, R)


def plan_inner(shape, max_rows):
    osites, ncomp, _, ns = shape
    m = int(osites) * int(ncomp) * int(ns)
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
        return float(sums[0, 0])
    if plan.name == "pg_inner":
        return complex(sums[0, 0], sums[0, 1])
    c = sums[:, 0] + 1j * sums[:, 1]
    if plan.name == "pg_slice_sum":
        return c.reshape(-1, ncomp)
    return c
