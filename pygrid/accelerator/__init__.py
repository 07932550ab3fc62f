from .backends import NumpyBackend, OpenMPBackend, get_backend, set_backend

__all__ = ["NumpyBackend", "OpenMPBackend", "get_backend", "set_backend"]
