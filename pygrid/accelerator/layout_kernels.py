"""Device kernels that move field data between layouts: checkerboard gathers and scatters, precision casts.

On the CPU backends these are numpy operations on host views
(:class:`pygrid.accelerator.backends.NumpyBackend`); on a device backend they
are the C kernels below (CUDA and OpenCL dialects of :mod:`.codegen_c`), so
``pick_checkerboard``, ``set_checkerboard`` and ``convert`` never take a field
off the device.  One thread per (outer site, lane) of the smaller side; the
maps ``om``, ``lm`` give, for each of those, the outer site and lane on the
other side (``pygrid.lattice.ops._layout_map``)::

    pg_gather:  out[o, p, l] = in[om[o, l], p, lm[o, l]]       (pick a checkerboard)
    pg_scatter: out[om[o, l], p, lm[o, l]] = in[o, p, l]       (set a checkerboard)
    pg_cast:    out[i] = (out real) in[i]                      (convert precision)
    pg_setcomp: out[o, cout[k], l] = in[o, cin[k], l]          (poke components, k < nk)

with ``p`` the real planes of a site (2 * ncomp) and the lane counts of the two
sides passed as integers.
"""
from __future__ import annotations

from . import codegen_c

_CTYPE = {"float64": "double", "float32": "float"}

#: the kernels of :func:`source`
KERNELS = ("pg_gather", "pg_scatter", "pg_cast", "pg_setcomp")


def source(dialect, out_dtype, in_dtype):
    """The three kernels for ``out_dtype`` <- ``in_dtype`` reals, in ``dialect`` ('cuda' or 'opencl')."""
    D = codegen_c.DIALECTS[dialect]
    G, R = D["global"], D["restrict"]
    to, ti = _CTYPE[str(out_dtype)], _CTYPE[str(in_dtype)]
    pre = D["preamble"]["float64"] if "double" in (to, ti) else ""
    idx = D["thread_index"]
    maps = (f"{G}{to}* {R} out, {G}const {ti}* {R} in, {G}const int* {R} om, {G}const int* {R} lm, "
            "const long n, const long planes, const long ns_out, const long ns_in")
    return f"""{pre}
{D["kernel"]} pg_gather({maps})
{{
    const long idx = {idx};
    if (idx >= n * ns_out) return;
    const long o = idx / ns_out, l = idx - o * ns_out;
    const long so = om[idx], sl = lm[idx];
    for (long p = 0; p < planes; ++p)
        out[(o * planes + p) * ns_out + l] = ({to})in[(so * planes + p) * ns_in + sl];
}}
{D["kernel"]} pg_scatter({maps})
{{
    const long idx = {idx};
    if (idx >= n * ns_in) return;
    const long o = idx / ns_in, l = idx - o * ns_in;
    const long so = om[idx], sl = lm[idx];
    for (long p = 0; p < planes; ++p)
        out[(so * planes + p) * ns_out + sl] = ({to})in[(o * planes + p) * ns_in + l];
}}
{D["kernel"]} pg_cast({G}{to}* {R} out, {G}const {ti}* {R} in, const long n)
{{
    const long i = {idx};
    if (i < n) out[i] = ({to})in[i];
}}
{D["kernel"]} pg_setcomp({G}{to}* {R} out, {G}const {ti}* {R} in,
                         {G}const int* {R} cout, {G}const int* {R} cin,
                         const long n, const long nk, const long ncout, const long ncin, const long ns)
{{
    const long idx = {idx};
    if (idx >= n * ns) return;
    const long o = idx / ns, l = idx - o * ns;
    for (long k = 0; k < nk; ++k)
        for (long r = 0; r < 2; ++r)
            out[((o * ncout + cout[k]) * 2 + r) * ns + l] = ({to})in[((o * ncin + cin[k]) * 2 + r) * ns + l];
}}
"""


def emulation_wrappers(out_dtype, in_dtype):
    """``pygrid_launch_<kernel>(void** a, long* ints, int blocks, int threads)`` for the SIMT emulation."""
    to, ti = _CTYPE[str(out_dtype)], _CTYPE[str(in_dtype)]
    out = []
    for name in ("pg_gather", "pg_scatter"):
        out.append(
            f'extern "C" void pygrid_launch_{name}(void** a, long* ints, int blocks, int threads)\n'
            f"{{ SIMT_LAUNCH(blocks, threads, {name}(({to}*)a[0], (const {ti}*)a[1], (const int*)a[2], "
            "(const int*)a[3], ints[0], ints[1], ints[2], ints[3])); }\n"
        )
    out.append(
        'extern "C" void pygrid_launch_pg_cast(void** a, long* ints, int blocks, int threads)\n'
        f"{{ SIMT_LAUNCH(blocks, threads, pg_cast(({to}*)a[0], (const {ti}*)a[1], ints[0])); }}\n"
    )
    out.append(
        'extern "C" void pygrid_launch_pg_setcomp(void** a, long* ints, int blocks, int threads)\n'
        f"{{ SIMT_LAUNCH(blocks, threads, pg_setcomp(({to}*)a[0], (const {ti}*)a[1], (const int*)a[2], "
        "(const int*)a[3], ints[0], ints[1], ints[2], ints[3], ints[4])); }\n"
    )
    return "\n".join(out)


def launch_plan(kind, out, inp, om=None, lm=None):
    """(kernel name, integer arguments, threads) of one layout kernel on these buffers.

    ``out``/``inp`` are (osites, ncomp, 2, nsimd) buffers (any array with shape and
    dtype); ``om``/``lm`` the maps indexed like the smaller side's (osites, nsimd).
    """
    if kind == "cast":
        n = int(out.size if hasattr(out, "size") else 0)
        return "pg_cast", [n], n
    if kind == "setcomp":  # om, lm: the output and input components
        n, ns = int(out.shape[0]), int(out.shape[3])
        return "pg_setcomp", [n, len(om), int(out.shape[1]), int(inp.shape[1]), ns], n * ns
    planes = int(out.shape[1]) * 2
    ns_out, ns_in = int(out.shape[3]), int(inp.shape[3])
    if kind == "gather":
        n = int(out.shape[0])
        return "pg_gather", [n, planes, ns_out, ns_in], n * ns_out
    n = int(inp.shape[0])
    return "pg_scatter", [n, planes, ns_out, ns_in], n * ns_in
