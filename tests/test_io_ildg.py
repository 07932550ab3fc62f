"""ILDG / SciDAC gauge configurations in LIME: round trips, files built byte by byte from the
LIME/ILDG/SciDAC definitions, the structure of what we write, every corruption, atomic writes."""
import errno
import os
import struct

import numpy as np
import pytest
from numpy_refs import link_trace_ref, plaquette_ref, scidac_ref

import pygrid as pg
import pygrid.io  # noqa: F401
import pygrid.io.atomic
import pygrid.qcd  # noqa: F401
from pygrid.io import ChecksumError, FormatError, TruncatedFileError

MAGIC = 0x456789AB
LAYOUTS = [((4, 4, 4, 4), None), ((2, 2, 2, 4), None), ((4, 4, 4, 8), (1, 1, 2, 2))]


@pytest.fixture(scope="module", params=LAYOUTS, ids=["4^4", "2^3x4", "4^3x8-simd-t"])
def hot(request):
    dims, layout = request.param
    grid = pg.GridCartesian(list(dims), simd_layout=layout)
    return grid, pg.qcd.random_gauge(grid, pg.ParallelRNG(grid, [9, 10, 11, 12]))


@pytest.fixture(scope="module")
def hot44():
    grid = pg.GridCartesian([4, 4, 4, 4])
    return grid, pg.qcd.random_gauge(grid, pg.ParallelRNG(grid, [1, 2, 3, 4]))


# ---- independent references --------------------------------------------------------------



def binary_payload(Un, bits):
    """ILDG binary data by the definition: big-endian, x fastest, mu, 3x3 row-major, (re, im)."""
    a = Un.transpose(3, 2, 1, 0, 4, 5, 6)
    vals = []
    for z in a.reshape(-1):
        vals += [float(z.real), float(z.imag)]
    return struct.pack((">%dd" if bits == 64 else ">%df") % len(vals), *vals)



def lime_record(rtype, data, mb, me):
    """One LIME record: 144-byte big-endian header (magic, version 1, MB/ME flags, length, 128-byte type)
    then the data padded with zeros to a multiple of 8."""
    if isinstance(data, str):
        data = data.encode()
    flags = (0x8000 if mb else 0) | (0x4000 if me else 0)
    head = struct.pack(">IHHQ", MAGIC, 1, flags, len(data)) + rtype.encode().ljust(128, b"\0")
    assert len(head) == 144
    return head + data + b"\0" * ((8 - len(data) % 8) % 8)


def ildg_format_xml(dims, bits, field="su3gauge"):
    lx, ly, lz, lt = dims
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<ildgFormat xmlns="http://www.lqcd.org/ildg">'
            f"<version>1.0</version><field>{field}</field><precision>{bits}</precision>"
            f"<lx>{lx}</lx><ly>{ly}</ly><lz>{lz}</lz><lt>{lt}</lt></ildgFormat>")


def build_ildg(path, Un, bits=64, field="su3gauge", suma=None, sumb=None, plaq=None, dims=None,
               with_ildg_format=True, mutate=None):
    payload = binary_payload(Un, bits)
    a, b = scidac_ref(payload, 4 * 9 * 2 * bits // 8)
    a, b = (a if suma is None else suma), (b if sumb is None else sumb)
    plaq = plaquette_ref(Un) if plaq is None else plaq
    dims = Un.shape[:4] if dims is None else dims
    info = (f"<?xml version=\"1.0\"?><usqcdInfo><version>1.0</version><plaq>{plaq:.10f}</plaq>"
            f"<linktr>{link_trace_ref(Un):.10f}</linktr><info>hand made</info></usqcdInfo>")
    letter = "D" if bits == 64 else "F"
    out = lime_record("scidac-private-file-xml",
                      f"<?xml version=\"1.0\"?><scidacFile><version>1.1</version><spacetime>4</spacetime>"
                      f"<dims>{' '.join(map(str, dims))} </dims><volfmt>0</volfmt></scidacFile>", True, False)
    out += lime_record("scidac-file-xml", info, False, True)
    out += lime_record(
        "scidac-private-record-xml",
        f'<?xml version="1.0"?><scidacRecord><version>1.1</version><date>today</date>'
        f"<recordtype>0</recordtype><datatype>USQCD_{letter}3_ColorMatrix</datatype>"
        f"<precision>{letter}</precision><colors>3</colors><spins>4</spins>"
        f"<typesize>{18 * bits // 8}</typesize><datacount>4</datacount></scidacRecord>",
        True,
        False,
    )
    out += lime_record("scidac-record-xml", info, False, False)
    if with_ildg_format:
        out += lime_record("ildg-format", ildg_format_xml(dims, bits, field), False, False)
    out += lime_record("ildg-data-lfn", "lfn://x", False, False)  # 7 bytes: exercises the padding
    out += lime_record(
        "ildg-binary-data" if with_ildg_format else "scidac-binary-data", payload, False, False
    )
    out += lime_record(
        "scidac-checksum",
        f'<?xml version="1.0"?><scidacChecksum><version>1.0</version>'
        f"<suma>{a:x}</suma><sumb>{b:x}</sumb></scidacChecksum>",
        False,
        True,
    )
    if mutate:
        out = mutate(bytearray(out), out.index(payload))
    with open(path, "wb") as f:
        f.write(bytes(out))
    return payload


def parse_lime(data):
    """Independent LIME walk: [(type, flags, length, data)]."""
    recs, pos = [], 0
    while pos < len(data):
        magic, version, flags, length = struct.unpack(">IHHQ", data[pos:pos + 16])
        assert magic == MAGIC and version == 1
        rtype = data[pos + 16:pos + 144].rstrip(b"\0").decode()
        body = data[pos + 144:pos + 144 + length]
        recs.append((rtype, flags, length, body))
        pos += 144 + length + (-length) % 8
        assert pos <= len(data)
    assert pos == len(data)
    return recs


# ---- round trips -------------------------------------------------------------------------

@pytest.mark.parametrize("precision", ["double", "single"])
def test_round_trip(tmp_path, hot, precision):
    grid, U = hot
    p = tmp_path / "conf.lime"
    w = pg.io.write_ildg(p, U, precision=precision)
    V, h = pg.io.read_ildg(p)
    a, b = U.to_numpy(), V.to_numpy()
    if precision == "double":
        assert np.array_equal(a, b)
    else:
        assert np.abs(a - b).max() < 2e-7
    assert set(h.checks) == {"scidac_checksum", "plaquette", "link_trace"}
    assert h.checksums == w.checksums
    W = pg.LatticeGaugeField(grid, precision="single")
    out, _ = pg.io.read_ildg(p, into=W)
    assert out is W and np.abs(W.to_numpy() - a).max() < 2e-7


def test_nersc_ildg_nersc(tmp_path, hot44):
    grid, U = hot44
    pg.io.write_nersc(tmp_path / "a", U)
    V, _ = pg.io.read_gauge(tmp_path / "a")
    pg.io.write_ildg(tmp_path / "b", V)
    W, h = pg.io.read_gauge(tmp_path / "b")
    assert h.format == "ildg" and np.array_equal(W.to_numpy(), U.to_numpy())


# ---- what we write, checked against the definitions ---------------------------------------------

@pytest.mark.parametrize("bits", [64, 32])
def test_written_structure(tmp_path, hot44, bits):
    grid, U = hot44
    p = tmp_path / "s.lime"
    pg.io.write_ildg(p, U, precision="double" if bits == 64 else "single", lfn="lfn://ours")
    recs = parse_lime(p.read_bytes())
    types = [r[0] for r in recs]
    assert types == ["scidac-private-file-xml", "scidac-file-xml", "scidac-private-record-xml",
                     "scidac-record-xml", "ildg-format", "ildg-data-lfn", "ildg-binary-data",
                     "scidac-checksum"]
    flags = [r[1] for r in recs]
    assert flags == [0x8000, 0x4000, 0x8000, 0, 0, 0, 0, 0x4000]
    fmt = recs[4][3].decode()
    for tag, val in [("field", "su3gauge"), ("precision", str(bits)), ("lx", "4"), ("lt", "4")]:
        assert f"<{tag}>{val}</{tag}>" in fmt
    payload = recs[6][3]
    assert payload == binary_payload(U.to_numpy(), bits)
    a, b = scidac_ref(payload, 4 * 9 * 2 * bits // 8)
    ck = recs[7][3].decode()
    assert f"<suma>{a:x}</suma>" in ck and f"<sumb>{b:x}</sumb>" in ck
    assert recs[5][3] == b"lfn://ours"


# ---- files built byte by byte -------------------------------------------------------------------

@pytest.mark.parametrize("bits", [64, 32])
def test_reads_file_built_from_definition(tmp_path, hot, bits):
    grid, U = hot
    Un = U.to_numpy()
    p = tmp_path / "hand.lime"
    build_ildg(p, Un, bits)
    V, h = pg.io.read_ildg(p)
    assert np.abs(V.to_numpy() - Un).max() < (1e-15 if bits == 64 else 2e-7)
    assert set(h.checks) == {"scidac_checksum", "plaquette", "link_trace"}
    assert h["ildg-data-lfn"] == "lfn://x"
    assert [r.type for r in h.records][-2:] == ["ildg-binary-data", "scidac-checksum"]


def test_reads_plain_scidac_file(tmp_path, hot44):
    """No ildg-format record: dimensions and precision from the SciDAC private records."""
    grid, U = hot44
    p = tmp_path / "scidac.lime"
    build_ildg(p, U.to_numpy(), 32, with_ildg_format=False)
    V, h = pg.io.read_ildg(p)
    assert np.abs(V.to_numpy() - U.to_numpy()).max() < 2e-7
    assert h.floating_point == "IEEE32BIG"


# ---- corruption ---------------------------------------------------------------------------------

def _flip(d, off):
    d[off + 999] ^= 0x10
    return d


CASES = [
    ("flipped_byte", ChecksumError, "scidac_checksum", dict(mutate=_flip)),
    ("wrong_checksum", ChecksumError, "scidac_checksum", dict(suma=0x1234)),
    ("wrong_plaquette", ChecksumError, "plaquette", dict(plaq=0.5)),
    ("truncated", TruncatedFileError, None, dict(mutate=lambda d, off: d[: off + 5000])),
    ("truncated_in_header", TruncatedFileError, None, dict(mutate=lambda d, off: d[: off - 100])),
    ("unknown_data_type", FormatError, None, dict(field="u1gauge")),
    ("bad_magic", FormatError, None, dict(mutate=lambda d, off: b"\0\0\0\0" + d[4:])),
    (
        "bad_record_magic",
        FormatError,
        None,
        dict(mutate=lambda d, off: d[: off - 144] + b"XXXX" + d[off - 140 :]),
    ),
    ("wrong_binary_size", FormatError, None, dict(dims=(4, 4, 4, 2))),
]


@pytest.mark.parametrize("name,exc,check,kw", CASES, ids=[c[0] for c in CASES])
def test_corruption_raises_and_leaves_destination_unchanged(tmp_path, hot44, name, exc, check, kw):
    grid, U = hot44
    p = tmp_path / f"{name}.lime"
    build_ildg(p, U.to_numpy(), 64, **kw)
    dest = pg.qcd.unit_gauge(grid)
    before = dest.to_numpy()
    with pytest.raises(exc) as e:
        pg.io.read_ildg(p, into=dest)
    assert isinstance(e.value, pg.PyGridError)
    if check:
        assert e.value.check == check and e.value.expected and e.value.found
    assert np.array_equal(dest.to_numpy(), before)


def test_wrong_dimensions_for_grid(tmp_path, hot44):
    grid, U = hot44
    p = tmp_path / "d.lime"
    pg.io.write_ildg(p, U)
    dest = pg.qcd.unit_gauge(pg.GridCartesian([4, 4, 4, 8]))
    before = dest.to_numpy()
    with pytest.raises(FormatError, match="dimensions do not match"):
        pg.io.read_ildg(p, into=dest)
    assert np.array_equal(dest.to_numpy(), before)


def test_missing_checksum_record_warns(tmp_path, hot44):
    grid, U = hot44
    p = tmp_path / "nock.lime"
    build_ildg(p, U.to_numpy(), 64)
    recs = parse_lime(p.read_bytes())
    p.write_bytes(b"".join(lime_record(t, body, f & 0x8000, t == "ildg-binary-data")
                           for t, f, _, body in recs if t != "scidac-checksum"))
    with pytest.warns(UserWarning, match="no scidac-checksum"):
        V, h = pg.io.read_ildg(p)
    assert np.array_equal(V.to_numpy(), U.to_numpy())


# ---- atomic writes -----------------------------------------------------------------------

def test_interrupted_write_leaves_old_file(tmp_path, hot44, monkeypatch):
    grid, U = hot44
    target = tmp_path / "conf.lime"
    pg.io.write_ildg(target, pg.qcd.unit_gauge(grid))
    old = target.read_bytes()
    real = pygrid.io.atomic._open_stream

    class Failing:
        def __init__(self, inner):
            self.inner, self.n = inner, 0

        def write(self, data):
            self.n += len(memoryview(data).cast("B"))
            if self.n > 50000:
                raise OSError(errno.EIO, "I/O error (injected)")
            return self.inner.write(data)

        def __getattr__(self, name):
            return getattr(self.inner, name)

    monkeypatch.setattr(pygrid.io.atomic, "_open_stream", lambda fd: Failing(real(fd)))
    with pytest.raises(OSError):
        pg.io.write_ildg(target, U)
    assert target.read_bytes() == old
    assert os.listdir(tmp_path) == ["conf.lime"]
