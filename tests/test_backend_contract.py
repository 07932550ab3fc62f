"""The backend contract (pygrid/accelerator/contract.py): every backend implements every
primitive itself, and process settings are applied when a backend starts, not at import."""
import importlib
import os
import shutil
import subprocess
import sys

import pytest

import pygrid as pg
from pygrid.accelerator.contract import MEMBERS, Backend

CLASSES = {
    "numpy": ("pygrid.accelerator.numpy_backend", "NumpyBackend"),
    "openmp": ("pygrid.accelerator.openmp_backend", "OpenMPBackend"),
    "cuda-emulated": ("pygrid.accelerator.emulated_backend", "EmulatedSIMTBackend"),
    "cuda": ("pygrid.accelerator.cuda_backend", "CudaBackend"),
    "sycl": ("pygrid.accelerator.sycl_backend", "SyclBackend"),
}


def _class(name):
    module, cls = CLASSES[name]
    return getattr(importlib.import_module(module), cls)


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_every_member_defined_by_the_class_itself(name):
    try:
        cls = _class(name)
    except ImportError as e:  # pragma: no cover - every module imports without its device library
        pytest.fail(f"{name}: {e}")
    assert cls.__mro__ == (cls, object), f"{cls.__name__} inherits from {cls.__mro__[1:-1]}"
    for m in MEMBERS:
        if m in ("name", "device") and m not in vars(cls):
            continue  # set per instance, checked below on the instances that start here
        assert m in vars(cls), f"{cls.__name__} does not define {m}"


@pytest.mark.parametrize("name", ["numpy", "openmp", "cuda-emulated", "opencl-emulated", "sycl"])
def test_instances_meet_the_protocol(name):
    if "emulated" in name and not (shutil.which("g++") or os.environ.get("CXX")):
        pytest.skip("no C++ compiler for the emulation")
    if name == "sycl":
        pytest.importorskip("dpctl")
    b = pg.get_backend(name)
    assert isinstance(b, Backend)
    assert b.name == name and b.device in ("unified", "sycl", "cuda", "hip")
    assert b.asynchronous is False  # each of these waits for its kernels
    assert isinstance(b.describe(), str) and name.split("-")[0] in b.describe()
    assert b.threads() >= 1


@pytest.mark.parametrize("name", ["numpy", "openmp", "cuda-emulated", "sycl"])
def test_device_copies_go_both_ways_in_place(name):
    """device_copy, then copy_from_host into it and copy_to_host out of it (into the backend's
    host_array): the same values, in the same device array (a kernel that holds it sees the
    update)."""
    import numpy as np

    if "emulated" in name and not (shutil.which("g++") or os.environ.get("CXX")):
        pytest.skip("no C++ compiler for the emulation")
    if name == "sycl":
        pytest.importorskip("dpctl")
    b = pg.get_backend(name)
    a = np.arange(48.0).reshape(2, 6, 2, 2)
    d = b.device_copy(a)
    back = b.host_array(a.shape, a.dtype)
    assert back.shape == a.shape and back.dtype == a.dtype and back.flags.c_contiguous
    b.copy_to_host(d, back)
    np.testing.assert_array_equal(back, a)
    new = -a - 1
    b.copy_from_host(d, new)
    b.copy_to_host(d, back)
    np.testing.assert_array_equal(back, new)
    if name == "sycl":
        from pygrid.errors import ConformabilityError

        with pytest.raises(ConformabilityError, match="copy_to_host"):
            b.copy_to_host(d, np.zeros(3))


def test_cuda_host_arrays_are_page_locked(monkeypatch):
    """CudaBackend.host_array: a numpy array over memory from CuPy's pinned pool (the stand-in's
    alloc_pinned_memory, which hands out plain memory here), of the shape and dtype asked."""
    import numpy as np
    from cupy_standin import fake_cupy

    from pygrid.accelerator import cuda_backend

    cp, pinned = fake_cupy(), []
    cp.cuda.runtime.CUDARuntimeError = type("CUDARuntimeError", (RuntimeError,), {})
    cp.cuda.alloc_pinned_memory = lambda n: pinned.append(bytearray(n)) or pinned[-1]
    monkeypatch.setitem(sys.modules, "cupy", cp)
    b = cuda_backend.CudaBackend("cuda")
    a = b.host_array((5, 6, 2, 8), np.float32)
    assert a.shape == (5, 6, 2, 8) and a.dtype == np.float32 and a.flags.c_contiguous and a.flags.writeable
    assert len(pinned) == 1 and len(pinned[0]) == a.nbytes
    a[...] = 1.5  # the array is that memory
    assert np.frombuffer(pinned[0], np.float32).tolist() == [1.5] * a.size
    assert b.host_array((0, 6), np.float64).shape == (0, 6)

    def refuse(n):
        raise cp.cuda.runtime.CUDARuntimeError("cudaErrorMemoryAllocation")

    cp.cuda.alloc_pinned_memory = refuse  # nothing more to lock: pageable memory, the same array
    a = b.host_array((3, 4), np.float64)
    assert a.shape == (3, 4) and a.dtype == np.float64 and a.flags.writeable


def test_host_kernels_run_or_are_refused_by_name():
    """accelerator_for and bind_kernel run a host kernel on the CPU backends; sycl refuses both
    with a BackendError naming the backend."""
    import numpy as np

    def mark(lo, hi, a):
        a[lo:hi] += 1

    for name in ("numpy", "openmp"):
        b, a = pg.get_backend(name), np.zeros(300)
        b.accelerator_for(300, mark, a)
        b.bind_kernel(mark, a)(300, a)
        assert (a == 2).all()
    pytest.importorskip("dpctl")
    b = pg.get_backend("sycl")
    for call in (lambda: b.accelerator_for(3, mark, np.zeros(3)), lambda: b.bind_kernel(mark, np.zeros(3))):
        with pytest.raises(pg.BackendError, match="do not run on the sycl backend"):
            call()


def test_a_bound_launch_runs_again_and_prepared():
    """``launch.again(osites)`` and ``launch.prepared(osites)()`` run the kernel on the bound
    arguments on the CPU backends; on openmp a prepared launch follows a change of thread count."""
    import numpy as np
    from numba import njit

    @njit(nogil=True)
    def add_one(lo, hi, a):
        for i in range(lo, hi):
            a[i] += 1.0

    for name in ("numpy", "openmp"):
        b, a = pg.get_backend(name), np.zeros(4096)
        launch = b.bind_kernel(add_one, a)
        launch(4096, a)
        launch.again(4096)
        go = launch.prepared(4096)
        go()
        assert (a == 3).all()
        before = b.threads()
        try:
            b.set_threads(1)
            go()
            b.set_threads(before)
            go()
        finally:
            b.set_threads(before)
        assert (a == 5).all()
        launch.prepared(1000)()
        assert (a[:1000] == 6).all() and (a[1000:] == 5).all()


def test_no_class_is_patched():
    """The library and the test fixtures select backends by name: no backend method is rebound."""
    from pygrid.accelerator import emulated_backend, numpy_backend, openmp_backend

    for mod in (numpy_backend, openmp_backend, emulated_backend):
        for cls in (c for c in vars(mod).values() if isinstance(c, type) and c.__module__ == mod.__name__):
            for attr, fn in vars(cls).items():
                if callable(fn) and hasattr(fn, "__qualname__"):
                    assert fn.__qualname__.startswith(cls.__name__ + "."), (cls, attr, fn.__qualname__)


SETTINGS = """
import os, numba
import pygrid as pg
print(os.environ.get("OMP_WAIT_POLICY"), numba.config.SLP_VECTORIZE)
pg.get_backend("openmp")
print(os.environ.get("OMP_WAIT_POLICY"), numba.config.SLP_VECTORIZE)
"""


def test_process_settings_applied_at_backend_start_not_at_import():
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "NUMBA_SLP_VECTORIZE")}
    out = subprocess.run([sys.executable, "-c", SETTINGS], env=env, capture_output=True, text=True,
                         check=True).stdout.split("\n")
    # the wait policy stays libgomp's default (a short spin): launches follow each other quickly
    assert out[0] == "None 0" and out[1] == "None 1", out
    env["NUMBA_SLP_VECTORIZE"] = "0"  # the user's choice wins
    out = subprocess.run([sys.executable, "-c", SETTINGS], env=env, capture_output=True, text=True,
                         check=True).stdout.split("\n")
    assert out[1] == "None 0", out


def test_the_benchmark_timer_waits_for_each_call(monkeypatch):
    """GPU launches return before their kernels run: each timed batch ends with the backend's
    synchronize, so a time covers the work; too few calls for batches are timed one by one."""
    from pygrid.bench.timing import time_kernel

    events = []
    monkeypatch.setattr(pg.get_backend(), "synchronize", lambda: events.append("sync"))
    _, _, n = time_kernel(lambda: events.append("call"), iterations=3, warmup=2)
    assert n == 3 and events == ["call", "sync"] * 5


def test_the_benchmark_timer_times_short_calls_in_batches(monkeypatch):
    """Calls far shorter than a batch are timed in batches of back-to-back calls, each ending with
    the synchronize, at least MIN_SAMPLES of them; the per-call figures are a batch's time per call
    (a call that sleeps 0.2 ms cannot come out faster), and exactly the calls asked for are made."""
    import time

    from pygrid.bench import timing

    events = []
    monkeypatch.setattr(pg.get_backend(), "synchronize", lambda: events.append("sync"))

    def call():
        events.append("call")
        time.sleep(2e-4)

    median, fastest, n = timing.time_kernel(call, iterations=200, warmup=2)
    timed = events[4:]
    batches = timed.count("sync")
    assert n == 200 and timed.count("call") == 200 and timed[-1] == "sync"
    assert timing.MIN_SAMPLES <= batches < 200
    assert 2e-4 <= fastest <= median


LAYER = """
import numba
import pygrid as pg
pg.get_backend("openmp")
numba.get_num_threads()
print(numba.threading_layer())
"""


def test_numba_takes_openmp_threads_where_a_tbb_library_is_on_the_loader_path():
    """numba's own order tries TBB first; with a TBB library on LD_LIBRARY_PATH (Intel's OpenCL
    runtime beside the interpreter, which the sycl backend puts there for child processes) it
    would take TBB and the launches would lose libgomp's region.  The backend asks for OpenMP
    first, unless the user chose."""
    lib = os.path.join(sys.prefix, "lib")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_THREADING_LAYER")}
    rest = [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    env["LD_LIBRARY_PATH"] = os.pathsep.join([lib] + rest)
    run = lambda e: subprocess.run([sys.executable, "-c", LAYER], env=e, capture_output=True,  # noqa: E731
                                   text=True, timeout=300).stdout.strip()
    users = run(dict(env, NUMBA_THREADING_LAYER_PRIORITY="tbb omp workqueue"))
    if users != "tbb":
        pytest.skip(f"no TBB layer here (numba took {users or 'none'} when asked for TBB first)")
    assert run(env) == "omp"


LAUNCHER_RANK_VARS = ("MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK",
                      "PALS_LOCAL_RANKID", "SLURM_LOCALID", "PYGRID_CUDA_DEVICE")


@pytest.mark.parametrize("env,want", [
    ({}, 0),                                            # no launcher: the first device
    ({"MPI_LOCALRANKID": "1"}, 1),                      # MPICH's Hydra: a GPU a rank
    ({"OMPI_COMM_WORLD_LOCAL_RANK": "6"}, 2),           # Open MPI, more ranks than GPUs: in turn
    ({"MPI_LOCALRANKID": "3", "SLURM_LOCALID": "0"}, 3),  # mpiexec inside a Slurm allocation
    ({"SLURM_LOCALID": "2"}, 2),
    ({"MPI_LOCALRANKID": "3", "PYGRID_CUDA_DEVICE": "0"}, 0),  # the user's choice first
])
def test_cuda_backend_takes_a_gpu_by_the_rank_on_the_node(monkeypatch, env, want):
    """Ranks sharing a node with 4 GPUs take one each (stand-in CuPy): the device made current,
    and the one describe() names."""
    from cupy_standin import fake_cupy

    from pygrid.accelerator import cuda_backend

    for var in LAUNCHER_RANK_VARS:
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    cp = fake_cupy(devices=4)
    monkeypatch.setitem(sys.modules, "cupy", cp)
    b = cuda_backend.CudaBackend("cuda")
    assert cp.cuda.used == [want] and b.device_id == want
    assert f"device {want} of 4" in b.describe()
    assert b.asynchronous  # its launches only queue: the timers and the comms line rely on it


@pytest.mark.parametrize("value", ["4", "-1", "gpu1"])
def test_a_cuda_device_that_does_not_exist_is_refused_by_name(monkeypatch, value):
    from cupy_standin import fake_cupy

    from pygrid.accelerator import cuda_backend
    from pygrid.errors import BackendError

    monkeypatch.setenv("PYGRID_CUDA_DEVICE", value)
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy(devices=4))
    with pytest.raises(BackendError, match=r"PYGRID_CUDA_DEVICE=.*sees 4 \(0 to 3\)"):
        cuda_backend.CudaBackend("cuda")
