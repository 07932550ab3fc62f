"""What every benchmark kind shares: the context it receives, grids made from the flags, units.

Every kind (``pygrid.bench.axpy``, ``su3``, ``memory``, ``cache``, ``wilson``,
``dwf``) builds a :class:`~pygrid.bench.report.Run` for one (grid, precision): a
list of :class:`~pygrid.bench.report.Kernel` results, each a time per call with
the flop and byte counts used, and the bandwidth roofline measured in the same
run (``roofline.py``: a copy moving as many bytes as the kernel).
``roofline GFlop/s = copy GB/s * flops / bytes``: what the kernel would reach
if it moved its bytes at copy speed.  Timing is in ``timing.py``, the output in
``report.py``, the progress line in ``progress.py``.
"""
from __future__ import annotations

from dataclasses import dataclass

from .progress import Progress
from .report import Run
from .timing import Timer
from .units import dotted

NO_NUMPY_UNDER_MPI = ("no numpy baseline under MPI: it would run the whole lattice on every rank; "
                      "compare with a one-rank run on the local volume instead")


class BenchmarkUnavailable(Exception):
    """A benchmark kind that cannot run here: the CLI exits with status 2."""


@dataclass
class Context:
    """What a benchmark kind needs besides its grid: timing, progress and options."""

    timer: Timer
    progress: Progress
    simd_layout: tuple | None = None
    Ls: int = 8
    seed: tuple = (1, 2, 3, 4)


def verify_dims(base):
    """The lattice a Dirac benchmark checks its operator on: ``base`` (4^4), each dimension widened
    to 4 sites a rank where the job splits it (``--mpi 1.1.1.4`` would leave 4^4 one site a
    rank in t, too few for the red-black grid)."""
    from pygrid.communicator import default_mpi_layout, world
    from pygrid.config import current

    size = world().size
    if size == 1:
        return tuple(base)
    layout = current().mpi or default_mpi_layout(base, size)
    return tuple(max(int(b), 4 * int(p)) for b, p in zip(base, layout))


def make_grid(dims, precision, simd_layout=None):
    """``pg.GridCartesian`` for the flags; a bad combination raises ConfigError naming them."""
    import pygrid as pg
    from pygrid.errors import ConfigError, GridError

    try:
        return pg.GridCartesian(list(dims), simd_layout=simd_layout, precision=precision)
    except GridError as e:
        what = f"--grid {dotted(dims)}"
        if simd_layout is not None:
            what += f" --simd {dotted(simd_layout)}"
        raise ConfigError(f"{what}: {e}") from None


def new_run(kind, grid, precision):
    return Run(kind, tuple(grid.gdims), precision, tuple(grid.simd_layout), grid.nsimd)


def lanes_note(grid, precision):
    """A note when the lattice is too small for the full SIMD width."""
    from pygrid.cartesian.simd import default_nsimd

    full = default_nsimd(precision)
    if grid.nsimd < full:
        return (f"the lattice is too small for {full} SIMD lanes in {precision}: "
                f"using Nsimd {grid.nsimd}")
    return None


def dirac_run(kind, grid, precision):
    """A new run of a Dirac benchmark, with its notes: the lanes it got, the kernel it runs."""
    r = new_run(kind, grid, precision)
    note = lanes_note(grid, precision)
    if note:
        r.notes.append(note)
    note, r.extra["dslash"] = dslash_note()
    r.notes.append(note)
    return r


def dslash_note():
    """Which Dirac kernel the operators run, as a note, and the same as a record for the JSON."""
    from pygrid.accelerator.backends import get_backend
    from pygrid.qcd import dslash, kernels_wilson

    if dslash.variant() == "unroll":
        structure = "wide" if kernels_wilson.wide_default() else "narrow"
        return (f"Dirac kernel: hand-unrolled, {structure} structure (--dslash-structure wide|narrow, "
                "--dslash-generic)"), {"variant": "unroll", "structure": structure}
    backend = get_backend().name
    return (f"Dirac kernel: generic, generated for {backend}",
            {"variant": "generic", "backend": backend})


def check_red_black(dims, precision, simd_layout, cfg, label):
    """A preflight of the Dirac operators: the lattice has a red-black grid (even local extents)."""
    from pygrid.errors import ConfigError, PyGridError

    g = make_grid(dims, precision, simd_layout)
    try:
        _ = g.red_black
    except PyGridError as e:
        raise ConfigError(f"{label} {dotted(dims)}: {e}; the Wilson operator needs even extents") from None
