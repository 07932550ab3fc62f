"""pygrid against Grid C++ on this machine, in one run: Grid's own Dhop benchmarks and
`pygrid benchmark`, alternated on the same lattice, thread count and precision.

    python benchmarks/vs_grid.py --grid-build ~/grid-anchor [--threads 2] [--rounds 2] [--quick]
                                 [--cases wilson-double,wilson-single,dwf8-double,dwf16-single,...]
                                 [--lattices 8.8.8.8,...] [--simd native|avx2]

Grid comes from ../shared/anchors/grid/build.sh (its build directory is --grid-build).
Each round runs, per case and lattice, Grid's generic kernel, Grid's --dslash-unroll kernel and
pygrid's openmp backend, each in a fresh process; Grid's figure is the best of its two kernels
(the first `mflop/s =` line of its output, the hopping term), pygrid's the Dhop GFlop/s of its
--json report.  The table gives the median over the rounds of each, and the ratio pygrid / Grid;
the ratio of each one's best round, busy or not (another tenant only ever slows a run, so each
one's best is the nearest to its pace on a quiet machine); the machine (CPU model, SIMD width)
on every row; and each one's share of the bandwidth roofline set by the copy of pygrid's run in
the round (Grid's counted with its links whole, 960 B a Wilson site in double; pygrid's as its
benchmark counts it).  Each round's line gives the threads' probe (pygrid.bench.scaling: how
many threads' worth of compute-bound work the threads did together, in long blocks / in launches
of 40 us) just before Grid's runs and before and after pygrid's: a first figure well under the
thread count means the machine shared the cores meanwhile, a second one that the threads were
slow to start short launches.

A round whose probes read under ``--busy-below`` of the thread count in long blocks (0.85 by
default: 1.7x on two threads, where a quiet machine reads 1.9-2.0x) ran while another tenant
held part of a core; a Dirac call of tens of microseconds moves 1.3-1.5x then, on either side.
Such a round is marked ``busy`` and another is run in its place, up to ``--rounds`` more; the
medians come from the quiet rounds (from every round where none was quiet), and the table says
how many rounds each row used.  A run stopped by Ctrl-C or SIGTERM (a time limit) prints the
table of the rows it reached, the last one with the rounds it had, and exits with status 130.

``--simd avx2`` compares the AVX2 code on an AVX-512 machine: pygrid's kernels are compiled
without AVX-512 (``NUMBA_CPU_FEATURES``: the host's features, the AVX-512 ones turned off; Nsimd
and the kernels' structure follow, :func:`pygrid.cartesian.host_simd_bits`), against a Grid build
configured with ``--enable-simd=AVX2``.  The SIMD of the Grid build (its
``grid.configure.summary``) must match pygrid's.  pygrid's processes inherit the environment, so
``PYGRID_DSLASH_STRUCTURE=wide|narrow`` in it runs pygrid's hand-unrolled kernel in that structure.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

#: case -> (Grid benchmark binary, its extra flags, pygrid kind, pygrid flags, precision, lattices)
CASES = {
    "wilson-double": ("Benchmark_wilson", [], "wilson", [], "double",
                      ("8.8.8.8", "16.16.16.16", "24.24.24.24")),
    "wilson-single": ("Benchmark_dwf_fp32", ["-Ls", "1"], "wilson", [], "single",
                      ("8.8.8.8", "16.16.16.16", "24.24.24.24")),
    "dwf8-double": ("Benchmark_dwf", ["-Ls", "8"], "dwf", ["--Ls", "8"], "double",
                    ("8.8.8.8", "16.16.16.16")),
    "dwf16-single": ("Benchmark_dwf_fp32", ["-Ls", "16"], "dwf", ["--Ls", "16"], "single",
                     ("8.8.8.8", "16.16.16.16")),
    "dwf8-single": ("Benchmark_dwf_fp32", ["-Ls", "8"], "dwf", ["--Ls", "8"], "single",
                    ("8.8.8.8", "16.16.16.16")),
    "dwf16-double": ("Benchmark_dwf", ["-Ls", "16"], "dwf", ["--Ls", "16"], "double",
                     ("8.8.8.8", "16.16.16.16")),
}
#: Grid's Benchmark_wilson times the double-precision operator only; Wilson in single is its
#: domain-wall benchmark at Ls 1, whose hopping term is the Wilson hopping term of every 4D site
#: (1320 flops a site, the same kernels).  Benchmark_dwf in double refuses Ls 1 (its s-innermost
#: grids vectorise s), so the double row stays with Benchmark_wilson
_MFLOPS = re.compile(r"mflop/s\s*=\s*([0-9.]+(?:[eE][+-]?\d+)?)")


def grid_gflops(output: str) -> float:
    """The hopping term's GFlop/s in a Grid benchmark's output: its first ``mflop/s =`` line."""
    m = _MFLOPS.search(output)
    if m is None:
        raise ValueError("no 'mflop/s =' line in the Grid benchmark's output")
    return float(m.group(1)) / 1000.0


def machine(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's model name, with its family and model numbers where the name alone does not tell
    the generation (a virtual machine's "AMD EPYC"), and the SIMD width pygrid compiles for."""
    model = platform.processor() or "unknown CPU"
    fields = {}
    try:
        with open(cpuinfo) as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("model name", "cpu family", "model") and key not in fields:
                    fields[key] = value.strip()
                if not line.strip() and fields:
                    break  # the first CPU's block
    except OSError:
        pass
    model = fields.get("model name", model)
    if "cpu family" in fields and "model" in fields:
        model += f" (family {fields['cpu family']} model {fields['model']})"
    from pygrid.cartesian import host_simd_bits

    bits = host_simd_bits()
    simd = {512: "AVX-512", 256: "AVX2"}.get(bits, f"{bits}-bit SIMD")
    if os.environ.get("NUMBA_CPU_FEATURES"):
        simd += " (compiled for)"
    return f"{model}, {simd}"


def grid_simd(build_dir: str):
    """The SIMD a Grid build was configured for (``AVX512``, ``AVX2``, ...), None if unknown."""
    try:
        with open(os.path.join(build_dir, "build", "grid.configure.summary")) as f:
            for line in f:
                if line.strip().startswith("SIMD"):
                    return line.split(":", 1)[1].strip() or None
    except OSError:
        pass
    return None


def avx2_features() -> str:
    """The host's features for numba with every AVX-512 one turned off."""
    import llvmlite.binding as llvm

    flags = llvm.get_host_cpu_features().flatten().split(",")
    return ",".join("-" + f[1:] if f.startswith("+avx512") else f for f in flags if f)


def run_grid(binary, extra, lattice, threads, unroll):
    cmd = [binary, "--grid", lattice, "--threads", str(threads)] + extra
    if unroll:
        cmd.append("--dslash-unroll")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr[-2000:]}")
    return grid_gflops(r.stdout)


def run_pygrid(kind, flags, lattice, threads, precision):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "run.json")
        cmd = [sys.executable, "-m", "pygrid", "benchmark", kind, "--grid", lattice, "--threads",
               str(threads), "--precision", precision, "--json", out, "--log", "warning"] + flags
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr[-2000:]}")
        with open(out) as f:
            doc = json.load(f)
    scaling = doc["config"].get("thread_scaling") or {}
    run = doc["runs"][0]
    dhop = run["kernels"]["Dhop"]
    return dhop["gflops"], tuple((scaling.get(k), scaling.get("short_" + k)) for k in ("before", "after")), \
        run["roofline"]["copy_gbps"], dhop["roofline_percent"]


def whole_links_bytes(kind, pflags, precision):
    """Bytes a site of Grid's Dhop must move (its links whole, four a 4D site): the compulsory
    traffic of pygrid's byte model for whole links (pygrid.bench.wilson, pygrid.bench.dwf)."""
    from pygrid.bench.dwf import reals_per_site
    from pygrid.bench.wilson import REALS_PER_SITE

    reals = reals_per_site(int(pflags[pflags.index("--Ls") + 1])) if kind == "dwf" else REALS_PER_SITE
    return reals * (8 if precision == "double" else 4)


def roofline_percent(gflops, copy_gbps, bytes_per_site, flops_per_site=1320):
    """``gflops`` as a percentage of the roofline of a copy at ``copy_gbps``."""
    return 100.0 * gflops / (copy_gbps * flops_per_site / bytes_per_site)


def probe(threads):
    """The threads' probe now on ``threads`` openmp threads: (long blocks, short launches), (None,
    None) on one."""
    from pygrid.accelerator.backends import get_backend
    from pygrid.bench.scaling import probe as scaling_probe

    backend = get_backend("openmp")
    backend.set_threads(threads)
    s = scaling_probe(backend)
    time.sleep(0.2)  # OpenMP's threads spin a while after their last region: idle before Grid starts
    return s


def busy(probes, threads: int, below: float) -> bool:
    """Whether a round's probes (``(long, short)`` pairs, None on one thread) say the machine shared
    the cores meanwhile: a long-block figure under ``below`` times the thread count."""
    return any(p[0] is not None and p[0] < below * threads for p in probes)


def quiet_rounds(runs):
    """The figures of the quiet rounds of ``runs`` (``(grid, pygrid, busy, ...)`` tuples, each
    returned without its busy flag), or of every round where none was quiet."""
    quiet = [r[:2] + r[3:] for r in runs if not r[2]]
    return quiet or [r[:2] + r[3:] for r in runs]


def _x(v):
    """A probe's (long, short) pair as ``1.97x/1.78x``."""
    return "/".join("-" if x is None else f"{x:.2f}x" for x in v)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--grid-build", required=True, help="build directory of ../shared/anchors/grid/build.sh")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--lattices", default=None, help="override every case's lattices (comma-separated)")
    p.add_argument("--quick", action="store_true", help="8.8.8.8 only, one round")
    p.add_argument("--busy-below", type=float, default=0.85,
                   help="a round whose threads' probe reads under this fraction of the thread count is run "
                        "again (0: never)")
    p.add_argument("--simd", choices=("native", "avx2"), default="native",
                   help="avx2: pygrid compiled without AVX-512, against a Grid build for AVX2")
    args = p.parse_args(argv)
    if args.simd == "avx2":  # before numba is imported here, and inherited by pygrid's processes
        os.environ["NUMBA_CPU_FEATURES"] = avx2_features()
    from pygrid.cartesian import host_simd_bits

    want = {512: "AVX512", 256: "AVX2"}.get(host_simd_bits())
    have = grid_simd(os.path.expanduser(args.grid_build))
    if have is not None and want is not None and have != want:
        p.error(f"the Grid build in {args.grid_build} is for {have}, pygrid compiles for {want}: "
                f"pass a Grid build for {want}" + ("" if args.simd == "avx2" else " or --simd avx2"))
    bench_dir = os.path.join(os.path.expanduser(args.grid_build), "build", "benchmarks")
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    for c in cases:
        if c not in CASES:
            p.error(f"--cases: unknown case {c!r}; choose from {', '.join(CASES)}")
    rounds = 1 if args.quick else args.rounds
    where = machine()
    print(f"pygrid vs Grid C++ on {where}, {args.threads} threads, {rounds} round(s); Grid from {bench_dir}",
          flush=True)
    rows = []
    # a run cut short (Ctrl-C, or SIGTERM from a time limit) still prints the rows it finished,
    # and the medians of the rounds of the row it was in
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        _run(args, cases, rounds, rows)
        done = True
    except KeyboardInterrupt:
        done = False
    finally:
        signal.signal(signal.SIGTERM, previous)
    print()
    print("| Dhop | lattice | Grid C++ GFlop/s (best of generic and unrolled) | pygrid GFlop/s "
          "| pygrid / Grid | best round of each: pygrid / Grid | Grid, % of roofline | pygrid, % of roofline "
          "| rounds used | machine |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for case, lat, g, py, g_pct, py_pct, best, used in rows:
        print(f"| {case} | {lat} | {g:.1f} | {py:.1f} | {py / g:.2f} | {best:.2f} | {g_pct:.1f}% "
              f"| {py_pct:.1f}% | {used} | {where}, {args.threads} threads |")
    print("(% of roofline: against the copy of pygrid's run in the same round; Grid's with its links whole, "
          "pygrid's with the byte count its benchmark prints: links compressed where its note says so)")
    if not done:
        print("(interrupted: the rows above are those it reached; the last one's rounds may be fewer "
              "than asked)")
        return 130
    return 0


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _run(args, cases, rounds, rows):
    """The rounds of every case and lattice, each row's medians appended to ``rows`` as soon as it
    has any round (updated as rounds come)."""
    bench_dir = os.path.join(os.path.expanduser(args.grid_build), "build", "benchmarks")
    for case in cases:
        binary, gflags, kind, pflags, prec, lattices = CASES[case]
        binary = os.path.join(bench_dir, binary)
        if not os.path.exists(binary):
            sys.exit(f"vs_grid: {binary} not found: build Grid with ../shared/anchors/grid/build.sh "
                     f"{args.grid_build}")
        if args.lattices:
            lattices = tuple(args.lattices.split(","))
        if args.quick:
            lattices = ("8.8.8.8",)
        for lat in lattices:
            runs, k = [], 0
            # a busy round is run again, up to as many more rounds as asked for
            while sum(not r[2] for r in runs) < rounds and k < 2 * rounds:
                k += 1
                before_grid = probe(args.threads)
                g = max(run_grid(binary, gflags, lat, args.threads, False),
                        run_grid(binary, gflags, lat, args.threads, True))
                py, (before, after), copy_gbps, py_pct = run_pygrid(kind, pflags, lat, args.threads, prec)
                g_pct = roofline_percent(g, copy_gbps, whole_links_bytes(kind, pflags, prec))
                b = busy((before_grid, before, after), args.threads, args.busy_below)
                runs.append((g, py, b, g_pct, py_pct))
                print(f"  {case:<13} {lat:<12} round {k}: Grid {g:7.2f}  pygrid {py:7.2f} GFlop/s"
                      f"   (copy {copy_gbps:.1f} GB/s: Grid {g_pct:.1f}%, pygrid {py_pct:.1f}% of roofline;"
                      f" threads {_x(before_grid)}; {_x(before)}, {_x(after)}){'  busy' if b else ''}",
                      flush=True)
                used = quiet_rounds(runs)
                best = max(r[1] for r in runs) / max(r[0] for r in runs)
                row = (case, lat, *(statistics.median(x[i] for x in used) for i in range(4)), best,
                       f"{len(used)} of {len(runs)}")
                if k == 1:
                    rows.append(row)
                else:
                    rows[-1] = row


if __name__ == "__main__":
    sys.exit(main())
