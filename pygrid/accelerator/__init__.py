from .backends import accelerator_for, get_backend, set_backend
from .compile_log import install_numba_listener
from .contract import Backend
from .numpy_backend import NumpyBackend
from .openmp_backend import OpenMPBackend

install_numba_listener()

__all__ = ["Backend", "NumpyBackend", "OpenMPBackend", "accelerator_for", "get_backend", "set_backend"]
