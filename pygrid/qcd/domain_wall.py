"""Domain-wall fermions: Shamir (``DomainWallFermion``) and Möbius (``MobiusFermion``), Grid's Cayley form.

Fields live on the 5D grid ``grid5 = pg.GridCartesian5D(U.grid, Ls)`` (dimensions
(s, x, y, z, t), s fastest in memory, ``to_numpy()`` indexed
``[s, x, y, z, t, spin, colour]``) or its red-black grid ``grid5_rb`` (the 4D
checkerboard; s is not checkerboarded).  The gauge field is the 4D one, shared by
all s slices.

Conventions (Grid's ``CayleyFermion5D``; chiral basis, ``g5 = diag(1, 1, -1, -1)``,
``P_+- = (1 +- g5)/2``, ``M5`` entered positive, e.g. 1.8)
----------------------------------------------------------------------------

The fifth-dimension hop ``S`` (a matrix in s and spin only, the same on every 4D site)::

    (S psi)_s = P_- psi_{s+1} + P_+ psi_{s-1}        for 0 < s < Ls-1
    (S psi)_{Ls-1} = P_- (-m psi_0) + P_+ psi_{Ls-2}
    (S psi)_0      = P_- psi_1      + P_+ (-m psi_{Ls-1})

and ``S^dag`` its adjoint (the transpose in s on each chirality).  With the 4D
Wilson operator at mass ``-M5``, ``Dw = (4 - M5) + Dhop`` (Dhop with Grid's -1/2,
the same on every slice)::

    M    = Dw (b + c S) + (1 - S)                 (Möbius, Grid's Cayley M)
    Mdag = (b + c S^dag) Dw^dag + (1 - S^dag)     (the true adjoint; Dw^dag = g5 Dw g5)
    M5D  = 1 - S   (Grid's M5D),   M5Ddag = 1 - S^dag

Equivalently ``M = (b Dw + 1) - (1 - c Dw) S``, the standard Möbius operator of
Brower, Neff and Orginos with uniform b_s = b, c_s = c (Grid's ``MobiusFermion``
with the tanh approximation: bs = (bpc + bmc)/2 = b, cs = (bpc - bmc)/2 = c).
With b = 1, c = 0 this is Shamir exactly (``DomainWallFermion``)::

    (M psi)_s = [(5 - M5) + Dhop] psi_s - P_- psi_{s+1} - P_+ psi_{s-1},
    with -P_- psi_{Ls} -> +m P_- psi_0 at s = Ls-1 and -P_+ psi_{-1} -> +m P_+ psi_{Ls-1} at s = 0.

Even-odd (Cayley) pieces, with ``bee = b (4 - M5) + 1`` and ``cee = 1 - c (4 - M5)``::

    Mooee = bee - cee S           MooeeDag = bee - cee S^dag
    Meooe = Dhop_eo (b + c S)     MeooeDag = (b + c S^dag) Dhop_eo^dag
    MooeeInv = Mooee^{-1}         MooeeInvDag = (MooeeDag)^{-1}

so that ``M = Mooee + Meooe``.  ``Mooee`` is block diagonal in the 4D site and the
chirality; on each chirality it is a cyclic bidiagonal Ls x Ls real matrix,
the same on every site.  Shamir is g5 R5-Hermitian (``g5 R5 M g5 R5 = Mdag``,
R5 reflects s -> Ls-1-s); Möbius with c != 0 is not (``Dw`` and ``S`` do not
commute), but ``Mdag`` is its adjoint for all b, c.

Physical 4D quark fields (Grid's ``ExportPhysicalFermionSolution`` /
``ImportPhysicalFermionSource``)::

    physical_field(psi5)        = P_- psi_0 + P_+ psi_{Ls-1}
    import_physical_source(q)   = D_minus eta,  eta_0 = P_+ q, eta_{Ls-1} = P_- q, other slices 0,
                                  D_minus = 1 - c Dw   (the identity for Shamir)

With these conventions the physical propagator is the (contact-term subtracted)
overlap one: ``physical_field(M^{-1} import_physical_source(q)) = (1 - m)^{-1}
(D_eff^{-1} - 1) q`` with ``D_eff = (1 + m)/2 + (1 - m)/2 g5 eps_Ls(H)``,
``H = g5 (b + c) Dw / (2 + (b - c) Dw)`` and ``eps_Ls(x) = ((1+x)^Ls - (1-x)^Ls) /
((1+x)^Ls + (1-x)^Ls)`` (checked on the free constant mode in
tests/test_domain_wall.py).

Every s matrix is cyclic bidiagonal per chirality (:mod:`pygrid.qcd.fifth_dim`):
``Mooee``, ``M5D`` and ``b + c S`` are applied by an O(Ls) multiply
(:func:`pygrid.qcd.dslash.bidiag_multiply`) and ``MooeeInv`` by two O(Ls)
sweeps per site (:func:`pygrid.qcd.dslash.bidiag_apply`); both are generated
for every backend from :mod:`pygrid.qcd.kernels_generic`.
Only real b, c are supported (Grid's zMobius with complex per-slice
coefficients is not).
"""
from __future__ import annotations

import contextlib

import numpy as np

from ..cartesian import GridCartesian5D
from ..errors import ConformabilityError, GridError, SiteTypeError
from ..lattice import Lattice
from ..memory import ViewMode
from ..tensors.constant import Gamma
from . import kernels_wilson as kw
from .dslash import bidiag_apply, bidiag_multiply
from .fermion import FERMION, FermionOperator, committing, fixed
from .fifth_dim import (
    bidiag_solver,
    bidiag_structure,
    dagger,
    fifth_dim_hop_matrices,
    s_apply,
)
from .hop import hop as hop_fields
from .wilson import WilsonFermion

__all__ = ["MobiusFermion", "DomainWallFermion", "s_apply", "bidiag_apply", "bidiag_multiply",
           "bidiag_solver", "bidiag_structure", "fifth_dim_hop_matrices"]


def _check_chiral_basis():
    g5 = np.asarray(Gamma.Five.array())
    if not np.allclose(g5, np.diag([1, 1, -1, -1])):
        raise SiteTypeError("domain wall assumes Grid's chiral basis, g5 = diag(1, 1, -1, -1)")


_check_chiral_basis()

# ---- the operator -----------------------------------------------------------------------------

class MobiusFermion(FermionOperator):
    """The Möbius domain-wall operator in Grid's Cayley form (see the module docstring).

    ``MobiusFermion(U, Ls, mass, M5, b, c, boundary_phases=None, twists=None)``; ``U`` a
    ``LatticeGaugeField`` on a full 4D grid; the boundary conditions are those of the 4D
    Wilson operator (:class:`pygrid.qcd.WilsonFermion`, :mod:`pygrid.qcd.boundary`), the same
    on every s slice.  Attributes: ``grid4`` (U's grid), ``grid5`` / ``grid`` (the 5D
    grid), ``grid5_rb`` / ``rb_grid`` (its red-black grid), ``Ls``, ``mass``,
    ``M5``, ``b``, ``c``, ``boundary``, ``precision``.  Every method takes a 5D fermion and
    returns a new field, or writes into ``out=`` and returns it.
    """

    flops_per_site = kw.FLOPS_PER_SITE
    fermion_label = "5D LatticeFermion"

    Ls = fixed("Ls", "The extent of the fifth dimension.")
    mass = fixed("mass", "The quark mass m_f of the fifth dimension's boundary.")
    M5 = fixed("M5", "The domain-wall height.")
    b = fixed("b", "Mobius b.")
    c = fixed("c", "Mobius c.")

    def __init__(self, U: Lattice, Ls: int, mass: float, M5: float, b: float, c: float,
                 boundary_phases=None, twists=None) -> None:
        if not isinstance(Ls, (int, np.integer)) or Ls < 1:
            raise GridError(f"Ls must be a positive integer, got {Ls!r}")
        for name, v in (("mass", mass), ("M5", M5), ("b", b), ("c", c)):
            if isinstance(v, complex) or not np.isreal(v):
                raise TypeError(f"{type(self).__name__}: {name} must be real, got {v!r}")
        # the 4D Wilson operator at mass -M5: checks U and holds the stencils and checkerboarded links
        self._w = WilsonFermion(U, -float(M5), boundary_phases, twists)
        self.boundary = self._w.boundary
        self.U = U
        self.Ls = int(Ls)
        self.mass = float(mass)
        self.M5 = float(M5)
        self.b = float(b)
        self.c = float(c)
        self.precision = U.precision
        self.grid4 = U.grid
        self.grid5 = GridCartesian5D(U.grid, self.Ls)
        self.grid5_rb = self.grid5.red_black
        self.grid = self.grid5
        self.rb_grid = self.grid5_rb
        self._dtype = np.float64 if self.precision == "double" else np.float32
        Ls = self.Ls
        S = fifth_dim_hop_matrices(Ls, self.mass)
        one = np.broadcast_to(np.eye(Ls), (2, Ls, Ls))
        a = 4.0 - self.M5
        self.bee = self.b * a + 1.0
        self.cee = 1.0 - self.c * a
        mats = {
            "S": S,
            "one": one,
            "bcS": self.b * one + self.c * S,          # b + c S
            "M5D": one - S,                            # 1 - S
            "Mooee": self.bee * one - self.cee * S,    # bee - cee S
        }
        # all of M but the 4D hop: M = -1/2 hop (b + c S) + Ms, so that M ends with the hop kernel
        mats["Ms"] = a * mats["bcS"] + mats["M5D"]
        mats["MooeeInv"] = np.linalg.inv(mats["Mooee"])
        for k in list(mats):
            mats[k + "Dag"] = dagger(mats[k])
        self._mats = {k: np.ascontiguousarray(v, dtype=self._dtype) for k, v in mats.items()}
        # MooeeInv as an O(Ls) sweep per site instead of the dense Ls x Ls inverse
        def cast(tables):
            return None if tables is None else tuple(
                t if t.dtype.kind == "i" else t.astype(self._dtype) for t in tables)

        self._sweeps = {"MooeeInv": cast(bidiag_solver(mats["Mooee"])),
                        "MooeeInvDag": cast(bidiag_solver(mats["MooeeDag"]))}
        # and the other s matrices (all cyclic bidiagonal) as O(Ls) multiplies
        self._banded = {k: cast(bidiag_structure(mats[k]))
                        for k in ("Mooee", "MooeeDag", "M5D", "M5DDag", "bcS", "bcSDag", "Ms", "MsDag")}
        # -1 in the sweep order of Mooee (and of its adjoint), for Mooee psi - t in one kernel
        for k in ("Mooee", "MooeeDag"):
            self._mats["minus" + k] = -self._mats["one"]
            band = self._banded[k]
            self._banded["minus" + k] = None if band is None else cast(
                (band[0], -np.ones(2), np.zeros(2), np.zeros(2)))
        self._trivial_bc = (self.b == 1.0 and self.c == 0.0)
        # a Schur operator's start, MooeeInv Meooe psi, as one hop kernel that solves in s before it
        # writes, and its end, Mooee psi - Meooe t, as one with Mooee on its diagonal term; Mobius's
        # b + c S runs as a pass of its own before the hop (Meooe), or in the hop's kernel after it
        # (MeooeDag)
        bands = [self._banded[k] for k in ("Mooee", "MooeeDag")]
        if not self._trivial_bc:
            bands += [self._banded[k] for k in ("bcS", "bcSDag")]
        if any(t is None for t in bands):
            self._mpc_end = None
        if any(t is None for t in bands + [self._sweeps["MooeeInv"], self._sweeps["MooeeInvDag"]]):
            self._mpc_start = None

    def __repr__(self):
        return (
            f"{type(self).__name__}(Ls={self.Ls}, mass={self.mass}, M5={self.M5}, b={self.b}, c={self.c}"
            f"{self.boundary.describe()}, {self.precision}, {self.grid4})"
        )

    # ---- construction helpers ------------------------------------------------------
    def _with_gauge(self, U):
        return MobiusFermion(U, self.Ls, self.mass, self.M5, self.b, self.c, **self.boundary.kwargs())

    def _grid_note(self):
        return f" (the operator's 5D grid, Ls={self.Ls})"

    def new_fermion4d(self) -> Lattice:
        """A zero 4D fermion on U's grid (for physical fields)."""
        return Lattice(self.grid4, FERMION, self.precision)

    # ---- building blocks on raw buffers ------------------------------------------
    def _smat(self, psi, key, out=None, name="s"):
        """out = mats[key] . psi in s per chirality, one kernel (full or red-black fields; out may be psi)."""
        self._check(psi, None, name)
        res = self._result(psi, out, psi.checkerboard, name)
        sweep, band = self._sweeps.get(key), self._banded.get(key)

        def apply(o, p):
            if sweep is not None:
                bidiag_apply(o, p, sweep, self.Ls)
            elif band is not None:
                bidiag_multiply(o, p, band, self.Ls)
            else:
                s_apply(o, p, self._mats[key], Ls=self.Ls)

        with committing(res, psi.checkerboard):
            if res is psi:
                # one writable view is source and result (the kernels read a site's rows before writing them)
                with res._kernel_view(ViewMode.AcceleratorWrite) as o:
                    apply(o, o)
                return res
            with (
                psi._kernel_view(ViewMode.AcceleratorRead) as p,
                res._kernel_view(ViewMode.AcceleratorWriteDiscard) as o,
            ):
                apply(o, p)
        return res

    def _smat_add(self, res, x, key, y, ykey=None):
        """res = mats[key] . x + mats[ykey] . y (the identity when ykey is None) on 5D fields, full or
        red-black, in one kernel; res may be x or y."""
        band = self._banded[key]
        yband = None if ykey is None else self._banded[ykey]

        def apply(o, xv, yv):
            if band is not None and (ykey is None or yband is not None and
                                     np.array_equal(band[0], yband[0])):
                bidiag_multiply(o, xv, band, self.Ls, add=yv, add_structure=yband)
            else:
                by = self._mats["one" if ykey is None else ykey]
                s_apply(o, xv, self._mats[key], yv, by, Ls=self.Ls)

        aliased = res is x or res is y
        with contextlib.ExitStack() as views:
            o = views.enter_context(res._kernel_view(ViewMode.AcceleratorWrite if aliased
                                             else ViewMode.AcceleratorWriteDiscard))
            xv = o if x is res else views.enter_context(x._kernel_view(ViewMode.AcceleratorRead))
            yv = o if y is res else views.enter_context(y._kernel_view(ViewMode.AcceleratorRead))
            apply(o, xv, yv)
        return res

    def _hop(self, psi, tgt, dag, alpha=0.0, diag=None, scale=-0.5, kept_only=False):
        """tgt = scale * hop(psi) + alpha * diag on the full 5D grid (tgt must not alias psi): one kernel.
        ``kept_only``: see :func:`pygrid.qcd.hop.hop`."""
        w = self._w
        return hop_fields(w._hop_calls, psi, w.links, w.links, tgt, w.stencil, self.Ls, scale, alpha, diag,
                          dag, halo_of=w, kept_only=kept_only,
                          key=("5d", dag, alpha, scale, id(diag), id(psi), id(tgt)))

    def _hop_cb(self, psi, tgt, dag, kept_only=False):
        """tgt's buffer = Dhop from psi's checkerboard to the other one (tgt must not alias psi; its
        checkerboard is the caller's): one kernel.  ``kept_only``: see :func:`pygrid.qcd.hop.hop`."""
        w = self._w
        cb_in = psi._cb   # the checkerboard property's value, without its call
        return hop_fields(w._hop_calls, psi, w.U_cb[1 - cb_in], w.U_cb[cb_in], tgt, w.stencil_cb[cb_in],
                          self.Ls, dag=dag, halo_of=w, kept_only=kept_only,
                          key=("5d cb", cb_in, dag, id(psi), id(tgt)))

    # ---- full-grid operators --------------------------------------------------------
    def Dhop(self, psi: Lattice, out: Lattice | None = None, dag: bool = False) -> Lattice:
        """The 4D hopping term (Grid's -1/2 included) on every s slice, one kernel call; ``dag``: its
        adjoint."""
        if out is not None and out is not psi and self._hop(psi, out, dag, kept_only=True) is not None:
            return out
        self._check(psi, False, "Dhop")
        res = self._result(psi, out, None, "Dhop")
        return self._final_hop(psi, res, None, lambda src, tgt: self._hop(src, tgt, dag))

    def M5D(self, psi: Lattice, out: Lattice | None = None) -> Lattice:
        """The fifth-dimension part ``1 - S`` (Grid's M5D): Shamir's M is ``(4 - M5) + Dhop + M5D``."""
        return self._smat(psi, "M5D", out, "M5D")

    def M5Ddag(self, psi: Lattice, out: Lattice | None = None) -> Lattice:
        return self._smat(psi, "M5DDag", out, "M5Ddag")

    def M(self, psi: Lattice, out: Lattice | None = None) -> Lattice:
        """``Dw (b + c S) psi + (1 - S) psi``: Shamir's M for b=1, c=0."""
        self._check(psi, False, "M")
        res = self._result(psi, out, None, "M")
        t = psi if self._trivial_bc else self._smat(psi, "bcS", self._scratch("t", False), "M")
        d = self._smat(psi, "Ms", self._scratch("w", False), "M")       # d = ((4 - M5)(b + c S) + 1 - S) psi
        # the hop last, adding d: measured faster than a hop into a kept field and a sum into out
        return self._final_hop(t, res, None, lambda src, tgt: self._hop(src, tgt, False, 1.0, d))

    def Mdag(self, psi: Lattice, out: Lattice | None = None) -> Lattice:
        """``(b + c S^dag) Dw^dag psi + (1 - S^dag) psi``: the adjoint of M."""
        self._check(psi, False, "Mdag")
        res = self._result(psi, out, None, "Mdag")
        if self._trivial_bc:
            d = self._smat(psi, "MsDag", self._scratch("w", False), "Mdag")  # d = (4 - M5 + 1 - S^dag) psi
            return self._final_hop(psi, res, None, lambda src, tgt: self._hop(src, tgt, True, 1.0, d))
        w = self._hop(psi, self._scratch("w", False), True, 4.0 - self.M5, psi)   # w = Dw^dag psi
        return self._smat_add(res, w, "bcSDag", psi, "M5DDag")   # (b + c S^dag) w + (1 - S^dag) psi

    # ---- even-odd pieces --------------------------------------------------------------
    def Meooe(self, psi: Lattice, out: Lattice | None = None) -> Lattice:
        """``Dhop_eo (b + c S)``: from psi's checkerboard to the other one."""
        self._check(psi, True, "Meooe")
        cb = 1 - psi.checkerboard
        res = self._result(psi, out, cb, "Meooe")
        t = psi if self._trivial_bc else self._smat(psi, "bcS", self._scratch("t", True), "Meooe")
        return self._final_hop(t, res, cb, lambda src, tgt: self._hop_cb(src, tgt, False))

    def MeooeDag(self, psi: Lattice, out: Lattice | None = None) -> Lattice:
        """``(b + c S^dag) Dhop_eo^dag``: the adjoint of Meooe."""
        self._check(psi, True, "MeooeDag")
        cb = 1 - psi.checkerboard
        res = self._result(psi, out, cb, "MeooeDag")
        if self._trivial_bc:
            return self._final_hop(psi, res, cb, lambda src, tgt: self._hop_cb(src, tgt, True))
        w = self._hop_cb(psi, self._scratch("w", True, cb), True)
        return self._smat(w, "bcSDag", res, "MeooeDag")

    def Mooee(self, psi: Lattice, out: Lattice | None = None) -> Lattice:
        """``bee - cee S`` (block diagonal in the 4D site): full or red-black fields."""
        return self._smat(psi, "Mooee", out, "Mooee")

    def MooeeDag(self, psi: Lattice, out: Lattice | None = None) -> Lattice:
        return self._smat(psi, "MooeeDag", out, "MooeeDag")

    def MooeeInv(self, psi: Lattice, out: Lattice | None = None) -> Lattice:
        """The exact inverse of Mooee (per chirality an Ls x Ls matrix inverted once, applied per site)."""
        return self._smat(psi, "MooeeInv", out, "MooeeInv")

    def MooeeInvDag(self, psi: Lattice, out: Lattice | None = None) -> Lattice:
        return self._smat(psi, "MooeeInvDag", out, "MooeeInvDag")

    def _bcs_first(self, psi: Lattice, dag: bool, slot: str):
        """(the hop's source, the multiply in s after the hop): Meooe's b + c S as a pass of its own
        over psi into a scratch field, MeooeDag's b + c S^dag as the hop's ``mul_s``; (psi, None)
        for Shamir."""
        if self._trivial_bc:
            return psi, None
        if dag:
            return psi, self._banded["bcSDag"]
        return self._smat(psi, "bcS", self._scratch(slot, True, psi.checkerboard), "Meooe"), None

    def _mpc_start(self, psi: Lattice, t: Lattice, dag: bool, for_end: bool = False) -> Lattice:
        """t = MooeeInv Meooe psi (MooeeInvDag MeooeDag psi with ``dag``) in one kernel (Möbius's
        Meooe: two, see :meth:`_bcs_first`): the hop's tile solves Mooee in s (two O(Ls) sweeps per
        site, from L1) before the result is written, where MooeeInv took a pass of its own over t.
        ``for_end``: t is for :meth:`_mpc_end` (``from_start``), which for Möbius's Meooe takes
        ``(b + c S) t``: the tile multiplies by it too (it commutes with MooeeInv), and the end
        needs no pass of its own."""
        w = self._w
        src, mul = self._bcs_first(psi, dag, "t")
        if for_end and not dag and not self._trivial_bc:
            mul = self._banded["bcS"]
        cb_in = src.checkerboard
        return hop_fields(w._hop_calls, src, w.U_cb[1 - cb_in], w.U_cb[cb_in], t, w.stencil_cb[cb_in],
                          self.Ls, dag=dag, halo_of=w,
                          inv_s=self._sweeps["MooeeInvDag" if dag else "MooeeInv"], mul_s=mul)

    def _mpc_end(self, t: Lattice, psi: Lattice, res: Lattice, dag: bool,
                 from_start: bool = False) -> Lattice:
        """res = Mooee psi - Meooe t (MooeeDag psi - MeooeDag t with ``dag``) in one kernel (Möbius's
        Meooe: two, see :meth:`_bcs_first`): the hop of t with Mooee psi as its diagonal term,
        Mooee cyclic bidiagonal in s.  Where a Schur operator's end took a hop and a pass over psi,
        t and res, it reads psi once more in the hop.  ``from_start``: t came from
        :meth:`_mpc_start` with ``for_end`` (for Möbius's Meooe, already ``(b + c S) t``)."""
        w = self._w
        if from_start and not dag and not self._trivial_bc:
            src, mul = t, None
        else:
            src, mul = self._bcs_first(t, dag, "w")
        cb_in = src.checkerboard
        return hop_fields(w._hop_calls, src, w.U_cb[1 - cb_in], w.U_cb[cb_in], res, w.stencil_cb[cb_in],
                          self.Ls, 0.5, 1.0, psi, dag, halo_of=w,
                          diag_s=self._banded["MooeeDag" if dag else "Mooee"], mul_s=mul)

    def _mooee_minus(self, psi: Lattice, t: Lattice, res: Lattice, dag: bool) -> Lattice:
        """res = Mooee psi - t (MooeeDag for dag) in one kernel: how a Schur operator's application ends."""
        key = "MooeeDag" if dag else "Mooee"
        return self._smat_add(res, psi, key, t, "minus" + key)

    # ---- physical 4D fields -------------------------------------------------------------
    def _check4(self, q, name):
        if not isinstance(q, Lattice) or q.site_type.levels != FERMION.levels or q.grid != self.grid4:
            raise ConformabilityError(f"{name} needs a 4D LatticeFermion on {self.grid4}, got {q!r}")
        if q.precision != self.precision:
            raise ConformabilityError(
                f"{name}: a {q.precision}-precision field for a {self.precision}-precision operator"
            )

    def physical_field(self, psi5: Lattice, out: Lattice | None = None) -> Lattice:
        """The physical 4D quark field ``P_- psi_0 + P_+ psi_{Ls-1}`` (Grid's
        ExportPhysicalFermionSolution)."""
        self._check(psi5, False, "physical_field")
        if out is not None:
            self._check4(out, "physical_field (out)")
        # two writes: into a new field, then one copy into out
        res = self.new_fermion4d()
        Ls = self.Ls
        with (
            psi5._kernel_view(ViewMode.AcceleratorRead) as p,
            res._kernel_view(ViewMode.AcceleratorWriteDiscard) as o,
        ):
            p5 = p.reshape((p.shape[0] // Ls, Ls) + p.shape[1:])
            o[:, :6] = p5[:, Ls - 1, :6]     # P_+ psi_{Ls-1}
            o[:, 6:] = p5[:, 0, 6:]          # P_- psi_0
        return res if out is None else out.assign(res)

    def import_physical_source(self, src4: Lattice, out: Lattice | None = None) -> Lattice:
        """The 5D source of a 4D one: ``D_minus eta`` with ``eta_0 = P_+ q``, ``eta_{Ls-1} = P_- q``.

        Grid's ImportPhysicalFermionSource; ``D_minus = 1 - c Dw`` is the identity for Shamir.
        """
        self._check4(src4, "import_physical_source")
        if out is not None:
            self._check(out, False, "import_physical_source (out)")
        Ls = self.Ls
        # eta is written in three steps: in a new field, out then written by one kernel
        eta = self.new_fermion()
        with (
            src4._kernel_view(ViewMode.AcceleratorRead) as q,
            eta._kernel_view(ViewMode.AcceleratorWriteDiscard) as e,
        ):
            e5 = e.reshape((e.shape[0] // Ls, Ls) + e.shape[1:])
            e5[...] = 0
            e5[:, 0, :6] = q[:, :6]           # P_+ q at s = 0
            e5[:, Ls - 1, 6:] = q[:, 6:]      # P_- q at s = Ls-1
        if self.c == 0.0:
            return eta if out is None else out.assign(eta)
        res = self.new_fermion() if out is None else out
        # res = eta - c Dw eta = (1 - c (4 - M5)) eta + (c/2) hop(eta)
        return self._hop(eta, res, False, 1.0 - self.c * (4.0 - self.M5), eta, scale=0.5 * self.c)

    def Dminus(self, psi: Lattice, out: Lattice | None = None) -> Lattice:
        """``1 - c Dw`` on a full 5D field (Grid's Dminus)."""
        self._check(psi, False, "Dminus")
        res = self._result(psi, out, None, "Dminus")
        return self._final_hop(psi, res, None, lambda src, tgt: self._hop(
            src, tgt, False, 1.0 - self.c * (4.0 - self.M5), src, scale=0.5 * self.c))


class DomainWallFermion(MobiusFermion):
    """Shamir domain-wall fermions, ``DomainWallFermion(U, Ls, mass, M5)``: MobiusFermion with b=1, c=0.

        (M psi)_s = [(5 - M5) + Dhop] psi_s - P_- psi_{s+1} - P_+ psi_{s-1}
        with +m P_- psi_0 at s = Ls-1 and +m P_+ psi_{Ls-1} at s = 0 for the wrap-around terms.
    """

    def __init__(self, U: Lattice, Ls: int, mass: float, M5: float, boundary_phases=None,
                 twists=None) -> None:
        super().__init__(U, Ls, mass, M5, 1.0, 0.0, boundary_phases, twists)

    def _with_gauge(self, U):
        return DomainWallFermion(U, self.Ls, self.mass, self.M5, **self.boundary.kwargs())

    def __repr__(self):
        return (
            f"DomainWallFermion(Ls={self.Ls}, mass={self.mass}, M5={self.M5}{self.boundary.describe()}, "
            f"{self.precision}, {self.grid4})"
        )
