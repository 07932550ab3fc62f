"""The 'sycl' backend: selection errors, the OpenCL ICD set-up, and real runs on the CPU OpenCL device.

The device tests run wherever dpctl is importable (`make test` installs
pygrid[sycl]: dpctl + intel-opencl-rt); they build the generated OpenCL C with
the Intel CPU OpenCL runtime and compare with the numpy evaluator.  `make test`
also reruns the expression, cshift and reduction suites on this backend
(PYGRID_TEST_BACKEND=sycl, see conftest.py), and a hypothesis state machine
drives the memory cache on real USM device memory with evictions.  The same OpenCL C is run under the
SIMT emulation header in tests/test_codegen_c.py (``opencl-emulated``).
"""
import importlib.util
import os
import sys

import numpy as np
import pytest
from conftest import assert_close, backend, grid, pool_field

import pygrid as pg
from pygrid.accelerator import backends as _bk, sycl_backend
from pygrid.errors import BackendError

HAVE_DPCTL = importlib.util.find_spec("dpctl") is not None
NO_DPCTL = ("dpctl and intel-opencl-rt are not installed (pip install pygrid[sycl]: about 0.5 GB download, "
            "1.5 GB installed; `make test` installs them); see docs/backends.md")


def test_sycl_without_dpctl_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "dpctl", None)  # import dpctl -> ImportError
    monkeypatch.setattr(_bk, "_backends", {})
    with pytest.raises(BackendError, match=r"dpctl is not installed: pip install pygrid\[sycl\]"):
        pg.set_backend("sycl")


def test_icd_setup_writes_one_file_with_the_runtime_path(tmp_path, monkeypatch):
    prefix = tmp_path / "env"
    (prefix / "lib").mkdir(parents=True)
    lib = prefix / "lib" / "libintelocl.so"
    lib.write_bytes(b"")  # not a real library: the preload fails quietly
    for var in ("OCL_ICD_VENDORS", "PYGRID_OWN_ICD", "LD_LIBRARY_PATH"):
        monkeypatch.delenv(var, raising=False)
    icd = tmp_path / "icd"
    got = sycl_backend.setup_opencl_icd(str(prefix), str(icd))
    assert got == str(icd)
    files = os.listdir(icd)
    assert files == ["pygrid-intel-cpu.icd"]
    assert (icd / files[0]).read_text().strip() == str(lib.resolve())
    assert os.environ["OCL_ICD_VENDORS"] == str(icd)
    assert os.environ["LD_LIBRARY_PATH"].split(os.pathsep)[0] == str(prefix / "lib")
    # idempotent, and a user's own OCL_ICD_VENDORS wins
    assert sycl_backend.setup_opencl_icd(str(prefix), str(icd)) == str(icd)
    monkeypatch.delenv("PYGRID_OWN_ICD")
    monkeypatch.setenv("OCL_ICD_VENDORS", "/mine")
    assert sycl_backend.setup_opencl_icd(str(prefix), str(icd)) == "/mine"


def test_icd_setup_beside_another_process(tmp_path, monkeypatch):
    """The ranks of an MPI job write the ICD file at once: another process's temporary file, still
    being written, neither stops this one nor ends up as the ICD file."""
    prefix = tmp_path / "env"
    (prefix / "lib").mkdir(parents=True)
    lib = prefix / "lib" / "libintelocl.so"
    lib.write_bytes(b"")
    for var in ("OCL_ICD_VENDORS", "PYGRID_OWN_ICD", "LD_LIBRARY_PATH"):
        monkeypatch.delenv(var, raising=False)
    icd = tmp_path / "icd"
    icd.mkdir()
    (icd / "pygrid-intel-cpu.icd.tmp").mkdir()  # a name another writer holds, unwritable here
    assert sycl_backend.setup_opencl_icd(str(prefix), str(icd)) == str(icd)
    assert (icd / "pygrid-intel-cpu.icd").read_text().strip() == str(lib.resolve())
    assert sorted(os.listdir(icd)) == ["pygrid-intel-cpu.icd", "pygrid-intel-cpu.icd.tmp"]


def test_icd_setup_without_runtime_does_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv("OCL_ICD_VENDORS", raising=False)
    assert sycl_backend.setup_opencl_icd(str(tmp_path)) is None
    assert "OCL_ICD_VENDORS" not in os.environ


@pytest.mark.skipif(not HAVE_DPCTL, reason=NO_DPCTL)
@pytest.mark.parametrize("precision", ["double", "single"])
def test_sycl_expressions_against_numpy(precision):
    g = grid(precision=precision)
    U = pool_field(g, pg.ColourMatrix(), precision)
    psi = pool_field(g, pg.SpinColourVector(), precision)

    def make():
        return U * pg.cshift(psi, 3, -1) + 0.5 * pg.adj(U) * pg.cshift(psi, 0, 1) - psi

    with backend("numpy"):
        want = pg.eval(make()).to_numpy()
    with backend("sycl"):
        got = pg.eval(make()).to_numpy()
        n2 = pg.norm2(psi)
    assert_close(got, want, precision)
    assert abs(n2 - float(np.vdot(psi.to_numpy(), psi.to_numpy()).real)) < 1e-5 * n2


needs_dpctl = pytest.mark.skipif(not HAVE_DPCTL, reason=NO_DPCTL)


@needs_dpctl
def test_fresh_process_lists_the_cpu_opencl_device(tmp_path):
    """Nothing exported by hand: the backend's own ICD set-up makes dpctl see opencl:cpu."""
    import subprocess

    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("OCL_ICD_VENDORS", "PYGRID_OWN_ICD", "LD_LIBRARY_PATH")
    }
    env["PYGRID_CACHE_DIR"] = str(tmp_path)
    code = ("from pygrid.accelerator.sycl_backend import import_dpctl\n"
            "d = import_dpctl()\n"
            "print(' '.join(x.filter_string for x in d.get_devices()))\n")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "opencl:cpu" in r.stdout, r.stdout + r.stderr
    icd = tmp_path / "opencl-icd" / "pygrid-intel-cpu.icd"
    assert icd.read_text().strip().endswith("libintelocl.so")


@needs_dpctl
@pytest.mark.parametrize("precision", ["double", "single"])
def test_sycl_reductions_against_numpy(precision):
    g = grid(precision=precision)
    psi = pool_field(g, pg.SpinColourVector(), precision)
    chi = pool_field(g, pg.SpinColourVector(), precision, 1)
    U = pool_field(g, pg.ColourMatrix(), precision)
    with backend("numpy"):
        want = (pg.norm2(psi), pg.inner_product(psi, chi), pg.sum(U))
    with backend("sycl"):
        got = (pg.norm2(psi), pg.inner_product(psi, chi), pg.sum(U))
    tol = 1e-12 if precision == "double" else 1e-6  # both accumulate in double; the orders differ
    assert abs(got[0] - want[0]) <= tol * want[0]
    assert abs(got[1] - want[1]) <= tol * want[0]
    assert_close(got[2], want[2], "double", scale=want[0])


@needs_dpctl
def test_sycl_on_usm_device_memory_with_evictions(monkeypatch):
    """Fields in USM device memory under a watermark of a few fields: kernels, in place, evictions."""
    from pygrid import memory as mem

    monkeypatch.setattr(mem, "_default", mem.get_manager())  # restored after the test
    with backend("sycl"):
        m = mem.configure(device="sycl", device_mem_mb=0.2)  # ColourMatrix fields of 4^4: 36 KB each
        g = grid()
        rng = pg.ParallelRNG(g, [5, 6])
        fields = [pg.LatticeColourMatrix(g) for _ in range(10)]
        for f in fields:
            rng.gaussian(f)
        host = [f.to_numpy() for f in fields]
        acc = pg.LatticeColourMatrix(g)
        for f in fields:
            acc @= acc + f * pg.cshift(f, 1, 1)   # aliased output
        want = sum(np.einsum("xyztab,xyztbc->xyztac", h, np.roll(h, -1, axis=1)) for h in host)
        assert_close(acc.to_numpy(), want, "double", what="sum of products on the sycl device")
        fields[0] @= 2.0 * fields[0]              # in place
        assert_close(fields[0].to_numpy(), 2.0 * host[0])
        assert abs(pg.norm2(fields[3]) - float(np.vdot(host[3], host[3]).real)) < 1e-10 * pg.norm2(fields[3])
        pg.poke_index(
            fields[1], pg.peek_index(fields[2], "colour", 0, 1), "colour", 2, 2
        )  # numpy on a USM view
        want1 = host[1].copy()
        want1[..., 2, 2] = host[2][..., 0, 1]
        assert_close(fields[1].to_numpy(), want1)
        st = m.stats()
        assert st["evictions"] > 0 and st["h2d_count"] > 0
        assert type(m.device).__name__ == "UsmDevice"


@needs_dpctl
@pytest.mark.parametrize("tpb", [1, 7, 128])
def test_sycl_work_group_sizes(tpb, monkeypatch):
    from pygrid import config

    g = grid((4, 4, 4, 8))
    psi = pool_field(g, pg.ColourVector(), "double")
    old = config.set_current(config.make_config(config.current(), accelerator_threads=tpb))
    try:
        with backend("sycl"):
            got = pg.eval(pg.cshift(psi, 3, 5) - 3.0 * psi).to_numpy()
    finally:
        config.set_current(old)
    a = psi.to_numpy()
    assert_close(got, np.roll(a, -5, axis=3) - 3.0 * a)


# The memory cache on real USM device memory, driven at random with injected faults, is
# tests/test_memory_faults.py::test_fields_under_faults_in_sycl_usm.


# ---- the Dirac operators and solvers on the device ------------------------------------------

def _wilson_schur(g):
    rng = pg.ParallelRNG(g, [1, 2])
    U = pg.qcd.random_gauge(g, rng)
    D = pg.qcd.WilsonFermion(U, 0.1)
    b = D.new_fermion()
    rng.gaussian(b)
    return D, pg.qcd.SchurDiagMooeeOperator(D), b


@needs_dpctl
def test_cg_iteration_on_sycl_moves_no_field_to_the_host(monkeypatch):
    """After warm-up, CG iterations on the Schur Wilson operator touch the host only for scalars."""
    from pygrid import memory as mem

    monkeypatch.setattr(mem, "_default", mem.get_manager())
    with backend("sycl"):
        m = mem.configure(device="sycl", device_mem_mb=16)
        D, op, b = _wilson_schur(pg.GridCartesian([4, 4, 4, 8]))
        src = op.Mdag(op.prepare_source(b))
        field_bytes = src.grid.osites * 24 * src.grid.nsimd * 8
        pg.algorithms.ConjugateGradient(tol=1e-30, maxiter=2).solve(op.MdagM, src)  # compiles every kernel
        for iters in (2, 8):
            m.reset_stats()
            cg = pg.algorithms.ConjugateGradient(tol=1e-30, maxiter=iters)
            cg.solve(op.MdagM, src, true_residual=False)
            st = m.stats()
            assert st["d2h_bytes"] == 0 and st["host_read_bytes"] == 0 and st["host_write_bytes"] == 0, st
            assert st["h2d_bytes"] <= field_bytes, st  # the zero initial guess, once, whatever the iterations


@needs_dpctl
def test_schur_solve_on_sycl_with_evictions_mid_solve(monkeypatch):
    """A watermark below the solve's working set: fields leave and come back during CG, same answer."""
    from pygrid import memory as mem

    g = pg.GridCartesian([4, 4, 4, 8])
    D, op, b = _wilson_schur(g)
    cg = pg.algorithms.ConjugateGradient(tol=1e-10, maxiter=500)
    want, _ = cg.solve(op.MdagM, op.Mdag(op.prepare_source(b)))
    want = want.to_numpy()
    monkeypatch.setattr(mem, "_default", mem.get_manager())
    with backend("sycl"):
        m = mem.configure(device="sycl", device_mem_mb=0.5)  # links 0.3 MB, each red-black fermion 48 KB
        D, op, b = _wilson_schur(g)
        src = op.Mdag(op.prepare_source(b))
        m.reset_stats()
        x, rec = pg.algorithms.ConjugateGradient(tol=1e-10, maxiter=500).solve(op.MdagM, src)
        assert rec.converged
        st = m.stats()
        assert st["evictions"] > 10 and st["peak_device_bytes"] <= st["watermark_bytes"], st
        assert np.max(np.abs(x.to_numpy() - want)) < 1e-8 * np.max(np.abs(want))


@needs_dpctl
def test_checkerboards_convert_poke_and_slice_sums_stay_on_the_device(monkeypatch):
    """pick/set_checkerboard, convert, poke, slice_sum and project_su3 run on the sycl device: no field to
    the host."""
    from pygrid import memory as mem

    monkeypatch.setattr(mem, "_default", mem.get_manager())
    g = pg.GridCartesian([4, 4, 4, 8])
    with backend("sycl"):
        m = mem.configure(device="sycl", device_mem_mb=16)
        psi = pg.LatticeFermion(g)
        pg.ParallelRNG(g, [3]).gaussian(psi)
        pn = psi.to_numpy()
        m.reset_stats()
        full = pg.LatticeFermion(g)
        # single on its own SIMD layout and back (its sites gathered with the cast), then the same layout
        gs = pg.GridCartesian([4, 4, 4, 8], precision="single")
        assert gs.simd_layout != g.simd_layout
        for cb in (0, 1):
            half = pg.convert(pg.pick_checkerboard(cb, psi), "single", grid=gs)
            assert half.grid == gs.red_black
            pg.set_checkerboard(full, pg.convert(half, "double", grid=g))
        U = pg.LatticeColourMatrix(g)
        pg.ParallelRNG(g, [4]).gaussian(U)
        Un = U.to_numpy()
        m.reset_stats()
        pg.poke_index(U, pg.peek_index(U, "colour", 0, 1), "colour", 2, 2)
        sums = pg.slice_sum(psi, 3)
        P = pg.qcd.project_su3(U)
        st = m.stats()
        assert st["host_read_bytes"] == 0 and st["host_write_bytes"] == 0 and st["d2h_bytes"] == 0, st
        assert np.max(np.abs(full.to_numpy() - pn)) < 1e-6 * np.max(np.abs(pn))
        want = Un.copy()
        want[..., 2, 2] = Un[..., 0, 1]
        assert np.array_equal(U.to_numpy(), want)
        assert np.allclose(sums, pn.sum(axis=(0, 1, 2)), rtol=1e-12, atol=1e-12)
        from pygrid.qcd.gauge import project_su3_array

        assert np.max(np.abs(P.to_numpy() - project_su3_array(want))) < 1e-13


def test_each_rank_on_a_node_takes_its_own_gpu(monkeypatch):
    """Without a selector, a queue on the default device; where that is one of several GPUs, on
    the one of the rank's place on the node (a stand-in dpctl of three GPUs: no SYCL GPU here)."""
    import types

    class Dev:
        def __init__(self, i, gpu=True):
            self.i, self.is_gpu, self.backend, self.device_type = i, gpu, "level_zero", "gpu"

        def __eq__(self, other):
            return isinstance(other, Dev) and other.i == self.i

    gpus = [Dev(0), Dev(1), Dev(2)]
    asked = []

    class Queue:
        def __init__(self, what=None):
            asked.append(what)
            self.sycl_device = gpus[0] if what is None else what

    def get_devices(backend, device_type):
        assert (backend, device_type) == ("level_zero", "gpu")  # the default device's kind
        return gpus

    fake = types.SimpleNamespace(SyclQueue=Queue, get_devices=get_devices)
    for var in ("MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK",
                "PALS_LOCAL_RANKID", "SLURM_LOCALID", "PYGRID_SYCL_DEVICE"):
        monkeypatch.delenv(var, raising=False)
    assert sycl_backend.make_queue(fake).sycl_device == gpus[0] and asked == [None]
    monkeypatch.setenv("MPI_LOCALRANKID", "4")
    assert sycl_backend.make_queue(fake).sycl_device == gpus[1]
    monkeypatch.setenv("PYGRID_SYCL_DEVICE", "level_zero:gpu:2")  # a selector wins
    del asked[:]
    sycl_backend.make_queue(fake)
    assert asked == ["level_zero:gpu:2"]


@pytest.mark.skipif(not HAVE_DPCTL, reason=NO_DPCTL)
def test_the_default_device_of_its_kind_alone_is_kept():
    """On the real runtime: the devices of the default device's backend and kind, as make_queue
    asks dpctl for them, hold it; alone of its kind, it is the one kept."""
    import dpctl

    sycl_backend.setup_opencl_icd()
    dev = dpctl.SyclQueue().sycl_device
    same = dpctl.get_devices(backend=dev.backend, device_type=dev.device_type)
    assert dev in same
    if len(same) == 1:
        assert sycl_backend.node_device(dev, same) == dev
