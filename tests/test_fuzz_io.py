"""Fuzzed gauge files: every damaged NERSC or ILDG/LIME file gives a PyGridError that names it.

Valid files written by pg.io.write_nersc / write_ildg on a 2x2x2x4 lattice are mutated
(truncated, bit-flipped, overwritten, spliced; NERSC header keys changed, removed or
garbled, dimensions rescaled, zero, negative or huge, non-UTF-8 values; LIME record
lengths absurd, magic, version, flags and types damaged, records dropped, duplicated or
swapped, XML values replaced), and random bytes are read too.  On every input
(``check_read``) the real reader must

* return, or raise a pygrid.PyGridError subclass whose message names the file: any other
  exception type (IndexError, struct.error, UnicodeDecodeError, OverflowError, numpy's
  errors, MemoryError, ...) fails the test;
* finish within fuzzing.TIME_LIMIT (a hang fails);
* leave a field passed as ``into=`` bit for bit unchanged when it fails;
* when it succeeds after a CRC check (SciDAC), give exactly the data of the undamaged file.

Example counts: fuzzing.examples (PYGRID_FUZZ_EXAMPLES for a longer run; docs/io.md).
"""
from __future__ import annotations

import contextlib
import functools
import io
import math
import os
import re
import shutil
import struct
import tempfile
import tracemalloc

import pytest
from fuzzing import fuzz
from hypothesis import strategies as st

import pygrid as pg
import pygrid.io  # noqa: F401
import pygrid.qcd  # noqa: F401
from pygrid.io import FormatError, TruncatedFileError

DIMS = (2, 2, 2, 4)
SITES = 2 * 2 * 2 * 4
MAGIC = 0x456789AB


# ---- the valid files ------------------------------------------------------------------------

class Files:
    """The field, the valid files' bytes by name, and each file's reference read."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.grid = pg.GridCartesian(list(DIMS))
        self.U = pg.qcd.random_gauge(self.grid, pg.ParallelRNG(self.grid, [3, 1, 4, 1]))
        writers = {
            "nersc-3x3-double-big": (pg.io.write_nersc, {}),
            "nersc-2row-single-little": (pg.io.write_nersc, dict(two_row=True, precision="single",
                                                                  endian="little")),
            "ildg-double": (pg.io.write_ildg, {}),
            "ildg-single": (pg.io.write_ildg, dict(precision="single")),
        }
        self.data, self.ref = {}, {}
        for name, (write, kw) in writers.items():
            p = os.path.join(tmp, name)
            write(p, self.U, **kw)
            with open(p, "rb") as f:
                self.data[name] = f.read()
            V, _ = pg.io.read_gauge(p)
            self.ref[name] = V.to_numpy().tobytes()
        self.dest = pg.qcd.random_gauge(self.grid, pg.ParallelRNG(self.grid, [2, 7, 1, 8]))
        self.path = os.path.join(tmp, "fuzzed")

    def names(self, fmt):
        return sorted(n for n in self.data if n.startswith(fmt))


@functools.cache
def valid_files():
    """Built once, on first use (the strategies draw from it too)."""
    return Files(tempfile.mkdtemp(prefix="pygrid-fuzz-io-"))


@pytest.fixture(scope="module")
def files():
    yield valid_files()
    shutil.rmtree(valid_files().tmp, ignore_errors=True)
    valid_files.cache_clear()


def buffer_bytes(U):
    with U.view(pg.CpuRead) as b:
        return b.tobytes()


READERS = {"nersc": lambda: pg.io.read_nersc, "ildg": lambda: pg.io.read_ildg,
           "gauge": lambda: pg.io.read_gauge}


def check_read(files, base, data, reader="gauge", mode="into", verify=True):
    """The contract on one input: PyGridError naming the file or success; ``into`` unchanged on
    failure; a CRC-checked success reads the undamaged data.  Returns the exception or None."""
    with open(files.path, "wb") as f:
        f.write(data)
    read = READERS[reader]()
    kw = {"into": files.dest} if mode == "into" else {"grid": files.grid} if mode == "grid" else {}
    before = buffer_bytes(files.dest)
    try:
        V, h = read(files.path, verify=verify, progress=False, **kw)
    except pg.PyGridError as e:
        assert files.path in str(e), f"the message does not name the file: {e}"
        assert buffer_bytes(files.dest) == before, "a failed read changed the into= field"
        return e
    assert V.grid.gdims == list(DIMS) or tuple(V.grid.gdims) == DIMS
    if mode == "into":
        assert V is files.dest
    assert base in files.ref, "random bytes were read as a gauge field"
    crc = "scidac_checksum" in h.checks or "scidac_checksuma" in h.checks
    if verify and crc:
        assert V.to_numpy().tobytes() == files.ref[base], "a damaged file passed its checks with other data"
    return None


# ---- mutations ------------------------------------------------------------------------------

def _byte_op(draw, data):
    n = len(data)
    op = draw(st.sampled_from(["truncate", "flip", "overwrite", "insert", "delete", "append", "zero"]))
    if op == "truncate":
        return data[:draw(st.integers(0, n))]
    if op == "flip":
        d = bytearray(data)
        for _ in range(draw(st.integers(1, 8))):
            if d:
                d[draw(st.integers(0, len(d) - 1))] ^= 1 << draw(st.integers(0, 7))
        return bytes(d)
    at = draw(st.integers(0, n))
    if op == "overwrite":
        blob = draw(st.binary(min_size=1, max_size=64))
        return data[:at] + blob + data[at + len(blob):]
    if op == "insert":
        return data[:at] + draw(st.binary(min_size=1, max_size=64)) + data[at:]
    if op == "delete":
        return data[:at] + data[at + draw(st.integers(1, 600)):]
    if op == "zero":
        k = draw(st.integers(1, 600))
        return data[:at] + b"\0" * len(data[at:at + k]) + data[at + k:]
    return data + draw(st.binary(min_size=1, max_size=700))


#: Header values: numbers of every form, empty, unicode, non-UTF-8 bytes.
VALUES = st.one_of(
    st.integers(-10, 10 ** 6).map(str),
    st.integers(-(10 ** 40), 10 ** 40).map(str),
    st.sampled_from(["", " ", "0", "-4", "4.0", "1e3", "0x10", "nan", "inf", "-inf", "1e999", "1e-999",
                     "0e999", "4_0", "+4", "\u0663", "deadbeef", "ffffffff", "-1", "IEEE64BIG",
                     "IEEE32LITTLE", "4D_SU3_GAUGE", "4D_SU3_GAUGE_3x3", "PERIODIC", "9" * 4000]),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(max_size=40),
).map(lambda s: s.encode("utf-8", "surrogatepass")) | st.binary(max_size=40)

NERSC_KEYS = ["HDR_VERSION", "DATATYPE", "STORAGE_FORMAT", "DIMENSION_1", "DIMENSION_2", "DIMENSION_3",
              "DIMENSION_4", "LINK_TRACE", "PLAQUETTE", "CHECKSUM", "SCIDAC_CHECKSUMA", "SCIDAC_CHECKSUMB",
              "FLOATING_POINT", "BOUNDARY_1", "SEQUENCE_NUMBER", "ENSEMBLE_ID"]


def _nersc_header_op(draw, data):
    end = data.find(b"END_HEADER")
    if end < 0:
        return _byte_op(draw, data)
    lines, rest = data[:end].split(b"\n"), data[end:]
    op = draw(st.sampled_from(["set", "drop", "dims", "line", "no_end", "crlf", "dup"]))
    keyed = [i for i, line in enumerate(lines) if b"=" in line]
    if op in ("set", "drop", "dup", "dims") and not keyed:
        return _byte_op(draw, data)
    if op == "set":
        key = draw(st.sampled_from(NERSC_KEYS).map(str.encode) | st.binary(min_size=1, max_size=20))
        line = key + draw(st.sampled_from([b" = ", b"=", b"  =  ", b"\t=\t"])) + draw(VALUES)
        i = draw(st.sampled_from(keyed))
        if draw(st.booleans()):
            lines[i] = line
        else:
            lines.insert(i, line)
    elif op == "drop":
        del lines[draw(st.sampled_from(keyed))]
    elif op == "dup":
        i = draw(st.sampled_from(keyed))
        lines.insert(draw(st.integers(1, len(lines))), lines[i])
    elif op == "dims":
        k = draw(st.integers(1, 4))
        new = draw(st.integers(-5, 64) | st.integers(-(2 ** 70), 2 ** 70)
                   | st.sampled_from([2 ** 62 + 2, 2 ** 64]))
        lines = [b"DIMENSION_%d = %d" % (k, new) if line.startswith(b"DIMENSION_%d" % k) else line
                 for line in lines]
    elif op == "line":
        lines.insert(draw(st.integers(1, len(lines))), draw(st.binary(max_size=80).map(
            lambda b: b.replace(b"\n", b""))))
    elif op == "no_end":
        rest = rest.replace(b"END_HEADER", draw(st.sampled_from([b"", b"END_HEADR", b"BEGIN_HEADER"])), 1)
    elif op == "crlf":
        lines = [line + b"\r" for line in lines]
    return b"\n".join(lines) + rest


def _lime_walk(data):
    """[(header offset, type, length)] of the records of a (possibly damaged) LIME byte string."""
    out, pos = [], 0
    while pos + 144 <= len(data):
        magic, _, _, length = struct.unpack(">IHHQ", data[pos:pos + 16])
        if magic != MAGIC:
            break
        out.append((pos, data[pos + 16:pos + 144].rstrip(b"\0"), length))
        pos += 144 + length + (-length) % 8
    return out


def _lime_record(rtype, flags, body):
    return struct.pack(">IHHQ", MAGIC, 1, flags, len(body)) + rtype.ljust(128, b"\0")[:128] + body + \
        b"\0" * ((-len(body)) % 8)


def _lime_split(data):
    """[(type, flags, body)] when data is a clean sequence of records, else None."""
    recs, pos = [], 0
    while pos < len(data):
        if pos + 144 > len(data):
            return None
        magic, version, flags, length = struct.unpack(">IHHQ", data[pos:pos + 16])
        if magic != MAGIC or version != 1 or pos + 144 + length > len(data):
            return None
        recs.append((data[pos + 16:pos + 144].rstrip(b"\0"), flags, data[pos + 144:pos + 144 + length]))
        pos += 144 + length + (-length) % 8
    return recs


XML_TAGS = ["lx", "ly", "lz", "lt", "precision", "field", "suma", "sumb", "plaq", "linktr", "dims",
            "datatype", "datacount", "colors"]
LIME_TYPES = [b"ildg-format", b"ildg-binary-data", b"scidac-binary-data", b"scidac-checksum",
              b"scidac-private-file-xml", b"scidac-private-record-xml", b"scidac-record-xml",
              b"scidac-file-xml", b"ildg-data-lfn", b"", b"x" * 128]


def _lime_op(draw, data):
    recs = _lime_walk(data)
    op = draw(st.sampled_from(["length", "magic", "version", "flags", "type", "drop", "dup", "swap", "xml",
                               "dims", "bloat"]))
    if not recs:
        return _byte_op(draw, data)
    pos, _, length = draw(st.sampled_from(recs))
    d = bytearray(data)
    if op == "length":
        new = draw(st.sampled_from([0, 1, 7, 8, 2 ** 63, 2 ** 64 - 1, length + 8, max(length - 8, 0)])
                   | st.integers(0, 2 ** 64 - 1) | st.integers(max(length - 600, 0), length + 600))
        d[pos + 8:pos + 16] = struct.pack(">Q", new)
        return bytes(d)
    if op == "magic":
        d[pos:pos + 4] = struct.pack(">I", draw(st.integers(0, 2 ** 32 - 1)))
        return bytes(d)
    if op == "version":
        d[pos + 4:pos + 6] = struct.pack(">H", draw(st.integers(0, 2 ** 16 - 1)))
        return bytes(d)
    if op == "flags":
        d[pos + 6:pos + 8] = struct.pack(">H", draw(st.integers(0, 2 ** 16 - 1)))
        return bytes(d)
    if op == "type":
        t = draw(st.sampled_from(LIME_TYPES) | st.binary(max_size=128))
        d[pos + 16:pos + 144] = t.ljust(128, b"\0")[:128]
        return bytes(d)
    split = _lime_split(data)
    if split is None:
        return _byte_op(draw, data)
    i = draw(st.integers(0, len(split) - 1))
    if op == "drop":
        del split[i]
    elif op == "dup":
        split.insert(draw(st.integers(0, len(split))), split[i])
    elif op == "swap":
        j = draw(st.integers(0, len(split) - 1))
        split[i], split[j] = split[j], split[i]
    elif op == "bloat":  # a big record of unterminated or nested tags: costs linear time to reject
        unit = draw(st.sampled_from([b"<lx ", b"<a:", b"<", b"<lx>", b"<field x='", b"<<>"]))
        split[i] = (split[i][0], split[i][1], unit * draw(st.integers(1, 100_000)))
    else:
        rtype, flags, body = split[i]
        if op == "dims":
            tags = ["lx", "ly", "lz", "lt", "dims"]
            value = str(draw(st.integers(-4, 64) | st.integers(-(2 ** 70), 2 ** 70))).encode()
        else:
            tags = XML_TAGS
            value = draw(VALUES)
        tag = draw(st.sampled_from(tags)).encode()
        body = re.sub(rb"(<" + tag + rb">)[^<]*(<)", lambda m: m.group(1) + value + m.group(2), body, count=1)
        split[i] = (rtype, flags, body)
    return b"".join(_lime_record(*r) for r in split)


@st.composite
def damaged(draw, fmt):
    """(base name, damaged bytes) of format ``fmt`` ('nersc' or 'ildg')."""
    base = draw(st.sampled_from(valid_files().names(fmt)))
    data = valid_files().data[base]
    for _ in range(draw(st.integers(1, 3))):
        structured = draw(st.booleans())
        if structured:
            data = _nersc_header_op(draw, data) if fmt == "nersc" else _lime_op(draw, data)
        else:
            data = _byte_op(draw, data)
    return base, data


HOW = st.tuples(st.sampled_from(["into", "new", "grid"]), st.booleans(), st.booleans())


# ---- the tests ------------------------------------------------------------------------------

def test_valid_files_read_back_exactly(files):
    for name, data in files.data.items():
        for mode in ("into", "new", "grid"):
            assert check_read(files, name, data, mode=mode) is None, name
    # the double-precision 3x3 files hold the field itself
    assert files.ref["nersc-3x3-double-big"] == files.U.to_numpy().tobytes()
    assert files.ref["ildg-double"] == files.U.to_numpy().tobytes()


@pytest.mark.parametrize("fmt", ["nersc", "ildg"])
def test_damaged_files(files, fmt):
    def body(x):
        (base, data), (mode, verify, sniff) = x
        check_read(files, base, data, reader="gauge" if sniff else fmt, mode=mode, verify=verify)

    fuzz(body, st.tuples(damaged(fmt), HOW), 800, f"damaged {fmt} files")


def test_random_bytes(files):
    prefixes = st.sampled_from([b"", struct.pack(">I", MAGIC), struct.pack(">IHH", MAGIC, 1, 0x8000),
                                b"BEGIN_HEADER\n", b"BEGIN_HEADER\nDIMENSION_1 = 2\n", b"\n"])

    def body(x):
        (prefix, data, fmt), (mode, verify, _) = x
        check_read(files, "-", prefix + data, reader=fmt, mode=mode, verify=verify)

    fuzz(body, st.tuples(st.tuples(prefixes, st.binary(max_size=4096), st.sampled_from(list(READERS))), HOW),
         400, "random bytes")


def _set_nersc(data, key, value):
    """The NERSC file with header key ``key`` set to ``value`` (bytes), added if absent."""
    head, rest = data.split(b"END_HEADER", 1)
    lines = head.split(b"\n")
    for k, line in enumerate(lines):
        if line.split(b"=")[0].strip() == key:
            lines[k] = key + b" = " + value
            break
    else:
        lines.insert(1, key + b" = " + value)
    return b"\n".join(lines) + b"END_HEADER" + rest


def _set_xml(data, tag, value):
    """The LIME file with the first <tag> of every XML record set to ``value``, lengths kept consistent."""
    out = []
    for rtype, flags, body in _lime_split(data):
        if rtype != b"ildg-binary-data":
            body = re.sub(rb"(<" + tag + rb">)[^<]*(<)", lambda m: m.group(1) + value + m.group(2), body,
                          count=1)
        out.append((rtype, flags, body))
    return b"".join(_lime_record(*r) for r in out)


@pytest.mark.parametrize("fmt", ["nersc", "ildg"])
def test_header_values(files, fmt):
    """One header value (NERSC key, or XML tag of the LIME records) replaced by anything: a number of
    any form or size, empty, unicode, bytes that are not UTF-8."""
    keys = NERSC_KEYS if fmt == "nersc" else XML_TAGS

    def body(x):
        base, key, value, verify = x
        setter = _set_nersc if fmt == "nersc" else _set_xml
        check_read(files, base, setter(files.data[base], key.encode(), value), reader=fmt, verify=verify)

    big = files.names(fmt)[0]
    plaq, ltr = ("PLAQUETTE", "LINK_TRACE") if fmt == "nersc" else ("plaq", "linktr")
    explicit = [(big, plaq, v, True) for v in (b"1e999", b"0e999", b"-inf")]
    explicit += [(big, ltr, b"1e" + b"9" * 5000, True)]
    fuzz(body, st.tuples(st.sampled_from(files.names(fmt)), st.sampled_from(keys), VALUES, st.booleans()),
         400, f"{fmt} header values", explicit=explicit)


def _nersc_with_dims(data, dims):
    for k, d in enumerate(dims):
        data = re.sub(rb"DIMENSION_%d = \d+" % (k + 1), b"DIMENSION_%d = %d" % (k + 1, d), data)
    return data


def _ildg_with_dims(data, dims):
    recs = _lime_split(data)
    out = []
    for rtype, flags, body in recs:
        if rtype == b"ildg-format":
            for tag, d in zip((b"lx", b"ly", b"lz", b"lt"), dims):
                body = re.sub(rb"<" + tag + rb">\d+<", b"<%s>%d<" % (tag, d), body)
        out.append((rtype, flags, body))
    return b"".join(_lime_record(*r) for r in out)


OTHER_DIMS = st.tuples(*[st.integers(1, 12) | st.integers(1, 2 ** 80) for _ in range(4)]).filter(
    lambda d: math.prod(d) != SITES)


@pytest.mark.parametrize("fmt", ["nersc", "ildg"])
def test_dimensions_that_disagree_with_the_file(files, fmt):
    """A header (ildg-format) whose dimensions do not fit the payload: a FormatError, never
    'truncated', naming the dimensions and both sizes; nothing of the declared size is allocated."""
    def body(x):
        base, dims, mode = x
        data = (_nersc_with_dims if fmt == "nersc" else _ildg_with_dims)(files.data[base], dims)
        tracemalloc.start()
        try:
            e = check_read(files, base, data, reader=fmt, mode=mode)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 32 * 2 ** 20, f"reading a 20 kB file with dimensions {dims} allocated {peak} bytes"
        assert isinstance(e, FormatError) and not isinstance(e, TruncatedFileError), e
        text = str(e)
        assert "x".join(map(str, dims)) in text or "digits)" in text, text
        payload = "18432" if "double" in base else "9216" if "ildg" in base else "6144"
        assert payload in text, text
        assert "truncated" not in text.lower(), text

    # an int64 product of these dimensions wraps round to the lattice's 32 sites
    wrap = [(files.names(fmt)[0], dims, "new") for dims in ((2 ** 62 + 2, 2, 2, 4), (2 ** 64, 2, 2, 4))]
    fuzz(body, st.tuples(st.sampled_from(files.names(fmt)), OTHER_DIMS, st.sampled_from(["new", "into"])),
         120, f"{fmt} dimensions against the file's size", explicit=wrap)


def test_truncated_payload(files):
    """A NERSC payload cut short: TruncatedFileError inside a site, a dimension mismatch at a
    site boundary; both name the sizes."""
    def body(x):
        base, cut = x
        data = files.data[base]
        start = data.index(b"END_HEADER\n") + len(b"END_HEADER\n")
        keep = start + (len(data) - start) * cut // 1000
        e = check_read(files, base, data[:keep])
        assert isinstance(e, FormatError), e
        have = keep - start
        assert f"holds {have} after its header" in str(e), str(e)
        site = 576 if "3x3" in base else 192
        # sizes of the same lattice in another DATATYPE or FLOATING_POINT: a header mismatch, not a cut
        other = {SITES * 4 * rows * 6 * nbytes for rows in (2, 3) for nbytes in (4, 8)}
        assert isinstance(e, TruncatedFileError) == (have == 0 or (have % site != 0 and have not in other)), e

    fuzz(body, st.tuples(st.sampled_from(files.names("nersc")), st.integers(0, 999)), 120,
         "truncated NERSC payloads")


def test_convert_writes_nothing_from_a_damaged_file(files, tmp_path_factory):
    """`pygrid convert` on a damaged input: status 2, one line on stderr, no output file, no temporary
    file left behind."""
    from pygrid.cli import main

    out_dir = str(tmp_path_factory.mktemp("convert-out"))

    def body(x):
        fmt_case, _ = x
        base, data = fmt_case
        with open(files.path, "wb") as f:
            f.write(data)
        out = os.path.join(out_dir, "out.lime" if base.startswith("nersc") else "out.nersc")
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            status = main(["convert", files.path, out, "--quiet"])
        if status == 0:
            os.unlink(out)
        else:
            assert status == 2, err.getvalue()
            lines = err.getvalue().strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("pygrid: error: "), err.getvalue()
            assert not os.path.exists(out)
        assert os.listdir(out_dir) == [], os.listdir(out_dir)

    fuzz(body, st.tuples(st.one_of(damaged("nersc"), damaged("ildg")), st.none()), 50,
         "pygrid convert on damaged files")
