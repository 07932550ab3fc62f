"""Gauge configuration files on a lattice split over the job's ranks agree with one rank.

A NERSC or ILDG file written from the decomposed lattice is byte for byte the
file rank 0 writes from the same field on a one-rank lattice (with its own,
default, SIMD layout); reading it back into the decomposed lattice gives the
field a one-rank read gives; a damaged file, a malformed or missing one, and a
write that fails on rank 0 raise the same error on every rank.
"""
from __future__ import annotations

import errno
import math
import os
import shutil
import tempfile

import numpy as np
import pytest
from conftest import ONE, WORLD, layouts
from io_faults import FullDisk

import pygrid as pg
import pygrid.io  # noqa: F401
import pygrid.io._stream
import pygrid.io.atomic
import pygrid.io.ildg
import pygrid.io.nersc
import pygrid.qcd  # noqa: F401
from pygrid.io import ChecksumError, FormatError, TruncatedFileError
from pygrid.io._parallel import exact_sum
from pygrid.io.lime import read_records

DIMS = (4, 4, 4, 8)
LAYOUTS = layouts()
LAYOUT_IDS = [".".join(map(str, m)) for m in LAYOUTS]

#: (id, writer, reader, writer keywords, the check a flipped payload byte fails)
FORMATS = [
    ("nersc", pg.io.write_nersc, pg.io.read_nersc, {}, "checksum"),
    ("nersc-2row-single-little", pg.io.write_nersc, pg.io.read_nersc,
     dict(two_row=True, precision="single", endian="little"), "checksum"),
    ("ildg", pg.io.write_ildg, pg.io.read_ildg, {}, "scidac_checksum"),
    ("ildg-single", pg.io.write_ildg, pg.io.read_ildg, dict(precision="single"), "scidac_checksum"),
]
FORMAT_IDS = [f[0] for f in FORMATS]


class _FrozenClock:
    """The dates in headers and records, fixed so that two writes can be compared byte for byte."""

    @staticmethod
    def strftime(fmt, *args):
        return "Thu Jan 01 00:00:00 1970 UTC"


@pytest.fixture(autouse=True)
def frozen_clock(monkeypatch):
    monkeypatch.setattr(pygrid.io.nersc, "time", _FrozenClock)
    monkeypatch.setattr(pygrid.io.ildg, "time", _FrozenClock)


@pytest.fixture(scope="module")
def shared_dir():
    """A directory every rank sees: made by rank 0, its path broadcast."""
    path = WORLD.bcast(tempfile.mkdtemp(prefix="pygrid-io-mpi-") if WORLD.is_root else None)
    yield path
    WORLD.barrier()
    if WORLD.is_root:
        shutil.rmtree(path)


@pytest.fixture(scope="module", params=LAYOUTS, ids=LAYOUT_IDS)
def hot(request):
    """(decomposed grid, random gauge field on it, the whole field as numpy)."""
    g = pg.GridCartesian(DIMS, mpi_layout=request.param)
    U = pg.qcd.random_gauge(g, pg.ParallelRNG(g, [21, 22, 23]))
    return g, U, U.to_numpy()


def one_rank_grid():
    return pg.GridCartesian(DIMS, comm=ONE)


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def agreed(value):
    """``value`` after checking that every rank holds an equal one."""
    every = WORLD.allgather(value)
    for r, v in enumerate(every):
        assert v == every[0], f"rank {r} differs from rank 0: {v!r} != {every[0]!r}"
    return every[0]


def header_summary(h):
    return (dict(h), h.dims, h.data_type, h.floating_point, h.checksums, h.checks)


def write_both(shared_dir, hot, fmt):
    """Write the decomposed field (collective) and, on rank 0, the same field from a one-rank
    lattice; returns (path, one-rank path, header of the decomposed write, the decomposed
    file's bytes as every rank saw them as soon as the write returned)."""
    name, write, _, kw, _ = fmt
    g, U, whole = hot
    tag = ".".join(map(str, g.mpi_layout))
    path = os.path.join(shared_dir, f"{name}-{tag}.conf")
    ref = os.path.join(shared_dir, f"{name}-{tag}.one")
    h = write(path, U, **kw)
    data = read_bytes(path)
    if WORLD.is_root:
        U1 = pg.LatticeGaugeField(one_rank_grid()).from_numpy(whole)
        h1 = write(ref, U1, **kw)
        assert header_summary(h1) == header_summary(h)
    WORLD.barrier()
    return path, ref, h, data


def test_statistics_are_summed_exactly_over_ranks():
    """The sums behind the plaquette and link trace: each rank's values, any split, give
    math.fsum of them all (correctly rounded), on every rank."""
    rng = np.random.default_rng(5)
    v = rng.standard_normal(3001) * np.exp2(rng.integers(-40, 40, 3001))
    mine = np.array_split(v, WORLD.size)[WORLD.rank]
    assert agreed(exact_sum(WORLD, [mine[:7], mine[7:]])) == math.fsum(v.tolist())
    assert agreed(exact_sum(WORLD, [mine, -mine])) == 0.0


@pytest.mark.parametrize("fmt", FORMATS, ids=FORMAT_IDS)
def test_written_file_is_the_one_rank_file(shared_dir, hot, fmt):
    path, ref, h, data = write_both(shared_dir, hot, fmt)
    agreed(header_summary(h))
    assert data == read_bytes(ref)


@pytest.mark.parametrize("fmt", FORMATS, ids=FORMAT_IDS)
def test_read_into_decomposed_grid_is_the_one_rank_read(shared_dir, hot, fmt):
    _, _, read, _, _ = fmt
    g, U, whole = hot
    path, ref, _, _ = write_both(shared_dir, hot, fmt)
    V, h = read(path, grid=g)
    assert V.grid is g
    # every rank reads the one-rank reference alone: no collectives on a SingleRank grid
    V1, h1 = read(ref, grid=one_rank_grid())
    np.testing.assert_array_equal(V.to_numpy(), V1.to_numpy())
    if "single" not in fmt[0]:
        np.testing.assert_array_equal(V.to_numpy(), whole)
    assert agreed(header_summary(h)) == header_summary(h1)
    assert set(h.checks) >= {"plaquette", "link_trace"} and set(h.checks) & {"checksum", "scidac_checksum"}


@pytest.mark.parametrize("fmt", FORMATS[::2], ids=FORMAT_IDS[::2])
def test_read_with_grid_from_header_and_into(shared_dir, hot, fmt):
    _, _, read, _, _ = fmt
    g, U, whole = hot
    path, _, _, _ = write_both(shared_dir, hot, fmt)
    V, h = read(path)  # the job's default decomposition
    assert V.grid.comm is WORLD and V.grid.gdims == DIMS
    np.testing.assert_array_equal(V.to_numpy(), whole)
    dest = pg.qcd.unit_gauge(g)
    out, _ = read(path, into=dest)
    assert out is dest
    np.testing.assert_array_equal(dest.to_numpy(), whole)


def payload_offset(path, h):
    """Byte offset and length of the binary payload of a written file."""
    if h.format == "nersc":
        return h.data_start, os.path.getsize(path) - h.data_start
    rec = next(
        r for r in read_records(open(path, "rb"), os.path.getsize(path)) if r.type == "ildg-binary-data"
    )
    return rec.offset, rec.length


def damaged_copy(path, new, mutate):
    """Rank 0 writes ``mutate(bytes)`` to ``new``; every rank waits for it."""
    if WORLD.is_root:
        with open(new, "wb") as f:
            f.write(mutate(read_bytes(path)))
    WORLD.barrier()
    return new


@pytest.mark.parametrize("where", ["first_site", "last_site"])
@pytest.mark.parametrize("fmt", FORMATS, ids=FORMAT_IDS)
def test_flipped_payload_byte_fails_on_every_rank(shared_dir, hot, fmt, where):
    """The damaged site lies in rank 0's block or in the last rank's; every rank raises."""
    _, _, read, _, check = fmt
    g, _, _ = hot
    path, _, h, _ = write_both(shared_dir, hot, fmt)
    start, length = payload_offset(path, h)
    at = start + (3 if where == "first_site" else length - 3)

    def flip(d):
        return d[:at] + bytes([d[at] ^ 0x10]) + d[at + 1:]

    bad = damaged_copy(path, path + f".{where}.bad", flip)
    dest = pg.qcd.unit_gauge(g)
    before = dest.to_numpy()
    with pytest.raises(ChecksumError) as e:
        read(bad, into=dest)
    assert e.value.check == check
    agreed((e.value.check, str(e.value)))
    np.testing.assert_array_equal(dest.to_numpy(), before)


def test_bad_files_fail_on_every_rank(shared_dir, hot):
    """Errors found by rank 0 (header, size, missing file) are raised by every rank, the same."""
    g, _, _ = hot
    path, _, h, _ = write_both(shared_dir, hot, FORMATS[0])
    truncated = damaged_copy(path, path + ".short", lambda d: d[:-1000])
    garbage = damaged_copy(path, path + ".garbage", lambda d: b"NOT A GAUGE FIELD\n" + d)
    cases = [(truncated, TruncatedFileError), (garbage, FormatError),
             (os.path.join(shared_dir, "no-such-file"), FileNotFoundError)]
    for p, exc in cases:
        with pytest.raises(exc) as e:
            pg.io.read_nersc(p, grid=g)
        agreed((type(e.value).__name__, str(e.value)))
    other = pg.GridCartesian((4, 4, 8, 8), mpi_layout=g.mpi_layout)
    with pytest.raises(FormatError, match="dimensions do not match"):
        pg.io.read_nersc(path, grid=other)


@pytest.mark.parametrize("fmt", FORMATS[::2], ids=FORMAT_IDS[::2])
def test_failed_write_fails_on_every_rank(shared_dir, hot, fmt):
    """Rank 0 cannot create the file: every rank raises its error, nothing is left behind."""
    _, write, _, kw, _ = fmt
    g, U, _ = hot
    missing = os.path.join(shared_dir, "no-such-dir", "conf")
    with pytest.raises(FileNotFoundError) as e:
        write(missing, U, **kw)
    agreed(str(e.value))
    assert not os.path.exists(os.path.dirname(missing))
    # the job goes on: the next collective write works
    path, ref, _, _ = write_both(shared_dir, hot, fmt)
    assert read_bytes(path) == read_bytes(ref)


@pytest.mark.parametrize("fmt", FORMATS[::2], ids=FORMAT_IDS[::2])
def test_write_failing_midway_fails_on_every_rank(shared_dir, hot, fmt, monkeypatch):
    """The disk fills after a few of the one-slice slabs: rank 0 still takes the other ranks'
    slabs, every rank raises ENOSPC, and the old file stays in place."""
    _, write, _, kw, _ = fmt
    g, U, _ = hot
    monkeypatch.setattr(pygrid.io._stream, "SLAB_BYTES", 1)
    real = pygrid.io.atomic._open_stream
    monkeypatch.setattr(
        pygrid.io.atomic, "_open_stream", lambda fd: FullDisk(real(fd), 3 * 4**3 * 4 * 18 * 8)
    )
    target = os.path.join(shared_dir, f"full-{fmt[0]}-{'.'.join(map(str, g.mpi_layout))}")
    if WORLD.is_root:
        with open(target, "wb") as f:
            f.write(b"the old configuration")
    WORLD.barrier()
    with pytest.raises(OSError) as e:
        write(target, U, **kw)
    assert e.value.errno == errno.ENOSPC
    agreed(str(e.value))
    assert read_bytes(target) == b"the old configuration"
    assert not [n for n in os.listdir(shared_dir) if n.endswith(".tmp")]


def test_read_failing_on_one_rank_fails_on_every_rank(shared_dir, hot, monkeypatch):
    """The last rank's read of its block fails (a file cut short after the header was checked):
    it raises its error and every other rank raises the same one."""
    g, _, _ = hot
    path, _, _, _ = write_both(shared_dir, hot, FORMATS[0])

    def cut_short(f, out, pos, end, total, path):
        raise TruncatedFileError(f"{path}: the file ends {end - pos} bytes before the end of its "
                                 f"{total}-byte payload (injected on rank {WORLD.rank})")

    if WORLD.rank == WORLD.size - 1:
        monkeypatch.setattr(pygrid.io._stream, "_read_exact", cut_short)
    dest = pg.qcd.unit_gauge(g)
    with pytest.raises(TruncatedFileError, match=f"injected on rank {WORLD.size - 1}") as e:
        pg.io.read_nersc(path, into=dest)
    agreed(str(e.value))
    np.testing.assert_array_equal(dest.to_numpy(), pg.qcd.unit_gauge(g).to_numpy())


def test_a_ctrl_c_on_one_rank_stops_every_rank_instead_of_leaving_them_waiting():
    from pygrid.io._parallel import on_every_rank, on_root

    comm = pg.GridCartesian([4, 4, 4, 8]).comm

    def interrupted_on(rank):
        def fn():
            if comm.rank == rank:
                raise KeyboardInterrupt
            return comm.rank
        return fn

    with pytest.raises(KeyboardInterrupt):
        on_root(comm, interrupted_on(0))
    with pytest.raises(KeyboardInterrupt):
        on_every_rank(comm, interrupted_on(comm.size - 1))
    assert on_every_rank(comm, interrupted_on(-1)) == comm.rank   # and the collectives still match
