"""Collective tests, run by every rank of ``mpiexec -n N python -m pytest tests/mpi``.

Each test computes its result on the decomposed lattice of the job and the
same result on a one-rank lattice that every rank holds whole
(``comm=SingleRank()``), and compares them.  Every rank runs the same tests in
the same order, so their collectives pair up; a test that fails on one rank
would leave the others waiting in the next collective, so a failure aborts the
whole job (``MPI_Abort``) after printing its report with the rank.
"""
from __future__ import annotations

import sys

import numpy as np
import pytest

import pygrid as pg
from pygrid.communicator import SingleRank, world

WORLD = world()
ONE = SingleRank()

#: the --mpi layouts the tests run for each job size
LAYOUTS = {1: [(1, 1, 1, 1)], 2: [(1, 1, 1, 2), (2, 1, 1, 1)], 4: [(1, 1, 2, 2), (2, 1, 1, 2), (1, 2, 2, 1)]}


def layouts():
    return LAYOUTS.get(WORLD.size, [pg.communicator.default_mpi_layout((8, 8, 8, 8), WORLD.size)])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed and WORLD.size > 1:
        sys.stderr.write(f"\n[rank {WORLD.rank}] {item.nodeid} FAILED\n{rep.longreprtext}\n")
        sys.stderr.flush()
        WORLD.abort(f"test {item.nodeid} failed")


def same_everywhere(a):
    """``a`` (a numpy array) after checking that every rank holds the same value."""
    parts = WORLD.allgather_array(np.asarray(a))
    for r in range(1, len(parts)):
        np.testing.assert_array_equal(parts[r], parts[0], err_msg=f"rank {r} differs from rank 0")
    return parts[0]


def grids(dims, layout, **kw):
    """(decomposed grid of the job, one-rank grid of the same lattice and SIMD layout)."""
    g = pg.GridCartesian(dims, mpi_layout=layout, **kw)
    kw.setdefault("simd_layout", g.simd_layout)
    return g, pg.GridCartesian(dims, comm=ONE, **kw)
