"""One run of the backend comparison: sycl (or another accelerator) against openmp, kernel by kernel.

    .venv/bin/python benchmarks/bench_backends.py [--grid 16.16.16.16] [--accelerator sycl]
        [--precision double] [--rounds 2] [--json FILE]

Runs ``pygrid benchmark axpy|su3|wilson|dwf`` on the openmp backend (the
Dirac kernels in both variants, ``--dslash-unroll`` and ``--dslash-generic``)
and on the accelerator, one process each, alternating the backends over
``--rounds`` rounds so that a slow phase of the machine hits both sides.
The accelerator's own ceiling is the hand-written device copy that its
benchmark measures as the roofline (for sycl an OpenCL copy of as many bytes
as the kernel moves).  It then prints each figure (the best of the rounds)
and the ratios the targets are stated in:

    fused axpy        accelerator / openmp, and accelerator GB/s / device copy GB/s
    su3_mul           accelerator / openmp
    Wilson Dhop       accelerator / openmp's fastest variant
    DWF Dhop (Ls 8)   accelerator / openmp's fastest variant
    generic Dhop      openmp generic / openmp unrolled (Wilson and DWF)
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PYGRID = [sys.executable, "-m", "pygrid"]

TARGETS = [  # (label, numerator, denominator, target)
    ("fused axpy: accelerator / openmp", ("acc", "axpy", "axpy"), ("openmp", "axpy", "axpy"), 0.70),
    (
        "fused axpy: accelerator GB/s / device copy GB/s",
        ("acc", "axpy", "axpy", "gbps"),
        ("acc", "axpy", "copy", "gbps"),
        0.70,
    ),
    ("su3_mul: accelerator / openmp", ("acc", "su3", "su3_mul"), ("openmp", "su3", "su3_mul"), 0.50),
    (
        "Wilson Dhop: accelerator / openmp fastest",
        ("acc", "wilson", "Dhop"),
        ("openmp*", "wilson", "Dhop"),
        0.30,
    ),
    ("DWF Dhop Ls 8: accelerator / openmp fastest", ("acc", "dwf", "Dhop"), ("openmp*", "dwf", "Dhop"), 0.30),
    (
        "Wilson Dhop: openmp generic / unrolled",
        ("generic", "wilson", "Dhop"),
        ("openmp", "wilson", "Dhop"),
        0.60,
    ),
    ("DWF Dhop Ls 8: openmp generic / unrolled", ("generic", "dwf", "Dhop"), ("openmp", "dwf", "Dhop"), 0.60),
]


def run_one(kind, backend, grid, precision, extra):
    """One ``pygrid benchmark`` process; returns {kernel name: {gflops, gbps}} of its run."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    cmd = PYGRID + ["benchmark", kind, "--accelerator", backend, "--grid", grid, "--precision", precision,
                    "--quiet", "--json", path] + extra
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
    with open(path) as f:
        data = json.load(f)
    os.unlink(path)
    run = data["runs"][0]
    out = {name: {"gflops": k.get("gflops"), "gbps": k.get("gbps")} for name, k in run["kernels"].items()}
    out["copy"] = {"gbps": run["roofline"]["copy_gbps"], "gflops": None}
    print(f"  {' '.join(cmd[2:])}  ({time.perf_counter() - t:.0f} s)", flush=True)
    return out


def best(a, b):
    """Per kernel and metric, the larger figure of two rounds."""
    if a is None:
        return b
    return {k: {m: max((x for x in (a.get(k, {}).get(m), b[k][m]) if x is not None), default=None)
                for m in ("gflops", "gbps")} for k in b}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--grid", default="16.16.16.16")
    ap.add_argument("--accelerator", default="sycl")
    ap.add_argument("--precision", default="double", choices=("double", "single"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--device-mem", default="2048", help="--device-mem for the accelerator runs (MB)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    cfgs = {"openmp": ("openmp", ["--dslash-unroll"]), "generic": ("openmp", ["--dslash-generic"]),
            "acc": (a.accelerator, ["--device-mem", a.device_mem])}
    res = {}
    print(f"backend comparison on {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"{a.grid} {a.precision}, {a.rounds} rounds", flush=True)
    for _round in range(a.rounds):
        for kind in ("axpy", "su3", "wilson", "dwf"):
            for side, (backend, extra) in cfgs.items():
                if side == "generic" and kind not in ("wilson", "dwf"):
                    continue
                got = run_one(kind, backend, a.grid, a.precision, extra)
                res[(side, kind)] = best(res.get((side, kind)), got)
    print()
    print(f"{'kernel':<12} {'side':<28} {'GFlop/s':>8} {'GB/s':>7}")
    for (side, kind), ks in sorted(res.items(), key=lambda x: (x[0][1], x[0][0])):
        name = {"axpy": "axpy", "su3": "su3_mul", "wilson": "Dhop", "dwf": "Dhop"}[kind]
        label = {"openmp": "openmp (unrolled Dhop)", "generic": "openmp --dslash-generic",
                 "acc": a.accelerator}[side]
        print(f"{kind + ' ' + name:<12} {label:<28} {ks[name]['gflops']:8.2f} {ks[name]['gbps']:7.2f}")
        if side == "acc":
            print(f"{'':<12} {a.accelerator + ' device copy':<28} {'':>8} {ks['copy']['gbps']:7.2f}")
    print()

    def value(spec):
        side, kind, name = spec[:3]
        metric = spec[3] if len(spec) > 3 else "gflops"
        if side == "openmp*":
            return max(res[("openmp", kind)][name][metric], res[("generic", kind)][name][metric])
        return res[(side, kind)][name][metric]

    rows = []
    for label, num, den, target in TARGETS:
        r = value(num) / value(den)
        rows.append({"what": label, "ratio": r, "target": target, "met": r >= target})
        print(f"{label:<52} {r:6.2f}   target >= {target:.2f}  {'met' if r >= target else 'NOT met'}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"grid": a.grid, "precision": a.precision, "accelerator": a.accelerator,
                       "figures": {f"{s}/{k}": v for (s, k), v in res.items()}, "ratios": rows}, f, indent=1)


if __name__ == "__main__":
    main()
