"""Edge cases of the MemoryManager, views, devices and the default-manager helpers."""

import gc
import subprocess
import sys

import numpy as np
import pytest

import pygrid.memory as mem
from pygrid.errors import ConfigError, DeviceMemoryError, ShapeError
from pygrid.memory import (
    MB,
    Advise,
    EmulatedDevice,
    MemoryManager,
    State,
    UnifiedDevice,
    View,
    ViewConflictError,
    ViewMode,
)

CpuRead, CpuWrite = ViewMode.CpuRead, ViewMode.CpuWrite
AccRead, AccWrite = ViewMode.AcceleratorRead, ViewMode.AcceleratorWrite
AccDiscard = ViewMode.AcceleratorWriteDiscard


class Owner:
    pass


def field(mgr, n=16, value=None, owner=None):
    """Register a float64 field of n elements; returns (owner, key, host)."""
    owner = Owner() if owner is None else owner
    host = np.arange(n, dtype=np.float64) if value is None else np.full(n, value, np.float64)
    return owner, mgr.register(owner, host), host


def emulated(watermark):
    return MemoryManager(EmulatedDevice(), watermark)


# ---- state machine, one transition at a time ----------------------------------------

def test_transitions_follow_grid():
    m = emulated(10_000)
    keep_k, k, host = field(m)
    assert m.state(k) is State.Empty
    with View(m, k, AccRead) as d:
        assert d is not host and np.array_equal(d, host)
    assert m.state(k) is State.Consistent
    assert m.stats()["h2d_count"] == 1
    with View(m, k, AccRead):             # already current: no copy
        pass
    with View(m, k, CpuRead):             # host current too: no copy
        pass
    assert (m.stats()["h2d_count"], m.stats()["d2h_count"]) == (1, 0)
    with View(m, k, AccWrite) as d:       # Consistent -> AcceleratorDirty, no copy
        d[3] = -1
    assert m.state(k) is State.AcceleratorDirty and host[3] == 3
    with View(m, k, CpuRead) as h:        # device holds the only copy: copy back
        assert h is host and h[3] == -1
    assert m.state(k) is State.Consistent and m.stats()["d2h_count"] == 1
    with View(m, k, CpuWrite) as h:       # write intent marks the device stale
        h[0] = 42
    assert m.state(k) is State.CpuDirty
    with View(m, k, AccWrite) as d:       # stale device: AcceleratorWrite copies in first
        assert d[0] == 42 and d[3] == -1
        d[1] = 7
    assert m.stats()["h2d_count"] == 2
    with View(m, k, CpuWrite) as h:       # CpuWrite after AcceleratorDirty copies back first
        assert h[1] == 7
    assert m.state(k) is State.CpuDirty
    with View(m, k, AccDiscard) as d:     # never copies in
        d[...] = 5
    s = m.stats()
    assert (s["h2d_count"], s["d2h_count"]) == (2, 2)
    assert s["h2d_bytes"] == 2 * 128 and s["d2h_bytes"] == 2 * 128
    with View(m, k, CpuRead) as h:
        assert np.all(h == 5)


def test_write_discard_from_empty_does_not_copy():
    m = emulated(10_000)
    keep_k, k, host = field(m)
    with View(m, k, AccDiscard) as d:
        d[...] = 1.5
    assert m.stats()["h2d_count"] == 0 and m.state(k) is State.AcceleratorDirty
    with View(m, k, CpuRead) as h:
        assert np.all(h == 1.5)


def test_conflicting_views_are_refused():
    m = emulated(10_000)
    keep_k, k, _ = field(m)
    with View(m, k, CpuRead):
        with View(m, k, AccRead):         # two readers on both sides are fine
            pass
        with pytest.raises(ViewConflictError):
            m.open(k, AccWrite)
    with View(m, k, AccWrite):
        with pytest.raises(ViewConflictError):
            m.open(k, CpuRead)
        with View(m, k, AccRead):         # same side: a kernel reading its own output
            pass
    with View(m, k, CpuWrite):
        with pytest.raises(ViewConflictError):
            m.open(k, AccRead)
    # the same rules on the unified device, so programs behave the same everywhere
    u = MemoryManager(UnifiedDevice(), 0)
    keep_ku, ku, _ = field(u)
    with View(u, ku, CpuWrite):
        with pytest.raises(ViewConflictError):
            u.open(ku, AccRead)


def test_close_without_open_and_unknown_key():
    m = emulated(10_000)
    keep_k, k, _ = field(m)
    with pytest.raises(ValueError):
        m.close(k, CpuRead)
    m.open(k, CpuRead)
    with pytest.raises(ValueError):
        m.close(k, CpuWrite)              # the open view is a reader
    m.close(k, CpuRead)
    with pytest.raises(KeyError):
        m.open(12345, CpuRead)


def test_view_closes_on_exception():
    m = emulated(10_000)
    keep_k, k, _ = field(m)
    with pytest.raises(ZeroDivisionError):
        with View(m, k, AccWrite):
            raise ZeroDivisionError
    assert m.entry_info(k)["accelerator_views"] == 0
    assert m.lru_order() == [k]           # unlocked again, evictable


def test_register_rejects_non_contiguous():
    m = emulated(10_000)
    with pytest.raises(ShapeError):
        m.register(None, np.zeros((4, 4))[:, ::2])
    with pytest.raises(ShapeError):
        m.register(None, [1.0, 2.0])


# ---- watermark and eviction ----------------------------------------------------------

def test_field_larger_than_watermark():
    m = emulated(100)
    keep_k, k, host = field(m, 16)             # 128 bytes
    with pytest.raises(DeviceMemoryError) as err:
        m.open(k, AccRead)
    msg = str(err.value)
    assert "128 bytes" in msg and "0 bytes" in msg and "100 bytes" in msg
    assert "--device-mem" in msg and "1 MB" in msg
    assert isinstance(err.value, MemoryError)
    assert m.state(k) is State.Empty and m.stats()["device_bytes"] == 0
    with View(m, k, CpuRead) as h:
        assert np.array_equal(h, np.arange(16))


def test_watermark_zero_fails_every_accelerator_open():
    m = emulated(0)
    keep_k, k, _ = field(m, 1)
    for mode in (AccRead, AccWrite, AccDiscard):
        with pytest.raises(DeviceMemoryError, match="watermark is 0 bytes"):
            m.open(k, mode)
    with View(m, k, CpuWrite) as h:       # the CPU side still works
        h[0] = 3
    assert m.stats()["allocations"] == 0 and m.entry_info(k)["accelerator_views"] == 0


def test_all_entries_locked_and_nothing_lost():
    m = emulated(256)
    keys = []
    for v in (1.0, 2.0):
        o, k, _ = field(m, 16, value=v)
        keys.append((o, k))
    (o1, k1), (o2, k2) = keys
    d1 = m.open(k1, AccWrite)
    d1[...] = 10.0                        # k1 only current on the device
    d2 = m.open(k2, AccRead)
    o3, k3, _ = field(m, 16, value=3.0)
    before = {k: (m.state(k), m.entry_info(k)["on_device"]) for k in (k1, k2, k3)}
    stats_before = m.stats()
    with pytest.raises(DeviceMemoryError) as err:
        m.open(k3, AccRead)
    msg = str(err.value)
    assert "needs 128 bytes" in msg and "256 bytes" in msg and "locked by open views" in msg
    assert "raise --device-mem" in msg
    assert {k: (m.state(k), m.entry_info(k)["on_device"]) for k in (k1, k2, k3)} == before
    assert m.stats() == stats_before
    m.close(k2, AccRead)                  # now k2 can be evicted
    with View(m, k3, AccRead) as d3:
        assert np.all(d3 == 3.0)
    assert m.stats()["evictions"] == 1 and not m.entry_info(k2)["on_device"]
    m.close(k1, AccWrite)
    for k, v in ((k1, 10.0), (k2, 2.0), (k3, 3.0)):
        with View(m, k, CpuRead) as h:
            assert np.all(h == v)
    assert d1 is not None and d2 is not None


def test_eviction_is_lru_with_infrequent_first_and_copies_back():
    m = emulated(3 * 128)
    fields = [field(m, 16, value=float(i)) for i in range(4)]
    keys = [k for _, k, _ in fields]
    for k in keys[:3]:
        with View(m, k, AccWrite) as d:
            d += 100                      # device dirty
    with View(m, keys[0], AccRead):       # touch: keys[0] becomes most recently used
        pass
    m.advise(keys[2], Advise.InfrequentUse)
    assert m.lru_order() == [keys[2], keys[1], keys[0]]
    with View(m, keys[3], AccRead):       # evicts keys[2] (InfrequentUse) first
        pass
    assert not m.entry_info(keys[2])["on_device"]
    assert m.state(keys[2]) is State.Empty
    assert fields[2][2][0] == 102.0       # copied back to the host array on eviction
    m.advise(keys[2], Advise.Normal)
    with View(m, keys[2], AccRead):       # now the Normal LRU order: keys[1] goes
        pass
    assert not m.entry_info(keys[1])["on_device"]
    s = m.stats()
    assert s["evictions"] == 2 and s["d2h_bytes"] == 2 * 128 and s["d2h_count"] == 2
    assert s["device_bytes"] == s["peak_device_bytes"] == 3 * 128


def test_set_watermark_evicts_or_refuses():
    m = emulated(1000)
    fields = [field(m, 16, value=float(i)) for i in range(3)]
    for _, k, _ in fields:
        with View(m, k, AccWrite) as d:
            d *= 2
    m.set_watermark(256)
    s = m.stats()
    assert s["device_bytes"] == 256 and s["evictions"] == 1 and s["watermark_bytes"] == 256
    assert not m.entry_info(fields[0][1])["on_device"]
    k = fields[1][1]
    m.open(k, AccRead)
    with pytest.raises(DeviceMemoryError, match="locked by open views"):
        m.set_watermark(64)
    assert m.stats()["watermark_bytes"] == 256 and m.stats()["device_bytes"] == 256
    m.close(k, AccRead)
    m.set_watermark(0)
    assert m.stats()["device_bytes"] == 0
    for i, (_, k, _) in enumerate(fields):
        with View(m, k, CpuRead) as h:
            assert np.all(h == 2 * i)
    with pytest.raises(ConfigError):
        m.set_watermark(-1)


# ---- freeing -------------------------------------------------------------------------

def test_gc_of_owner_releases_device_buffer_to_pool():
    dev = EmulatedDevice()
    m = MemoryManager(dev, 10_000)
    o, k, _ = field(m)
    with View(m, k, AccRead):
        pass
    del o
    gc.collect()
    s = m.stats()
    assert s["entries"] == 0 and s["pool_bytes"] == 128 and s["device_bytes"] == 128
    assert k not in m
    assert dev.allocated_bytes == 128     # pooled, not yet given back to the device


def test_pool_reuse():
    dev = EmulatedDevice()
    m = MemoryManager(dev, 10_000)
    o, k, _ = field(m, 16)
    with View(m, k, AccRead):
        pass
    assert m.stats()["allocations"] == 1
    del o
    gc.collect()
    o2 = Owner()
    k2 = m.register(o2, np.full((4, 4), 9.0))      # same bytes and dtype, other shape
    with View(m, k2, AccRead) as d:
        assert d.shape == (4, 4) and np.all(d == 9.0)
    s = m.stats()
    assert s["allocations"] == 1 and s["pool_hits"] == 1 and s["pool_bytes"] == 0
    assert dev.live_buffers == 1
    o3 = Owner()                                    # other dtype: no hit
    k3 = m.register(o3, np.zeros(32, np.float32))
    with View(m, k3, AccRead):
        pass
    assert m.stats()["allocations"] == 2 and m.stats()["pool_hits"] == 1


def test_pool_is_trimmed_before_live_entries_are_evicted():
    dev = EmulatedDevice()
    m = MemoryManager(dev, 256)
    o1, k1, _ = field(m, 16)
    o2, k2, _ = field(m, 16)
    for k in (k1, k2):
        with View(m, k, AccRead):
            pass
    m.release(k1)                         # 128 bytes to the pool; footprint stays 256
    assert m.stats()["device_bytes"] == 256
    keep_k3, k3, _ = field(m, 8)                # 64 bytes: no pool hit, trim the pool
    with View(m, k3, AccRead):
        pass
    s = m.stats()
    assert s["evictions"] == 0 and s["pool_bytes"] == 0 and s["device_bytes"] == 192
    assert m.entry_info(k2)["on_device"] and dev.allocated_bytes == 192


def test_freed_with_open_view_is_deferred():
    dev = EmulatedDevice()
    m = MemoryManager(dev, 10_000)
    o, k, _ = field(m, 16, value=1.0)
    d = m.open(k, AccWrite)
    del o
    gc.collect()
    assert m.stats()["entries"] == 1                 # still there: a view is open
    assert m.entry_info(k)["released"] and k not in m
    with pytest.raises(KeyError):
        m.open(k, AccRead)                           # no new views of a released field
    d[...] = 4.0                                     # the open view stays valid
    assert m.stats()["pool_bytes"] == 0 and m.stats()["locked_bytes"] == 128
    m.close(k, AccWrite)                             # last close completes the release
    s = m.stats()
    assert s["entries"] == 0 and s["pool_bytes"] == 128 and s["locked_bytes"] == 0
    m.release(k)                                     # releasing again is a no-op


def test_explicit_release_detaches_finalizer():
    m = emulated(10_000)
    o, k, _ = field(m)
    m.release(k)
    assert m.stats()["entries"] == 0
    keep_k2, k2, _ = field(m)
    del o
    gc.collect()                                     # must not touch anything
    assert m.stats()["entries"] == 1 and k2 in m


# ---- unified device ------------------------------------------------------------------

def test_unified_device_returns_host_and_counts_nothing():
    m = MemoryManager(UnifiedDevice(), 0)            # even a zero watermark is irrelevant
    o, k, host = field(m)
    before = m.stats()
    for mode in ViewMode:
        with View(m, k, mode) as a:
            assert a is host
    m.advise(k, Advise.InfrequentUse)
    m.set_watermark(10)
    after = m.stats()
    before.pop("watermark_bytes"), after.pop("watermark_bytes")
    assert after == before
    assert after["device_bytes"] == 0 and after["h2d_count"] == 0 and after["evictions"] == 0
    assert m.state(k) is State.Consistent and m.lru_order() == []
    del o
    gc.collect()
    assert m.stats()["entries"] == 0


# ---- module helpers ------------------------------------------------------------------

def test_configure_and_default_manager():
    old = mem.get_manager()
    try:
        m = mem.configure(device="emulated", device_mem_mb=0.5)
        assert mem.get_manager() is m and m.watermark_bytes == MB // 2
        assert isinstance(m.device, EmulatedDevice)
        o, k, _ = field(m)
        with View(m, k, AccRead):
            pass
        assert mem.memory_stats()["h2d_bytes"] == 128
        m2 = mem.configure()                         # old fields keep their manager
        assert isinstance(m2.device, UnifiedDevice) and m2.watermark_bytes == 128 * MB
        with View(m, k, CpuRead):
            pass
        assert mem.memory_stats()["h2d_bytes"] == 0
        with pytest.raises(ConfigError):
            mem.configure(device="nosuch")
        with pytest.raises(ConfigError):
            mem.configure(device_mem_mb=-1)
    finally:
        mem._default = old


def test_reset_stats_and_report():
    m = emulated(1000)
    keep_k, k, _ = field(m)
    with View(m, k, AccWrite):
        pass
    with View(m, k, CpuRead):
        pass
    rep = m.report()
    assert rep.count("\n") >= 4 and all(l.startswith("MemoryManager:") for l in rep.splitlines())
    assert "host->device 1 transfers, 128 bytes" in rep and "device->host 1 transfers" in rep
    m.reset_stats()
    s = m.stats()
    assert s["h2d_bytes"] == s["d2h_count"] == s["allocations"] == 0
    assert s["device_bytes"] == s["peak_device_bytes"] == 128 and s["entries"] == 1


def test_enable_debug_report_prints_at_exit():
    code = ("import numpy as np, pygrid.memory as mem\n"
            "m = mem.configure('emulated', 1)\n"
            "k = m.register(None, np.zeros(8))\n"
            "m.open(k, mem.ViewMode.AcceleratorRead); m.close(k, mem.ViewMode.AcceleratorRead)\n"
            "mem.enable_debug_report(); mem.enable_debug_report()\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("host->device 1 transfers, 64 bytes") == 1


def test_many_collected_fields_drain_without_recursion():
    # the finalizers only queue keys; thousands of them must drain iteratively
    import gc

    from pygrid.memory import EmulatedDevice, MemoryManager

    m = MemoryManager(EmulatedDevice(), 10 ** 6)

    class Owner:
        pass

    owners = [Owner() for _ in range(3000)]
    for o in owners:
        m.register(o, np.zeros(4))
    del owners, o
    gc.collect()
    assert m.stats()["entries"] == 0


def test_lattice_uses_an_empty_manager_it_is_given():
    import pygrid as pg
    from pygrid.memory import EmulatedDevice, MemoryManager

    m = MemoryManager(EmulatedDevice(), 10 ** 6)
    f = pg.LatticeComplex(pg.GridCartesian([4, 4, 4, 4]))
    g = pg.Lattice(f.grid, pg.Complex, manager=m)
    assert g._manager is m
