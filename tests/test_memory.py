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
    LeakedViewWarning,
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
        assert h.base is host and not h.flags.writeable and h[3] == -1
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
    with pytest.warns(LeakedViewWarning, match=r"field 1 was collected with 1 accelerator view"):
        assert m.stats()["entries"] == 1             # still there: a view is open
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
            assert (a if mode.write else a.base) is host
            assert a.flags.writeable == mode.write
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


# ---- failures: a write view whose block raises, copies and evictions that fail -----------

class Boom(Exception):
    pass


def _current(m, k):
    with View(m, k, CpuRead) as a:
        return a.copy()


@pytest.mark.parametrize("exc", [Boom, KeyboardInterrupt])
@pytest.mark.parametrize("mode", [AccWrite, AccDiscard])
@pytest.mark.parametrize("before", ["host", "consistent", "device-stale"])
def test_accelerator_write_view_that_raises_keeps_the_copy_to_host(mode, before, exc):
    m = emulated(10_000)
    keep, k, host = field(m)
    want = host.copy()
    if before == "consistent":
        with View(m, k, AccRead):
            pass
    elif before == "device-stale":
        with View(m, k, AccRead):
            pass
        with View(m, k, CpuWrite) as a:
            a[0] = want[0] = 7.0
    with pytest.raises(exc):
        with View(m, k, mode) as d:
            d[...] = -1.0                 # a kernel that wrote, then the launch failed
            raise exc()
    assert m.state(k) is State.CpuDirty
    np.testing.assert_array_equal(_current(m, k), want)
    info = m.entry_info(k)
    assert (info["accelerator_views"], info["accelerator_writers"]) == (0, 0)
    with View(m, k, AccRead) as d:        # the device copy is refreshed from the host
        np.testing.assert_array_equal(d, want)


def test_accelerator_write_view_of_the_only_copy_keeps_it_when_nothing_was_written():
    m = emulated(10_000)
    keep, k, host = field(m)
    with View(m, k, AccWrite) as d:
        d[...] = 5.0                      # the device copy is now the only current one
    with pytest.raises(Boom):
        with View(m, k, AccDiscard):
            raise Boom()                  # failed before the launch (a compile, say)
    assert m.state(k) is State.AcceleratorDirty
    np.testing.assert_array_equal(_current(m, k), np.full(16, 5.0))


def test_cpu_write_view_that_raises_returns_to_the_device_copy():
    m = emulated(10_000)
    keep, k, host = field(m)
    with View(m, k, AccWrite) as d:
        d[...] = 3.0
    with pytest.raises(KeyboardInterrupt):
        with View(m, k, CpuWrite) as a:
            a[:8] = 0.0                   # half of a host write, then Ctrl-C
            raise KeyboardInterrupt
    assert m.state(k) is State.AcceleratorDirty
    np.testing.assert_array_equal(_current(m, k), np.full(16, 3.0))


def test_nested_write_views_roll_back_to_the_outer_prior_state():
    m = emulated(10_000)
    keep, k, host = field(m)
    want = host.copy()
    with pytest.raises(Boom):
        with View(m, k, AccWrite) as d1:
            with View(m, k, AccWrite) as d2:
                d1[...] = d2[...] = 9.0
                raise Boom()
    np.testing.assert_array_equal(_current(m, k), want)


def test_read_views_that_raise_change_nothing_but_close():
    m = emulated(10_000)
    keep, k, host = field(m)
    with pytest.raises(Boom):
        with View(m, k, AccRead):
            raise Boom()
    assert m.state(k) is State.Consistent and m.stats()["open_views"] == 0


def test_unified_device_write_view_that_raises_before_writing_loses_nothing():
    m = MemoryManager(UnifiedDevice(), 10_000)
    keep, k, host = field(m)
    want = host.copy()
    with pytest.raises(Boom):
        with View(m, k, AccDiscard):
            raise Boom()
    np.testing.assert_array_equal(_current(m, k), want)


class FailingDevice(EmulatedDevice):
    """Raises ``exc`` from the next call of ``method`` once armed."""

    def __init__(self):
        super().__init__()
        self.armed = None

    def _maybe(self, name):
        if self.armed and self.armed[0] == name:
            exc, self.armed = self.armed[1], None
            raise exc("injected")

    def alloc(self, nbytes, dtype, shape):
        self._maybe("alloc")
        return super().alloc(nbytes, dtype, shape)

    def free(self, array):
        self._maybe("free")
        super().free(array)

    def to_device(self, host, dev):
        self._maybe("to_device")
        super().to_device(host, dev)

    def to_host(self, dev, host):
        self._maybe("to_host")
        super().to_host(dev, host)


@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
def test_eviction_whose_copy_back_fails_leaves_the_victim_on_the_device(exc):
    dev = FailingDevice()
    m = MemoryManager(dev, 256)                            # two 128-byte fields
    keep1, k1, _ = field(m)
    keep2, k2, _ = field(m)
    keep3, k3, _ = field(m)
    for k in (k1, k2):
        with View(m, k, AccWrite) as d:
            d[...] = float(k)                             # AcceleratorDirty: eviction copies back
    before = m.stats()
    dev.armed = ("to_host", exc)
    with pytest.raises(exc):
        with View(m, k3, AccRead):
            pass
    assert m.stats() == before
    assert m.lru_order() == [k1, k2] and m.state(k1) is State.AcceleratorDirty
    with View(m, k3, AccRead):                            # the same open works afterwards
        pass
    assert m.lru_order() == [k2, k3]
    np.testing.assert_array_equal(_current(m, k1), np.full(16, float(k1)))
    assert dev.allocated_bytes == m.stats()["device_bytes"] <= 256


@pytest.mark.parametrize("method", ["alloc", "to_device"])
def test_open_whose_allocation_or_copy_fails_leaves_no_view(method):
    dev = FailingDevice()
    m = MemoryManager(dev, 10_000)
    keep, k, host = field(m)
    dev.armed = (method, KeyboardInterrupt)
    with pytest.raises(KeyboardInterrupt):
        with View(m, k, AccRead):
            pass
    s = m.stats()
    assert s["open_views"] == 0 and s["device_bytes"] == dev.allocated_bytes
    assert m.state(k) in (State.Empty, State.CpuDirty)
    with View(m, k, AccRead) as d:
        np.testing.assert_array_equal(d, host)


def test_a_free_that_fails_leaves_the_accounting_right():
    dev = FailingDevice()
    m = MemoryManager(dev, 128)
    keep1, k1, _ = field(m)
    keep2, k2, host2 = field(m)
    with View(m, k1, AccRead):
        pass
    dev.armed = ("free", RuntimeError)
    with pytest.raises(RuntimeError):
        with View(m, k2, AccRead):
            pass
    assert m.state(k1) is State.Empty and m.stats()["device_bytes"] == 0
    with View(m, k2, AccRead) as d:
        np.testing.assert_array_equal(d, host2)


# ---- leaked views --------------------------------------------------------------------

def test_open_views_are_counted_and_leaks_reported():
    m = emulated(10_000)
    keep1, k1, _ = field(m)
    keep2, k2, _ = field(m, 32)
    m.open(k1, CpuRead)
    m.open(k2, AccWrite)
    m.open(k2, AccWrite)
    s = m.stats()
    assert s["open_views"] == 3 and s["view_locked_bytes"] == 128 + 256
    assert s["locked_bytes"] == 256                       # only k2 holds a device buffer
    assert "3 open views on 384 bytes" in m.report()
    with pytest.warns(LeakedViewWarning) as got:
        assert m.warn_open_views() == 2
    text = " ".join(str(w.message) for w in got)
    assert f"field {k1} (128 bytes) still has 1 CPU view(s) (0 writing)" in text
    assert f"field {k2} (256 bytes) still has 2 accelerator view(s) (2 writing)" in text
    m.close(k1, CpuRead)
    m.close(k2, AccWrite)
    m.close(k2, AccWrite)
    assert m.stats()["open_views"] == m.stats()["view_locked_bytes"] == 0
    assert m.warn_open_views() == 0


def test_views_left_open_at_exit_are_reported():
    code = ("import pygrid as pg\n"
            "g = pg.GridCartesian([4, 4, 4, 4])\n"
            "f = pg.Lattice(g, pg.ColourVector())\n"
            "v = f.view(pg.CpuRead); v.__enter__()\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "LeakedViewWarning" in r.stderr and "still has 1 CPU view(s)" in r.stderr and "at exit" in r.stderr
