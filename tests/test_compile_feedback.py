"""Feedback while kernels compile (pygrid.accelerator.compile_log) and `pygrid precompile`."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

import pygrid as pg
from pygrid.accelerator import compile_log


@pytest.fixture
def log_level():
    """Set --log for one test; restores the previous configuration."""
    before = pg.current_config().log

    def set_level(level):
        pg.init(["--log", level])

    yield set_level
    pg.init(["--log", before])


def test_a_slow_compile_announces_itself_and_its_time(monkeypatch, capsys, log_level):
    log_level("message")
    monkeypatch.setattr(compile_log, "SLOW_SECONDS", 0.05)
    n0, s0 = compile_log.totals()
    with compile_log.compiling("the slow kernel"):
        with compile_log.compiling("a callee"):           # nested: counted in the outer one
            time.sleep(0.3)
    with compile_log.compiling("the fast kernel"):
        pass
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "pygrid : INFO      : compiling the slow kernel ..."
    assert out[1].startswith("pygrid : INFO      : compiled the slow kernel in 0.3 s (")
    assert len(out) == 2, out                              # the fast one says nothing
    n, s = compile_log.totals()
    assert n == n0 + 2 and s - s0 >= 0.3
    assert [w for w, _ in compile_log.history()[-2:]] == ["the slow kernel", "the fast kernel"]


def test_debug_shows_every_compile_and_warning_none(monkeypatch, capsys, log_level):
    monkeypatch.setattr(compile_log, "SLOW_SECONDS", 0.05)
    log_level("debug")
    with compile_log.compiling("k1"):
        pass
    assert capsys.readouterr().out.startswith("pygrid : DEBUG     : compiled k1 in 0.0 s")
    log_level("warning")
    with compile_log.compiling("k2"):
        time.sleep(0.2)
    assert capsys.readouterr().out == ""


def test_a_failed_compile_is_not_reported_as_compiled(monkeypatch, capsys, log_level):
    log_level("debug")
    with pytest.raises(ValueError):
        with compile_log.compiling("broken"):
            raise ValueError("typing error")
    assert "compiled broken" not in capsys.readouterr().out


def test_numba_compiles_reach_the_log(capsys, log_level):
    """A real numba compile (a function made here, so never cached) is timed and named."""
    import numba

    log_level("debug")
    ns = {}
    exec(f"def fresh_{os.getpid()}(x):\n    return x * {time.time_ns() % 1000} + 1\n", ns)
    fn = numba.njit(ns[f"fresh_{os.getpid()}"])
    n0, _ = compile_log.totals()
    assert fn(2) > 0
    assert compile_log.totals()[0] == n0 + 1
    what, seconds = compile_log.history()[-1]
    assert what.endswith(f"fresh_{os.getpid()}") and seconds > 0
    assert f"compiled {what} in" in capsys.readouterr().out


def _run(args, env=None, code=None):
    cmd = [sys.executable, "-c", code] if code else [sys.executable, "-m", "pygrid"] + args
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)


#: a later job's start: a Wilson operator on a 4.4.4.8 lattice, the layout moves compiled as on a large one
_JOB = """
import pygrid as pg
from pygrid.accelerator import layout_numba
from pygrid.accelerator.compile_log import history
pg.init(['--grid', '4.4.4.8', '--log', 'warning'])
layout_numba.COMPILED_BYTES = 0   # the layout moves of a large lattice
g = pg.GridCartesian()
U = pg.qcd.random_gauge(g, pg.ParallelRNG(g, [1]))
D = pg.qcd.WilsonFermion(U, 0.1, boundary_phases=pg.qcd.ANTIPERIODIC_T)
b = pg.ParallelRNG(g, [2]).gaussian(pg.LatticeFermion(g))
"""


def test_precompile_fills_the_cache_for_a_later_job():
    r = _run(["precompile", "--grid", "4.4.4.8", "--operators", "wilson", "--precision", "double"])
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("pygrid precompile on openmp") and "wilson in double" in lines[0]
    assert any(x.startswith("[1/1] wilson  double  Nsimd") for x in lines), lines
    assert lines[-1].startswith("done in")
    job = _JOB + """
x, rec = pg.qcd.schur_solve(D, b, pg.algorithms.ConjugateGradient(1e-8, 1000, verbose=False))
assert rec.converged
# large fields read compressed links: that kernel too
pg.qcd.WilsonFermion(U, 0.1, boundary_phases=pg.qcd.ANTIPERIODIC_T, compress_links=True).Dhop(b)
names = ('Dhop', 'dhop', 'layout', 'link_rows')
print(len(history()), [w for w, _ in history() if any(k in w for k in names)])
"""
    r = _run(None, code=job)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split(" ", 1)[1].strip() == "[]", r.stdout   # no Dirac kernel or its helpers compiled


def test_precompile_both_precisions_covers_the_mixed_solvers():
    r = _run(["precompile", "--grid", "4.4.4.8", "--operators", "wilson", "--precision", "both"])
    assert r.returncode == 0, r.stderr
    assert any(x.startswith("[3/3] wilson  mixed   Nsimd") for x in r.stdout.splitlines()), r.stdout
    job = _JOB + """
from pygrid.algorithms import MixedPrecisionConjugateGradient, ReliableUpdateConjugateGradient
for solver in (ReliableUpdateConjugateGradient, MixedPrecisionConjugateGradient):
    x, rec = pg.qcd.schur_solve(D, b, solver(1e-10, verbose=False))
    assert rec.converged
print([w for w, _ in history()])
"""
    r = _run(None, code=job)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]", r.stdout   # nothing compiled in the job


@pytest.mark.parametrize("args, message", [
    (["--operators", "wilson,clover"], "--operators: unknown operator clover; choose from wilson, dwf"),
    (["--Ls", "0"], "--Ls must be a positive integer, got 0"),
    (["--precision", "half"], "--precision"),
])
def test_precompile_bad_flags(args, message):
    r = _run(["precompile", "--grid", "4.4.4.8"] + args)
    assert r.returncode == 2 and r.stdout == "", (r.stdout, r.stderr)
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("pygrid: error: ") and message in err[0], err
