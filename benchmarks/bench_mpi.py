"""Weak scaling of the Wilson hopping term over MPI ranks, and the halo exchange on its own.

    python benchmarks/bench_mpi.py                       # 8^4 and 16^4 per rank, 1, 2 and 4 ranks
    python benchmarks/bench_mpi.py --local 16.16.16.16 --ranks 1,2 --repeat 3

For each volume per rank it runs ``pygrid benchmark wilson`` (or ``dwf`` with
``--kind dwf``) with one thread per rank: as one process on the local volume,
and under ``mpiexec -n N`` on N times that volume (``--mpi 1.1.1.2`` for 2
ranks, ``1.1.2.2`` for 4).  The runs alternate, ``--repeat`` times, so that a
slow phase of the machine hits every configuration alike; the best of the
repeats is kept.  It prints Dhop GFlop/s per rank, the ratio to one rank, the
halo bytes per call and rank, and the fraction of the communication time that
computation hid.  With more ranks than cores the ranks share cores, and the
rate per rank drops by that factor: the table says so.

Between the ranks of one node the Dirac halo goes through an MPI shared-memory window where the
layout allows it (pygrid.stencil.shared_halo; the ``way`` column).  ``--messages`` also runs every
multi-rank case with ``--no-shm-halo`` (the halo as MPI messages), alternating with the default,
for the two ways side by side; ``--t-only`` splits every rank count in t alone (``1.1.1.N``),
where the default SIMD layout puts no lanes, so that every face travels whole.

``--halo`` measures the exchange alone: two ranks swap messages of a face's
size through ``Communicator.exchange`` (loopback on one machine).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

LAYOUTS = {1: (1, 1, 1, 1), 2: (1, 1, 1, 2), 4: (1, 1, 2, 2), 8: (1, 2, 2, 2)}


def dotted(v):
    return ".".join(str(int(x)) for x in v)


def mpiexec():
    exe = shutil.which(
        "mpiexec", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    )
    if exe is None:
        sys.exit("bench_mpi: mpiexec not found; pip install 'pygrid[mpi]'")
    return exe


def run_once(kind, local, n, extra, independent=False, layout=None):
    """One benchmark: n ranks on n local volumes (``layout``, by default ``LAYOUTS[n]``), or
    (``independent``) n one-rank runs of the local volume started together by mpiexec, which share
    the machine as the ranks do but never communicate."""
    layout = layout or LAYOUTS[n]
    grid = local if independent else [l * p for l, p in zip(local, layout)]
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "run.json")
        cmd = [sys.executable, "-m", "pygrid", "benchmark", kind, "--grid", dotted(grid), "--threads", "1",
               "--precision", "double", "--quiet", "--json", out, *extra]
        env = dict(os.environ)
        if independent:
            env["PYGRID_MPI"] = "0"  # each process is a one-rank program
            cmd = [mpiexec(), "-n", str(n), "sh", "-c", " ".join(cmd[:-len(extra) - 1] if extra else cmd[:-1])
                   + f" {out}.$PMI_RANK " + " ".join(extra)]
        elif n > 1:
            cmd = [mpiexec(), "-n", str(n), *cmd, "--mpi", dotted(layout)]
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if r.returncode != 0:
            sys.exit(f"bench_mpi: {' '.join(cmd)} failed:\n{r.stderr[-2000:]}")
        if independent:
            rates = []
            for rank in range(n):
                with open(f"{out}.{rank}") as f:
                    rates.append(json.load(f)["runs"][0]["kernels"]["Dhop"]["gflops"])
            return {"gflops": min(rates)}
        with open(out) as f:
            doc = json.load(f)
    k = doc["runs"][0]["kernels"]["Dhop"]
    m = k.get("_mpi", {})
    way = "shared" if m.get("shared_transfers_per_call") else "messages" if m else "-"
    return {"gflops": k["gflops"], "halo_mb": m.get("halo_bytes_per_call", 0) / 1e6, "way": way,
            "hidden": m.get("hidden_fraction"), "exposed_ms": 1e3 * m.get("exposed_seconds_per_call", 0.0),
            "comm_ms": 1e3 * m.get("comm_seconds_per_call", 0.0), "ms": 1e3 * k["seconds_per_call"]}


def scaling(args):
    cores = len(os.sched_getaffinity(0))
    extra = ["--Ls", str(args.Ls)] if args.kind == "dwf" else []
    print(f"{args.kind} Dhop, double precision, 1 thread per rank, {cores} cores; best of {args.repeat} "
          "alternating runs")
    print("'apart': the same number of one-rank runs of the local volume at once, no communication "
          "(what sharing the machine alone costs); GFlop/s of the slowest")
    print(f"{'per rank':>12} {'ranks':>5} {'way':>8} {'GFlop/s/rank':>12} {'vs 1 rank':>9} {'apart':>8} "
          f"{'vs apart':>8} {'halo MB/call':>12} {'comm ms':>8} {'exposed ms':>10} {'hidden':>6}")
    ways = [[]] + ([["--no-shm-halo"]] if args.messages else [])
    for local in args.local:
        best, apart = {}, {}
        for _ in range(args.repeat):
            for n in args.ranks:
                layout = (1, 1, 1, n) if args.t_only else LAYOUTS[n]
                for way in ways if n > 1 else [[]]:
                    r = run_once(args.kind, local, n, extra + way, layout=layout)
                    key = (n, bool(way))
                    if key not in best or r["gflops"] > best[key]["gflops"]:
                        best[key] = r
                if n > 1:
                    a = run_once(args.kind, local, n, extra, independent=True)["gflops"]
                    apart[n] = max(apart.get(n, 0.0), a)
        base = best.get((1, False))
        for (n, _), r in sorted(best.items()):
            ratio = f"{r['gflops'] / base['gflops']:9.2f}" if base else f"{'-':>9}"
            hidden = "-" if r["hidden"] is None else f"{100 * r['hidden']:.0f}%"
            share = "  (ranks share cores)" if n > cores else ""
            a = apart.get(n, base["gflops"] if base and n == 1 else None)
            ap = f"{a:8.3f} {r['gflops'] / a:8.2f}" if a else f"{'-':>8} {'-':>8}"
            print(f"{dotted(local):>12} {n:>5} {r['way']:>8} {r['gflops']:12.3f} {ratio} {ap} "
                  f"{r['halo_mb']:12.3f} {r['comm_ms']:8.3f} {r['exposed_ms']:10.3f} {hidden:>6}{share}")


def halo_bandwidth(args):
    """Under mpiexec -n 2: two ranks swap two messages each way, as a Dhop split in one dimension does."""
    import numpy as np

    from pygrid.communicator import world

    comm = world()
    if comm.size != 2:
        sys.exit("--halo runs under mpiexec -n 2")
    other = 1 - comm.rank
    if comm.is_root:
        print("halo exchange, 2 ranks on one machine: 2 messages each way per exchange")
        print(f"{'MB per message':>15} {'us per exchange':>16} {'GB/s per rank':>14}")
    for nbytes in (16 << 10, 128 << 10, 1 << 20, 4 << 20):
        send = [np.ones(nbytes // 8) for _ in range(2)]
        recv = [np.empty(nbytes // 8) for _ in range(2)]
        n = max(20, min(2000, (64 << 20) // nbytes))
        comm.barrier()
        t = time.perf_counter()
        for _ in range(n):
            comm.exchange([(s, other, k) for k, s in enumerate(send)],
                          [(r, other, k) for k, r in enumerate(recv)]).wait()
        dt = comm.max((time.perf_counter() - t) / n)
        if comm.is_root:
            print(f"{nbytes / 1e6:15.3f} {1e6 * dt:16.1f} {2 * nbytes / dt / 1e9:14.2f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kind", choices=("wilson", "dwf"), default="wilson")
    ap.add_argument("--local", default="8.8.8.8,16.16.16.16", help="volumes per rank, comma-separated")
    ap.add_argument("--ranks", default="1,2,4", help="rank counts, comma-separated (1, 2, 4, 8)")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--Ls", type=int, default=8)
    ap.add_argument("--messages", action="store_true",
                    help="also run every multi-rank case with its halo as MPI messages (--no-shm-halo)")
    ap.add_argument("--t-only", action="store_true", help="split every rank count in t alone (1.1.1.N)")
    ap.add_argument(
        "--halo", action="store_true", help="the halo exchange bandwidth (run under mpiexec -n 2)"
    )
    args = ap.parse_args()
    if args.halo:
        if "PMI_RANK" not in os.environ and "OMPI_COMM_WORLD_SIZE" not in os.environ:
            os.execv(mpiexec(), [mpiexec(), "-n", "2", sys.executable, *sys.argv])
        return halo_bandwidth(args)
    args.local = [tuple(int(x) for x in v.split(".")) for v in args.local.split(",")]
    args.ranks = [int(n) for n in args.ranks.split(",")]
    bad = [n for n in args.ranks if n not in LAYOUTS]
    if bad or any(len(v) != 4 for v in args.local):
        sys.exit(f"bench_mpi: ranks must be among {sorted(LAYOUTS)} and volumes X.Y.Z.T")
    assert all(math.prod(LAYOUTS[n]) == n for n in LAYOUTS)
    scaling(args)


if __name__ == "__main__":
    main()
