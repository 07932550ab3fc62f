"""The Wilson and domain-wall Dhop benchmarks at the lattices of docs/performance.md, in one script
over the `pygrid benchmark` command.

    python benchmarks/bench_wilson.py            # Wilson Dhop at 8^4, 16^4, 24^4;
                                                 # domain wall at 8^4, 16^4, Ls 8 and 16
    python benchmarks/bench_wilson.py --quick    # 8^4 only

Both precisions, the numpy reference and the copy-bandwidth roofline measured in
the same run (see pygrid/bench/wilson.py and dwf.py for the counts used).
Extra arguments (e.g. --threads 2 --json out.json) are passed on.
"""
from __future__ import annotations

import sys

from pygrid.cli import main


def run(argv):
    quick = "--quick" in argv
    extra = [a for a in argv if a != "--quick"]
    wilson = "8.8.8.8" if quick else "8.8.8.8,16.16.16.16,24.24.24.24"
    dwf = "8.8.8.8" if quick else "8.8.8.8,16.16.16.16"
    status = main(["benchmark", "wilson", "--sweep", wilson, "--precision", "both", *extra])
    for Ls in ("8",) if quick else ("8", "16"):
        status |= main(["benchmark", "dwf", "--sweep", dwf, "--Ls", Ls, "--precision", "both", *extra])
    return status


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
