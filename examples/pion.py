"""The pion correlator and its effective mass, from a point source.

    python examples/pion.py --grid 8.8.8.16                         # free field, Wilson
    python examples/pion.py --grid 8.8.8.16 --action dwf --Ls 8     # free field, domain wall
    python examples/pion.py --grid 8.8.8.16 --gauge cfg.nersc --mass 0.05 --smear 2.0,20

Takes Grid's flags (--grid, --mpi, --threads, --accelerator, --log, ...) and
its own; the gauge field is the unit one (free field), a random one (--gauge
random: a hot start, not physics) or a NERSC/ILDG file.  The fermion boundary
condition is antiperiodic in time.  Prints C(t) and the effective mass
log(C(t)/C(t+1)) and arccosh((C(t-1)+C(t+1))/(2C(t))).
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import pygrid as pg
import pygrid.qcd


def parse(argv):
    rest = pg.init(argv)
    p = argparse.ArgumentParser(prog="pion.py", description=__doc__.split("\n")[0])
    p.add_argument("--action", choices=("wilson", "dwf", "mobius"), default="wilson")
    p.add_argument("--mass", type=float, default=0.1, help="quark mass (default 0.1)")
    p.add_argument("--Ls", type=int, default=8, help="fifth dimension for dwf/mobius (default 8)")
    p.add_argument("--M5", type=float, default=1.8, help="domain-wall height (default 1.8)")
    p.add_argument("--gauge", default="unit", help="unit, random, or a NERSC/ILDG file (default unit)")
    p.add_argument("--source", default="0.0.0.0", help="source site x.y.z.t (default 0.0.0.0)")
    p.add_argument("--smear", default=None, help="Gaussian smearing width,iterations of the source")
    p.add_argument("--tol", type=float, default=1e-10, help="solver tolerance (default 1e-10)")
    p.add_argument("--precision", choices=("double", "single"), default="double")
    return p.parse_args(rest)


def gauge_field(spec, grid, precision):
    if spec == "unit":
        return pg.qcd.unit_gauge(grid, precision)
    if spec == "random":
        return pg.qcd.random_gauge(grid, pg.ParallelRNG(grid, [1, 2, 3, 4]), precision)
    U, _ = pg.io.read_gauge(spec, grid=grid, precision=precision)
    return U


def main(argv=None):
    args = parse(sys.argv[1:] if argv is None else argv)
    grid = pg.GridCartesian()
    U = gauge_field(args.gauge, grid, args.precision)
    bc = dict(boundary_phases=[1, 1, 1, -1])
    if args.action == "wilson":
        op = pg.qcd.WilsonFermion(U, args.mass, **bc)
    elif args.action == "dwf":
        op = pg.qcd.DomainWallFermion(U, args.Ls, args.mass, args.M5, **bc)
    else:
        op = pg.qcd.MobiusFermion(U, args.Ls, args.mass, args.M5, 1.5, 0.5, **bc)
    x0 = [int(v) for v in args.source.split(".")]
    src = pg.qcd.point_source(grid, x0, args.precision)
    if args.smear:
        width, iters = args.smear.split(",")
        src = pg.qcd.gaussian_smear(U, src, float(width), int(iters))
    S, records = pg.qcd.propagator(op, src, pg.algorithms.ConjugateGradient(args.tol, maxiter=20000))
    C = pg.qcd.correlator(pg.qcd.meson(S, S), t0=x0[3])
    m_log = pg.qcd.effective_mass(C)
    m_cosh = pg.qcd.effective_mass(C, "cosh")
    if grid.comm.is_root:
        print(f"pion correlator: {op!r}, source {args.source}, "
              f"{sum(r.iterations for r in records)} solver iterations")
        print(f"{'t':>3} {'C(t)':>24} {'m_eff log':>12} {'m_eff cosh':>12}")
        for t, c in enumerate(C):
            ml = f"{m_log[t]:12.6f}" if t < len(m_log) else " " * 12
            mc = f"{m_cosh[t - 1]:12.6f}" if 0 < t < len(C) - 1 else " " * 12
            print(f"{t:3d} {c.real:24.16e} {ml} {mc}")
    return C


if __name__ == "__main__":
    np.set_printoptions(precision=6)
    main()
