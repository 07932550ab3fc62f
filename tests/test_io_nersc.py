"""NERSC gauge configuration files: round trips, files built byte by byte from the
format definition, every corruption, atomic writes, the header Grid's reader accepts,
and `pygrid convert`."""
import errno
import os
import struct

import numpy as np
import pytest
from io_faults import FullDisk
from numpy_refs import link_trace_ref, plaquette_ref, scidac_ref

import pygrid as pg
import pygrid.io  # noqa: F401
import pygrid.io.atomic
import pygrid.qcd  # noqa: F401
from pygrid.io import ChecksumError, FormatError, TruncatedFileError

LAYOUTS = [((4, 4, 4, 4), None), ((2, 2, 2, 4), None), ((4, 4, 4, 8), (1, 1, 2, 2))]


@pytest.fixture(scope="module", params=LAYOUTS, ids=["4^4", "2^3x4", "4^3x8-simd-t"])
def hot(request):
    dims, layout = request.param
    grid = pg.GridCartesian(list(dims), simd_layout=layout)
    U = pg.qcd.random_gauge(grid, pg.ParallelRNG(grid, [5, 6, 7, 8]))
    return grid, U


@pytest.fixture(scope="module")
def hot44():
    grid = pg.GridCartesian([4, 4, 4, 4])
    return grid, pg.qcd.random_gauge(grid, pg.ParallelRNG(grid, [1, 2, 3, 4]))


# ---- independent references (numpy and struct; nothing from pygrid.io) -----------



def file_order_reals(Un, rows):
    """[x,y,z,t,mu,a,b] complex -> flat list of reals in file order (x fastest, mu, row-major, re/im)."""
    a = Un.transpose(3, 2, 1, 0, 4, 5, 6)[..., :rows, :]
    out = np.empty(a.shape + (2,))
    out[..., 0], out[..., 1] = a.real, a.imag
    return [float(v) for v in out.reshape(-1)]


def pack_reals(vals, fp):
    code = {"IEEE64BIG": ">%dd", "IEEE32BIG": ">%df", "IEEE64": "<%dd", "IEEE64LITTLE": "<%dd",
            "IEEE32": "<%df", "IEEE32LITTLE": "<%df"}[fp]
    return struct.pack(code % len(vals), *vals)


def nersc_sum_ref(payload, big):
    n = len(payload) // 4
    return sum(struct.unpack(f"{'>' if big else '<'}{n}I", payload)) % 2 ** 32



def messy_header(dims, datatype, fp, checksum, plaq, ltr):
    """A header with real-world spacing: padded keys, two spaces before '=', empty values, dates with
    spaces."""
    lines = ["BEGIN_HEADER", "HDR_VERSION = 1.0", f"DATATYPE = {datatype}", "STORAGE_FORMAT = 1.0"]
    lines += [f"DIMENSION_{i + 1}  =  {d}" for i, d in enumerate(dims)]
    lines += [
        f"CHECKSUM   = {checksum:x}",
        f"LINK_TRACE =   {ltr:.10f}",
        f"PLAQUETTE  = {plaq:.10f}",
        "BOUNDARY_1 = PERIODIC",
        "BOUNDARY_2 = PERIODIC",
        "BOUNDARY_3 = PERIODIC",
        "BOUNDARY_4 = PERIODIC",
        "ENSEMBLE_ID = ",
        "ENSEMBLE_LABEL =",
        "SEQUENCE_NUMBER = 42",
        "CREATOR = some physicist",
        "CREATION_DATE = Tue Mar 12 10:22:01 2019 GMT",
        "ARCHIVE_DATE    = ",
        f"FLOATING_POINT = {fp}",
        "END_HEADER",
    ]
    return ("\n".join(lines) + "\n").encode()


def build_nersc(path, Un, datatype="4D_SU3_GAUGE_3x3", fp="IEEE64BIG", **override):
    rows = 2 if datatype == "4D_SU3_GAUGE" else 3
    payload = pack_reals(file_order_reals(Un, rows), fp)
    big = fp.endswith("BIG")
    args = dict(dims=Un.shape[:4], datatype=datatype, fp=fp, checksum=nersc_sum_ref(payload, big),
                plaq=plaquette_ref(Un), ltr=link_trace_ref(Un))
    args.update(override)
    data = messy_header(**args) + payload
    with open(path, "wb") as f:
        f.write(data)
    return data, len(data) - len(payload)


def tol(fp):
    return 1e-14 if "64" in fp else 2e-7


# ---- round trips -------------------------------------------------------------------

@pytest.mark.parametrize("two_row", [False, True], ids=["3x3", "two-row"])
@pytest.mark.parametrize("precision", ["double", "single"])
@pytest.mark.parametrize("endian", ["big", "little"])
def test_round_trip(tmp_path, hot, two_row, precision, endian):
    grid, U = hot
    p = tmp_path / "conf.nersc"
    w = pg.io.write_nersc(p, U, two_row=two_row, precision=precision, endian=endian)
    V, h = pg.io.read_nersc(p)
    assert V.grid.gdims == grid.gdims
    a, b = U.to_numpy(), V.to_numpy()
    if precision == "double" and not two_row:
        assert np.array_equal(a, b)
    else:
        assert np.abs(a - b).max() < (1e-14 if precision == "double" else 2e-7)
    assert set(h.checks) >= {"checksum", "plaquette", "link_trace"}
    assert h.checksums["nersc"] == w.checksums["nersc"]
    assert h["DATATYPE"] == ("4D_SU3_GAUGE" if two_row else "4D_SU3_GAUGE_3x3")
    # onto a given grid, and into an existing field
    V2, _ = pg.io.read_nersc(p, grid=grid)
    W = pg.LatticeGaugeField(grid)
    out, _ = pg.io.read_nersc(p, into=W)
    assert out is W and np.array_equal(W.to_numpy(), V2.to_numpy())


def test_written_file_matches_definition(tmp_path, hot44):
    """Our writer's bytes are exactly the format definition's (header aside)."""
    grid, U = hot44
    Un = U.to_numpy()
    for two_row, fp, prec, endian in [
        (False, "IEEE64BIG", "double", "big"),
        (True, "IEEE32BIG", "single", "big"),
        (False, "IEEE64", "double", "little"),
    ]:
        p = tmp_path / "w.nersc"
        h = pg.io.write_nersc(p, U, two_row=two_row, precision=prec, endian=endian)
        data = p.read_bytes()
        payload = pack_reals(file_order_reals(Un, 2 if two_row else 3), fp)
        assert data.endswith(payload) and data[:-len(payload)].endswith(b"END_HEADER\n")
        assert h["CHECKSUM"] == f"{nersc_sum_ref(payload, endian == 'big'):08x}"
        assert (int(h["SCIDAC_CHECKSUMA"], 16), int(h["SCIDAC_CHECKSUMB"], 16)) == \
            scidac_ref(payload, 4 * (2 if two_row else 3) * 6 * (8 if prec == "double" else 4))
        assert float(h["PLAQUETTE"]) == pytest.approx(
            plaquette_ref(Un), abs=1e-7 if prec == "single" else 1e-13
        )
        assert h["FLOATING_POINT"] == fp


def test_header_accepted_by_grids_reader_rules(tmp_path, hot44):
    """Grid's NerscIO::readHeader: first line BEGIN_HEADER, 'KEY = value' with all whitespace removed,
    stol on DIMENSION_n and SEQUENCE_NUMBER, stod on LINK_TRACE/PLAQUETTE, stoul base 16 on CHECKSUM,
    FLOATING_POINT one of IEEE32BIG IEEE32 IEEE64BIG IEEE64, DATATYPE 4D_SU3_GAUGE[_3x3]."""
    grid, U = hot44
    p = tmp_path / "g.nersc"
    pg.io.write_nersc(p, U)
    text = p.read_bytes().split(b"END_HEADER")[0].decode()
    lines = text.splitlines()
    assert lines[0] == "BEGIN_HEADER"
    fields = {}
    for line in lines[1:]:
        k, v = line.split("=", 1)
        fields["".join(k.split())] = "".join(v.split())
    for i in range(4):
        assert int(fields[f"DIMENSION_{i + 1}"]) == grid.gdims[i]
        assert fields[f"BOUNDARY_{i + 1}"] == "PERIODIC"
    int(fields["SEQUENCE_NUMBER"])
    float(fields["LINK_TRACE"]), float(fields["PLAQUETTE"])
    int(fields["CHECKSUM"], 16)
    assert fields["FLOATING_POINT"] in ("IEEE32BIG", "IEEE32", "IEEE64BIG", "IEEE64")
    assert fields["DATATYPE"] in ("4D_SU3_GAUGE", "4D_SU3_GAUGE_3x3")
    for k in ("HDR_VERSION", "STORAGE_FORMAT", "ENSEMBLE_ID", "ENSEMBLE_LABEL", "CREATOR", "CREATOR_HARDWARE",
              "CREATION_DATE", "ARCHIVE_DATE"):
        assert k in fields


# ---- files built byte by byte ------------------------------------------------------------

@pytest.mark.parametrize("datatype,fp", [("4D_SU3_GAUGE_3x3", "IEEE64BIG"), ("4D_SU3_GAUGE", "IEEE64BIG"),
                                         ("4D_SU3_GAUGE_3x3", "IEEE32BIG"), ("4D_SU3_GAUGE", "IEEE32LITTLE"),
                                         ("4D_SU3_GAUGE_3x3", "IEEE64LITTLE"), ("4D_SU3_GAUGE", "IEEE64")])
def test_reads_file_built_from_definition(tmp_path, hot, datatype, fp):
    grid, U = hot
    Un = U.to_numpy()
    p = tmp_path / "hand.nersc"
    build_nersc(p, Un, datatype, fp)
    V, h = pg.io.read_nersc(p)
    assert np.abs(V.to_numpy() - Un).max() < tol(fp)
    assert set(h.checks) == {"checksum", "plaquette", "link_trace"}
    assert h["CREATION_DATE"] == "Tue Mar 12 10:22:01 2019 GMT"
    assert h["ENSEMBLE_ID"] == "" and h["SEQUENCE_NUMBER"] == "42"
    assert h.dims == tuple(grid.gdims)


def test_header_with_crlf_and_odd_spacing(tmp_path, hot44):
    grid, U = hot44
    p = tmp_path / "crlf.nersc"
    data, hlen = build_nersc(p, U.to_numpy())
    head = data[:hlen].decode().replace("\n", "\r\n").replace("DATATYPE =", "  DATATYPE\t=")
    p.write_bytes(head.encode() + data[hlen:])
    V, _ = pg.io.read_nersc(p)
    assert np.array_equal(V.to_numpy(), U.to_numpy())


def test_plaquette_checked_to_printed_precision(tmp_path, hot44):
    grid, U = hot44
    Un = U.to_numpy()
    plaq = plaquette_ref(Un)
    p = tmp_path / "p.nersc"
    # printed with 3 decimals: within half a unit of the last digit passes ...
    data, hlen = build_nersc(p, Un)
    head = data[:hlen].decode().replace(f"PLAQUETTE  = {plaq:.10f}", f"PLAQUETTE  = {plaq:.3f}")
    p.write_bytes(head.encode() + data[hlen:])
    pg.io.read_nersc(p)
    # ... one unit in the last printed digit (10 decimals) off fails
    build_nersc(p, Un, plaq=plaq + 1e-9)
    with pytest.raises(ChecksumError) as e:
        pg.io.read_nersc(p)
    assert e.value.check == "plaquette"


# ---- corruption: documented errors, destination unchanged ---------------------------------------

def _corruptions(tmp_path, Un):
    """(name, path, exception, check) for every kind of damage."""
    out = []

    def case(name, exc, check=None, **kw):
        p = tmp_path / f"{name}.nersc"
        data, hlen = build_nersc(p, Un, **{k: v for k, v in kw.items() if k in ("datatype", "fp", "checksum",
                                                                                 "plaq", "ltr", "dims")})
        if "mutate" in kw:
            p.write_bytes(kw["mutate"](bytearray(data), hlen))
        out.append((name, p, exc, check))

    def flip(data, hlen):
        data[hlen + 1000] ^= 0x01
        return bytes(data)

    case("flipped_byte", ChecksumError, "checksum", mutate=flip)
    case("wrong_checksum", ChecksumError, "checksum", checksum=0x12345678)
    case("wrong_plaquette", ChecksumError, "plaquette", plaq=plaquette_ref(Un) + 0.01)
    case("wrong_link_trace", ChecksumError, "link_trace", ltr=link_trace_ref(Un) + 0.01)
    case("truncated", TruncatedFileError, mutate=lambda d, h: bytes(d[:-100]))
    case("truncated_header", TruncatedFileError, mutate=lambda d, h: bytes(d[:h - 20]))
    case("trailing_bytes", FormatError, mutate=lambda d, h: bytes(d) + b"\0" * 64)
    case("unknown_datatype", FormatError, datatype="4D_SU2_GAUGE")
    case("unknown_floating_point", FormatError, fp="IEEE64BIG", mutate=lambda d, h: bytes(d).replace(
        b"FLOATING_POINT = IEEE64BIG", b"FLOATING_POINT = VAXFLOAT"))
    case("not_nersc", FormatError, mutate=lambda d, h: b"garbage\n" + bytes(d))
    return out


def test_every_corruption_raises_and_leaves_destination_unchanged(tmp_path, hot44):
    grid, U = hot44
    Un = U.to_numpy()
    dest = pg.qcd.unit_gauge(grid)
    before = dest.to_numpy()
    for name, p, exc, check in _corruptions(tmp_path, Un):
        with pytest.raises(exc) as e:
            pg.io.read_nersc(p, into=dest)
        assert isinstance(e.value, pg.PyGridError), name
        if check:
            assert e.value.check == check, name
            assert e.value.expected is not None and e.value.found is not None
            assert check in str(e.value) and str(p) in str(e.value)
        assert np.array_equal(dest.to_numpy(), before), name


def test_checksum_error_names_values(tmp_path, hot44):
    grid, U = hot44
    p = tmp_path / "c.nersc"
    data, _ = build_nersc(p, U.to_numpy(), checksum=0xDEADBEEF)
    with pytest.raises(ChecksumError) as e:
        pg.io.read_nersc(p)
    assert e.value.expected == "deadbeef"
    assert e.value.found == f"{nersc_sum_ref(data[-4 ** 4 * 4 * 18 * 8:], True):08x}"
    assert "deadbeef" in str(e.value)


def test_wrong_dimensions_for_grid(tmp_path, hot44):
    grid, U = hot44
    p = tmp_path / "d.nersc"
    pg.io.write_nersc(p, U)
    other = pg.GridCartesian([4, 4, 4, 8])
    dest = pg.qcd.unit_gauge(other)
    before = dest.to_numpy()
    with pytest.raises(FormatError, match="dimensions do not match"):
        pg.io.read_nersc(p, grid=other)
    with pytest.raises(FormatError, match="dimensions do not match"):
        pg.io.read_nersc(p, into=dest)
    assert np.array_equal(dest.to_numpy(), before)


def test_not_a_gauge_field(tmp_path, hot44):
    grid, _ = hot44
    with pytest.raises(pg.SiteTypeError):
        pg.io.write_nersc(tmp_path / "x", pg.LatticeColourMatrix(grid))


# ---- atomic writes ----------------------------------------------------------------------

def fail_after(monkeypatch, limit):
    real = pygrid.io.atomic._open_stream
    monkeypatch.setattr(pygrid.io.atomic, "_open_stream", lambda fd: FullDisk(real(fd), limit))


@pytest.mark.parametrize("existing", [False, True], ids=["new", "overwrite"])
def test_interrupted_write_leaves_no_file(tmp_path, hot44, monkeypatch, existing):
    grid, U = hot44
    target = tmp_path / "conf.nersc"
    if existing:
        target.write_bytes(b"the old configuration")
    fail_after(monkeypatch, 20000)  # the payload is 4^4*4*18*8 = 147456 bytes: fails midway
    with pytest.raises(OSError) as e:
        pg.io.write_nersc(target, U)
    assert e.value.errno == errno.ENOSPC
    if existing:
        assert target.read_bytes() == b"the old configuration"
    else:
        assert not target.exists()
    assert sorted(os.listdir(tmp_path)) == (["conf.nersc"] if existing else [])


def test_write_replaces_atomically(tmp_path, hot44):
    grid, U = hot44
    target = tmp_path / "conf.nersc"
    target.write_bytes(b"old")
    pg.io.write_nersc(target, U)
    assert os.listdir(tmp_path) == ["conf.nersc"]
    V, _ = pg.io.read_nersc(target)
    assert np.array_equal(V.to_numpy(), U.to_numpy())


# ---- streaming and progress -----------------------------------------------------------------

def test_slab_streaming_and_progress(tmp_path, hot, monkeypatch, capsys):
    """Tiny slabs (one time slice each) give the same field; progress=True prints a line on stderr."""
    grid, U = hot
    import pygrid.io._stream as stream

    monkeypatch.setattr(stream, "SLAB_BYTES", 1)
    p = tmp_path / "s.nersc"
    pg.io.write_nersc(p, U, two_row=True, progress=True)
    V, _ = pg.io.read_nersc(p, progress=True)
    err = capsys.readouterr().err
    assert "writing" in err and "reading" in err and "100.0%" in err
    assert np.abs(V.to_numpy() - U.to_numpy()).max() < 1e-14


def test_no_progress_for_small_files(tmp_path, hot44, capsys):
    grid, U = hot44
    pg.io.write_nersc(tmp_path / "q.nersc", U)
    pg.io.read_nersc(tmp_path / "q.nersc")
    assert capsys.readouterr().err == ""


# ---- pygrid convert -----------------------------------------------------------------------

def test_convert_cli_round_trip(tmp_path, hot44, capsys):
    from pygrid.cli import main

    grid, U = hot44
    a, b, c = tmp_path / "a.nersc", tmp_path / "b.lime", tmp_path / "c.nersc"
    pg.io.write_nersc(a, U, two_row=True)
    assert main(["convert", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "plaquette" in out and "checksums" in out and "ILDG" in out
    assert f"{plaquette_ref(U.to_numpy()):.10f}"[:10] in out
    assert pg.io.detect_format(b) == "ildg"
    assert main(["convert", str(b), str(c)]) == 0
    V, h = pg.io.read_nersc(c)
    assert np.abs(V.to_numpy() - U.to_numpy()).max() < 1e-14
    # a damaged input: error on stderr, status 2, no output written
    bad = tmp_path / "bad.nersc"
    build_nersc(bad, U.to_numpy(), checksum=1)
    assert main(["convert", str(bad), str(tmp_path / "never.lime")]) == 2
    assert "checksum mismatch" in capsys.readouterr().err
    assert not (tmp_path / "never.lime").exists()
