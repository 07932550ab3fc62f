"""Gauge configuration I/O throughput: NERSC and ILDG read and write in MB/s against numpy.

    python benchmarks/bench_io.py [--grid 16.16.16.16] [--repeat 3] [--dir DIR] [--json FILE]

For each format (NERSC 3x3 IEEE64BIG, NERSC two-row IEEE64BIG, ILDG 64-bit, ILDG
32-bit) on a random SU(3) configuration: write (includes the plaquette and link
trace for the header, the checksums, fsync and rename), read with verification
(checksums, plaquette, link trace) and read without it (checksums still
computed); against ``numpy.fromfile`` of the same payload bytes, and
``ndarray.tofile`` + fsync of the same bytes.  MB are 2**20 bytes of payload; the
best of --repeat runs.  The file sits in the page cache after writing, so reads
measure conversion, not the disk.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import numpy as np

import pygrid as pg
import pygrid.io  # noqa: F401
import pygrid.qcd  # noqa: F401
from pygrid.io.lime import read_records


def best(fn, repeat):
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--grid", default="16.16.16.16")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--dir", default=None, help="directory for the files (default: a temporary one)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    dims = [int(v) for v in args.grid.split(".")]
    grid = pg.GridCartesian(dims)
    U = pg.qcd.random_gauge(grid, pg.ParallelRNG(grid, [1, 2, 3, 4]))
    pg.qcd.plaquette(U)  # compile the kernels outside the timings
    vol = int(np.prod(dims))
    cases = [
        ("nersc 3x3 IEEE64BIG", "nersc", dict(two_row=False), 4 * 9 * 2 * 8, ">f8"),
        ("nersc 2row IEEE64BIG", "nersc", dict(two_row=True), 4 * 6 * 2 * 8, ">f8"),
        ("ildg 64-bit", "ildg", dict(precision="double"), 4 * 9 * 2 * 8, ">f8"),
        ("ildg 32-bit", "ildg", dict(precision="single"), 4 * 9 * 2 * 4, ">f4"),
    ]
    results = []
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        path = os.path.join(d, "conf")
        print(f"pygrid {pg.__version__}: gauge I/O on {'x'.join(map(str, dims))}, best of {args.repeat}")
        print("columns: write, read (verified), read --no-verify, numpy.fromfile, ndarray.tofile+fsync")
        print(
            f"{'format':<22}{'MB':>8}{'write':>10}{'read':>10}{'no-verify':>10}"
            f"{'np.from':>10}{'np.to':>10}   MB/s"
        )
        for name, fmt, kw, site_bytes, dt in cases:
            write = pg.io.write_nersc if fmt == "nersc" else pg.io.write_ildg
            read = pg.io.read_nersc if fmt == "nersc" else pg.io.read_ildg
            nbytes = vol * site_bytes
            mb = nbytes / 2 ** 20
            tw = best(lambda: write(path, U, **kw), args.repeat)
            tr = best(lambda: read(path, grid=grid), args.repeat)
            trn = best(lambda: read(path, grid=grid, verify=False), args.repeat)
            offset = os.path.getsize(path) - nbytes  # NERSC: the payload ends the file
            if fmt == "ildg":  # the binary record's data offset
                with open(path, "rb") as f:
                    recs = read_records(f, os.path.getsize(path))
                offset = next(r for r in recs if r.type == "ildg-binary-data").offset
            tnp = best(
                lambda: np.fromfile(path, dtype=dt, count=nbytes // np.dtype(dt).itemsize, offset=offset),
                args.repeat,
            )
            arr = np.fromfile(path, dtype=dt, count=nbytes // np.dtype(dt).itemsize, offset=offset)
            raw = os.path.join(d, "raw")

            def np_write():
                with open(raw, "wb") as f:
                    arr.tofile(f)
                    f.flush()
                    os.fsync(f.fileno())

            tnw = best(np_write, args.repeat)
            r = dict(
                format=name,
                payload_mb=mb,
                write_mbs=mb / tw,
                read_mbs=mb / tr,
                read_noverify_mbs=mb / trn,
                numpy_fromfile_mbs=mb / tnp,
                numpy_tofile_fsync_mbs=mb / tnw,
            )
            results.append(r)
            print(f"{name:<22}{mb:8.1f}{r['write_mbs']:10.1f}{r['read_mbs']:10.1f}{r['read_noverify_mbs']:10.1f}"
                  f"{r['numpy_fromfile_mbs']:10.1f}{r['numpy_tofile_fsync_mbs']:10.1f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(grid=dims, repeat=args.repeat, results=results), f, indent=2)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
