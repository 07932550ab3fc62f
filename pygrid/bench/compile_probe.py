"""The compile cost of a new expression, measured in fresh processes (benchmarks/bench_core.py)."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

_PROBE = """
import sys, time
t0 = time.perf_counter()
import pygrid as pg
t1 = time.perf_counter()
g = pg.GridCartesian([4, 4, 4, 4])
x = pg.LatticeFermion(g); y = pg.LatticeFermion(g); U = pg.LatticeColourMatrix(g)
t2 = time.perf_counter()
y @= pg.adj(U) * pg.cshift(x, 2, 1) + ({tag} + 0.25j) * pg.cshift(x, 1, -2) * {tag}
t3 = time.perf_counter()
print(t1 - t0, t3 - t2)
"""


def compile_times():
    """Compile time of a new expression, and loading it from the disk cache in a new process."""
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, PYGRID_CACHE_DIR=d, NUMBA_CACHE_DIR=os.path.join(d, "numba"))
        code = _PROBE.replace("{tag}", "1.5")
        runs = []
        for _ in range(2):
            r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                               check=True)
            # the last line: the compile messages of pygrid's log come before it
            runs.append([float(v) for v in r.stdout.strip().splitlines()[-1].split()])
    return {"import_seconds": runs[1][0], "first_compile_seconds": runs[0][1],
            "disk_cache_load_seconds": runs[1][1]}


_DIRAC_PROBE = """
import sys, time
import pygrid as pg
pg.init(["--threads", "{threads}"])
prec = "{precision}"
g = pg.GridCartesian([{L}] * 4, precision=prec)
rng = pg.ParallelRNG(g, [1])
U = pg.qcd.random_gauge(g, rng, precision=prec)
if {Ls} == 0:
    D = pg.qcd.WilsonFermion(U, 0.1)
    psi = pg.LatticeFermion(g, prec)
    rng.gaussian(psi)
else:
    D = {operator}
    psi = D.new_fermion()
    pg.ParallelRNG(D.grid, [2]).gaussian(psi)
t0 = time.perf_counter()
D.Dhop(psi)
t1 = time.perf_counter()
if {schur}:
    from pygrid.qcd.schur import SchurOperator
    A = SchurOperator(D, 1)
    x = A.new_fermion()
    pg.ParallelRNG(x.grid, [3]).gaussian(x)
    A.MdagM(x)
print(t1 - t0, time.perf_counter() - t1)
"""


def dirac_first_call_times(Ls=0, precision="double", threads=2, mobius=False, L=8):
    """Seconds of the first ``D.Dhop`` at ``L``^4 (Wilson for ``Ls`` 0, else domain wall) in a process
    with an empty cache, and in a second process with the cache the first one left.  With
    ``mobius`` the operator is Möbius (b = 1.5, c = 0.5) and the process then applies its Schur
    operator's ``MdagM`` once (the kernels a Schur solve adds): its seconds are ``schur_cold``
    and ``schur_cached``."""
    code = _DIRAC_PROBE.replace("{threads}", str(int(threads))).replace("{precision}", precision)
    operator = (f"pg.qcd.MobiusFermion(U, {int(Ls)}, 0.1, 1.8, 1.5, 0.5)" if mobius else
                f"pg.qcd.DomainWallFermion(U, {int(Ls)}, 0.1, 1.8)")
    code = code.replace("{Ls}", str(int(Ls))).replace("{schur}", str(bool(mobius)))
    code = code.replace("{operator}", operator).replace("{L}", str(int(L)))
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, PYGRID_CACHE_DIR=d, NUMBA_CACHE_DIR=os.path.join(d, "numba"))
        runs = []
        for _ in range(2):
            r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                               check=True)
            runs.append([float(v) for v in r.stdout.strip().splitlines()[-1].split()])
    out = {"cold_seconds": runs[0][0], "cached_seconds": runs[1][0]}
    if mobius:
        out.update(schur_cold=runs[0][1], schur_cached=runs[1][1])
    return out
