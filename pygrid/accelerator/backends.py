"""The backend registry: backends by name, the current backend, and ``accelerator_for``.

The primitives every backend provides are listed in ``contract.py``.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ..errors import BackendError
from .contract import Backend
from .numpy_backend import NumpyBackend
from .openmp_backend import OpenMPBackend, apply_process_settings

#: every name ``get_backend`` accepts
NAMES = ("openmp", "numpy", "cuda", "hip", "sycl", "cuda-emulated", "opencl-emulated", "opencl-simd-emulated")

_backends: dict[str, Backend] = {}
_current: Backend | None = None


def _make(name: str) -> Backend:
    if name == "numpy":
        return NumpyBackend()
    if name in ("openmp", "auto"):
        return OpenMPBackend()
    if name in ("cuda", "hip"):
        from .cuda_backend import CudaBackend

        return CudaBackend(name)
    if name in ("cuda-emulated", "opencl-emulated"):
        from .emulated_backend import EmulatedSIMTBackend

        return EmulatedSIMTBackend(name.split("-")[0])
    if name == "opencl-simd-emulated":
        from .emulated_backend import EmulatedSIMTBackend

        return EmulatedSIMTBackend("opencl", "opencl-simd")
    if name == "sycl":
        from .sycl_backend import SyclBackend

        return SyclBackend()
    raise BackendError(f"unknown backend {name!r}; choose one of {', '.join(NAMES)}")


def get_backend(name: str | None = None) -> Backend:
    """The backend called ``name`` (started on first use), or the current one."""
    global _current
    if name is None:
        if _current is None:
            _current = get_backend(os.environ.get("PYGRID_ACCELERATOR") or "openmp")
        return _current
    if name not in _backends:
        apply_process_settings()
        _backends[name] = _make(name)
    return _backends[name]


def set_backend(name: str) -> Backend:
    """Make the backend called ``name`` the current one; returns it."""
    global _current
    _current = get_backend(name)
    return _current


def accelerator_for(osites: int, kernel: Callable, *args: Any) -> None:
    """The one launch primitive: ``kernel(lo, hi, *args)`` over outer sites [0, osites).

    On the openmp backend the sites are split over the threads; ``kernel``
    should be a ``numba.njit(nogil=True)`` function so the blocks run in parallel.
    ``args[0]`` is the array the kernel writes (or reduces): below 128 KiB
    (``min_parallel_bytes``) the launch runs on the calling thread, where starting
    the others would cost more than it saves.
    """
    get_backend().accelerator_for(osites, kernel, *args)
