"""Numba kernels over blocks of outer sites on OpenMP threads: the openmp backend's ``accelerator_for``.

A kernel ``kernel(lo, hi, *args)`` (a numba dispatcher, ``nogil``) runs as one
block of outer sites per thread inside a ``prange`` of a small driver,
``drive(nblocks, osites, *args)``, generated for that kernel.  Why OpenMP and not a
Python thread pool: handing a block to a pool thread costs 40-60 us on a
virtual machine (the thread is woken through the GIL and a futex), which is a
quarter of a Wilson Dhop at 8^4 and more than a whole kernel on small fields;
OpenMP's threads spin for a while after each region (libgomp's default wait
policy) and start the next one in microseconds.

The driver is written to the kernel cache as source that imports the kernel
from its module, so numba's on-disk cache keeps it; its source names a digest
of the kernel module's file, so a changed kernel never meets a stale driver.
A kernel that cannot be imported by name (defined inside a function) gets a
driver that takes it as an argument, compiled once per process.  A plain Python
callable runs on the calling thread.
"""
from __future__ import annotations

import hashlib
import sys
import threading

from numba import njit, prange
from numba.core.registry import CPUDispatcher

_drivers: dict = {}
_lock = threading.Lock()


@njit(parallel=True, nogil=True)
def _drive_any(kernel, nblocks, osites, args):
    for b in prange(nblocks):
        kernel(b * osites // nblocks, (b + 1) * osites // nblocks, *args)


def _module_digest(mod) -> str | None:
    path = getattr(mod, "__file__", None)
    if not path:
        return None
    try:
        with open(path, "rb") as f:
            return hashlib.sha1(f.read()).hexdigest()[:16]
    except OSError:
        return None


def driver_source(module: str, name: str, nargs: int, digest: str) -> str:
    """Source of the cached driver of ``module.name`` taking ``nargs`` arguments after (lo, hi)."""
    args = ", ".join(f"a{i}" for i in range(nargs))
    tail = f", {args}" if nargs else ""
    return "\n".join([
        f"# the parallel driver of {module}.{name} (module digest {digest})",
        "from numba import njit, prange",
        f"from {module} import {name} as kernel",
        "",
        "",
        "@njit(parallel=True, nogil=True, cache=True)",
        f"def drive(nblocks, osites{tail}):",
        "    for b in prange(nblocks):",
        f"        kernel(b * osites // nblocks, (b + 1) * osites // nblocks{tail})",
        "",
    ])


def _importable(kernel) -> tuple[str, str, str] | None:
    py = kernel.py_func
    mod = sys.modules.get(py.__module__)
    if mod is None or "<locals>" in py.__qualname__ or getattr(mod, py.__name__, None) is not kernel:
        return None
    digest = _module_digest(mod)
    return None if digest is None else (py.__module__, py.__name__, digest)


def driver(kernel, nargs: int):
    """``drive(nblocks, osites, *args)`` for ``kernel`` with ``nargs`` arguments after (lo, hi)."""
    key = (kernel, nargs)
    d = _drivers.get(key)
    if d is not None:
        return d
    with _lock:
        d = _drivers.get(key)
        if d is None:
            where = _importable(kernel)
            if where is None:
                def d(nblocks, osites, *args, _k=kernel):
                    _drive_any(_k, nblocks, osites, args)
            else:
                from .compile_cache import load_module

                module, name, digest = where
                d = load_module(driver_source(module, name, nargs, digest), "pygrid_par",
                                label=f"the parallel driver of {name}").drive
            _drivers[key] = d
    return d


def parallel_for(nblocks: int, osites: int, kernel, *args) -> None:
    """``kernel(lo, hi, *args)`` over outer sites [0, osites) in ``nblocks`` blocks, one per thread."""
    if not isinstance(kernel, CPUDispatcher):
        kernel(0, osites, *args)
        return
    driver(kernel, len(args))(nblocks, osites, *args)
