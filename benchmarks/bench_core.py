"""Core expression benchmark: fused kernels against numpy and a copy kernel.

    python benchmarks/bench_core.py [--grid 16.16.16.16] [--threads 2] [--iterations N] [--json FILE]

A thin wrapper over ``pygrid.bench`` (the code behind ``pygrid benchmark``):
runs the axpy and su3 kinds (z = a*x + y; z = x*y and U*v) in double and
single precision, each against numpy and the copy roofline measured in the
same run, then the compile time of a new expression and the time to load it
from the disk cache in a fresh process.  ``pygrid benchmark axpy|su3`` gives
the same figures with every flag.
"""
from __future__ import annotations

import argparse
import json

import pygrid as pg
from pygrid.bench import axpy, su3
from pygrid.bench.common import Context
from pygrid.bench.compile_probe import compile_times
from pygrid.bench.progress import Progress
from pygrid.bench.report import format_run
from pygrid.bench.timing import Timer, set_numba_threads


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--grid", default="16.16.16.16")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--iterations", type=int, default=None, help="default: about 2 s per kernel")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    pg.init([], threads=args.threads) if args.threads else pg.init([])
    dims = [int(v) for v in args.grid.split(".")]
    set_numba_threads(pg.current_config().resolved_threads())
    progress = Progress()
    ctx = Context(Timer(args.iterations, progress=progress), progress)
    runs = []
    for prec in ("double", "single"):
        for mod in (axpy, su3):
            r = mod.run(dims, prec, ctx)
            progress.clear()
            runs.append(r.to_dict())
            print("\n" + format_run(r), flush=True)
    c = compile_times()
    print(f"\nnew expression: compile {c['first_compile_seconds']:.2f} s; from disk cache in a new "
          f"process {c['disk_cache_load_seconds']:.3f} s (import pygrid {c['import_seconds']:.2f} s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"pygrid_version": pg.__version__, "compile": c, "runs": runs}, f, indent=2)


if __name__ == "__main__":
    main()
