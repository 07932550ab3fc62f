"""Hypothesis state machine: the MemoryManager on the emulated device against a model.

The model is a deliberately naive re-statement of the contract (plain lists, O(n)
scans): per-field data, coherence state, reference counts, the two LRU lists, the
pool of freed buffers and the counters.  After every step the manager must agree
with it: the current data of every field, which fields are on the device, the
eviction order, the footprint (<= watermark) and every statistic.
"""

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, event, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from pygrid.errors import DeviceMemoryError
from pygrid.memory import (
    Advise,
    EmulatedDevice,
    LeakedViewWarning,
    MemoryManager,
    State,
    View,
    ViewConflictError,
    ViewMode,
    Views,
)

SIZES = (4, 8, 16)                 # float64 elements: 32, 64, 128 bytes
MODES = list(ViewMode)
CpuRead, CpuWrite = ViewMode.CpuRead, ViewMode.CpuWrite
AccRead, AccWrite = ViewMode.AcceleratorRead, ViewMode.AcceleratorWrite
AccDiscard = ViewMode.AcceleratorWriteDiscard


class RecordingDevice(EmulatedDevice):
    """Counts the transfers the device really performs, independently of the manager."""

    def __init__(self):
        super().__init__()
        self.h2d = []
        self.d2h = []

    def to_device(self, host, dev):
        assert host.shape == dev.shape and host is not dev
        self.h2d.append(host.nbytes)
        super().to_device(host, dev)

    def to_host(self, dev, host):
        assert host.shape == dev.shape and host is not dev
        self.d2h.append(host.nbytes)
        super().to_host(dev, host)


class Owner:
    """Stands for a Lattice: the object whose collection frees the field."""


class MEntry:
    def __init__(self, data):
        self.data = data
        self.nbytes = data.nbytes
        self.state = State.Empty
        self.dev = False
        self.cpu = self.acc = self.cpuw = self.accw = 0
        self.inf = False
        self.released = False
        self.shared = False


class Model:
    def __init__(self, watermark):
        self.wm = watermark
        self.entries = {}
        self.lru, self.lru_inf = [], []       # oldest first
        self.pool = []                        # nbytes of pooled buffers, oldest first
        self.live = self.poolb = 0
        self.stats = dict(h2d_bytes=0, h2d_count=0, d2h_bytes=0, d2h_count=0, evictions=0,
                          allocations=0, pool_hits=0, peak_device_bytes=0)

    def locked(self):
        return sum(e.nbytes for e in self.entries.values() if e.dev and (e.cpu or e.acc))

    def _unlru(self, key):
        for lst in (self.lru, self.lru_inf):
            if key in lst:
                lst.remove(key)

    def _d2h(self, e):
        self.stats["d2h_bytes"] += e.nbytes
        self.stats["d2h_count"] += 1

    def share(self, key):
        e = self.entries[key]
        if e.accw:
            return ViewConflictError
        if e.state is State.AcceleratorDirty:
            self._d2h(e)
            e.state = State.Consistent
        e.shared = True
        return None

    def _evict(self, key):
        e = self.entries[key]
        if e.state is State.AcceleratorDirty:
            self.stats["d2h_bytes"] += e.nbytes
            self.stats["d2h_count"] += 1
        e.state, e.dev = State.Empty, False
        self.live -= e.nbytes
        self.stats["evictions"] += 1

    def _make_room(self, over):
        while over > 0 and self.pool:
            n = self.pool.pop(0)
            self.poolb -= n
            over -= n
        while over > 0:
            key = (self.lru_inf or self.lru).pop(0)
            over -= self.entries[key].nbytes
            self._evict(key)

    def open(self, key, mode):
        """Apply an open; return the expected exception class instead if it must fail."""
        e = self.entries[key]
        if mode.accelerator:
            if (mode.write and e.cpu) or (not mode.write and e.cpuw):
                return ViewConflictError
            if not e.dev:
                if self.wm == 0:
                    return DeviceMemoryError
                if e.nbytes in self.pool:
                    idx = len(self.pool) - 1 - self.pool[::-1].index(e.nbytes)
                    del self.pool[idx]
                    self.poolb -= e.nbytes
                    self.stats["pool_hits"] += 1
                else:
                    over = self.live + self.poolb + e.nbytes - self.wm
                    if over > 0:
                        if self.locked() + e.nbytes > self.wm:
                            return DeviceMemoryError
                        self._make_room(over)
                    self.stats["allocations"] += 1
                    self.stats["peak_device_bytes"] = max(self.stats["peak_device_bytes"],
                                                          self.live + self.poolb + e.nbytes)
                self.live += e.nbytes
                e.dev, e.state = True, State.CpuDirty
            elif e.shared and e.state is State.Consistent and not e.acc:
                e.state = State.CpuDirty
            copy_in = e.state is State.CpuDirty and mode in (AccRead, AccWrite)
            if copy_in:
                self.stats["h2d_bytes"] += e.nbytes
                self.stats["h2d_count"] += 1
            if mode is AccRead:
                if copy_in:
                    e.state = State.Consistent
            else:
                e.state = State.AcceleratorDirty
            e.acc += 1
            e.accw += mode.write
        else:
            if (mode.write and e.acc) or (not mode.write and e.accw):
                return ViewConflictError
            if e.state is State.AcceleratorDirty:
                self.stats["d2h_bytes"] += e.nbytes
                self.stats["d2h_count"] += 1
                e.state = State.CpuDirty if mode.write else State.Consistent
            elif mode.write and e.state is State.Consistent:
                e.state = State.CpuDirty
            e.cpu += 1
            e.cpuw += mode.write
        self._unlru(key)
        return None

    def close(self, key, mode):
        e = self.entries[key]
        if mode.accelerator:
            if e.shared and mode.write and e.accw == 1 and e.state is State.AcceleratorDirty:
                self._d2h(e)
                e.state = State.Consistent
            e.acc -= 1
            e.accw -= mode.write
        else:
            e.cpu -= 1
            e.cpuw -= mode.write
        if e.cpu == 0 and e.acc == 0:
            if e.released:
                self._finish_release(key)
            elif e.dev:
                (self.lru_inf if e.inf else self.lru).append(key)

    def abort(self, key, mode, prior):
        """Close a view whose block raised: a write view's state change is undone where the contents
        before it survive in the other memory (the module docstring's "Failures")."""
        e = self.entries[key]
        if mode.write and e.dev:
            if mode.accelerator:
                if e.accw == 1 and prior is not State.AcceleratorDirty and e.state is State.AcceleratorDirty:
                    e.state = State.CpuDirty
            elif e.cpuw == 1 and prior in (State.AcceleratorDirty, State.Consistent):
                e.state = State.AcceleratorDirty
        self.close(key, mode)

    def _finish_release(self, key):
        e = self.entries.pop(key)
        self._unlru(key)
        if e.dev:
            self.pool.append(e.nbytes)
            self.live -= e.nbytes
            self.poolb += e.nbytes

    def release(self, key):
        e = self.entries[key]
        if e.released:
            return
        e.released = True
        if e.cpu == 0 and e.acc == 0:
            self._finish_release(key)

    def advise(self, key, advice):
        e = self.entries[key]
        inf = advice is Advise.InfrequentUse
        if inf != e.inf:
            was_in = key in self.lru or key in self.lru_inf
            self._unlru(key)
            e.inf = inf
            if was_in:
                (self.lru_inf if inf else self.lru).append(key)

    def set_watermark(self, wm):
        if self.locked() > wm:
            return DeviceMemoryError
        over = self.live + self.poolb - wm
        if over > 0:
            self._make_room(over)
        self.wm = wm
        return None


class CacheMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.device = RecordingDevice()
        self.mgr = MemoryManager(self.device, 256)
        self.model = Model(256)
        self.owners = {}            # key -> Owner, for fields freed by garbage collection
        self.views = []             # open (key, mode) pairs
        self.shared = {}            # key -> host array handed out by share_host
        self.rng = np.random.default_rng(0)

    # ---------------------------------------------------------------- helpers
    def live_keys(self):
        return sorted(k for k, e in self.model.entries.items() if not e.released)

    def fresh(self, shape):
        return self.rng.integers(-50, 50, size=shape).astype(np.float64)

    def do_open(self, key, mode):
        """Open in manager and model; returns the array or None if it (correctly) failed."""
        evictions, hits = self.model.stats["evictions"], self.model.stats["pool_hits"]
        expected = self.model.open(key, mode)
        if expected is not None:
            event(f"open refused: {expected.__name__}")
            with pytest.raises(expected):
                self.mgr.open(key, mode)
            return None
        if self.model.stats["evictions"] > evictions:
            event("open evicted")
        if self.model.stats["pool_hits"] > hits:
            event("pool hit")
        return self.mgr.open(key, mode)

    def do_close(self, key, mode):
        self.mgr.close(key, mode)
        self.model.close(key, mode)

    # ------------------------------------------------------------------ rules
    @rule(size=st.sampled_from(SIZES), advise=st.booleans())
    def create(self, size, advise):
        data = self.fresh(size)
        owner = Owner()
        key = self.mgr.register(owner, data.copy())
        self.owners[key] = owner
        self.model.entries[key] = MEntry(data)
        if advise:
            self.mgr.advise(key, Advise.InfrequentUse)
            self.model.advise(key, Advise.InfrequentUse)

    @precondition(lambda self: self.live_keys())
    @rule(data=st.data(), mode=st.sampled_from(MODES), keep_open=st.booleans())
    def open_view(self, data, mode, keep_open):
        key = data.draw(st.sampled_from(self.live_keys()))
        arr = self.do_open(key, mode)
        if arr is None:
            return
        m = self.model.entries[key]
        if mode is AccWrite:
            # a kernel that writes only part: the rest must have been copied in
            value = float(self.rng.integers(100, 200))
            arr.flat[0] = value
            m.data = m.data.copy()
            m.data.flat[0] = value
        elif mode.write:                    # CpuWrite, AcceleratorWriteDiscard: full write
            new = self.fresh(m.data.shape)
            arr[...] = new
            m.data = new
        if keep_open:
            self.views.append((key, mode))
        else:
            self.do_close(key, mode)

    @precondition(lambda self: self.views)
    @rule(data=st.data())
    def close_view(self, data):
        idx = data.draw(st.integers(0, len(self.views) - 1))
        key, mode = self.views.pop(idx)
        self.do_close(key, mode)

    @precondition(lambda self: self.live_keys())
    @rule(data=st.data())
    def read_through_view(self, data):
        key = data.draw(st.sampled_from(self.live_keys()))
        expected = self.model.open(key, CpuRead)
        if expected is not None:
            with pytest.raises(expected):
                with View(self.mgr, key, CpuRead):
                    pass
            return
        with View(self.mgr, key, CpuRead) as arr:
            np.testing.assert_array_equal(arr, self.model.entries[key].data)
        self.model.close(key, CpuRead)

    @precondition(lambda self: self.live_keys())
    @rule(data=st.data(), discard=st.booleans())
    def kernel(self, data, discard):
        dst = data.draw(st.sampled_from(self.live_keys()))
        nbytes = self.model.entries[dst].nbytes
        same = [k for k in self.live_keys() if self.model.entries[k].nbytes == nbytes]
        srcs = data.draw(st.lists(st.sampled_from(same), min_size=1, max_size=3))
        plan = [(k, AccRead) for k in srcs] + [(dst, AccDiscard if discard else AccWrite)]
        opened = []
        for key, mode in plan:
            arr = self.do_open(key, mode)
            if arr is None:
                break
            opened.append((key, mode, arr))
        else:
            total = opened[0][2].copy()
            model_total = self.model.entries[srcs[0]].data.copy()
            for (key, _, arr) in opened[1:-1]:
                total = total + arr
                model_total = model_total + self.model.entries[key].data
            opened[-1][2][...] = total
            self.model.entries[dst].data = model_total
        for key, mode, _ in reversed(opened):
            self.do_close(key, mode)

    @precondition(lambda self: self.live_keys())
    @rule(data=st.data(), fail=st.booleans())
    def open_together(self, data, fail):
        """Several views opened as one (memory.Views): all of them or, when one is refused, none;
        a block that raises closes the write views as View does (abort)."""
        keys = data.draw(st.lists(st.sampled_from(self.live_keys()), min_size=1, max_size=4))
        modes = [data.draw(st.sampled_from(MODES)) for _ in keys]
        opened, priors, refused = [], [], None
        for key, mode in zip(keys, modes):
            priors.append(self.model.entries[key].state)
            refused = self.model.open(key, mode)
            if refused is not None:
                break
            opened.append((key, mode))
        views = Views([(self.mgr, k, m) for k, m in zip(keys, modes)])
        if refused is not None:
            event(f"views refused: {refused.__name__}")
            for (key, mode), prior in zip(reversed(opened), reversed(priors[:len(opened)])):
                self.model.abort(key, mode, prior)
            with pytest.raises(refused):
                with views:
                    raise AssertionError("the block ran with part of its views")
            return
        if fail:
            with pytest.raises(RuntimeError, match="the block failed"):
                with views:
                    raise RuntimeError("the block failed")
            for (key, mode), prior in zip(reversed(opened), reversed(priors)):
                self.model.abort(key, mode, prior)
            return
        discarded = {k for k, m in opened if m is AccDiscard}
        with views as arrays:
            assert len(arrays) == len(opened)
            for (key, _), arr in zip(opened, arrays):
                if key not in discarded:
                    np.testing.assert_array_equal(arr, self.model.entries[key].data)
            written = {key: arr for (key, mode), arr in zip(opened, arrays) if mode.write}
            for key, arr in written.items():
                new = self.fresh(arr.shape)
                arr[...] = new
                self.model.entries[key].data = new
        for key, mode in reversed(opened):
            self.model.close(key, mode)

    @precondition(lambda self: self.live_keys())
    @rule(data=st.data(), write=st.booleans())
    def sweep(self, data, write):
        """Touch every field on the device in a random order (one short kernel each)."""
        keys = data.draw(st.permutations(self.live_keys()))
        mode = AccWrite if write else AccRead
        for key in keys:
            arr = self.do_open(key, mode)
            if arr is not None:
                if write:
                    arr *= 2
                    self.model.entries[key].data = self.model.entries[key].data * 2
                self.do_close(key, mode)

    @precondition(lambda self: self.live_keys())
    @rule(data=st.data())
    def share_host(self, data):
        key = data.draw(st.sampled_from(self.live_keys()))
        expected = self.model.share(key)
        if expected is not None:
            with pytest.raises(expected):
                self.mgr.share_host(key)
            return
        event("host shared")
        self.shared[key] = self.mgr.share_host(key)

    def shared_keys(self):
        return [k for k in self.live_keys() if k in self.shared]

    @precondition(lambda self: self.shared_keys())
    @rule(data=st.data())
    def write_shared_host(self, data):
        """Another library writes the shared host array between pygrid's views."""
        key = data.draw(st.sampled_from(self.shared_keys()))
        e = self.model.entries[key]
        if e.cpu or e.acc:
            return
        event("shared host written")
        new = self.fresh(e.data.shape)
        self.shared[key][...] = new
        e.data = new

    @precondition(lambda self: self.owners)
    @rule(data=st.data(), prefer_open=st.booleans())
    def free_by_gc(self, data, prefer_open):
        candidates = sorted(self.owners)
        busy = [k for k in candidates if k in {key for key, _ in self.views}]
        key = data.draw(st.sampled_from(busy if prefer_open and busy else candidates))
        if self.model.entries[key].cpu or self.model.entries[key].acc:
            event("freed with open views")
        del self.owners[key]                # no cycle: its finalizer runs now, as a collection would
        self.model.release(key)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self.mgr.stats()                # drains the finalizer queue
        leaked = [w for w in caught if issubclass(w.category, LeakedViewWarning)]
        assert len(leaked) == (1 if self.model.entries.get(key) else 0)

    @precondition(lambda self: self.live_keys())
    @rule(data=st.data())
    def release_explicitly(self, data):
        key = data.draw(st.sampled_from(self.live_keys()))
        self.mgr.release(key)
        self.model.release(key)
        self.owners.pop(key, None)          # finalizer was detached: collecting does nothing

    @precondition(lambda self: self.live_keys())
    @rule(data=st.data(), advice=st.sampled_from(list(Advise)))
    def advise(self, data, advice):
        key = data.draw(st.sampled_from(self.live_keys()))
        self.mgr.advise(key, advice)
        self.model.advise(key, advice)

    @rule(wm=st.one_of(st.just(0), st.integers(0, 600), st.sampled_from([32, 64, 128, 256])))
    def set_watermark(self, wm):
        evictions = self.model.stats["evictions"]
        expected = self.model.set_watermark(wm)
        if self.model.stats["evictions"] > evictions:
            event("set_watermark evicted")
        if expected is not None:
            before = self.mgr.stats()
            with pytest.raises(expected, match="locked by open views"):
                self.mgr.set_watermark(wm)
            assert self.mgr.stats() == before
        else:
            self.mgr.set_watermark(wm)

    # ------------------------------------------------------------- invariants
    @invariant()
    def agrees_with_model(self):
        s = self.mgr.stats()
        model = self.model
        # footprint and watermark
        assert s["device_bytes"] == model.live + model.poolb
        assert s["device_bytes"] <= s["watermark_bytes"] == model.wm
        assert s["pool_bytes"] == model.poolb
        assert s["locked_bytes"] == model.locked()
        assert self.device.allocated_bytes == s["device_bytes"]
        # statistics add up, and match the transfers the device really did
        for name, value in model.stats.items():
            assert s[name] == value, name
        assert s["h2d_bytes"] == sum(self.device.h2d) and s["h2d_count"] == len(self.device.h2d)
        assert s["d2h_bytes"] == sum(self.device.d2h) and s["d2h_count"] == len(self.device.d2h)
        assert s["entries"] == len(model.entries)
        # eviction order: InfrequentUse first, least recently used first
        assert self.mgr.lru_order() == model.lru_inf + model.lru
        # per field: data, state, residency
        for key, e in model.entries.items():
            info = self.mgr.entry_info(key)
            assert info["released"] == e.released
            assert info["state"] is e.state, (key, info, e.state)
            assert info["on_device"] == e.dev
            assert (info["cpu_views"], info["accelerator_views"]) == (e.cpu, e.acc)
            if not e.released:
                np.testing.assert_array_equal(self.mgr.peek(key), e.data)

    def teardown(self):
        # close everything still open; every field's data must still read back
        for key, mode in reversed(self.views):
            self.do_close(key, mode)
        for key in self.live_keys():
            with View(self.mgr, key, CpuRead) as arr:
                np.testing.assert_array_equal(arr, self.model.entries[key].data)


CacheMachine.TestCase.settings = settings(
    max_examples=40, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestCacheMachine = CacheMachine.TestCase
