"""Schur red-black solves and CG / mixed-precision CGs for Wilson and domain wall on random gauge fields."""
import functools
import math

import numpy as np
import pytest
from schur_checks import schur_pieces_differ

import pygrid as pg
import pygrid.qcd  # noqa: F401  (pg.qcd)
from pygrid.algorithms import (
    ConjugateGradient,
    MdagMOperator,
    MixedPrecisionConjugateGradient,
    ReliableUpdateConjugateGradient,
    operand_grid,
)
from pygrid.algorithms.operators import converted_operator

MASS, M5, LS = 0.1, 1.8, 4


@functools.cache
def gauge(dims=(4, 4, 4, 4)):
    grid = pg.GridCartesian(dims)
    return pg.qcd.random_gauge(grid, pg.ParallelRNG(grid, [1, 2, 3, 4]))


def make(kind):
    U = gauge()
    if kind == "wilson":
        return pg.qcd.WilsonFermion(U, MASS)
    if kind == "dwf":
        return pg.qcd.DomainWallFermion(U, LS, MASS, M5)
    return pg.qcd.MobiusFermion(U, LS, MASS, M5, 1.5, 0.5)


def source(op, seed=(5, 6, 7, 8)):
    b = op.new_fermion()
    pg.ParallelRNG(op.grid, list(seed)).gaussian(b)
    return b


def true_residual(op, x, b):
    r = op.M(x)
    r @= b - r
    return math.sqrt(pg.norm2(r) / pg.norm2(b))


def reldiff(a, b):
    d = a.new_like()
    d @= a - b
    return math.sqrt(pg.norm2(d) / pg.norm2(b))


@pytest.mark.parametrize("kind", ["wilson", "dwf", "mobius"])
def test_schur_solve_equals_unpreconditioned_solve(kind):
    op = make(kind)
    b = source(op)
    # unpreconditioned: CG on Mdag M x = Mdag b
    x_full, rec = ConjugateGradient(tol=1e-12, maxiter=5000)(MdagMOperator(op), op.Mdag(b))
    assert rec.converged
    assert true_residual(op, x_full, b) < 1e-9
    # Schur red-black on the odd checkerboard (and the even one for Wilson)
    x, rec_s = pg.qcd.schur_solve(op, b, ConjugateGradient(tol=1e-12, maxiter=5000))
    assert rec_s.converged and rec_s.checkerboard == 1
    assert rec_s.full_residual < 1e-9
    assert abs(true_residual(op, x, b) - rec_s.full_residual) < 1e-12
    assert rec_s.iterations < rec.iterations
    assert reldiff(x, x_full) < 1e-8
    if kind == "wilson":
        xe, rec_e = pg.qcd.SchurRedBlackDiagMooeeSolve(ConjugateGradient(tol=1e-12, maxiter=5000), cb=0)(
            op, b
        )
        assert rec_e.checkerboard == 0 and reldiff(xe, x_full) < 1e-8


@pytest.mark.parametrize("kind", ["wilson", "dwf"])
def test_cg_and_mixed_precision_cg_on_mdagm(kind):
    op = make(kind)
    b = source(op, (9, 10, 11, 12))
    A = MdagMOperator(op)
    x, rec = ConjugateGradient(tol=1e-10, maxiter=5000)(A, b)
    assert rec.converged and rec.true_residual < 1.5e-10
    r = A.M(x)
    r @= b - r
    assert math.sqrt(pg.norm2(r) / pg.norm2(b)) < 1.5e-10
    # mixed precision: single inner (op.converted('single')), double outer, same residual
    xm, recm = MixedPrecisionConjugateGradient(tol=1e-10, inner_tol=1e-5, maxiter=5000)(A, b)
    assert recm.converged and recm.true_residual < 1.5e-10
    assert reldiff(xm, x) < 1e-8
    # single iterations, reliable updates in double: the same solution, about CG's iteration count
    xr, recr = ReliableUpdateConjugateGradient(tol=1e-10, maxiter=5000)(A, b)
    assert recr.converged and recr.true_residual < 1e-10 and reldiff(xr, x) < 1e-8
    assert recr.outer_iterations >= 2 and recr.iterations <= 1.1 * rec.iterations + 2


@pytest.mark.parametrize("solver", [MixedPrecisionConjugateGradient, ReliableUpdateConjugateGradient])
def test_mixed_precision_schur_solve_dwf(solver):
    op = make("dwf")
    b = source(op)
    x, rec = pg.qcd.schur_solve(op, b, solver(tol=1e-10, maxiter=5000))
    assert rec.converged and rec.full_residual < 1e-9
    assert abs(true_residual(op, x, b) - rec.full_residual) < 1e-12
    # the Schur operator converts with the fermion operator
    S = pg.qcd.schur.SchurOperator(op)
    assert S.converted("single").precision == "single"


class Spy:
    """An operator that records the grids of the fields it is applied to."""

    def __init__(self, op):
        self.op, self.grids = op, set()

    def M(self, x, out=None):
        self.grids.add(x.grid)
        return self.op.M(x, out=out)

    Mdag = M


@pytest.mark.parametrize("kind", ["wilson", "dwf"])
@pytest.mark.parametrize("solver", [MixedPrecisionConjugateGradient, ReliableUpdateConjugateGradient])
def test_mixed_precision_solvers_iterate_on_the_single_layout(kind, solver):
    op = make(kind)
    A = MdagMOperator(pg.qcd.schur.SchurOperator(op))
    same = converted_operator(A, "single")
    native = converted_operator(A, "single", native=True)
    assert operand_grid(same) == op.rb_grid
    assert operand_grid(native).nsimd == 2 * op.rb_grid.nsimd            # single's own lane count
    assert operand_grid(native).gdims == op.rb_grid.gdims and operand_grid(native).checkerboarded
    # the solver converts its fields onto the grid of the operator it iterates with, and back
    b = source(op)
    rhs = pg.qcd.schur.SchurOperator(op).Mdag(pg.qcd.schur.SchurOperator(op).prepare_source(b))
    spy = Spy(native)
    x, rec = solver(tol=1e-10, maxiter=5000, verbose="error")(A, rhs, op_single=spy)
    assert spy.grids == {operand_grid(native)} and x.grid == rhs.grid
    assert rec.converged and rec.true_residual < 1e-10


@pytest.mark.parametrize("kind", ["wilson", "dwf"])
def test_a_converted_operator_is_kept_until_the_links_are_written(kind):
    grid = pg.GridCartesian((4, 4, 4, 4))
    U = pg.qcd.random_gauge(grid, pg.ParallelRNG(grid, [7, 7]))
    D = pg.qcd.WilsonFermion(U, MASS) if kind == "wilson" else pg.qcd.DomainWallFermion(U, LS, MASS, M5)
    Ds = D.converted("single", native=True)
    assert D.converted("single", native=True) is Ds and Ds.grid.nsimd == 2 * D.grid.nsimd
    assert D.converted("single") is D.converted("single") is not Ds and D.converted("single").grid == D.grid
    psi = source(D)
    U @= 0.5 * U                        # written: the next conversion sees the new links
    Ds2 = D.converted("single", native=True)
    assert Ds2 is not Ds
    got = pg.convert(Ds2.M(pg.convert(psi, "single", grid=Ds2.grid)), "double", grid=D.grid)
    assert reldiff(got, D.M(psi)) < 1e-6


def test_schur_solve_initial_guess_and_errors():
    op = make("dwf")
    b = source(op)
    x, rec = pg.qcd.schur_solve(op, b, ConjugateGradient(tol=1e-8, maxiter=5000))
    # starting from the solution: no iterations
    x2, rec2 = pg.qcd.schur_solve(op, b, ConjugateGradient(tol=1e-6, maxiter=5000), x0=x)
    assert rec2.iterations == 0
    with pytest.raises(pg.ConformabilityError):
        pg.qcd.schur_solve(op, pg.LatticeFermion(gauge().grid), ConjugateGradient())
    with pytest.raises(pg.GridError):
        pg.qcd.SchurRedBlackDiagMooeeSolve(ConjugateGradient(), cb=2)
    assert np.isfinite(rec.full_residual)


def test_schur_solve_given_the_schur_operator_names_the_mistake():
    op = make("wilson")
    solver = pg.qcd.SchurRedBlackDiagMooeeSolve(ConjugateGradient(tol=1e-8))
    with pytest.raises(pg.ConformabilityError, match="takes the fermion operator itself"):
        solver(pg.qcd.SchurDiagMooeeOperator(op), source(op))


@pytest.mark.parametrize("kind", ["wilson", "dwf", "mobius"])
def test_schur_operator_equals_its_pieces(kind):
    """Mpc = Mooee - Meooe MooeeInv Meooe and its adjoint, as composed from the operator's pieces
    (the Schur operator ends with one kernel, the operator's Mooee psi - t), aliased out included."""
    op = make(kind)
    assert schur_pieces_differ(op, pg.pick_checkerboard(1, source(op)), out_is_input=True) < 1e-13
