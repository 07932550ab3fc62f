"""The Wilson Dirac operator and its even-odd (red-black) pieces, in Grid's conventions.

    Dhop psi(x) = -1/2 sum_mu [(1 - g_mu) U_mu(x) psi(x+mu) + (1 + g_mu) U_mu(x-mu)^dag psi(x-mu)]
    M = (4 + m) + Dhop,      Mdag = g5 M g5

Every hopping term is one kernel launch through :func:`pygrid.qcd.dslash.dhop`
(the generic kernel on every backend, or the hand-unrolled one on the CPU).
"""
from __future__ import annotations

from ..accelerator import get_backend
from ..cartesian import GridCartesian
from ..errors import ConformabilityError, GridError, SiteTypeError
from ..lattice import Lattice, convert, pick_checkerboard, set_checkerboard
from ..memory import ViewMode
from ..stencil import Stencil, wilson_displacements
from ..stencil.halo import exchange_rows
from ..tensors import sitetype as st
from . import kernels_wilson as kw
from ..accelerator.rows import host_rows
from .dslash import dhop

_FERMION = st.SpinColourVector()
_GAUGE = st.LorentzColourMatrix()


class WilsonFermion:
    """The Wilson Dirac operator ``M = (4 + mass) + Dhop`` on the gauge field ``U``.

    ``U`` is a ``LatticeGaugeField`` on a full 4D grid; the operator works in U's
    precision and on fields of U's grid (``M``, ``Mdag``, ``MdagM``, ``Dhop``) or
    of its red-black grid (``Meooe``, ``MeooeDag``, ``Mooee``, ``MooeeDag``,
    ``MooeeInv``, ``MooeeInvDag``, ``DhopEO``, ``DhopOE``).  Each method returns
    a new field, or writes into ``out=`` and returns it.
    """

    flops_per_site = kw.FLOPS_PER_SITE

    def __init__(self, U, mass):
        if not isinstance(U, Lattice) or U.site_type.levels != _GAUGE.levels:
            raise SiteTypeError(f"WilsonFermion needs a LatticeGaugeField, got {U!r}")
        g = U.grid
        if not isinstance(g, GridCartesian) or g.checkerboarded or g.nd != 4:
            raise GridError(f"WilsonFermion needs a gauge field on a full 4D grid, got {g}")
        self.U = U
        self.mass = float(mass)
        self.grid = g
        self.rb_grid = g.red_black
        self.precision = U.precision
        self.diag = 4.0 + self.mass
        self.stencil = Stencil(g, wilson_displacements())
        # even-odd: U on each checkerboard; stencil[cb] reads a source field of checkerboard cb
        self.U_cb = (pick_checkerboard(0, U), pick_checkerboard(1, U))
        self.stencil_cb = tuple(Stencil(self.rb_grid, wilson_displacements(), cb) for cb in (0, 1))
        self._link_halos = {}

    def __repr__(self):
        return f"WilsonFermion(mass={self.mass}, {self.precision}, {self.grid})"

    # ---- helpers ---------------------------------------------------------------
    def converted(self, precision, grid=None):
        """This operator with U converted to ``precision`` ('single'/'double'), optionally on another grid layout.

        ``op.converted('single')`` keeps the SIMD layout of U's grid; pass
        ``grid=pg.GridCartesian(dims, precision='single')`` for the native
        single-precision lane count (fields then live on that grid).
        """
        if grid is None or grid == self.grid:
            U = self.U if precision == self.precision else convert(self.U, precision)
        else:
            U = Lattice(grid, self.U.site_type, precision).from_numpy(self.U.to_numpy())
        return type(self)(U, self.mass)

    def _check(self, psi, rb, name):
        if not isinstance(psi, Lattice) or psi.site_type.levels != _FERMION.levels:
            raise SiteTypeError(f"{name} needs a LatticeFermion, got {psi!r}")
        want = self.rb_grid if rb else self.grid
        if psi.grid != want:
            where = "the red-black grid" if rb else "the full grid"
            raise ConformabilityError(f"{name}: {psi} is not on {where} of the operator, {want}")
        if psi.precision != self.precision:
            raise ConformabilityError(
                f"{name}: a {psi.precision}-precision field for a {self.precision}-precision operator; "
                f"use pg.convert(psi, {self.precision!r}) or op.converted({psi.precision!r})")

    def _out(self, psi, out, cb, name):
        if out is None:
            return Lattice(psi.grid, _FERMION, psi.precision, checkerboard=cb)
        self._check(out, psi.grid.checkerboarded, name + " (out)")
        if cb is not None:
            out.checkerboard = cb
        return out

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

    def _hop(self, psi, out, dag, alpha, name):
        """Full-grid hopping term (alpha != 0: plus alpha * psi)."""
        self._check(psi, False, name)
        res = self._out(psi, out, None, name)
        tgt = Lattice(self.grid, _FERMION, self.precision) if res is psi else res
        with psi.view(ViewMode.AcceleratorRead) as p, self.U.view(ViewMode.AcceleratorRead) as u, \
                tgt.view(ViewMode.AcceleratorWriteDiscard) as o:
            dhop(o, p, u, u, self.stencil, 1, -0.5, alpha, p if alpha else None, dag,
                 link_halo=self.link_halo(self.stencil, self.U, u))
        if tgt is not res:
            res.assign(tgt)
        return res

    def _hop_cb(self, psi, out, dag, name):
        """Red-black hopping term from psi's checkerboard to the other one."""
        self._check(psi, True, name)
        cb_in = psi.checkerboard
        cb_out = 1 - cb_in
        res = self._out(psi, out, cb_out, name)
        tgt = Lattice(self.rb_grid, _FERMION, self.precision, checkerboard=cb_out) if res is psi else res
        with psi.view(ViewMode.AcceleratorRead) as p, \
                self.U_cb[cb_out].view(ViewMode.AcceleratorRead) as uf, \
                self.U_cb[cb_in].view(ViewMode.AcceleratorRead) as ub, \
                tgt.view(ViewMode.AcceleratorWriteDiscard) as o:
            dhop(o, p, uf, ub, self.stencil_cb[cb_in], 1, -0.5, 0.0, None, dag,
                 link_halo=self.link_halo(self.stencil_cb[cb_in], self.U_cb[cb_in], ub))
        if tgt is not res:
            res.assign(tgt)
        return res

    # ---- full-grid operators ---------------------------------------------------
    def Dhop(self, psi, out=None, dag=False):
        """The hopping term (with Grid's -1/2); ``dag=True`` gives its adjoint."""
        return self._hop(psi, out, dag, 0.0, "Dhop")

    def DhopDag(self, psi, out=None):
        return self._hop(psi, out, True, 0.0, "DhopDag")

    def M(self, psi, out=None):
        """(4 + m) psi + Dhop psi, in one kernel."""
        return self._hop(psi, out, False, self.diag, "M")

    def Mdag(self, psi, out=None):
        """g5 M g5 psi = (4 + m) psi + Dhop^dag psi, in one kernel."""
        return self._hop(psi, out, True, self.diag, "Mdag")

    def MdagM(self, psi, out=None):
        tmp = self.M(psi)
        return self.Mdag(tmp, out=out)

    def Mdiag(self, psi, out=None):
        return self.Mooee(psi, out)

    # ---- even-odd pieces -------------------------------------------------------
    def Meooe(self, psi, out=None):
        """The off-diagonal block: Dhop from psi's checkerboard to the other one."""
        return self._hop_cb(psi, out, False, "Meooe")

    def MeooeDag(self, psi, out=None):
        return self._hop_cb(psi, out, True, "MeooeDag")

    def DhopEO(self, psi_odd, out=None, dag=False):
        """Even output from an odd field (Grid's DhopEO)."""
        if psi_odd.checkerboard != 1:
            raise ConformabilityError("DhopEO takes an odd (checkerboard 1) field")
        return self._hop_cb(psi_odd, out, dag, "DhopEO")

    def DhopOE(self, psi_even, out=None, dag=False):
        """Odd output from an even field (Grid's DhopOE)."""
        if psi_even.checkerboard != 0:
            raise ConformabilityError("DhopOE takes an even (checkerboard 0) field")
        return self._hop_cb(psi_even, out, dag, "DhopOE")

    def _scale(self, psi, out, factor, name):
        self._check(psi, psi.grid.checkerboarded, name)
        res = self._out(psi, out, psi.checkerboard, name)
        return res.assign(factor * psi)

    def Mooee(self, psi, out=None):
        """The diagonal block (4 + m)."""
        return self._scale(psi, out, self.diag, "Mooee")

    def MooeeDag(self, psi, out=None):
        return self._scale(psi, out, self.diag, "MooeeDag")

    def MooeeInv(self, psi, out=None):
        return self._scale(psi, out, 1.0 / self.diag, "MooeeInv")

    def MooeeInvDag(self, psi, out=None):
        return self._scale(psi, out, 1.0 / self.diag, "MooeeInvDag")

    # ---- fields ------------------------------------------------------------------
    def new_fermion(self, checkerboard=None):
        """A zero fermion on the full grid, or on the red-black grid with ``checkerboard``."""
        if checkerboard is None:
            return Lattice(self.grid, _FERMION, self.precision)
        return Lattice(self.rb_grid, _FERMION, self.precision, checkerboard=checkerboard)


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

    def M(self, psi, out=None):
        op = self.op
        if psi.checkerboard != self.cb:
            raise ConformabilityError(f"SchurDiagMooeeOperator works on checkerboard {self.cb}, got {psi.checkerboard}")
        t = op.Meooe(psi)
        t = op.MooeeInv(t, out=t)
        t2 = op.Meooe(t)
        d = op.Mooee(psi, out=out)
        return d.assign(d - t2)

    def Mdag(self, psi, out=None):
        op = self.op
        if psi.checkerboard != self.cb:
            raise ConformabilityError(f"SchurDiagMooeeOperator works on checkerboard {self.cb}, got {psi.checkerboard}")
        t = op.MeooeDag(psi)
        t = op.MooeeInvDag(t, out=t)
        t2 = op.MeooeDag(t)
        d = op.MooeeDag(psi, out=out)
        return d.assign(d - t2)

    def MdagM(self, psi, out=None):
        return self.Mdag(self.M(psi), out=out)

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
        res = out if out is not None else op.new_fermion()
        set_checkerboard(res, x_e)
        set_checkerboard(res, x_cb)
        return res
