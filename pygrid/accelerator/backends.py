"""The backends: one launch interface over numpy, OpenMP (numba) and, later, GPUs.

A backend runs lowered kernel IR on arrays that the memory manager handed out
for its memory space, and computes reductions there.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Protocol

import numpy as np

from ..errors import BackendError

try:
    import numba

    # numba leaves LLVM's SLP vectoriser off; the fixed-length lane loops of
    # our kernels need it to become vector instructions
    if "NUMBA_SLP_VECTORIZE" not in os.environ:
        numba.config.SLP_VECTORIZE = 1
except ImportError:  # pragma: no cover - numba is a hard dependency
    numba = None
from . import numpy_backend


class Backend(Protocol):
    """What every backend provides (the contract that numpy, openmp, cuda, hip, sycl and the emulations meet).

    Buffers are the raw view arrays of fields, shaped (osites, ncomp, 2, nsimd):
    numpy arrays on the CPU backends, device arrays (``UsmArray``, CuPy) elsewhere.
    A backend with memory of its own also has ``bench_copy(n, dtype)``: a function
    that runs one device-to-device copy of ``n`` reals, the benchmarks' roofline.
    """

    name: str
    #: the MemoryManager device that holds this backend's fields ('unified', 'sycl', 'cuda', 'hip')
    device: str

    def run(self, ir: Any, out: Any, inputs: list, shifts: list, coefs: np.ndarray, nsimd: int,
            alias: bool = False) -> None:
        """Evaluate one lowered expression (pygrid.accelerator.ir.KernelIR) into ``out``."""

    def launch(self, kernel: Any, args: dict, nsimd: int, dtype: Any) -> None:
        """Run a covariant kernel (pygrid.accelerator.covariant.Kernel) on ``args`` (parameter name -> value)."""

    def relayout(self, kind: str, out: Any, inp: Any, om: Any = None, lm: Any = None) -> None:
        """'gather' / 'scatter' through site and lane maps (checkerboards), 'cast' (precision), 'setcomp' (pokes)."""

    def norm2(self, a: Any) -> float:
        """Sum of squares of every real, accumulated in double."""

    def inner_product(self, a: Any, b: Any) -> complex:
        """sum conj(a) b over sites and components, accumulated in double."""

    def site_sum(self, a: Any) -> np.ndarray:
        """Sum over sites and lanes: complex array (ncomp,)."""

    def slice_sum(self, a: Any, table: np.ndarray) -> np.ndarray:
        """Sums over the slices listed in ``table``: complex array (nslices, ncomp)."""

    def accelerator_for(self, osites: int, kernel: Callable, *args: Any) -> None:
        """Run a host kernel ``kernel(lo, hi, *args)`` over outer sites (CPU backends; BackendError elsewhere)."""

    def set_threads(self, n: int | None) -> None:
        """CPU threads of the backend."""

    def threads(self) -> int:
        """CPU threads of the backend."""


class NumpyBackend:
    """The plain numpy evaluator (``--accelerator numpy``): the test oracle."""

    name = "numpy"
    device = "unified"

    def run(self, ir, out, inputs, shifts, coefs, nsimd, alias=False):
        numpy_backend.run_ir(ir, out, inputs, shifts, coefs)

    def set_threads(self, n):
        pass

    def threads(self):
        return 1

    def accelerator_for(self, osites, kernel, *args):
        """Run ``kernel(lo, hi, *args)`` over outer sites [0, osites)."""
        kernel(0, osites, *args)

    def launch(self, kernel, args, nsimd, dtype):
        """Run a covariant kernel (pygrid.accelerator.covariant) with ``args`` (name -> value)."""
        from . import covariant

        covariant.host_launch(self, kernel, args, nsimd, dtype)

    def relayout(self, kind, out, inp, om=None, lm=None):
        """Move field data between layouts (see pygrid.accelerator.layout_kernels): 'gather',
        'scatter' (checkerboards, through the site and lane maps om, lm), 'cast' (precision)
        or 'setcomp' (components om of out from components lm of inp)."""
        host_relayout(kind, out, inp, om, lm)

    def slice_sum(self, a, table):
        """Sums over slices: ``table`` (nslices, m) lists the flat (outer site, lane) indices of each
        slice; complex array (nslices, ncomp), accumulated in double."""
        osites, ncomp, _, ns = a.shape
        v = a.astype(np.float64, copy=False).transpose(0, 3, 1, 2).reshape(osites * ns, ncomp, 2)
        s = v[table].sum(axis=1)
        return s[..., 0] + 1j * s[..., 1]

    # reductions over (osites, ncomp, 2, nsimd) buffers, accumulated in double
    def inner_product(self, a, b):
        a = a.astype(np.float64, copy=False)
        b = b.astype(np.float64, copy=False)
        re = np.sum(a[:, :, 0] * b[:, :, 0]) + np.sum(a[:, :, 1] * b[:, :, 1])
        im = np.sum(a[:, :, 0] * b[:, :, 1]) - np.sum(a[:, :, 1] * b[:, :, 0])
        return complex(re, im)

    def norm2(self, a):
        a = a.astype(np.float64, copy=False).reshape(-1)
        return float(np.dot(a, a))

    def site_sum(self, a):
        """Sum over outer sites and lanes: complex array (ncomp,)."""
        s = a.astype(np.float64, copy=False).sum(axis=(0, 3))
        return s[:, 0] + 1j * s[:, 1]


class OpenMPBackend(NumpyBackend):
    """CPU cores and SIMD through numba: the default backend.

    Kernels are numba functions over a block of outer sites, released from
    the GIL; ``accelerator_for`` splits the outer sites into one block per
    thread and runs the blocks on a persistent thread pool.
    """

    name = "openmp"
    # below this many outer sites a kernel runs on the calling thread: waking
    # the pool costs more than it saves
    min_parallel_osites = 256

    def __init__(self):
        try:
            import numba  # noqa: F401
        except ImportError as e:  # pragma: no cover - numba is a hard dependency
            raise BackendError("the openmp backend needs numba: pip install numba") from e
        self._kernels = {}
        self._pool = None
        self._nthreads = None
        self.set_threads(_default_threads())

    def set_threads(self, n):
        if n is not None:
            if int(n) < 1:
                raise BackendError(f"thread count must be positive, got {n}")
            if self._nthreads is not None and int(n) != self._nthreads and self._pool is not None:
                self._pool.shutdown()
                self._pool = None
            self._nthreads = int(n)
        import numba

        # hand-written prange kernels (the Dirac operators) follow the same count
        numba.set_num_threads(min(self._nthreads, numba.config.NUMBA_NUM_THREADS))

    def threads(self):
        return self._nthreads

    def accelerator_for(self, osites, kernel, *args):
        """Run ``kernel(lo, hi, *args)`` over outer sites [0, osites), split over the threads."""
        n = self._nthreads
        if n == 1 or osites < self.min_parallel_osites:
            kernel(0, osites, *args)
            return
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="pygrid")
        bounds = [(i * osites) // n for i in range(n + 1)]
        futures = [self._pool.submit(kernel, bounds[i], bounds[i + 1], *args) for i in range(1, n)]
        kernel(bounds[0], bounds[1], *args)
        for f in futures:
            f.result()

    def norm2(self, a):
        from . import reductions_numba

        return reductions_numba.norm2(self, a)

    def inner_product(self, a, b):
        from . import reductions_numba

        return reductions_numba.inner_product(self, a, b)

    def kernel(self, ir, nsimd, alias, dtype="float64"):
        key = (ir.key(), nsimd, alias, dtype)
        k = self._kernels.get(key)
        if k is None:
            from .codegen_numba import kernel_source, ops_module_name
            from .compile_cache import load_module
            from .numba_ops import ops_source

            load_module(ops_source(nsimd, dtype), module_name=ops_module_name(nsimd, dtype))
            k = load_module(kernel_source(ir, nsimd, alias, dtype), "pygrid_omp").kernel
            self._kernels[key] = k
        return k

    def run(self, ir, out, inputs, shifts, coefs, nsimd, alias=False):
        rdt = out.dtype
        k = self.kernel(ir, nsimd, alias, rdt.name)
        tables = [(t if t.dtype.kind == "i" else t.astype(rdt)).reshape(-1) for t in ir.tables]
        cf = np.zeros(max(2, 2 * len(coefs)), dtype=rdt)
        cf[0:2 * len(coefs):2] = coefs.real
        cf[1:2 * len(coefs):2] = coefs.imag
        flat_shifts = [x.reshape(-1) for s in shifts for x in s]
        flat = [a.reshape(-1) for a in inputs]
        self.accelerator_for(out.shape[0], k, out.reshape(-1), *flat, *flat_shifts, *tables, cf)


def host_relayout(kind, out, inp, om=None, lm=None):
    """:meth:`NumpyBackend.relayout` on host arrays, with numpy."""
    if kind == "cast":
        out[...] = inp
    elif kind == "gather":
        out[...] = inp.transpose(0, 3, 1, 2)[om, lm].transpose(0, 2, 3, 1)
    elif kind == "scatter":
        out.transpose(0, 3, 1, 2)[om, lm] = inp.transpose(0, 3, 1, 2)
    elif kind == "setcomp":
        out[:, om] = inp[:, lm]
    else:
        raise BackendError(f"unknown relayout {kind!r}")


def _default_threads():
    for var in ("PYGRID_THREADS", "OMP_NUM_THREADS"):
        v = os.environ.get(var, "").split(",")[0].strip()
        if v.isdigit() and int(v) > 0:
            return int(v)
    from ..communicator import ranks_on_this_node

    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        cores = os.cpu_count() or 1
    return max(1, cores // ranks_on_this_node())  # ranks on one node share its cores


_backends = {}
_current = None


def get_backend(name=None):
    global _current
    if name is None:
        if _current is None:
            _current = get_backend(os.environ.get("PYGRID_ACCELERATOR") or "openmp")
        return _current
    if name not in _backends:
        if name == "numpy":
            _backends[name] = NumpyBackend()
        elif name in ("openmp", "auto"):
            _backends[name] = OpenMPBackend()
        # GPU backends: generated C (cuda_backend.py, sycl_backend.py)
        elif name in ("cuda", "hip", "cuda-emulated", "opencl-emulated"):
            from .cuda_backend import make_backend

            _backends[name] = make_backend(name)
        elif name == "sycl":
            from .sycl_backend import SyclBackend

            _backends[name] = SyclBackend()
        else:
            raise BackendError(
                f"unknown backend {name!r}; choose one of openmp, numpy, cuda, hip, sycl, "
                "cuda-emulated, opencl-emulated"
            )
    return _backends[name]


def accelerator_for(osites, kernel, *args):
    """The one launch primitive: ``kernel(lo, hi, *args)`` over outer sites [0, osites).

    On the openmp backend the sites are split over the threads; ``kernel``
    should be a ``numba.njit(nogil=True)`` function so the blocks run in parallel.
    """
    get_backend().accelerator_for(osites, kernel, *args)


def set_backend(name):
    global _current
    _current = get_backend(name)
    return _current
