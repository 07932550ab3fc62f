from .backends import accelerator_for, get_backend, set_backend
from .contract import Backend
from .numpy_backend import NumpyBackend
from .openmp_backend import OpenMPBackend

__all__ = ["Backend", "NumpyBackend", "OpenMPBackend", "accelerator_for", "get_backend", "set_backend"]
