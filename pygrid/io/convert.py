"""``pygrid convert IN OUT``: NERSC <-> ILDG gauge configurations.

The input format is sniffed from the file; the output format comes from
``--to``, else OUT's extension (.lime .ildg .scidac -> ILDG; .nersc -> NERSC),
else the other format than the input.  Prints the plaquette, link trace and
checksums read and written.
"""
from __future__ import annotations

import argparse
import os
import warnings

from ..errors import ConfigError, PerformanceWarning
from . import detect_format, read_gauge, write_ildg, write_nersc

_ILDG_EXT = {".lime", ".ildg", ".scidac", ".ilime"}
_NERSC_EXT = {".nersc"}

USAGE = (
    "pygrid convert IN OUT [--to nersc|ildg] [--precision single|double] [--two-row] [--no-verify] [--quiet]"
)


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise ConfigError(f"pygrid convert: {message}; usage: {USAGE}")


def _parser():
    p = _Parser(prog="pygrid convert", usage=USAGE, add_help=True,
                description="Convert a gauge configuration between NERSC and ILDG (LIME) formats, "
                            "verifying the input's checksums, plaquette and link trace.")
    p.add_argument("input", metavar="IN")
    p.add_argument("output", metavar="OUT")
    p.add_argument("--to", choices=["nersc", "ildg"], default=None,
                   help="output format (default: from OUT's extension, else the other format)")
    p.add_argument("--precision", choices=["single", "double"], default=None,
                   help="output precision (default: the input's)")
    p.add_argument("--two-row", action="store_true", help="NERSC output as 4D_SU3_GAUGE (two rows)")
    p.add_argument("--no-verify", action="store_true", help="do not check the input's checksums")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    return p


def output_format(out, in_fmt, to=None):
    if to:
        return to
    ext = os.path.splitext(out)[1].lower()
    if ext in _ILDG_EXT:
        return "ildg"
    if ext in _NERSC_EXT:
        return "nersc"
    return "nersc" if in_fmt == "ildg" else "ildg"


def _sums(h):
    c = h.checksums
    text = f"nersc {c['nersc']:08x}"
    if "scidac_suma" in c:
        text += f", scidac suma {c['scidac_suma']:x} sumb {c['scidac_sumb']:x}"
    return text


def main(argv):
    args = _parser().parse_args(argv)
    try:
        with warnings.catch_warnings():  # the SIMD fill of the file's lattice does not matter to a copy
            warnings.simplefilter("ignore", PerformanceWarning)
            return _convert(args)
    except OSError as e:  # missing file, permissions, full disk: one line, not a traceback
        where = f" {e.filename}" if getattr(e, "filename", None) else ""
        raise ConfigError(f"pygrid convert:{where}: {e.strerror or e}") from None


def _convert(args):
    for what, path in (("IN", args.input), ("OUT", args.output)):
        if "\0" in path:
            raise ConfigError(f"pygrid convert: {what} {path!r}: a file name cannot contain a NUL character")
    if os.path.abspath(args.input) == os.path.abspath(args.output):
        raise ConfigError("pygrid convert: IN and OUT are the same file")
    in_fmt = detect_format(args.input)
    out_fmt = output_format(args.output, in_fmt, args.to)
    progress = False if args.quiet else None
    U, h = read_gauge(args.input, verify=not args.no_verify, progress=progress)
    fp = h.floating_point or "IEEE64BIG"
    precision = args.precision or ("single" if "32" in fp else "double")
    dims = "x".join(map(str, h.dims))
    print(f"read    {args.input}: {in_fmt.upper()} {h.data_type} {fp} {dims}")
    checked = ", ".join(sorted(h.checks)) or "none"
    print(f"  verified        {checked}")
    print(f"  checksums       {_sums(h)}")
    if out_fmt == "nersc":
        w = write_nersc(args.output, U, two_row=args.two_row, precision=precision, progress=progress)
    else:
        w = write_ildg(args.output, U, precision=precision, progress=progress)
    plaq, ltr = w.checks["plaquette"][0], w.checks["link_trace"][0]
    print(f"  plaquette       {plaq:.15g}")
    print(f"  link trace      {ltr:.15g}")
    print(f"wrote   {args.output}: {out_fmt.upper()} {w.data_type} {w.floating_point} {dims}")
    print(f"  checksums       {_sums(w)}")
    return 0
