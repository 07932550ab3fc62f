"""Numba kernels over blocks of outer sites on OpenMP threads: the openmp backend's ``accelerator_for``.

A kernel ``kernel(lo, hi, *args)`` (a numba dispatcher, ``nogil``) runs as one
block of outer sites per thread inside a ``prange`` of a small driver,
``drive(address, nblocks, osites, *args)``.  Why OpenMP and not a Python thread
pool: handing a block to a pool thread costs 40-60 us on a virtual machine (the
thread is woken through the GIL and a futex), which is a quarter of a Wilson Dhop
at 8^4 and more than a whole kernel on small fields; OpenMP's threads spin for a
while after each region (libgomp's default wait policy) and start the next one in
microseconds.

The driver calls the kernel through the address of its compiled code
(:func:`call_kernel`), not by name: a call by name would make numba link the
kernel's whole LLVM module into the driver and optimise and generate it a second
time, which took as long as compiling the kernel (6 s of a Wilson kernel's 13).
So one driver serves every kernel of the same argument count (numba compiles it once
per argument types, and keeps it in its disk cache).  The address of the kernel's
overload for the arguments' types is looked up once per kernel and types (the
types keyed by numba's C fingerprint of each argument, about 0.2 us each), after
the kernel is compiled (or loaded from numba's cache) for them; after the first launch
the next ones call the driver's compiled entry point for those types directly, without
numba's dispatch of its 20-odd arguments; a caller that launches one kernel on the same
buffers over and over binds it once (:class:`Bound`, the openmp backend's ``bind_kernel``)
and skips the lookup by fingerprints as well.  An exception the
kernel raises reaches the caller of :func:`parallel_for` as itself: numba's parallel
loop drops one raised on a worker thread, so the driver reports which blocks failed
and those blocks run again on the calling thread, where they raise.  A kernel whose
overload cannot be found that way runs through a driver that takes the kernel
itself (linked, compiled once per process; there an exception on a worker thread is
lost, as in any numba parallel loop); a plain Python callable runs on the calling
thread.
"""
from __future__ import annotations

import hashlib
import threading

import numpy as np
from numba import njit, prange, typeof, types
from numba._dispatcher import compute_fingerprint
from numba.core import cgutils
from numba.core.extending import intrinsic
from numba.core.registry import CPUDispatcher

_drivers: dict = {}     # number of kernel arguments -> generic driver
_launches: dict = {}    # (kernel, argument fingerprints) -> (driver, kernel address)
_lock = threading.Lock()


@intrinsic
def call_kernel(typingctx, address, lo, hi, args):
    """Call the compiled kernel at ``address`` (numba's native calling convention) as
    ``kernel(lo, hi, *args)``; 1 if it raised an exception, else 0.

    The exception itself is not passed on: on a worker thread of the parallel loop there is no
    Python thread state to pass it to, and numba drops it; :func:`parallel_for` runs a block
    that failed again on the calling thread, where it raises.  The caller guarantees that the
    kernel was compiled for exactly ``(int64, int64, *args)`` (:func:`parallel_for` looks the
    address up by the arguments' types)."""
    if not isinstance(address, types.Integer) or not isinstance(args, types.BaseTuple):
        return None

    def codegen(context, builder, sig, llargs):
        addr, lo_v, hi_v, tup = llargs
        argtys = [types.int64, types.int64, *args.types]
        vals = [context.cast(builder, lo_v, lo, types.int64), context.cast(builder, hi_v, hi, types.int64),
                *cgutils.unpack_tuple(builder, tup, len(args.types))]
        fnty = context.call_conv.get_function_type(types.none, argtys)
        fn = builder.inttoptr(addr, fnty.as_pointer())
        status, _ = context.call_conv.call_function(builder, fn, types.none, argtys, vals)
        return builder.zext(status.is_error, context.get_value_type(types.uint8))

    return types.uint8(address, lo, hi, args), codegen


def _own_digest() -> str:
    with open(__file__, "rb") as f:
        return hashlib.sha1(f.read()).hexdigest()[:16]


def driver_source(nargs: int) -> str:
    """Source of the cached driver of every kernel taking ``nargs`` arguments after (lo, hi).

    It names a digest of this module: a cached driver compiled against another
    :func:`call_kernel` would call kernels with the wrong convention, so a changed module
    gets new driver modules (their names come from their source)."""
    args = ", ".join(f"a{i}" for i in range(nargs))
    tup = f"({args},)" if nargs else "()"
    tail = f", {args}" if nargs else ""
    return "\n".join([
        f"# the parallel driver of the kernels of {nargs} arguments after (lo, hi), called by address",
        f"# (pygrid/accelerator/parallel_numba.py digest {_own_digest()})",
        "from numba import njit, prange",
        "from pygrid.accelerator.parallel_numba import call_kernel",
        "",
        "",
        "@njit(parallel=True, nogil=True, cache=True)",
        f"def drive(address, nblocks, osites, failed{tail}):",
        "    n = 0",
        "    for b in prange(nblocks):",
        f"        f = call_kernel(address, b * osites // nblocks, (b + 1) * osites // nblocks, {tup})",
        "        failed[b] = f",
        "        n += f",
        "    return n",
        "",
    ])


@njit(parallel=True, nogil=True)
def _drive_linked(kernel, nblocks, osites, args):
    for b in prange(nblocks):
        kernel(b * osites // nblocks, (b + 1) * osites // nblocks, *args)


def driver(nargs: int):
    """``drive(address, nblocks, osites, failed, *args)`` for kernels of ``nargs`` arguments after
    (lo, hi): the number of blocks whose kernel raised, each marked 1 in ``failed`` (uint8,
    ``nblocks`` long)."""
    d = _drivers.get(nargs)
    if d is None:
        from .compile_cache import load_module

        with _lock:
            d = _drivers.get(nargs)
            if d is None:
                d = _drivers[nargs] = load_module(driver_source(nargs), "pygrid_par",
                                                  label=f"the parallel driver of {nargs} arguments").drive
    return d


def _address(kernel, args) -> int | None:
    """The address of ``kernel``'s compiled overload for ``(0, 0, *args)``, compiled (or loaded
    from numba's cache) here if needed; None when numba keeps no such overload."""
    sig = tuple(typeof(x) for x in (0, 0, *args))
    kernel.compile(sig)
    cres = kernel.overloads.get(sig)
    if cres is None:
        return None
    addr = cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)
    return int(addr) if addr else None


def _entry(drive, nblocks, osites, addr, args):
    """The driver's compiled entry point for these arguments' types, once numba has it (it
    unboxes them without numba's dispatch, a few microseconds of a launch), else the driver."""
    sig = tuple(typeof(x) for x in (addr, nblocks, osites, _FAILED, *args))
    cres = drive.overloads.get(sig)
    return drive if cres is None else cres.entry_point


def _launch(kernel, args):
    """``((driver, kernel address), key)`` for ``kernel`` on arguments of these types.  The
    driver is the generic driver's dispatcher until :func:`parallel_for` replaces it by the
    compiled entry point after the first call (the fingerprints of the key pin the types that
    entry point unboxes)."""
    try:
        key = (kernel, tuple(map(compute_fingerprint, args)))
    except (ValueError, TypeError):  # an argument numba fingerprints not: the linked driver
        key = None
    hit = _launches.get(key) if key is not None else None
    if hit is None:
        addr = _address(kernel, args) if key is not None else None
        if addr is None:
            def linked(address, nblocks, osites, failed, *a, _k=kernel):
                # called by name, the kernel's exception on the calling thread comes as the cause
                # of a SystemError; one on a worker thread is lost, as numba's parallel loops lose it
                try:
                    _drive_linked(_k, nblocks, osites, a)
                except SystemError as e:
                    if e.__cause__ is None:
                        raise
                    raise e.__cause__ from None
                return 0

            hit = (linked, 0)
        else:
            hit = (driver(len(args)), addr)
        if key is not None:
            _launches[key] = hit
    return hit, key


#: the type of the driver's ``failed`` argument, for the signature of its entry point
_FAILED = np.zeros(1, np.uint8)


def _run(drive, addr, nblocks, osites, args, kernel, failed=None):
    if failed is None or len(failed) < nblocks:
        failed = np.zeros(nblocks, np.uint8)
    if drive(addr, nblocks, osites, failed, *args):
        _raise_failed(kernel, nblocks, osites, args, failed)


def _raise_failed(kernel, nblocks, osites, args, failed):
    """Run the blocks whose kernel raised again, in order, on the calling thread, where the
    exception reaches the caller as itself (a kernel that fails fails the same way again)."""
    blocks = [(b * osites // nblocks, (b + 1) * osites // nblocks) for b in np.flatnonzero(failed[:nblocks])]
    for lo, hi in blocks:
        kernel(lo, hi, *args)
    name = getattr(kernel, "__name__", repr(kernel))
    raise RuntimeError(f"kernel {name} raised an exception on a worker thread (outer sites [lo, hi): "
                       f"{blocks}) and not when run again on the calling thread")


def _first_run(drive, addr, key, nblocks, osites, args, kernel):
    """Run through ``drive``; returns what the next launches of these types call: the driver's
    compiled entry point, which exists once this call has compiled or loaded it."""
    _run(drive, addr, nblocks, osites, args, kernel)
    if not isinstance(drive, CPUDispatcher):
        return drive
    entry = _entry(drive, nblocks, osites, addr, args)
    if key is not None:
        _launches[key] = (entry, addr)
    return entry


def parallel_for(nblocks: int, osites: int, kernel, *args) -> None:
    """``kernel(lo, hi, *args)`` over outer sites [0, osites) in ``nblocks`` blocks, one per thread."""
    if not isinstance(kernel, CPUDispatcher):
        kernel(0, osites, *args)
        return
    (drive, addr), key = _launch(kernel, args)
    _first_run(drive, addr, key, nblocks, osites, args, kernel)


class Bound:
    """``kernel`` bound to the types of one set of arguments: ``bound(nblocks, osites, *args)`` is
    :func:`parallel_for` without the lookup of its driver by the arguments' fingerprints.

    The caller passes arguments of exactly the types of those it was bound with (the same
    arrays again, say): the driver's entry point unboxes them by those types unchecked."""

    __slots__ = ("kernel", "_drive", "_addr", "_key", "_entry", "_failed")

    def __init__(self, kernel, args):
        self.kernel, self._entry = kernel, None
        # the driver's per-block failure flags, kept: a fresh array cost 15 us a launch once the
        # kernel had pushed numpy's allocator out of the caches (a launch writes each flag)
        self._failed = np.zeros(256, np.uint8)
        if isinstance(kernel, CPUDispatcher):
            (self._drive, self._addr), self._key = _launch(kernel, args)
        else:
            self._drive, self._addr, self._key = None, 0, None

    def __call__(self, nblocks, osites, *args):
        if self._entry is not None:
            _run(self._entry, self._addr, nblocks, osites, args, self.kernel, self._failed)
        elif self._drive is None:
            self.kernel(0, osites, *args)
        else:
            self._entry = _first_run(self._drive, self._addr, self._key, nblocks, osites, args, self.kernel)
