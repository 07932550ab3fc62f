"""A launch's blocks in one parallel region of libgomp, entered from compiled code: the openmp
backend's driver of packed kernels where numba's threading layer is libgomp.

numba's ``prange`` driver spends about 1.6 us on a launch of an empty kernel (its region builds
a schedule and the loop's arguments every call); ``GOMP_parallel`` called from compiled code,
with a body that takes its blocks from the launch's task words, spends about 0.85 us (AVX-512
machine, warm caches).  The threads are libgomp's pool, the one numba's ``prange`` regions run
on, so the two drivers share one team of threads.

A launch is described by :data:`TASK_WORDS` 64-bit words: the address of the ``tramp`` that
unpacks the kernel's arguments (:mod:`.parallel_numba`), the number of blocks, the outer sites,
the addresses of the per-block failure flags and of the packed words, and the number of those
words.  Block ``b`` is ``[b * osites // nblocks, (b + 1) * osites // nblocks)`` and runs on
thread ``b`` of the team (the calling thread is thread 0), as in the ``prange`` driver.
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np

TASK_WORDS = 6
_SYMBOLS = ("GOMP_parallel", "omp_get_thread_num", "omp_get_num_threads")
_state: dict = {}
_lock = threading.Lock()


def _loaded_libgomp() -> str | None:
    """The path of the libgomp this process has loaded (numba's OpenMP pool's), or None."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1]
                if "/libgomp" in path and ".so" in path:
                    return path
    except OSError:
        pass
    return None


def _resolve() -> bool:
    """Make libgomp's entry points known to the JIT's linker; False where numba's threads are not
    libgomp's: another threading layer, numba's OpenMP layer built on another vendor's runtime
    (Intel's or LLVM's, as conda's numba is), or no libgomp loaded.  The entry points come from
    the very file numba's pool loaded, so both drivers start the same threads."""
    import llvmlite.binding as ll
    import numba

    try:
        numba.get_num_threads()  # starts numba's threads, which picks its threading layer
        if numba.threading_layer() != "omp":
            return False
        from numba.np.ufunc import omppool

        path = _loaded_libgomp()
        if getattr(omppool, "openmp_vendor", None) != "GNU" or path is None:
            return False
        lib = ctypes.CDLL(path)
        for name in _SYMBOLS:
            ll.add_symbol(name, ctypes.cast(getattr(lib, name), ctypes.c_void_p).value)
    except (OSError, AttributeError, ValueError, ImportError):
        return False
    return True


def _source(symbol: str = "pygrid_gomp_body", hooks: str | None = None) -> str:
    """The module's source: ``body`` (the region's function, known to the linker as ``symbol``),
    ``region(t)`` (the region on the task words ``t``), ``run(task)`` (on the words at the address
    ``task``) and ``drive(...)``.  ``hooks``: the name of an importable module whose numba
    functions ``block_start(b)`` and ``block_end(b)`` the body calls around each block and
    ``launch_end(nblocks)`` ``region`` calls after the region (a benchmark's timestamps)."""
    from .parallel_numba import _own_digest

    def hook(call):
        return [f"        {call}"] if hooks else []

    # a hook may hold this process's addresses as constants: not for numba's disk cache
    cache = hooks is None

    return "\n".join([
        "# blocks of a packed kernel in one libgomp parallel region",
        f"# (pygrid/accelerator/parallel_numba.py digest {_own_digest()}, gomp_team {_digest()})",
        "import numpy as np",
        "from numba import carray, cfunc, njit, types",
        "from pygrid.accelerator.gomp_team_ops import as_pointer, gomp_parallel, team_size, thread_num",
        "from pygrid.accelerator.parallel_numba import call_kernel",
        *([f"from {hooks} import block_end, block_start, launch_end"] if hooks else []),
        "",
        f"W = {TASK_WORDS}",
        "",
        "",
        f"@cfunc(types.void(types.voidptr), nopython=True, cache={cache})",
        "def body(data):",
        "    t = carray(data, W, np.int64)",
        "    nb, n = t[1], t[2]",
        "    failed = carray(as_pointer(t[3]), nb, np.uint8)",
        "    words = carray(as_pointer(t[4]), t[5], np.uint64)",
        "    for b in range(thread_num(), nb, team_size()):",
        *hook("block_start(b)"),
        "        failed[b] = call_kernel(t[0], b * n // nb, (b + 1) * n // nb, (words,))",
        *hook("block_end(b)"),
        "",
        "",
        f"@njit(nogil=True, cache={cache})",
        "def region(t):",
        "    \"\"\"The task ``t``'s blocks in one region; the number that raised.\"\"\"",
        "    nb = t[1]",
        f'    gomp_parallel("{symbol}", t.ctypes.data, nb)',
        *(["    launch_end(nb)"] if hooks else []),
        "    failed = carray(as_pointer(t[3]), nb, np.uint8)",
        "    n = 0",
        "    for b in range(nb):",
        "        n += failed[b]",
        "    return n",
        "",
        "",
        f"@njit(nogil=True, cache={cache})",
        "def run(task):",
        "    return region(carray(as_pointer(task), W, np.int64))",
        "",
        "",
        f"@njit(nogil=True, cache={cache})",
        "def drive(address, nblocks, osites, failed, words):",
        "    # t is read after the region (its failed flags' address), so it lives through it",
        "    t = np.empty(W, np.int64)",
        "    t[0], t[1], t[2] = address, nblocks, osites",
        "    t[3], t[4], t[5] = failed.ctypes.data, words.ctypes.data, len(words)",
        "    return region(t)",
        "",
    ])


def _digest() -> str:
    import hashlib
    import os

    h = hashlib.sha1()
    for name in ("gomp_team.py", "gomp_team_ops.py"):
        with open(os.path.join(os.path.dirname(__file__), name), "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:16]


def _load(symbol: str, hooks: str | None = None):
    """The compiled module of :func:`_source`, its body known to the linker as ``symbol``; None
    where libgomp's team is not numba's (see :func:`_resolve`)."""
    if not _resolve():
        return None
    import llvmlite.binding as ll

    from .compile_cache import load_module

    mod = load_module(_source(symbol, hooks), "pygrid_gomp", label="the parallel driver on libgomp")
    ll.add_symbol(symbol, mod.body.address)
    return mod


def _module():
    mod = _state.get("module", False)
    if mod is not False:
        return mod
    with _lock:
        if _state.get("module", False) is False:
            _state["module"] = _load("pygrid_gomp_body")
        return _state["module"]


def install(hooks: str) -> bool:
    """Make the driver one whose body calls the functions of the module named ``hooks`` (see
    :func:`_source`), before any launch keeps the driver; False where libgomp's team is not
    numba's."""
    with _lock:
        _state["module"] = _load("pygrid_gomp_traced_body", hooks)
        return _state["module"] is not None


def driver():
    """``drive(address, nblocks, osites, failed, words)`` (the ``prange`` driver's signature for one
    packed argument: the number of blocks that raised, each flagged in ``failed``), or None where
    libgomp's team is not numba's."""
    mod = _module()
    return None if mod is None else mod.drive


def task(address: int, nblocks: int, osites: int, failed: np.ndarray, words: np.ndarray) -> np.ndarray | None:
    """The task words of one launch of the ``tramp`` at ``address`` on ``words`` (kept by the caller
    with ``failed`` and ``words`` as long as it runs the task), or None without libgomp's team."""
    if _module() is None:
        return None
    return np.array([address, nblocks, osites, failed.ctypes.data, words.ctypes.data, len(words)], np.int64)


def runner():
    """``run(task_address)``: the task's blocks in one region; the number that raised.  The compiled
    entry point, not the dispatcher: a kept launch calls it without numba's dispatch."""
    mod = _module()
    if mod is None:
        return None
    from numba import types

    sig = (types.int64,)
    mod.run.compile(sig)
    return mod.run.overloads[sig].entry_point
