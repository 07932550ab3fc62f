"""The Wilson operator's hops with its links read whole and compressed, alternating in one process.

    python benchmarks/bench_compressed_links.py [--grid 24.24.24.24] [--precision double]
        [--calls Dhop,Meooe] [--rounds 9] [--structures auto|wide,narrow]

Two ``WilsonFermion`` operators on the same gauge field (antiperiodic in time), one with
``compress_links=False`` and one with ``compress_links=True`` (two rows of each SU(3) link read,
the third rebuilt: ``pygrid.qcd.compressed_links.compress_links``; by default an operator
compresses on fields larger than the caches), each call timed for 0.4 s a round, the operators
alternating, so that the machine's slow and fast phases hit both alike.  Prints the median and
best GFlop/s (Grid's 1320 flops a site; ``Meooe`` hops half the sites) of each and the median of
the paired ratios against the first variant, after checking that every variant gives its result.

``--structures wide,narrow`` times both with each structure of the hand-unrolled kernel
(``--dslash-structure``: the register order and the tiled order for these 4D fields), four
variants in all, the configuration switched before each variant's turn.
"""
from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np

import pygrid as pg
import pygrid.qcd  # noqa: F401  (pg.qcd)
from pygrid import config


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", default="24.24.24.24")
    ap.add_argument("--precision", choices=("double", "single"), default="double")
    ap.add_argument("--calls", default="Dhop,Meooe")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--structures", default="auto",
                    help="comma-separated structures of the hand-unrolled kernel: auto, wide, narrow")
    args, rest = ap.parse_known_args(argv)
    pg.init(rest)
    structures = [s.strip() for s in args.structures.split(",") if s.strip()]
    bad = [s for s in structures if s not in config.DSLASH_STRUCTURES]
    if bad or not structures:
        raise SystemExit(f"--structures: {', '.join(bad) or 'none given'}; choose from "
                         f"{', '.join(config.DSLASH_STRUCTURES)}")
    calls = [c.strip() for c in args.calls.split(",") if c.strip()]
    bad = [c for c in calls if c not in ("Dhop", "Meooe")]
    if bad:
        raise SystemExit(f"--calls: {', '.join(bad)}; choose from Dhop, Meooe")
    dims = [int(x) for x in args.grid.split(".")]
    prec = args.precision
    grid = pg.GridCartesian(dims, precision=prec)
    U = pg.qcd.random_gauge(grid, pg.ParallelRNG(grid, [1, 2, 3, 4]), precision=prec)
    psi = pg.LatticeFermion(grid, prec)
    pg.ParallelRNG(grid, [5, 6]).gaussian(psi)
    odd = pg.pick_checkerboard(1, psi)
    # one configuration per structure, each kept, so that a variant's kept calls stay bound to it
    base = config.current()
    configs = {s: dataclasses.replace(base, dslash_structure=s) for s in structures}
    variants = {}
    for s in structures:
        for c in (False, True):
            links = "links compressed" if c else "links whole"
            label = links if structures == ["auto"] else f"{s}, {links}"
            D = pg.qcd.WilsonFermion(U, 0.1, boundary_phases=[1, 1, 1, -1], compress_links=c)
            variants[label] = (configs[s], c, D)
    sites = int(np.prod(dims))
    tol = 1e-12 if prec == "double" else 1e-5
    print(f"Wilson hops, links whole and compressed, {args.grid}, {prec}, {pg.get_backend().describe()}, "
          f"{time.strftime('%H:%M:%S', time.gmtime())} UTC; {args.rounds} alternating rounds")
    width = max(map(len, variants))
    try:
        for name in calls:
            src = psi if name == "Dhop" else odd
            outs = {k: D.new_fermion(None if name == "Dhop" else 0) for k, (_, _, D) in variants.items()}
            run = {k: (lambda D=D, o=outs[k]: getattr(D, name)(src, out=o))
                   for k, (_, _, D) in variants.items()}
            first = next(iter(variants))
            for k, (cfg, c, D) in variants.items():
                config.set_current(cfg)
                run[k]()
                if c and not D.reads_compressed_links(None if name == "Dhop" else 1):
                    raise SystemExit("the operator with compress_links=True reads its links whole (they "
                                     "are not SU(3) times a phase, or the backend runs the generic kernel)")
            want = outs[first].to_numpy()
            err = max(np.abs(outs[k].to_numpy() - want).max() for k in variants) / np.abs(want).max()
            if not err <= tol:
                raise SystemExit(f"{name}: the variants disagree: max rel. difference {err:.1e}")
            flops = 1320 * sites // (1 if name == "Dhop" else 2)
            rates = {k: [] for k in variants}
            for _ in range(args.rounds):
                for k, (cfg, _, _) in variants.items():
                    config.set_current(cfg)
                    n, t0 = 0, time.perf_counter()
                    while time.perf_counter() - t0 < 0.4:
                        run[k]()
                        n += 1
                    rates[k].append(flops * n / (time.perf_counter() - t0) / 1e9)
            ref = np.array(rates[first])
            for k, r in rates.items():
                paired = np.median(np.array(r) / ref)
                print(f"  {name:<6} {k:<{width}} median {np.median(r):7.2f}  best {max(r):7.2f} GFlop/s   "
                      f"/ {first}: {paired:.3f}")
            if len(variants) == 2:
                paired = np.median(np.array(rates[list(variants)[1]]) / ref)
                print(f"  {name:<6} compressed / whole: median {paired:.3f} (results agree to {err:.1e})")
            else:
                print(f"  {name:<6} results agree to {err:.1e}")
    finally:
        config.set_current(base)


if __name__ == "__main__":
    main()
