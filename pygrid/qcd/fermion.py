"""The base of the Dirac operators: field checks, ``out=`` handling and the even-odd plumbing.

A fermion operator acts on fermion fields of its grid (``grid``) or of that
grid's red-black half (``rb_grid``), in the precision of its gauge field, and
provides Grid's interface: ``M``, ``Mdag``, ``MdagM``, ``Dhop``, ``DhopDag``,
``Meooe``, ``MeooeDag``, ``Mooee``, ``MooeeDag``, ``MooeeInv``,
``MooeeInvDag``, ``DhopEO``, ``DhopOE``, ``Mdiag``.  Every method returns a new
field, or writes into ``out=`` and returns it; ``out`` may be the input.

``out`` is written by the last kernel of the call alone: intermediates live in
fields the operator keeps (:meth:`FermionOperator._scratch`), and ``out`` takes
its new checkerboard with that kernel (:func:`committing`).  A call that fails or
is interrupted before its last kernel leaves ``out``, data and checkerboard, as
it was.

A subclass sets ``U``, ``precision``, ``grid`` and ``rb_grid`` and implements
``M``, ``Mdag``, ``Dhop``, ``Meooe``, ``MeooeDag``, the ``Mooee`` family,
``_hop_cb(psi, tgt, dag)`` (the hopping term from psi's checkerboard into
``tgt``'s buffer, one kernel; ``tgt`` never aliases psi and its checkerboard is
the caller's to set) and ``_with_gauge(U)`` (the same operator on another gauge
field).
"""
from __future__ import annotations

from collections.abc import Callable

from ..cartesian import GridCartesian
from ..errors import ConformabilityError, GridError, SiteTypeError
from ..lattice import Lattice, convert
from ..tensors import sitetype as st

FERMION = st.SpinColourVector()


class committing:
    """Around the last kernel of a call, the one that writes ``res``: ``res`` has checkerboard ``cb``
    (None: unchanged) inside, and gets its old one back if the kernel fails.

    The expression kernels check the destination's checkerboard, so it is set before the kernel
    rather than after.  A class, not a generator: it wraps every operator call.
    """

    __slots__ = ("res", "cb", "old")

    def __init__(self, res: Lattice, cb: int | None) -> None:
        self.res, self.cb, self.old = res, cb, None

    def __enter__(self) -> Lattice:
        res = self.res
        self.old = res._cb   # the checkerboard property's value, without its call
        if self.cb is not None and self.cb != self.old:
            res.checkerboard = self.cb
        return res

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is not None and self.res.checkerboard != self.old:
            self.res.checkerboard = self.old
        return False


def fixed(name: str, doc: str) -> property:
    """An operator's parameter, set once by its constructor: its kernels' coefficients, tables and kept
    calls are made from it, so a later assignment, which would leave them as they were, raises."""
    attr = "_" + name

    def get(self):
        return getattr(self, attr)

    def assign(self, value):
        if hasattr(self, attr):
            raise AttributeError(f"{type(self).__name__}.{name} is fixed when the operator is made (its "
                                 f"kernels' coefficients and kept calls come from it): make a new operator")
        setattr(self, attr, value)

    return property(get, assign, doc=doc)


def native_grid(grid, precision):
    """The grid of ``grid``'s lattice and ranks in the SIMD layout pygrid picks for ``precision``
    (twice double's lanes in single), or ``grid`` itself where that layout is the same or cannot
    hold red-black fields (the Schur solves')."""
    try:
        g = GridCartesian(grid.gdims, mpi_layout=grid.mpi_layout, precision=precision, comm=grid.comm)
        if g.simd_layout == grid.simd_layout:
            return grid
        g.red_black  # noqa: B018 (made here, so that a layout without one is refused now)
    except GridError:
        return grid
    return g


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

    def converted(self, precision: str, grid=None, native: bool = False) -> FermionOperator:
        """This operator with U converted to ``precision`` ('single'/'double'), optionally on another
        4D grid.

        ``op.converted('single')`` keeps the SIMD layout of U's grid (fields converted with
        ``pg.convert(x, 'single')`` fit it); ``native=True`` puts it on the grid of the precision's
        own lane count (:func:`native_grid`), and ``grid=`` on any other grid of the same lattice:
        fields then go there with ``pg.convert(x, precision, grid=op.grid)``.

        The operator is kept and handed out again until U is written (a solver converts it at
        every solve: a propagator's twelve solves make it once).
        """
        if native and grid is None:
            grid = native_grid(self.U.grid, precision)
        same = grid is None or grid == self.U.grid
        key = (precision, None if same else grid.key())
        version = self.U._manager.write_count(self.U._key)
        kept = self.__dict__.setdefault("_converted_ops", {})
        hit = kept.get(key)
        if hit is not None and hit[0] == version:
            return hit[1]
        if same:
            U = self.U if precision == self.precision else convert(self.U, precision)
        else:
            try:
                U = convert(self.U, precision, grid=grid)
            except ConformabilityError:  # another decomposition over the ranks: through the host
                U = Lattice(grid, self.U.site_type, precision).from_numpy(self.U.to_numpy())
        op = self._with_gauge(U)
        kept[key] = (version, op)
        return op

    # ---- checks ------------------------------------------------------------------
    def _grid_note(self) -> str:
        """What an error about a field on the wrong grid adds."""
        return ""

    def _check(self, psi, rb: bool | None, name: str) -> None:
        """``psi`` is a fermion of the operator's precision on its grid (rb False), its red-black grid
        (rb True) or either (rb None)."""
        if not isinstance(psi, Lattice) or (psi.site_type is not FERMION
                                            and psi.site_type.levels != FERMION.levels):
            raise SiteTypeError(f"{name} needs a {self.fermion_label}, got {psi!r}")
        g = self.rb_grid if rb else self.grid
        grid = psi.grid
        # the operator's own grid object first: the grids' comparison of their fields costs more
        ok = grid is g or ((grid == self.grid or grid == self.rb_grid) if rb is None else grid == g)
        if not ok:
            # the message is built only on failure: formatting grids costs microseconds every call
            want = (f"{self.grid} or its red-black grid" if rb is None else
                    f"{'the red-black grid' if rb else 'the full grid'} of the operator, {g}")
            raise ConformabilityError(f"{name}: {psi} is not on {want}{self._grid_note()}; "
                                      f"make fields with op.new_fermion()")
        if psi.precision != self.precision:
            raise ConformabilityError(
                f"{name}: a {psi.precision}-precision field for a {self.precision}-precision operator; "
                f"use pg.convert(psi, {self.precision!r}) or op.converted({psi.precision!r})")

    def _result(self, psi: Lattice, out: Lattice | None, cb: int | None, name: str) -> Lattice:
        """Where the call's last kernel writes: ``out``, checked and left as it is, or a new field like
        psi with checkerboard ``cb``."""
        if out is None:
            return Lattice(psi.grid, FERMION, self.precision, checkerboard=cb)
        self._check(out, psi.grid.checkerboarded, name + " (out)")
        return out

    def _scratch(self, slot: str, rb: bool, cb: int | None = None) -> Lattice:
        """The operator's field ``slot`` on its red-black grid (``rb``) or its grid, with checkerboard
        ``cb``: where a call keeps an intermediate result.

        Kept between calls because a solver applies the operator thousands of times, and a fresh
        field costs an allocation and a MemoryManager entry each time.  Never returned to the caller;
        a call writes it in full before reading it, so one that failed leaves nothing to clean up.
        """
        fields = self.__dict__.setdefault("_scratch_fields", {})
        f = fields.get((slot, rb))
        if f is None:
            f = fields[(slot, rb)] = Lattice(self.rb_grid if rb else self.grid, FERMION, self.precision)
        if cb is not None:
            f.checkerboard = cb
        return f

    def _final_hop(self, src: Lattice, res: Lattice, cb: int | None,
                   hop: Callable[[Lattice, Lattice], object]) -> Lattice:
        """``res`` = ``hop(src, tgt)``, a kernel that writes ``tgt`` and must not write over its source:
        into res directly, or, when res is src, into a scratch field copied into res."""
        if res is not src:
            if cb is None or cb == res.checkerboard:
                hop(src, res)
            else:
                with committing(res, cb):
                    hop(src, res)
            return res
        tmp = self._scratch("alias", src.grid.checkerboarded, cb)
        hop(src, tmp)
        with committing(res, cb):
            res.assign(tmp)
        return res

    # ---- composed operators ----------------------------------------------------------
    def MdagM(self, psi: Lattice, out: Lattice | None = None) -> Lattice:
        self._check(psi, None, "MdagM")
        t = self.M(psi, out=self._scratch("MdagM", psi.grid.checkerboarded, psi.checkerboard))
        return self.Mdag(t, out=out)

    def Mdiag(self, psi: Lattice, out: Lattice | None = None) -> Lattice:
        return self.Mooee(psi, out)

    def DhopDag(self, psi: Lattice, out: Lattice | None = None) -> Lattice:
        return self.Dhop(psi, out=out, dag=True)

    # ---- even-odd hopping -------------------------------------------------------------
    def _dhop_cb(self, psi: Lattice, out: Lattice | None, dag: bool, name: str) -> Lattice:
        """The hopping term from psi's checkerboard to the other one."""
        if out is not None and out is not psi and isinstance(psi, Lattice) and isinstance(out, Lattice):
            cb_in = psi._cb   # checkerboards, without the property's call
            # a kept call writes out as it is: its checkerboard already the one the result gets
            if (cb_in is not None and out._cb == 1 - cb_in
                    and self._hop_cb(psi, out, dag, kept_only=True) is not None):
                return out
        self._check(psi, True, name)
        cb = 1 - psi.checkerboard
        res = self._result(psi, out, cb, name)
        return self._final_hop(psi, res, cb, lambda src, tgt: self._hop_cb(src, tgt, dag))

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
