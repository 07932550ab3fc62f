"""The Dirac kernels written once, in the covariant vocabulary (pygrid.accelerator.covariant).

Every backend's code is generated from these descriptions: numba SIMD for the
openmp backend (the ``generic`` variant), CUDA C for cuda and hip, OpenCL C for
sycl.  The kernels, on raw field buffers ``[osites][12][2][nsimd]``:

* :data:`WILSON_HOP` (:data:`WILSON_HOP_5D`, which also prefetches the
  neighbour's slices ahead): Grid's ``GenericDhopSite`` for the 8-point Wilson
  stencil, 4D (``Ls = 1``) or 5D with s innermost (outer site ``o * Ls + s``;
  the link of a 4D site serves its Ls slices, which are neighbours in
  memory and, on SIMT, neighbouring threads)::

      out(x) = scale * sum_p [ (1 -+ g_mu) U psi ](x)  (+ alpha * diag(x) when use_diag)

  coef = (scale, alpha, g_forward, g_backward): the projector signs (-1, +1
  for Dhop, +1, -1 for its adjoint).  Per point: the neighbour read with its
  lane permute, spin projection to a half spinor, SU(3) multiply (by U(x), or
  by U(x - mu)^dag read at the neighbour), reconstruction into the accumulator;
  1320 flops per site.  On a lattice split over ranks they run the listed
  boundary sites, and a neighbour past the local sites is a row of the halo
  other ranks sent, already projected (:data:`WILSON_PACK` packs it);
  :data:`WILSON_HOP_LOCAL` and :data:`WILSON_HOP_5D_LOCAL` are the kernels for a
  lattice without one, and the ``_INTERIOR`` kernels the same on listed sites.
* :func:`bidiag_multiply_kernel`: ``out = A x`` (or ``out = A x + B y``) for a
  cyclic bidiagonal matrix A in s per chirality (Mooee, M5D, b + c S and their
  daggers), row by row in the sweep's order so that out may be x or y;
* :func:`bidiag_stream_kernel`: the same out of place with B diagonal, every
  slice in memory order, one pass over a site's slices;
* :data:`BIDIAG_SOLVE`: ``out = A^-1 x`` by two O(Ls) sweeps (MooeeInv and its dagger).

The spin structure (which spin feeds the half spinor, with which phase) is read
from Grid's gamma matrices in :mod:`pygrid.tensors.constant` by
:func:`pygrid.qcd.kernels_wilson.gamma_structure`.
"""
from __future__ import annotations

from ..accelerator.covariant import Kernel, Param
from .kernels_wilson import SLICE_PREFETCH, gamma_structure


def _plane(spin, colour, imag):
    return 2 * (3 * spin + colour) + imag


def _times_phase(E, g, imag, sign, y):
    """sign * g * (i if imag) * y for a complex (re, im) pair y; g a uniform +-1."""
    yr, yi = y
    zero = E.const(0.0)
    if not imag:
        return (g * yr, g * yi) if sign > 0 else (E.fms(g, yr, zero), E.fms(g, yi, zero))
    # i y = (-yi, yr)
    return (E.fms(g, yi, zero), g * yr) if sign > 0 else (g * yi, E.fms(g, yr, zero))


def _axpy_phase(E, x, g, imag, sign, y):
    """x + sign * g * (i if imag) * y."""
    (xr, xi), (yr, yi) = x, y
    if not imag:
        if sign > 0:
            return E.fma(g, yr, xr), E.fma(g, yi, xi)
        return E.fms(g, yr, xr), E.fms(g, yi, xi)
    if sign > 0:
        return E.fms(g, yi, xr), E.fma(g, yr, xi)
    return E.fma(g, yi, xr), E.fms(g, yr, xi)


def _su3_times(E, link, site, mu, h, adj, perm, halo=None):
    """U h (or U^dag h) for the link of direction mu at ``site`` and one spin h (3 complex);
    ``halo = (name, limit)``: sites from ``limit`` on are read from that halo."""
    def read(plane):
        if halo is None:
            return E.read(link, site, plane, perm)
        return E.read_either(link, halo[0], site, halo[1], plane, perm)

    def element(r, c):
        e = 2 * (mu * 9 + 3 * r + c)
        return read(e), read(e + 1)

    return _matrix_times(E, element, h, adj)


def _compressed_link(E, rows, zi, sites, site, mu, perm):
    """The link of direction mu at ``site`` from its first two rows (``rows``: direction by direction,
    ``sites`` links a direction, 6 complex a link) and its phase (``ztab`` at the row
    ``zi[4 site + mu]``), as 3 x 3 (re, im): the third row is ``z conj(row0 x row1)``
    (:func:`pygrid.qcd.compressed_links.compress_links`)."""
    at = E.int_param(sites) * mu + site
    m = [[(E.read(rows, at, 2 * (3 * i + j), perm), E.read(rows, at, 2 * (3 * i + j) + 1, perm))
          for j in range(3)] for i in range(2)]
    z = E.let(E.itable(zi)[site * 4 + mu], "z")
    zr, zim = E.read("ztab", z, 0, perm), E.read("ztab", z, 1, perm)
    x, y = m
    third = []
    for j, k in ((1, 2), (2, 0), (0, 1)):
        # c = x_j y_k - x_k y_j; the element is z conj(c)
        (ajr, aji), (akr, aki), (bjr, bji), (bkr, bki) = x[j], x[k], y[j], y[k]
        cr = E.fma(aki, bji, E.fms(akr, bjr, E.fms(aji, bki, ajr * bkr)))
        ci = E.fms(aki, bjr, E.fms(akr, bji, E.fma(aji, bkr, ajr * bki)))
        third.append((E.fma(zim, ci, zr * cr), E.fms(zr, ci, zim * cr)))
    return [x, y, third]


def _entries(m):
    """``element(r, c)`` of a matrix already built (:func:`_matrix_times`)."""
    return lambda r, c: m[r][c]


def _matrix_times(E, element, h, adj):
    """m h (or m^dag h) for a 3 x 3 complex matrix given as ``element(r, c) -> (re, im)`` (a read
    from memory, or a value rebuilt before) and one spin h (3 complex)."""
    w = []
    for i in range(3):
        wr = wi = None
        for j in range(3):
            ur, ui = element(j, i) if adj else element(i, j)
            hr, hi = h[j]
            if wr is None:
                wr, wi = ur * hr, ur * hi
            else:
                wr, wi = E.fma(ur, hr, wr), E.fma(ur, hi, wi)
            if adj:  # conj(u) h
                wr, wi = E.fma(ui, hi, wr), E.fms(ui, hr, wi)
            else:
                wr, wi = E.fms(ui, hi, wr), E.fma(ui, hr, wi)
        w.append((wr, wi))
    return w


def _flatten(spins):
    return [v for spin in spins for pair in spin for v in pair]


def _unflatten(vals):
    it = iter(vals)
    return [[(next(it), next(it)) for _ in range(3)] for _ in range(2)]


def _wilson_prologue(E):
    return {k: E.uniform("coef", i) for i, k in enumerate(("scale", "alpha", "gf", "gb"))}


def _reads(E, field, site, P=None):
    """``read(plane)`` of ``field`` at ``site`` (with the lane permute P)."""
    return lambda plane: E.read(field, site, plane, P)


def _project(E, read, mu, g):
    """The half spinor of ``(1 + g gamma_mu) psi`` (g = -+1), its spins 0 and 1 as [spin][colour] =
    (re, im), from ``read(plane)`` of psi's 24 real planes."""
    pa = gamma_structure()[mu][0]
    h = []
    for a in range(2):
        j, imag, sign = pa[a]
        spin = []
        for c in range(3):
            x = (read(_plane(a, c, 0)), read(_plane(a, c, 1)))
            y = (read(_plane(2 + j, c, 0)), read(_plane(2 + j, c, 1)))
            spin.append(_axpy_phase(E, x, g, imag, sign, y))
        h.append(spin)
    return h


def _half_spinor(E, site, n, n4, limit, mu, g, P):
    """The projected neighbour of a lattice split over ranks: from psi (local ``n``) or, past the
    local sites, a row of the halo another rank sent, already projected (:data:`WILSON_PACK`)."""
    zero = E.const(0.0)
    hv = [[(E.var(zero, P), E.var(zero, P)) for _ in range(3)] for _ in range(2)]

    def into(h):
        for a in range(2):
            for c in range(3):
                for v, x in zip(hv[a][c], h[a][c]):
                    E.set(v, x)

    with E.when(n.less(n4)):
        into(_project(E, _reads(E, "psi", site, P), mu, g))
    with E.otherwise():
        row = site - limit
        into([[tuple(E.read("halo", row, _plane(a, c, im), P) for im in range(2)) for c in range(3)]
              for a in range(2)])
    return hv


def _wilson_body(E, o, s):
    if "listed" in E.k.statics:  # the sites of a list (the interior or the boundary of a split lattice)
        o = E.let(E.itable("sites")[o], "site")
    gam = gamma_structure()
    n4, Ls = E.int_param("n4"), E.int_param("Ls")
    nbr, perm = E.itable("nbr"), E.itable("perm")
    local = "local" in E.k.statics
    compressed = "compressed" in E.k.statics  # 4D: the links as two rows and a phase
    limit = None if local else E.let(n4 * Ls, "lim")

    acc = None  # acc[spin][colour] = (re, im)
    for p in range(8):
        mu, fwd = p % 4, p < 4
        g = E.pro["gf" if fwd else "gb"]
        k = p * n4 + o
        n = E.let(nbr[k], "n")
        P = E.permutation(perm[k])
        site = n * Ls + s
        if "prefetch" in E.k.statics:
            # the neighbour's slices ahead: prefetching them past the end of psi is harmless (never faults)
            E.prefetch("psi", site + SLICE_PREFETCH)
        pb = gam[mu][1]
        if local:
            h = _project(E, _reads(E, "psi", site, P), mu, g)
        else:
            h = _half_spinor(E, site, n, n4, limit, mu, g, P)
        if fwd:
            h = _unflatten(E.permute(_flatten(h), P))
            if compressed:
                m = _compressed_link(E, "ufc", "zif", "nuf", o, mu, None)
                w = [_matrix_times(E, _entries(m), h[a], False) for a in range(2)]
            else:
                w = [_su3_times(E, "uf", o, mu, h[a], False, None) for a in range(2)]
        else:
            if compressed:
                # on a lattice split over ranks the halo's links follow the local ones in ubc
                m = _compressed_link(E, "ubc", "zib", "nub", n, mu, P)
                w = [_matrix_times(E, _entries(m), h[a], True) for a in range(2)]
            else:
                w = [_su3_times(E, "ub", n, mu, h[a], True, P, None if local else ("ubh", n4))
                     for a in range(2)]
            w = _unflatten(E.permute(_flatten(w), P))
        # rebuild the four spins: upper spin a is w_a, lower spin 2 + b is a phase times w_{k_b}
        if acc is None:
            acc = [list(w[0]), list(w[1]), [None] * 3, [None] * 3]
            for b in range(2):
                kb, imag, sign = pb[b]
                acc[2 + b] = [_times_phase(E, g, imag, sign, w[kb][c]) for c in range(3)]
        else:
            for a in range(2):
                acc[a] = [(acc[a][c][0] + w[a][c][0], acc[a][c][1] + w[a][c][1]) for c in range(3)]
            for b in range(2):
                kb, imag, sign = pb[b]
                acc[2 + b] = [_axpy_phase(E, acc[2 + b][c], g, imag, sign, w[kb][c]) for c in range(3)]
    out_site = o * Ls + s
    sc, al = E.pro["scale"], E.pro["alpha"]
    planes = [(q, acc[q // 6][(q // 2) % 3][q % 2]) for q in range(24)]
    with E.when(E.int_param("use_diag")):
        for q, v in planes:
            E.store("out", out_site, q, E.fma(al, E.read("diag", out_site, q), sc * v))
    with E.otherwise():
        for q, v in planes:
            E.store("out", out_site, q, sc * v)


def _wilson_hop(prefetch, local=False, compressed=False, listed=False):
    if compressed:  # the links compressed (the third row rebuilt), 4D
        links = (Param("ufc", "field", 6), Param("ubc", "field", 6), Param("zif", "itable"),
                 Param("zib", "itable"), Param("ztab", "field", 1), Param("nuf", "int"), Param("nub", "int"))
    else:
        links = (Param("uf", "field", 36), Param("ub", "field", 36))
    halo = () if local else (Param("halo", "field", 6),) if compressed else (
        Param("halo", "field", 6), Param("ubh", "field", 36))
    sites = (Param("sites", "itable"), Param("nsites", "int")) if listed else ()
    return Kernel(
        name=("wilson_hop_5d" if prefetch else "wilson_hop") + ("_local" if local else "")
        + ("_c" if compressed else "") + ("_sites" if listed else ""),
        params=(
            Param("out", "field", 12, out=True),
            Param("psi", "field", 12),
            *links,
            Param("nbr", "itable"),
            Param("perm", "itable"),
            Param("lanes", "itable"),
            Param("pxor", "itable"),
            Param("coef", "rtable"),
            Param("diag", "field", 12),
            Param("use_diag", "int"),
            Param("n4", "int"),
            Param("Ls", "int"),
            *halo,
            *sites,
        ),
        n="nsites" if listed else "n4",
        inner="Ls",
        body=_wilson_body,
        prologue=_wilson_prologue,
        statics=(("prefetch",) if prefetch else ()) + (("local",) if local else ())
        + (("compressed",) if compressed else ()) + (("listed",) if listed else ()),
        doc="The Wilson hopping term on outer 4D sites " + ("sites[lo:hi]" if listed else "[lo, hi)")
        + ", all Ls slices (pygrid.qcd.kernels_generic).",
    )


#: the hopping kernel for 4D fields, and for 5D fields (which also prefetches the neighbour's slices
#: ahead), on a lattice split over ranks: the outer sites ``sites[:nsites]`` (the boundary), whose
#: neighbours past the local sites are the halo's half spinors
WILSON_HOP = _wilson_hop(False, listed=True)
WILSON_HOP_5D = _wilson_hop(True, listed=True)
#: the same on a lattice with no halo (one rank): every read from the local fields, none choosing between
#: them and the halo, which in 5D kept the loop over s from being compiled well (openmp 1.2-1.8x,
#: sycl 1.07x; docs/performance.md, "Backends compared")
WILSON_HOP_LOCAL = _wilson_hop(False, True)
WILSON_HOP_5D_LOCAL = _wilson_hop(True, True)
#: the kernels of a lattice without a halo on the sites of a list: the interior of a split lattice,
#: computed while the halo travels
WILSON_HOP_INTERIOR = _wilson_hop(False, True, listed=True)
WILSON_HOP_5D_INTERIOR = _wilson_hop(True, True, listed=True)
#: the 4D kernels reading the links compressed (``ufc``, ``ubc``: the first two rows of each link,
#: direction by direction, ``nuf`` and ``nub`` links a direction, shaped (4 * nuf, 6, 2, nsimd);
#: ``zif``, ``zib``: each link's row of ``ztab``, its phase; :class:`pygrid.qcd.kernels_wilson.
#: CompressedLinks`), without a halo and with one (whose links follow the local ones in ``ubc``)
WILSON_HOP_LOCAL_C = _wilson_hop(False, True, True)
WILSON_HOP_C = _wilson_hop(False, False, True, listed=True)
WILSON_HOP_INTERIOR_C = _wilson_hop(False, True, True, listed=True)


def _pack_body(E, o, s):
    """Face row ``o`` (slice s): the half spinor of its direction ``mus[o]`` and sign ``signs[o]``."""
    Ls = E.int_param("Ls")
    site = E.let(E.itable("rows")[o] * Ls + s, "src")
    g = E.uniform("signs", o)
    mu = E.let(E.itable("mus")[o], "mu")
    for m in range(4):
        with E.when(mu.equals(m)):
            h = _project(E, _reads(E, "psi", site), m, g)
            for a in range(2):
                for c in range(3):
                    for im in range(2):
                        E.store("packed", o * Ls + s, _plane(a, c, im), h[a][c][im])


#: the halo a rank sends, packed where its fields live (on the device for a GPU): for face row o,
#: its source site ``rows[o]`` projected to the half spinor of direction ``mus[o]`` with the sign
#: ``signs[o]`` of the hop's projector there, all Ls slices, into row o of ``packed``
#: ``(nrows * Ls, 6, 2, nsimd)``.  The hopping kernels of a split lattice read these rows as their
#: ``halo``: half the bytes of whole spinors to copy off the device and send.
WILSON_PACK = Kernel(
    name="wilson_pack",
    params=(
        Param("packed", "field", 6, out=True),
        Param("psi", "field", 12),
        Param("rows", "itable"),
        Param("mus", "itable"),
        Param("signs", "rtable"),
        Param("nrows", "int"),
        Param("Ls", "int"),
    ),
    n="nrows",
    inner="Ls",
    body=_pack_body,
    doc="Face rows projected to half spinors for the halo (pygrid.qcd.kernels_generic).",
)


# ---- the fifth dimension: cyclic bidiagonal matrices in s, per chirality ----------------------
#
# Chirality c holds spins 2c and 2c + 1: the 12 real planes [12 c, 12 c + 12) of a site.  In sweep
# order j the slices are order[c, j]; row j of A is d x_j + e x_{j-1}, row 0 is d x_0 + f x_last.

def _chirality(c):
    return range(12 * c, 12 * c + 12)


def _prefetch_next_site(E, fields, base, Ls):
    """The next 4D site's Ls slices of ``fields`` into L2, while this site's are worked on: out of
    cache the hardware prefetcher alone fell behind these kernels (MooeeInv 3.7 -> 2.6 ms on 50 MB)."""
    with E.loop("pf", 0, Ls) as j:
        for name in fields:
            E.prefetch(name, base + Ls + j, level=2)


def _bidiag_mult_body(E, o, _s, accumulate, diagonal_add=False):
    Ls = E.int_param("Ls")
    order = E.itable("order")
    base = o * Ls
    _prefetch_next_site(E, ("x", "y") if accumulate else ("x",), base, Ls)
    for c in range(2):
        # (field, d, e, f): A x, and with accumulate B y, B sharing A's sweep order; e, f None: B = d
        terms = [("x", E.uniform("d", c), E.uniform("e", c), E.uniform("f", c))]
        if accumulate:
            terms.append(("y", E.uniform("d2", c), None, None) if diagonal_add else
                         ("y", E.uniform("d2", c), E.uniform("e2", c), E.uniform("f2", c)))
        last = E.let(order[c * Ls + Ls - 1], "sl")
        # the last slices are kept for row 0: the rows are written from the last down, and out may be x or y
        lasts = [None if t[2] is None else [E.read(t[0], base + last, q) for q in _chirality(c)]
                 for t in terms]
        with E.loop("jr", 0, Ls - 1) as jr:
            j = Ls - 1 - jr
            sj = E.let(order[c * Ls + j], "sj")
            sp = E.let(order[c * Ls + j - 1], "sp")
            for i, q in enumerate(_chirality(c)):
                _bidiag_row(E, terms, lasts, base, i, q, sj, sp)
        s0 = E.let(order[c * Ls], "s0")
        for i, q in enumerate(_chirality(c)):
            _bidiag_row(E, terms, lasts, base, i, q, s0, None)


def _bidiag_row(E, terms, lasts, base, i, q, s, prev):
    """Plane q of out at slice s: the sum over terms of d x_s + e x_prev (row 0, prev None: f x_last,
    from the kept slices); a term without e is diagonal."""
    v = None
    for k, (name, d, e, f) in enumerate(terms):
        w = d * E.read(name, base + s, q)
        if e is not None:
            w = E.fma(f, lasts[k][i], w) if prev is None else E.fma(e, E.read(name, base + prev, q), w)
        v = w if v is None else v + w
    E.store("out", base + s, q, v)


def bidiag_multiply_kernel(accumulate, diagonal_add=False):
    """out = A x (``accumulate``: out = A x + B y) per 4D site and chirality, A and B cyclic bidiagonal
    with the same sweep order; ``diagonal_add``: B is diagonal (its d2 alone is read)."""
    fields = ("x", "y") if accumulate else ("x",)
    tables = ("d", "e", "f") + ((("d2",) if diagonal_add else ("d2", "e2", "f2")) if accumulate else ())
    name = "bidiag_mult" + ("_acc" if accumulate else "") + ("_diag" if diagonal_add else "")
    return Kernel(
        name=name,
        params=(Param("out", "field", 12, out=True),) + tuple(Param(x, "field", 12) for x in fields)
        + (Param("order", "itable"),) + tuple(Param(t, "rtable") for t in tables)
        + (Param("n4", "int"), Param("Ls", "int")),
        n="n4", body=lambda E, o, s: _bidiag_mult_body(E, o, s, accumulate, diagonal_add),
        statics=(bool(accumulate), bool(diagonal_add)),
        doc="out = A x (or out = A x + B y), A and B cyclic bidiagonal in s per chirality "
            "(pygrid.qcd.kernels_generic).",
    )


def _bidiag_stream_body(E, o, _s, add):
    """Out of place: every slice in memory order, both chiralities, out_s = d x_s + ep_s x_prev(s)
    (+ d2 y_s): one pass over the site's slices, which the hardware prefetcher follows as a stream."""
    Ls = E.int_param("Ls")
    prev = E.itable("prev")
    base = o * Ls
    _prefetch_next_site(E, ("x", "y") if add else ("x",), base, Ls)
    d = [E.uniform("d", c) for c in range(2)]
    d2 = [E.uniform("d2", c) for c in range(2)] if add else None
    with E.loop("s", 0, Ls) as s:
        for c in range(2):
            p = E.let(prev[c * Ls + s], "p")
            e = E.uniform("ep", c * Ls + s)
            for q in _chirality(c):
                v = E.fma(e, E.read("x", base + p, q), d[c] * E.read("x", base + s, q))
                if add:
                    v = E.fma(d2[c], E.read("y", base + s, q), v)
                E.store("out", base + s, q, v)


def bidiag_stream_kernel(add):
    """out = A x (``add``: out = A x + diag(d2) y), out aliasing neither x nor y: A cyclic bidiagonal
    given per slice as the slice it also reads (``prev``) and that slice's coefficient (``ep``)."""
    fields = ("x", "y") if add else ("x",)
    tables = ("d", "ep") + (("d2",) if add else ())
    return Kernel(
        name="bidiag_stream" + ("_acc_diag" if add else ""),
        params=(Param("out", "field", 12, out=True),) + tuple(Param(x, "field", 12) for x in fields)
        + (Param("prev", "itable"),) + tuple(Param(t, "rtable") for t in tables)
        + (Param("n4", "int"), Param("Ls", "int")),
        n="n4", body=lambda E, o, s: _bidiag_stream_body(E, o, s, add), statics=(bool(add),),
        doc="out = A x (or out = A x + diag(d2) y) out of place, A cyclic bidiagonal in s per "
            "chirality, slices in memory order (pygrid.qcd.kernels_generic).",
    )


BIDIAG_MULT = bidiag_multiply_kernel(False)
BIDIAG_MULT_ACC = bidiag_multiply_kernel(True)
#: out = A x + diag(d2) y: B diagonal in s (the identity, or -1 at the end of a Schur operator)
BIDIAG_MULT_ACC_DIAG = bidiag_multiply_kernel(True, diagonal_add=True)
#: the same two out of place, one pass over a site's slices
BIDIAG_STREAM = bidiag_stream_kernel(False)
BIDIAG_STREAM_ACC_DIAG = bidiag_stream_kernel(True)


def _bidiag_solve_body(E, o, _s):
    """x_j = p_j + q_j x_last: p by a forward sweep, then x_last = p_last r and the q_j terms."""
    Ls = E.int_param("Ls")
    order = E.itable("order")
    base = o * Ls
    _prefetch_next_site(E, ("x",), base, Ls)
    for c in range(2):
        a, e, r = E.uniform("invd", c), E.uniform("ed", c), E.uniform("r", c)
        s0 = E.let(order[c * Ls], "s0")
        prev = []
        for q in _chirality(c):
            v = a * E.read("x", base + s0, q)
            E.store("out", base + s0, q, v)
            prev.append(E.var(v))
        with E.loop("j", 1, Ls) as j:
            sj = E.let(order[c * Ls + j], "sj")
            for k, q in enumerate(_chirality(c)):
                v = E.fms(e, prev[k], a * E.read("x", base + sj, q))
                E.store("out", base + sj, q, v)
                E.set(prev[k], v)
        # prev now holds p_last; x_last = r p_last
        xl = [p * r for p in prev]
        with E.loop("j", 0, Ls - 1) as j:
            sj = E.let(order[c * Ls + j], "sj")
            qj = E.uniform("q", c * Ls + j)
            for k, q in enumerate(_chirality(c)):
                E.store("out", base + sj, q, E.fma(qj, xl[k], E.read("out", base + sj, q)))
        sl = E.let(order[c * Ls + Ls - 1], "sl")
        for k, q in enumerate(_chirality(c)):
            E.store("out", base + sl, q, xl[k])


BIDIAG_SOLVE = Kernel(
    name="bidiag_solve",
    params=(
        Param("out", "field", 12, out=True),
        Param("x", "field", 12),
        Param("order", "itable"),
        Param("invd", "rtable"),
        Param("ed", "rtable"),
        Param("q", "rtable"),
        Param("r", "rtable"),
        Param("n4", "int"),
        Param("Ls", "int"),
    ),
    n="n4",
    body=_bidiag_solve_body,
    doc="out = A^-1 x, A cyclic bidiagonal in s per chirality, by two O(Ls) sweeps "
        "(pygrid.qcd.kernels_generic).",
)
