"""The Wilson hopping kernel: one numba kernel per call, spin-projected, lanes innermost.

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

The link of each direction is loaded (and permuted) once per 4D site and reused
for all Ls slices.  Per direction and slice: read the neighbour spinor with
unit stride, project it to a half spinor (2 spins x 3 colours), permute its
lanes if the neighbour wrapped around a virtual node, multiply by U or U^dag,
reconstruct the lower spins and accumulate: 1320 flops per site (Grid's count).

Spin projection in Grid's chiral basis: every g_mu = [[0, A], [B, 0]] with
2x2 blocks, AB = 1, and each row of A and B has one nonzero entry, +-1 or +-i.
For (1 + s g_mu) psi (s = -1 forward, +1 backward; flipped for dag):
    h_a = psi_a + s A[a, pA(a)] psi_{2 + pA(a)}                 (a = 0, 1)
    result_a = h_a,   result_{2+b} = s B[b, pB(b)] h_{pB(b)}      (b = 0, 1)
The tables are derived from ``pygrid.tensors.constant.Gamma`` by
:func:`projection_tables` (and checked against (1 -+ g_mu) in tests/test_wilson.py).
"""
from __future__ import annotations

import functools

import numpy as np

from ..accelerator.compile_cache import load_module
from ..errors import ConformabilityError, SiteTypeError
from ..tensors.constant import Gamma

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


def _lanes(ind, ns, pairs, tag):
    """Lane-unrolled statements: every ``target`` (with ``{l}``) gets ``expr`` (with ``{l}``).

    All loads of all lanes come before the first store, so LLVM's SLP vectoriser can
    merge the NS scalar lanes into vector instructions without alias analysis.
    """
    pad = "    " * ind
    out = []
    for i, (_, expr) in enumerate(pairs):
        for l in range(ns):
            out.append(f"{pad}{tag}{i}_{l} = {expr.format(l=l)}")
    for i, (tgt, _) in enumerate(pairs):
        for l in range(ns):
            out.append(f"{pad}{tgt.format(l=l)} = {tag}{i}_{l}")
    return "\n".join(out)


def _source(ns):
    """numba source of the hopping kernel for ns lanes (lane loops unrolled at generation time)."""
    L = functools.partial(_lanes, ns=ns)
    mul = []
    for part, expr in ((0, "ul[i, {j}, 0, {{l}}] * hh[a, {j}, 0, {{l}}] - ul[i, {j}, 1, {{l}}] * hh[a, {j}, 1, {{l}}]"),
                       (1, "ul[i, {j}, 0, {{l}}] * hh[a, {j}, 1, {{l}}] + ul[i, {j}, 1, {{l}}] * hh[a, {j}, 0, {{l}}]")):
        mul.append((f"uh[a, i, {part}, {{l}}]", " + ".join("(" + expr.format(j=j) + ")" for j in range(3))))
    src = f"""\
import numpy as np
from numba import njit, prange

NS = {ns}


@njit(parallel=True, fastmath=True, cache=True, nogil=True, error_model="numpy")
def dhop_kernel(nchunk, out, psi, uf, ub, nbr, perm, lanes, Ls,
                psrc, pim, psg, rsrc, rim, rsg, coef, diag):
    n4 = nbr.shape[1]
    scale = coef[0]
    alpha = coef[1]
    for ch in prange(nchunk):
        lo = (ch * n4) // nchunk
        hi = ((ch + 1) * n4) // nchunk
        h = np.empty((2, 3, 2, NS), dtype=out.dtype)
        t = np.empty((2, 3, 2, NS), dtype=out.dtype)
        uh = np.empty((2, 3, 2, NS), dtype=out.dtype)
        ul = np.empty((3, 3, 2, NS), dtype=out.dtype)
        acc = np.empty((Ls, 12, 2, NS), dtype=out.dtype)
        for o in range(lo, hi):
            for s in range(Ls):
                for k in range(12):
                    for l in range(NS):
                        acc[s, k, 0, l] = 0
                        acc[s, k, 1, l] = 0
            for p in range(8):
                mu = p & 3
                n = nbr[p, o]
                pm = perm[p, o]
                # the link: U_mu(x) at the output site, or U_mu(x - mu)^dag from the neighbour
                if p < 4:
                    for i in range(3):
                        for j in range(3):
{L(7, pairs=[("ul[i, j, 0, {l}]", "uf[o, mu * 9 + i * 3 + j, 0, {l}]"), ("ul[i, j, 1, {l}]", "uf[o, mu * 9 + i * 3 + j, 1, {l}]")], tag="a")}
                elif pm == 0:
                    for i in range(3):
                        for j in range(3):
{L(7, pairs=[("ul[i, j, 0, {l}]", "ub[n, mu * 9 + j * 3 + i, 0, {l}]"), ("ul[i, j, 1, {l}]", "-ub[n, mu * 9 + j * 3 + i, 1, {l}]")], tag="b")}
                else:
{"".join(f"                    q{l} = lanes[pm, {l}]" + chr(10) for l in range(ns))}\
                    for i in range(3):
                        for j in range(3):
{L(7, pairs=[("ul[i, j, 0, {l}]", "ub[n, mu * 9 + j * 3 + i, 0, q{l}]"), ("ul[i, j, 1, {l}]", "-ub[n, mu * 9 + j * 3 + i, 1, q{l}]")], tag="c")}
                for s in range(Ls):
                    ns_ = s + Ls * n
                    # spin projection to a half spinor
                    for a in range(2):
                        sp = psrc[p, a]
                        sg = psg[p, a]
                        if pim[p, a] == 0:
                            for c in range(3):
{L(8, pairs=[("h[a, c, 0, {l}]", "psi[ns_, a * 3 + c, 0, {l}] + sg * psi[ns_, sp * 3 + c, 0, {l}]"), ("h[a, c, 1, {l}]", "psi[ns_, a * 3 + c, 1, {l}] + sg * psi[ns_, sp * 3 + c, 1, {l}]")], tag="d")}
                        else:
                            for c in range(3):
{L(8, pairs=[("h[a, c, 0, {l}]", "psi[ns_, a * 3 + c, 0, {l}] - sg * psi[ns_, sp * 3 + c, 1, {l}]"), ("h[a, c, 1, {l}]", "psi[ns_, a * 3 + c, 1, {l}] + sg * psi[ns_, sp * 3 + c, 0, {l}]")], tag="e")}
                    # lane permute of a wrapped neighbour
                    if pm != 0:
{"".join(f"                        q{l} = lanes[pm, {l}]" + chr(10) for l in range(ns))}\
                        for a in range(2):
                            for c in range(3):
{L(8, pairs=[("t[a, c, 0, {l}]", "h[a, c, 0, q{l}]"), ("t[a, c, 1, {l}]", "h[a, c, 1, q{l}]")], tag="f")}
                        hh = t
                    else:
                        hh = h
                    # colour multiply
                    for a in range(2):
                        for i in range(3):
{L(7, pairs=mul, tag="g")}
                    # reconstruct and accumulate
                    for a in range(2):
                        for c in range(3):
{L(7, pairs=[("acc[s, a * 3 + c, 0, {l}]", "acc[s, a * 3 + c, 0, {l}] + uh[a, c, 0, {l}]"), ("acc[s, a * 3 + c, 1, {l}]", "acc[s, a * 3 + c, 1, {l}] + uh[a, c, 1, {l}]")], tag="r")}
                    for b in range(2):
                        rs = rsrc[p, b]
                        sg = rsg[p, b]
                        k0 = (2 + b) * 3
                        if rim[p, b] == 0:
                            for c in range(3):
{L(8, pairs=[("acc[s, k0 + c, 0, {l}]", "acc[s, k0 + c, 0, {l}] + sg * uh[rs, c, 0, {l}]"), ("acc[s, k0 + c, 1, {l}]", "acc[s, k0 + c, 1, {l}] + sg * uh[rs, c, 1, {l}]")], tag="u")}
                        else:
                            for c in range(3):
{L(8, pairs=[("acc[s, k0 + c, 0, {l}]", "acc[s, k0 + c, 0, {l}] - sg * uh[rs, c, 1, {l}]"), ("acc[s, k0 + c, 1, {l}]", "acc[s, k0 + c, 1, {l}] + sg * uh[rs, c, 0, {l}]")], tag="v")}
            # write the result
            for s in range(Ls):
                os_ = s + Ls * o
                if alpha != 0:
                    for k in range(12):
{L(6, pairs=[("out[os_, k, 0, {l}]", "scale * acc[s, k, 0, {l}] + alpha * diag[os_, k, 0, {l}]"), ("out[os_, k, 1, {l}]", "scale * acc[s, k, 1, {l}] + alpha * diag[os_, k, 1, {l}]")], tag="w")}
                else:
                    for k in range(12):
{L(6, pairs=[("out[os_, k, 0, {l}]", "scale * acc[s, k, 0, {l}]"), ("out[os_, k, 1, {l}]", "scale * acc[s, k, 1, {l}]")], tag="x")}
"""
    return src


_kernels = {}


def kernel_for(nsimd):
    """The compiled kernel for a lane count (source generated once, cached on disk)."""
    k = _kernels.get(nsimd)
    if k is None:
        import numba

        # the lane-unrolled statements vectorise only with LLVM's SLP vectoriser, which numba
        # enables with NUMBA_SLP_VECTORIZE=1 (default off); the flag is part of the source so
        # that numba's on-disk cache keeps the two builds apart
        src = f"# numba SLP_VECTORIZE={int(numba.config.SLP_VECTORIZE)}\n" + _source(int(nsimd))
        k = load_module(src, "pygrid_wilson").dhop_kernel
        _kernels[nsimd] = k
    return k


@functools.lru_cache(maxsize=None)
def _tables(dag, dtype):
    psrc, pim, psg, rsrc, rim, rsg = projection_tables()
    return (np.ascontiguousarray(psrc[dag]), np.ascontiguousarray(pim[dag]),
            np.ascontiguousarray(psg[dag], dtype=dtype), np.ascontiguousarray(rsrc[dag]),
            np.ascontiguousarray(rim[dag]), np.ascontiguousarray(rsg[dag], dtype=dtype))


def _threads():
    try:
        import numba

        return numba.get_num_threads()
    except Exception:  # pragma: no cover
        return 1


def dhop(out, psi, uf, ub, stencil, Ls=1, scale=-0.5, alpha=0.0, diag=None, dag=False, nchunk=None):
    """Run the hopping kernel on raw buffers (see the module docstring); returns out.

    ``out`` must not alias ``psi`` (neighbours are read while results are written).
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
    if diag is None:
        diag = out
        alpha = 0.0
    coef = np.array([scale, alpha], dtype=dtype)
    if nchunk is None:
        nchunk = max(1, min(n4, 8 * _threads()))
    kernel_for(nsimd)(nchunk, out, psi, uf, ub, stencil.neighbours, stencil.perm, stencil.lanes, int(Ls),
                      *_tables(1 if dag else 0, dtype), coef, diag)
    return out
