"""The scripts of benchmarks/ run on small lattices: each exits 0 and prints its figure line.

docs/performance.md quotes their output, so a script that falls behind the library (a kernel's
signature, an operator's attributes) must fail here rather than in a measuring session.  The
figures themselves are not checked (timings are not tests); the scripts that compare two
computations check their agreement themselves and exit non-zero when they disagree.
(vs_grid.py needs Grid built, tests/test_vs_grid.py covers its parsing; bench_first_call.py
compiles every kernel twice on empty caches, about a minute; bench_wilson.py runs the sweeps of
the docs.)
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")

SCRIPTS = [
    ("bench_dhop_kernels.py", ["--grid", "4.4.4.8", "--reps", "1", "--threads", "1,2"], "GFlop/s"),
    ("bench_dhop_kernels.py", ["--grid", "4.4.4.8", "--reps", "1", "--checkerboard"], "DhopEO kernel"),
    ("bench_dhop_kernels.py", ["--grid", "4.4.4.8", "--reps", "1", "--threads", "1,2", "--data"],
     "compulsory stream, 2 threads"),
    ("bench_dhop_kernels.py", ["--grid", "4.4.4.8", "--reps", "1", "--threads", "1,2", "--compressed"],
     "kernels_wilson compressed, 2 threads"),
    ("bench_dhop_kernels.py", ["--grid", "4.4.4.8", "--reps", "1", "--compressed", "--data"],
     "loads and stores, compressed, 2 threads"),
    ("bench_dhop_kernels.py", ["--grid", "4.4.4.8", "--Ls", "4", "--reps", "1", "--last", "mul_solve"],
     "GFlop/s"),
    ("bench_wilson_in_cache.py", ["--Ls", "4"], "% of the FMA peak"),
    ("bench_cpu_limits.py", [], "loads per FMA the core sustains"),
    ("bench_reductions.py", ["--grid", "4.4.4.8", "--rounds", "1"], "pg.inner_product"),
    ("bench_reductions.py", ["--per-core"], "float32"),
    ("bench_device_reductions.py", ["--accelerator", "sycl", "--grid", "4.4.4.8", "--rows", "1,64",
                                    "--rounds", "1", "--seconds", "0.01", "--precision", "double"],
     "values agree between the settings: yes"),
    ("bench_solvers.py", ["--grid", "4.4.4.8", "--Ls", "4", "--iterations", "3"], "on its own"),
    ("bench_solvers.py", ["--grid", "4.4.4.8", "--Ls", "4", "--solve", "1e-8"], "reliable update"),
    ("bench_solver_fusions.py", ["--what", "mobius-schur", "--grid", "4.4.4.8", "--Ls", "4"], "ratio"),
    ("bench_solver_fusions.py", ["--what", "xp", "--grid", "4.4.4.8"], "ratio"),
    ("bench_solver_fusions.py", ["--what", "links", "--grid", "4.4.4.8", "--iterations", "3",
                                 "--rounds", "1"], "links compressed / links whole"),
    ("bench_compressed_links.py", ["--grid", "4.4.4.8", "--rounds", "1"], "compressed / whole: median"),
    ("bench_compressed_links.py", ["--grid", "4.4.4.8", "--rounds", "1", "--calls", "Meooe",
                                   "--structures", "wide,narrow"], "narrow, links compressed"),
    ("bench_solver_fusions.py", ["--what", "kept", "--grid", "4.4.4.8", "--Ls", "1", "--iterations", "5",
                                 "--rounds", "2"], "ratio"),
    ("bench_call_overhead.py", ["--operator", "schur", "--grid", "4.4.4.8", "--calls", "20"],
     "the call outside the launch"),
    ("bench_call_overhead.py", ["--operator", "expr", "--grid", "4.4.4.8", "--calls", "20", "--whole"],
     "the whole call"),
    ("bench_s_matrices.py", ["--grid", "4.4.4.8", "--Ls", "4"], "max rel. difference"),
    ("bench_call_trace.py", ["--grid", "8.8.8.8", "--calls", "20", "--rounds", "1"], "the call"),
    ("bench_call_trace.py", ["--operator", "cg", "--grid", "8.8.8.8", "--calls", "5", "--rounds", "1"],
     "Schur CG"),
    ("bench_balance.py", ["--grid", "8.8.8.8", "--seconds", "1"], "whole / balanced"),
    ("bench_balance.py", ["--operator", "cg", "--grid", "8.8.8.8", "--iterations", "3", "--seconds", "1"],
     "whole / balanced"),
    ("bench_core_sharing.py", ["--rounds", "2", "--pause", "0"], "rounds below 0.85"),
]


@pytest.mark.parametrize("script,args,expect", SCRIPTS,
                         ids=[f"{s}-{i}" for i, (s, _, _) in enumerate(SCRIPTS)])
def test_benchmark_script_runs(script, args, expect):
    r = subprocess.run([sys.executable, os.path.join(BENCH, script), *args], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, f"{script} {' '.join(args)} exited {r.returncode}:\n{r.stderr[-3000:]}"
    assert expect in r.stdout, r.stdout[-2000:]
