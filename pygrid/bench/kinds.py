"""What a benchmark kind declares, and the registry ``pygrid benchmark KIND`` looks kinds up in.

Each kind module (``wilson``, ``dwf``, ``su3``, ``axpy``, ``memory``, ``cache``)
ends with ``KIND = Kind(...)``: its one-line help, the checks it makes on the
flags before anything runs, its verification against numpy (operators), and its
run.  The CLI calls these and never branches on the kind's name.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

NAMES = ("wilson", "dwf", "su3", "axpy", "memory", "cache")


@dataclass(frozen=True)
class Kind:
    name: str
    help: str
    #: ``run(dims, precision, ctx) -> Run``: the timed kernels on one lattice and precision
    run: Callable[..., Any]
    #: ``verify(precision, ctx) -> dict`` with ``max_rel_error``, ``tolerance``, ``lattice``; or None
    verify: Callable[..., dict] | None = None
    #: ``preflight(dims, precision, simd, cfg, label)``: raise ConfigError naming the flag when the
    #: lattice or the options cannot work, before anything runs; or None
    preflight: Callable[..., None] | None = None
    #: whether the lattice has a fifth dimension of ``--Ls`` slices
    fifth_dim: bool = False
    #: the device its fields live on, when not the backend's (the banner names it)
    device: str | None = None
    #: ``device_reals(Ls) -> int``: the reals a run holds on the backend's device at once per 4D
    #: site of its lattice (its fields and the operator's), from which the CLI fits the default
    #: ``--device-mem`` to the run; or None
    device_reals: Callable[[int], int] | None = None


def get_kind(name: str) -> Kind:
    """The declaration of benchmark kind ``name`` (KeyError for an unknown name)."""
    if name not in NAMES:
        raise KeyError(name)
    return importlib.import_module(f"{__package__}.{name}").KIND
