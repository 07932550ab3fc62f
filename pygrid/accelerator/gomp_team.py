"""A launch's blocks in one parallel region of libgomp, entered from compiled code: the openmp
backend's driver of packed kernels where numba's threading layer is libgomp.

numba's ``prange`` driver spends about 1.6 us on a launch of an empty kernel (its region builds
a schedule and the loop's arguments every call); ``GOMP_parallel`` called from compiled code,
with a body that takes its blocks from the launch's task words, spends about 0.85 us (AVX-512
machine, warm caches).  The threads are libgomp's pool, the one numba's ``prange`` regions run
on, so the two drivers share one team of threads.

A launch is described by :data:`TASK_WORDS` 64-bit words: the address of the ``tramp`` that
unpacks the kernel's arguments (:mod:`.parallel_numba`), the number of blocks, the outer sites,
the addresses of the per-block failure flags and of the packed words, the number of those
words, the number of pieces a block is cut into, and the address of the blocks' counters.
Block ``b`` is ``[b * osites // nblocks, (b + 1) * osites // nblocks)`` and runs on thread ``b``
of the team (the calling thread is thread 0), as in the ``prange`` driver.

A balanced launch (more than one piece a block, :func:`task`'s ``piece_sites``, for kernels whose
sites are independent) cuts each block into pieces of halving size: the first half of the block,
then a quarter, an eighth, down to the smallest piece.  A thread takes its own block's pieces in
order from an atomic counter, then the pieces left in the other blocks.  Where the threads run
at one speed each runs its own block as before, one counter add a piece more; where one runs
slower (on a virtual machine, another tenant on its core's second hardware thread slows an
AVX-512 kernel by up to 2x while the clock stays), the other takes its last pieces, and the
launch ends near the time the two threads' summed speed gives instead of the slow thread's.
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np

TASK_WORDS = 8
#: the blocks' counters of a balanced launch, one 64-byte line each
_LINE_WORDS = 8
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
    functions ``block_start(b)`` and ``block_end(b)`` the body calls around each block (around each
    thread's part in a balanced launch, ``b`` the thread's number) and ``launch_end(nblocks)``
    ``region`` calls after the region (a benchmark's timestamps)."""
    from .parallel_numba import _own_digest

    def hook(call, indent=8):
        return [" " * indent + call] if hooks else []

    # a hook may hold this process's addresses as constants: not for numba's disk cache
    cache = hooks is None

    return "\n".join([
        "# blocks of a packed kernel in one libgomp parallel region",
        f"# (pygrid/accelerator/parallel_numba.py digest {_own_digest()}, gomp_team {_digest()})",
        "import numpy as np",
        "from numba import carray, cfunc, njit, types",
        "from pygrid.accelerator.gomp_team_ops import (as_pointer, fetch_add, gomp_parallel, team_size,",
        "                                              thread_num)",
        "from pygrid.accelerator.parallel_numba import call_kernel",
        *([f"from {hooks} import block_end, block_start, launch_end"] if hooks else []),
        "",
        f"W = {TASK_WORDS}",
        "",
        "",
        f"@cfunc(types.void(types.voidptr), nopython=True, cache={cache})",
        "def body(data):",
        "    t = carray(data, W, np.int64)",
        "    nb, n, pieces = t[1], t[2], t[6]",
        "    failed = carray(as_pointer(t[3]), nb, np.uint8)",
        "    words = carray(as_pointer(t[4]), t[5], np.uint64)",
        "    me, team = thread_num(), team_size()",
        "    if pieces <= 1:",
        "        for b in range(me, nb, team):",
        *hook("block_start(b)", 12),
        "            failed[b] = call_kernel(t[0], b * n // nb, (b + 1) * n // nb, (words,))",
        *hook("block_end(b)", 12),
        "        return",
        *hook("block_start(me)", 4),
        "    # its own block first, then what is left of the others; piece k of a block of m sites",
        "    # starts m >> k sites before its end",
        "    for j in range(nb):",
        "        b = (me + j) % nb",
        "        lo, hi = b * n // nb, (b + 1) * n // nb",
        "        m, at = hi - lo, t[7] + 64 * b",
        "        k = fetch_add(at, 1)",
        "        while k < pieces:",
        "            end = hi if k == pieces - 1 else hi - (m >> (k + 1))",
        "            if call_kernel(t[0], hi - (m >> k), end, (words,)):",
        "                failed[b] = 1",
        "            k = fetch_add(at, 1)",
        *hook("block_end(me)", 4),
        "",
        "",
        f"@njit(nogil=True, cache={cache})",
        "def region(t):",
        "    \"\"\"The task ``t``'s blocks in one region; the number that raised.\"\"\"",
        "    nb = t[1]",
        "    failed = carray(as_pointer(t[3]), nb, np.uint8)",
        "    if t[6] > 1:",
        f"        counters = carray(as_pointer(t[7]), nb * {_LINE_WORDS}, np.int64)",
        "        for b in range(nb):",
        "            failed[b] = 0",
        f"            counters[{_LINE_WORDS} * b] = 0",
        f'    gomp_parallel("{symbol}", t.ctypes.data, nb)',
        *(["    launch_end(nb)"] if hooks else []),
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
        "    t[6], t[7] = 1, 0",
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


def pieces(osites: int, nblocks: int, piece_sites: int) -> int:
    """How many pieces of halving size a block of ``osites // nblocks`` sites is cut into, the last at
    least ``piece_sites`` sites (1, the whole block, for ``piece_sites`` 0)."""
    m = osites // max(nblocks, 1)
    if piece_sites <= 0 or m < 2 * piece_sites:
        return 1
    return (m // piece_sites).bit_length()


def task(address: int, nblocks: int, osites: int, failed: np.ndarray, words: np.ndarray,
         piece_sites: int = 0) -> np.ndarray | None:
    """The task words of one launch of the ``tramp`` at ``address`` on ``words`` (kept by the caller
    with ``failed`` and ``words`` as long as it runs the task), or None without libgomp's team.
    ``piece_sites``: balance the launch (see the module's notes), its smallest piece at least this
    many outer sites; only for a kernel whose outer sites are independent (each writes its own
    results, nothing indexed by its block such as a reduction's partial sums).  The blocks'
    counters follow the words in the same array."""
    if _module() is None:
        return None
    t = np.zeros(TASK_WORDS + _LINE_WORDS * (nblocks + 1), np.int64)
    t[:6] = address, nblocks, osites, failed.ctypes.data, words.ctypes.data, len(words)
    t[6] = pieces(osites, nblocks, piece_sites)
    t[7] = (t.ctypes.data + 8 * TASK_WORDS + 63) // 64 * 64
    return t


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
