from .backends import NumpyBackend, OpenMPBackend, accelerator_for, get_backend, set_backend

__all__ = ["NumpyBackend", "OpenMPBackend", "accelerator_for", "get_backend", "set_backend"]
