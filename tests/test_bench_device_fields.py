"""The fields each benchmark kind says it holds on a device (``Kind.device_reals``), against what its
run holds there; and the CLI's ``--device-mem`` fitted to them (docs/cli.md)."""
from __future__ import annotations

import json

import pytest

import pygrid as pg
import pygrid.memory as memory
from pygrid.bench.common import Context, make_grid
from pygrid.bench.kinds import get_kind
from pygrid.bench.progress import Progress
from pygrid.bench.timing import Timer
from pygrid.bench.units import real_bytes
from pygrid.errors import DeviceMemoryError

# (kind, Ls, precision): every kind that declares its fields, on a lattice small enough to run fast
CASES = [("wilson", 1, "double"), ("wilson", 1, "single"), ("dwf", 2, "double"), ("dwf", 3, "single"),
         ("axpy", 1, "double"), ("su3", 1, "single")]
DIMS = (4, 4, 4, 8)


@pytest.fixture
def restore_manager():
    """Put back the manager, and the config and backend that the CLI's ``pg.init`` changes."""
    import pygrid.config as config

    saved = (config.current(), memory.get_manager(), pg.get_backend().name)
    yield
    config.set_current(saved[0])
    memory._default = saved[1]
    pg.set_backend(saved[2])


def _declared(kind, Ls, prec):
    g = make_grid(DIMS, prec)
    return kind.device_reals(Ls) * real_bytes(prec) * g.osites * g.nsimd


def _run_under(kind, Ls, prec, watermark):
    """kind.run on a fresh manager of the backend's device (an emulated one where the backend's is the
    host's memory) under ``watermark`` bytes; the manager."""
    device = pg.get_backend().device
    mgr = memory.configure("emulated" if device in ("unified", "openmp", "numpy") else device, 0)
    mgr.set_watermark(watermark)
    ctx = Context(Timer(1, 0), Progress(quiet=True), Ls=Ls)
    kind.run(DIMS, prec, ctx)
    return mgr


@pytest.mark.parametrize("name,Ls,prec", CASES, ids=[f"{c[0]}-Ls{c[1]}-{c[2]}" for c in CASES])
def test_a_run_holds_on_the_device_exactly_the_fields_its_kind_declares(name, Ls, prec, restore_manager):
    kind = get_kind(name)
    need = _declared(kind, Ls, prec)
    stats = _run_under(kind, Ls, prec, need).stats()
    assert stats["peak_device_bytes"] == need and stats["evictions"] == 0
    # a byte less, and the cache must evict one of them, or cannot run the kernel that opens them all
    try:
        assert _run_under(kind, Ls, prec, need - 1).stats()["evictions"] > 0
    except DeviceMemoryError:
        pass


def _benchmark(tmp_path, capsys, *argv):
    """``pygrid benchmark ARGV`` in this process, timing one call of each kernel: (printed text, JSON)."""
    from pygrid.cli import main

    out = tmp_path / "b.json"
    assert main(["benchmark", *argv, "--emulate-device", "--iterations", "1", "--warmup", "0", "--quiet",
                 "--json", str(out)]) == 0
    return capsys.readouterr().out, json.loads(out.read_text())


def test_a_device_mem_given_below_the_fields_is_kept_and_said(restore_manager, capsys, tmp_path):
    text, doc = _benchmark(tmp_path, capsys, "wilson", "--grid", "8.8.8.8", "--device-mem", "5")
    # wilson double at 8^4: 192 reals of 8 bytes on 4096 sites, 6 MB
    assert ("device-mem      5 MB (emulated device): below the benchmark's 6 MB of fields at 8.8.8.8 double "
            "(--device-mem 5): the cache evicts") in text
    assert doc["config"]["watermark_bytes"] == 5 * 2 ** 20 and doc["memory_manager"]["evictions"] > 0


def test_the_default_device_mem_is_raised_to_the_fields(restore_manager, capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("PYGRID_DEVICE_MEM", raising=False)
    # axpy double at 24^4: x, y and z, 72 reals of 8 bytes on 331776 sites, 182.25 MB (over the 128 MB)
    text, doc = _benchmark(tmp_path, capsys, "axpy", "--grid", "24.24.24.24", "--precision", "double")
    assert ("device-mem      183 MB (emulated device): the benchmark's fields at 24.24.24.24 double, "
            "above the default 128 MB") in text
    assert doc["config"]["watermark_bytes"] == 183 * 2 ** 20 and doc["config"]["device_mem_mb"] == 128
    assert doc["memory_manager"]["evictions"] == 0
