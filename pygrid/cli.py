"""The ``pygrid`` command line.

    pygrid benchmark KIND [flags]     KIND: wilson, dwf, su3, axpy, memory, cache
    pygrid info [flags]               version, backends, devices, SIMD, threads, caches, MPI
    pygrid selftest [flags]           every operator on the backend against numpy, then the Dirac benchmarks
    pygrid --version | --help

The pygrid start-up flags (``--grid``, ``--mpi``, ``--threads``,
``--accelerator``, ``--device-mem``, ...) are parsed by :mod:`pygrid.config`
through ``pg.init``; the benchmark's own flags by argparse.  A bad value
exits with status 2 and one line on stderr naming the flag and the accepted
form.  See docs/cli.md.
"""
from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import platform
import re
import sys
import time
import warnings

from . import communicator
from .bench.kinds import NAMES as KINDS, get_kind
from .errors import BackendError, ConfigError, PerformanceWarning, PyGridError

_config = importlib.import_module("pygrid.config")

__all__ = ["main", "DEFAULT_GRID"]

#: Lattice of ``pygrid benchmark`` without --grid (and of ``make run``).
DEFAULT_GRID = (16, 16, 16, 16)
PRECISIONS = {"double": ("double",), "single": ("single",), "both": ("double", "single")}
EXIT_USAGE = 2
EXIT_FAILED = 1

_USAGE = """usage: pygrid benchmark KIND [flags]    KIND: wilson, dwf, su3, axpy, memory, cache
       pygrid info [flags]
       pygrid convert IN OUT [flags]    NERSC <-> ILDG gauge files, checked and re-written
       pygrid selftest [flags]          every operator on the backend against numpy, then the Dirac benchmarks
       pygrid precompile [flags]        compile the Dirac operators' and solvers' kernels ahead of a job
       pygrid --version

pygrid benchmark --help    every flag with its default
pygrid benchmark KIND --help
"""


class _ArgError(ConfigError):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse that raises one-line ConfigErrors instead of printing usage and exiting."""

    def error(self, message):
        m = re.match(r"argument ([^:]+): (.*)", message)
        if m:
            flag = m.group(1).split("/")[-1]
            inner = m.group(2)
            message = inner if inner.startswith(flag) else f"{flag}: {inner}"
        elif message.startswith("unrecognized arguments"):
            message += "; see pygrid benchmark --help"
        raise _ArgError(message)


#: Most timed or warm-up calls per kernel (``auto`` stays within 3 to 100000).
MAX_CALLS = 10 ** 6
#: Most lattices in one ``--sweep``.
MAX_SWEEP = 100


def _shown(text):
    return _config._shown(text)


def _int_flag(flag, low, high, form):
    """An argparse type: an integer from ``low`` to ``high`` (decimal digits, as the start-up flags)."""
    def parse(text):
        n = _config._as_int(text)
        if n is None or n < low:
            raise argparse.ArgumentTypeError(f"{flag} {_shown(text)}: {form}")
        if n > high:
            raise argparse.ArgumentTypeError(f"{flag} {_shown(text)}: more than {high}; {form}")
        return n
    return parse


_ls = _int_flag("--Ls", 1, _config.MAX_EXTENT, "expected a positive integer, like 8")
_warmup = _int_flag("--warmup", 0, MAX_CALLS, "expected a non-negative integer, like 2")
_ITERATIONS_FORM = "expected a positive integer, like 100, or 'auto' (about 2 s per kernel)"
_calls = _int_flag("--iterations", 1, MAX_CALLS, _ITERATIONS_FORM)


def _iterations(text):
    if text.strip().lower() == "auto":
        return None
    return _calls(text)


def _precision(text):
    t = text.strip().lower()
    if t not in PRECISIONS:
        raise argparse.ArgumentTypeError(f"--precision {_shown(text)}: expected single, double or both")
    return t


def _dims(flag, form):
    def parse(text):
        try:
            return _config._parse_dims(text, f"{flag} {_shown(text)}", form)
        except ConfigError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return parse


def _sweep(text):
    grids = []
    for item in text.split(","):
        if not item.strip():
            continue
        try:
            grids.append(_config._parse_dims(item, f"--sweep {_shown(text)}", _SWEEP_FORM))
        except ConfigError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    if not grids:
        raise argparse.ArgumentTypeError(f"--sweep {_shown(repr(text))}: {_SWEEP_FORM}")
    if len(grids) > MAX_SWEEP:
        raise argparse.ArgumentTypeError(
            f"--sweep: {len(grids)} lattices, more than {MAX_SWEEP}; {_SWEEP_FORM}")
    return grids


_SWEEP_FORM = "expected comma-separated lattices X.Y.Z.T, like 8.8.8.8,16.16.16.16"


def _benchmark_parser():
    p = _Parser(
        prog="pygrid benchmark",
        usage="pygrid benchmark KIND [flags]",
        description="Grid-style benchmarks of pygrid kernels, with the numpy baseline and the "
                    "bandwidth roofline measured in the same run.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        add_help=False,
    )
    p.add_argument("kind", nargs="?", metavar="KIND", help="one of " + ", ".join(KINDS))
    p.add_argument("-h", "--help", action="store_true", help="show this help and exit")
    p.add_argument("-Ls", "--Ls", type=_ls, default=None, metavar="N",
                   help="fifth-dimension extent for dwf (default: 8; -Ls as Grid's Benchmark_dwf)")
    p.add_argument("--precision", type=_precision, default="double", metavar="single|double|both",
                   help="precision(s) to benchmark (default: double)")
    p.add_argument("--iterations", type=_iterations, default=None, metavar="N",
                   help="timed calls per kernel (default: auto, enough for about 2 s, "
                        "estimated from a first timed call)")
    p.add_argument("--warmup", type=_warmup, default=2, metavar="N",
                   help="untimed calls before timing each kernel (default: 2)")
    p.add_argument("--json", metavar="FILE", default=None,
                   help="write every figure, the configuration and the pygrid version as JSON "
                        "(default: none; keys in docs/cli.md)")
    p.add_argument("--sweep", type=_sweep, default=None, metavar="A.B.C.D,E.F.G.H,...",
                   help="run for each of these lattices instead of --grid (default: none)")
    p.add_argument("--plot", metavar="FILE.png", default=None,
                   help="write a PNG of GFlop/s (GB/s for memory/cache) against volume per precision, "
                        "with the roofline; needs matplotlib (default: none)")
    p.add_argument("--simd", type=_dims("--simd", "expected 4 positive integers separated by dots "
                                        "whose product is the SIMD lane count, like 1.1.2.2"),
                   default=None, metavar="X.Y.Z.T",
                   help="SIMD layout of the grid (default: chosen for the host, as pg.GridCartesian)")
    p.add_argument("--quiet", action="store_true",
                   help="no progress line on stderr (default: progress shown)")
    return p


def _benchmark_help(kind=None):
    p = _benchmark_parser()
    head = p.format_help().rstrip()
    kinds = "\n".join(f"  {k:<8}{get_kind(k).help}" for k in KINDS)
    text = [head, "", "kinds:", kinds, "", _config.flags_help(),
            f"  (--grid defaults to {'.'.join(map(str, DEFAULT_GRID))} for benchmarks)"]
    if kind:
        import importlib

        doc = (importlib.import_module(f"pygrid.bench.{kind}").__doc__ or "").strip()
        text = [f"pygrid benchmark {kind}: {get_kind(kind).help}", "", doc, "", *text]
    return "\n".join(text) + "\n"


# ---------------------------------------------------------------------------
# pg.init: start-up flags, with errors that name the flag
# ---------------------------------------------------------------------------

def _init(argv):
    import pygrid as pg

    try:
        return pg.init(argv)
    except BackendError as e:
        cfg, _ = _config.parse_args(argv)
        raise ConfigError(f"--accelerator {cfg.accelerator}: {e}") from None


def _check_mpi(grids, cfg, label):
    if cfg.mpi is None:
        return
    for g in grids:
        for mu, (n, p) in enumerate(zip(g, cfg.mpi)):
            if n % p:
                raise ConfigError(
                    f"{label} {'.'.join(map(str, g))} with --mpi {'.'.join(map(str, cfg.mpi))}: "
                    f"the extent {n} in dimension {mu} is not divisible by {p} processes")


# ---------------------------------------------------------------------------
# pygrid benchmark
# ---------------------------------------------------------------------------

def _config_block(kind, cfg, args, grids, precisions, numba_threads):
    import pygrid as pg

    from .bench.common import make_grid
    from .bench.units import dotted

    backend = pg.get_backend()
    mgr = pg.memory.get_manager()
    dm = "no limit" if cfg.device_mem is None else f"{cfg.device_mem} MB"
    lines = [f"pygrid {pg.__version__}: benchmark {kind.name}"]
    for dims in grids:
        vol = 1
        for d in dims:
            vol *= d
        ls = args.Ls if kind.fifth_dim else 1
        extra = f" x Ls {args.Ls}" if kind.fifth_dim else ""
        lines.append(f"  grid            {dotted(dims)}{extra} ({vol * ls} sites)")
        for prec in precisions:
            g = make_grid(dims, prec, args.simd)
            lines.append(f"  simd layout     {prec}: {dotted(g.simd_layout)} (Nsimd {g.nsimd}, "
                         f"{g.osites} outer sites)")
    if backend.device == "unified":  # the CPU's threads run the kernels
        lines.append(f"  backend         {backend.name}, {backend.threads()} threads "
                     f"(numba parallel loops: {numba_threads})")
    else:  # a device runs them: which one (rank 0's, under MPI)
        lines.append(f"  backend         {backend.describe()}; host numba parallel loops: {numba_threads}")
    lines.append(f"  precision       {', '.join(precisions)}")
    if backend.name in ("openmp", "numpy"):  # the CPU kernels' thresholds for fields past the caches
        from .accelerator.caches import describe

        lines.append(f"  last-level      {describe()}")
    dev = f"({kind.device or mgr.device.name} device)"
    if args.device_mem_note:
        lines.append(f"  device-mem      {mgr.watermark_bytes / 2 ** 20:g} MB {dev}: {args.device_mem_note}")
    else:
        lines.append(f"  device-mem      {dm} {dev}")
    it = "auto (about 2 s per kernel)" if args.iterations is None else str(args.iterations)
    lines.append(f"  iterations      {it}, warm-up {args.warmup}")
    comm = communicator.world()
    if comm.size > 1 or cfg.mpi is not None:
        g = make_grid(grids[0], precisions[0], args.simd)
        lines.append(
            f"  mpi             {dotted(g.mpi_layout)}: {comm.size} rank{'s' if comm.size > 1 else ''}, "
            f"{dotted(g.ldims)} sites per rank"
        )
    lines.append(f"  pygrid          {pg.__version__}, python {platform.python_version()}")
    return "\n".join(lines)


def _benchmark(argv):
    parser = _benchmark_parser()
    # help first: it must work whatever else is on the line
    if any(a in ("-h", "--help") for a in argv):
        kind = next((a for a in argv if a in KINDS), None)
        sys.stdout.write(_benchmark_help(kind))
        return 0
    rest = _init(argv)
    cfg = _config.current()
    args = parser.parse_args(rest)
    kind, precisions, grids = _preflight(args, cfg)
    args.device_mem_note = _fit_device_mem(kind, grids, precisions, args, cfg, argv)

    from .bench.common import Context
    from .bench.progress import Progress
    from .bench.timing import Timer, set_numba_threads

    numba_threads = set_numba_threads(cfg.resolved_threads())
    progress = Progress(quiet=args.quiet or not communicator.world().is_root)
    timer = Timer(args.iterations, args.warmup, progress=progress)
    ctx = Context(timer, progress, simd_layout=args.simd, Ls=args.Ls)

    print(_config_block(kind, cfg, args, grids, precisions, numba_threads), flush=True)
    scaling = dict(zip(("before", "short_before"), _thread_scaling("threads")))
    verification = [_verify(kind, prec, ctx) for prec in precisions] if kind.verify is not None else []
    status = EXIT_FAILED if any(not v["passed"] for v in verification) else 0
    runs, elapsed = _run(kind, grids, precisions, ctx)
    scaling.update(zip(("after", "short_after"), _thread_scaling("threads (after)")))
    if communicator.world().is_root:  # rank 0 writes the files
        config = _config_dict(cfg, args, grids, precisions, numba_threads)
        config["thread_scaling"] = scaling
        _write_outputs(args, kind, argv, config, verification, runs, elapsed)
    return status


def _thread_scaling(label):
    """The threads' probe (:mod:`pygrid.bench.scaling`) in long blocks and in short launches, its
    line printed; (None, None) where it has none."""
    import pygrid as pg

    from .bench.scaling import probe, probe_threads, scaling_line

    backend = pg.get_backend()
    speedup, short = probe(backend)
    line = scaling_line(label, probe_threads(backend), speedup, short)
    if line is not None and communicator.world().is_root:
        print(line, flush=True)
    return speedup, short


def _preflight(args, cfg):
    """The kind, precisions and lattices of a benchmark, every flag checked before anything runs."""
    if args.kind is None:
        raise ConfigError("pygrid benchmark: missing KIND; choose one of " + ", ".join(KINDS))
    if args.kind not in KINDS:
        raise ConfigError(f"benchmark kind {args.kind!r}: choose one of " + ", ".join(KINDS))
    kind = get_kind(args.kind)
    if args.Ls is None:
        args.Ls = 8
    elif not kind.fifth_dim:
        fifth = ", ".join(k for k in KINDS if get_kind(k).fifth_dim)
        raise ConfigError(f"--Ls {args.Ls}: the {kind.name} benchmark has no fifth dimension "
                          f"(--Ls applies to {fifth})")
    precisions = PRECISIONS[args.precision]
    if args.sweep:
        grids, label = args.sweep, "--sweep"
    else:
        grids, label = [cfg.grid or DEFAULT_GRID], "--grid"
    _check_mpi(grids, cfg, label)
    check_memory(grids, precisions, args.Ls if kind.fifth_dim else 1, label)
    for flag, path in (("--json", args.json), ("--plot", args.plot)):
        _check_output(flag, path)
    if args.plot:
        from .bench.plot import PlotUnavailable

        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise PlotUnavailable("--plot needs matplotlib: pip install matplotlib") from None
        _check_plot_format(args.plot)
    from .bench.common import make_grid

    with warnings.catch_warnings():             # checks only: the banner reports the layout
        warnings.simplefilter("ignore", PerformanceWarning)
        for dims in grids:
            for prec in precisions:
                make_grid(dims, prec, args.simd)
                if kind.preflight is not None:
                    kind.preflight(dims, prec, args.simd, cfg, label)
    return kind, precisions, grids


def _device_mem_given(argv, cfg):
    """How ``--device-mem`` was set, as a note names it: on the command line (before a lone
    ``--``) or in the environment; None where it was left at its default."""
    flags = argv[:argv.index("--")] if "--" in argv else argv
    if any(a == "--device-mem" or a.startswith("--device-mem=") for a in flags):
        return f"--device-mem {cfg.device_mem}"
    if "PYGRID_DEVICE_MEM" in os.environ:
        return f"PYGRID_DEVICE_MEM={os.environ['PYGRID_DEVICE_MEM']}"
    return None


def _fit_device_mem(kind, grids, precisions, args, cfg, argv):
    """Fit the device watermark to the fields the benchmark holds on a device at once, before
    anything is allocated, and return the banner's note: the default 128 MB (Grid's) is raised to
    them; a ``--device-mem`` the user gave below them is kept, and the note says the cache will
    evict.  None where there is nothing to say (the host's memory, a kind that declares no fields,
    or a watermark that holds them)."""
    import pygrid as pg

    from .bench.common import make_grid
    from .bench.units import dotted, real_bytes

    mgr = pg.memory.get_manager()
    if kind.device_reals is None or kind.device is not None or mgr.device.unified:
        return None
    Ls = args.Ls if kind.fifth_dim else 1
    need, where = 0, None
    for dims in grids:
        for prec in precisions:
            g = make_grid(dims, prec, args.simd)
            nbytes = kind.device_reals(Ls) * real_bytes(prec) * g.osites * g.nsimd
            if nbytes > need:
                need, where = nbytes, f"{dotted(dims)}{f' x Ls {Ls}' if Ls > 1 else ''} {prec}"
    if need <= mgr.watermark_bytes:
        return None
    mb = -(-need // 2 ** 20)
    per_rank = " on each rank" if communicator.world().size > 1 else ""
    given = _device_mem_given(argv, cfg)
    if given:
        return (f"below the benchmark's {mb} MB of fields at {where}{per_rank} ({given}): the cache "
                f"evicts, and a field that cannot fit stops the run")
    mgr.set_watermark(mb * 2 ** 20)
    return f"the benchmark's fields at {where}{per_rank}, above the default {cfg.device_mem} MB"


def _host_memory():
    """Bytes of memory of this machine, or None where the OS does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return None


def check_memory(grids, precisions, Ls, label):
    """ConfigError naming ``label`` when a lattice cannot fit this machine's memory, even at one
    complex number per site (every field holds more): before anything is allocated."""
    mem = _host_memory()
    if mem is None:
        return
    comm = communicator.world()
    per_node = max(1, communicator.ranks_on_this_node()) if comm.size > 1 else 1
    reals = 8 if "double" in precisions else 4
    for dims in grids:
        sites = math.prod(dims) * Ls
        need = -(-sites // comm.size) * per_node * 2 * reals
        if need > mem:
            ls = f" x Ls {Ls}" if Ls > 1 else ""
            gib = 2 ** 30
            raise ConfigError(
                f"{label} {'.'.join(map(str, dims))}{ls}: {sites} sites need at least {need / gib:.3g} GiB "
                f"(one complex number per site) on this node, more than its {mem / gib:.3g} GiB of memory")


def _check_plot_format(path):
    """ConfigError unless matplotlib can write ``path``'s format (its extension), before the run."""
    from matplotlib.backend_bases import FigureCanvasBase

    formats = FigureCanvasBase.get_supported_filetypes()
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    if ext not in formats:
        raise ConfigError(f"--plot {_shown(path)}: matplotlib cannot write "
                          f"{'.' + ext + ' files' if ext else 'a file without an extension'}; "
                          f"use one of {', '.join('.' + f for f in sorted(formats))}")


def _check_output(flag, path):
    """ConfigError when ``path`` cannot be written: checked before the benchmark runs, not after."""
    if path is None:
        return
    if "\0" in path:
        raise ConfigError(f"{flag} {_shown(path)}: a file name cannot contain a NUL character")
    where = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise ConfigError(f"{flag} {_shown(path)}: is a directory")
    if not os.path.isdir(where):
        raise ConfigError(f"{flag} {_shown(path)}: no directory {_shown(where)}")
    if not os.access(where, os.W_OK):
        raise ConfigError(f"{flag} {_shown(path)}: cannot write in {_shown(where)}")


def _verify(kind, prec, ctx):
    """The kind's check against numpy in one precision, printed; the record with ``passed`` set."""
    v = kind.verify(prec, ctx)
    ctx.progress.clear()
    ok = v["passed"] = v["max_rel_error"] <= v["tolerance"]
    lat = "x".join(map(str, v["lattice"]))
    print(f"verified against numpy reference: max rel. error {v['max_rel_error']:.1e} "
          f"({prec}, {lat})" if ok else
          f"VERIFICATION FAILED against numpy reference: max rel. error {v['max_rel_error']:.1e} "
          f"> {v['tolerance']:.0e} ({prec}, {lat})", flush=True)
    return v


def _run(kind, grids, precisions, ctx):
    """Every (lattice, precision) of the kind, printed as it completes; (runs, seconds)."""
    from .accelerator.compile_log import totals
    from .bench.report import format_run

    runs = []
    t0 = time.perf_counter()
    n0, c0 = totals()
    for dims in grids:
        for prec in precisions:
            r = kind.run(dims, prec, ctx)
            ctx.progress.clear()
            runs.append(r)
            print()
            print(format_run(r), flush=True)
            rep = r.extra.get("manager_report")
            if rep:
                print("  " + rep.replace("\n", "\n  "))
    ctx.progress.clear()
    elapsed = time.perf_counter() - t0
    n, c = totals()
    compiled = (f"{c - c0:.1f} s of it compiling {n - n0} kernel{'s' if n - n0 != 1 else ''}" if n > n0
                else "no kernel compiled: all from the cache")
    print(f"\ndone in {elapsed:.1f} s ({compiled})", flush=True)
    return runs, elapsed


def _write_outputs(args, kind, argv, config, verification, runs, elapsed):
    """The ``--json`` document and the ``--plot`` figure."""
    run_dicts = [r.to_dict() for r in runs]
    if args.json:
        import pygrid as pg

        doc = {
            "pygrid_version": pg.__version__,
            "kind": kind.name,
            "argv": ["pygrid", "benchmark", *argv],
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "config": config,
            "host": _host_dict(),
            "verification": verification,
            "runs": run_dicts,
            "memory_manager": pg.memory.get_manager().stats(),
            "elapsed_seconds": elapsed,
        }
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2, default=str)
        print(f"wrote {args.json}")
    if args.plot:
        from .bench.plot import write_plot

        write_plot(args.plot, kind.name, run_dicts)
        print(f"wrote {args.plot}")


def _config_dict(cfg, args, grids, precisions, numba_threads):
    import pygrid as pg

    return {
        "grids": [list(g) for g in grids],
        "sweep": args.sweep is not None,
        "precisions": list(precisions),
        "simd_layout": list(args.simd) if args.simd else None,
        "Ls": args.Ls,
        "iterations": args.iterations,
        "warmup": args.warmup,
        "backend": pg.get_backend().name,
        "threads": cfg.resolved_threads(),
        "numba_threads": numba_threads,
        "accelerator": cfg.accelerator,
        "accelerator_threads": cfg.accelerator_threads,
        "device_mem_mb": cfg.device_mem,
        "watermark_bytes": pg.memory.get_manager().watermark_bytes,
        "device": pg.memory.get_manager().device.name,
        "debug_mem": cfg.debug_mem,
        "emulate_device": cfg.emulate_device,
        "mpi": list(cfg.mpi) if cfg.mpi else None,
    }


def _host_dict():
    import numba
    import numpy as np

    from .accelerator.caches import group_bytes, host_groups
    from .cartesian.simd import default_nsimd, host_simd_bits

    found = host_groups()
    return {
        "simd_bits": host_simd_bits(),
        "llc_group_bytes": group_bytes(),
        "llc_groups": 1 if found is None else found[1],
        "nsimd_double": default_nsimd("double"),
        "nsimd_single": default_nsimd("single"),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": numba.__version__,
        "machine": platform.machine(),
    }


# ---------------------------------------------------------------------------
# pygrid info
# ---------------------------------------------------------------------------

def _try_import(name):
    import importlib

    try:
        return importlib.import_module(name), None
    except ImportError:
        return None, "not installed"
    except Exception as e:  # a broken install: say what happened, in one line
        return None, f"import failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def _backend_lines():
    lines = []
    numba, why = _try_import("numba")
    lines.append(("openmp", f"available (numba {numba.__version__})" if numba else f"numba {why}"))
    lines.append(("numpy", "available (the reference evaluator)"))
    cupy, why = _try_import("cupy")
    if cupy is None:
        cuda = hip = f"cupy {why}"
    else:
        try:
            n = cupy.cuda.runtime.getDeviceCount()
            is_hip = bool(getattr(cupy.cuda.runtime, "is_hip", False))
            dev = f"{n} device(s)" if n else "no device"
        except Exception as e:
            dev, is_hip = f"no device ({type(e).__name__})", False
        msg = f"cupy {cupy.__version__}, {dev}; not available in this version of pygrid"
        cuda = msg if not is_hip else "cupy is built for ROCm"
        hip = msg if is_hip else "cupy is built for CUDA"
    lines.append(("cuda", cuda))
    lines.append(("hip", hip))
    try:
        from .accelerator.sycl_backend import import_dpctl

        dpctl = import_dpctl()  # sets up the OpenCL ICD first, as the backend does
        why = ""
    except Exception as e:
        dpctl, why = None, str(e)
    if dpctl is None:
        sycl = f"not available: {why}"
    else:
        try:
            devs = dpctl.get_devices()
            names = ", ".join(f"{d.backend.name}:{d.device_type.name}" for d in devs) or "no device"
        except Exception as e:
            names = f"no device ({type(e).__name__})"
        sycl = f"dpctl {dpctl.__version__}, devices: {names}; use --accelerator sycl"
    lines.append(("sycl", sycl))
    return lines


def _info(argv):
    if any(a in ("-h", "--help") for a in argv):
        sys.stdout.write("usage: pygrid info [pygrid start-up flags]\n\n"
                         "Version, backends and why the others are not available, devices, SIMD width "
                         "and default layouts, threads, cache directory, MPI library.\n\n"
                         + _config.flags_help() + "\n")
        return 0
    rest = _init(argv)
    if rest:
        raise ConfigError(f"pygrid info: unrecognized arguments: {' '.join(rest)}")
    import numba
    import numpy as np

    import pygrid as pg

    from .accelerator.compile_cache import cache_dir
    from .cartesian.simd import default_nsimd, default_simd_layout, host_simd_bits

    cfg = _config.current()
    backend = pg.get_backend()
    out = [f"pygrid {pg.__version__}", f"  python          {sys.version.split()[0]} ({sys.executable})",
           f"  numpy           {np.__version__}", f"  numba           {numba.__version__}", "backends:"]
    for name, what in _backend_lines():
        mark = "*" if name == backend.name else " "
        out.append(f" {mark}{name:<15}{what}")
    out.append(f"  (* = active: --accelerator {cfg.accelerator})")
    mgr = pg.memory.get_manager()
    dm = "no limit" if cfg.device_mem is None else f"{cfg.device_mem} MB"
    out.append("devices:")
    out.append(f"  host CPU        {platform.machine()}, {os.cpu_count()} cores "
               f"({cfg.resolved_threads()} usable by this process)")
    out.append(f"  memory device   {mgr.device.name}, device-mem {dm}")
    from .accelerator.caches import describe

    out.append(f"  last-level      {describe()}")
    bits = host_simd_bits()
    dims = tuple(cfg.grid or DEFAULT_GRID)
    out.append("SIMD:")
    out.append(f"  host width      {bits} bits")
    for prec in ("double", "single"):
        n = default_nsimd(prec)
        out.append(f"  {prec:<16}Nsimd {n}, default layout on {'.'.join(map(str, dims))}: "
                   f"{'.'.join(map(str, default_simd_layout(dims, n)))}")
    out.append("threads:")
    out.append(f"  backend         {backend.threads()} "
               f"(--threads / PYGRID_THREADS / OMP_NUM_THREADS)")
    out.append(f"  numba           {numba.config.NUMBA_NUM_THREADS} max, threading layer "
               f"{numba.config.THREADING_LAYER}")
    out.append("caches:")
    out.append(f"  kernels         {cache_dir()} (PYGRID_CACHE_DIR)")
    out.append(
        f"  numba           {numba.config.CACHE_DIR or '(beside the kernel sources)'} (NUMBA_CACHE_DIR)"
    )
    mpi4py, why = _try_import("mpi4py")
    out.append("MPI:")
    if mpi4py is None:
        out.append(f"  mpi4py          {why}; pygrid runs on one rank (pip install 'pygrid[mpi]')")
    else:
        out.append(f"  mpi4py          {mpi4py.__version__}")
    print("\n".join(out))
    return 0


# ---------------------------------------------------------------------------
# entry point
# ---------------------------------------------------------------------------

def _dispatch(argv):
    if not argv or argv[0] in ("-h", "--help", "help"):
        sys.stdout.write(_USAGE)
        return 0 if argv else EXIT_USAGE
    if argv[0] in ("--version", "version"):
        from . import __version__

        print(f"pygrid {__version__}")
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd == "benchmark":
        return _benchmark(rest)
    if cmd == "info":
        return _info(rest)
    if cmd == "selftest":
        from .selftest import run as _selftest

        return _selftest(rest)
    if cmd == "convert":
        from .io.convert import main as _convert

        return _convert(rest)
    if cmd == "precompile":
        from .precompile import run as _precompile

        return _precompile(rest)
    raise ConfigError(f"unknown command {cmd!r}; choose benchmark, info, convert, selftest or precompile "
                      f"(pygrid --help)")


def main(argv=None):
    """Entry point of the ``pygrid`` console script; returns (and exits with) the status."""
    from .bench.common import BenchmarkUnavailable
    from .bench.plot import PlotUnavailable

    if argv is None:
        argv = sys.argv[1:]
    comm = communicator.world()
    if not comm.is_root:
        # one report per job, from rank 0, as Grid does; errors still reach stderr from every rank
        sys.stdout = open(os.devnull, "w")
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            status = _dispatch(list(argv))
    except (PyGridError, BenchmarkUnavailable, PlotUnavailable) as e:
        if comm.size > 1:
            comm.abort(f"error: {_one_line(e)}", EXIT_USAGE)
        sys.stderr.write(f"pygrid: error: {_one_line(e)}\n")
        status = EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write("\npygrid: interrupted\n")
        status = 130
    sys.stdout.flush()
    return status


def _show_warning(message, category, filename, lineno, file=None, line=None):
    # a command prints one line per warning, as it does per error, not Python's file:line form
    print(f"pygrid: warning: {_one_line(message)}", file=sys.stderr if file is None else file, flush=True)


def _one_line(e):
    text = str(e).strip() or type(e).__name__
    # any stream can print it: characters that cannot be encoded (lone surrogates from argv) escaped
    return " ".join(text.split()).encode("utf-8", "backslashreplace").decode("utf-8")


if __name__ == "__main__":
    sys.exit(main())
