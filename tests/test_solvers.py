"""Krylov solvers (pygrid.algorithms) on real lattice operators built with the expression engine.

Operators: a gauge-covariant lattice Laplacian plus mass on colour vectors (Hermitian positive
definite), the same with asymmetric forward/backward hopping (non-Hermitian), and a naive
Wilson-like operator on spinors (non-Hermitian). Solutions are checked against dense numpy
solves built independently from the gauge field.
"""
import logging
import math

import numpy as np
import pytest

import pygrid as pg
from pygrid.algorithms import (
    BiCGStab,
    ConjugateGradient,
    HermitianOperator,
    LinearOperator,
    MdagMOperator,
    MixedPrecisionConjugateGradient,
    ReliableUpdateConjugateGradient,
    SolverError,
    SolverRecord,
)
from pygrid.errors import PyGridError

DIMS = (4, 4, 4, 4)
MASS2 = 0.5
KAPPA_ASYM = 0.3


class Hopping:
    """A x = (m^2 + 8) x - sum_mu [(1+k) U_mu(x) x(x+mu) + (1-k) U_mu(x-mu)^dag x(x-mu)].

    k = 0: the gauge-covariant Laplacian plus mass, Hermitian positive definite.
    k != 0: non-Hermitian; its adjoint is the same operator with -k.
    Records the dtype of every field handed to M/Mdag (to check mixed precision).
    """

    def __init__(self, U, mass2=MASS2, k=0.0, precision="double"):
        self.U, self.mass2, self.k, self.precision = U, mass2, k, precision
        Ud = U if precision == "double" else pg.convert(U, precision)
        self.fwd = [pg.eval(pg.peek_lorentz(Ud, mu)) for mu in range(4)]
        self.bwd = [pg.eval(pg.cshift(pg.adj(f), mu, -1)) for mu, f in enumerate(self.fwd)]
        self.seen = []

    def _apply(self, x, out, k):
        self.seen.append(x.dtype)
        e = (self.mass2 + 8.0) * x
        for mu in range(4):
            e = e - (1.0 + k) * (self.fwd[mu] * pg.cshift(x, mu, 1)) \
                  - (1.0 - k) * (self.bwd[mu] * pg.cshift(x, mu, -1))
        if out is None:
            out = x.new_like()
        out @= e
        return out

    def M(self, x, out=None):
        return self._apply(x, out, self.k)

    def Mdag(self, x, out=None):
        return self._apply(x, out, -self.k)

    def converted(self, precision):
        return Hopping(self.U, self.mass2, self.k, precision)


def dense_hopping(U, mass2=MASS2, k=0.0):
    """The matrix of Hopping built directly in numpy from the links, indexed [site*3+a, site*3+b]."""
    u = U.to_numpy()  # [x,y,z,t,mu,a,b]
    V = int(np.prod(DIMS))
    idx = np.arange(V).reshape(DIMS)
    A = np.zeros((V, 3, V, 3), dtype=complex)
    for s in range(V):
        A[s, :, s, :] += (mass2 + 8.0) * np.eye(3)
    for mu in range(4):
        fwd = np.roll(idx, -1, axis=mu).reshape(-1)            # site x+mu at position x
        bwd = np.roll(idx, 1, axis=mu).reshape(-1)             # site x-mu at position x
        umu = u[..., mu, :, :].reshape(V, 3, 3)
        umu_back = np.roll(u[..., mu, :, :], 1, axis=mu).reshape(V, 3, 3)  # U_mu(x-mu)
        for s in range(V):
            A[s, :, fwd[s], :] -= (1.0 + k) * umu[s]
            A[s, :, bwd[s], :] -= (1.0 - k) * umu_back[s].conj().T
    return A.reshape(3 * V, 3 * V)


def vec(f):
    return f.to_numpy().reshape(-1)


def relres(op, x, b):
    r = pg.eval(b - op.M(x))
    return math.sqrt(pg.norm2(r) / pg.norm2(b))


@pytest.fixture(scope="module")
def grid():
    return pg.GridCartesian(list(DIMS))


@pytest.fixture(scope="module")
def gauge(grid):
    U = pg.LatticeGaugeField(grid)
    pg.ParallelRNG(grid, [11, 22, 33, 44]).random_su3(U)
    return U


@pytest.fixture(scope="module")
def source(grid):
    b = pg.LatticeColourVector(grid)
    pg.ParallelRNG(grid, [5, 6, 7, 8]).gaussian(b)
    return b


@pytest.fixture(scope="module")
def herm(gauge):
    return Hopping(gauge)


@pytest.fixture(scope="module")
def nonherm(gauge):
    return Hopping(gauge, k=KAPPA_ASYM)


@pytest.fixture(scope="module")
def dense_herm(gauge):
    return dense_hopping(gauge)


@pytest.fixture(scope="module")
def dense_nonherm(gauge):
    return dense_hopping(gauge, k=KAPPA_ASYM)


@pytest.fixture(scope="module")
def cg_solution(herm, source):
    return ConjugateGradient(tol=1e-10, maxiter=500, verbose="error")(herm, source)


# ---------------------------------------------------------------------------------------------
# the test operators themselves


def test_operators_match_dense(herm, nonherm, dense_herm, dense_nonherm, source):
    assert np.allclose(dense_herm, dense_herm.conj().T)
    assert (
        np.linalg.eigvalsh(dense_herm).min() >= MASS2 - 1e-10
    )  # positive definite: spectrum in [m^2, m^2+16]
    assert not np.allclose(dense_nonherm, dense_nonherm.conj().T)
    bv = vec(source)
    np.testing.assert_allclose(vec(herm.M(source)), dense_herm @ bv, rtol=0, atol=1e-11)
    np.testing.assert_allclose(vec(nonherm.M(source)), dense_nonherm @ bv, rtol=0, atol=1e-11)
    np.testing.assert_allclose(vec(nonherm.Mdag(source)), dense_nonherm.conj().T @ bv, rtol=0, atol=1e-11)


# ---------------------------------------------------------------------------------------------
# conjugate gradient


def test_cg_converges_and_matches_dense(cg_solution, herm, source, dense_herm):
    x, rec = cg_solution
    assert isinstance(rec, SolverRecord)
    assert rec.converged
    assert rec.true_residual < 1e-10
    assert relres(herm, x, source) < 1e-10          # recomputed here, independently of the record
    assert abs(relres(herm, x, source) - rec.true_residual) < 1e-12
    assert 5 < rec.iterations < 500
    assert len(rec.history) == rec.iterations
    assert rec.history[-1] < 1e-10
    assert rec.time > 0 and rec.flops > 0
    x_dense = np.linalg.solve(dense_herm, vec(source))
    err = np.linalg.norm(vec(x) - x_dense) / np.linalg.norm(x_dense)
    assert err < 1e-9


def test_cg_residual_history_decreases_overall(cg_solution):
    _, rec = cg_solution
    h = np.array(rec.history)
    assert np.all(np.isfinite(h))
    assert h[-1] < 1e-8 * h[0]
    # CG's residual is not monotone, but over every stretch of 10 iterations it falls
    for i in range(0, len(h) - 10, 10):
        assert h[i + 10] < h[i]


def test_cg_accepts_plain_function_and_linear_operator(herm, source, cg_solution):
    x_ref, rec_ref = cg_solution

    def A(x):  # a plain function returning a field
        return herm.M(x)

    for op in (A, LinearOperator(A, hermitian=True), HermitianOperator(herm)):
        x, rec = ConjugateGradient(tol=1e-10, maxiter=500, verbose="error")(op, source)
        assert rec.converged and rec.iterations == rec_ref.iterations
        assert pg.norm2(pg.eval(x - x_ref)) <= 1e-24 * pg.norm2(x_ref)


def test_linear_operator_returning_expression(gauge, source, herm):
    # the function returns a lazy expression (free-field Laplacian: no gauge links)
    def lap(x):
        e = (MASS2 + 8.0) * x
        for mu in range(4):
            e = e - pg.cshift(x, mu, 1) - pg.cshift(x, mu, -1)
        return e

    op = LinearOperator(lap, hermitian=True)
    x, rec = ConjugateGradient(tol=1e-10, maxiter=500, verbose="error")(op, source)
    assert rec.converged and rec.true_residual < 1e-10
    # check against the free Laplacian in momentum space
    p = [2 * np.pi * np.fft.fftfreq(L) for L in DIMS]
    P = np.meshgrid(*p, indexing="ij")
    lam = MASS2 + sum(2 - 2 * np.cos(q) for q in P)
    b = source.to_numpy()
    x_exact = np.fft.ifftn(np.fft.fftn(b, axes=(0, 1, 2, 3)) / lam[..., None], axes=(0, 1, 2, 3))
    assert np.linalg.norm(x.to_numpy() - x_exact) < 1e-9 * np.linalg.norm(x_exact)


def test_cg_initial_guess_honoured(cg_solution, herm, source):
    x_exact, _ = cg_solution
    x, rec = ConjugateGradient(tol=1e-8, maxiter=500, verbose="error")(herm, source, x0=x_exact)
    assert rec.converged and rec.iterations == 0 and rec.history == []
    assert rec.true_residual < 1e-8
    # a partial solution as guess: fewer iterations than from zero, and the guess is not modified
    x_part, _ = ConjugateGradient(tol=1e-3, maxiter=500, verbose="error")(herm, source)
    saved = x_part.to_numpy().copy()
    _, rec0 = ConjugateGradient(tol=1e-10, maxiter=500, verbose="error")(herm, source)
    x2, rec2 = ConjugateGradient(tol=1e-10, maxiter=500, verbose="error")(herm, source, x0=x_part)
    assert rec2.converged and rec2.true_residual < 1e-10
    assert rec2.iterations < rec0.iterations
    np.testing.assert_array_equal(x_part.to_numpy(), saved)


def test_cg_nonconvergence(herm, source):
    x, rec = ConjugateGradient(tol=1e-10, maxiter=3, verbose="error")(herm, source)
    assert not rec.converged and rec.iterations == 3 and len(rec.history) == 3
    assert rec.true_residual > 1e-10
    with pytest.raises(SolverError) as info:
        ConjugateGradient(tol=1e-10, maxiter=3, verbose="error", raise_on_fail=True)(herm, source)
    err = info.value
    assert isinstance(err, PyGridError)
    msg = str(err)
    assert "ConjugateGradient" in msg and "3 iterations" in msg and "1.000e-10" in msg
    assert err.iterations == 3 and err.tol == 1e-10 and err.residual > 1e-10
    assert not err.record.converged


def test_cg_zero_source(herm, grid):
    b = pg.LatticeColourVector(grid)
    x, rec = ConjugateGradient(tol=1e-10, verbose="error")(herm, b)
    assert rec.converged and rec.iterations == 0 and pg.norm2(x) == 0


def test_cg_logging(herm, source, caplog):
    caplog.set_level(logging.DEBUG, logger="pygrid.solver")
    _, rec = ConjugateGradient(tol=1e-10, maxiter=500, verbose="iterative", log_every=5)(herm, source)
    lines = [r.getMessage() for r in caplog.records if r.name == "pygrid.solver"]
    assert any(l.startswith("ConjugateGradient: iteration 10 residual") and l.endswith(" s") for l in lines)
    final = [l for l in lines if l.startswith(f"ConjugateGradient converged in {rec.iterations} iterations")]
    assert len(final) == 1 and "true residual" in final[0]
    # at 'message' only the summary; at 'warning' nothing
    caplog.clear()
    ConjugateGradient(tol=1e-10, maxiter=500, verbose="message")(herm, source)
    lines = [r.getMessage() for r in caplog.records if r.name == "pygrid.solver"]
    assert len(lines) == 1 and "converged" in lines[0]
    caplog.clear()
    ConjugateGradient(tol=1e-10, maxiter=500, verbose="warning")(herm, source)
    assert not [r for r in caplog.records if r.name == "pygrid.solver"]
    # non-convergence warns
    ConjugateGradient(tol=1e-10, maxiter=2, verbose="warning")(herm, source)
    warn = [r for r in caplog.records if r.name == "pygrid.solver"]
    assert (
        len(warn) == 1 and warn[0].levelno == logging.WARNING and "did not converge" in warn[0].getMessage()
    )


def test_cg_follows_pygrid_config_log_level(herm, source, caplog):
    import importlib

    cfgmod = importlib.import_module("pygrid.config")

    caplog.set_level(logging.DEBUG, logger="pygrid.solver")
    old = cfgmod.set_current(cfgmod.make_config(cfgmod.current(), log="error"))
    try:
        ConjugateGradient(tol=1e-10, maxiter=500)(herm, source)
        assert not [r for r in caplog.records if r.name == "pygrid.solver"]
        cfgmod.set_current(cfgmod.make_config(cfgmod.current(), log="message"))
        ConjugateGradient(tol=1e-10, maxiter=500)(herm, source)
        assert len([r for r in caplog.records if r.name == "pygrid.solver"]) == 1
    finally:
        cfgmod.set_current(old)


def test_cg_on_normal_operator(nonherm, source, dense_nonherm):
    # CG on Mdag M of the non-Hermitian operator (the normal equations)
    A = MdagMOperator(nonherm)
    x, rec = ConjugateGradient(tol=1e-10, maxiter=1000, verbose="error")(A, source)
    assert rec.converged and rec.true_residual < 1e-10
    D = dense_nonherm.conj().T @ dense_nonherm
    x_dense = np.linalg.solve(D, vec(source))
    assert np.linalg.norm(vec(x) - x_dense) < 1e-8 * np.linalg.norm(x_dense)


# ---------------------------------------------------------------------------------------------
# mixed precision


def test_mixed_precision_cg(herm, source, cg_solution):
    x_ref, rec_ref = cg_solution
    herm.seen.clear()
    mp = MixedPrecisionConjugateGradient(tol=1e-10, inner_tol=1e-5, maxiter=500, outer_maxiter=10,
                                         verbose="error")
    op_single = herm.converted("single")
    x, rec = mp(herm, source, op_single=op_single)
    n_double = len(herm.seen)
    assert rec.converged and rec.true_residual < 1e-10
    assert relres(herm, x, source) < 1e-10
    assert x.precision == "double"
    assert rec.outer_iterations >= 2 and len(rec.inner_iterations) == rec.outer_iterations
    assert rec.iterations == sum(rec.inner_iterations) > 0
    assert rec.history[-1] == rec.true_residual and rec.history[0] == pytest.approx(1.0)
    # the inner solves really ran in single precision, the outer ones in double
    assert len(op_single.seen) >= rec.iterations
    assert set(op_single.seen) == {np.dtype(np.complex64)}
    assert set(herm.seen) == {np.dtype(np.complex128)}
    assert n_double == rec.outer_iterations  # one true-residual application per outer step
    assert pg.norm2(pg.eval(x - x_ref)) < 1e-18 * pg.norm2(x_ref)


def test_mixed_precision_cg_uses_converted(nonherm, source, dense_nonherm):
    # op_single not given: taken from the operator protocol (MdagMOperator -> Hopping.converted)
    A = MdagMOperator(nonherm)
    x, rec = MixedPrecisionConjugateGradient(tol=1e-10, maxiter=1000, verbose="error")(A, source)
    assert rec.converged and rec.true_residual < 1e-10
    D = dense_nonherm.conj().T @ dense_nonherm
    x_dense = np.linalg.solve(D, vec(source))
    assert np.linalg.norm(vec(x) - x_dense) < 1e-8 * np.linalg.norm(x_dense)


def test_mixed_precision_failure(herm, source):
    mp = MixedPrecisionConjugateGradient(tol=1e-10, inner_tol=1e-2, maxiter=500, outer_maxiter=1,
                                         verbose="error", raise_on_fail=True)
    with pytest.raises(SolverError, match="MixedPrecisionConjugateGradient"):
        mp(herm, source, op_single=herm.converted("single"))
    # an operator with no single-precision version and no op_single: a clear error
    with pytest.raises(PyGridError, match="op_single"):
        MixedPrecisionConjugateGradient(verbose="error")(LinearOperator(herm.M, hermitian=True), source)


# ---------------------------------------------------------------------------------------------
# reliable updates


def test_reliable_update_cg(herm, source, cg_solution):
    x_ref, rec_ref = cg_solution
    herm.seen.clear()
    op_single = herm.converted("single")
    b_before = source.to_numpy()
    x, rec = ReliableUpdateConjugateGradient(tol=1e-10, verbose="error")(herm, source, op_single=op_single)
    # the Krylov iterations ran on the single operator; double only at the reliable updates
    assert set(op_single.seen) == {np.dtype(np.complex64)} and len(op_single.seen) == rec.iterations
    assert set(herm.seen) == {np.dtype(np.complex128)} and len(herm.seen) == rec.outer_iterations >= 2
    assert rec.converged and rec.true_residual < 1e-10 and relres(herm, x, source) < 1e-10
    assert x.precision == "double" and np.array_equal(source.to_numpy(), b_before)
    assert rec.operator_applications == rec.iterations + rec.outer_iterations
    assert len(rec.history) == rec.iterations
    # without restarts it keeps CG's search directions: about double CG's iteration count
    assert rec.iterations <= rec_ref.iterations + 3
    assert pg.norm2(pg.eval(x - x_ref)) < 1e-18 * pg.norm2(x_ref)


def test_reliable_updates_keep_what_restarts_lose(gauge, source):
    # near-singular: the mass^2 puts the lowest eigenvalue (from the dense matrix) at 1e-3, where
    # single precision's Krylov space drifts; restarts lose it at every correction
    lowest = np.linalg.eigvalsh(dense_hopping(gauge, mass2=0.0)).min()
    op = Hopping(gauge, mass2=1e-3 - lowest)
    _, ref = ConjugateGradient(tol=1e-10, maxiter=5000, verbose="error")(op, source)
    _, mp = MixedPrecisionConjugateGradient(tol=1e-10, inner_tol=1e-5, maxiter=5000, verbose="error")(
        op, source)
    x, ru = ReliableUpdateConjugateGradient(tol=1e-10, maxiter=5000, verbose="error")(op, source)
    assert ref.converged and mp.converged and ru.converged and relres(op, x, source) < 1e-10
    # on this lattice (768 unknowns) CG in double 121 iterations, restarted 216, reliable updates 187
    assert ru.iterations < min(0.9 * mp.iterations, 2 * ref.iterations) and ru.double_iterations == 0


def _handover(caplog, op, source, op_single=None, x0=None, tol=1e-10):
    caplog.clear()
    caplog.set_level(logging.INFO, logger="pygrid.solver")
    x, rec = ReliableUpdateConjugateGradient(tol=tol, maxiter=5000, verbose="message")(
        op, source, x0, op_single=op_single)
    said = [r.getMessage() for r in caplog.records if "ConjugateGradient in double goes on" in r.getMessage()]
    return x, rec, said


def test_reliable_update_cg_hands_over_to_double_where_single_cannot_follow(gauge, source, caplog):
    # each way single precision loses the system, and the solve still converges, in double
    lowest = np.linalg.eigvalsh(dense_hopping(gauge, mass2=0.0)).min()
    dense = {}

    def check(op, x, rec, said, why, start, tol=1e-10):
        assert rec.converged and relres(op, x, source) < tol and x.precision == "double"
        assert len(said) == 1 and why in said[0] and said[0].endswith(start), said
        key = op.mass2
        if key not in dense:
            dense[key] = np.linalg.solve(dense_hopping(gauge, mass2=key), vec(source))
        assert np.linalg.norm(vec(x) - dense[key]) < 1e4 * tol * np.linalg.norm(dense[key])
        # the CG in double ran on the double operator only, after the single iterations
        assert 0 < rec.double_iterations <= rec.iterations and len(rec.history) == rec.iterations

    # a single operator that is not positive definite: <p, A_s p> breaks down at once
    op = Hopping(gauge)
    x, rec, said = _handover(caplog, op, source, Hopping(gauge, mass2=-20.0, precision="single"))
    check(op, x, rec, said, "breakdown", "the solution so far")
    assert rec.double_iterations == rec.iterations
    # a single operator for another system: the iterated residual drifts from the true one
    x, rec, said = _handover(caplog, op, source, Hopping(gauge, mass2=MASS2 + 0.3, precision="single"))
    check(op, x, rec, said, "times the iterated one", "the solution so far")
    assert rec.double_iterations < rec.iterations
    # the lowest eigenvalue 1e-6 of a norm about 16: single precision's residual spikes and falls back
    # without getting anywhere (1e-5 still converges in single, in 490 iterations, double CG 134)
    op = Hopping(gauge, mass2=1e-6 - lowest)
    x, rec, said = _handover(caplog, op, source)
    check(op, x, rec, said, "has not fallen over 5 reliable updates", "the solution so far")
    # 1e-7: single precision's operator is not positive definite, after its iterations have grown x
    # beyond the start; CG in double starts again from the guess (none: zero), to 1e-8 (double's own
    # rounding stops near 5e-10 here)
    op = Hopping(gauge, mass2=1e-7 - lowest)
    x, rec, said = _handover(caplog, op, source, tol=1e-8)
    check(op, x, rec, said, "breakdown", "the guess", tol=1e-8)
    _, ref = ConjugateGradient(tol=1e-8, maxiter=5000, verbose="error")(op, source)
    assert rec.double_iterations <= ref.iterations + 5
    # from a guess given in single precision: CG in double starts from it, converted, and it is
    # only read
    x0 = pg.convert(pg.eval(1e-3 * source), "single")
    before = x0.to_numpy()
    x, rec, said = _handover(caplog, op, source, x0=x0, tol=1e-8)
    check(op, x, rec, said, "breakdown", "the guess", tol=1e-8)
    assert np.array_equal(x0.to_numpy(), before)
    # the restarted solver hands over too: its true residual stops falling between restarts
    caplog.clear()
    x, mp = MixedPrecisionConjugateGradient(tol=1e-8, maxiter=5000, verbose="message")(op, source)
    said = [r.getMessage() for r in caplog.records if "ConjugateGradient in double goes on" in r.getMessage()]
    assert mp.converged and relres(op, x, source) < 1e-8 and len(said) == 1, said
    assert 0 < mp.double_iterations <= ref.iterations + 5
    assert mp.iterations == sum(mp.inner_iterations) + mp.double_iterations
    assert mp.history[-1] == mp.true_residual
    # 1e-8 to 1e-10: not even double precision gets there (CG's iterated residual does, its true one
    # stays near 1e-8): not converged, and said
    op = Hopping(gauge, mass2=1e-8 - lowest)
    x, rec, said = _handover(caplog, op, source)
    assert not rec.converged and rec.true_residual == pytest.approx(relres(op, x, source), rel=1e-3)
    assert rec.true_residual > 1e-9 and len(said) == 1


def test_reliable_update_cg_from_a_guess_and_through_the_protocol(nonherm, source, dense_nonherm, cg_solution,
                                                                  herm):
    A = MdagMOperator(nonherm)          # op_single from A.converted('single')
    x, rec = ReliableUpdateConjugateGradient(tol=1e-10, verbose="error")(A, source)
    D = dense_nonherm.conj().T @ dense_nonherm
    x_dense = np.linalg.solve(D, vec(source))
    assert rec.converged and np.linalg.norm(vec(x) - x_dense) < 1e-8 * np.linalg.norm(x_dense)
    # a guess close to the solution: few iterations, and the guess itself untouched
    x_ref = cg_solution[0]
    x0 = pg.eval(x_ref * (1.0 + 1e-6))
    before = x0.to_numpy()
    x, rec = ReliableUpdateConjugateGradient(tol=1e-10, verbose="error")(herm, source, x0)
    assert rec.converged and rec.iterations < cg_solution[1].iterations // 2
    assert np.array_equal(x0.to_numpy(), before) and relres(herm, x, source) < 1e-10


def test_reliable_update_cg_failures(herm, source):
    ru = ReliableUpdateConjugateGradient(tol=1e-10, maxiter=5, verbose="error", raise_on_fail=True)
    with pytest.raises(SolverError, match="ReliableUpdateConjugateGradient"):
        ru(herm, source)
    # out of iterations: the steps since the last update are in the returned solution
    x, rec = ReliableUpdateConjugateGradient(tol=1e-10, maxiter=5, verbose="error")(herm, source)
    assert not rec.converged and rec.true_residual == pytest.approx(relres(herm, x, source), rel=1e-6)
    assert rec.true_residual < 0.5
    with pytest.raises(PyGridError, match="op_single"):
        ReliableUpdateConjugateGradient(verbose="error")(LinearOperator(herm.M, hermitian=True), source)
    for bad in ({"delta": 0.0}, {"delta": 1.0}, {"max_stalls": 0}, {"max_drift": 1.0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            ReliableUpdateConjugateGradient(**bad)


def test_reliable_update_cg_zero_source(herm, grid):
    b = pg.LatticeColourVector(grid)
    b.fill(0)
    x, rec = ReliableUpdateConjugateGradient(verbose="error")(herm, b)
    assert rec.converged and rec.iterations == 0 and pg.norm2(x) == 0.0


# ---------------------------------------------------------------------------------------------
# BiCGStab


def test_bicgstab_nonhermitian_matches_dense(nonherm, source, dense_nonherm):
    x, rec = BiCGStab(tol=1e-10, maxiter=500, verbose="error")(nonherm, source)
    assert rec.converged and rec.true_residual < 1e-10
    assert relres(nonherm, x, source) < 1e-10
    assert len(rec.history) == rec.iterations > 0
    x_dense = np.linalg.solve(dense_nonherm, vec(source))
    assert np.linalg.norm(vec(x) - x_dense) < 1e-9 * np.linalg.norm(x_dense)
    # initial guess honoured
    _, rec0 = BiCGStab(tol=1e-8, verbose="error")(nonherm, source, x0=x)
    assert rec0.converged and rec0.iterations == 0


def test_bicgstab_nonconvergence(nonherm, source):
    _, rec = BiCGStab(tol=1e-10, maxiter=3, verbose="error")(nonherm, source)
    assert not rec.converged and rec.iterations == 3
    with pytest.raises(SolverError, match=r"BiCGStab did not converge.*3 iterations.*tolerance 1.000e-10"):
        BiCGStab(tol=1e-10, maxiter=3, verbose="error", raise_on_fail=True)(nonherm, source)


@pytest.mark.slow  # ~40 s the first time only: compiling the spinor kernel; ~1 s from the kernel cache
def test_bicgstab_wilson_like_spinor_operator(grid, gauge):
    """Naive Wilson operator on spinors (gamma-weighted hopping), checked against numpy (np.roll, einsum)."""
    mass = 0.3
    links = [pg.eval(pg.peek_lorentz(gauge, mu)) for mu in range(4)]
    back = [pg.eval(pg.cshift(pg.adj(u), mu, -1)) for mu, u in enumerate(links)]
    one = pg.Gamma.Identity

    def M(psi):
        e = (4.0 + mass) * psi
        for mu in range(4):
            g = pg.Gamma.mu[mu]
            e = e - 0.5 * ((one - g) * (links[mu] * pg.cshift(psi, mu, 1))
                           + (one + g) * (back[mu] * pg.cshift(psi, mu, -1)))
        return e

    b = pg.LatticeFermion(grid)
    pg.ParallelRNG(grid, [9, 8, 7, 6]).gaussian(b)
    x, rec = BiCGStab(tol=1e-10, maxiter=500, verbose="error")(LinearOperator(M), b)
    assert rec.converged and rec.true_residual < 1e-10
    # independent numpy application of the operator to the solution reproduces b
    gam = [np.asarray(pg.Gamma.mu[mu].values if hasattr(pg.Gamma.mu[mu], "values") else
                      pg.Gamma.mu[mu], dtype=complex).reshape(4, 4) for mu in range(4)]
    u = gauge.to_numpy()
    xs = x.to_numpy()  # [x,y,z,t,spin,colour]
    out = (4.0 + mass) * xs
    I4 = np.eye(4)
    for mu in range(4):
        umu = u[..., mu, :, :]
        f = np.einsum("...ab,...sb->...sa", umu, np.roll(xs, -1, axis=mu))
        bk = np.einsum("...ba,...sb->...sa", np.roll(umu, 1, axis=mu).conj(), np.roll(xs, 1, axis=mu))
        out -= 0.5 * (
            np.einsum("st,...tc->...sc", I4 - gam[mu], f) + np.einsum("st,...tc->...sc", I4 + gam[mu], bk)
        )
    bn = b.to_numpy()
    assert np.linalg.norm(out - bn) < 1e-9 * np.linalg.norm(bn)


def test_whether_an_operator_takes_out_is_kept_per_function():
    """apply_M asks whether M accepts out= at every application; the answer is kept per function,
    so two wrappers sharing one code object (functools.wraps) still get their own."""
    import functools

    from pygrid.algorithms.operators import _takes_out

    def wrapped(f):
        @functools.wraps(f)
        def w(*a, **k):
            return f(*a, **k)
        return w

    @wrapped
    def with_out(x, out=None):
        return x

    @wrapped
    def without_out(x):
        return x

    class Op:
        def M(self, x, out=None):
            return x

        def Mdag(self, x):
            return x

    for _ in range(2):
        assert _takes_out(with_out) and not _takes_out(without_out)
        assert _takes_out(Op().M) and not _takes_out(Op().Mdag)
        assert not _takes_out(len)      # no signature to read
