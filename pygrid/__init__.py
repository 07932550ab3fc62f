"""pygrid: data-parallel lattice field computation in Python, after the Grid library.

    import pygrid as pg
    grid = pg.GridCartesian([8, 8, 8, 16])
    U = pg.LatticeColourMatrix(grid); psi = pg.LatticeFermion(grid)
    chi = pg.eval(U * psi + 0.5 * pg.cshift(psi, 3, -1))   # one fused kernel
"""
from __future__ import annotations

import sys
from typing import Any

__version__ = "0.1.0"

from . import algorithms, config as _config, io, memory as _memory, qcd
from .accelerator import accelerator_for, get_backend, set_backend
from .cartesian import GridCartesian, GridCartesian5D, GridRedBlackCartesian
from .errors import (
    BackendError,
    ConfigError,
    ConformabilityError,
    DeviceMemoryError,
    GridError,
    PerformanceWarning,
    PyGridError,
    ShapeError,
    SiteTypeError,
)
from .lattice import (
    Lattice,
    LatticeColourMatrix,
    LatticeColourVector,
    LatticeComplex,
    LatticeFermion,
    LatticeGaugeField,
    LatticeLorentzColourMatrix,
    LatticePropagator,
    LatticeReal,
    LatticeSpinColourMatrix,
    LatticeSpinColourVector,
    LatticeSpinMatrix,
    LatticeSpinVector,
    adj,
    axpy,
    axpy_norm2,
    axpy_xpay,
    conjugate,
    convert,
    coordinate,
    cshift,
    eval,
    from_dlpack,
    inner_product,
    local_inner_product,
    norm2,
    outer_product,
    peek_colour,
    peek_index,
    peek_lorentz,
    peek_site,
    peek_spin,
    pick_checkerboard,
    poke_colour,
    poke_index,
    poke_lorentz,
    poke_site,
    poke_spin,
    set_checkerboard,
    slice_sum,
    sum,
    trace,
    trace_colour,
    trace_spin,
    transpose,
    transpose_colour,
    transpose_spin,
    where,
)
from .memory import Advise, LeakedViewWarning, ViewMode, memory_stats
from .random import ParallelRNG
from .tensors import (
    ColourMatrix,
    ColourVector,
    Complex,
    ConstTensor,
    Gamma,
    LorentzColourMatrix,
    LorentzComplex,
    Real,
    SiteType,
    SpinColourMatrix,
    SpinColourVector,
    SpinMatrix,
    SpinVector,
)

CpuRead = ViewMode.CpuRead
CpuWrite = ViewMode.CpuWrite
AcceleratorRead = ViewMode.AcceleratorRead
AcceleratorWrite = ViewMode.AcceleratorWrite
AcceleratorWriteDiscard = ViewMode.AcceleratorWriteDiscard


def advise(field: Lattice, advice: Advise) -> None:
    """Hint the device cache: ``pg.advise(U, pg.Advise.InfrequentUse)`` makes U a preferred victim."""
    field.advise(advice)


def init(argv: list[str] | None = None, **overrides: Any) -> list[str]:
    """Start pygrid from Grid-style flags; returns the arguments it did not consume.

    ``argv`` defaults to ``sys.argv[1:]``; keyword overrides (``device_mem=512``,
    ``accelerator='numpy'``, ``threads=2``, ...) win over flags and environment.
    """
    if argv is None:
        argv = sys.argv[1:]
    cfg, rest = _config.parse_args(list(argv))
    if overrides:
        cfg = _config.make_config(cfg, **overrides)
    if cfg.mpi is not None:
        from .communicator import check_ranks, world

        try:
            check_ranks(cfg.mpi, world())
        except GridError as e:
            raise ConfigError(str(e)) from None
    backend = set_backend(cfg.accelerator)
    backend.set_threads(cfg.threads)
    # the memory manager's device follows the backend (USM for sycl, CuPy for cuda/hip)
    device = "emulated" if cfg.emulate_device else backend.device
    mb = cfg.device_mem if cfg.device_mem is not None else float(2 ** 40)
    _memory.configure(device=device, device_mem_mb=mb)
    if cfg.debug_mem:
        _memory.enable_debug_report()
    _config.set_current(cfg)
    return rest


def current_config() -> _config.Config:
    """The active configuration (a pygrid.config.Config)."""
    return _config.current()
