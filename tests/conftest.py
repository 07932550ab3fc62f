"""Shared fixtures and helpers for the core test suite.

Every numeric check goes through an independent path: the numpy evaluator
(``pg.set_backend('numpy')`` runs the same IR with plain numpy) and, for many
tests, a direct numpy formula on ``to_numpy()`` arrays (np.roll, np.einsum).

Compile time dominates these tests (each distinct expression shape compiles a
numba kernel once), so grids are tiny and shared, and the helpers below reuse
fields across tests.
"""
from __future__ import annotations

import contextlib
import functools
import os

import numpy as np
import pytest

import pygrid as pg

TOL = {"double": 1e-12, "single": 1e-5}
GAMMA = {name: np.array(getattr(pg.Gamma, name).array()) for name in ("X", "Y", "Z", "T", "Five", "Identity")}


# ---- device mode ---------------------------------------------------------------
#
# PYGRID_TEST_DEVICE=emulated runs the suite with "device" buffers that are
# separate host allocations under a small watermark (PYGRID_TEST_DEVICE_MEM,
# MB), so every transfer and eviction of the MemoryManager really happens
# while the expression and cshift checks run.  `make test` runs them so.
#
# PYGRID_TEST_BACKEND names the compiled backend under test (default openmp;
# sycl, cuda-emulated and opencl-emulated are the others that run here): every
# check that compares "the compiled backend" with the numpy evaluator runs that
# backend's kernels and reductions (fixtures switch to COMPILED before each
# test).  Under sycl the fields live in USM device memory (device 'sycl', the
# default PYGRID_TEST_DEVICE then) under the small watermark, so transfers and
# evictions happen.  Under cuda or hip (on a machine with a GPU) the fields live in CuPy
# device memory likewise.

COMPILED = os.environ.get("PYGRID_TEST_BACKEND") or "openmp"


def pytest_configure(config):
    pg.set_backend(COMPILED)  # BackendError saying what to install when it cannot start
    if COMPILED in ("sycl", "cuda", "hip"):
        os.environ.setdefault("PYGRID_TEST_DEVICE", COMPILED)
    device = os.environ.get("PYGRID_TEST_DEVICE", "unified")
    if device != "unified":
        pg._memory.configure(
            device=device, device_mem_mb=float(os.environ.get("PYGRID_TEST_DEVICE_MEM", "4"))
        )


def pytest_sessionfinish(session, exitstatus):
    if os.environ.get("PYGRID_TEST_DEVICE", "unified") == "unified" or exitstatus != 0:
        return
    stats = pg.memory_stats()
    print(
        f"\n{os.environ['PYGRID_TEST_DEVICE']} device: {stats['evictions']} evictions, "
        f"{stats['h2d_count']} host->device and "
        f"{stats['d2h_count']} device->host transfers, peak {stats['peak_device_bytes']} bytes "
        f"under a watermark of {stats['watermark_bytes']} bytes"
    )
    if COMPILED == "sycl":
        b = pg.get_backend("sycl")
        print(f"sycl backend on {b.queue.sycl_device.name}: built {b.compiles} OpenCL programs "
              f"in {b.compile_seconds:.1f} s")
        if b.compiles == 0:
            print("the sycl backend built no kernel: the suites did not run on it")
            session.exitstatus = 1
    if stats["evictions"] == 0:
        print("device run evicted nothing: lower PYGRID_TEST_DEVICE_MEM so the cache is exercised")
        session.exitstatus = 1


# ---- grids -------------------------------------------------------------------

@functools.cache
def grid(dims=(4, 4, 4, 4), simd=None, precision="double"):
    """A cached grid (grids are compared by value, so caching only saves time)."""
    return pg.GridCartesian(list(dims), simd_layout=simd, precision=precision)


@functools.cache
def grid5(Ls=4, dims=(4, 4, 4, 4), simd=None):
    return pg.GridCartesian5D(grid(dims, simd), Ls)


@pytest.fixture
def g4():
    return grid()


@pytest.fixture
def g48():
    return grid((4, 4, 4, 8))


# ---- Ctrl-C ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def ctrl_c_reaches_python():
    """SIGINT handled as a terminal's Ctrl-C is in a foreground program, through the manager's
    deferral (``pygrid.memory.interrupts``).  A process started in the background by a shell
    without job control (``make test &`` in a script, a CI runner's) inherits SIGINT ignored;
    Python then installs no handler and the manager leaves the ignored signal alone, so a test of
    Ctrl-C would see nothing.  Restored afterwards."""
    import signal

    from pygrid.memory import interrupts

    before, installed = signal.getsignal(signal.SIGINT), interrupts._installed[0]
    if before is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        interrupts._installed[0] = False
    interrupts.install()
    yield
    if before is signal.SIG_IGN:
        signal.signal(signal.SIGINT, before)
        interrupts._installed[0] = installed


# ---- backends ------------------------------------------------------------------

@contextlib.contextmanager
def backend(name):
    old = pg.get_backend().name
    pg.set_backend(name)
    try:
        yield
    finally:
        pg.set_backend(old)


@pytest.fixture
def reference_cache(monkeypatch):
    """The host's last-level cache as the one the kernels' byte thresholds were measured with
    (caches.REFERENCE_BYTES, one group of cores), for tests of those rules: elsewhere the thresholds
    scale with the host's cache (tests/test_caches.py)."""
    from pygrid.accelerator import caches

    monkeypatch.setattr(caches, "group_bytes", lambda: caches.REFERENCE_BYTES)
    monkeypatch.setattr(caches, "host_groups", lambda root=None: (caches.REFERENCE_BYTES, 1))


@pytest.fixture(autouse=True)
def _compiled_backend():
    """Every test starts (and ends) on the compiled backend under test."""
    pg.set_backend(COMPILED)
    yield
    pg.set_backend(COMPILED)


def eval_both(expr):
    """Evaluate ``expr`` on the compiled backend and on the numpy one: (compiled array, numpy array)."""
    with backend(COMPILED):
        a = pg.eval(expr).to_numpy()
    with backend("numpy"):
        b = pg.eval(expr).to_numpy()
    return a, b


def scale_of(*arrays):
    return max([1.0] + [float(np.max(np.abs(a))) for a in arrays if np.size(a)])


def assert_close(got, want, precision="double", scale=None, what=""):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    s = scale if scale is not None else scale_of(want)
    err = float(np.max(np.abs(got - want))) if got.size else 0.0
    assert err <= TOL[precision] * s, f"{what}: max abs error {err:.3g} > {TOL[precision]:.0e} * {s:.3g}"


def check_both(expr, precision="double", want=None, scale=None):
    """Assert compiled backend == numpy evaluator (== ``want`` if given); returns the compiled array."""
    a, b = eval_both(expr)
    assert_close(a, b, precision, scale, f"{COMPILED} vs numpy backend")
    if want is not None:
        assert_close(a, want, precision, scale if scale is not None else scale_of(want),
                     f"{COMPILED} vs numpy formula")
    return a


# ---- fields ---------------------------------------------------------------------

_seed = [0]


def random_field(g, site_type, precision="double", checkerboard=None, kind="gaussian", seed=None):
    """A fresh field filled by pg.ParallelRNG (a new seed per call unless given)."""
    if seed is None:
        _seed[0] += 1
        seed = [7, _seed[0]]
    f = pg.Lattice(g, site_type, precision, checkerboard=checkerboard)
    rng = pg.ParallelRNG(g, seed)
    if kind == "su3":
        rng.random_su3(f)
    elif kind == "uniform":
        rng.uniform(f)
    else:
        rng.gaussian(f)
    return f


@functools.cache
def pool_field(g, site_type, precision, i=0):
    """Cached random fields: tests that only read them can share them."""
    return random_field(
        g, site_type, precision, seed=[11, i, site_type.ncomp, int(site_type.is_real), len(precision)]
    )


# ---- numpy formulas on to_numpy() arrays -------------------------------------------

def roll(a, mu, disp):
    """cshift(x, mu, disp)(x) = x(x + disp e_mu)  <=>  np.roll(a, -disp, axis=mu)."""
    return np.roll(a, -disp, axis=mu)


def dagger(a, nlat, matrix_axes):
    """adj on a to_numpy array: conj, and swap each pair of matrix axes (site axes counted after nlat)."""
    a = np.conj(a)
    for i, j in matrix_axes:
        a = np.swapaxes(a, nlat + i, nlat + j)
    return a


def spin_mul(G, a, nlat, spin_axis=0):
    """Apply a 4x4 spin matrix G on the left to the spin index (site axis spin_axis)."""
    return np.moveaxis(np.tensordot(G, a, axes=([1], [nlat + spin_axis])), 0, nlat + spin_axis)


# tests/mpi holds collective tests: every rank of `mpiexec -n N python -m pytest tests/mpi`
# runs them in step.  Outside an MPI launcher they are not collected.
from pygrid.communicator import launched_by_mpi as _launched_by_mpi  # noqa: E402

collect_ignore = [] if _launched_by_mpi() else ["mpi"]
