"""The openmp backend: CPU cores and SIMD through numba, the default.

Kernels are numba functions over a block of outer sites, released from the
GIL; ``accelerator_for`` splits the outer sites into one block per thread and
runs the blocks on numba's OpenMP threads (:mod:`.parallel_numba`).

Process settings
----------------
pygrid changes two process-wide settings, when the first backend starts
(:func:`apply_process_settings`, called by ``backends.get_backend``), never at
import, and not when the user has set them:

- ``numba.config.SLP_VECTORIZE = 1`` (unless ``NUMBA_SLP_VECTORIZE`` is set).  numba
  leaves LLVM's SLP vectoriser off, and the fixed-length lane loops of the generated
  kernels need it to become vector instructions.  It applies to kernels compiled after
  it is set.
- numba's threading layers tried in the order OpenMP, TBB, workqueue (unless
  ``NUMBA_THREADING_LAYER`` or ``NUMBA_THREADING_LAYER_PRIORITY`` is set; numba's own
  order puts TBB first).  A launch on OpenMP's threads is one libgomp region
  (:mod:`.gomp_team`), half the cost of numba's parallel loop, and balances its blocks;
  where a TBB library is on the loader's path (Intel's OpenCL runtime, a oneAPI
  environment) numba would otherwise take TBB.  It applies where numba has not started
  its threads yet.

OpenMP's wait policy is left to the user (``OMP_WAIT_POLICY``): libgomp's
default, a short spin after each parallel region, is what lets one launch
follow another in microseconds.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import BackendError
from . import host

#: numba's threading layers in the order pygrid tries them (see "Process settings")
THREADING_LAYERS = ["omp", "tbb", "workqueue"]


def apply_process_settings() -> None:
    """Apply the process settings above (idempotent)."""
    import numba

    if "NUMBA_SLP_VECTORIZE" not in os.environ:
        numba.config.SLP_VECTORIZE = 1
    if "NUMBA_THREADING_LAYER" not in os.environ and "NUMBA_THREADING_LAYER_PRIORITY" not in os.environ:
        numba.config.THREADING_LAYER_PRIORITY = list(THREADING_LAYERS)


def default_threads() -> int:
    """``PYGRID_THREADS``, else ``OMP_NUM_THREADS``, else the cores available to this process
    divided among the ranks of an MPI job on this node."""
    for var in ("PYGRID_THREADS", "OMP_NUM_THREADS"):
        v = os.environ.get(var, "").split(",")[0].strip()
        if v.isdigit() and int(v) > 0:
            return int(v)
    from ..communicator import ranks_on_this_node

    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        cores = os.cpu_count() or 1
    return max(1, cores // ranks_on_this_node())


_NAMES = {np.dtype(t): t for t in ("float64", "float32")}


def _name(dtype: np.dtype) -> str:
    # numpy's dtype.name is a Python property that costs microseconds on every launch
    return _NAMES.get(dtype) or dtype.name


_parallel_for = None
_run_packed = None
_reductions_numba = None


def _reductions():
    # imported at the first reduction (it imports numba), and kept: a function-level import costs
    # microseconds a call
    global _reductions_numba
    if _reductions_numba is None:
        from . import reductions_numba as _reductions_numba
    return _reductions_numba


def _serial_packed():
    global _run_packed
    if _run_packed is None:
        from .parallel_numba import run_packed as _run_packed
    return _run_packed


def _parallel():
    # imported at the first launch, not with the backend (it imports numba); a function-level
    # import on every launch cost microseconds
    global _parallel_for
    if _parallel_for is None:
        from .parallel_numba import parallel_for as _parallel_for
    return _parallel_for


_numba_threads = None


def numba_threads() -> int:
    """The most threads numba's parallel loops can run (``NUMBA_NUM_THREADS``, fixed when numba
    is imported)."""
    global _numba_threads
    if _numba_threads is None:
        import numba

        _numba_threads = numba.config.NUMBA_NUM_THREADS
    return _numba_threads


class _KeptRun(host.KeptBinding):
    """An expression kernel's launch bound to the flat aliases of its buffers and a coefficient
    array written before each launch."""

    __slots__ = ("ir", "shifts", "coef")

    def serves(self, backend, ir, out, inputs, shifts):
        """Whether this launch serves a run of ``ir`` on these buffers now."""
        refs = self.refs
        if (self.ir is not ir or refs[0]() is not out or self.backend is not backend
                or backend.blocks(self.nbytes) != self.nblocks):
            return False
        for i in range(len(inputs)):
            if refs[i + 1]() is not inputs[i]:
                return False
        kept, j = self.shifts, 0
        for s in shifts:
            for x in s:
                if j >= len(kept) or x is not kept[j]:
                    return False
                j += 1
        return j == len(kept)

    def take(self, backend, ir, out, inputs, shifts):
        """True, holding the lock, when this launch serves a run of ``ir`` on these buffers now."""
        return self.serves(backend, ir, out, inputs, shifts) and self.lock.acquire(False)

    def set_coefficients(self, coefs):
        # (re, im) interleaved, as the complex128 array holds them: one copy
        self.coef[:2 * len(coefs)] = np.ascontiguousarray(coefs, np.complex128).view(np.float64)


class OpenMPBackend:
    """CPU cores and SIMD through numba (``--accelerator openmp``)."""

    name = "openmp"
    device = "unified"
    asynchronous = False
    #: a launch whose first argument (the array it writes, or reduces) holds fewer bytes than
    #: this runs on the calling thread: starting the other threads (2-3 us) costs more than it
    #: saves.  Bytes, not outer sites: an outer site of a fermion holds twelve times a complex
    #: scalar's, and a hop's 4D outer site Ls slices of its fields, so every launch that writes
    #: a field runs where the others on that field do, and the field stays in those cores'
    #: caches (docs/performance.md, "Which thread runs a small launch").
    min_parallel_bytes = 128 * 1024
    #: the smallest piece of a balanced launch (``bind_kernel(..., balance=True)``) writes at least
    #: this many bytes of its first argument: each piece costs a counter add and a call of the
    #: kernel, about 0.1 us, and the last pieces are what a thread running faster takes over
    min_piece_bytes = 16 * 1024

    def __init__(self) -> None:
        try:
            import numba  # noqa: F401
        except ImportError as e:  # pragma: no cover - numba is a hard dependency
            raise BackendError("the openmp backend needs numba: pip install numba") from e
        apply_process_settings()
        self._kernels: dict = {}
        self._prepared: set = set()
        self._tables: dict = {}    # (IR digest, dtype) -> its tables as the kernel takes them
        self._kept_runs: dict = {}  # (IR, alias, buffers' ids) -> _KeptRun
        self._nthreads: int | None = None
        # the thread count as a kept launch checks it (parallel_numba.Bound.runner)
        self._thread_cell: list = [None]
        self.set_threads(default_threads())

    def describe(self) -> str:
        return f"openmp (numba on the host CPU, {self._nthreads} threads)"

    # ---- threads ---------------------------------------------------------------
    def set_threads(self, n: int | None) -> None:
        if n is not None:
            if int(n) < 1:
                raise BackendError(f"thread count must be positive, got {n}")
            self._nthreads = int(n)
            self._thread_cell[0] = self._nthreads
        import numba

        numba.set_num_threads(self._blocks())

    def threads(self) -> int:
        return self._nthreads

    def _blocks(self) -> int:
        return min(self._nthreads, numba_threads())

    def blocks(self, nbytes: int) -> int:
        """How many blocks a launch whose first argument holds ``nbytes`` bytes splits its outer
        sites into: block b is [b * osites // n, (b + 1) * osites // n), one per thread (1: the
        calling thread alone, below :attr:`min_parallel_bytes`)."""
        return 1 if nbytes < self.min_parallel_bytes else self._blocks()

    def accelerator_for(self, osites: int, kernel: Callable, *args: Any) -> None:
        """Run ``kernel(lo, hi, *args)`` over outer sites [0, osites), split over the threads.

        ``kernel`` is a numba function (``nogil``); a plain Python callable runs on the calling
        thread.  ``args[0]`` is the array the kernel writes (or reduces): its size decides the
        split (:meth:`blocks`).  A Ctrl-C is raised when every block is done, so the views of a
        launch never close while a thread still writes through them.
        """
        nbytes = host.launch_bytes(args)
        if nbytes < self.min_parallel_bytes:
            kernel(0, osites, *args)
            return
        n = self._blocks()
        if n == 1:
            # its arguments packed, without their owners (see parallel_numba.Bound), where numba's
            # dispatch would hand them over with them
            _serial_packed()(osites, kernel, *args)
            return
        _parallel()(n, osites, kernel, *args)

    def kept_launch(self, kernel: Callable, args: tuple, nblocks: int,
                    balance: bool = False) -> Callable[..., None]:
        """``launch(osites, *args)`` for a kept launch of ``nblocks`` blocks: :meth:`bind_kernel`, or
        the kernel itself on the calling thread for one block (binding would load, or compile for
        seconds, a parallel driver that launch never uses).  ``balance``: see :meth:`bind_kernel`."""
        if nblocks > 1:
            return self.bind_kernel(kernel, *args, balance=balance)
        from numba.core.registry import CPUDispatcher

        from .parallel_numba import entry_point

        # numba's dispatch on the types of a kernel's 8-20 arguments takes 1-3 us of each run
        entry_of = (lambda a: entry_point(kernel, (0, 0, *a))) if isinstance(kernel, CPUDispatcher) else None
        return host.serial_launcher(kernel, args, entry_of)

    def bind_kernel(self, kernel: Callable, *args: Any, balance: bool = False) -> Callable[..., None]:
        """:meth:`accelerator_for` of ``kernel`` for arguments of the types of ``args``, through
        the parallel driver's entry point (``parallel_numba.Bound``); ``launch.again(osites)``
        runs it on ``args`` themselves, packed once, and ``launch.prepared(osites)()`` too, through
        the driver's entry point looked up once (while the thread count stays).  ``balance``: the
        prepared launch hands the threads pieces of the blocks as they come free, in pieces of at
        least :attr:`min_piece_bytes` of ``args[0]`` (:mod:`.gomp_team`; libgomp's region only)."""
        from .parallel_numba import Bound

        bound = Bound(kernel, args)
        nbytes = host.launch_bytes(args)

        def launch(osites: int, *a: Any) -> None:
            bound(self.blocks(host.launch_bytes(a)), osites, *a)

        def again(osites: int) -> None:
            bound.again(self.blocks(nbytes), osites)

        def prepared(osites: int) -> Callable[[], None]:
            piece = -(-self.min_piece_bytes * osites // max(nbytes, 1)) if balance and osites else 0
            return bound.runner(self.blocks(nbytes), osites, self._thread_cell, lambda: again(osites), piece)

        launch.again, launch.prepared = again, prepared
        return launch

    # ---- kernels -----------------------------------------------------------------
    def kernel(self, ir, nsimd: int, alias: bool, dtype: str = "float64") -> Callable:
        """The compiled numba kernel of a lowered expression."""
        key = (ir.key(), nsimd, alias, dtype)
        k = self._kernels.get(key)
        if k is None:
            from .codegen_numba import kernel_source, ops_module_name
            from .compile_cache import load_module
            from .numba_ops import ops_source

            load_module(ops_source(nsimd, dtype), module_name=ops_module_name(nsimd, dtype))
            k = load_module(kernel_source(ir, nsimd, alias, dtype), "pygrid_omp",
                            label=f"an expression kernel ({np.dtype(dtype).name}, Nsimd {nsimd})").kernel
            self._kernels[key] = k
        return k

    def run(self, ir, out, inputs, shifts, coefs, nsimd, alias=False, keep=True) -> None:
        kept = self._kept_runs.get((id(ir), alias, id(out), *map(id, inputs)))
        if kept is not None and kept.take(self, ir, out, inputs, shifts):
            kept.run_held(coefs)
            return
        rdt = out.dtype
        k = self.kernel(ir, nsimd, alias, _name(rdt))
        flat = [host.read_only(a.reshape(-1)) for a in inputs]
        consts = self._constants(ir, shifts, coefs, rdt)
        args = (out.reshape(-1), *flat, *consts)
        self.accelerator_for(out.shape[0], k, *args)
        if keep:
            self._keep_run(k, args, ir, alias, out, inputs, shifts)

    def _keep_run(self, k, args, ir, alias, out, inputs, shifts):
        """Keep the launch of ``k`` on these buffers for the next run of ``ir`` on them (a solver's
        axpy every iteration): the kernel and launch lookups, the flat aliases and the coefficient
        array are Python that runs with the caches full of the fields the last kernel streamed."""
        buffers = (out, *inputs)
        # the flat aliases hold the memory's owner, not a buffer that is a view of it
        if host.holds_a_buffer(args, buffers):
            return
        kept = _KeptRun()
        kept.backend = self
        kept.ir, kept.shifts, kept.osites = ir, [x for s in shifts for x in s], out.shape[0]
        kept.nbytes = out.nbytes
        kept.nblocks = self.blocks(kept.nbytes)
        kept.coef = np.array(args[-1])  # writable: the coefficients change from run to run
        kept.args = (*args[:-1], host.read_only(kept.coef))
        # the launch on kept.args themselves (held here), packed once
        # an expression's kernel writes each outer site from that site's inputs and its neighbours'
        kept.bound, kept.lock = self.kept_launch(k, kept.args, kept.nblocks, balance=True), threading.Lock()
        host.keep(self._kept_runs, (id(ir), alias, id(out), *map(id, inputs)), kept, buffers)

    def kept_run(self, ir, alias, out, inputs, shifts):
        """The launch the last :meth:`run` of ``ir`` on these buffers kept, for a caller that runs it
        again on them (``prepared()``, ``again(gate, coefs)``: ``host.KeptBinding``); None where none
        serves them now."""
        kept = self._kept_runs.get((id(ir), alias, id(out), *map(id, inputs)))
        return kept if kept is not None and kept.serves(self, ir, out, inputs, shifts) else None

    def prepare(self, ir, shifts, coefs, nsimd, alias, dtype, osites=None) -> None:
        # numba compiles at the first call for the argument types: an empty site range on empty
        # buffers of the same types compiles (or loads) the kernel, and its parallel driver when the
        # launch will use the threads, without touching a field
        rdt = np.dtype(dtype)
        k = self.kernel(ir, nsimd, alias, _name(rdt))
        nbytes = None if osites is None else osites * ir.out_ncomp * 2 * nsimd * rdt.itemsize
        threads = self._blocks() > 1 and (nbytes is None or self.blocks(nbytes) > 1)
        key = (k, tuple(x.dtype.char for s in shifts for x in s), threads)
        if key in self._prepared:
            return
        from .parallel_numba import parallel_for

        empty = np.empty(0, rdt)
        args = (empty, *[host.read_only(empty)] * len(ir.slots), *self._constants(ir, shifts, coefs, rdt))
        k(0, 0, *args)
        if threads:
            parallel_for(self._blocks(), 0, k, *args)
        self._prepared.add(key)

    def _constants(self, ir, shifts, coefs, rdt):
        key = (ir.key(), rdt.char)
        tables = self._tables.get(key)
        if tables is None:
            tables = self._tables[key] = [
                host.read_only((t if t.dtype.kind == "i" else t.astype(rdt)).reshape(-1)) for t in ir.tables]
        flat_shifts = [host.read_only(x.reshape(-1)) for s in shifts for x in s]
        return [*flat_shifts, *tables, host.read_only(host.coef_reals(coefs, rdt))]

    def launch(self, kernel, args, nsimd, dtype) -> None:
        from . import covariant

        covariant.host_launch(self, kernel, args, nsimd, dtype)

    def relayout(self, kind, out, inp, om=None, lm=None) -> None:
        from . import layout_numba

        layout_numba.relayout(kind, out, inp, om, lm)

    # ---- reductions (numba: numpy's BLAS threads would fight the kernels' OpenMP threads) ----
    def norm2(self, a) -> float:
        return _reductions().norm2(self, a)

    def inner_product(self, a, b) -> complex:
        return _reductions().inner_product(self, a, b)

    def axpy(self, z, a, x, y) -> None:
        _reductions().axpy(self, z, a, x, y)

    def axpy_norm2(self, z, a, x, y) -> float:
        return _reductions().axpy_norm2(self, z, a, x, y)

    def axpy_xpay(self, x, a, p, r, b) -> None:
        _reductions().axpy_xpay(self, x, a, p, r, b)

    def kept_update(self, name, *buffers):
        return _reductions().kept_update(self, name, buffers)

    def site_sum(self, a) -> np.ndarray:
        return host.site_sum(a)

    def slice_sum(self, a, table) -> np.ndarray:
        return host.slice_sum(a, table)

    def synchronize(self) -> None:
        pass  # every launch returns when its kernel has finished

    def device_copy(self, host):
        return host  # kernels here read host arrays

    def copy_to_host(self, buf, out):
        host.copy_to_host(buf, out)

    def copy_from_host(self, buf, hbuf):
        host.copy_from_host(buf, hbuf)

    def host_array(self, shape, dtype):
        return host.host_array(shape, dtype)

    def bench_copy(self, n, dtype) -> None:
        return None
