"""Expressions, one by one: arithmetic, in-place assignment (with aliasing),
peek/poke, traces, outer and inner products, where, gamma matrices; each
checked on both backends and against a numpy formula on to_numpy() arrays."""
import numpy as np
import pytest
from conftest import GAMMA, assert_close, check_both, grid, pool_field, random_field, roll, spin_mul

import pygrid as pg

EIN_MM = "xyztab,xyztbc->xyztac"
EIN_MV = "xyztab,xyztsb->xyztsa"


@pytest.fixture
def fields():
    g = grid((4, 4, 4, 4))
    U = random_field(g, pg.ColourMatrix(), kind="su3")
    psi = random_field(g, pg.SpinColourVector())
    chi = random_field(g, pg.SpinColourVector())
    return g, U, psi, chi


def test_issue_example(fields):
    g, U, psi, _ = fields
    ua, pa = U.to_numpy(), psi.to_numpy()
    chi = pg.eval(U * psi + 0.5 * pg.cshift(psi, 3, -1))
    want = np.einsum(EIN_MV, ua, pa) + 0.5 * roll(pa, 3, -1)
    assert_close(chi.to_numpy(), want)
    chi @= pg.adj(U) * chi
    want = np.einsum("xyztba,xyztsb->xyztsa", ua.conj(), want)
    assert_close(chi.to_numpy(), want)
    # SU(3): U^dag U = 1, so this is psi + 0.5 U^dag psi(x - t)
    assert_close(
        chi.to_numpy(), pa + 0.5 * np.einsum("xyztba,xyztsb->xyztsa", ua.conj(), roll(pa, 3, -1)), scale=10
    )
    assert_close(pg.norm2(chi), np.vdot(want, want).real, scale=abs(pg.norm2(chi)))


def test_linear_combinations_real_and_complex_numbers(fields):
    _, _, psi, chi = fields
    pa, ca = psi.to_numpy(), chi.to_numpy()
    check_both(
        2 * psi - chi / 4 + (0.5 - 1.5j) * chi - psi * 3j, want=2 * pa - ca / 4 + (0.5 - 1.5j) * ca - 3j * pa
    )
    check_both(-psi + chi, want=-pa + ca)
    check_both(np.float64(2.5) * psi + np.complex128(1j) * chi, want=2.5 * pa + 1j * ca)


def test_number_plus_matrix_means_unit_matrix(fields):
    _, U, _, _ = fields
    ua = U.to_numpy()
    check_both(2.0 + U, want=ua + 2.0 * np.eye(3))
    check_both(U - 1j, want=ua - 1j * np.eye(3))
    g = U.grid
    P = pool_field(g, pg.SpinColourMatrix(), "double")
    check_both(1 - P, want=np.eye(12).reshape(4, 3, 4, 3).transpose(0, 2, 1, 3) - P.to_numpy())


def test_in_place_aliasing_unshifted(fields):
    _, U, _, chi = fields
    ua, ca = U.to_numpy(), chi.to_numpy()
    chi @= pg.adj(U) * chi
    assert_close(chi.to_numpy(), np.einsum("xyztba,xyztsb->xyztsa", ua.conj(), ca))
    V = U.copy()
    V @= V * V + pg.adj(V)
    assert_close(V.to_numpy(), np.einsum(EIN_MM, ua, ua) + np.swapaxes(ua.conj(), -1, -2))


def test_in_place_shifted_aliasing(fields):
    _, _, psi, _ = fields
    pa = psi.to_numpy()
    psi @= pg.cshift(psi, 0, 1)
    assert np.array_equal(psi.to_numpy(), roll(pa, 0, 1))
    psi @= psi + pg.cshift(psi, 3, -1)
    p1 = roll(pa, 0, 1)
    assert_close(psi.to_numpy(), p1 + roll(p1, 3, -1))


def test_augmented_assignment(fields):
    _, U, psi, chi = fields
    pa, ca, ua = psi.to_numpy(), chi.to_numpy(), U.to_numpy()
    x = psi.copy()
    x += chi
    assert_close(x.to_numpy(), pa + ca)
    x -= 2 * psi
    assert_close(x.to_numpy(), ca - pa)
    x *= 1.5j
    assert_close(x.to_numpy(), 1.5j * (ca - pa))
    y = psi.copy()
    y.assign(U * y)
    assert_close(y.to_numpy(), np.einsum(EIN_MV, ua, pa))
    assert np.array_equal(psi.to_numpy(), pa)  # copy() is a copy


def test_matrix_products_and_unary_ops(fields):
    g, U, _, _ = fields
    V = pool_field(g, pg.ColourMatrix(), "double")
    ua, va = U.to_numpy(), V.to_numpy()
    check_both(U * V * pg.adj(U), want=np.einsum("xyztab,xyztbc,xyztdc->xyztad", ua, va, ua.conj()))
    check_both(pg.conjugate(V) + pg.transpose(U), want=va.conj() + np.swapaxes(ua, -1, -2))
    c = check_both(pg.trace(U * V), want=np.einsum("xyztab,xyztba->xyzt", ua, va))
    assert c.shape == (4, 4, 4, 4)
    # adj(U) U = 1 on SU(3)
    check_both(pg.adj(U) * U, want=np.broadcast_to(np.eye(3), ua.shape), scale=10)


def test_complex_field_times_anything(fields):
    g, U, psi, _ = fields
    c = pool_field(g, pg.Complex, "double")
    r = pool_field(g, pg.Real, "double")
    ca, ra, pa = c.to_numpy(), r.to_numpy(), psi.to_numpy()
    assert r.to_numpy().dtype == np.float64
    check_both(c * psi + psi * r, want=ca[..., None, None] * pa + pa * ra[..., None, None])
    rr = pg.eval(r * r + 1.0)
    assert rr.site_type.is_real and rr.to_numpy().dtype == np.float64
    assert_close(rr.to_numpy(), ra * ra + 1)


def test_propagator_traces(fields):
    g, U, _, _ = fields
    P = pool_field(g, pg.SpinColourMatrix(), "double")
    pa = P.to_numpy()  # [x, y, z, t, s, s', c, c']
    ts = check_both(pg.trace_spin(P), want=np.einsum("...ssab->...ab", pa))
    assert ts.shape == (4, 4, 4, 4, 3, 3)
    tc = check_both(pg.trace_colour(P), want=np.einsum("...staa->...st", pa))
    assert tc.shape == (4, 4, 4, 4, 4, 4)
    check_both(pg.trace(P), want=np.einsum("...ssaa->...", pa))
    # trace(g5 P g5) = trace(P)
    check_both(pg.trace(pg.Gamma.Five * P * pg.Gamma.Five), want=np.einsum("...ssaa->...", pa))
    # U * P acts on colour only
    check_both(U * P, want=np.einsum("...ab,...stbc->...stac", U.to_numpy(), pa))
    check_both(pg.adj(P), want=pa.conj().transpose(0, 1, 2, 3, 5, 4, 7, 6))
    check_both(pg.transpose_colour(P), want=pa.swapaxes(-1, -2))


def test_peek_and_poke(fields):
    g = fields[0]
    Ug = random_field(g, pg.LorentzColourMatrix(), kind="su3")
    ua = Ug.to_numpy()
    for mu in range(4):
        check_both(pg.peek_lorentz(Ug, mu), want=ua[..., mu, :, :])
    psi = fields[2]
    pa = psi.to_numpy()
    check_both(pg.peek_spin(psi, 2), want=pa[..., 2, :])
    check_both(pg.peek_colour(psi, 1), want=pa[..., 1])
    P = pool_field(g, pg.SpinColourMatrix(), "double")
    check_both(pg.peek_index(P, "spin", 1, 3), want=P.to_numpy()[..., 1, 3, :, :])
    # poke: replace one direction of the gauge field
    V = random_field(g, pg.ColourMatrix())
    W = Ug.copy()
    pg.poke_lorentz(W, V, 2)
    want = ua.copy()
    want[..., 2, :, :] = V.to_numpy()
    assert np.array_equal(W.to_numpy(), want)
    # poke an expression into a spin component
    f = psi.copy()
    pg.poke_spin(f, 2.0 * pg.peek_spin(psi, 0), 3)
    want = pa.copy()
    want[..., 3, :] = 2.0 * pa[..., 0, :]
    assert_close(f.to_numpy(), want)


def test_outer_and_local_inner_product(fields):
    g, _, psi, chi = fields
    pa, ca = psi.to_numpy(), chi.to_numpy()
    check_both(pg.local_inner_product(psi, chi), want=np.einsum("xyztsa,xyztsa->xyzt", pa.conj(), ca))
    op = check_both(pg.outer_product(psi, chi), want=np.einsum("xyztsa,xyztrb->xyztsrab", pa, ca.conj()))
    assert op.shape == (4, 4, 4, 4, 4, 4, 3, 3)
    v = pool_field(g, pg.ColourVector(), "double")
    va = v.to_numpy()
    check_both(pg.outer_product(v, v), want=np.einsum("xyzta,xyztb->xyztab", va, va.conj()))
    lip = pg.eval(pg.local_inner_product(psi, psi)).to_numpy()
    assert_close(lip.sum(), pg.norm2(psi), scale=pg.norm2(psi))


def test_where_with_coordinate_masks(fields):
    g, U, psi, chi = fields
    pa, ca = psi.to_numpy(), chi.to_numpy()
    t = np.indices(g.lshape)[3]
    two = pg.eval(0 * pg.coordinate(g, 3) + 2.0)  # a field as the bound; numbers in the next test
    check_both(pg.where(pg.coordinate(g, 3) < two, psi, chi),
               want=np.where((t < 2)[..., None, None], pa, ca))
    x = np.indices(g.lshape)[0]
    check_both(pg.where(pg.coordinate(g, 0) >= pg.coordinate(g, 1), psi, 2 * chi),
               want=np.where((x >= np.indices(g.lshape)[1])[..., None, None], pa, 2 * ca))
    r = pool_field(g, pg.Real, "double")
    check_both(pg.where(r, U, pg.adj(U)), want=np.where((r.to_numpy() != 0)[..., None, None], U.to_numpy(),
                                                          np.swapaxes(U.to_numpy().conj(), -1, -2)))


def test_where_compare_with_number(fields):
    g, _, psi, chi = fields
    t = np.indices(g.lshape)[3]
    check_both(pg.where(pg.coordinate(g, 3) < 2, psi, chi),
               want=np.where((t < 2)[..., None, None], psi.to_numpy(), chi.to_numpy()))


def test_coordinate(fields):
    g = fields[0]
    for mu in range(4):
        c = pg.coordinate(g, mu).to_numpy()
        assert c.dtype == np.float64
        assert np.array_equal(c, np.indices(g.lshape)[mu])
    rb = g.red_black
    for cb in (0, 1):
        full = np.zeros(g.lshape)
        h = pg.coordinate(rb, 0, checkerboard=cb)
        ff = pg.Lattice(g, pg.Real)
        pg.set_checkerboard(ff, h)
        idx = np.indices(g.lshape)
        par = idx.sum(axis=0) % 2 == cb
        full[par] = idx[0][par]
        assert np.array_equal(ff.to_numpy(), full)


def test_gamma_algebra_constants():
    I4 = np.eye(4)
    for mu in range(4):
        for nu in range(4):
            a = GAMMA["XYZT"[mu]] @ GAMMA["XYZT"[nu]] + GAMMA["XYZT"[nu]] @ GAMMA["XYZT"[mu]]
            assert np.allclose(a, 2 * I4 * (mu == nu))
            c = (pg.Gamma.mu[mu] * pg.Gamma.mu[nu] + pg.Gamma.mu[nu] * pg.Gamma.mu[mu]).array()
            assert np.allclose(c, 2 * I4 * (mu == nu))
    five = (pg.Gamma.X * pg.Gamma.Y * pg.Gamma.Z * pg.Gamma.T).array()
    assert np.allclose(five, pg.Gamma.Five.array())
    assert np.allclose(pg.Gamma.Five.array(), np.diag([1, 1, -1, -1]))
    # Grid's chiral basis (docs/conventions.md)
    assert np.allclose(GAMMA["X"], [[0, 0, 0, 1j], [0, 0, 1j, 0], [0, -1j, 0, 0], [-1j, 0, 0, 0]])
    assert np.allclose(GAMMA["T"], [[0, 0, 1, 0], [0, 0, 0, 1], [1, 0, 0, 0], [0, 1, 0, 0]])
    assert np.allclose((1 - pg.Gamma.X).array(), I4 - GAMMA["X"])
    assert np.allclose((pg.Gamma.X * pg.Gamma.Five).array(), GAMMA["X"] @ GAMMA["Five"])


def test_gamma_on_fields(fields):
    g, _, psi, _ = fields
    pa = psi.to_numpy()
    for mu in range(4):
        G = GAMMA["XYZT"[mu]]
        check_both(pg.Gamma.mu[mu] * psi, want=spin_mul(G, pa, 4))
    # g5 = X Y Z T on a field; anticommutation {g_mu, g_nu} psi = 2 delta psi
    check_both(
        pg.Gamma.X * (pg.Gamma.Y * (pg.Gamma.Z * (pg.Gamma.T * psi))), want=spin_mul(GAMMA["Five"], pa, 4)
    )
    for mu, nu in [(0, 0), (0, 1), (2, 3), (3, 3)]:
        e = pg.Gamma.mu[mu] * (pg.Gamma.mu[nu] * psi) + pg.Gamma.mu[nu] * (pg.Gamma.mu[mu] * psi)
        check_both(e, want=2 * pa * (mu == nu))
    P = pool_field(g, pg.SpinColourMatrix(), "double")
    pp = P.to_numpy()
    right = np.einsum("xyztsrab,rq->xyztsqab", pp, GAMMA["Five"] @ GAMMA["Y"])
    check_both(P * (pg.Gamma.Five * pg.Gamma.Y), want=right)
    check_both((1 + pg.Gamma.Five) * psi * 0.5, want=0.5 * (pa + spin_mul(GAMMA["Five"], pa, 4)))


def test_threads_do_not_change_results(fields):
    import numba

    _, U, psi, _ = fields
    e = U * pg.cshift(psi, 1, 1) + pg.adj(U) * pg.cshift(psi, 2, -1)
    n0 = numba.get_num_threads()
    try:
        res = []
        for n in sorted({1, min(2, numba.config.NUMBA_NUM_THREADS)}):
            numba.set_num_threads(n)
            res.append(pg.eval(e).to_numpy())
    finally:
        numba.set_num_threads(n0)
    assert all(np.array_equal(res[0], r) for r in res)


def test_eval_of_field_copies(fields):
    _, _, psi, _ = fields
    c = pg.eval(psi)
    assert c is not psi and np.array_equal(c.to_numpy(), psi.to_numpy())


def test_gamma_matrices_are_designs_chiral_basis():
    from numpy_refs import GAMMA_5, GAMMA_MU

    for mu, g in enumerate(GAMMA_MU):
        np.testing.assert_array_equal(pg.Gamma.mu[mu].array(), g)
    np.testing.assert_array_equal(pg.Gamma.Five.array(), GAMMA_5)


def test_trace_of_a_field_without_matrix_levels_is_an_error():
    psi = pg.LatticeFermion(grid())
    with pytest.raises(pg.SiteTypeError, match="SpinColourVector: it has no matrix level to trace"):
        pg.trace(psi)
    assert pg.trace(pg.LatticeComplex(grid())).site_type == pg.LatticeComplex(grid()).site_type


def test_openmp_kept_runs_follow_contents_and_coefficients(monkeypatch):
    """A run of an expression shape on buffers seen before (a solver's axpy) reuses the launch
    kept from the first, with the coefficients written into it each time: results against numpy
    as both change; another thread holding the kept launch, or another thread count, takes the
    unkept path; the entry goes with its buffer."""
    import gc
    import weakref

    from conftest import backend

    with backend("openmp"):
        be = pg.get_backend()
        g = pg.GridCartesian((4, 4, 4, 8))
        x, p = pg.LatticeFermion(g), pg.LatticeFermion(g)
        for seed, a in ((1, 0.5), (2, -1.25 + 0.5j), (3, 2.0)):
            pg.ParallelRNG(g, [seed, 2, 3, 4]).gaussian(x)
            pg.ParallelRNG(g, [seed, 5, 6, 7]).gaussian(p)
            want = x.to_numpy() + a * p.to_numpy()
            x @= x + a * p
            np.testing.assert_allclose(x.to_numpy(), want, rtol=1e-13, atol=1e-13)
        (key, kept), = [(k, v) for k, v in be._kept_runs.items() if v.refs[0]() is not None
                        and v.osites == x.grid.osites and len(v.refs) == 3]
        calls = []
        # the kept launch writes its coefficients before it runs, whoever runs it (the backend's run,
        # or a kept evaluation through its memory.KeptLaunch)
        cls, ref = type(kept), weakref.ref(kept)
        monkeypatch.setattr(cls, "set_coefficients", lambda self, c, _s=cls.set_coefficients: (
            calls.append(1) if self is ref() else None) or _s(self, c))
        want = x.to_numpy() + 0.75 * p.to_numpy()
        x @= x + 0.75 * p
        np.testing.assert_allclose(x.to_numpy(), want, rtol=1e-13, atol=1e-13)
        assert calls == [1]
        assert kept.lock.acquire(False)      # as another thread's run holds it
        try:
            want = x.to_numpy() - 0.5 * p.to_numpy()
            x @= x - 0.5 * p
            np.testing.assert_allclose(x.to_numpy(), want, rtol=1e-13, atol=1e-13)
            assert calls == [1]
        finally:
            kept.lock.release()
        buffer = weakref.ref(kept.refs[2]())
        del x, p, kept
        monkeypatch.undo()
        gc.collect()
        live = pg.LatticeFermion(g)
        with live.view(pg.CpuRead):      # the manager frees the dead fields' buffers at the next open
            pass
        gc.collect()
        assert buffer() is not None or key not in be._kept_runs
        if pg.memory.get_manager().device.name == "unified":
            assert buffer() is None and key not in be._kept_runs


def _kept_hits(monkeypatch):
    """A list that gets a 1 for each evaluation the kept path served (or raised in), a 0 for each
    it handed to the checked path."""
    from pygrid.expr import evaluate as ev

    hits, call = [], ev.KeptEvaluation.run

    def counted(self, *args):
        served = True
        try:
            served = call(self, *args)
            return served
        finally:
            hits.append(int(served))

    monkeypatch.setattr(ev.KeptEvaluation, "run", counted)
    return hits


def test_kept_evaluations_follow_contents_coefficients_and_checkerboards(monkeypatch):
    """An expression shape evaluated again into the same field from the same fields takes the kept
    path, on the fields' current contents and coefficients (against numpy); a shifted field whose
    checkerboard changed since, or out's, takes the checked path (other shift tables)."""
    hits = _kept_hits(monkeypatch)
    g = grid((8, 4, 4, 8))
    x, y, z = (random_field(g, pg.SpinColourVector(), seed=s) for s in (11, 12, 13))
    for seed, a in ((1, 0.5), (2, -1.25 + 0.5j), (3, 2.0)):
        pg.ParallelRNG(g, [seed, 2]).gaussian(x)
        pg.ParallelRNG(g, [seed, 3]).gaussian(y)
        z @= a * x - pg.cshift(y, 1, -1)
        assert_close(z.to_numpy(), a * x.to_numpy() - roll(y.to_numpy(), 1, -1))
    assert hits == [1, 1]
    full = random_field(g, pg.ColourVector(), seed=14)
    h = pg.pick_checkerboard(0, full)
    o = pg.pick_checkerboard(1, random_field(g, pg.ColourVector(), seed=15))
    for _ in range(2):
        o @= 2.0 * pg.cshift(h, 0, 1) + o
    assert hits[2:] == [1]
    # the same buffers read as the other checkerboard: a shift of other parity
    h.checkerboard, o.checkerboard = 1, 0
    before = o.to_numpy()
    o @= 2.0 * pg.cshift(h, 0, 1) + o
    assert hits[3:] == [0]
    o2 = pg.pick_checkerboard(0, random_field(g, pg.ColourVector(), seed=15))
    want = pg.eval(2.0 * pg.cshift(h, 0, 1)).to_numpy() + before
    del o2
    assert_close(o.to_numpy(), want)


def test_a_kept_evaluation_runs_the_backends_kept_launch_with_nothing_between(monkeypatch):
    """On a unified device with a backend that keeps its runs (``kept_run``, openmp), an expression
    evaluated again into the same field runs that launch through a ``memory.KeptLaunch``: neither
    the views' opens nor the backend's run, with each evaluation's coefficients; after the thread
    count changes the launch is refused and the checked paths give the same results."""
    from pygrid.expr import evaluate as ev

    b = pg.get_backend()
    if not hasattr(b, "kept_run") or not pg.memory.get_manager().device.unified:
        pytest.skip("a backend that keeps its runs, on a unified device")
    g = grid((4, 4, 4, 8))
    x, y = random_field(g, pg.SpinColourVector(), seed=31), random_field(g, pg.SpinColourVector(), seed=32)
    z = pg.LatticeFermion(g)
    z @= 0.3 * x + y
    (kept,) = [k for k in ev._kept.values() if k.refs[0]() is z]
    assert kept.gate is not None
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pg.memory.Views, "run_on", lambda *a: pytest.fail("the views were opened"))
        mp.setattr(b, "run", lambda *a, **k: pytest.fail("the backend's run ran"))
        for a in (-1.25 + 0.5j, 2.0, np.float32(0.5)):
            z @= a * x + y
            assert_close(z.to_numpy(), a * x.to_numpy() + y.to_numpy())
    threads = b.threads()
    if threads > 1:
        monkeypatch.setattr(b, "min_parallel_bytes", 0)
        try:
            b.set_threads(1)
            assert kept.bound.again(kept.gate, (0.7,)) is None
            z @= 0.7 * x + y
            assert_close(z.to_numpy(), 0.7 * x.to_numpy() + y.to_numpy())
        finally:
            b.set_threads(threads)


def test_a_kept_evaluation_whose_views_give_other_buffers_takes_the_checked_path(monkeypatch):
    """Where the views hand out other buffers than the kept ones (a device cache that moved a
    field), the kept path writes nothing, and its views close as after a failure, so that a
    checked path that fails then leaves out as it was (on a device, a write view that discarded
    out's contents would otherwise have lost them)."""
    from pygrid.expr import evaluate as ev

    g = grid((4, 4, 4, 8))
    x, z = random_field(g, pg.SpinColourVector(), seed=21), random_field(g, pg.SpinColourVector(), seed=22)
    z @= 3.0 * x
    (kept,) = [k for k in ev._kept.values() if k.refs[0]() is z]
    kept.buffers = tuple(np.empty_like(b) for b in kept.buffers)
    if kept.gate is not None:               # a unified device's kept launch, checked again
        kept.gate.buffers, kept.gate.epoch = kept.buffers, None
    # out written on the host since: on a device, its device copy is stale
    before = x.to_numpy() - 1.0
    z.from_numpy(before)
    backend = pg.get_backend()

    def failing_run(*args, **kwargs):
        raise RuntimeError("injected in the launch")

    monkeypatch.setattr(backend, "run", failing_run)
    with pytest.raises(RuntimeError, match="injected"):
        z @= 2.0 * x
    np.testing.assert_array_equal(z.to_numpy(), before)
    assert z._manager.open_views() == []
    monkeypatch.undo()
    z @= 2.0 * x
    assert_close(z.to_numpy(), 2.0 * x.to_numpy())
    (again,) = [k for k in ev._kept.values() if k.refs[0]() is z]
    assert again is not kept


def test_a_kept_evaluation_that_fails_leaves_out_as_it_was(monkeypatch):
    """A launch that raises on the kept path (an exception, Ctrl-C) leaves out's contents and no
    view open, as on the checked path."""
    hits = _kept_hits(monkeypatch)
    g = grid((4, 4, 4, 8))
    x, z = random_field(g, pg.SpinColourVector(), seed=23), random_field(g, pg.SpinColourVector(), seed=24)
    z @= 3.0 * x + z       # out read as well: a write view
    z @= 3.0 * x           # out only written: a write view that discards its contents
    before = z.to_numpy()
    from pygrid.expr import evaluate as ev

    backend = pg.get_backend()
    for exc in (RuntimeError, KeyboardInterrupt):
        def failing_run(*args, _exc=exc, **kwargs):
            raise _exc("injected in the launch")

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(backend, "run", failing_run)
            # on a unified device the kept evaluations run the backend's kept launch themselves
            for k in ev._kept.values():
                if k.refs[0]() is z and k.gate is not None:
                    mp.setattr(k.gate, "launch", failing_run)
            for build in (lambda: 0.5 * x + z, lambda: 0.5 * x):
                with pytest.raises(exc, match="injected"):
                    z @= build()
                np.testing.assert_array_equal(z.to_numpy(), before)
                assert z._manager.open_views() == []
    assert hits == [1, 1, 1, 1]
    z @= 0.5 * x + z
    assert_close(z.to_numpy(), 0.5 * x.to_numpy() + before)


def test_a_kept_evaluation_is_forgotten_with_its_fields():
    import gc

    from pygrid.expr import evaluate as ev

    g = grid((4, 4, 4, 4))
    x, z = pg.LatticeFermion(g), pg.LatticeFermion(g)
    z @= 0.25 * x
    assert [k for k in ev._kept.values() if k.refs[0]() is z]
    n = len(ev._kept)
    del x
    gc.collect()
    assert len(ev._kept) == n - 1 and not [k for k in ev._kept.values() if k.refs[0]() is z]


def test_an_evaluation_while_its_kept_views_are_open_opens_its_own(monkeypatch):
    """Another thread's evaluation holds the kept views: this one opens its own."""
    from pygrid.expr import evaluate as ev

    hits = _kept_hits(monkeypatch)
    g = grid((4, 4, 4, 4))
    x, z = random_field(g, pg.SpinColourVector(), seed=25), pg.LatticeFermion(g)
    z @= -x
    (kept,) = [k for k in ev._kept.values() if k.refs[0]() is z]
    pg.ParallelRNG(g, [4, 4]).gaussian(x)
    with kept.views:
        z @= -x
    assert hits == [0] and not kept.views.is_open and z._manager.open_views() == []
    assert_close(z.to_numpy(), -x.to_numpy())


def test_kept_evaluations_of_other_shapes_on_the_same_fields_stay_apart(monkeypatch):
    """The kept evaluations are keyed by the expression's shape: statements that alternate into one
    field from the same fields (other signs, other shifts, the fields in another order, a product
    in place of a sum) each take a kept path of their own from their second run on, never another
    shape's kernel, and a new coefficient reaches the kernel (against numpy)."""
    hits = _kept_hits(monkeypatch)
    g = grid((4, 4, 4, 8))
    x, y = random_field(g, pg.SpinColourVector(), seed=41), random_field(g, pg.SpinColourVector(), seed=42)
    U = random_field(g, pg.ColourMatrix(), seed=43)
    z = pg.LatticeFermion(g)
    X, Y, Uh = x.to_numpy(), y.to_numpy(), U.to_numpy()
    cases = [
        (lambda a: a * x + y, lambda a: a * X + Y),
        (lambda a: a * x - y, lambda a: a * X - Y),
        (lambda a: a * y + x, lambda a: a * Y + X),
        (lambda a: a * x + pg.cshift(y, 0, 1), lambda a: a * X + roll(Y, 0, 1)),
        (lambda a: a * x + pg.cshift(y, 0, -1), lambda a: a * X + roll(Y, 0, -1)),
        (lambda a: a * (U * x), lambda a: a * np.einsum("...ab,...sb->...sa", Uh, X)),
    ]
    for a in (0.5, -1.5 + 0.25j, 2.0):
        for build, want in cases:
            z @= build(a)
            assert_close(z.to_numpy(), want(a))
    assert hits == [1] * (2 * len(cases))


@pytest.mark.parametrize("case", ["x + y", "x - y", "-x + y", "-x - y", "a*x + y", "a*x - y", "y + a*x",
                                  "-y + a*x", "x + y + w", "x - y - w", "a*x + y - w", "a*x + b*y + w",
                                  "-x", "x + 0*y"])
def test_unit_coefficient_terms_take_their_own_ops(fields, case):
    """A term of coefficient +-1 runs an op without its multiply (codegen_numba._lincomb_calls):
    each shape of sum against numpy, and assigned into one of its own terms."""
    g, _, psi, chi = fields
    w = random_field(g, pg.SpinColourVector())
    a, b = 0.3 - 0.7j, -1.25 + 0.5j
    env = {"x": psi, "y": chi, "w": w, "a": a, "b": b}
    want = eval(case, {}, {"x": psi.to_numpy(), "y": chi.to_numpy(), "w": w.to_numpy(), "a": a, "b": b})
    assert_close(pg.eval(eval(case, {}, env)).to_numpy(), want)
    out = w.copy()
    env["w"] = out
    out @= eval(case, {}, env)     # out is one of the terms where the case reads w
    assert_close(out.to_numpy(), want)


def test_eval_into_a_new_field_keeps_no_evaluation_or_launch():
    """``pg.eval`` and ``Lattice.copy`` write a field no later evaluation can find again: they keep
    neither the evaluation nor the backend's launch (keeping them cost a third of the call on small
    fields), and their values are right (against numpy); a statement into an existing field still
    keeps both."""
    from pygrid.accelerator import get_backend
    from pygrid.expr import evaluate as ev

    g = grid((4, 4, 4, 8))
    x, y = random_field(g, pg.SpinColourVector(), seed=41), random_field(g, pg.SpinColourVector(), seed=42)
    backend = get_backend()
    # a backend's kept launches are bound to the buffers; on a device that is not the host's
    # memory the host views are made for each call and die with it
    runs = getattr(backend, "_kept_runs", None) if pg.memory.get_manager().device.unified else None

    def kept_for(f):
        evals = [k for k in ev._kept.values() if k.refs[0]() is f]
        if runs is None:
            return evals, []
        at = f._buf.ctypes.data  # a kept run holds its result's buffer, a view of the field's memory
        return evals, [r for r in runs.values() if r.refs and r.refs[0]() is not None
                       and r.refs[0]().ctypes.data == at]

    z = pg.eval(0.3 * x - y)
    assert_close(z.to_numpy(), 0.3 * x.to_numpy() - y.to_numpy())
    c = x.copy()
    assert_close(c.to_numpy(), x.to_numpy())
    assert kept_for(z) == ([], []) and kept_for(c) == ([], [])
    w = pg.LatticeFermion(g)
    w @= 0.3 * x - y
    evals, launches = kept_for(w)
    assert evals and (runs is None or launches)
    assert_close(w.to_numpy(), z.to_numpy())
