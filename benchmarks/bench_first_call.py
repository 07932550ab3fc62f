"""The first call of a Dirac operator: ``D.Dhop`` at 8^4 in a process with an empty compile cache
(every kernel and its parallel driver compiled), then in a new process with that cache.

    python benchmarks/bench_first_call.py [--threads 2] [--rounds 1] [--schur] [--L 8]

Wilson in double and domain wall (Ls 16) in single, the two cases issue 17 names.  ``--L 16`` (or
more) times them on L^4, where Wilson reads its links compressed: its first call also compiles that
kernel and compresses the links.  ``--schur``
instead times Möbius (Ls 8, double): its first ``D.Dhop``, then the first ``MdagM`` of its Schur
operator after it (the variants of the 5D kernel a Schur solve adds, and its fifth-dimension
kernels).
"""
from __future__ import annotations

import argparse
import platform

from pygrid.bench.compile_probe import dirac_first_call_times


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--schur", action="store_true", help="Möbius: the first Dhop, then the Schur MdagM")
    p.add_argument("--L", type=int, default=8, help="the lattice L^4 (default 8)")
    args = p.parse_args(argv)
    print(f"first D.Dhop at {args.L}^4, {args.threads} threads, {platform.processor() or platform.machine()}")
    if args.schur:
        for _ in range(args.rounds):
            t = dirac_first_call_times(8, "double", args.threads, mobius=True, L=args.L)
            print(f"  Möbius Ls 8, double: Dhop empty cache {t['cold_seconds']:6.2f} s, then Schur MdagM "
                  f"{t['schur_cold']:6.2f} s   cached {t['cached_seconds']:5.2f} s, "
                  f"{t['schur_cached']:5.2f} s", flush=True)
        return
    for label, Ls, prec in (("Wilson, double", 0, "double"), ("domain wall Ls 16, single", 16, "single")):
        for _ in range(args.rounds):
            t = dirac_first_call_times(Ls, prec, args.threads, L=args.L)
            print(f"  {label:<27} empty cache {t['cold_seconds']:6.2f} s   "
                  f"cached {t['cached_seconds']:5.2f} s", flush=True)


if __name__ == "__main__":
    main()
