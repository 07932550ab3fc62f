"""Nothing lost when something fails: ``out=`` of the Dirac operators, the solvers and ``into=`` of
the gauge readers.

A call that fails, with an exception or a KeyboardInterrupt, anywhere before its last kernel leaves
its destination as it was: the same bytes and the same checkerboard.  The faults are real: the
backend under test (``PYGRID_TEST_BACKEND``) has its kernel entry points (``run``, ``launch``,
``accelerator_for``, ``relayout``, and the launches ``bind_kernel`` and ``kept_launch`` return)
wrapped so that the N-th kernel of a call raises before it starts or after it finished, for every
N; the operator's answer is then checked against the one it gives without a fault.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest

import pygrid as pg
import pygrid.qcd  # noqa: F401  (pg.qcd)
from pygrid.accelerator import reductions_numba
from pygrid.algorithms import (
    BiCGStab,
    ConjugateGradient,
    MdagMOperator,
    MixedPrecisionConjugateGradient,
    ReliableUpdateConjugateGradient,
)
from pygrid.lattice import pick_checkerboard
from pygrid.qcd import dslash, unrolled_launch
from pygrid.qcd.schur import SchurOperator

MASS, M5, LS = 0.1, 1.8, 4
EXCEPTIONS = (RuntimeError, KeyboardInterrupt)


class Faults:
    """The backend's kernel entry points, counted; ``arm(n, when, exc)`` makes kernel n raise.

    Only outermost entries count: a backend method that calls another (``run`` through
    ``accelerator_for``) is one kernel.  ``when`` is 'before' (the kernel never starts) or 'after'
    (it ran to the end, and the failure comes before whatever follows it).
    """

    ENTRIES = ("run", "launch", "accelerator_for", "relayout")

    def __init__(self, monkeypatch):
        self.count, self._depth, self._at = 0, 0, None
        backend = pg.get_backend()
        for name in self.ENTRIES:
            monkeypatch.setattr(backend, name, self._wrap(getattr(backend, name)))
        # a kernel bound for repeated launches (the Dirac operators', the reductions') counts at each
        # launch; the launches bound before, by other tests, are forgotten so that every one goes
        # through here
        monkeypatch.setattr(backend, "bind_kernel", self._binder(backend.bind_kernel))
        if hasattr(backend, "kept_launch"):
            monkeypatch.setattr(backend, "kept_launch", self._binder(backend.kept_launch))
        monkeypatch.setattr(dslash, "_BOUND", {})          # and the Dirac calls kept with them
        monkeypatch.setattr(unrolled_launch, "_states", {})  # with the launches each state keeps
        monkeypatch.setattr(reductions_numba, "_KEPT", {})

    def _binder(self, bind):
        @functools.wraps(bind)
        def counted_launches(*args, **kwargs):
            launch = bind(*args, **kwargs)
            counted = self._wrap(launch)
            counted.again = self._wrap(launch.again)    # the launch on the bound arguments
            counted.prepared = lambda osites: self._wrap(launch.prepared(osites))   # and its kept form
            return counted
        return counted_launches

    def arm(self, n=None, when="before", exc=RuntimeError):
        self.count = 0
        self._at = None if n is None else (n, when, exc)

    def _fire(self, n, when):
        if self._at is not None and self._at[:2] == (n, when):
            self._at, exc = None, self._at[2]
            raise exc(f"fault injected {when} kernel {n}")

    def _wrap(self, entry):
        @functools.wraps(entry)
        def counted(*args, **kwargs):
            if self._depth:
                return entry(*args, **kwargs)
            self.count += 1
            n = self.count
            self._fire(n, "before")
            self._depth += 1
            try:
                result = entry(*args, **kwargs)
            finally:
                self._depth -= 1
            self._fire(n, "after")
            return result
        return counted


@pytest.fixture
def faults(monkeypatch):
    return Faults(monkeypatch)


# ---- fields ---------------------------------------------------------------------------

@functools.cache
def gauge():
    g = pg.GridCartesian([4, 4, 4, 4])
    return pg.qcd.random_gauge(g, pg.ParallelRNG(g, [1, 2, 3, 4]))


@functools.cache
def operator(kind):
    U = gauge()
    if kind == "wilson":
        return pg.qcd.WilsonFermion(U, MASS)
    if kind == "dwf":
        return pg.qcd.DomainWallFermion(U, LS, MASS, M5)
    return pg.qcd.MobiusFermion(U, LS, MASS, M5, 1.5, 0.5)


_seed = [0]


def gaussian(grid, cb=None):
    """A new random fermion on the full ``grid``, or its checkerboard ``cb`` on the red-black grid."""
    _seed[0] += 1
    f = pg.Lattice(grid, pg.SpinColourVector())
    pg.ParallelRNG(grid, [9, _seed[0]]).gaussian(f)
    return f if cb is None else pick_checkerboard(cb, f)


def snapshot(f):
    """The destination as the rule states it: the bytes of its buffer and its checkerboard."""
    with f.view(pg.ViewMode.CpuRead) as a:
        return a.tobytes(), f.checkerboard


def assert_untouched(f, before, what):
    now = snapshot(f)
    assert now[1] == before[1], f"{what}: checkerboard {before[1]} -> {now[1]}"
    assert now[0] == before[0], f"{what}: the destination's data changed"


# ---- the harness -------------------------------------------------------------------------

def check_atomic(faults, call, make_out, what):
    """``call(out)`` writes ``out`` (made fresh by ``make_out()``; it may be one of call's inputs):
    with a fault at every kernel of the call, out keeps its data and checkerboard; without one, it
    is the answer.  Returns the number of kernels of the call."""
    out = make_out()
    faults.arm()
    want = snapshot(call(out))
    kernels = faults.count
    assert kernels >= 1, f"{what}: no kernel seen; the fault injection does not reach it"
    for n in range(1, kernels + 1):
        for when in ("before", "after") if n < kernels else ("before",):
            for exc in EXCEPTIONS:
                out = make_out()
                before = snapshot(out)
                faults.arm(n, when, exc)
                with pytest.raises(exc, match="fault injected"):
                    call(out)
                assert_untouched(out, before, f"{what}, {exc.__name__} {when} kernel {n} of {kernels}")
                # the same field, no fault: the operator's scratch fields hold nothing stale
                faults.arm()
                got = snapshot(call(out))
                assert got == want, f"{what}: wrong answer after a {exc.__name__} {when} kernel {n}"
    return kernels


@pytest.fixture(params=["unroll", "generic"])
def variant(request):
    """The hopping kernel the operators launch (the hand-unrolled one exists on the CPU backends)."""
    if request.param == "unroll" and pg.get_backend().name not in pg.qcd.dslash.UNROLL_BACKENDS:
        pytest.skip("the hand-unrolled kernel runs on the CPU backends only")
    old = pg.config.current()
    pg.config.set_current(pg.config.make_config(old, dslash=request.param))
    yield request.param
    pg.config.set_current(old)


# ---- the Dirac operators ------------------------------------------------------------------

FULL = ("Dhop", "DhopDag", "M", "Mdag", "MdagM", "Mooee", "MooeeInv")
RB = ("Meooe", "MeooeDag", "DhopEO", "DhopOE", "Mooee", "MooeeDag", "MooeeInv", "MooeeInvDag", "Mdiag")
DWF_FULL = ("M5D", "M5Ddag", "Dminus")


def _cases(op):
    """(name, call(out), make_out) for every method with out=: out a field of its own, and out the
    input itself; a red-black out starts on the checkerboard the result does not have."""
    psi = gaussian(op.grid)
    odd = pick_checkerboard(1, gaussian(op.grid))
    even = pick_checkerboard(0, gaussian(op.grid))
    full = FULL + (DWF_FULL if isinstance(op, pg.qcd.MobiusFermion) else ())
    for name in full:
        fn = getattr(op, name)
        yield name, lambda out, fn=fn: fn(psi, out=out), lambda: gaussian(op.grid)
        yield name + "(out=psi)", lambda out, fn=fn: fn(out, out=out), lambda: psi.copy()
    for name in RB:
        fn = getattr(op, name)
        src = even if name == "DhopOE" else odd
        keeps_cb = name.startswith("Mooee") or name == "Mdiag"
        other = 1 - src.checkerboard if keeps_cb else src.checkerboard
        yield name, lambda out, fn=fn, src=src: fn(src, out=out), lambda o=other: gaussian(op.grid, o)
        yield name + "(out=psi)", lambda out, fn=fn: fn(out, out=out), lambda src=src: src.copy()


@pytest.mark.parametrize("kind", ["wilson", "dwf", "mobius"])
def test_operator_out_untouched_by_a_fault_at_any_kernel(kind, variant, faults):
    op = operator(kind)
    seen = {}
    for name, call, make_out in _cases(op):
        seen[name] = check_atomic(faults, call, make_out, f"{kind} {name} ({variant})")
    # the composed methods are where a second write into out could hide
    assert seen["MdagM"] >= 2 and seen["M"] >= (1 if kind == "wilson" else 2)
    if kind == "mobius":
        assert seen["Meooe"] >= 2 and seen["MeooeDag"] >= 2 and seen["Mdag"] >= 2


@pytest.mark.parametrize("kind", ["dwf", "mobius"])
def test_physical_fields_untouched_by_a_fault(kind, faults):
    op = operator(kind)
    psi5 = gaussian(op.grid)
    q = gaussian(op.grid4)
    check_atomic(faults, lambda out: op.physical_field(psi5, out=out), lambda: gaussian(op.grid4),
                 f"{kind} physical_field")
    check_atomic(faults, lambda out: op.import_physical_source(q, out=out), lambda: gaussian(op.grid),
                 f"{kind} import_physical_source")


@pytest.mark.parametrize("kind", ["wilson", "dwf", "mobius"])
def test_schur_operator_out_untouched_by_a_fault(kind, faults):
    op = operator(kind)
    S = SchurOperator(op, 1)
    odd = pick_checkerboard(1, gaussian(op.grid))
    b = gaussian(op.grid)
    for name in ("M", "Mdag", "MdagM"):
        fn = getattr(S, name)
        n = check_atomic(faults, lambda out, fn=fn: fn(odd, out=out), lambda: gaussian(op.grid, 0),
                         f"{kind} Schur {name}")
        # at least the two hops: Wilson's scalar diagonal folds into the second, domain wall's MooeeInv
        # into the first and its Mooee psi into the second; Mobius's M has a kernel of its own for
        # b + c S before its first hop (its Mdag takes b + c S^dag into the hops)
        assert n >= {"wilson": 2, "dwf": 2, "mobius": {"M": 3, "Mdag": 2, "MdagM": 5}[name]}[kind]
        check_atomic(faults, lambda out, fn=fn: fn(out, out=out), lambda: odd.copy(),
                     f"{kind} Schur {name}(out=psi)")
    check_atomic(faults, lambda out: S.reconstruct(b, odd, out=out), lambda: gaussian(op.grid),
                 f"{kind} Schur reconstruct")


def test_committing_restores_the_checkerboard_only_on_failure():
    from pygrid.qcd.fermion import committing

    f = gaussian(operator("wilson").grid, 0)
    with pytest.raises(KeyboardInterrupt), committing(f, 1):
        assert f.checkerboard == 1
        raise KeyboardInterrupt
    assert f.checkerboard == 0
    with committing(f, 1):
        pass
    assert f.checkerboard == 1


# ---- the solvers -------------------------------------------------------------------------------

class FlakyOperator:
    """``op`` whose M raises ``exc`` at its ``k``-th application (counted over ``op`` and its converted
    forms): the solver's own failure point."""

    def __init__(self, op, k, exc, applications=None):
        self.op, self.k, self.exc = op, k, exc
        self.applications = [0] if applications is None else applications
        self.flops_per_apply = getattr(op, "flops_per_apply", None)

    def M(self, x, out=None):
        self.applications[0] += 1
        if self.applications[0] == self.k:
            raise self.exc(f"fault injected in application {self.k}")
        return self.op.M(x, out=out)

    Mdag = M

    def converted(self, precision):
        return FlakyOperator(self.op.converted(precision), self.k, self.exc, self.applications)


def _solvers():
    quiet = dict(verbose=False)
    return {
        "cg": (lambda: ConjugateGradient(tol=1e-10, maxiter=40, **quiet), True),
        "bicgstab": (lambda: BiCGStab(tol=1e-10, maxiter=20, **quiet), False),
        "mixed_cg": (lambda: MixedPrecisionConjugateGradient(tol=1e-10, maxiter=40, **quiet), True),
        "reliable_cg": (lambda: ReliableUpdateConjugateGradient(tol=1e-10, maxiter=40, **quiet), True),
    }


@pytest.mark.parametrize("solver", ["cg", "bicgstab", "mixed_cg", "reliable_cg"])
def test_solver_leaves_source_and_guess_untouched(solver, faults):
    make, hermitian = _solvers()[solver]
    W = operator("wilson")
    A = MdagMOperator(W) if hermitian else W
    b, x0 = gaussian(W.grid), gaussian(W.grid)
    x0.assign(0.1 * x0)
    probe = FlakyOperator(A, 0, RuntimeError)
    assert make()(probe, b, x0)[1].iterations > 3
    # the reference from A itself: CG takes <p, A p> from A's apply_and_norm, which the probe hides
    want, _ = make()(A, b, x0)
    before = {"b": snapshot(b), "x0": snapshot(x0)}
    # a fault in the k-th operator application, early, mid-solve and late
    for k in (1, 2, 5, probe.applications[0]):
        for exc in EXCEPTIONS:
            with pytest.raises(exc, match="fault injected"):
                make()(FlakyOperator(A, k, exc), b, x0)
            for name, snap in before.items():
                assert_untouched(b if name == "b" else x0, snap, f"{solver}: {name} after a fault at {k}")
    # and at kernels of the solve anywhere (the reductions and linear algebra between the operators)
    faults.arm()
    make()(A, b, x0)
    total = faults.count
    for n in sorted({1, 2, total // 3, total // 2, total - 1}):
        faults.arm(n, "before", KeyboardInterrupt)
        with pytest.raises(KeyboardInterrupt):
            make()(A, b, x0)
        for name, snap in before.items():
            assert_untouched(b if name == "b" else x0, snap, f"{solver}: {name} after kernel {n} of {total}")
    faults.arm()
    x, _ = make()(A, b, x0)
    assert snapshot(x) == snapshot(want)


@pytest.mark.parametrize("kind", ["wilson", "mobius"])
def test_schur_solve_leaves_source_and_guess_untouched(kind, faults):
    op = operator(kind)
    b, x0 = gaussian(op.grid), gaussian(op.grid)
    cg = ConjugateGradient(tol=1e-8, maxiter=30, verbose=False)
    want, _ = pg.qcd.schur_solve(op, b, cg, x0=x0)
    before = {"b": snapshot(b), "x0": snapshot(x0)}
    faults.arm()
    pg.qcd.schur_solve(op, b, cg, x0=x0)
    total = faults.count
    for n in sorted({1, 3, total // 4, total // 2, total - 2, total}):
        for exc in EXCEPTIONS:
            faults.arm(n, "before", exc)
            with pytest.raises(exc):
                pg.qcd.schur_solve(op, b, cg, x0=x0)
            for name, snap in before.items():
                assert_untouched(b if name == "b" else x0, snap, f"schur {kind}: {name} after kernel {n}")
    faults.arm()
    x, _ = pg.qcd.schur_solve(op, b, cg, x0=x0)
    assert snapshot(x) == snapshot(want)


# ---- gauge reads into= -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def gauge_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("atomic_io")
    U = gauge()
    pg.io.write_nersc(d / "u.nersc", U)
    pg.io.write_ildg(d / "u.lime", U)
    return {"nersc": (pg.io.read_nersc, d / "u.nersc"), "ildg": (pg.io.read_ildg, d / "u.lime")}


def _dest():
    g = gauge().grid
    return pg.qcd.random_gauge(g, pg.ParallelRNG(g, [5, 6]))


@pytest.mark.parametrize("fmt", ["nersc", "ildg"])
def test_read_into_untouched_by_an_interrupted_progress_line(fmt, gauge_files, monkeypatch):
    read, path = gauge_files[fmt]
    dest = _dest()
    before = snapshot(dest)
    calls = []

    def interrupted(self, done):
        calls.append(done)
        raise KeyboardInterrupt

    monkeypatch.setattr(pg.io.progress.Progress, "update", interrupted)
    with pytest.raises(KeyboardInterrupt):
        read(path, into=dest, progress=True)
    assert calls
    assert_untouched(dest, before, f"read_{fmt} into=")
    monkeypatch.undo()
    read(path, into=dest)
    assert np.array_equal(dest.to_numpy(), gauge().to_numpy())


@pytest.mark.parametrize("fmt", ["nersc", "ildg"])
def test_read_into_untouched_by_an_interrupted_file_read(fmt, gauge_files, monkeypatch):
    from io_faults import InterruptedRead

    read, path = gauge_files[fmt]
    module = pg.io.nersc if fmt == "nersc" else pg.io.ildg
    size = path.stat().st_size
    dest = _dest()
    before = snapshot(dest)
    for limit in (0, size // 3, size - 8):
        monkeypatch.setattr(module, "open", InterruptedRead.opener(limit), raising=False)
        with pytest.raises(KeyboardInterrupt):
            read(path, into=dest)
        assert_untouched(dest, before, f"read_{fmt} into= interrupted after {limit} bytes")
    monkeypatch.undo()
    read(path, into=dest)
    assert np.array_equal(dest.to_numpy(), gauge().to_numpy())


@pytest.mark.parametrize("fmt", ["nersc", "ildg"])
def test_read_into_untouched_by_a_fault_at_any_kernel(fmt, gauge_files, faults):
    read, path = gauge_files[fmt]
    dest = _dest()
    before = snapshot(dest)
    faults.arm()
    read(path, into=_dest())
    total = faults.count
    assert total >= 1  # the checks of the plaquette and the link trace
    for n in range(1, total + 1):
        faults.arm(n, "before", KeyboardInterrupt)
        with pytest.raises(KeyboardInterrupt):
            read(path, into=dest)
        assert_untouched(dest, before, f"read_{fmt} into=, kernel {n} of {total}")
