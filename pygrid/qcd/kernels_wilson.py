"""The hand-unrolled Wilson hopping kernel for the CPU (``--dslash-unroll``): numba, explicit SIMD vectors.

The variant beside the generic kernel of :mod:`pygrid.qcd.kernels_generic`, as
Grid keeps its HandUnroll kernels beside the generic ones.  This module generates and compiles
it; :mod:`pygrid.qcd.unrolled_launch` launches it for :func:`pygrid.qcd.dslash.dhop`, which checks
the buffers, and :mod:`pygrid.qcd.compressed_links` makes the links its ``compressed`` variant
reads.  It computes, for every output site x
(4D outer site o, fifth-dimension index s)

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
``accelerator_for`` (one block of sites per OpenMP thread).  Its twin ``dhop_local``
leaves out the branches that read a neighbour received from another rank; it
runs every site on one rank and the interior sites under MPI, so a job on one
rank compiles only it (a compile takes seconds per thousand lines of source).  It is written with
explicit SIMD vectors (:mod:`pygrid.accelerator.simd_numba`: one variable is
one ``<Nsimd x real>`` register, so every operation is a vector instruction and
the source is Nsimd times shorter than a lane-unrolled one).

Per site, slice and point the neighbour is projected to a half spinor with the
+-1/+-i structure of g_mu fixed in the code and the sign (forward, backward) a
constant of the compiled kernel, so that it costs an add or a subtract, not a
multiply-add (the adjoint, whose signs are flipped, has kernels of its own:
:func:`_signs`); its lanes are permuted
only when the neighbour wrapped around a virtual node (a constant lane map
``l ^ x``, one shuffle per vector, for the half swap of a 2-way split dimension;
any other map through the lane table); it is multiplied by U (or U^dag of the
backward link, whose product is permuted instead of the link), reading the link
from memory; and the spins of the result that it rebuilds are updated.  The
order of that work follows the registers the kernels are compiled for (:func:`wide_default`;
``--dslash-structure wide|narrow`` chooses it instead):

* wide (AVX-512, 32 vector registers), 4D fields in the caches' reach (the same
  ``unrolled_launch.REGISTER_BYTES``; :data:`unrolled_launch.TILED_4D`): site by site, the eight points
  in turn, the result spinor held in 24 vector variables and written once; both
  spins of the half spinor go through the link together, so each link element is
  read once per point, as Grid keeps the spinor in registers (LLVM keeps most of
  the 24 in registers; at 8^4 this ran 1.4x the tiled order below);
* wide, 5D fields in the caches' reach (``unrolled_launch.REGISTER_BYTES``): the same register order slice
  by slice (:func:`_register_body_5d`, ``dhop_local_register``);
* wide, larger 5D fields and larger 4D fields on compressed links, and narrow (AVX2, 16
  registers), 4D and 5D: the tiled order,
  tiles of outer sites (an accumulator of all Ls slices of the tile, about
  24 KiB: ``unrolled_launch.TILE_BYTES``, in L1) and, per tile, one loop per direction, its
  forward and backward points added into the accumulator together (:func:`_tile_loops`,
  :data:`TILE_PAIRS`), so
  the Ls slices of a neighbour are read as one stream, with software
  prefetches (into L2; on fields larger than
  the caches) of the neighbour and link ``PREFETCH_DISTANCE`` sites ahead and of the neighbour's slice
  ``SLICE_PREFETCH`` slices ahead; both spins of the half spinor go through the
  link together (on AVX2 a few vectors spill, and it ran 7-10% faster out of
  cache than one spin at a time, which reads each link twice).  For 4D fields
  the loops have no loop over slices; for 5D fields all but the last are one
  function, compiled once, that every variant of the last step calls.  With eight
  neighbour streams per slice the register order ran slower out of cache, on
  AVX2 for 4D fields too (12^4 and 16^4: 0.6-0.7x), though 1.2x in cache on one thread.

When the fields outgrow the caches (``far``), every structure writes the result
past them with non-temporal stores, as Grid streams its Dhop result.

The result is written as ``scale * acc + alpha * diag``: 1320 flops per site (Grid's count).

Arrays are indexed flat with unsigned integers (``U = np.uint64``; numba's
wraparound checks on signed indices defeat vectorisation); the small helpers
are inlined by numba (``inline="always"``), so the vectors never go through
memory between them; no array variable is reassigned in the site loop, and each kernel
rebinds its array arguments without their owners at its top (``simd_numba.unowned``), so that
numba's reference counts, which it keeps per site on arrays an inlined helper takes, are
no-ops, not atomic operations on every site (which two threads contend on, and which wait
for the streamed stores before them).

Spin projection in Grid's chiral basis: every g_mu = [[0, A], [B, 0]] with
2x2 blocks, AB = 1, and each row of A and B has one nonzero entry, +-1 or +-i.
For (1 + s g_mu) psi (s = -1 forward, +1 backward; flipped for dag):
    h_a = psi_a + s A[a, pA(a)] psi_{2 + pA(a)}                 (a = 0, 1)
    result_a = h_a,   result_{2+b} = s B[b, pB(b)] h_{pB(b)}      (b = 0, 1)
The generated code takes this structure from ``pygrid.tensors.constant.Gamma``
(:func:`gamma_structure`); :func:`projection_tables` gives it as tables (checked
against (1 -+ g_mu) in tests/test_wilson.py).
"""
from __future__ import annotations

import functools

import numpy as np

from ..accelerator import simd_numba
from ..accelerator.compile_cache import load_module
from ..cartesian.simd import host_simd_bits
from ..config import current
from ..errors import SiteTypeError
from ..tensors.constant import Gamma

#: outer sites ahead of the current one whose neighbour data each point helper prefetches
PREFETCH_DISTANCE = 4

#: 5D fields: slices ahead of the current one of the neighbour's Ls slices that are prefetched
SLICE_PREFETCH = 4

#: the wide 4D kernel on fields larger than the caches: sites ahead of the current one whose
#: links and z, t neighbours are prefetched into L2
FAR_DISTANCE = 2

#: the ``compressed`` value of the kernels on whole links stored direction by direction, as the
#: compressed ones are (:class:`pygrid.qcd.compressed_links.LinksByDirection`): each pass of the
#: tiled order then reads one stream of its direction's links, not a quarter of each site's four
#: (AVX2 code, Wilson 8^4, 1.06-1.10x; docs/performance.md, "Known limits")
BY_DIRECTION = 3

#: reals per link (of each lane) the kernel reads: a whole SU(3) matrix, or its first two rows
#: (``compressed``, :func:`pygrid.qcd.compressed_links.compress_links`)
LINK_REALS = {False: 18, True: 12, BY_DIRECTION: 18}


def _rebuilds(compressed):
    """Whether the kernels of this ``compressed`` value rebuild each link's third row."""
    return bool(compressed) and compressed != BY_DIRECTION

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


@functools.cache
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


def gamma_structure():
    """Per mu: [(j_a, is_imag, sign) for a in 0, 1] of A and [(k_b, is_imag, sign)] of B (g_mu = [[0, A],
    [B, 0]])."""
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


def _source(ns, dtype, five_d, wide=False, compressed=False, dag=False, pairs=None):
    """numba source of the hopping kernel written with explicit SIMD vectors (pygrid.accelerator.simd_numba).

    ``five_d``: the variant for 5D fields, which also prefetches the neighbour's slice
    ``SLICE_PREFETCH`` slices ahead inside the loop over the fifth dimension.
    ``wide``: the structure for 32 vector registers (both spins of the half spinor through
    the link together; for 4D fields the result spinor held in registers over the points).
    ``pairs``: the tiled order's loops add a direction's two points each, and the 5D register
    order its points in their order (:func:`_tile_loops`; default: :func:`_resolve_pairs`).
    ``compressed`` (4D fields): links stored as their first two rows
    (``compressed_links.compress_links``), the kernels ``dhop_local`` and ``dhop_kernel`` alone,
    taking the phase tables ``zif, zib, ztab`` after their other arguments (the links of a halo,
    ``ubh``, whole).  The register order rebuilds a site's eight third rows before its first point,
    the tiled order each point's just before its product.  ``compressed`` :data:`BY_DIRECTION`: the
    same kernels on whole links stored direction by direction (the tables not read).
    ``dag``: the adjoint's kernels (names ending ``_dag``; the signs of :func:`_signs`), a module of
    their own, which an operator never applied as its adjoint never loads or compiles.
    """
    NS = int(ns)
    out = [
        "import numpy as np",
        "from numba import njit",
        "from pygrid.accelerator.simd_numba import prefetch_l2_lines, vload, vstore, vzero, "
        "vsplat, vfma, vfms, vxor, vpermute, vcmatvec, vloadt, vstoret, vstoret_nt, store_fence, vcaxpy, "
        "vcaxpy2, vscalet, vpermt, vproj2, vrecon2, vthirdrow, vcmatvec3, unowned, vpin",
        "",
        f"W = {NS}",
        f"Z = np.{dtype}",
        "U = np.uint64",
        f"FS = U({24 * NS})  # reals per fermion site",
        f"GS = U({4 * LINK_REALS[compressed] * NS})  # reals per gauge-field site (4 links)",
        f"HS = U({12 * NS})  # reals per half spinor (a halo slice)",
        f"NSU = U({NS})",
    ]
    out += [f"Q{k} = U({k * NS})" for k in range(24)]  # offset of real plane k (component k//2, re/im)
    out += [f"M{mu} = U({mu * LINK_REALS[compressed] * NS})" for mu in range(4)]
    out += [f"LK = U({LINK_REALS[compressed] * NS})  # reals per link"]
    if compressed:  # the halo's links are whole
        out += [f"GW = U({72 * NS})"] + [f"MW{mu} = U({mu * 18 * NS})" for mu in range(4)]
    line = 64 // np.dtype(dtype).itemsize
    # cache lines of one fermion slice, and that a link and a site's four links may straddle
    # (fields start on a line, but a field adopted from numpy may not)
    lr = LINK_REALS[compressed]
    nls, nlg = (24 * NS + line - 1) // line, (lr * NS + line - 1) // line + 1
    nlu = (4 * lr * NS + line - 1) // line + 1
    out += [f"PD = {int(PREFETCH_DISTANCE)}", "PDU = U(PD)", f"SPF = U({int(SLICE_PREFETCH)})",
            f"FD = {int(FAR_DISTANCE)}"]
    out += [
        '_inl = njit(fastmath=True, cache=True, nogil=True, error_model="numpy", '
        'boundscheck=False, inline="always")',
        '_jit = njit(fastmath=True, cache=True, nogil=True, error_model="numpy", boundscheck=False)',
        "",
    ]

    def fn(sig, body, doc, deco="@_inl"):
        out.append(deco)
        out.append(f"def {sig}:")
        out.append(f'    """{doc}"""')
        if deco == "@_jit":
            params = [x.strip() for x in sig[sig.index("(") + 1:-1].split(",")]
            out.extend(f"    {x} = unowned({x})" for x in params)
        out.extend("    " + x for x in body)
        out.append("")

    def spin(k, base):
        """The 6 planes (3 colours, re/im) of spin k at base."""
        return f"{base} + Q{6 * k}"

    pairs = _resolve_pairs(pairs, wide, five_d)
    npts = len(_tile_loops(pairs)[0])
    for mu in range(4):
        if wide and not five_d:  # the register structure accumulates in its own variables
            break
        for a in range(2):
            # the tiled order's last loop writes the result (the others: vrecon2 into the tile)
            lo_, ph = _reconstruction(mu, a)
            up, low, ou, ol = spin(a, "A"), spin(lo_, "A"), spin(a, "d"), spin(lo_, "d")
            if npts == 2:  # wf + wb into the upper spins, g i^ph (wf - wb) into the lower
                ws, what = "wf, wb", (f"the spinors rebuilt from wf and wb, spin {a} of half spinors of "
                                      f"(1 + g gamma_{mu}) and (1 - g gamma_{mu})")
                body = [f"hu = vcaxpy2(None, vloadt(acc, {up}, 6, W), wf, wb, 0, 0)",
                        f"hl = vcaxpy2(g, vloadt(acc, {low}, 6, W), wf, wb, {ph}, {ph + 2})"]
            else:
                ws, what = "w", f"the spinor rebuilt from w, spin {a} of a half spinor of (1 + g gamma_{mu})"
                body = [f"hu = vcaxpy(None, vloadt(acc, {up}, 6, W), w, 0)",
                        f"hl = vcaxpy(g, vloadt(acc, {low}, 6, W), w, {ph})"]
            body += ["if use_diag:",
                     f"    ru = vcaxpy(a0, vscalet(s, hu), vloadt(x, {ou}, 6, W), 0)",
                     f"    rl = vcaxpy(a1, vscalet(s, hl), vloadt(x, {ol}, 6, W), 0)",
                     "    if banded:",
                     f"        ru = vcaxpy(e0, ru, vloadt(x, {spin(a, 'P0')}, 6, W), 0)",
                     f"        rl = vcaxpy(e1, rl, vloadt(x, {spin(lo_, 'P1')}, 6, W), 0)",
                     "else:",
                     "    ru = vscalet(s, hu)",
                     "    rl = vscalet(s, hl)",
                     "if nt:",
                     f"    vstoret_nt(out, {ou}, ru)",
                     f"    vstoret_nt(out, {ol}, rl)",
                     "else:",
                     f"    vstoret(out, {ou}, ru)",
                     f"    vstoret(out, {ol}, rl)"]
            args = f"acc, A, {ws}, g, out, d, s, x, a0, a1, use_diag, nt, banded, e0, e1, P0, P1"
            fn(f"fin{npts}_{mu}h{a}({args})", body,
               f"Spins {a} and {lo_}: out[d:] = s * (acc[A:] + {what}) (+ a * x[d:] if use_diag, a0 on the "
               f"upper spins and a1 on the lower, + e0 * x[P0:] and e1 * x[P1:] if banded; past the caches "
               f"if nt).")
    fn("hload2(h, b)", ["return vloadt(h, b, 12, W)"],
       "Both spins of a half spinor at h[b:], as received in a halo.")
    # the pin's 24 operands need a register each: AVX-512's 32 registers, each holding the W lanes
    # (AVX2 has 16, and LLVM aborts the process on an asm statement it cannot allocate)
    fits = host_simd_bits() >= 512 and NS * np.dtype(dtype).itemsize * 8 <= 512
    fn("hold(t)", ["return vpin(t)" if fits else "return t"],
       "The vectors of t, pinned where they fit the host's registers (vpin).")
    body = [
        "LS = U(Ls)",
        "for i in range(lo, hi):",
        "    n = U(rows[i])",
        "    mu = mus[i]",
        "    g = vsplat(signs[i], W)",
        "    for s in range(Ls):",
        "        S = U(s)",
        "        B = (n * LS + S) * FS",
        "        H = (U(i) * LS + S) * HS",
    ]
    for nt in (False, True):
        lines = list(body)
        for mu in range(4):
            lines += [
                f"        {'if' if mu == 0 else 'elif'} mu == {mu}:",
                f"            vstoret{'_nt' if nt else ''}(out, H, {_projection(mu, 'psi', 'B', 'g')})",
            ]
        if nt:
            lines += ["store_fence()"]
        fn(f"pack_kernel{'_nt' if nt else ''}(lo, hi, psi, rows, mus, signs, Ls, out)", lines,
           "Half spinors (1 + signs[i] gamma_mus[i]) psi of the sites rows[lo:hi], all Ls slices: the "
           "halos to send" + (", stored past the caches (another core reads them next)." if nt else "."),
           "@_jit")
    args = ("lo, hi, out, psi, uf, ub, diag, nbr, perm, lanes, pxor, n4, Ls, coef, use_diag, dco, dprev, "
            "sorder, sinv, mco, mprev, tile, far, "
            "sites, halo, ubh")
    # numba compiles a function at its first call: a job on one rank never compiles the halo
    # branches, and a domain-wall Dhop never the variants of a Schur operator's two hops
    d, adj = _dag(dag), " For the adjoint (the projectors' signs flipped)." if dag else ""
    if five_d:
        for halo in (True, False):
            fn(f"{_POINTS[halo]}{d}({_POINTS_ARGS})", _tile_points(nls, nlg, pairs, halo, dag),
               "The points of a tile (sites i0:i1) but its last loop's (_tile_loops) into its accumulator "
               "acc_t; every variant of the last step calls this one compiled function"
               + (", which also reads neighbours on other ranks." if halo else ".") + adj,
               "@_jit")
    if compressed:
        if five_d:
            raise ValueError("compressed links: the 4D kernel only")
        for name, halo in (("dhop_kernel", True), ("dhop_local", False)):
            body = _kernel_body(nls, nlg, nlu, False, wide, halo, dtype, compressed=compressed, dag=dag,
                                pairs=pairs)
            what = ("on whole links stored direction by direction (zif, zib, ztab not read)"
                    if compressed == BY_DIRECTION else
                    "on links stored as their first two rows (compress_links), the third rebuilt "
                    "times the phase of row zif[4 * site + mu] (zib at the backward neighbour) of ztab")
            fn(f"{name}{d}({args}, zif, zib, ztab)", body,
               f"{name} {what}" + ("; the halo's links (ubh) whole." if halo else ".") + adj, "@_jit")
        return "\n".join(out) + "\n"
    for last in LAST if five_d else ("plain",):
        sfx = ("" if last == "plain" else "_" + last) + d
        for name, halo in (("dhop_kernel", True), ("dhop_local", False)):
            doc = (f"The hopping term on the 4D outer sites sites[lo:hi], all Ls slices; see dhop() "
                   f"({LAST[last]}).{adj}" if halo else
                   f"dhop_kernel{sfx} on sites whose neighbours are all on this rank (halo and ubh are "
                   "not read).")
            body = _kernel_body(nls, nlg, nlu, five_d, wide, halo, dtype, last, dag=dag, pairs=pairs)
            fn(f"{name}{sfx}({args})", body, doc, "@_jit")
    if five_d and wide:
        fn(_register_site_call(dag), _register_site(dag, pairs), "The register order's hop of one site into "
           "acc_t (_register_site)." + adj, "@_jit")
        for last in LAST:
            sfx = ("" if last == "plain" else "_" + last) + d
            fn(f"dhop_local_register{sfx}({args})", _register_body_5d(last, dag, pairs),
               f"dhop_local{sfx} on fields in the caches' reach, in the register order "
               "(_register_body_5d).", "@_jit")
    return "\n".join(out) + "\n"


#: the variants of the 5D kernel's last step, each a function of its own so that a call compiles
#: only the one it runs (a kernel holding three took about twice as long to compile), all calling
#: one compiled function for the tile's first points (:func:`_tile_points`)
LAST = {"plain": "the diagonal term alpha * diag",
        "banded": "the diagonal term alpha * A diag, A cyclic bidiagonal in s (dco, dprev)",
        "solve": "A^-1 applied in s to the tile's result before it is written (sorder, sinv)",
        "mul": "B applied in s to the tile's result (mco, mprev), then the diagonal term alpha * diag "
               "or alpha * A diag",
        "mul_solve": "B, then A^-1, applied in s to the tile's result before it is written"}


def _signs(dag):
    """Source lines setting ``gf`` and ``gb``, the projector signs of the forward and backward points
    (-1 and +1; +1 and -1 for the adjoint), as constants of the compiled function: LLVM folds each
    multiply-add by a sign into an add or a subtract, which leave the FMA units to the link
    products (read from ``coef`` at run time, the signs took 24 of a point's 96 FMAs; in the caches
    the constants ran 1.02-1.15x, docs/performance.md, "The hand-unrolled Dhop kernel")."""
    f, b = (1.0, -1.0) if dag else (-1.0, 1.0)
    return [f"gf = vsplat(Z({f}), W)", f"gb = vsplat(Z({b}), W)"]


def _dag(dag):
    """The name suffix of a kernel compiled for the adjoint (:func:`_signs`)."""
    return "_dag" if dag else ""


def _reconstruction(mu, a):
    """(lower spin, vcaxpy phase of its sign) that spin a of a half spinor of (1 + g gamma_mu) rebuilds."""
    pb = gamma_structure()[mu][1]
    bl = [b for b in range(2) if pb[b][0] == a][0]
    _, imag, sign = pb[bl]
    return 2 + bl, _phase_code(imag, sign)


def _phase_code(imag, sign):
    """The PHASE of vcaxpy (and vproj2, vrecon2) for a factor sign * (i if imag else 1): i**PHASE."""
    return (1 if imag else 0) + (2 if sign < 0 else 0)


def _link_at(links, row, mu, compressed):
    """Source of the offset of the direction-``mu`` link of site ``row`` in ``links`` (``uf`` or
    ``ub``): whole links are stored site by site (four links a site), compressed ones and those of
    :data:`BY_DIRECTION` direction by direction (``compressed_links.compress_links``), from the
    offsets ``DF{mu}``/``DB{mu}`` of :func:`_third_row_constants`."""
    if compressed:
        return f"{row} * LK + D{'F' if links == 'uf' else 'B'}{mu}"
    return f"{row} * GS + M{mu}"


def _neighbour_product(ind, p, n, m, project, from_halo, halo, compressed=False):
    """Source lines (indented by ``ind``) setting ``w`` to point p's term before reconstruction:
    the projected neighbour ``n`` (``project``; with ``halo``, ``from_halo`` for a neighbour on
    another rank), its lanes permuted by ``m``, times U(x) (forward) or U(x - mu)^dag (backward,
    before the permute), both spins of the half spinor at once; ``compressed``: links of two rows
    whose third rows are ``t{p}`` (``compressed_links.compress_links``)."""
    mu, i2 = p % 4, ind + "    "

    def product(links, row, dag):
        if _rebuilds(compressed):
            return f"vcmatvec3({links}, {_link_at(links, row, mu, True)}, t{p}, w, {dag})"
        return f"vcmatvec({links}, {_link_at(links, row, mu, compressed)}, w, 3, {dag})"

    def adj(links, row):  # the backward link's product, read where the neighbour is
        if p < 4:
            return []
        if links == "ubh" and compressed:  # a halo's links are whole
            return [f"{i2}w = vcmatvec(ubh, {row} * GW + MW{mu}, w, 3, 1)"]
        return [f"{i2 if halo else ind}w = {product(links, row, 1)}"]

    if halo:
        # a neighbour on another rank arrives projected (and its backward link in ubh)
        lines = [f"{ind}if {n} < N4:", f"{i2}w = {project}", *adj("ub", n),
                 f"{ind}else:", f"{i2}w = {from_halo}", *adj("ubh", f"({n} - N4)")]
    else:
        lines = [f"{ind}w = {project}", *adj("ub", n)]
    lines += [f"{ind}if {m} != 0:", f"{i2}w = vpermt(w, pxor[{m}], lanes, U({m}) * NSU)"]
    if p < 4:
        lines += [f"{ind}w = {product('uf', 'uo', 0)}"]
    return lines


def _register_body(nls, nlg, nlu, halo, itemsize, compressed=False, dag=False):
    """The wide structure for 4D fields: site by site, the whole result spinor held in 24 vector
    variables over the eight points (LLVM keeps most of them in AVX-512's 32 registers), written once
    at the end.  With ``far`` (fields larger than the caches) it prefetches into L2, ``FAR_DISTANCE``
    sites ahead, the site's links, its eight neighbours and their backward links, and writes the
    result with non-temporal stores (1.10-1.20x at 16^4 and 24^4, same-process A/B; the x and y
    neighbours too, against the z and t alone: 0.98-1.17x on two threads at 12^4-24^4, where a
    thread's slab edges and the backward links bring them late)."""
    body = [
        "sc = vsplat(coef[0], W)",
        "al = vsplat(coef[1], W)",
        *_signs(dag),
        "N4 = U(n4)",
        f"nt = far and out.ctypes.data % (W * {itemsize}) == 0",
        "for i in range(lo, hi):",
        "    uo = U(sites[i])",
        "    d = uo * FS",
        "    if far and i + FD < hi:",
        "        u2 = U(sites[i + FD])",
    ]
    if compressed:
        body += [f"        prefetch_l2_lines(uf, {_link_at('uf', 'u2', mu, True)}, {nlg})" for mu in range(4)]
    else:
        body += [f"        prefetch_l2_lines(uf, u2 * GS, {nlu})"]
    for p in range(8):
        body += [f"        n2 = U(nbr[U({p}) * N4 + u2])"]
        body += [f"        prefetch_l2_lines(psi, n2 * FS, {nls})"]
        if p >= 4:
            body += [f"        prefetch_l2_lines(ub, {_link_at('ub', 'n2', p % 4, compressed)}, {nlg})"]
    for p in range(8):
        body += [f"    n{p} = U(nbr[U({p}) * N4 + uo])", f"    m{p} = perm[U({p}) * N4 + uo]"]
    if compressed:
        at = body.index("for i in range(lo, hi):")
        body[at:at] = _third_row_constants()
    if _rebuilds(compressed):
        # the eight third rows first (in cache this order ran 0.8-0.9x of whole links, out of it the
        # even-odd hop 1.1-1.4x)
        for p in range(8):
            body += _third_row("    ", p, "uo" if p < 4 else f"n{p}", halo)
    body += _register_points("    ", lambda n: f"{n} * FS", halo, compressed)
    body += _register_finish("    ", True)
    body += ["if nt:", "    store_fence()"]
    return body


def _third_row_constants():
    """Source lines before a compressed kernel's site loop: the offset of its third rows' loads
    (:func:`_third_row`) and the zero rows of a halo's whole links."""
    return (["OPQ = U(Ls) - U(1)", "vz = vsplat(Z(0), W)", "TZ = (vz, vz, vz, vz, vz, vz)"]
            + [f"D{x}{mu} = U({mu}) * (U({a}.size) // U(4))" for x, a in (("F", "uf"), ("B", "ub"))
               for mu in range(4)])


def _third_row(ind, p, row, halo):
    """Source lines (indented by ``ind``) setting ``t{p}``, the third row of point p's link (forward:
    at site ``row`` of uf; backward: at the neighbour ``row`` of ub) rebuilt from its two rows and
    its phase.  Its loads are made at an offset of zero (Ls - 1 of a 4D field) that LLVM cannot
    see, so that they are not merged with the product's loads of the same rows: merged, the
    register order kept all eight links' rows live from its site's start to their points and
    spilled them (0.6x in cache)."""
    links, z = ("uf", "zif") if p < 4 else ("ub", "zib")
    mu = p % 4
    at = _link_at(links, row, mu, True)
    third = f"vthirdrow({links}, {at} + OPQ, ztab, {z}[{row} * U(4) + U({mu})], W)"
    if halo and p >= 4:  # a neighbour on another rank: its link is in the halo, whole
        return [f"{ind}if {row} < N4:", f"{ind}    t{p} = {third}", f"{ind}else:", f"{ind}    t{p} = TZ"]
    return [f"{ind}t{p} = {third}"]


def _register_points(ind, src, halo, compressed=False, order=tuple(range(8))):
    """Source lines (indented by ``ind``) of the register order's eight points, in ``order``, into
    the result spinor's variables c0..c3: neighbour ``n{p}`` (its spinor at psi[src(n{p}):])
    projected, its lanes permuted by ``m{p}``, through the link, rebuilt into the four spins.

    The accumulators are pinned after each point (``hold``): without it LLVM's scheduler starts
    the next points' loads early and reassociates the sums, and spills more of the 24 result
    vectors.  Same-process A/B on the AVX-512 machine (2026-11-30, ``bench_dhop_kernels.py``,
    two threads): Wilson 8^4 double 1.02-1.05x, single 1.03-1.07x; in L1 1.10x and 1.06x; domain
    wall Ls 8 double 8^4 1.07x; out of the caches on compressed links 0.97-1.05x."""
    body = []
    for j, p in enumerate(order):
        mu = p % 4
        g = "gf" if p < 4 else "gb"
        n = f"n{p}"
        body += _neighbour_product(ind, p, n, f"m{p}", _projection(mu, "psi", src(n), g),
                                   f"hload2(halo, ({n} - N4) * HS)", halo, compressed)
        for a, half in ((0, "w[:6]"), (1, "w[6:]")):
            low, ph = _reconstruction(mu, a)
            if j == 0:
                body += [f"{ind}c{a} = {half}", f"{ind}c{low} = vcaxpy({g}, None, {half}, {ph})"]
            else:
                body += [f"{ind}c{a} = vcaxpy(None, c{a}, {half}, 0)",
                         f"{ind}c{low} = vcaxpy({g}, c{low}, {half}, {ph})"]
        if j < 7:
            body += [f"{ind}cc = hold(c0 + c1 + c2 + c3)"]
            body += [f"{ind}c{k} = cc[{6 * k}:{6 * k + 6}]" for k in range(4)]
    return body


def _register_finish(ind, streamed, five_d=False, banded=False):
    """Source lines (indented by ``ind``) writing sc * (c0..c3) plus the diagonal term (``use_diag``)
    at out[d:], past the caches when ``nt`` where ``streamed``.  4D: al * diag; 5D: the upper spins
    a0 * diag and the lower a1 * diag (the diagonal term's coefficients per chirality, ``dco``), and
    with ``banded`` the second term of A per chirality, e0 and e1 times diag at slice ``dprev[s]``."""
    coef = ("a0", "a0", "a1", "a1") if five_d else ("al",) * 4
    body = [f"{ind}if use_diag:"]
    body += [f"{ind}    r{k} = vcaxpy({coef[k]}, vscalet(sc, c{k}), vloadt(diag, d + Q{6 * k}, 6, W), 0)"
             for k in range(4)]
    if banded:
        body += [f"{ind}    P0 = (uo * LS + U(dprev[S])) * FS",
                 f"{ind}    P1 = (uo * LS + U(dprev[LS + S])) * FS",
                 f"{ind}    e0 = vsplat(dco[U(2) + S], W)", f"{ind}    e1 = vsplat(dco[U(2) + LS + S], W)"]
        body += [f"{ind}    r{k} = vcaxpy(e{k // 2}, r{k}, vloadt(diag, P{k // 2} + Q{6 * k}, 6, W), 0)"
                 for k in range(4)]
    body += [f"{ind}else:"]
    body += [f"{ind}    r{k} = vscalet(sc, c{k})" for k in range(4)]
    stores = [(f"d + Q{6 * k}", f"r{k}") for k in range(4)]
    lines = _store("out", stores) if streamed else [f"vstoret(out, {at}, {v})" for at, v in stores]
    return body + [ind + x for x in lines]


def _register_body_5d(last, dag=False, pairs=False):
    """The register order for 5D fields in the caches' reach (``unrolled_launch.REGISTER_BYTES``): site by
    site, the eight neighbours' indices read once, then slice by slice the whole result spinor in vector
    variables over the eight points, each link read once per slice (from L1); written once (the
    plain and banded last steps), or kept in a scratch of the site's slices in L1 for its multiply
    and solve in s (the others, which share one compiled function for it, :func:`_register_site`).
    With ``far`` each point prefetches the start of its neighbour's slice ``SLICE_PREFETCH`` slices
    ahead into L2 and the result goes past the caches.  The tiled order's accumulator makes a round
    trip through L1 at every point: against it, same-process A/B on AVX-512 at 8^4 (Ls 8 and 16,
    both precisions), the plain last step 1.2-1.5x, the Schur operators' 1.0-1.2x; on 30-120 MB
    of fields the tiled order's streams won (the register order 0.6-0.85x)."""
    body = ["sc = vsplat(coef[0], W)", "a0 = vsplat(dco[0], W)", "a1 = vsplat(dco[1], W)", "LS = U(Ls)",
            "nt = far and out.ctypes.data % (W * out.itemsize) == 0"]
    if last in _AT_TILE_END:
        body += ["acc_t = np.empty(Ls * 24 * W, Z)"]
        if last == "mul_solve":
            body += ["mul_t = np.empty(Ls * 24 * W, Z)"]
        body += ["for i in range(lo, hi):", "    uo = U(sites[i])",
                 f"    {_register_site_call(dag)}", "    A0 = U(0)", "    D0 = uo * LS * FS"]
        body += ["    " + x for x in _site_end(last)]
    else:
        body += [*_signs(dag), "N4 = U(n4)",
                 "for i in range(lo, hi):", "    uo = U(sites[i])"]
        for p in range(8):
            body += [f"    n{p} = U(nbr[U({p}) * N4 + uo])", f"    m{p} = perm[U({p}) * N4 + uo]"]
        body += ["    for s in range(Ls):", "        S = U(s)", "        d = (uo * LS + S) * FS"]
        body += _slice_prefetches("        ")
        body += _register_points("        ", lambda n: f"({n} * LS + S) * FS", False,
                                 order=_tile_order(pairs))
        body += _register_finish("        ", True, True, last == "banded")
    return body + ["if nt:", "    store_fence()"]


#: cache lines of each neighbour's slice, SPF slices ahead, that the register order prefetches with
#: ``far``; the hardware prefetcher brings the rest (1, 3 and 6 lines ran within the spread of each
#: other at 8^4, Ls 8 and 16; a double slice's whole 24, 0.75x in single at Ls 16)
REGISTER_PREFETCH_LINES = 3


def _slice_prefetches(ind):
    """Source lines: with ``far``, the first lines of each point's neighbour slice ``SPF`` slices
    ahead into L2 (past the last slices they reach the next sites' slices, or past the array:
    prefetches never fault)."""
    return [f"{ind}if far:"] + [f"{ind}    prefetch_l2_lines(psi, (n{p} * LS + S + SPF) * FS, "
                                f"{REGISTER_PREFETCH_LINES})" for p in range(8)]


#: the signature of the function holding the register order's hop of one site into its scratch
_REGISTER_SITE = "register_site(uo, acc_t, psi, uf, ub, nbr, perm, lanes, pxor, n4, Ls, coef, far)"


def _register_site_call(dag):
    """The call of ``register_site`` (``register_site_dag`` for the adjoint)."""
    return _REGISTER_SITE.replace("register_site(", f"register_site{_dag(dag)}(")


def _register_site(dag=False, pairs=False):
    """The body of ``register_site``: the register order's hop of the 4D site ``uo``, every slice,
    unscaled, into ``acc_t`` (the site's Ls slices); a function of its own (not inlined by numba)
    so that the last steps that finish a site from its scratch share its compile."""
    body = [*_signs(dag), "N4 = U(n4)", "LS = U(Ls)"]
    for p in range(8):
        body += [f"n{p} = U(nbr[U({p}) * N4 + uo])", f"m{p} = perm[U({p}) * N4 + uo]"]
    body += ["for s in range(Ls):", "    S = U(s)"]
    body += _slice_prefetches("    ")
    body += _register_points("    ", lambda n: f"({n} * LS + S) * FS", False, order=_tile_order(pairs))
    return body + [f"    vstoret(acc_t, S * FS + Q{6 * k}, c{k})" for k in range(4)]


#: the function holding the 5D kernel's loops but the last (:func:`_tile_loops`), without and with
#: the halo branches
_POINTS = {False: "tile_points", True: "tile_points_halo"}
_POINTS_ARGS = "i0, i1, hi, acc_t, psi, uf, ub, nbr, perm, lanes, pxor, n4, Ls, coef, far, sites, halo, ubh"


def _tile_points(nls, nlg, pairs, halo, dag=False):
    """The body of :data:`_POINTS`: a function of its own (not inlined by numba), so that the five
    variants of the 5D kernel's last step share its compile: each further variant compiles its
    last loop and the tile's end alone."""
    body = [*_signs(dag), "N4 = U(n4)", "LS = U(Ls)", "I0 = U(i0)"]
    for points in _tile_loops(pairs)[:-1]:
        body += _tile_loop(points, nls, nlg, True, halo, "")
    return body


def _kernel_body(nls, nlg, nlu, five_d, wide, halo, dtype, last="plain", compressed=False, dag=False,
                 pairs=True):
    if wide and not five_d:
        return _register_body(nls, nlg, nlu, halo, np.dtype(dtype).itemsize, compressed, dag)
    body = [
        "sc = vsplat(coef[0], W)",
        *_signs(dag),
        "N4 = U(n4)",
        "LS = U(Ls)",
        # the diagonal term's coefficient per chirality (alpha for both but in the banded variant,
        # whose second term per chirality and slice makes it a cyclic bidiagonal matrix in s)
        "a0 = vsplat(dco[0], W)",
        "a1 = vsplat(dco[1], W)",
        "acc_t = np.empty(tile * Ls * 24 * W, Z)",
        # the result past the caches (non-temporal stores, as Grid streams its Dhop result) when the
        # fields outgrow the caches: it leaves them to the data still to be read (6-19% at 16^4 on
        # AVX2, 14-41% on AVX-512, same-process A/B); such a store needs an address aligned to the vector
        f"nt = far and out.ctypes.data % (W * {np.dtype(dtype).itemsize}) == 0",
        "for i0 in range(lo, hi, tile):",
        "    i1 = min(i0 + tile, hi)",
        "    I0 = U(i0)",
    ]
    if last == "mul_solve":  # one site's slices, B times the accumulator, for the solve that follows
        body.insert(body.index("for i0 in range(lo, hi, tile):"), "mul_t = np.empty(Ls * 24 * W, Z)")
    if compressed:
        body[body.index("for i0 in range(lo, hi, tile):"):0] = _third_row_constants()
    if five_d:
        body += [f"    {_POINTS[halo]}{_dag(dag)}({_POINTS_ARGS})"]
    for points in _tile_loops(pairs)[-1 if five_d else 0:]:
        body += _tile_loop(points, nls, nlg, five_d, halo, "    ", last, compressed)
    if last in _AT_TILE_END:
        body += ["    " + x for x in _tile_end(last)]
    body += ["if nt:", "    store_fence()"]
    return body


def _tile_loops(pairs):
    """The tiled order's loops over a tile, each a tuple of the stencil points it adds: with
    ``pairs`` a direction's forward and backward points together, whose accumulator passes halve
    the loads and stores that bound it in the caches, else a point at a time (:data:`TILE_PAIRS`
    is the default)."""
    return [(mu, mu + 4) for mu in range(4)] if pairs else [(p,) for p in range(8)]


def _tile_order(pairs):
    """The points in the order the tiled order adds them, which the register order of 5D fields
    follows: a hop split over ranks runs its boundary sites in the tiled order, and the sums in
    one order give the bits of one rank."""
    return tuple(p for points in _tile_loops(pairs) for p in points)


def _resolve_pairs(pairs, wide, five_d):
    """``pairs`` where given, else the default: :data:`TILE_PAIRS` for 5D fields; for 4D fields the
    structure alone (the wide one has no tiled order there)."""
    if pairs is not None:
        return bool(pairs)
    return TILE_PAIRS if five_d else not wide


# Whether the tiled order of 5D fields adds a direction's two points in one pass (the register
# order adds its points in the same order, :func:`_tile_order`), in both structures: AVX2 code
# 1.03-1.08x in the caches and 1.09-1.24x out of them; AVX-512 on Intel 1.15-1.25x on 5D fields
# out of the caches, on Zen 4 1.00-1.22x (docs/performance.md, "The hand-unrolled Dhop kernel").
TILE_PAIRS = True


def _tile_loop(points, nls, nlg, five_d, halo, ind0, last="plain", compressed=False):
    """Source lines (indented by ``ind0``) of the loop over the tile's sites that adds ``points``
    (one point, or a direction's forward and backward points, :func:`_tile_loops`): each projected
    neighbour through its link, rebuilt into the accumulator in one pass (the loop holding point 0
    initialises it, the one holding point 7 writes the result: ``last`` 'plain' with the diagonal
    term as ``alpha * diag``, 'banded' with ``A diag`` for A bidiagonal in s, the variants of
    :data:`_AT_TILE_END` keeping the hop in the accumulator)."""
    mu = points[0] % 4
    i1, i2 = ind0 + "    ", ind0 + "        "
    names = [("f" if p < 4 else "b", p, "gf" if p < 4 else "gb") for p in points]
    body = [f"{ind0}for i in range(i0, i1):", f"{i1}uo = U(sites[i])"]
    # each neighbour spinor (its first slice) and link PD sites ahead, read in PD sites' time
    # (unrolled with constant offsets: one instruction per cache line; a halo index prefetches
    # past the end of psi, which is harmless: prefetches never fault), on fields larger than the
    # caches: in cache they cost 11 cycles a point (AVX2, in L1) and Wilson 8^4 ran 3-4% faster
    # without them.  Into L2, not L1: what a tile prefetches outgrows L1 and evicted the data in
    # use (1.2-1.3x out of the caches on Zen 4, in AVX-512 and AVX2 code; level on Zen 3)
    body += [f"{i1}if far and i + PD < hi:", f"{i2}u2 = U(sites[i + PD])"]
    for _, p, _ in names:
        body += [
            f"{i2}n2 = U(nbr[U({p}) * N4 + u2])",
            f"{i2}prefetch_l2_lines(psi, n2 * LS * FS, {nls})",
            f"{i2}b2 = " + _link_at(*(("uf", "u2") if p < 4 else ("ub", "n2")), mu, compressed),
            f"{i2}prefetch_l2_lines({'uf' if p < 4 else 'ub'}, b2, {nlg})",
        ]
    for x, p, _ in names:
        body += [f"{i1}k = U({p}) * N4 + uo", f"{i1}n{x} = U(nbr[k])", f"{i1}m{x} = perm[k]"]
    if five_d:
        ind = i2
        body += [f"{i1}for s in range(Ls):", f"{i2}S = U(s)",
                 f"{i2}A = ((U(i) - I0) * LS + S) * FS", f"{i2}d = (uo * LS + S) * FS"]
        base, halo_at = "(n{x} * LS + S) * FS", "((n{x} - N4) * LS + S) * HS"
        if 7 in points and last == "banded":
            body += [f"{i2}P0 = (uo * LS + U(dprev[S])) * FS",
                     f"{i2}P1 = (uo * LS + U(dprev[LS + S])) * FS",
                     f"{i2}e0 = vsplat(dco[U(2) + S], W)",
                     f"{i2}e1 = vsplat(dco[U(2) + LS + S], W)"]
    else:
        # no loop over slices for a 4D field: its bookkeeping cost 8 cycles a point in L1 (AVX2)
        ind = i1
        body += [f"{i1}A = (U(i) - I0) * FS", f"{i1}d = uo * FS"]
        base, halo_at = "n{x} * FS", "(n{x} - N4) * HS"
    for j, (x, p, g) in enumerate(names):
        body += [f"{ind}B{x} = " + base.format(x=x)]
        if five_d:
            # the hardware prefetcher alone falls behind on the Ls slices of a neighbour
            # (this prefetch reaches past the array on the last slices: harmless, prefetches never fault)
            body += [f"{ind}prefetch_l2_lines(psi, B{x} + SPF * FS, {nls})"]
        if _rebuilds(compressed):  # the point's third row, just before its product
            body += _third_row(ind, p, "uo" if p < 4 else "nb", halo)
        # both spins of the half spinor (12 vectors) through the link at once, so each link element
        # is read once per point: with 16 registers a little spills, and still out of cache it ran
        # 7-10% faster on AVX2 than a pass per spin (equal in cache)
        body += _neighbour_product(ind, p, f"n{x}", f"m{x}", _projection(mu, "psi", f"B{x}", g),
                                   f"hload2(halo, {halo_at.format(x=x)})", halo, compressed)
        if j < len(names) - 1:
            body += [f"{ind}w{x} = w"]
    # a pair rebuilds wf + wb into the upper spins and gf i^ph (wf - wb) into the lower (gb = -gf)
    w1, w2, g = ("wf", "w", "gf") if len(points) == 2 else ("w", "None", names[0][2])
    if 7 not in points or last in _AT_TILE_END:
        return body + [f"{ind}{_reconstruction_into(mu, 'acc_t', 'A', w1, w2, g, 0 in points)}"]
    for a, half in ((0, "[:6]"), (1, "[6:]")):
        tail = "True, e0, e1, P0, P1" if last == "banded" else "False, a0, a1, d, d"
        pair = f"{w1}{half}, {w2}{half}" if len(points) == 2 else f"{w1}{half}"
        body += [f"{ind}fin{len(points)}_{mu}h{a}(acc_t, A, {pair}, {g}, out, d, sc, diag, a0, a1, use_diag, "
                 f"nt, {tail})"]
    return body


def _projection(mu, psi, base, g):
    """Source of both spins of the half spinor of (1 + g gamma_mu) psi at psi[base:], one statement
    for numba (``vproj2``: numba's front end, which pays per statement, is most of a kernel's cold
    compile)."""
    args = []
    for a in range(2):
        j, imag, sign = gamma_structure()[mu][0][a]
        args += [6 * a, 6 * (2 + j), _phase_code(imag, sign)]
    return f"vproj2({psi}, {base}, {g}, {', '.join(map(str, args))}, W)"


def _reconstruction_into(mu, acc, base, wf, wb, g, init):
    """Source storing (``init``) or adding into acc[base:] the spinors rebuilt from the half spinors
    ``wf`` of (1 + g gamma_mu) and ``wb`` of (1 - g gamma_mu), one statement (``vrecon2``)."""
    args = []
    for a in range(2):
        low, ph = _reconstruction(mu, a)
        args += [6 * a, 6 * low, ph]
    return f"vrecon2({acc}, {base}, {wf}, {wb}, {g}, {', '.join(map(str, args))}, {int(init)})"


#: the variants of the last step that keep the hop in the tile's accumulator and finish it after
#: the eight points, per site over all its slices (:func:`_tile_end`)
_AT_TILE_END = ("solve", "mul", "mul_solve")


def _tile_end(last):
    """Source lines: the tile's result written after its eight points, per site over its Ls
    slices (held in L1, so no field is read again): A^-1 (sc * acc) ('solve'); sc * B acc plus the
    diagonal term ('mul'); A^-1 (sc * B acc) ('mul_solve', B into the site's scratch ``mul_t``
    first, the solve sweeping there)."""
    lines = ["for i in range(i0, i1):",
             "    A0 = (U(i) - I0) * LS * FS",
             "    D0 = U(sites[i]) * LS * FS"]
    return lines + ["    " + x for x in _site_end(last)]


def _site_end(last):
    """Source lines finishing one site whose hop (unscaled, all Ls slices) is in ``acc_t`` from
    ``A0``, into out from ``D0``: see :func:`_tile_end`."""
    if last == "solve":
        return _solve_in_s("acc_t", "A0")
    if last == "mul":
        return _multiply_in_s(True)
    return _multiply_in_s(False) + _solve_in_s("mul_t", "U(0)")


def _store(dst, stores):
    """Source lines storing tuples of vectors, ``stores`` (offset, tuple) pairs into ``dst``, past
    the caches when ``nt``."""
    return (["if nt:"] + [f"    vstoret_nt({dst}, {at}, {v})" for at, v in stores]
            + ["else:"] + [f"    vstoret({dst}, {at}, {v})" for at, v in stores])


def _multiply_in_s(write):
    """Source lines for one site (``A0`` its slices in the accumulator, ``D0`` in the fields): B acc
    per chirality, B cyclic bidiagonal in s with the tables of :func:`diagonal_term` (``mco`` =
    d then ep, ``mprev``: row s of chirality c is d[c] acc_s + ep[c, s] acc_prev[c, s]).  With
    ``write`` the result goes out as sc * B acc plus the diagonal term of ``dco``, ``dprev`` (alpha
    diag, or alpha A diag when ``dprev`` is not empty); else B acc goes into ``mul_t`` for the
    solve."""
    lines = []
    for c in range(2):
        planes = f"Q{12 * c}"
        fold = " * sc" if write else ""
        lines += [f"md = vsplat(mco[{c}], W){fold}",
                  "for s in range(Ls):",
                  "    S = U(s)",
                  f"    r = vcaxpy(vsplat(mco[U(2) + U({c}) * LS + S], W){fold}, "
                  f"vscalet(md, vloadt(acc_t, A0 + S * FS + {planes}, 12, W)), "
                  f"vloadt(acc_t, A0 + U(mprev[U({c}) * LS + S]) * FS + {planes}, 12, W), 0)"]
        if not write:
            lines += [f"    vstoret(mul_t, S * FS + {planes}, r)"]
            continue
        lines += ["    if use_diag:",
                  f"        r = vcaxpy(a{c}, r, vloadt(diag, D0 + S * FS + {planes}, 12, W), 0)",
                  "        if len(dprev):",
                  f"            r = vcaxpy(vsplat(dco[U(2) + U({c}) * LS + S], W), r, "
                  f"vloadt(diag, D0 + U(dprev[U({c}) * LS + S]) * FS + {planes}, 12, W), 0)"]
        lines += ["    " + x for x in _store("out", [(f"D0 + S * FS + {planes}", "r")])]
    return lines


def _solve_in_s(buf, base):
    """Source lines for one site: out = A^-1 (sc * x) for x the site's slices in ``buf`` from ``base``
    (its Ls slices of 24 planes), A cyclic bidiagonal in s per chirality with the sweep tables of
    :func:`pygrid.qcd.fifth_dim.bidiag_solver` (``sorder``, and ``sinv`` = 1/d, e/d, r per
    chirality then q per chirality and slice): x_j = p_j + q_j x_last, p_j = b_j / d - (e / d)
    p_{j-1} in sweep order (p_j kept in ``buf``), x_last = r p_last.  The tile holds every slice
    of its sites in L1, so the solve reads no field: MooeeInv after the hop without a pass of its
    own over the result."""
    lines = []
    for c in range(2):
        planes = f"{base} + S * FS + Q{12 * c}"
        lines += [
            f"ia = vsplat(sinv[{c}], W) * sc",
            f"ned = vsplat(-sinv[{2 + c}], W)",
            f"S = U(sorder[{c} * Ls])",
            f"pv = vscalet(ia, vloadt({buf}, {planes}, 12, W))",
            f"vstoret({buf}, {planes}, pv)",
            "for j in range(1, Ls):",
            f"    S = U(sorder[{c} * Ls + j])",
            f"    pv = vcaxpy(ned, vscalet(ia, vloadt({buf}, {planes}, 12, W)), pv, 0)",
            f"    vstoret({buf}, {planes}, pv)",
            f"xl = vscalet(vsplat(sinv[{4 + c}], W), pv)",
            "for j in range(Ls):",
            f"    S = U(sorder[{c} * Ls + j])",
            "    if j < Ls - 1:",
            f"        r = vcaxpy(vsplat(sinv[6 + {c} * Ls + j], W), vloadt({buf}, {planes}, 12, W), xl, 0)",
            "    else:",
            "        r = xl",
        ]
        lines += ["    " + x for x in _store("out", [(f"D0 + S * FS + Q{12 * c}", "r")])]
    return lines


_modules = {}


def wide_default():
    """Whether the kernels take the wide structure: as the configuration's ``dslash_structure``
    says, or by default where the kernels are compiled for AVX-512's 32 vector registers (AVX2
    has 16)."""
    structure = current().dslash_structure
    if structure != "auto":
        return structure == "wide"
    return host_simd_bits() >= 512


def _module(nsimd, dtype, Ls, wide=None, compressed=False, dag=False, pairs=None):
    if wide is None:
        wide = wide_default()
    pairs = _resolve_pairs(pairs, wide, Ls > 1)
    # what dhop() passes: a lookup without np.dtype(...).name (7 us)
    fast = (nsimd, dtype, Ls > 1, wide, compressed, dag, pairs)
    m = _modules.get(fast)
    if m is not None:
        return m
    key = (int(nsimd), np.dtype(dtype).name, int(Ls) > 1, bool(wide), int(compressed), bool(dag), bool(pairs))
    m = _modules.get(key)
    if m is None:
        # numba's on-disk cache does not see changes to the intrinsics the kernel calls; their
        # version is part of the source, so a change recompiles
        src = f"# simd_numba version {simd_numba.VERSION}\n" + _source(*key)
        what = ("5D domain-wall" if key[2] else "direction-major-link Wilson" if compressed == BY_DIRECTION
                else "compressed-link Wilson" if compressed else "Wilson")
        m = load_module(src, "pygrid_wilson", label=f"the unrolled {what} Dhop kernels "
                        f"({key[1]}, Nsimd {key[0]}{', adjoint' if dag else ''})")
        _modules[key] = m
    try:
        _modules[fast] = m
    except TypeError:  # an unhashable dtype argument: the slow path every time
        pass
    return m


def kernel_for(nsimd, dtype="float64", Ls=1, wide=None, halo=False, last="plain", compressed=False,
               dag=False, pairs=None):
    """The compiled hopping kernel for a lane count, real dtype and 4D (Ls = 1) or 5D fields (cached on
    disk); ``wide`` picks the structure (default: :func:`wide_default`);
    ``halo``: the kernel that also reads neighbours on other ranks (else one that never does);
    ``compressed``: the 4D kernel on links of two rows (``compressed_links.compress_links``), or
    with :data:`BY_DIRECTION` on whole links stored direction by direction;
    ``dag``: the adjoint's kernel (the projectors' signs are constants of each, :func:`_signs`,
    so the kernel ignores the signs in ``coef``); ``pairs``: the tiled order's loops (default:
    :data:`TILE_PAIRS` for 5D fields)."""
    if compressed and (int(Ls) > 1 or last != "plain"):
        raise ValueError("compressed links: the 4D kernel only")
    m = _module(nsimd, dtype, Ls, wide, compressed, dag, pairs)
    sfx = "" if last == "plain" else "_" + last
    return getattr(m, ("dhop_kernel" if halo else "dhop_local") + sfx + _dag(dag))


def pack_kernel_for(nsimd, dtype="float64", Ls=1, nt=False):
    """The compiled kernel that packs projected half spinors into a halo message (``nt``: with
    non-temporal stores, rows 64-byte aligned)."""
    m = _module(nsimd, dtype, Ls)
    return m.pack_kernel_nt if nt else m.pack_kernel


def field_bytes(n4, Ls, nsimd, dtype, links=4):
    """The bytes of a hop's fields: the spinor in and out, and ``links`` links a site."""
    return int(n4) * (2 * int(Ls) * 24 + 18 * int(links)) * int(nsimd) * np.dtype(dtype).itemsize
