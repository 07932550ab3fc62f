"""The per-site operations that generated OpenMP kernels call, one small function each.

A generated kernel is a loop over outer sites calling these functions on flat
arrays with offsets; they are compiled once per lane count and precision and
reused by every expression, so a new expression compiles only its own short
loop: numba's front-end time grows faster than linearly with the size of the
function it lowers, so one inlined body per expression would compile several
times longer.

Two details decide whether the lanes become vector instructions (about 2x in
speed on a streaming operation):

* every index is unsigned (``U``): numba wraps negative signed indices with
  a select per access, which hides that consecutive lanes are consecutive;
* every lane of the operands is read into locals before anything is stored,
  with the lanes written out: LLVM cannot prove that the destination does
  not alias a source, and only this order lets the SLP vectoriser merge them.

Products walk tables grouped by output component (CSR: ``start[o] ..
start[o+1]``) and accumulate in registers.  Site tensors are stored as
[component][re, im][lane] with NS lanes.
"""
from __future__ import annotations


def _lanes(fmt, ns, sep="; "):
    return sep.join(fmt.format(l=l) for l in range(ns))


def ops_source(nsimd, dtype="float64"):
    """Source of the operation library for ``nsimd`` lanes of ``dtype`` reals.

    Accumulators and coefficients are kept in ``dtype`` (``Z``), so single
    precision stays single and vectorises twice as wide.
    """
    NS = int(nsimd)
    L = range(NS)
    out = [
        "import numpy as np",
        "from numba import njit",
        "",
        f"NS = {NS}",
        f"Z = np.{dtype}",
        "U = np.uint64",
        f"S2 = U({2 * NS})",
        f"S1 = U({NS})",
    ]
    out += [f"K{k} = U({k})" for k in range(2 * NS)]
    out += [
        '_jit = njit(fastmath=True, cache=True, nogil=True, error_model="numpy", boundscheck=False)',
        "",
    ]

    def fn(sig, body, doc):
        out.append("@_jit")
        out.append(f"def {sig}:")
        out.append(f'    """{doc}"""')
        out.extend("    " + line for line in body)
        out.append("")

    re_ = lambda arr, base: [f"{arr}[{base} + K{l}]" for l in L]  # noqa: E731
    im_ = lambda arr, base: [f"{arr}[{base} + K{NS + l}]" for l in L]  # noqa: E731

    def assign(names, values):
        return "; ".join(f"{n} = {v}" for n, v in zip(names, values))

    fn("load(d, src, soff, p, lanes, n)", [
        "S = U(soff)",
        "if p == 0:",
        "    for i in range(n * 2 * NS):",
        "        d[U(i)] = src[S + U(i)]",
        "else:",
        "    po = U(p) * S1",
        "    " + assign([f"m{l}" for l in L], [f"U(lanes[po + K{l}])" for l in L]),
        "    for i in range(n * 2):",
        "        q = S + U(i) * S1",
        "        " + assign([f"t{l}" for l in L], [f"src[q + m{l}]" for l in L]),
        "        r = U(i) * S1",
        "        " + assign([f"d[r + K{l}]" for l in L], [f"t{l}" for l in L]),
    ], "d = the neighbour's tensor at src[soff:], lanes permuted by row p of lanes (0: none).")

    fn("fill(d, doff, coefs, coff, n)", [
        "for c in range(n):",
        "    cr = coefs[U(2 * (coff + c))]",
        "    ci = coefs[U(2 * (coff + c) + 1)]",
        "    q = U(doff) + U(c) * S2",
        "    " + assign([f"d[q + K{l}]" for l in L], ["cr"] * NS),
        "    " + assign([f"d[q + K{NS + l}]" for l in L], ["ci"] * NS),
    ], "d = the constant tensor coefs[coff:] (complex pairs) on every lane.")

    def accumulate(extra_loads, terms):
        body = [
            "D = U(doff)",
            "for o in range(nout):",
            "    " + assign([f"sr{l}" for l in L], ["Z(0.0)"] * NS),
            "    " + assign([f"si{l}" for l in L], ["Z(0.0)"] * NS),
            "    for k in range(start[o], start[o + 1]):",
        ]
        body += ["        " + line for line in extra_loads]
        body += ["        " + t for t in terms]
        body += [
            "    q = D + U(o) * S2",
            "    " + assign(re_("d", "q"), [f"sr{l}" for l in L]),
            "    " + assign(im_("d", "q"), [f"si{l}" for l in L]),
        ]
        return body

    loads = [
        "x = U(aoff) + U(ia[k]) * S2",
        "y = U(boff) + U(ib[k]) * S2",
        assign([f"ar{l}" for l in L], re_("a", "x")),
        assign([f"ai{l}" for l in L], [f"sa * {v}" for v in im_("a", "x")]),
        assign([f"br{l}" for l in L], re_("b", "y")),
        assign([f"bi{l}" for l in L], [f"sb * {v}" for v in im_("b", "y")]),
    ]
    terms = [f"sr{l} += ar{l} * br{l} - ai{l} * bi{l}; si{l} += ar{l} * bi{l} + ai{l} * br{l}" for l in L]
    fn("contract(d, doff, nout, a, aoff, b, boff, start, ia, ib, sa, sb)",
       ["sa = Z(sa)", "sb = Z(sb)"] + accumulate(loads, terms),
       "d[o] = sum over k in start[o]..start[o+1] of A[ia[k]] B[ib[k]]; sa, sb = -1 read A, B conjugated.")

    loads = [
        "x = U(aoff) + U(ia[k]) * S2",
        "cr = cf[U(2 * k)]",
        "ci = cf[U(2 * k + 1)]",
        assign([f"ar{l}" for l in L], re_("a", "x")),
        assign([f"ai{l}" for l in L], [f"sa * {v}" for v in im_("a", "x")]),
    ]
    terms = [f"sr{l} += cr * ar{l} - ci * ai{l}; si{l} += cr * ai{l} + ci * ar{l}" for l in L]
    fn("remap(d, doff, nout, a, aoff, start, ia, cf, sa)", ["sa = Z(sa)"] + accumulate(loads, terms),
       "d[o] = sum over k in start[o]..start[o+1] of c[k] A[ia[k]]; sa = -1 reads A conjugated.")

    def elementwise(name, args, operands, re_vals, im_vals, doc):
        body = ["D = U(doff)"] + [f"{o.upper()}0 = U({o}off)" for o in operands]
        body += ["for c in range(n):", "    p = U(c) * S2"]
        for o in operands:
            body.append("    " + assign([f"{o}r{l}" for l in L], re_(o, f"{o.upper()}0 + p")))
            body.append("    " + assign([f"{o}i{l}" for l in L], im_(o, f"{o.upper()}0 + p")))
        body.append("    " + assign(re_("d", "D + p"), [re_vals.format(l=l) for l in L]))
        body.append("    " + assign(im_("d", "D + p"), [im_vals.format(l=l) for l in L]))
        fn(f"{name}({args})", body, doc)

    elementwise("scale", "d, doff, x, xoff, cr, ci, n", ["x"],
                "cr * xr{l} - ci * xi{l}", "cr * xi{l} + ci * xr{l}", "d = c x.")
    elementwise("axpy", "d, doff, x, xoff, cr, ci, n", ["x", "d"],
                "dr{l} + cr * xr{l} - ci * xi{l}", "di{l} + cr * xi{l} + ci * xr{l}", "d += c x.")
    elementwise("axpby", "d, doff, x, xoff, ar, ai, y, yoff, br, bi, n", ["x", "y"],
                "ar * xr{l} - ai * xi{l} + br * yr{l} - bi * yi{l}",
                "ar * xi{l} + ai * xr{l} + br * yi{l} + bi * yr{l}", "d = a x + b y.")
    elementwise("copy", "d, doff, x, xoff, n", ["x"], "xr{l}", "xi{l}", "d = x.")
    # terms of coefficient +-1 (``y`` in ``a*x + y``): no multiply by a coefficient known to be one,
    # which numba cannot fold across the call (four FMAs a complex number of eight, in a kernel that
    # streams from L3)
    elementwise("neg", "d, doff, x, xoff, n", ["x"], "-xr{l}", "-xi{l}", "d = -x.")
    for name, op in (("add", "+"), ("sub", "-")):
        elementwise(name, "d, doff, x, xoff, y, yoff, n", ["x", "y"], f"xr{{l}} {op} yr{{l}}",
                    f"xi{{l}} {op} yi{{l}}", f"d = x {op} y.")
        elementwise(f"axpy_{name}", "d, doff, x, xoff, ar, ai, y, yoff, n", ["x", "y"],
                    f"ar * xr{{l}} - ai * xi{{l}} {op} yr{{l}}", f"ar * xi{{l}} + ai * xr{{l}} {op} yi{{l}}",
                    f"d = a x {op} y.")
        elementwise(f"acc_{name}", "d, doff, x, xoff, n", ["x", "d"], f"dr{{l}} {op} xr{{l}}",
                    f"di{{l}} {op} xi{{l}}", f"d {op}= x.")

    fn("select(d, doff, m, moff, a, aoff, b, boff, n)", [
        "M = U(moff)",
        assign([f"m{l}" for l in L], [f"m[M + K{l}] != 0" for l in L]),
        "A = U(aoff)",
        "B = U(boff)",
        "D = U(doff)",
        "for i in range(n * 2):",
        "    p = U(i) * S1",
        "    " + assign([f"t{l}" for l in L], [f"a[A + p + K{l}] if m{l} else b[B + p + K{l}]" for l in L]),
        "    " + assign([f"d[D + p + K{l}]" for l in L], [f"t{l}" for l in L]),
    ], "Per lane: d = a where the mask's real part is non-zero, else b.")

    fn("compare(d, doff, a, aoff, b, boff, op)", [
        "for l in range(NS):",
        "    x = a[U(aoff + l)]",
        "    y = b[U(boff + l)]",
        "    if op == 0:",
        "        t = x < y",
        "    elif op == 1:",
        "        t = x <= y",
        "    elif op == 2:",
        "        t = x > y",
        "    else:",
        "        t = x >= y",
        "    d[U(doff + l)] = Z(1.0) if t else Z(0.0)",
        "    d[U(doff + NS + l)] = Z(0.0)",
    ], "d = 1.0 or 0.0 per lane from real parts; op 0 <, 1 <=, 2 >, 3 >=.")
    return "\n".join(out) + "\n"


OP_NAMES = ("Z", "load", "fill", "contract", "remap", "scale", "axpy", "axpby", "select", "compare", "copy",
            "neg", "add", "sub", "axpy_add", "axpy_sub", "acc_add", "acc_sub")
