"""Consistency checks of the device cache's bookkeeping, shared by the fault-injection tests."""
from __future__ import annotations

from collections import Counter

from hypothesis import event, strategies as st

from pygrid.memory import Device, State


class InjectedError(RuntimeError):
    pass


class InjectedMemoryError(MemoryError):
    pass


class InjectedInterrupt(KeyboardInterrupt):
    pass


FAULTS = (InjectedError, InjectedMemoryError, InjectedInterrupt)
COUNT = Counter()                        # steps run and faults injected, per machine
injected_kinds = st.sampled_from(FAULTS)


def injected(exc):
    """Whether ``exc`` is an injected fault, or an error the library raised because of one."""
    while exc is not None:
        if isinstance(exc, FAULTS):
            return True
        exc = exc.__cause__
    return False


class FaultyDevice(Device):
    """Wraps a Device: records what it really did, and fails its n-th call once armed."""

    unified = False

    def __init__(self, inner):
        self.inner = inner
        self.name = inner.name
        self.host_memory = inner.host_memory
        self.countdown = 0
        self.kind = None
        self.after = False
        self.faults = 0
        self.h2d = self.d2h = 0          # bytes really copied
        self.h2d_n = self.d2h_n = 0
        self.allocs = 0
        self.held = 0                    # bytes the device holds (allocated, not freed)

    def arm(self, countdown, kind, after):
        self.countdown, self.kind, self.after = countdown, kind, after

    def _fault(self, what):
        if self.countdown:
            self.countdown -= 1
            if self.countdown == 0:
                self.faults += 1
                COUNT["faults"] += 1
                event(f"fault in {what}")
                raise self.kind(f"injected in {what}")

    # a call that raises "after" did its work, but its caller never learns of it: only the
    # calls that returned count as done (allocations, transfers); ``held`` is what the device holds
    def alloc(self, nbytes, dtype, shape):
        if not self.after:
            self._fault("alloc")
        buf = self.inner.alloc(nbytes, dtype, shape)
        self.held += nbytes
        if self.after:
            self._fault("alloc")
        self.allocs += 1
        return buf

    def free(self, array):
        if not self.after:
            self._fault("free")          # not freed: the device still holds it
        self.inner.free(array)
        self.held -= array.nbytes
        if self.after:
            self._fault("free")

    def to_device(self, host, dev):
        if not self.after:
            self._fault("copy to device")
        self.inner.to_device(host, dev)
        if self.after:
            self._fault("copy to device")
        self.h2d += host.nbytes
        self.h2d_n += 1

    def to_host(self, dev, host):
        if not self.after:
            self._fault("copy to host")
        self.inner.to_host(dev, host)
        if self.after:
            self._fault("copy to host")
        self.d2h += host.nbytes
        self.d2h_n += 1

    def __getattr__(self, name):         # extra_stats and the like of the inner device
        return getattr(self.inner, name)


def check_bookkeeping(mgr, device, open_views):
    """The manager's footprint, statistics and LRU lists against what the device really holds."""
    s = mgr.stats()
    infos = [mgr.entry_info(k) for k in list(mgr._entries)]
    on_device = sum(i["nbytes"] for i in infos if i["on_device"])
    assert s["device_bytes"] == on_device + s["pool_bytes"] <= s["watermark_bytes"]
    # a buffer whose free failed stays on the device, lost to the manager; nothing else does
    assert device.held >= s["device_bytes"]
    assert s["h2d_bytes"] == device.h2d and s["h2d_count"] == device.h2d_n
    assert s["d2h_bytes"] == device.d2h and s["d2h_count"] == device.d2h_n
    assert s["allocations"] == device.allocs
    views = sum(i["cpu_views"] + i["accelerator_views"] for i in infos)
    assert s["open_views"] == views == open_views
    assert s["view_locked_bytes"] == sum(i["nbytes"] for i in infos
                                         if i["cpu_views"] or i["accelerator_views"])
    assert s["locked_bytes"] == sum(i["nbytes"] for i in infos
                                    if i["on_device"] and (i["cpu_views"] or i["accelerator_views"]))
    unlocked = {i["key"] for i in infos if i["on_device"] and not (i["cpu_views"] or i["accelerator_views"])}
    assert sorted(mgr.lru_order()) == sorted(unlocked)
    for i in infos:
        assert (i["state"] is State.Empty) == (not i["on_device"]), i
