"""The Wilson hopping kernel: one numba kernel per call, spin-projected, lanes innermost, vectorised.

    dhop(out, psi, uf, ub, stencil, Ls=1, scale=-0.5, alpha=0.0, diag=None, dag=False)

computes, for every output site x (4D outer site o, fifth-dimension index s)

    out(x) = alpha * diag(x)
           + scale * sum_mu [ (1 - g_mu) U_mu(x) psi(x+mu) + (1 + g_mu) U_mu(x-mu)^dag psi(x-mu) ]

(``dag=True`` swaps the projectors 1 -/+ g_mu, which gives the adjoint,
``Dhop^dag = g5 Dhop g5``).  Grid's Dhop is ``scale = -1/2, alpha = 0``; the
Wilson matrix is ``scale = -1/2, alpha = 4 + m, diag = psi``.

Arrays are raw view buffers, shaped (osites, ncomp, 2, nsimd):

* ``psi``, ``out``, ``diag``: fermions, ncomp 12 = spin*3 + colour; the outer
  site index is ``s + Ls * o`` (a 5D grid with s = dimension 0, never SIMD-split;
  ``Ls = 1`` for a 4D field);
* ``uf``: gauge links (ncomp 36 = mu*9 + a*3 + b) at the *output* sites, indexed o;
* ``ub``: gauge links at the *source* sites, indexed by the backward neighbour,
  read with that neighbour's lane permute and daggered.  On a full grid
  ``uf is ub``; for the even-odd pieces they are the two checkerboards of U.
* the neighbour tables are those of the 4D ``stencil`` (``pygrid.stencil.Stencil``
  built from ``wilson_displacements()``, point p < 4 is x + mu, p >= 4 is x - mu).

Structure (generated source, one module per lane count and precision, numba's
on-disk cache keeps the machine code).  The kernel is a nogil
``dhop_kernel(lo, hi, ...)`` over 4D outer sites, launched with the backend's
``accelerator_for`` (a thread pool; no ``prange``, whose spinning OpenMP
threads fight the other pools on a 2-core machine).  It walks tiles of outer
sites (accumulator of the tile, all Ls slices, about 24 KiB: ``TILE_BYTES``)
and calls one helper per point and tile (``point_fwd``/``point_bwd``, the
gamma structure of mu passed as spin offsets and signs), so the neighbour
spinors of one direction are read as one stream, with a software prefetch
of the neighbour spinor and link ``PREFETCH_DISTANCE`` sites ahead (worth
about 1.5x at 16^4 here).  Per 4D site and point the
link is loaded (lane-permuted for a wrapped backward neighbour, and daggered
in the multiply) once and reused for all Ls slices; per slice the neighbour
spinor is projected to a half spinor (2 spins x 3 colours), its lanes are
permuted only when the neighbour wrapped around a virtual node (a constant
lane map ``l ^ x`` for the half swap of a 2-way split dimension, which LLVM
turns into a vector shuffle; an indexed gather for any other map), and
``mr``/``mr_adj`` multiply it by U or U^dag one colour row at a time and add
the rebuilt spinor to the accumulator (U h is never stored to scratch); the tile is
written once: 1320 flops per site (Grid's count).

Code generation follows what makes numba's LLVM vectorise the lanes: flat 1D
arrays indexed with unsigned integers (``U = np.uint64``), every lane written
out and all lanes of the operands loaded before anything is stored (the SLP
vectoriser then merges them), colour loops kept as loops inside small helper
functions (compile time grows faster than linearly with function size), no
array variable reassigned in the site loop (numba would count references with
atomics on every site, which two threads contend on), and integer arguments
passed as typed globals (an integer literal argument compiles a variant of the
callee per value).

Spin projection in Grid's chiral basis: every g_mu = [[0, A], [B, 0]] with
2x2 blocks, AB = 1, and each row of A and B has one nonzero entry, +-1 or +-i.
For (1 + s g_mu) psi (s = -1 forward, +1 backward; flipped for dag):
    h_a = psi_a + s A[a, pA(a)] psi_{2 + pA(a)}                 (a = 0, 1)
    result_a = h_a,   result_{2+b} = s B[b, pB(b)] h_{pB(b)}      (b = 0, 1)
The generated code takes this structure from ``pygrid.tensors.constant.Gamma``
(:func:`_gamma_structure`); :func:`projection_tables` gives it as tables (checked
against (1 -+ g_mu) in tests/test_wilson.py).
"""
from __future__ import annotations

import functools

import numpy as np

from ..accelerator.compile_cache import load_module
from ..errors import ConformabilityError, SiteTypeError
from ..tensors.constant import Gamma

try:
    from llvmlite import ir as _ir
    from numba.core import cgutils as _cgutils
    from numba.core import types as _types
    from numba.extending import intrinsic as _intrinsic

    @_intrinsic
    def prefetch(typingctx, arr, idx):
        """Software prefetch (LLVM llvm.prefetch: read, high locality) of arr[idx] into the caches."""
        def codegen(context, builder, sig, args):
            ary = context.make_array(sig.args[0])(context, builder, args[0])
            ptr = builder.bitcast(builder.gep(ary.data, [args[1]]), _ir.IntType(8).as_pointer())
            i32 = _ir.IntType(32)
            fnty = _ir.FunctionType(_ir.VoidType(), [ptr.type, i32, i32, i32])
            fn = _cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
            builder.call(fn, [ptr, _ir.Constant(i32, 0), _ir.Constant(i32, 3), _ir.Constant(i32, 1)])
            return context.get_dummy_value()

        return _types.void(arr, idx), codegen
except ImportError:  # pragma: no cover - numba is a hard dependency
    prefetch = None

#: outer sites ahead of the current one whose neighbour data each point helper prefetches
PREFETCH_DISTANCE = 4

#: Grid's flop count per (4D or 5D) site of the Wilson hopping term: 8 * Nc * (7 + 16 * Nc)
FLOPS_PER_SITE = 1320


def _phase(c):
    """(is_imag, sign) for c in {+1, -1, +i, -i}."""
    c = complex(c)
    if abs(c.imag) < 1e-12 and abs(abs(c.real) - 1) < 1e-12:
        return 0, float(np.sign(c.real))
    if abs(c.real) < 1e-12 and abs(abs(c.imag) - 1) < 1e-12:
        return 1, float(np.sign(c.imag))
    raise SiteTypeError(f"gamma matrix entry {c} is not +-1 or +-i")


@functools.lru_cache(maxsize=None)
def projection_tables():
    """Spin projection and reconstruction tables, indexed [dag, point, half-spin].

    Returns int32 arrays psrc, pim, rsrc, rim and float64 psg, rsg, each
    shaped (2, 8, 2): for point p (mu = p % 4, forward when p < 4),
    h_a = psi_a + c_p(a) psi_{psrc}, c = psg (times i if pim), and the lower
    spin 2+b of the result is d_p(b) h_{rsrc}, d = rsg (times i if rim).
    """
    psrc = np.zeros((2, 8, 2), np.int32)
    pim = np.zeros((2, 8, 2), np.int32)
    psg = np.zeros((2, 8, 2), np.float64)
    rsrc = np.zeros((2, 8, 2), np.int32)
    rim = np.zeros((2, 8, 2), np.int32)
    rsg = np.zeros((2, 8, 2), np.float64)
    for dag in (0, 1):
        for p in range(8):
            mu = p % 4
            g = Gamma.mu[mu].array()
            if np.any(g[:2, :2]) or np.any(g[2:, 2:]):
                raise SiteTypeError("spin projection assumes a chiral basis (off-diagonal gamma blocks)")
            A, B = g[:2, 2:], g[2:, :2]
            s = -1.0 if p < 4 else 1.0
            if dag:
                s = -s
            for a in range(2):
                j = int(np.flatnonzero(A[a])[0])
                psrc[dag, p, a] = 2 + j
                pim[dag, p, a], psg[dag, p, a] = _phase(s * A[a, j])
                k = int(np.flatnonzero(B[a])[0])
                rsrc[dag, p, a] = k
                rim[dag, p, a], rsg[dag, p, a] = _phase(s * B[a, k])
    return psrc, pim, psg, rsrc, rim, rsg


def _gamma_structure():
    """Per mu: [(j_a, is_imag, sign) for a in 0, 1] of A and [(k_b, is_imag, sign)] of B (g_mu = [[0, A], [B, 0]])."""
    out = []
    for mu in range(4):
        g = Gamma.mu[mu].array()
        if np.any(g[:2, :2]) or np.any(g[2:, 2:]):
            raise SiteTypeError("spin projection assumes a chiral basis (off-diagonal gamma blocks)")
        A, B = g[:2, 2:], g[2:, :2]
        pa, pb = [], []
        for a in range(2):
            j = int(np.flatnonzero(A[a])[0])
            pa.append((j,) + _phase(A[a, j]))
            k = int(np.flatnonzero(B[a])[0])
            pb.append((k,) + _phase(B[a, k]))
        out.append((tuple(pa), tuple(pb)))
    return tuple(out)


def _source(ns, dtype):
    """numba source of the hopping kernel and its helpers for ns lanes of ``dtype`` reals."""
    NS = int(ns)
    L = range(NS)
    gam = _gamma_structure()
    out = [
        "import numpy as np",
        "from numba import njit",
        "from pygrid.qcd.kernels_wilson import prefetch",
        "",
        f"NS = {NS}",
        f"Z = np.{dtype}",
        "U = np.uint64",
        f"S1 = U({NS})",
        f"FS = U({24 * NS})  # reals per fermion site",
        f"GS = U({72 * NS})  # reals per gauge-field site (4 links)",
    ]
    out += [f"K{k} = U({k})" for k in range(2 * NS)]
    out += [f"Q{k} = U({k * 2 * NS})" for k in range(12)]  # offset of complex component k
    out += [f"M{mu} = U({mu * 9 * 2 * NS})" for mu in range(4)]  # offset of link mu in a site
    out += [f"P{p} = U({p})" for p in range(8)]
    # integer arguments go through typed globals: a literal argument would compile a variant per value
    out += ["R12 = np.int64(12)", "R18 = np.int64(18)"]
    line = 64 // np.dtype(dtype).itemsize  # reals per cache line
    out += [f"LINE = U({line})", f"NLS = {(24 * NS + line - 1) // line}  # cache lines per fermion site",
            f"NLG = {(18 * NS + line - 1) // line + 1}  # cache lines a link may straddle",
            f"PD = {int(PREFETCH_DISTANCE)}", f"PDU = U({int(PREFETCH_DISTANCE)})"]
    # (mult is deliberately not inline="always": measured here, that cost 40-150% more compile time
    # and was no faster)
    out += ['_jit = njit(fastmath=True, cache=True, nogil=True, error_model="numpy", boundscheck=False)', ""]

    def fn(sig, body, doc):
        out.append("@_jit")
        out.append(f"def {sig}:")
        out.append(f'    """{doc}"""')
        out.extend("    " + line for line in body)
        out.append("")

    def assign(names, values):
        return "; ".join(f"{n} = {v}" for n, v in zip(names, values))

    def load(var, arr, base):
        """Two lines of lane loads: var r{l} (real plane) and var i{l} (imaginary plane) at arr[base]."""
        return [assign([f"{var}r{l}" for l in L], [f"{arr}[{base} + K{l}]" for l in L]),
                assign([f"{var}i{l}" for l in L], [f"{arr}[{base} + K{NS + l}]" for l in L])]

    def store(arr, base, re, im):
        """Lane stores arr[base] = (re, im) with format strings in {l}."""
        return [assign([f"{arr}[{base} + K{l}]" for l in L], [re.format(l=l) for l in L]),
                assign([f"{arr}[{base} + K{NS + l}]" for l in L], [im.format(l=l) for l in L])]

    def times_phase(imag, sign, var, sg="sg"):
        """(re, im) format strings of sg * phase * var for phase = sign (imag=0) or sign*i (imag=1)."""
        p, m = ("+", "-") if sign > 0 else ("-", "+")
        if not imag:
            return f" {p} {sg} * {var}r{{l}}", f" {p} {sg} * {var}i{{l}}"
        return f" {m} {sg} * {var}i{{l}}", f" {p} {sg} * {var}r{{l}}"

    for kind, imag in (("re", 0), ("im", 1)):
        # projection: h_a = psi_a + s_a ph psi[y_a]   (ph = 1 or i; y_a the partner spin's offset)
        body = ["P = U(po)", "for c in range(3):", "    C = U(c) * Q1"]
        for a, (y, sg) in enumerate((("ya", "sa"), ("yb", "sb"))):
            body += ["    " + x for x in load(f"x{a}", "psi", f"P + Q{3 * a} + C")]
            body += ["    " + x for x in load(f"y{a}", "psi", f"P + {y} + C")]
        for a, sg in enumerate(("sa", "sb")):
            tr, ti = times_phase(imag, 1, f"y{a}", sg)
            body += ["    " + x for x in store("h", f"Q{3 * a} + C", f"x{a}r{{l}}" + tr, f"x{a}i{{l}}" + ti)]
        fn(f"proj_{kind}(h, psi, po, ya, yb, sa, sb)", body,
           "Half spinor h_a = psi_a + s_a " + ("i " if imag else "") + "psi[y_a] (a = 0, 1) of the spinor at psi[po:].")

    # colour multiply fused with the reconstruction: the half spinor h is loaded once into locals,
    # and per colour row i, uh_a = (U h_a)_i (adj: (U^dag h_a)_i) stays in registers and is added
    # to the accumulator as acc_a += uh_a, acc_{2+b} += s_b ph uh[k_b] (k_0 = sw, k_1 = 1 - sw)
    for kind, imag in (("re", 0), ("im", 1)):
        for name, adj in (("mr", False), ("mr_adj", True)):
            body = ["A = U(ao)", "B = U(uo)"]
            for a in range(2):
                for j in range(3):
                    body += load(f"h{a}{j}", "h", f"Q{3 * a + j}")
            body += ["for i in range(3):", "    I = U(i) * Q1" if adj else "    I = U(i) * Q3", "    C = U(i) * Q1"]
            for j in range(3):
                body += ["    " + x for x in load(f"u{j}", "u", f"B + I + Q{3 * j if adj else j}")]
            for a in range(2):
                if adj:
                    re = " + ".join(f"u{j}r{{l}} * h{a}{j}r{{l}} + u{j}i{{l}} * h{a}{j}i{{l}}" for j in range(3))
                    im = " + ".join(f"u{j}r{{l}} * h{a}{j}i{{l}} - u{j}i{{l}} * h{a}{j}r{{l}}" for j in range(3))
                else:
                    re = " + ".join(f"u{j}r{{l}} * h{a}{j}r{{l}} - u{j}i{{l}} * h{a}{j}i{{l}}" for j in range(3))
                    im = " + ".join(f"u{j}r{{l}} * h{a}{j}i{{l}} + u{j}i{{l}} * h{a}{j}r{{l}}" for j in range(3))
                body.append("    " + assign([f"w{a}r{l}" for l in L], [re.format(l=l) for l in L]))
                body.append("    " + assign([f"w{a}i{l}" for l in L], [im.format(l=l) for l in L]))
            for b in range(2):
                for c in "ri":
                    body.append("    " + assign([f"g{b}{c}{l}" for l in L],
                                               [f"w{1 - b}{c}{l} if sw else w{b}{c}{l}" for l in L]))
            for sp in range(4):
                body += ["    " + x for x in load(f"a{sp}", "acc", f"A + Q{3 * sp} + C")]
            for a in range(2):
                body += ["    " + x for x in store("acc", f"A + Q{3 * a} + C", f"a{a}r{{l}} + w{a}r{{l}}",
                                                  f"a{a}i{{l}} + w{a}i{{l}}")]
            for b, sg in enumerate(("sa", "sb")):
                tr, ti = times_phase(imag, 1, f"g{b}", sg)
                body += ["    " + x for x in store("acc", f"A + Q{3 * (2 + b)} + C", f"a{2 + b}r{{l}}" + tr,
                                                  f"a{2 + b}i{{l}}" + ti)]
            fn(f"{name}_{kind}(acc, ao, u, uo, h, sw, sa, sb)", body,
               "acc[ao:] += the spinor rebuilt from uh = " + ("U^dag" if adj else "U")
               + " h (U the link at u[uo:], h a half spinor), with phase " + ("i" if imag else "1") + ".")

    fn("permute(d, doff, s, soff, nrows, lanes, pm)", [
        "po = U(pm) * S1",
        assign([f"m{l}" for l in L], [f"U(lanes[po + K{l}])" for l in L]),
        "D = U(doff)",
        "S = U(soff)",
        "for r in range(nrows):",
        "    q = U(r) * S1",
        "    " + assign([f"t{l}" for l in L], [f"s[S + q + m{l}]" for l in L]),
        "    " + assign([f"d[D + q + K{l}]" for l in L], [f"t{l}" for l in L]),
    ], "d[doff:] = nrows rows of NS lanes from s[soff:], lane l read from lane lanes[pm, l].")
    # the same with the lane map l -> l ^ x for a power of two x (the half swap of one SIMD-split
    # dimension, the only permute of a 2-way split): constant lane offsets, which LLVM turns into
    # a vector load and a shuffle; any other map falls back to the indexed gather above
    body = ["D = U(doff)", "S = U(soff)"]
    xs = [1 << b for b in range(NS.bit_length() - 1)]
    for i, x in enumerate(xs):
        body += [f"{'if' if i == 0 else 'elif'} px == {x}:", "    for r in range(nrows):", "        q = U(r) * S1",
                 "        " + assign([f"t{l}" for l in L], [f"s[S + q + K{l ^ x}]" for l in L]),
                 "        " + assign([f"d[D + q + K{l}]" for l in L], [f"t{l}" for l in L])]
    body += (["else:", "    permute(d, doff, s, soff, nrows, lanes, pm)"] if xs else
             ["permute(d, doff, s, soff, nrows, lanes, pm)"])
    fn("permx(d, doff, s, soff, nrows, lanes, pm, px)", body,
       "permute() with the lane map given as an xor mask px when px > 0 (see lane_xor()).")
    fn("zero(d, n)", ["for i in range(n):", "    d[U(i)] = Z(0.0)"], "d[:n] = 0.")
    fn("write(d, doff, a, aoff, scale, nrows)", [
        "D = U(doff)", "A = U(aoff)", "for r in range(nrows):", "    q = U(r) * S1",
        "    " + assign([f"t{l}" for l in L], [f"a[A + q + K{l}]" for l in L]),
        "    " + assign([f"d[D + q + K{l}]" for l in L], [f"scale * t{l}" for l in L]),
    ], "d[doff:] = scale * a[aoff:] for nrows rows of NS lanes.")
    fn("write_diag(d, doff, a, aoff, scale, x, alpha, nrows)", [
        "D = U(doff)", "A = U(aoff)", "for r in range(nrows):", "    q = U(r) * S1",
        "    " + assign([f"t{l}" for l in L], [f"a[A + q + K{l}]" for l in L]),
        "    " + assign([f"y{l}" for l in L], [f"x[D + q + K{l}]" for l in L]),
        "    " + assign([f"d[D + q + K{l}]" for l in L], [f"scale * t{l} + alpha * y{l}" for l in L]),
    ], "d[doff:] = scale * a[aoff:] + alpha * x[doff:] for nrows rows of NS lanes (x may be d).")

    # one helper per direction sense: the contribution of point p (mu, forward or backward) to a
    # tile of outer sites [o0, o1), all Ls slices; one neighbour stream at a time, the link loaded
    # once per 4D site and reused for every slice.  The gamma structure of mu comes in as offsets
    # (ya, yb: partner spins; sw: 1 if the reconstruction swaps the two halves), signs and im (phase 1 or i).
    step = [
        "            if im:",
        "                proj_im(h, psi, (n * LS + U(s)) * FS, ya, yb, sa, sb)",
        "            else:",
        "                proj_re(h, psi, (n * LS + U(s)) * FS, ya, yb, sa, sb)",
        "{perm}",
        "            if im:",
        "                {mult}_im(acc, A + U(s) * FS, {mult_args}, sw, ra, rb)",
        "            else:",
        "                {mult}_re(acc, A + U(s) * FS, {mult_args}, sw, ra, rb)",
    ]

    def steps(perm, mult):
        return [x.format(perm=perm, mult=fname, mult_args=mult) for x in step if x != "{perm}" or perm]

    for sense, fname in (("fwd", "mr"), ("bwd", "mr_adj")):
        body = [
            "N4 = U(n4)", "LS = U(Ls)", "O0 = U(o0)",
            "for o in range(o0, o1):",
            "    uo = U(o)",
            "    k = p * N4 + uo",
            "    if o + PD < n4:",
            "        # the neighbour spinors and the link PD sites ahead, read in PD sites' time",
            "        n2 = U(nbr[k + PDU])",
            "        b2 = n2 * LS * FS",
            "        for q in range(Ls * NLS):",
            "            prefetch(psi, b2 + U(q) * LINE)",
        ] + ([
            "        b2 = n2 * GS + M",
            "        for q in range(NLG):",
            "            prefetch(u, b2 + U(q) * LINE)",
        ] if sense == "bwd" else [
            "        b2 = (uo + PDU) * GS + M",
            "        for q in range(NLG):",
            "            prefetch(u, b2 + U(q) * LINE)",
        ]) + [
            "    n = U(nbr[k])",
            "    pm = perm[k]",
            "    px = pxor[pm]",
            "    A = (uo - O0) * LS * FS",
        ]
        if sense == "fwd":
            # U_mu(x) at the output site: permuted only through the neighbour's half spinor
            body += ["    lo = uo * GS + M", "    if pm != 0:", "        for s in range(Ls):"]
            body += steps("            permx(t, K0, h, K0, R12, lanes, pm, px)", "u, lo, t")
        else:
            # U_mu(x - mu)^dag from the neighbour, lanes permuted like its spinor
            body += ["    lo = n * GS + M", "    if pm != 0:", "        permx(ul, K0, u, lo, R18, lanes, pm, px)",
                     "        for s in range(Ls):"]
            body += steps("            permx(t, K0, h, K0, R12, lanes, pm, px)", "ul, K0, t")
        body += ["    else:", "        for s in range(Ls):"]
        body += steps("", "u, lo, h")
        what = "U_mu(x) psi(x + mu)" if sense == "fwd" else "U_mu(x - mu)^dag psi(x - mu)"
        fn(f"point_{sense}(o0, o1, acc, psi, u, nbr, perm, lanes, pxor, n4, Ls, p, M, im, ya, yb, sa, sb, sw, ra, rb, "
           "h, t, ul)", [x[4:] if False else x for x in body],
           f"acc[tile] += (1 +- g_mu) {what} for point p on outer sites [o0, o1).")

    body = [
        "scale = coef[0]", "alpha = coef[1]", "sf = coef[2]", "sb = coef[3]",
        "acc = np.empty(tile * Ls * 24 * NS, Z)", "h = np.empty(12 * NS, Z)", "t = np.empty(12 * NS, Z)",
        "ul = np.empty(18 * NS, Z)",
        "LS = U(Ls)",
        "for o0 in range(lo, hi, tile):",
        "    o1 = min(o0 + tile, hi)",
        "    nrows = (o1 - o0) * Ls * 24",
        "    zero(acc, nrows * NS)",
    ]
    for p in range(8):
        mu = p % 4
        pa, pb = gam[mu]
        sg = "sf" if p < 4 else "sb"
        if pb[0][0] + pb[1][0] != 1:
            raise SiteTypeError("spin reconstruction expects the lower block of gamma_mu to be a permutation")
        if pa[0][1] != pa[1][1] or pb[0][1] != pb[1][1] or pa[0][1] != pb[0][1]:
            raise SiteTypeError("spin projection expects one phase kind (real or imaginary) per gamma matrix")
        im = pa[0][1]
        sgn = lambda x: sg if x > 0 else f"-{sg}"  # noqa: E731
        body.append(
            f"    point_{'fwd' if p < 4 else 'bwd'}(o0, o1, acc, psi, {'uf' if p < 4 else 'ub'}, nbr, perm, lanes, pxor, n4, Ls, "
            f"P{p}, M{mu}, K{im}, Q{3 * (2 + pa[0][0])}, Q{3 * (2 + pa[1][0])}, {sgn(pa[0][2])}, {sgn(pa[1][2])}, "
            f"K{pb[0][0]}, {sgn(pb[0][2])}, {sgn(pb[1][2])}, h, t, ul)")
    body += [
        "    D = U(o0) * LS * FS",
        "    if use_diag:",
        "        write_diag(out, D, acc, K0, scale, diag, alpha, nrows)",
        "    else:",
        "        write(out, D, acc, K0, scale, nrows)",
    ]
    fn("dhop_kernel(lo, hi, out, psi, uf, ub, nbr, perm, lanes, pxor, n4, Ls, coef, diag, use_diag, tile)", body,
       "The hopping term on 4D outer sites [lo, hi) (all Ls slices) in tiles of outer sites; see dhop().")
    return "\n".join(out) + "\n"

_kernels = {}


def kernel_for(nsimd, dtype="float64"):
    """The compiled kernel for a lane count and real dtype (source generated once, cached on disk)."""
    key = (int(nsimd), np.dtype(dtype).name)
    k = _kernels.get(key)
    if k is None:
        import numba

        # the lane-unrolled statements vectorise only with LLVM's SLP vectoriser (switched on by
        # pygrid.accelerator.backends); the flag is part of the source so that numba's on-disk
        # cache keeps the two builds apart
        src = f"# numba SLP_VECTORIZE={int(numba.config.SLP_VECTORIZE)}\n" + _source(*key)
        k = load_module(src, "pygrid_wilson").dhop_kernel
        _kernels[key] = k
    return k


def _threads():
    try:
        import numba

        return numba.get_num_threads()
    except Exception:  # pragma: no cover
        return 1


#: bytes of the per-tile accumulator (Ls slices of a tile of outer sites), sized to stay in L1
TILE_BYTES = 24 * 1024


def _tile(Ls, nsimd, dtype):
    return max(1, TILE_BYTES // (int(Ls) * 24 * int(nsimd) * np.dtype(dtype).itemsize))


def lane_xor(lanes):
    """Per permute pm, the x with lanes[pm, l] == l ^ x for all l if x is a power of two, else 0 (generic)."""
    lanes = np.asarray(lanes).reshape(len(lanes), -1)
    ids = np.arange(lanes.shape[1])
    out = np.zeros(len(lanes), np.int64)
    for pm, row in enumerate(lanes):
        x = int(row[0])
        if pm and x and x & (x - 1) == 0 and np.array_equal(row, ids ^ x):
            out[pm] = x
    return out


def _flat(a, name):
    if not a.flags.c_contiguous:
        raise ConformabilityError(f"dhop: {name} buffer must be C-contiguous")
    return a.reshape(-1)


def dhop(out, psi, uf, ub, stencil, Ls=1, scale=-0.5, alpha=0.0, diag=None, dag=False):
    """Run the hopping kernel on raw buffers (see the module docstring); returns out.

    ``out`` must not alias ``psi`` (neighbours are read while results are written);
    ``diag`` may be ``out`` itself.  The 4D outer sites are split over the backend's
    threads (``accelerator_for``).
    """
    nsimd = out.shape[3]
    n4 = stencil.neighbours.shape[1]
    dtype = out.dtype
    if stencil.npoints != 8:
        raise ConformabilityError("the Wilson kernel needs the 8-point stencil (wilson_displacements())")
    for name, a, nc in (("out", out, 12), ("psi", psi, 12), ("uf", uf, 36), ("ub", ub, 36)):
        if a.dtype != dtype or a.ndim != 4 or a.shape[1] != nc or a.shape[2] != 2 or a.shape[3] != nsimd:
            raise ConformabilityError(
                f"dhop: {name} buffer has shape {a.shape} and dtype {a.dtype}; expected (n, {nc}, 2, {nsimd}) {dtype}")
    if out.shape[0] != Ls * n4 or psi.shape[0] != Ls * n4 or uf.shape[0] != n4 or ub.shape[0] != n4:
        raise ConformabilityError(
            f"dhop: buffer sizes out {out.shape[0]}, psi {psi.shape[0]}, links {uf.shape[0]}/{ub.shape[0]} "
            f"do not match Ls={Ls} x {n4} stencil sites")
    if out is psi or np.shares_memory(out, psi):
        raise ConformabilityError("dhop: out must not alias psi")
    use_diag = diag is not None and alpha != 0.0
    if use_diag:
        if diag.shape != out.shape or diag.dtype != dtype:
            raise ConformabilityError(f"dhop: diag buffer has shape {diag.shape} and dtype {diag.dtype}; "
                                      f"expected {out.shape} {dtype}")
    else:
        diag, alpha = out, 0.0
    # forward points use (1 - g_mu), backward (1 + g_mu); dag swaps them
    sf = 1.0 if dag else -1.0
    coef = np.array([scale, alpha, sf, -sf], dtype=dtype)
    k = kernel_for(nsimd, dtype)
    from ..accelerator.backends import get_backend

    backend = get_backend()
    if backend.name not in ("numpy", "openmp"):
        # the GPU backends do not run hand-written numba kernels; these buffers are host arrays
        backend = get_backend("openmp")
    backend.accelerator_for(
        n4, k, _flat(out, "out"), _flat(psi, "psi"), _flat(uf, "uf"), _flat(ub, "ub"),
        stencil.neighbours.reshape(-1), stencil.perm.reshape(-1), stencil.lanes.reshape(-1),
        lane_xor(stencil.lanes), n4, int(Ls), coef, _flat(diag, "diag"), use_diag, _tile(Ls, nsimd, dtype))
    return out
