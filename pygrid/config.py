"""Start-up configuration: Grid-style command-line flags and environment variables.

A program built on pygrid accepts the same start-up flags as a Grid program::

    python my_program.py --grid 16.16.16.32 --mpi 1.1.1.2 --device-mem 2048 --log debug

``parse_args(argv)`` consumes the flags it knows and hands back every other
argument, in order, for the program's own parser. Values come, highest
priority first, from the command line, from environment variables
(``PYGRID_THREADS``, ``OMP_NUM_THREADS``, ``PYGRID_ACCELERATOR``,
``PYGRID_DEVICE_MEM``) and from the defaults of :class:`Config`.

Every bad value raises :class:`pygrid.errors.ConfigError` with a one-line
message naming where the value came from (the flag, the environment variable
or the keyword), the bad value and the accepted form.

This module depends only on the standard library and ``pygrid.errors``.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import operator
import os
import re
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pygrid.errors import ConfigError, GridFlagWarning

__all__ = [
    "ACCELERATORS",
    "LOG_LEVELS",
    "FLAGS",
    "Config",
    "FlagSpec",
    "parse_args",
    "config_from_env",
    "make_config",
    "current",
    "set_current",
    "flags_help",
]

#: Backends ``--accelerator`` accepts. ``auto`` picks the best one available at init.
ACCELERATORS = ("openmp", "numpy", "cuda", "hip", "sycl", "auto")

# : Dirac kernel variants (Grid's ``--dslash-generic`` / ``--dslash-unroll``); ``auto``: the fastest for the
# backend.
DSLASH_VARIANTS = ("auto", "generic", "unroll")

#: Structures of the hand-unrolled Dirac kernel: ``wide`` for 32 vector registers (AVX-512's), ``narrow``
#: for 16 (AVX2's); ``auto``: from the registers the kernels are compiled for.
DSLASH_STRUCTURES = ("auto", "wide", "narrow")

#: When the Wilson hops read their links compressed: ``auto``, the hand-unrolled kernel on fields larger
#: than the caches; ``always``, every kernel (the generic one too) on any fields; ``never``.
COMPRESS_LINKS = ("auto", "always", "never")

#: Log levels ``--log`` accepts, from least to most verbose.
LOG_LEVELS = ("error", "warning", "message", "iterative", "debug")

#: The device memory cache watermark in MB without ``--device-mem`` (Grid's default).
DEFAULT_DEVICE_MEM_MB = 128

#: Threads per block of a GPU launch without ``--accelerator-threads``.
DEFAULT_ACCELERATOR_THREADS = 128

#: Dimensions of ``--grid`` and ``--mpi``.
NDIM = 4

#: Largest extent of ``--grid`` and ``--mpi`` in one dimension (Grid's ``int``; past any real lattice).
MAX_EXTENT = 2 ** 31 - 1

#: Most CPU threads ``--threads`` (and the environment) may ask for: more than any node has cores.
MAX_THREADS = 1024

#: Most threads per block ``--accelerator-threads`` may ask for (the limit of CUDA, HIP and Intel GPUs).
MAX_ACCELERATOR_THREADS = 1024

#: Largest ``--device-mem`` in MB (an exabyte); ``none`` means no limit.
MAX_DEVICE_MEM_MB = 2 ** 40

#: Largest ``--llc-mb`` (a terabyte: past any cache).
MAX_LLC_MB = 2 ** 20

_GRID_FORM = "expected 4 positive integers separated by dots, like 8.8.8.8"
_MPI_FORM = "expected 4 positive integers separated by dots, like 1.1.1.2"
_POSITIVE_INT_FORM = "expected a positive integer, like 8"
_DEVICE_MEM_FORM = (
    "expected a non-negative number of megabytes, like 2048 (or 'none' for no limit)"
)
_BOOL_FORM = "expected true or false"
_LLC_FORM = "expected a positive number of megabytes, like 32 (or 'auto': read from the host)"


# ---------------------------------------------------------------------------
# Value parsers. Each takes the raw value (a string from the command line or the
# environment, or any Python object from a keyword) and a label saying where it
# came from ("--grid 8.8.8", "PYGRID_DEVICE_MEM=-1", "device_mem=-1"), and
# returns the normalised value or raises ConfigError("<label>: <accepted form>").
# ---------------------------------------------------------------------------


def _fail(label: str, form: str) -> ConfigError:
    return ConfigError(f"{label}: {form}")


def _fail_large(label: str, limit: int, form: str) -> ConfigError:
    return ConfigError(f"{label}: more than {limit}; {form}")


def _shown(text: str) -> str:
    """A value as an error message shows it: control characters escaped, the middle of a long one cut."""
    if not text.isprintable():
        text = text.encode("unicode_escape").decode("ascii")
    if len(text) > 60:
        text = f"{text[:30]}...{text[-20:]} ({len(text)} characters)"
    return text


#: Stands for an integer of more than 100 digits: past every limit, and int() refuses past 4300 digits.
_HUGE = 10 ** 100


def _as_int(value: Any) -> int | None:
    """The integer ``value`` stands for, or None if it is not an integer."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        text = value.strip()
        # int() also accepts "1_000" and "+5"; keep to plain decimal digits.
        negative = text[:1] == "-"
        body = text[1:] if negative else text
        if not body.isdigit() or not body.isascii():
            return None
        digits = body.lstrip("0") or "0"
        n = int(digits) if len(digits) <= 100 else _HUGE
        return -n if negative else n
    try:
        return operator.index(value)  # int, numpy integers, ...
    except TypeError:
        return None


def _parse_dims(value: Any, label: str, form: str) -> tuple[int, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        parts: list[Any] = value.strip().split(".")
    else:
        try:
            parts = list(value)
        except TypeError:
            raise _fail(label, form) from None
    dims = [_as_int(p) for p in parts]
    if len(dims) != NDIM or any(d is None or d <= 0 for d in dims):
        raise _fail(label, form)
    if any(d > MAX_EXTENT for d in dims):  # type: ignore[operator]
        raise _fail_large(label, MAX_EXTENT, form)
    return tuple(dims)  # type: ignore[arg-type]


def _parse_grid(value: Any, label: str) -> tuple[int, ...] | None:
    return _parse_dims(value, label, _GRID_FORM)


def _parse_mpi(value: Any, label: str) -> tuple[int, ...] | None:
    return _parse_dims(value, label, _MPI_FORM)


def _parse_positive_int(value: Any, label: str, limit: int | None = None) -> int:
    n = _as_int(value)
    if n is None or n <= 0:
        raise _fail(label, _POSITIVE_INT_FORM)
    if limit is not None and n > limit:
        raise _fail_large(label, limit, _POSITIVE_INT_FORM)
    return n


def _parse_threads(value: Any, label: str) -> int | None:
    if value is None:
        return None
    return _parse_positive_int(value, label, MAX_THREADS)


def _parse_accelerator_threads(value: Any, label: str) -> int:
    return _parse_positive_int(value, label, MAX_ACCELERATOR_THREADS)


def _parse_omp_num_threads(value: Any, label: str) -> int:
    # OpenMP allows a comma-separated list, one entry per nesting level; the
    # outermost level is the one that matters here.
    if isinstance(value, str) and "," in value:
        value = value.split(",", 1)[0]
    return _parse_positive_int(value, label, MAX_THREADS)


def _parse_device_mem(value: Any, label: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, str) and value.strip().lower() == "none":
        return None
    n = _as_int(value)
    if n is None or n < 0:
        raise _fail(label, _DEVICE_MEM_FORM)
    if n > MAX_DEVICE_MEM_MB:
        raise _fail_large(label, MAX_DEVICE_MEM_MB, _DEVICE_MEM_FORM)
    return n


def _parse_llc(value: Any, label: str) -> int | None:
    if value is None or (isinstance(value, str) and value.strip().lower() == "auto"):
        return None
    n = _as_int(value)
    if n is None or n <= 0:
        raise _fail(label, _LLC_FORM)
    if n > MAX_LLC_MB:
        raise _fail_large(label, MAX_LLC_MB, _LLC_FORM)
    return n


def _parse_choice(value: Any, label: str, choices: tuple[str, ...], what: str) -> str:
    if isinstance(value, str):
        name = value.strip().lower()
        if name in choices:
            return name
    raise _fail(label, f"{what}; choose one of {', '.join(choices)}")


def _parse_accelerator(value: Any, label: str) -> str:
    return _parse_choice(value, label, ACCELERATORS, "unknown backend")


def _parse_dslash(value: Any, label: str) -> str:
    return _parse_choice(value, label, DSLASH_VARIANTS, "Dirac kernel variant")


def _parse_dslash_structure(value: Any, label: str) -> str:
    return _parse_choice(value, label, DSLASH_STRUCTURES, "Dirac kernel structure")


#: Grid's log channels that are not levels here; in a list (``--log Error,Warning,Performance``) they
#: are passed over, and the most verbose level named is the level
GRID_LOG_CHANNELS = ("performance", "integrator", "colours", "timestamp")


def _parse_log(value: Any, label: str) -> str:
    if isinstance(value, str) and "," in value:  # Grid's form: the channels to print
        names = [v.strip().lower() for v in value.split(",")]
        levels = [n for n in names if n in LOG_LEVELS]
        if not levels or any(n not in LOG_LEVELS and n not in GRID_LOG_CHANNELS for n in names):
            raise _fail(label, "unknown log level; choose one of " + ", ".join(LOG_LEVELS)
                        + ", or a comma-separated list of them as Grid takes it (its channels "
                        + ", ".join(GRID_LOG_CHANNELS) + " passed over)")
        return max(levels, key=LOG_LEVELS.index)
    return _parse_choice(value, label, LOG_LEVELS, "unknown log level")


def _parse_compress_links(value: Any, label: str) -> str:
    # a yes/no (PYGRID_COMPRESS_LINKS=0 before ``always`` existed) is the default or never
    if isinstance(value, str) and value.strip().lower() in COMPRESS_LINKS:
        return value.strip().lower()
    try:
        return "auto" if _parse_bool(value, label) else "never"
    except ConfigError:
        raise _fail(label, "choose one of " + ", ".join(COMPRESS_LINKS) + " (or 1 / 0)") from None


def _parse_bool(value: Any, label: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        word = value.strip().lower()
        if word in ("1", "true", "yes", "on"):
            return True
        if word in ("0", "false", "no", "off"):
            return False
    if _as_int(value) in (0, 1) and not isinstance(value, str):
        return bool(value)
    raise _fail(label, _BOOL_FORM)


# ---------------------------------------------------------------------------
# The configuration record
# ---------------------------------------------------------------------------

_FIELD_PARSERS: dict[str, Callable[[Any, str], Any]] = {
    "grid": _parse_grid,
    "mpi": _parse_mpi,
    "threads": _parse_threads,
    "accelerator": _parse_accelerator,
    "accelerator_threads": _parse_accelerator_threads,
    "device_mem": _parse_device_mem,
    "debug_mem": _parse_bool,
    "emulate_device": _parse_bool,
    "dslash": _parse_dslash,
    "dslash_structure": _parse_dslash_structure,
    "compress_links": _parse_compress_links,
    "llc_mb": _parse_llc,
    "shm_halo": _parse_bool,
    "log": _parse_log,
}


def _kw_label(name: str, value: Any) -> str:
    return f"{name}={_shown(repr(value))}"


@dataclass(frozen=True)
class Config:
    """The start-up configuration of a pygrid program.

    Fields (see :func:`flags_help` for the matching flags):

    grid
        Global lattice size ``(X, Y, Z, T)``, or None to let the program choose.
    mpi
        MPI process grid ``(X, Y, Z, T)``, or None to let the communicator choose.
    threads
        CPU threads for the OpenMP backend, or None for every core available to
        this process (see :meth:`resolved_threads`).
    accelerator
        Backend name, one of :data:`ACCELERATORS`.
    accelerator_threads
        Threads per block on a GPU backend.
    device_mem
        High watermark of the device memory cache in MB (Grid's ``--device-mem``),
        or None for no limit.
    debug_mem
        Print the memory manager's counters (transfers, evictions).
    emulate_device
        On the CPU, keep a separate "device" copy of every field so that the
        memory manager's cache is exercised for real.
    dslash
        The Dirac kernel variant, one of :data:`DSLASH_VARIANTS`: ``generic``
        (generated from the one kernel description, every backend), ``unroll``
        (the hand-unrolled CPU kernel, openmp and numpy backends) or ``auto``
        (the fastest the backend has).
    dslash_structure
        The hand-unrolled kernel's structure, one of :data:`DSLASH_STRUCTURES`: ``wide`` (for 32
        vector registers: on 4D fields the result spinor held in registers over a site's eight
        points, the register order), ``narrow`` (for 16: the points in turn over a tile of sites,
        the tiled order) or ``auto`` (``wide`` where the kernels are compiled for AVX-512;
        :func:`pygrid.qcd.kernels_wilson.wide_default`).  Any structure gives the same results.
    compress_links
        When the Wilson operator's hops read its links as two rows of each SU(3) matrix,
        rebuilding the third, one of :data:`COMPRESS_LINKS`: ``auto`` (the hand-unrolled kernel
        on fields of more than 12 MiB, :func:`pygrid.qcd.compressed_links.compression_pays`),
        ``always`` (every kernel on any fields, the generic one too, every backend's; read when an
        operator is made) or ``never``.  An operator's own
        ``compress_links=True/False`` wins; links that are not SU(3) times a phase are always
        read whole.
    llc_mb
        The last-level cache one group of cores shares, in MB, or None to read it from the host
        (``/sys``): the byte thresholds at which the CPU kernels treat fields as larger than the
        caches scale with it (:mod:`pygrid.accelerator.caches`).
    shm_halo
        Whether the Dirac operators' halos between the ranks of one node go through an MPI
        shared-memory window, each rank reading its neighbours' packed rows there
        (:mod:`pygrid.stencil.shared_halo`), where every rank's neighbours share its node; False
        sends them as MPI messages.
    log
        Log level, one of :data:`LOG_LEVELS`.

    The constructor validates and normalises every field (lists become tuples,
    names become lower case), raising :class:`ConfigError` on a bad value. A
    Config is immutable; use :func:`make_config` or :func:`dataclasses.replace`
    to derive a changed one.
    """

    grid: tuple[int, ...] | None = None
    mpi: tuple[int, ...] | None = None
    threads: int | None = None
    accelerator: str = "openmp"
    accelerator_threads: int = DEFAULT_ACCELERATOR_THREADS
    device_mem: int | None = DEFAULT_DEVICE_MEM_MB
    debug_mem: bool = False
    emulate_device: bool = False
    dslash: str = "auto"
    dslash_structure: str = "auto"
    compress_links: str = "auto"
    llc_mb: int | None = None
    shm_halo: bool = True
    log: str = "message"

    def __post_init__(self) -> None:
        for name, parse in _FIELD_PARSERS.items():
            value = getattr(self, name)
            object.__setattr__(self, name, parse(value, _kw_label(name, value)))
        _check_layout(self.grid, self.mpi, "grid", "mpi")

    # -- derived values -----------------------------------------------------

    def resolved_threads(self) -> int:
        """``threads``, or the number of cores this process may run on if None."""
        if self.threads is not None:
            return self.threads
        try:
            cores = max(1, len(os.sched_getaffinity(0)))
        except (AttributeError, OSError):
            cores = max(1, os.cpu_count() or 1)
        from .communicator import ranks_on_this_node

        return max(1, cores // ranks_on_this_node())

    @property
    def device_mem_bytes(self) -> int | None:
        """``device_mem`` in bytes (None for no limit)."""
        return None if self.device_mem is None else self.device_mem * 1024 * 1024

    def log_enabled(self, level: str) -> bool:
        """Whether a message at ``level`` is printed under this config's ``log`` level."""
        level = _parse_log(level, f"log level {level!r}")
        return LOG_LEVELS.index(level) <= LOG_LEVELS.index(self.log)

    def to_argv(self) -> list[str]:
        """The flags that reproduce this config (every field that is not the default).

        ``parse_args(cfg.to_argv(), env={})[0] == cfg`` holds for every Config.
        """
        default = Config()
        argv: list[str] = []
        for spec in FLAGS:
            value = getattr(self, spec.field)
            if value == getattr(default, spec.field):
                continue
            if spec.takes_value:
                argv += [spec.flag, spec.format(value)]
            elif spec.value is not True:
                if value == spec.value:
                    argv.append(spec.flag)
            elif value:
                argv.append(spec.flag)
        return argv


def _check_layout(
    grid: tuple[int, ...] | None, mpi: tuple[int, ...] | None, grid_label: str, mpi_label: str
) -> None:
    if grid is None or mpi is None:
        return
    for mu, (g, p) in enumerate(zip(grid, mpi)):
        if g % p:
            raise ConfigError(
                f"{grid_label} {_dotted(grid)} with {mpi_label} {_dotted(mpi)}: "
                f"the lattice extent {g} in dimension {mu} is not divisible by "
                f"the {p} processes in that dimension"
            )


def _dotted(dims: Iterable[int]) -> str:
    return ".".join(str(d) for d in dims)


# ---------------------------------------------------------------------------
# Flags
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class FlagSpec:
    """One start-up flag: its name, the Config field it sets and its help text."""

    flag: str
    field: str
    metavar: str | None  # None for a switch that takes no value
    help: str
    default: str
    env: tuple[str, ...] = ()
    value: Any = True  # what a switch sets its field to

    @property
    def takes_value(self) -> bool:
        return self.metavar is not None

    def format(self, value: Any) -> str:
        """``value`` written the way the flag accepts it."""
        if value is None:
            return "none"
        if isinstance(value, tuple):
            return _dotted(value)
        return str(value)


FLAGS: tuple[FlagSpec, ...] = (
    FlagSpec("--grid", "grid", "X.Y.Z.T",
             "global lattice size", "chosen by the program"),
    FlagSpec("--mpi", "mpi", "X.Y.Z.T",
             "MPI process grid; must divide --grid", "all ranks, laid out automatically"),
    FlagSpec("--threads", "threads", "N",
             f"CPU threads for the openmp backend, at most {MAX_THREADS}", "all cores",
             env=("PYGRID_THREADS", "OMP_NUM_THREADS")),
    FlagSpec("--accelerator", "accelerator", "NAME",
             "backend: " + ", ".join(ACCELERATORS), "openmp",
             env=("PYGRID_ACCELERATOR",)),
    FlagSpec("--accelerator-threads", "accelerator_threads", "N",
             f"threads per block on a GPU backend, at most {MAX_ACCELERATOR_THREADS}",
             str(DEFAULT_ACCELERATOR_THREADS)),
    FlagSpec("--device-mem", "device_mem", "MB",
             "device memory cache limit in MB (at most 2^40), or 'none' for no limit",
             str(DEFAULT_DEVICE_MEM_MB),
             env=("PYGRID_DEVICE_MEM",)),
    FlagSpec("--debug-mem", "debug_mem", None,
             "print the memory manager's transfer and eviction counts", "off"),
    FlagSpec("--emulate-device", "emulate_device", None,
             "keep a separate device copy on the CPU (tests the cache)", "off"),
    FlagSpec("--dslash-generic", "dslash", None,
             "Dirac operators use the generic kernel generated for every backend", "auto",
             env=("PYGRID_DSLASH",), value="generic"),
    FlagSpec("--dslash-unroll", "dslash", None,
             "Dirac operators use the hand-unrolled CPU kernel (openmp, numpy)", "auto", value="unroll"),
    FlagSpec("--dslash-structure", "dslash_structure", "NAME",
             "the hand-unrolled kernel's structure: " + ", ".join(DSLASH_STRUCTURES)
             + " (wide for 32 vector registers, narrow for 16)", "auto: wide on AVX-512",
             env=("PYGRID_DSLASH_STRUCTURE",)),
    FlagSpec("--compress-links", "compress_links", None,
             "every kernel of the Wilson hop reads two rows of each SU(3) link and rebuilds the third, "
             "the generic one (every backend's) too, on fields of any size", "auto: the CPU kernel on "
             "fields larger than the caches", env=("PYGRID_COMPRESS_LINKS",), value="always"),
    FlagSpec("--no-compress-links", "compress_links", None,
             "the Wilson hop reads every link whole", "auto", value="never"),
    FlagSpec("--llc-mb", "llc_mb", "MB",
             "the last-level cache a group of cores shares, in MB, where the host's /sys does not "
             "say it: the CPU kernels' thresholds for fields larger than the caches scale with it",
             "auto: read from the host", env=("PYGRID_LLC_MB",)),
    FlagSpec("--no-shm-halo", "shm_halo", None,
             "the Dirac operators' halos between ranks of one node travel as MPI messages, not "
             "through an MPI shared-memory window", "shared memory where every neighbour is on the node",
             env=("PYGRID_SHM_HALO",), value=False),
    FlagSpec("--log", "log", "LEVEL",
             "log level: " + ", ".join(LOG_LEVELS), "message"),
)

_FLAG_BY_NAME = {spec.flag: spec for spec in FLAGS}

#: Grid's start-up flags that have no effect in pygrid: consumed with their values, each with a
#: GridFlagWarning saying why, so that a command line written for Grid runs unchanged.
#: (flag, takes a value, what pygrid does instead)
GRID_ONLY_FLAGS: dict[str, tuple[bool, str]] = {
    "--comms-overlap": (False, "pygrid's halo exchange always overlaps the messages with the "
                               "interior sites"),
    "--comms-concurrent": (False, "pygrid posts every direction's halo messages at once"),
    "--comms-sequential": (False, "pygrid posts every direction's halo messages at once"),
    "--comms-threads": (True, "MPI runs on the calling thread of each rank"),
    "--shm": (True, "the Dirac operators' halos between the ranks of a node go through an MPI "
                    "shared-memory window of the halo's size (--no-shm-halo for messages)"),
    "--shm-mpi": (True, "the shared-memory window is always MPI's (MPI_Win_allocate_shared)"),
    "--shm-hugepages": (False, "the shared-memory window holds only the halo"),
    "--dslash-asm": (False, "the hand-unrolled kernel (--dslash-unroll, the default on openmp) is "
                            "pygrid's fastest CPU kernel"),
    "--cacheblocking": (True, "the Dirac kernels choose their order of sites from the fields' size "
                              "and the host's caches (--llc-mb)"),
    "--hypercube": (False, "sites are in the order of the SIMD layout"),
    "--lebesgue": (False, "sites are in the order of the SIMD layout"),
    "--decomposition": (False, "pygrid benchmark prints the layout of ranks and lanes"),
    "--cores": (True, "use --threads"),
    "--debug-signals": (False, "run python -X faulthandler for a traceback on a crash"),
    "--debug-stdout": (False, "pygrid leaves each rank's output where the MPI launcher puts it"),
    "--notimestamp": (False, "pygrid's messages carry no timestamp"),
}

# What to say when a flag is given without its value.
_MISSING_FORMS = {
    "grid": _GRID_FORM,
    "mpi": _MPI_FORM,
    "threads": _POSITIVE_INT_FORM,
    "accelerator": "choose one of " + ", ".join(ACCELERATORS),
    "accelerator_threads": _POSITIVE_INT_FORM,
    "device_mem": _DEVICE_MEM_FORM,
    "log": "choose one of " + ", ".join(LOG_LEVELS),
    "dslash_structure": "choose one of " + ", ".join(DSLASH_STRUCTURES),
    "llc_mb": _LLC_FORM,
}

# Environment variables, in increasing priority: a later one wins over an earlier one.
_ENV_VARS: tuple[tuple[str, str, Callable[[Any, str], Any]], ...] = (
    ("OMP_NUM_THREADS", "threads", _parse_omp_num_threads),
    ("PYGRID_THREADS", "threads", _parse_threads),
    ("PYGRID_ACCELERATOR", "accelerator", _parse_accelerator),
    ("PYGRID_DEVICE_MEM", "device_mem", _parse_device_mem),
    ("PYGRID_DSLASH", "dslash", _parse_dslash),
    ("PYGRID_DSLASH_STRUCTURE", "dslash_structure", _parse_dslash_structure),
    ("PYGRID_COMPRESS_LINKS", "compress_links", _parse_compress_links),
    ("PYGRID_LLC_MB", "llc_mb", _parse_llc),
    ("PYGRID_SHM_HALO", "shm_halo", _parse_bool),
)


def _env_values(env: Mapping[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for var, field, parse in _ENV_VARS:
        raw = env.get(var)
        if raw is None or raw.strip() == "":
            continue
        values[field] = parse(raw, f"{var}={_shown(raw)}")
    return values


def config_from_env(env: Mapping[str, str] | None = None) -> Config:
    """The Config given by the environment alone (``os.environ`` by default)."""
    return Config(**_env_values(os.environ if env is None else env))


class _FlagParser(argparse.ArgumentParser):
    """argparse for the start-up flags: errors become ConfigError naming the flag and the form."""

    def error(self, message: str):
        m = re.search(r"argument (--[\w-]+)", message)
        spec = _FLAG_BY_NAME.get(m.group(1)) if m else None
        if spec is not None and "ignored explicit argument" in message:
            value = message.split("ignored explicit argument ", 1)[1].strip(chr(39))
            raise ConfigError(f"{spec.flag}={_shown(value)}: {spec.flag} is a switch and takes no value")
        if spec is not None and "expected one argument" in message:
            raise ConfigError(f"{spec.flag}: missing value; {_MISSING_FORMS[spec.field]}")
        raise ConfigError(f"pygrid start-up flags: {message}")


def _flag_parser() -> argparse.ArgumentParser:
    p = _FlagParser(add_help=False, allow_abbrev=False, prog="pygrid")
    for spec in FLAGS:
        if spec.takes_value:
            p.add_argument(spec.flag, dest=spec.field, metavar=spec.metavar, default=argparse.SUPPRESS)
        else:
            p.add_argument(spec.flag, dest=spec.field, action="store_const", const=spec.value,
                           default=argparse.SUPPRESS)
    return p


def _attach_dash_values(argv: list[str]) -> list[str]:
    """``--grid -8.8.8.8`` as ``--grid=-8.8.8.8``: a value flag takes the next argument even when it
    starts with a dash (as Grid does), unless that is one of our flags, so that the error names
    the value instead of reporting it missing."""
    value_flags = {spec.flag for spec in FLAGS if spec.takes_value}
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        if arg in value_flags and nxt is not None and nxt.startswith("-") and \
                nxt.split("=", 1)[0] not in _FLAG_BY_NAME:
            out.append(f"{arg}={nxt}")
            i += 2
            continue
        out.append(arg)
        i += 1
    return out


def _without_grid_only(argv: list[str]) -> list[str]:
    """``argv`` less the flags of :data:`GRID_ONLY_FLAGS` and their values, each with its warning
    (a value flag with no value is a ConfigError, as for our own)."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        flag, eq, value = argv[i].partition("=")
        if flag not in GRID_ONLY_FLAGS:
            out.append(argv[i])
            i += 1
            continue
        takes, why = GRID_ONLY_FLAGS[flag]
        if takes and not eq:
            if i + 1 >= len(argv) or argv[i + 1] == "--":
                raise ConfigError(f"{flag}: missing value (a flag of Grid's, which pygrid consumes)")
            value, i = argv[i + 1], i + 1
        elif not takes and eq:
            raise ConfigError(f"{argv[i]}: {flag} is a switch and takes no value")
        shown = f"{flag} {_shown(value)}" if takes else flag
        warnings.warn(f"{shown} (a flag of Grid's) has no effect in pygrid: {why}", GridFlagWarning,
                      stacklevel=3)
        i += 1
    return out


def parse_args(
    argv: Iterable[str], env: Mapping[str, str] = os.environ
) -> tuple[Config, list[str]]:
    """Consume pygrid's start-up flags from ``argv``.

    Returns ``(config, remaining)`` where ``remaining`` is every argument that
    was not consumed, in its original order. Pass ``sys.argv[1:]`` (or all of
    ``sys.argv``: an unknown first element is simply handed back). Each flag
    accepts both ``--flag value`` and ``--flag=value``; a repeated flag takes
    its last value. A lone ``--`` ends flag parsing: it and everything after it
    are returned untouched. Environment variables in ``env`` fill in the flags
    that are absent.
    """
    argv = list(argv)
    tail: list[str] = []
    if "--" in argv:
        k = argv.index("--")
        argv, tail = argv[:k], argv[k:]
    argv = _without_grid_only(argv)
    given, remaining = _flag_parser().parse_known_args(_attach_dash_values(argv))
    values = _env_values(env)
    labels: dict[str, str] = {}  # field -> how it was given, for the layout check
    for field, raw in vars(given).items():
        spec = next(s for s in FLAGS if s.field == field and (s.takes_value or s.value == raw))
        if not spec.takes_value:
            values[field] = raw
            continue
        if raw.strip() == "":
            raise ConfigError(f"{spec.flag}: missing value; {_MISSING_FORMS[field]}")
        label = f"{spec.flag} {_shown(raw)}"
        values[field] = _FIELD_PARSERS[field](raw, label)
        labels[field] = label

    _check_layout(
        values.get("grid"),
        values.get("mpi"),
        "--grid" if "grid" in labels else "grid",
        "--mpi" if "mpi" in labels else "mpi",
    )
    return Config(**values), remaining + tail


def make_config(base: Config | None = None, /, **overrides: Any) -> Config:
    """A Config from Python keywords, validated like the flags.

    ``base`` (default: the config given by the environment) supplies every
    field not overridden. Used by ``pg.init(device_mem=512)``::

        make_config(grid=[8, 8, 8, 16], accelerator="numpy")
        make_config(cfg, log="debug")

    Sequences or dotted strings are accepted for ``grid`` and ``mpi``, and
    numeric strings for the integer fields.
    """
    if base is None:
        base = config_from_env()
    elif not isinstance(base, Config):
        raise ConfigError(
            f"make_config: the base must be a pygrid Config, not {type(base).__name__}"
        )
    fields = [f.name for f in dataclasses.fields(Config)]
    values = {name: getattr(base, name) for name in fields}
    for name, value in overrides.items():
        if name not in values:
            close = difflib.get_close_matches(name, fields, n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise ConfigError(
                f"{_kw_label(name, value)}: unknown option; {hint}choose one of {', '.join(fields)}"
            )
        values[name] = _FIELD_PARSERS[name](value, _kw_label(name, value))
    return Config(**values)


# ---------------------------------------------------------------------------
# The active configuration
# ---------------------------------------------------------------------------

_current: Config | None = None
_lock = threading.Lock()


def current() -> Config:
    """The active Config; built from the environment on first use."""
    global _current
    cfg = _current
    if cfg is not None:     # without the lock: every Dirac call asks, and the lock costs microseconds
        return cfg
    with _lock:
        if _current is None:
            _current = config_from_env()
        return _current


def set_current(cfg: Config | None) -> Config | None:
    """Make ``cfg`` the active Config and return the previous one.

    ``set_current(None)`` forgets the active config, so the next
    :func:`current` builds a fresh one from the environment.
    """
    global _current
    if cfg is not None and not isinstance(cfg, Config):
        raise ConfigError(
            f"set_current: expected a pygrid Config, not {type(cfg).__name__}"
        )
    with _lock:
        previous, _current = _current, cfg
    return previous


# ---------------------------------------------------------------------------
# Help
# ---------------------------------------------------------------------------


def flags_help(indent: int = 2) -> str:
    """Help text for the start-up flags: one entry per flag with its default."""
    pad = " " * indent
    heads = [spec.flag + (f" {spec.metavar}" if spec.metavar else "") for spec in FLAGS]
    width = max(len(h) for h in heads) + 2
    lines = ["pygrid start-up flags (also --flag=value):"]
    for head, spec in zip(heads, FLAGS):
        extra = f"default: {spec.default}"
        if spec.env:
            extra += "; env: " + ", ".join(spec.env)
        lines.append(f"{pad}{head:<{width}}{spec.help} ({extra})")
    return "\n".join(lines)
