"""The base of the Dirac operators: field checks, ``out=`` handling and the even-odd plumbing.

A fermion operator acts on fermion fields of its grid (``grid``) or of that
grid's red-black half (``rb_grid``), in the precision of its gauge field, and
provides Grid's interface: ``M``, ``Mdag``, ``MdagM``, ``Dhop``, ``DhopDag``,
``Meooe``, ``MeooeDag``, ``Mooee``, ``MooeeDag``, ``MooeeInv``,
``MooeeInvDag``, ``DhopEO``, ``DhopOE``, ``Mdiag``.  Every method returns a new
field, or writes into ``out=`` and returns it; ``out`` may be the input.

A subclass sets ``U``, ``precision``, ``grid`` and ``rb_grid`` and implements
``M``, ``Mdag``, ``Dhop``, ``Meooe``, ``MeooeDag``, the ``Mooee`` family,
``_hop_cb(psi, tgt, dag)`` (the hopping term from psi's checkerboard into
``tgt``, which never aliases psi) and ``_with_gauge(U)`` (the same operator on
another gauge field).
"""
from __future__ import annotations

from ..errors import ConformabilityError, SiteTypeError
from ..lattice import Lattice, convert
from ..tensors import sitetype as st

FERMION = st.SpinColourVector()


class FermionOperator:
    """Shared behaviour of the Wilson and domain-wall operators (see the module docstring)."""

    #: how errors name the fields the operator takes
    fermion_label = "LatticeFermion"

    U: Lattice
    precision: str

    # ---- fields ------------------------------------------------------------------
    def new_fermion(self, checkerboard: int | None = None) -> Lattice:
        """A zero fermion on the operator's grid, or on its red-black grid with ``checkerboard``."""
        if checkerboard is None:
            return Lattice(self.grid, FERMION, self.precision)
        return Lattice(self.rb_grid, FERMION, self.precision, checkerboard=checkerboard)

    def converted(self, precision: str, grid=None) -> FermionOperator:
        """This operator with U converted to ``precision`` ('single'/'double'), optionally on another
        4D grid.

        ``op.converted('single')`` keeps the SIMD layout of U's grid (fields converted with
        ``pg.convert`` fit it); pass ``grid=pg.GridCartesian(dims, precision='single')`` for the
        native single-precision lane count (fields then live on that grid).
        """
        if grid is None or grid == self.U.grid:
            U = self.U if precision == self.precision else convert(self.U, precision)
        else:
            U = Lattice(grid, self.U.site_type, precision).from_numpy(self.U.to_numpy())
        return self._with_gauge(U)

    # ---- checks ------------------------------------------------------------------
    def _grid_note(self) -> str:
        """What an error about a field on the wrong grid adds."""
        return ""

    def _check(self, psi, rb: bool | None, name: str) -> None:
        """``psi`` is a fermion of the operator's precision on its grid (rb False), its red-black grid
        (rb True) or either (rb None)."""
        if not isinstance(psi, Lattice) or psi.site_type.levels != FERMION.levels:
            raise SiteTypeError(f"{name} needs a {self.fermion_label}, got {psi!r}")
        if rb is None:
            ok = psi.grid == self.grid or psi.grid == self.rb_grid
            want = f"{self.grid} or its red-black grid"
        else:
            g = self.rb_grid if rb else self.grid
            ok = psi.grid == g
            want = f"{'the red-black grid' if rb else 'the full grid'} of the operator, {g}"
        if not ok:
            raise ConformabilityError(f"{name}: {psi} is not on {want}{self._grid_note()}; "
                                      f"make fields with op.new_fermion()")
        if psi.precision != self.precision:
            raise ConformabilityError(
                f"{name}: a {psi.precision}-precision field for a {self.precision}-precision operator; "
                f"use pg.convert(psi, {self.precision!r}) or op.converted({psi.precision!r})")

    def _out(self, psi, out, cb: int | None, name: str, avoid=()) -> tuple[Lattice, Lattice]:
        """The result field ``res`` (``out`` checked with its checkerboard set, or a new field like
        psi) and ``tgt``, where a kernel that must not write over a field in ``avoid`` writes;
        :meth:`_finish` copies ``tgt`` into ``res`` when they differ."""
        if out is None:
            res = Lattice(psi.grid, FERMION, self.precision, checkerboard=cb)
        else:
            self._check(out, psi.grid.checkerboarded, name + " (out)")
            if cb is not None:
                out.checkerboard = cb
            res = out
        tgt = res
        if any(res is a for a in avoid):
            tgt = Lattice(psi.grid, FERMION, self.precision, checkerboard=cb)
        return res, tgt

    @staticmethod
    def _finish(res: Lattice, tgt: Lattice) -> Lattice:
        if tgt is not res:
            res.assign(tgt)
        return res

    # ---- composed operators ----------------------------------------------------------
    def MdagM(self, psi: Lattice, out: Lattice | None = None) -> Lattice:
        return self.Mdag(self.M(psi), out=out)

    def Mdiag(self, psi: Lattice, out: Lattice | None = None) -> Lattice:
        return self.Mooee(psi, out)

    def DhopDag(self, psi: Lattice, out: Lattice | None = None) -> Lattice:
        return self.Dhop(psi, out=out, dag=True)

    # ---- even-odd hopping -------------------------------------------------------------
    def _dhop_cb(self, psi: Lattice, out: Lattice | None, dag: bool, name: str) -> Lattice:
        """The hopping term from psi's checkerboard to the other one."""
        self._check(psi, True, name)
        res, tgt = self._out(psi, out, 1 - psi.checkerboard, name, avoid=(psi,))
        self._hop_cb(psi, tgt, dag)
        return self._finish(res, tgt)

    def DhopEO(self, psi_odd: Lattice, out: Lattice | None = None, dag: bool = False) -> Lattice:
        """Even output from an odd field (Grid's DhopEO)."""
        if psi_odd.checkerboard != 1:
            raise ConformabilityError("DhopEO takes an odd (checkerboard 1) field")
        return self._dhop_cb(psi_odd, out, dag, "DhopEO")

    def DhopOE(self, psi_even: Lattice, out: Lattice | None = None, dag: bool = False) -> Lattice:
        """Odd output from an even field (Grid's DhopOE)."""
        if psi_even.checkerboard != 0:
            raise ConformabilityError("DhopOE takes an even (checkerboard 0) field")
        return self._dhop_cb(psi_even, out, dag, "DhopOE")
