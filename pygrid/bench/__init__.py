"""Benchmarks behind ``pygrid benchmark KIND`` (see docs/cli.md).

Each kind is a module with ``run(dims, precision, ctx) -> common.Run``, and,
for operators, ``check_available()`` and ``verify(precision, ctx)``.
"""
from . import common

KINDS = ("wilson", "dwf", "su3", "axpy", "memory", "cache")


def kind_module(name):
    """The module of a benchmark kind."""
    import importlib

    if name not in KINDS:
        raise KeyError(name)
    return importlib.import_module(f"{__name__}.{name}")


__all__ = ["KINDS", "kind_module", "common"]
