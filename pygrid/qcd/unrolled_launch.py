"""Launching the hand-unrolled Wilson hopping kernel (:mod:`pygrid.qcd.kernels_wilson`) on host buffers.

:func:`run_unrolled` launches it once on buffers that :func:`pygrid.qcd.dslash.dhop` checked (on a
lattice split over ranks: the face half spinors packed and sent, the interior computed while they
travel, then the boundary from the halo); :func:`bind_unrolled` binds a launch to its buffers once
for the calls that repeat.  What every launch on one stencil reuses (the flattened tables, the
order the sites are visited in, the kernels, the message buffers) is a :class:`_LaunchState`.
"""
from __future__ import annotations

import numpy as np

from ..accelerator.caches import compute_threads, per_group, scaled
from ..accelerator.host import read_only
from ..config import current
from ..errors import ConformabilityError
from ..stencil.halo import exchange_rows
from ..stencil.shared_halo import shared_halo
from . import kernels_wilson
from .halo_faces import face_tables, packed_arrays
from .kernels_wilson import field_bytes
from .split_hop import split_hop

# The byte thresholds below were measured with 32 MiB of L3; a launch scales each to the cache its
# threads reach on the host (pygrid.accelerator.caches).

#: fields (spinor in and out, links) of more bytes than this count as larger than the caches: the
#: kernels prefetch only then, and stream their result past the caches; per structure of the
#: kernels (``kernels_wilson.wide_default``), whose far paths differ.  On the AVX-512 machine (1 MiB
#: of L2 per core, 32 MiB of L3) the prefetch cost 8-10% on 8 MB of fields and gained 15-25% from
#: 20 MB on; the 5D register order on 14-15 MB (domain wall 8^4, Ls 8 double and Ls 16 single) ran
#: 1.03-1.05x and 1.00-1.06x far, same-process A/B, three runs.  On the AVX2 machine (512 KiB of
#: L2), two threads, same-process A/B: the tiled order's 5D hops on 14-15 MB ran 1.02-1.10x
#: without the prefetches and streamed stores, the Wilson hop on 20 MB (12^4 double) 1.03x, and the
#: 5D hops on 28-30 MB 0.93-0.94x
FAR_BYTES = {"wide": 12 << 20, "narrow": 16 << 20}

#: 5D fields of at most this many bytes (in double; twice as many in single) take the register
#: order on wide machines, beyond it the tiled order with its prefetches and streamed result (see
#: ``kernels_wilson._register_body_5d``): on AVX-512 (32 MB of L3, shared with the machine's other
#: tenants) the register order ran 1.2-1.5x on 7-15 MB of fields, 1.05-1.09x and 0.7-0.8x in two runs
#: on 28 MB, and the tiled order 1.2-1.7x on 30-120 MB.  :func:`register_reach` does not scale it up
#: with a larger cache: on the Intel AVX-512 machine (105 MiB of L3 reported) the crossing was where
#: it is on 32 MiB (2026-12-01, alternating processes, GFlop/s, register order against the tiled
#: order streaming its result: 8^4 Ls 12 double, 20 MB, 34.5-34.6 against 26.2-32.1; 8^4 Ls 16
#: double, 26 MB, 26.5-28.7 against 28.5-30.6; 8.8.8.16 Ls 16 double, 52 MB, 20.1-23.9 against
#: 24.5-26.4, and 12.8-17.7 with the register order's own far path; the tiled order at 26 MB
#: 22.3-27.6 without streaming its result).  Single precision, with half
#: the bytes for the same arithmetic, keeps the register order to twice the bytes: 8.8.8.16 Ls 16
#: single (26 MB) 60.9-65.4 against 53.1-61.0 (and 1.04x on the AMD machine), 8.8.16.16 (52 MB)
#: 39.5-45.2 against 42.7-53.7
REGISTER_BYTES = 24 << 20

#: the same for the other variants of the last step (``kernels_wilson.LAST``), which the Schur
#: operators run inside their solves: there the solver's vectors share the L3, and the register
#: order, the faster on a hop's own, ran slower from about 10 MB of fields.  Domain wall Schur CG,
#: AVX-512 machine, 2026-11-30, alternating processes, ms an iteration, tiled against register
#: order: 8^4 Ls 16 double (14 MB) 4.48-4.58 against 4.94-5.16 (its hops on their own 0.73-0.77
#: against 0.62-0.71 ms), 8.8.8.16 Ls 16 single (14 MB) 4.75-4.82 against 5.55-5.78; 8^4 Ls 12
#: double (11 MB) level; 8^4 Ls 8 double and Ls 16 single (7 MB) 2.15-2.21 against 2.07-2.13 and
#: 2.11-2.16 against 2.02-2.06.  Not scaled up with a larger cache either: on the Intel machine,
#: 8^4 Ls 16 double, 9.9-10.6 against 10.8-12.2 (2026-12-01)
SCHUR_REGISTER_BYTES = 12 << 20

#: whether 4D fields past :func:`register_reach` (the plain hop's) take the tiled order of the narrow
#: structure on their compressed links in the wide structure too, as 5D fields do past it: with
#: eight neighbour streams a site the register order falls behind out of the caches.  AMD Zen 5
#: (AVX-512, 1 MiB of L2 a core, 32 MiB of L3), 2026-12-02, `bench_compressed_links.py --structures
#: wide,narrow --rounds 7`, median GFlop/s on compressed links, the register order against the tiled
#: order: `D.Dhop` 16^4 double (63 MB) 31.4 against 39.6, 24^4 double 25.0 against 28.5, 24^4 single
#: 51.9 against 61.0; `D.Meooe` 36.8 against 41.1, 23.5 against 23.9, 49.1 against 51.5; within the
#: reach the register order leads or is level (12^4 double, 20 MB: `D.Dhop` 65.2 against 61.3; 16^4
#: single, 31 MB: 126.5 against 126.8)
TILED_4D = True


def register_reach(last, dtype, threads):
    """Bytes of fields up to which the wide structure's variant ``last`` of the hop takes the
    register order (5D fields; 4D fields with the plain hop, :data:`TILED_4D`):
    :data:`REGISTER_BYTES` (the plain hop, twice that in single) or :data:`SCHUR_REGISTER_BYTES`,
    scaled down to a smaller cache than the reference's but not up to a larger one (see
    :data:`REGISTER_BYTES`)."""
    limit = REGISTER_BYTES if last == "plain" else SCHUR_REGISTER_BYTES
    reach = min(scaled(limit, threads), limit)
    return reach * 2 if last == "plain" and np.dtype(dtype).itemsize == 4 else reach


# A launch's first argument is its result (``out``): on openmp the result's bytes decide whether the
# hop runs on the threads (``min_parallel_bytes``), as they do for the expression kernels writing
# the same fields, although the hop counts 4D outer sites and its 5D fields hold Ls of them each.
# A field then stays in the caches of the cores that last wrote it: a Schur CG at 8^4 in single
# ran its iteration 1.4x faster for domain wall Ls 8 with the hop on the threads like the vector
# updates, and 2x slower for Wilson with its hop alone on the threads and the updates on the
# calling thread.


#: bytes of the per-tile accumulator (Ls slices of a tile of outer sites), sized to stay in L1
TILE_BYTES = 24 * 1024


def _tile(Ls, nsimd, dtype):
    return max(1, TILE_BYTES // (int(Ls) * 24 * int(nsimd) * np.dtype(dtype).itemsize))

#: the sites between a site and its t-neighbour should hold at most this many bytes (spinors and links)
#: so that the neighbour read one time-slice later still comes from the core's cache
COLUMN_BYTES = 6 << 20

#: columns at least this wide where the plane is wider, past :data:`COLUMN_BYTES` if need be: a
#: column two sites wide reads half its y- and z-neighbours from outside it.  Intel Xeon (2 MiB of
#: L2 a core), 2026-12-02, alternating processes of `pygrid benchmark dwf --threads 2`, Dhop GFlop/s:
#: 16^4 Ls 16 double (columns of 16x2x2 outer sites under the budget) 25.3-25.4, in 16x4x4 columns
#: (7.5 MB a slice) 29.4-29.6; 16^4 Ls 8 double in 16x4x4 columns (the budget's) 28.0-28.8, in
#: natural order 24.6
MIN_COLUMN_WIDTH = 4


def site_order(rdims, Ls, nsimd, dtype, threads=1, far=False):
    """The order the kernel visits the 4D outer sites in (``rdims`` x fastest, t slowest).

    In natural order a site's t-neighbour is read again one whole time-slice
    later; at 16^4 and Ls 8 that slice is 12 MB, out of the core's cache.  When the
    slice is larger than :data:`COLUMN_BYTES` (scaled to one group's cache,
    :func:`pygrid.accelerator.caches.per_group`), the (y, z) plane is cut into b x b
    columns of every x (b the widest that keeps a column's slice under the budget, at
    least :data:`MIN_COLUMN_WIDTH`, dividing y and z where possible), each walked over
    all t, so the reuse distance is one column's slice.

    4D fields larger than the caches (``far``) on several ``threads`` are cut in z into one
    slab per thread instead (full x-y planes, each walked over all t; the launch gives each
    thread one contiguous block of this order): split by t, as in natural order, each
    thread would hold a window of a whole slice in the shared L3, twice the bytes on two
    threads.  Any order gives the same result; only the cache sees it.
    """
    X, Y, Z, T = (int(d) for d in rdims)
    n4 = X * Y * Z * T
    column = per_group(COLUMN_BYTES)
    site_bytes = (int(Ls) * 24 + 4 * 18) * int(nsimd) * np.dtype(dtype).itemsize
    natural = np.arange(n4, dtype=np.int32)
    idx = natural.reshape(T, Z, Y, X)
    threads = int(threads)
    if (int(Ls) == 1 and far and threads > 1 and Z % threads == 0
            and X * Y * Z * site_bytes <= threads * column):
        b = Z // threads
        return np.ascontiguousarray(np.concatenate([idx[:, z0:z0 + b].reshape(-1) for z0 in range(0, Z, b)]))
    if X * Y * Z * site_bytes <= column:
        return natural
    widest = max(MIN_COLUMN_WIDTH, int((column / (X * site_bytes)) ** 0.5))
    # columns that tile the plane evenly: a ragged last column ran 6% slower (domain wall Ls 16 single)
    even = [d for d in range(2, widest + 1) if Y % d == 0 and Z % d == 0]
    b = max(even) if even else widest
    if b >= max(Y, Z):
        return natural
    cols = [idx[:, z0:z0 + b, y0:y0 + b, :].reshape(-1) for z0 in range(0, Z, b) for y0 in range(0, Y, b)]
    return np.ascontiguousarray(np.concatenate(cols))


#: the pack of a halo through the node's shared memory stores past the caches: its neighbour's core
#: reads the rows next, and a store to a line that core still holds waits for it.  Two ranks of 8^4,
#: Wilson double, same process, three rounds (2026-11-30): the Schur operator 187-190 against
#: 219-220 us, ``Meooe`` 91-93 against 107-111, ``Dhop`` 171-176 against 204-211
SHARED_PACK_NT = True

#: at most this many pieces of the interior of a decomposed lattice, letting the halo messages progress
#: between them (MPI moves data only inside its calls; each test costs microseconds), with at
#: least MIN_PIECE_SITES outer sites per piece and at least two pieces
INTERIOR_CHUNKS = 8
MIN_PIECE_SITES = 384


def run_unrolled(backend, out, psi, uf, ub, stencil, Ls, coef, diag, use_diag, link_halo=None, dterm=None,
                 solve=None, mul=None, links_c=None):
    """Launch the hand-unrolled kernel on host buffers already checked by :func:`pygrid.qcd.dslash.dhop`.

    On a lattice split over ranks the face half spinors are packed and sent
    first, the interior sites computed while they travel, then the boundary
    sites from the received halo; ``link_halo`` holds the links of the
    backward neighbours on other ranks (:func:`pygrid.stencil.halo.exchange_rows`
    of ``ub``; exchanged here when not given).  ``dterm``: the diagonal term's coefficients, see
    :func:`diagonal_term`; ``solve``: a solve in s after the hop, :func:`solve_in_s`; ``mul``: a
    multiply in s before them, :func:`diagonal_term` of the matrix with alpha 1.  ``links_c``: the
    links ``uf``, ``ub`` compressed (:class:`CompressedLinks`), which a 4D hop reads in their place
    (the links of ``link_halo`` whole).
    """
    for name, a in (("out", out), ("psi", psi), ("uf", uf), ("ub", ub), ("diag", diag)):
        if not isinstance(a, np.ndarray) or not a.flags.c_contiguous:
            raise ConformabilityError(f"dhop: {name} buffer must be a C-contiguous host array")
    if not out.flags.writeable:
        raise ConformabilityError("dhop: out buffer is read-only")
    nsimd, dtype = out.shape[3], out.dtype
    st = _launch_state(stencil, Ls, nsimd, dtype)
    args = kernel_args(st, out, psi, uf, ub, coef, diag, use_diag, dterm, solve, mul)
    last = _last(args)
    plan = stencil.plan
    compressed = _layout(links_c, Ls)
    if compressed:
        args = _with_links(args, links_c)
    tables = links_c.tables() if compressed else ()
    dag = _adjoint(coef)

    def kernel(halo):
        return st.kernel(last, dag, halo, compressed)
    if plan is None or not plan.nhalo:
        full = args + (st.sites, st.none, st.none) + tables
        st.launcher(backend, kernel(False), full)(st.n4, *full)
        return
    if link_halo is None:
        link_halo = exchange_rows(plan, ub)
    _check_link_halo(link_halo, plan, ub)
    split_hop(backend, st, args, kernel(False), kernel(True), link_halo, tables, dag)()


def _check_link_halo(link_halo, plan, ub):
    if link_halo.shape != (plan.nhalo,) + ub.shape[1:] or link_halo.dtype != ub.dtype:
        raise ConformabilityError(f"dhop: link halo {link_halo.shape} {link_halo.dtype} does not match the "
                                  f"stencil's {plan.nhalo} halo rows of {ub.shape[1:]} {ub.dtype}")


def _layout(links_c, Ls):
    """The kernels' ``compressed`` value for the links ``links_c`` read in place of ``uf`` and ``ub``
    (4D fields): True for links of two rows (:class:`CompressedLinks`), ``BY_DIRECTION`` for whole
    links stored direction by direction (``compressed_links.LinksByDirection``), False for none."""
    if links_c is None or int(Ls) != 1:
        return False
    return True if links_c.rows == 2 else kernels_wilson.BY_DIRECTION


def _adjoint(coef):
    """Whether ``coef`` (``dslash._coefficients``: scale, alpha, then the forward and backward
    projector signs, +1 and -1 for the adjoint) asks for the adjoint: its kernels are others, with
    the signs compiled in (``kernels_wilson._signs``)."""
    return bool(coef[2] > 0)


def _with_links(args, links_c):
    """``args`` (:func:`kernel_args`) with the compressed links in place of ``uf`` and ``ub``."""
    return args[:2] + (links_c.uf, links_c.ub) + args[4:]


def _compressed_args(args, links_c, st):
    """The arguments of the kernel on compressed links on one rank: ``args`` (:func:`kernel_args`)
    with the compressed links in place of ``uf`` and ``ub``, and the phase tables last."""
    return _with_links(args, links_c) + (st.sites, st.none, st.none) + links_c.tables()


def _writable(a):
    # numba compiles a kernel per combination of writeable flags, and a Dirac kernel takes seconds:
    # every buffer goes in writable, as pygrid's kernel views give them (the kernel never writes its
    # inputs); a read-only one, from a caller's read view, is copied
    return a if a.flags.writeable else a.copy()


def kernel_args(st, out, psi, uf, ub, coef, diag, use_diag, dterm=None, solve=None, mul=None):
    """The hopping kernel's arguments before ``sites, halo, ubh``, for the launch state ``st``
    (:func:`_launch_state`) and host buffers shaped (osites, ncomp, 2, nsimd), passed as they are
    (the kernel indexes them flat), writable; ``dterm`` from :func:`diagonal_term` (None: the
    plain ``alpha * diag`` of ``coef``), ``solve`` from :func:`solve_in_s` (None: none) and
    ``mul``, the multiply in s before them, from :func:`diagonal_term` with alpha 1 (None: none)."""
    if dterm is None:
        dterm = diagonal_term(coef[1], None, Ls=1, dtype=coef.dtype)
    if solve is None:
        solve = solve_in_s(None, 1, coef.dtype)
    if mul is None:  # an empty mprev: no multiply
        mul = diagonal_term(1.0, None, Ls=1, dtype=coef.dtype)
    return (out, _writable(psi), _writable(uf), _writable(ub), _writable(diag), *st.tables, coef,
            bool(use_diag), *dterm, *solve, *mul, st.tile, st.far)


def solve_in_s(tables, Ls, dtype):
    """``(sorder, sinv)``, the kernel's solve in s after the hop (5D fields): ``tables`` from
    :func:`pygrid.qcd.fifth_dim.bidiag_solver` (order, 1/d, e/d, q, r), or None for no solve
    (``sorder`` empty)."""
    if tables is None:
        return _NO_PREV, read_only(np.zeros(0, dtype))
    order, invd, ed, q, r = (np.asarray(t) for t in tables)
    if order.shape != (2, int(Ls)):
        raise ConformabilityError(f"dhop: a solve in s of {order.shape[-1]} slices for Ls={Ls}")
    sinv = np.concatenate([invd, ed, r, q.reshape(-1)]).astype(dtype)
    return read_only(np.ascontiguousarray(order.reshape(-1), np.int32)), read_only(sinv)


_NO_PREV = read_only(np.zeros(0, np.int32))


#: where :func:`kernel_args` puts ``dprev``, ``sorder`` and ``mprev``
_DPREV, _SORDER, _MPREV = 14, 15, 18


def _last(args):
    """The kernel variant (:data:`pygrid.qcd.kernels_wilson.LAST`) that :func:`kernel_args`' arguments
    ask for."""
    dprev, sorder, mprev = args[_DPREV], args[_SORDER], args[_MPREV]
    if len(mprev):
        return "mul_solve" if len(sorder) else "mul"
    return "solve" if len(sorder) else "banded" if len(dprev) else "plain"


def diagonal_term(alpha, stream, Ls, dtype):
    """``(dco, dprev)``, the kernel's diagonal term: ``alpha * diag`` (``stream`` None), or
    ``alpha * A diag`` for A cyclic bidiagonal in s per chirality, ``stream = (d, prev, ep)``:
    row s of chirality c is ``d[c] x_s + ep[c, s] x_prev[c, s]`` (flattened (2, Ls) tables, see
    :func:`pygrid.qcd.dslash.stream_tables`).  ``dco`` holds ``alpha d`` then ``alpha ep``;
    ``dprev`` is empty for the plain term."""
    if stream is None:
        return read_only(np.full(2, alpha, dtype)), _NO_PREV
    d, prev, ep = stream
    if len(prev) != 2 * int(Ls):
        raise ConformabilityError(f"dhop: a diagonal term in s of {len(prev) // 2} slices for Ls={Ls}")
    dco = np.concatenate([alpha * np.asarray(d, np.float64), alpha * np.asarray(ep, np.float64)])
    return read_only(dco.astype(dtype)), read_only(np.ascontiguousarray(prev, np.int32))


def bind_unrolled(backend, out, psi, uf, ub, stencil, Ls, coef, diag, use_diag, dterm=None, solve=None,
                  mul=None, links_c=None, link_halo=None):
    """``run(out, psi, uf, ub, diag)``: :func:`run_unrolled` bound to these buffers (checked by
    the caller), the kernel's launch looked up once (``backend.bind_kernel``, its arguments packed
    once); the caller passes the same buffers again, alive.  ``run.prepared()`` is the same
    launch without arguments (``launch.prepared``; on a lattice split over ranks a
    :class:`pygrid.qcd.split_hop.SplitHop`, which reads the links of the halo ``link_halo``:
    the caller keeps them current).  None where a call has more to do than the launch (a
    read-only buffer that each call copies, a split lattice without ``link_halo``)."""
    plan = stencil.plan
    split = plan is not None and plan.nhalo
    if (split and link_halo is None) or not all(a.flags.writeable for a in (out, psi, uf, ub, diag)):
        return None
    st = _launch_state(stencil, Ls, out.shape[3], out.dtype)
    args = kernel_args(st, out, psi, uf, ub, coef, diag, use_diag, dterm, solve, mul)
    dag = _adjoint(coef)
    if split:
        _check_link_halo(link_halo, plan, ub)
        layout = _layout(links_c, Ls)
        last = _last(args)
        tables = ()
        if layout:
            args, tables = _with_links(args, links_c), links_c.tables()
        kernels = st.kernel(last, dag, False, layout), st.kernel(last, dag, True, layout)
        hop = split_hop(backend, st, args, *kernels, link_halo, tables, dag, kept=True)

        def run_split(out, psi, uf, ub, diag, _held=(args, links_c, link_halo)):
            hop()

        run_split.prepared = hop
        return run_split
    kernel = st.kernel(_last(args), dag)
    layout = _layout(links_c, Ls)
    if layout:
        args, kernel = _compressed_args(args, links_c, st), st.kernel(dag=dag, compressed=layout)
    else:
        args += (st.sites, st.none, st.none)
    # each outer site writes its own result: the threads may share out the blocks' pieces
    launch = backend.bind_kernel(kernel, *args, balance=True)
    n4 = st.n4
    again = launch.again

    # the launch holds its arguments weakly: the tables and coefficients, which caches may drop, and
    # the compressed links are held here
    held = args[5:] + (links_c,)

    def run(out, psi, uf, ub, diag, _tables=held):
        # the buffers it was bound with (the caller checked that they are these)
        again(n4)

    run.prepared = launch.prepared(n4)
    run.prepared.tables = held
    return run


class _LaunchState:
    """What every launch on one stencil, Ls, lane count and precision reuses: flattened tables,
    the kernels, the interior pieces, and the message and halo buffers (fresh ones would
    page-fault on every call)."""

    def __init__(self, stencil, Ls, nsimd, dtype, kernels=kernels_wilson, shared=True):
        # ``kernels``: the module that generates the kernels (a copy of an older one for an A/B
        # comparison in benchmarks/bench_dhop_kernels.py); ``shared``: the halo through the node's
        # shared memory where the plan allows it (pygrid.stencil.shared_halo)
        self.stencil = stencil
        self.shared = None
        self.n4 = stencil.neighbours.shape[1]
        self.kernels = kernels
        nbytes = field_bytes(self.n4, Ls, nsimd, dtype)
        # each threshold scaled from the 32 MiB of L3 it was measured with to what the threads reach
        threads = compute_threads()
        wide = kernels.wide_default()
        wide_5d = int(Ls) > 1 and wide
        # the 5D variants of the last step that take the register order on these fields
        self._register = frozenset(last for last in kernels.LAST
                                   if wide_5d and nbytes <= register_reach(last, dtype, threads))
        #: 4D fields past the plain hop's register reach take the tiled order on their compressed
        #: links in the wide structure too (:data:`TILED_4D`)
        self.tiled_4d = bool(TILED_4D and int(Ls) == 1 and wide
                             and nbytes > register_reach("plain", dtype, threads))
        # past the plain hop's register reach the tiled order streams (REGISTER_BYTES)
        self.far = bool(nbytes > scaled(FAR_BYTES["wide" if wide else "narrow"], threads)
                        or (wide_5d and "plain" not in self._register))
        self.nsimd, self.dtype, self.Ls = nsimd, dtype, int(Ls)
        self._kernels = {}
        # the tables read-only, whatever the stencil's flags: one numba specialisation per path
        self.tables = tuple(read_only(t.reshape(-1)) for t in (
            stencil.neighbours, stencil.perm, stencil.lanes, stencil.lane_xor)) + (self.n4, int(Ls))
        self.tile = _tile(Ls, nsimd, dtype)
        self.none = read_only(np.zeros(1, dtype))
        rdims = stencil.grid.rdims
        self.sites = read_only(site_order(rdims, Ls, nsimd, dtype, threads, self.far)
                               if len(rdims) == 4 and int(np.prod(rdims)) == self.n4 else stencil.sites)
        self.boundary = read_only(stencil.boundary)
        self._launchers = {}
        plan = stencil.plan
        if plan is None or not plan.nhalo:
            return
        self.pack = kernels.pack_kernel_for(nsimd, dtype, Ls)
        self.rows, self.mus, self.signs = face_tables(plan, dtype)
        shape = (int(Ls), 6, 2, nsimd)
        self.interior = read_only(stencil.interior)
        self.shared = shared_halo(plan, shape, dtype) if shared else None
        if self.shared is not None:
            self.pack = kernels.pack_kernel_for(nsimd, dtype, Ls, nt=SHARED_PACK_NT)
            # the pack's rows, directions and signs for each of its targets
            self.pack_runs = [(self.rows[a:b], self.mus[a:b], {d: s[a:b] for d, s in self.signs.items()})
                              for a, b, _ in self.shared.targets[0]]
            self.shared_halos = [read_only(h.reshape(-1)) for h in self.shared.halo]
            return
        packed, self.packed, self.halo = packed_arrays(plan, shape, dtype)
        self.packed_flat = packed.reshape(-1)
        self.halo_flat = self.halo.reshape(-1)
        inner = stencil.interior
        pieces = max(2, min(INTERIOR_CHUNKS, len(inner) // MIN_PIECE_SITES))
        step = max(1, -(-len(inner) // pieces))
        self.pieces = [read_only(inner[c:c + step]) for c in range(0, len(inner), step)]


    def kernel(self, last="plain", dag=False, halo=False, compressed=False):
        """The kernel of variant ``last`` of the last step (:data:`pygrid.qcd.kernels_wilson.LAST`;
        4D fields have the plain one), for the adjoint or not, with the halo branches or without, on
        compressed links (4D) or whole; looked up once here and compiled at its first launch."""
        key = (last, dag, halo, compressed)
        k = self._kernels.get(key)
        if k is None:
            # an older kernel module (bench_dhop_kernels.py's A/B) has no adjoint's kernels
            extra = {"dag": True} if dag else {}
            if compressed:
                if self.tiled_4d and compressed != kernels_wilson.BY_DIRECTION:  # two rows a link
                    extra["wide"] = False
                k = self.kernels.kernel_for(self.nsimd, self.dtype, halo=halo, compressed=compressed, **extra)
            else:
                name = "register" + ("" if last == "plain" else "_" + last) if (
                    not halo and last in self._register) else last
                k = self.kernels.kernel_for(self.nsimd, self.dtype, self.Ls, halo=halo, last=name, **extra)
            self._kernels[key] = k
        return k

    def launcher(self, backend, kernel, args):
        """``launch(osites, *args)``: ``backend.bind_kernel(kernel, *args)``, kept per backend and
        kernel.  Every launch of a kernel here has arguments of the same
        types (this state fixes its tables, :func:`run_unrolled` checks the buffers), and a lattice
        split over ranks launches each kernel about ten times a call: kept, a launch skips the
        lookup by the arguments' fingerprints, about 5 us of the kernel's 24."""
        hit = self._launchers.get((id(backend), kernel))
        if hit is None or hit[0] is not backend:
            hit = self._launchers[(id(backend), kernel)] = (backend, backend.bind_kernel(kernel, *args))
        return hit[1]


_states = {}


def _launch_state(stencil, Ls, nsimd, dtype, kernels=kernels_wilson):
    shared = current().shm_halo
    key = (id(stencil), Ls, nsimd, dtype, kernels.wide_default(), kernels.__name__, shared)
    st = _states.get(key)
    if st is None or st.stencil is not stencil:
        if len(_states) > 64:
            _states.clear()
        st = _states[key] = _LaunchState(stencil, Ls, nsimd, dtype, kernels, shared)
    return st
