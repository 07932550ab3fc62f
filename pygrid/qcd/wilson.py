"""The Wilson Dirac operator and its even-odd (red-black) pieces, in Grid's conventions.

    Dhop psi(x) = -1/2 sum_mu [(1 - g_mu) U_mu(x) psi(x+mu) + (1 + g_mu) U_mu(x-mu)^dag psi(x-mu)]
    M = (4 + m) + Dhop,      Mdag = g5 M g5

Every hopping term is one kernel launch through :func:`pygrid.qcd.dslash.dhop` (the generic
kernel on every backend, or the hand-unrolled one on the CPU), on the fields' views opened by
:func:`pygrid.qcd.hop.hop`.
"""
from __future__ import annotations

import numpy as np

from .. import config as _config
from ..accelerator import backends as _backends, get_backend
from ..accelerator.host import keep
from ..accelerator.rows import host_rows
from ..cartesian import GridCartesian
from ..config import current
from ..errors import ConformabilityError, GridError, SiteTypeError
from ..lattice import Lattice, pick_checkerboard, set_checkerboard
from ..memory import ViewMode
from ..stencil import Stencil, wilson_displacements
from ..stencil.halo import exchange_rows
from ..tensors import sitetype as st
from . import compressed_links as cl, dslash, kernels_wilson as kw
from .boundary import FermionBoundary
from .fermion import FermionOperator, committing, fixed
from .hop import MAX_CALLS, HopPair, again, hop as hop_fields

_GAUGE = st.LorentzColourMatrix()


class WilsonFermion(FermionOperator):
    """The Wilson Dirac operator ``M = (4 + mass) + Dhop`` on the gauge field ``U``.

    ``U`` is a ``LatticeGaugeField`` on a full 4D grid; the operator works in U's
    precision.  ``boundary_phases`` (4 complex numbers of modulus 1, default
    periodic; ``[1, 1, 1, -1]`` is antiperiodic in time) and ``twists`` (4 reals,
    Grid's ``twist_n_2pi_L``) set the fermion boundary conditions
    (:mod:`pygrid.qcd.boundary`).  The even-odd pieces, and every hop when boundary
    conditions are set, read links copied from U at construction: make a new
    operator after changing U.  The operator acts on fields of U's grid (``M``, ``Mdag``,
    ``MdagM``, ``Dhop``) or of its red-black grid (``Meooe``, ``MeooeDag``, ``Mooee``,
    ``MooeeDag``, ``MooeeInv``, ``MooeeInvDag``, ``DhopEO``, ``DhopOE``).  Each method returns
    a new field, or writes into ``out=`` and returns it.

    ``compress_links``: whether the hops read each link as the first two rows of an SU(3) matrix
    and rebuild the third (``compressed_links.compress_links``).  None (the default): as the
    configuration says (``--compress-links``, ``--no-compress-links``; by default the
    hand-unrolled kernel, openmp and numpy backends, on fields larger than the host's caches);
    True: every kernel on any fields (the generic one too, every backend's; on a lattice split over
    ranks with the halo's links compressed too); False: never.  The operator then
    keeps that copy of its links, two thirds of their bytes, on the host (and, for the generic
    kernel on a device, a copy on the device), outside the device memory cache, and makes it again
    when the links are written.  Links that are not SU(3) times a phase to their precision are read
    whole.  Where the hand-unrolled kernel's tiled order (AVX2's) reads them whole, it reads a copy
    stored direction by direction (``compressed_links.LinksByDirection``), kept the same way.
    """

    flops_per_site = kw.FLOPS_PER_SITE

    mass = fixed("mass", "The bare mass m.")
    diag = fixed("diag", "The diagonal term 4 + m.")

    def __init__(self, U: Lattice, mass: float, boundary_phases=None, twists=None,
                 compress_links: bool | None = None) -> None:
        if not isinstance(U, Lattice) or U.site_type.levels != _GAUGE.levels:
            raise SiteTypeError(f"WilsonFermion needs a LatticeGaugeField, got {U!r}")
        if compress_links not in (None, True, False):
            raise GridError(f"compress_links must be None, True or False, got {compress_links!r}")
        g = U.grid
        if not isinstance(g, GridCartesian) or g.checkerboarded or g.nd != 4:
            raise GridError(f"WilsonFermion needs a gauge field on a full 4D grid, got {g}")
        self.U = U
        self.mass = float(mass)
        self.boundary = FermionBoundary(boundary_phases, twists, g.nd)
        self.grid = g
        self.rb_grid = g.red_black
        self.precision = U.precision
        self.diag = 4.0 + self.mass
        # the links the hops read: U itself, or U with the boundary phases and twists applied
        self.links = self.boundary.apply(U)
        self.stencil = Stencil(g, wilson_displacements())
        # even-odd: the links on each checkerboard; stencil[cb] reads a source field of checkerboard cb
        self.U_cb = (pick_checkerboard(0, self.links), pick_checkerboard(1, self.links))
        self.stencil_cb = tuple(Stencil(self.rb_grid, wilson_displacements(), cb) for cb in (0, 1))
        self._link_halos = {}
        self._hop_calls = {}   # pygrid.qcd.hop: the calls on the same fields again
        self.compress_links = compress_links
        # whether the full-grid and the even-odd hops would read compressed links (asked for, or their
        # fields' size and the machine), and the compressed links made, per hop (None: the full grid,
        # or the source checkerboard), with the links' versions they were made from
        always = compress_links is None and current().compress_links == "always"
        self._compress = tuple(
            bool(compress_links or always or compress_links is None
                 and cl.compression_pays(s.neighbours.shape[1], g.nsimd, U.real_dtype, links=links))
            for s, links in ((self.stencil, 4), (self.stencil_cb[0], 8)))
        self._links_c = {}
        self._kinds = [(None, None, 0), (None, None, 0)]

    def __repr__(self):
        return f"WilsonFermion(mass={self.mass}{self.boundary.describe()}, {self.precision}, {self.grid})"

    def _with_gauge(self, U):
        return type(self)(U, self.mass, **self.boundary.kwargs(), compress_links=self.compress_links)

    def link_halo(self, stencil, links, buf):
        """The links of ``links`` (its open view ``buf``) at the backward neighbours on other ranks.

        Exchanged once and kept until the field is written again; None on one rank.
        """
        if not stencil.nhalo:
            return None
        version = links._manager.write_count(links._key)
        key = (id(stencil), links._key)
        hit = self._link_halos.get(key)
        if hit is None or hit[0] != version or hit[1].dtype != buf.dtype:
            backend = get_backend()
            hit = self._link_halos[key] = (version, exchange_rows(
                stencil.plan, buf, lambda a, rows: host_rows(backend, a, rows)))
        return hit[1]

    def link_halo_guard(self, stencil, links):
        """``guard()``: whether ``links`` are unwritten since now, so that their halo for
        ``stencil`` (:meth:`link_halo`) is still the one kept (a kept call on a split lattice
        reads it)."""
        manager, key = links._manager, links._key
        version = manager.write_count(key)
        return lambda: manager.write_count(key) == version

    def _copy_kind(self, cb_in):
        """Which copy of its links the hop from ``cb_in`` (None: the full grid) reads under the
        current backend and configuration: 2, compressed to two rows; ``kw.BY_DIRECTION``, whole
        but stored direction by direction (the tiled order on fields in the caches); 0, the links
        themselves.  Kept for the last configuration and backend, compared by identity (a frozen
        Config's hash takes microseconds), as every Dirac call asks."""
        i = cb_in is not None
        cfg, backend, kind = self._kinds[i]
        if cfg is not _config._current or backend is not _backends._current:
            cfg, backend = _config._current, _backends._current
            kind = self._decide_copy(i)
            self._kinds[i] = (cfg, backend, kind)
        return kind

    def _decide_copy(self, cb):
        generic = dslash.variant() != "unroll"
        if self._compress[cb]:
            mode = current().compress_links
            asked = self.compress_links or self.compress_links is None and mode == "always"
            # the generic kernel only when asked: on the CPU (openmp, the sycl CPU device) it ran no
            # faster so (docs/performance.md, "Links read compressed")
            if not (self.compress_links is None and mode == "never") and (asked or not generic):
                return 2
        # the tiled order (AVX2) reads each direction's links in a pass of its own
        return 0 if generic or kw.wide_default() else kw.BY_DIRECTION

    def _compressed(self, cb_in):
        """The copy of its links the hop from checkerboard ``cb_in`` (None: the full-grid hop) reads
        (:meth:`_copy_kind`): :class:`pygrid.qcd.compressed_links.CompressedLinks` or
        :class:`~pygrid.qcd.compressed_links.LinksByDirection`, or None where it reads the links
        themselves.  For the generic kernel on a lattice split over ranks the backward links hold the
        halo's after the local ones.  Made again when the links were written since (a kept call bound
        to the old ones is dropped)."""
        kind = self._copy_kind(cb_in)
        if not kind:
            return None
        uf, ub = (self.links, self.links) if cb_in is None else (self.U_cb[1 - cb_in], self.U_cb[cb_in])
        stencil = self.stencil if cb_in is None else self.stencil_cb[cb_in]
        halo = bool(kind == 2 and dslash.variant() != "unroll" and stencil.nhalo)
        version = (uf._manager.write_count(uf._key), ub._manager.write_count(ub._key), halo, kind)
        hit = self._links_c.get(cb_in)
        if hit is not None and hit[0] == version:
            return hit[1]
        if hit is not None:
            self._hop_calls.clear()
        # the hops from the two checkerboards read the same two link fields, swapped: one copy
        mirror = None if cb_in is None or halo else self._links_c.get(1 - cb_in)
        if mirror is not None and mirror[0] == (version[1], version[0], halo, kind):
            made = None if mirror[1] is None else mirror[1].swapped()
        else:
            make = cl.CompressedLinks.of if kind == 2 else cl.LinksByDirection.of

            def of(a, b):
                if halo:  # the halo's links after the local ones, as the generic kernel reads them
                    b = np.concatenate([b, self.link_halo(stencil, ub, b)])
                return make(b if ub is uf else a, b)

            with uf.view(ViewMode.CpuRead) as a:
                if ub is uf:
                    made = of(a, a)
                else:
                    with ub.view(ViewMode.CpuRead) as b:
                        made = of(a, b)
        self._links_c[cb_in] = (version, made)
        return made

    def reads_compressed_links(self, cb_in=None) -> bool:
        """Whether the full-grid hop (``cb_in`` 0 or 1: the even-odd hop from that checkerboard)
        reads the links compressed under the current backend and configuration (see the class's
        documentation)."""
        made = self._compressed(cb_in)
        return made is not None and made.rows == 2

    # ---- kernels -----------------------------------------------------------------
    def _hop(self, psi, out, dag, alpha, name):
        """Full-grid hopping term (alpha != 0: plus alpha * psi)."""
        links = self.links
        links_c = self._compressed(None)
        if out is not None and out is not psi and again(
                self._hop_calls, (dag, alpha, id(psi), id(out)),
                (psi, links, links, out) if alpha == 0.0 else (psi, links, links, out, psi)):
            return out
        self._check(psi, False, name)
        res = self._result(psi, out, None, name)

        def hop(src, tgt):
            hop_fields(self._hop_calls, src, links, links, tgt, self.stencil, 1, -0.5, alpha, src, dag,
                       halo_of=self, key=(dag, alpha, id(src), id(tgt)), links_c=links_c)

        return self._final_hop(psi, res, None, hop)

    def _hop_cb(self, psi, tgt, dag, kept_only=False):
        """tgt's buffer = the hopping term from psi's checkerboard to the other one (tgt does not alias
        psi; its checkerboard is the caller's).  ``kept_only``: see :func:`pygrid.qcd.hop.hop`."""
        cb_in = psi._cb  # the checkerboard property's value, without its call
        links_c = self._compressed(cb_in)
        return hop_fields(self._hop_calls, psi, self.U_cb[1 - cb_in], self.U_cb[cb_in], tgt,
                          self.stencil_cb[cb_in], dag=dag, halo_of=self, kept_only=kept_only,
                          key=("cb", cb_in, dag, id(psi), id(tgt)), links_c=links_c)

    # ---- full-grid operators ---------------------------------------------------
    def Dhop(self, psi: Lattice, out: Lattice | None = None, dag: bool = False) -> Lattice:
        """The hopping term (with Grid's -1/2); ``dag=True`` gives its adjoint."""
        # the kept call looked up here, not in _hop: a Python function costs about 0.3 us of a 40 us
        # call at 8^4, run with the caches full of the kernel's fields
        # a copy of the links checked against the links (dropping the kept calls where they changed);
        # where the hop reads none, _copy_kind's check inline (0.7 us of a 40 us call at 8^4 called)
        cfg, backend, kind = self._kinds[0]
        if kind or cfg is not _config._current or backend is not _backends._current:
            self._compressed(None)
        call = self._hop_calls.get((dag, 0.0, id(psi), id(out)))
        if call is not None and out is not psi and call.run((psi, self.links, self.links, out)):
            return out
        return self._hop(psi, out, dag, 0.0, "DhopDag" if dag else "Dhop")

    def M(self, psi: Lattice, out: Lattice | None = None) -> Lattice:
        """(4 + m) psi + Dhop psi, in one kernel."""
        return self._hop(psi, out, False, self.diag, "M")

    def Mdag(self, psi: Lattice, out: Lattice | None = None) -> Lattice:
        """g5 M g5 psi = (4 + m) psi + Dhop^dag psi, in one kernel."""
        return self._hop(psi, out, True, self.diag, "Mdag")

    # ---- even-odd pieces -------------------------------------------------------
    def Meooe(self, psi: Lattice, out: Lattice | None = None) -> Lattice:
        """The off-diagonal block: Dhop from psi's checkerboard to the other one."""
        return self._dhop_cb(psi, out, False, "Meooe")

    def MeooeDag(self, psi: Lattice, out: Lattice | None = None) -> Lattice:
        return self._dhop_cb(psi, out, True, "MeooeDag")

    def _scale(self, psi, out, factor, name):
        self._check(psi, psi.grid.checkerboarded, name)
        res = self._result(psi, out, psi.checkerboard, name)
        with committing(res, psi.checkerboard):
            return res.assign(factor * psi)

    def Mooee(self, psi: Lattice, out: Lattice | None = None) -> Lattice:
        """The diagonal block (4 + m)."""
        return self._scale(psi, out, self.diag, "Mooee")

    def MooeeDag(self, psi: Lattice, out: Lattice | None = None) -> Lattice:
        return self._scale(psi, out, self.diag, "MooeeDag")

    def MooeeInv(self, psi: Lattice, out: Lattice | None = None) -> Lattice:
        return self._scale(psi, out, 1.0 / self.diag, "MooeeInv")

    def _mooee_minus(self, psi: Lattice, t: Lattice, res: Lattice, dag: bool) -> Lattice:
        """res = Mooee psi - t in one kernel (MooeeDag is Mooee here): how a Schur operator's application
        ends."""
        return res.assign(self.diag * psi - t)

    def MooeeInvDag(self, psi: Lattice, out: Lattice | None = None) -> Lattice:
        return self._scale(psi, out, 1.0 / self.diag, "MooeeInvDag")

    def _mpc_finish(self, t: Lattice, psi: Lattice, res: Lattice, dag: bool) -> Lattice:
        """res = Mooee psi - Meooe MooeeInv t (the daggered pieces with ``dag``) in one kernel: how a
        Schur operator's application ends.  The diagonal is the scalar 4 + m, so its inverse folds
        into the hop's coefficient and Mooee psi into the kernel's diagonal term; with the hop
        before it, the Schur operator is two kernels where it was four."""
        cb_in, diag = t._cb, self.diag
        links_c = self._compressed(cb_in)
        return hop_fields(self._hop_calls, t, self.U_cb[1 - cb_in], self.U_cb[cb_in], res,
                          self.stencil_cb[cb_in], 1, 0.5 / diag, diag, psi, dag, halo_of=self,
                          key=("finish", cb_in, dag, diag, id(t), id(res), id(psi)), links_c=links_c)

    def _mpc_kept(self, psi: Lattice, t: Lattice, res: Lattice, dag: bool) -> HopPair | None:
        """A Schur application's two hops (``Meooe`` or ``MeooeDag`` of psi into t, then
        :meth:`_mpc_finish` into res) as the last one on these fields kept them, to run again together
        (:class:`pygrid.qcd.hop.HopPair`); None where either was not kept or reads a copy of the links
        (which each call checks against the links)."""
        cb = psi._cb
        if cb is None or self.diag == 0.0 or self._copy_kind(cb):
            return None
        calls = self._hop_calls
        first = calls.get(("cb", cb, dag, id(psi), id(t)))
        second = calls.get(("finish", 1 - cb, dag, self.diag, id(t), id(res), id(psi)))
        if first is None or second is None:
            return None
        U = self.U_cb
        return HopPair(first, second, (U[1 - cb], U[cb]), (U[cb], U[1 - cb]), t, cb)


class SchurDiagMooeeOperator:
    """Grid's SchurDiagMooeeOperator: the Schur complement on one checkerboard.

        Mpc = Mooee - Meooe MooeeInv Meooe          (on checkerboard ``cb``, default odd)
        Mpc^dag = MooeeDag - MeooeDag MooeeInvDag MeooeDag

    ``M``/``Mdag``/``MdagM`` act on red-black fields of checkerboard ``cb``.
    A red-black solve of ``M x = b``:

        src = op.prepare_source(b)           # b_o - Meooe MooeeInv b_e
        x_o = <solve op.M x_o = src>          # e.g. CG on op.MdagM with op.Mdag(src)
        x = op.reconstruct(b, x_o)           # x_e = MooeeInv (b_e - Meooe x_o)
    """

    def __init__(self, fermion_op, cb=1):
        if cb not in (0, 1):
            raise GridError(f"checkerboard must be 0 or 1, got {cb!r}")
        self.op = fermion_op
        self.cb = cb
        self.grid = fermion_op.rb_grid
        self.precision = fermion_op.precision
        self._scratch_fields = {}
        self._kept = {}   # (dag, id(psi), id(out)) -> the fermion operator's HopPair (_mpc_kept)

    def _scratch(self, slot, cb):
        """A kept red-black field for an intermediate (see FermionOperator._scratch)."""
        f = self._scratch_fields.get(slot)
        if f is None:
            f = self._scratch_fields[slot] = self.op.new_fermion(cb)
        if f._cb != cb:
            f.checkerboard = cb
        return f

    def _check_in(self, psi, out, name):
        if psi._cb != self.cb:
            raise ConformabilityError(
                f"SchurDiagMooeeOperator works on checkerboard {self.cb}, got {psi.checkerboard}"
            )
        check = getattr(self.op, "_check", None)
        if out is not None and check is not None:
            check(out, True, f"SchurDiagMooeeOperator.{name} (out)")

    def _apply(self, psi, out, name, hop, inv, diag, dag):
        """diag psi - hop inv hop psi; out is written by the last kernel alone."""
        self._check_in(psi, out, name)
        scratch = self._scratch("hop", 1 - self.cb)
        res = self.new_fermion() if out is None else out
        # an operator whose diagonal is a scalar ends in one kernel after the first hop (optional hook)
        fused = getattr(self.op, "_mpc_finish", None)
        if fused is not None:
            t = hop(psi, out=scratch)
            with committing(res, self.cb):
                fused(t, psi, res, dag)
            # kept for the next application on the same fields (M and Mdag look it up first)
            kept = None if out is None else getattr(self.op, "_mpc_kept", None)
            pair = None if kept is None else kept(psi, t, res, dag)
            if pair is not None:
                keep(self._kept, (dag, id(psi), id(res)), pair, (psi, res), MAX_CALLS)
            return res
        # an operator whose diagonal is not a scalar may end in the second hop's kernel, which reads
        # psi's other slices of a site after writing some of res's: not in place (optional)
        end = getattr(self.op, "_mpc_end", None)
        if res is psi:
            end = None
        # and start with its inverse in the first hop's kernel (optional); the intermediate it hands
        # to its own end may take another form (for_end)
        start = getattr(self.op, "_mpc_start", None)
        if start is not None:
            t = start(psi, scratch, dag, for_end=end is not None)
        else:
            t = hop(psi, out=scratch)
            inv(t, out=t)
        if end is not None:
            with committing(res, self.cb):
                return end(t, psi, res, dag, from_start=start is not None)
        t2 = hop(t, out=self._scratch("hop2", self.cb))
        # the operators of pygrid.qcd do diag psi - t2 in one pass over the fields (an optional hook)
        finish = getattr(self.op, "_mooee_minus", None)
        if finish is not None:
            with committing(res, self.cb):
                return finish(psi, t2, res, dag)
        d = diag(psi, out=self._scratch("diag", self.cb))
        with committing(res, self.cb):
            return res.assign(d - t2)

    def M(self, psi, out=None):
        kept = self._kept.get((False, id(psi), id(out)))
        if kept is not None and kept.run(psi, out):
            return out
        op = self.op
        return self._apply(psi, out, "M", op.Meooe, op.MooeeInv, op.Mooee, False)

    def Mdag(self, psi, out=None):
        kept = self._kept.get((True, id(psi), id(out)))
        if kept is not None and kept.run(psi, out):
            return out
        op = self.op
        return self._apply(psi, out, "Mdag", op.MeooeDag, op.MooeeInvDag, op.MooeeDag, True)

    def MdagM(self, psi, out=None):
        return self.Mdag(self.M(psi, out=self._scratch("MdagM", self.cb)), out=out)

    HermOp = MdagM

    def new_fermion(self):
        return self.op.new_fermion(self.cb)

    def prepare_source(self, b):
        """The Schur source on checkerboard cb: b_cb - Meooe MooeeInv b_other (b a full-grid fermion)."""
        op = self.op
        b_o = pick_checkerboard(self.cb, b)
        b_e = pick_checkerboard(1 - self.cb, b)
        t = op.Meooe(op.MooeeInv(b_e))
        return b_o.assign(b_o - t)

    def reconstruct(self, b, x_cb, out=None):
        """The full solution from the checkerboard-cb part: x_other = MooeeInv (b_other - Meooe x_cb)."""
        op = self.op
        b_e = pick_checkerboard(1 - self.cb, b)
        t = op.Meooe(x_cb)
        x_e = op.MooeeInv(b_e.assign(b_e - t))
        # both halves into a new field: out, if given, is then written by one copy
        x = op.new_fermion()
        set_checkerboard(x, x_e)
        set_checkerboard(x, x_cb)
        return x if out is None else out.assign(x)
