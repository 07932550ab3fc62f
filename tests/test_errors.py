"""Errors: each raises the documented pygrid error class, says what was wrong,
and leaves the destination unchanged."""
import numpy as np
import pytest
from conftest import grid, random_field

import pygrid as pg


@pytest.fixture
def g():
    return grid()


def unchanged(f):
    """Context: assert f.to_numpy() is the same after the block."""
    class _C:
        def __enter__(self):
            self.before = f.to_numpy()

        def __exit__(self, *exc):
            assert np.array_equal(f.to_numpy(), self.before), "destination modified by a failed operation"
            return False
    return _C()


def test_error_hierarchy():
    assert issubclass(pg.ConformabilityError, ValueError) and issubclass(
        pg.ConformabilityError, pg.PyGridError
    )
    assert issubclass(pg.SiteTypeError, TypeError) and issubclass(pg.ShapeError, ValueError)
    assert issubclass(pg.GridError, ValueError)


def test_mismatched_grids(g):
    other = grid((4, 4, 4, 8))
    a, b = random_field(g, pg.ColourVector()), random_field(other, pg.ColourVector())
    with pytest.raises(pg.ConformabilityError, match="(?i)grid"):
        a + b
    with unchanged(a), pytest.raises(pg.ConformabilityError, match="(?i)grid"):
        a @= pg.eval(2 * b)
    with pytest.raises(pg.ConformabilityError, match="(?i)grid"):
        pg.inner_product(a, b)
    # same dims, other simd layout: still another grid
    c = random_field(grid((4, 4, 4, 4), (1, 1, 1, 4)), pg.ColourVector())
    with unchanged(a), pytest.raises(pg.ConformabilityError, match="(?i)grid"):
        a @= c


def test_mismatched_checkerboards(g):
    full = random_field(g, pg.ColourVector())
    e, o = pg.pick_checkerboard(0, full), pg.pick_checkerboard(1, full)
    with pytest.raises(pg.ConformabilityError, match="checkerboard"):
        e + o
    with unchanged(e), pytest.raises(pg.ConformabilityError, match="checkerboard"):
        e @= 2 * o
    with unchanged(e), pytest.raises(pg.ConformabilityError, match="checkerboard"):
        e @= pg.cshift(e, 0, 1)  # an odd shift lands on the other checkerboard
    with unchanged(full), pytest.raises(pg.ConformabilityError):
        full @= e
    with pytest.raises(pg.GridError, match="checkerboard"):
        e.checkerboard = 2
    with pytest.raises(pg.GridError, match="checkerboard"):
        pg.Lattice(g, pg.Complex, checkerboard=0)


def test_mismatched_precisions(g):
    a = random_field(g, pg.ColourMatrix())
    s = random_field(g, pg.ColourMatrix(), "single")
    with pytest.raises(pg.ConformabilityError, match="precision"):
        a * s
    with unchanged(a), pytest.raises(pg.ConformabilityError, match="precision"):
        a @= 2 * s


def test_site_type_mismatches(g):
    U = random_field(g, pg.ColourMatrix())
    U2 = random_field(g, pg.ColourMatrix(2))
    psi = random_field(g, pg.SpinColourVector())
    psi2 = random_field(g, pg.SpinColourVector(2))
    v = random_field(g, pg.ColourVector())
    with pytest.raises(pg.SiteTypeError, match="colour"):
        U * psi2  # 3x3 times an nc=2 fermion
    with pytest.raises(pg.SiteTypeError, match="colour"):
        U2 * psi
    with pytest.raises(pg.SiteTypeError, match="vector"):
        v * v
    with pytest.raises(pg.SiteTypeError, match="vector"):
        psi * U  # vector times matrix
    with pytest.raises(pg.SiteTypeError, match="differ"):
        U + psi
    with pytest.raises(pg.SiteTypeError, match="vector"):
        psi + 1.0
    with pytest.raises(pg.SiteTypeError):
        pg.trace_spin(U * psi)
    with pytest.raises(pg.SiteTypeError, match="level"):
        pg.peek_spin(U, 0)


def test_assignment_of_wrong_type(g):
    U = random_field(g, pg.ColourMatrix())
    psi = random_field(g, pg.SpinColourVector())
    r = random_field(g, pg.Real)
    c = random_field(g, pg.Complex)
    with unchanged(psi), pytest.raises(pg.SiteTypeError, match="ColourMatrix"):
        psi @= U
    with unchanged(U), pytest.raises(pg.SiteTypeError):
        U @= U * psi
    with unchanged(r), pytest.raises(pg.SiteTypeError, match="complex"):
        r @= c
    with unchanged(psi), pytest.raises(pg.SiteTypeError):
        psi.assign(3.0)
    with unchanged(psi), pytest.raises(pg.SiteTypeError):
        psi @= "psi"


@pytest.mark.parametrize(
    "shape", [(4, 4, 4, 4, 3), (4, 4, 4, 4, 4, 4), (4, 4, 4, 8, 4, 3), (4, 4, 4, 4, 12), (4, 4, 4, 4, 3, 4)]
)
def test_from_numpy_wrong_shape(g, shape):
    psi = random_field(g, pg.SpinColourVector())
    with unchanged(psi), pytest.raises(pg.ShapeError, match="shape"):
        psi.from_numpy(np.zeros(shape, dtype=np.complex128))


def test_from_numpy_wrong_dtype(g):
    psi = random_field(g, pg.SpinColourVector())
    with unchanged(psi), pytest.raises(pg.ShapeError, match="dtype"):
        psi.from_numpy(np.zeros(g.lshape + (4, 3), dtype=object))
    with unchanged(psi), pytest.raises(pg.ShapeError, match="dtype"):
        psi.from_numpy(np.zeros(g.lshape + (4, 3), dtype="U3"))
    r = random_field(g, pg.Real)
    with unchanged(r), pytest.raises(pg.ShapeError, match="[Cc]omplex"):
        r.from_numpy(np.full(g.lshape, 1j))
    h = random_field(g.red_black, pg.ColourVector(), checkerboard=1)
    with unchanged(h), pytest.raises(pg.ShapeError, match="shape"):
        h.from_numpy(np.zeros(g.lshape + (3,), dtype=np.complex128))  # a full-grid array


@pytest.mark.parametrize("dims,simd,match", [
    ([4, 4, 0, 4], None, "positive"),
    ([4, -4, 4, 4], None, "positive"),
    ([4, 4, 4, 6], (1, 1, 1, 4), "divisible"),
    ([4, 4, 4, 4], (1, 1, 2), "entries"),
    ([4, 4, 4, 4], (1, 1, 1, 3), "divisible|power of two"),
    ([4, 4, 4, 4], (1, 1, 1, 0), "positive"),
    ([4, 4, 4.5, 4], None, "integer"),
    ([], None, "positive"),
    ("abcd", None, "integer"),
])
def test_bad_grid_dimensions(dims, simd, match):
    with pytest.raises(pg.GridError, match=match):
        pg.GridCartesian(dims, simd_layout=simd)


def test_bad_grid_misc():
    with pytest.raises(pg.GridError, match="mpi_layout"):
        pg.GridCartesian([4, 4, 4, 4], mpi_layout=(1, 1, 1))
    with pytest.raises(pg.GridError, match="divisible"):
        pg.GridCartesian([4, 4, 4, 6], mpi_layout=(1, 1, 1, 4))
    with pytest.raises(pg.GridError, match="Ls"):
        pg.GridCartesian5D(grid(), 0)
    with pytest.raises(pg.GridError):
        pg.GridCartesian5D(grid().red_black, 4)
    with pytest.raises(pg.GridError, match="precision"):
        pg.GridCartesian([4, 4, 4, 4], precision="half")
    with pytest.raises(pg.GridError, match="(?i)grid"):
        pg.Lattice([4, 4, 4, 4], pg.Complex)
    with pytest.raises(pg.ShapeError, match="precision"):
        pg.Lattice(grid(), pg.Complex, precision="quad")


def test_bad_shift_and_reduction_arguments(g):
    a = random_field(g, pg.ColourVector())
    with pytest.raises(pg.ConformabilityError, match="dimension"):
        pg.cshift(a, 4, 1)
    with pytest.raises(pg.ConformabilityError, match="integer"):
        pg.cshift(a, 0, 0.5)
    with pytest.raises(pg.ConformabilityError, match="dimension"):
        pg.slice_sum(a, 7)
    with pytest.raises(pg.SiteTypeError):
        pg.inner_product(a, random_field(g, pg.ColourMatrix()))
    with pytest.raises(pg.SiteTypeError, match="mask"):
        pg.where(a, a, a)
    with pytest.raises(pg.SiteTypeError):
        pg.where(pg.coordinate(g, 0) < pg.coordinate(g, 1), a, random_field(g, pg.ColourMatrix()))
    with pytest.raises(TypeError, match="truth"):
        bool(a + a)


def test_poke_errors_leave_destination_unchanged(g):
    U = random_field(g, pg.LorentzColourMatrix())
    psi = random_field(g, pg.SpinColourVector())
    with unchanged(U), pytest.raises(pg.SiteTypeError):
        pg.poke_lorentz(U, psi, 0)
    with unchanged(U), pytest.raises(pg.SiteTypeError, match="range"):
        pg.poke_lorentz(U, pg.peek_lorentz(U, 1), 4)
    other = random_field(grid((4, 4, 4, 8)), pg.ColourMatrix())
    with unchanged(U), pytest.raises(pg.ConformabilityError):
        pg.poke_lorentz(U, other, 0)


def test_bad_backend_name():
    with pytest.raises(pg.BackendError, match="unknown backend"):
        pg.set_backend("fortran")
    assert pg.get_backend().name == "openmp"
