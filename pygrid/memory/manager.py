"""The software device cache: Grid's MemoryManager (MemoryManagerCache.cc) for pygrid.

Every field owns a C-contiguous numpy host array and is registered once with
:meth:`MemoryManager.register`, which returns an integer key.  Views are opened
with an intent (:class:`~pygrid.memory.modes.ViewMode`) and closed again; the
manager keeps at most one device buffer per field and moves whole buffers as the
coherence state requires:

=========================  =====================  =============================
intent                     copies                 new state
=========================  =====================  =============================
CpuRead                    d2h if AcceleratorDirty  Consistent if it copied, else unchanged
CpuWrite                   d2h if AcceleratorDirty  CpuDirty (Empty stays Empty)
AcceleratorRead            h2d if Empty/CpuDirty  Consistent if it copied, else unchanged
AcceleratorWrite           h2d if Empty/CpuDirty  AcceleratorDirty
AcceleratorWriteDiscard    never                  AcceleratorDirty
=========================  =====================  =============================

(``Empty`` means "no device buffer"; the host array is then current.)

Conflicting views of one field are refused with :class:`ViewConflictError`, on
every device so that a program behaves the same everywhere: a write view on one
side (CPU / accelerator) while any view is open on the other side, or a read view
while a write view is open on the other side.  Any number of views on the same
side may be open together (a kernel may read and write the same field).

LRU and eviction
    Entries that hold a device buffer and have no open view sit in one of two
    ``OrderedDict`` LRU lists (Normal and InfrequentUse); opening the first view
    removes the entry (it is locked), closing the last view re-inserts it as most
    recently used.  Every operation is O(1).  When an allocation would push the
    device footprint over the watermark, the pool of freed buffers is trimmed
    first (oldest first, they hold no data), then InfrequentUse entries are evicted
    least recently used first, then Normal entries; AcceleratorDirty victims are
    copied back to the host first.  Whether enough room can be made is checked
    before anything is touched, so a :class:`DeviceMemoryError` leaves every entry
    exactly as it was.

Pool (documented choice)
    The device buffer of a released field goes to a pool keyed by
    ``(nbytes, dtype)``; an allocation of the same key takes the most recently
    pooled buffer (a "pool hit", no device allocation).  Pooled buffers *count
    toward the device footprint* (they are real device memory) and are trimmed,
    oldest first, before any live entry is evicted.  ``device_bytes`` therefore is
    live buffers + pool, and the pool can never hold more than the watermark.
    Evicted buffers are freed, not pooled (eviction is there to make room).

Releasing a field with open views (documented choice)
    :meth:`release` (explicit, or the ``weakref.finalize`` of the owner) of an
    entry that still has open views is *deferred*: the entry is marked released,
    new opens of it raise ``KeyError``, the open views stay valid, and the device
    buffer goes to the pool when the last view is closed.

Garbage collection
    The owner's finalizer only appends the key to a queue (a finalizer can run in
    the middle of a manager operation, when the gc triggers on an allocation);
    the queue is drained at the start of the next ``register``, ``open``,
    ``release``, ``advise``, ``set_watermark``, ``stats`` and ``report``.

Failures (documented choice)
    Every operation that calls the device (allocation, copy, free) leaves the
    bookkeeping consistent when that call raises, KeyboardInterrupt included: an
    eviction copies its victim back before taking it off the LRU list, and an open
    changes the coherence state only after its copy succeeded.  A write view whose
    ``with`` block raises is closed by :meth:`abort`, which undoes the state change of
    its open where the previous contents survive in the other memory: an accelerator
    write view of a field whose host copy was current leaves the host copy current
    (the device buffer, perhaps half written, is stale), and a CPU write view of a
    field with a device buffer makes that buffer current again.  What cannot be undone
    is a write into the only current copy: an accelerator write view of an
    AcceleratorDirty field, a CPU write view of a field without a device buffer, and
    any write on a unified device.  The caller avoids those by failing before it
    writes (compile first, launch last).  A Ctrl-C (SIGINT) that arrives during an
    operation is deferred to its end (:mod:`pygrid.memory.interrupts`); an open it
    interrupts is undone, so no view is left open that nobody holds, and one that
    arrives as an open returns is raised by the next operation (at the latest, the
    close of that view).

Leaked views
    A field collected while views of it are open, and views still open at exit,
    are reported with a :class:`LeakedViewWarning` naming the field and its open
    views; ``stats()`` counts the open views and the bytes they lock.

Shared host memory
    :meth:`share_host` hands a field's host array out (``Lattice.__dlpack__``): someone
    else may read or write it between pygrid's views.  The manager then keeps the host
    array current whenever no accelerator write view is open (the close of the last one
    copies the device buffer back) and copies it in again at the next accelerator open.

Unified devices (``device.unified``) never allocate, copy, count or evict: the
accelerator view is the host array, and only the view reference counts (and the
conflict checks) are kept.

The manager is not thread-safe (kernels are launched from one Python thread).
"""

import math
import warnings
import weakref
from collections import OrderedDict

import numpy as np

from ..config import DEFAULT_DEVICE_MEM_MB
from ..errors import ConfigError, DeviceMemoryError, PyGridError, ShapeError
from . import interrupts
from .devices import UnifiedDevice, make_device
from .interrupts import deferred as _deferred
from .modes import Advise, State, ViewMode

__all__ = ["MemoryManager", "KeptLaunch", "ViewConflictError", "LeakedViewWarning", "MB"]

MB = 1024 * 1024

_Empty = State.Empty
_CpuDirty = State.CpuDirty
_AccDirty = State.AcceleratorDirty
_Consistent = State.Consistent
_CpuRead = ViewMode.CpuRead
_AccRead = ViewMode.AcceleratorRead
_AccWrite = ViewMode.AcceleratorWrite

_NOT_IN_LRU, _IN_NORMAL, _IN_INFREQUENT = 0, 1, 2


class ViewConflictError(PyGridError, RuntimeError):
    """A view whose intent conflicts with a view already open on the other side."""


interrupts.defer_in(__file__)
_MANAGERS = weakref.WeakSet()


def live_managers():
    """Every MemoryManager not yet collected."""
    return list(_MANAGERS)


class LeakedViewWarning(UserWarning):
    """A view left open: its field is locked (never evicted, never freed) until it is closed."""


def _uninterrupted(method):
    """Run a manager operation with Ctrl-C deferred to its end (see :mod:`.interrupts`)."""
    def run(self, *args):
        _deferred.depth += 1
        try:
            return method(self, *args)
        finally:
            _deferred.depth -= 1
            if _deferred.pending and not _deferred.depth:
                interrupts.fire()
    run.__name__, run.__qualname__, run.__doc__ = method.__name__, method.__qualname__, method.__doc__
    return run


def _mb(nbytes):
    return nbytes / MB


class _Entry:
    __slots__ = ("key", "host", "dev", "nbytes", "dtype", "shape", "state", "cpu_refs",
                 "acc_refs", "cpu_writers", "acc_writers", "infrequent", "lru",
                 "released", "finalizer", "writes", "shared")

    def __init__(self, key, host):
        self.key = key
        self.host = host
        self.dev = None
        self.nbytes = host.nbytes
        self.dtype = host.dtype
        self.shape = host.shape
        self.state = _Empty
        self.cpu_refs = 0
        self.acc_refs = 0
        self.cpu_writers = 0
        self.acc_writers = 0
        self.infrequent = False
        self.lru = _NOT_IN_LRU
        self.released = False
        self.finalizer = None
        self.writes = 0
        self.shared = False       # host buffer handed out (DLPack): kept current between views


class MemoryManager:
    """Software cache of field buffers on a device, under a high watermark.

    ``device`` is a Device or a device name ('unified', 'emulated', ...);
    ``watermark_bytes`` the most device memory the cache may hold (live buffers
    plus pool).  A watermark of 0 makes every accelerator open fail on a
    non-unified device.
    """

    def __init__(self, device=None, watermark_bytes=DEFAULT_DEVICE_MEM_MB * MB):
        interrupts.install()
        self.device = UnifiedDevice() if device is None else make_device(device)
        self._unified = bool(self.device.unified)
        self._watermark = self._check_watermark(watermark_bytes)
        self._entries = {}
        self._next_key = 1
        self._freed = []                      # keys queued by finalizers
        self._lru = OrderedDict()             # Normal, unlocked, on device; oldest first
        self._lru_inf = OrderedDict()         # InfrequentUse, unlocked, on device
        self._pool = {}                       # (nbytes, dtype.str) -> OrderedDict id -> buf
        self._pool_order = OrderedDict()      # id(buf) -> ((nbytes, dtype.str), buf)
        self._live_bytes = 0                  # device buffers owned by entries
        self._evictable_bytes = 0             # ... of which in an LRU list
        self._pool_bytes = 0
        self._peak = 0
        _MANAGERS.add(self)
        self._open_views = 0                  # views open now, on either side
        self._view_bytes = 0                  # bytes of the fields those views hold
        # changes with every step that can make an inline open refuse (``_unified_entries``): a CPU
        # view opened, a field released, a host buffer shared; a KeptLaunch checked at this value
        # needs no check again
        self._epoch = 0
        self.reset_stats()

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _check_watermark(nbytes):
        try:
            value = int(nbytes)
        except (TypeError, ValueError):
            raise ConfigError(f"device memory watermark must be an integer number of bytes, "
                              f"not {nbytes!r}") from None
        if value < 0 or value != nbytes:
            raise ConfigError(f"device memory watermark must be a non-negative integer, "
                              f"not {nbytes!r}")
        return value

    def _get(self, key):
        e = self._entries.get(key)
        if e is None or e.released:
            raise KeyError(f"no live field with memory key {key!r} (never registered or released)")
        return e

    def _drain(self):
        freed = self._freed
        while freed:
            key = freed.pop()
            if key in self._entries:
                self._release_one(key)

    @property
    def watermark_bytes(self):
        return self._watermark

    @property
    def device_bytes(self):
        """Current device footprint: live entry buffers plus the pool."""
        return self._live_bytes + self._pool_bytes

    # ------------------------------------------------------------ registration
    @_uninterrupted
    def register(self, owner, host_array):
        """Register a field's host array; returns its integer key.

        When ``owner`` (any weak-referenceable object, typically the Lattice) is
        garbage collected the entry is released as by :meth:`release`.  ``owner``
        may be None, then only an explicit :meth:`release` frees the entry.
        """
        if self._freed:
            self._drain()
        if not isinstance(host_array, np.ndarray):
            raise ShapeError(f"register needs a numpy array, not {type(host_array).__name__}")
        if not host_array.flags.c_contiguous:
            raise ShapeError("register needs a C-contiguous host array")
        key = self._next_key
        self._next_key += 1
        e = _Entry(key, host_array)
        if self._unified:
            e.state = _Consistent
        if owner is not None:
            e.finalizer = weakref.finalize(owner, self._freed.append, key)
            e.finalizer.atexit = False
        self._entries[key] = e
        return key

    @_uninterrupted
    def release(self, key):
        """Free the entry of ``key``: its device buffer goes to the pool.

        With views still open the release is deferred until the last one closes
        (new opens raise KeyError meanwhile).  Releasing an unknown or already
        released key does nothing.
        """
        if self._freed:
            self._drain()
        self._release_one(key)

    def _release_one(self, key):
        e = self._entries.get(key)
        if e is None or e.released:
            return
        e.released = True
        self._epoch += 1
        collected = e.finalizer is not None and not e.finalizer.alive
        if e.finalizer is not None:
            e.finalizer.detach()
            e.finalizer = None
        if e.cpu_refs == 0 and e.acc_refs == 0:
            self._finish_release(e)
        elif collected:
            warnings.warn(f"field {e.key} was collected with {self._describe_views(e)} open: its "
                          f"{e.nbytes} bytes stay locked until they are closed (a view opened "
                          f"without `with`, never closed?)", LeakedViewWarning, stacklevel=4)

    def _finish_release(self, e):
        del self._entries[e.key]
        self._lru_remove(e)
        dev = e.dev
        if dev is not None:
            pk = (e.nbytes, e.dtype.str)
            bucket = self._pool.get(pk)
            if bucket is None:
                bucket = self._pool[pk] = OrderedDict()
            bucket[id(dev)] = dev
            self._pool_order[id(dev)] = (pk, dev)
            self._live_bytes -= e.nbytes
            self._pool_bytes += e.nbytes
            e.dev = None
        e.host = None
        e.state = _Empty

    # --------------------------------------------------------------------- LRU
    def _lru_remove(self, e):
        where = e.lru
        if where:
            if where == _IN_NORMAL:
                del self._lru[e.key]
            else:
                del self._lru_inf[e.key]
            e.lru = _NOT_IN_LRU
            self._evictable_bytes -= e.nbytes

    def _lru_insert(self, e):
        if e.infrequent:
            self._lru_inf[e.key] = e
            e.lru = _IN_INFREQUENT
        else:
            self._lru[e.key] = e
            e.lru = _IN_NORMAL
        self._evictable_bytes += e.nbytes

    def lru_order(self):
        """Keys in the order they would be evicted (InfrequentUse first, LRU first)."""
        return list(self._lru_inf) + list(self._lru)

    # -------------------------------------------------------------- open/close
    def write_count(self, key):
        """How many write views of ``key`` have been opened: when it changes, the contents may have
        changed."""
        return self._get(key).writes

    def open(self, key, mode):
        """Open a view of ``key`` with intent ``mode``; returns the array to use.

        Cpu modes return the host array, Accelerator modes the device array (the
        host array itself on a unified device).  Every open must be matched by a
        :meth:`close` with the same mode.  Raises DeviceMemoryError when the device
        buffer cannot be made to fit under the watermark, ViewConflictError for a
        conflicting intent, KeyError for an unknown or released key.
        """
        d = _deferred
        d.depth += 1
        try:
            prior = self.prior_state(key) if mode.write else None
            array = self._open(key, mode)
            if d.pending and d.depth == 1:
                # Ctrl-C while opening, and nobody holds the view yet: undo it, then stop
                self.abort(key, mode, prior)
                interrupts.fire()
            return array
        finally:
            d.depth -= 1

    def _open(self, key, mode):
        if self._freed:
            self._drain()
        e = self._entries.get(key)
        if e is None or e.released:
            self._get(key)
        if mode.write:
            e.writes += 1
        if mode.accelerator:
            if mode.write:
                if e.cpu_refs:
                    raise self._conflict(e, mode)
            elif e.cpu_writers:
                raise self._conflict(e, mode)
            if self._unified:
                self._lock(e)
                e.acc_refs += 1
                if mode.write:
                    e.acc_writers += 1
                return e.host
            if e.dev is None:
                self._allocate(e)              # may raise; nothing changed then
                e.state = _CpuDirty
                if not (e.cpu_refs or e.acc_refs):
                    self._lru_insert(e)        # evictable until locked below, should the copy fail
            elif e.shared and e.state is _Consistent and not e.acc_refs:
                e.state = _CpuDirty            # whoever holds the host buffer may have written it
            state = e.state
            if mode is _AccRead:
                if state is _CpuDirty:
                    self._h2d(e)
                    e.state = _Consistent
            else:
                if state is _CpuDirty and mode is _AccWrite:
                    self._h2d(e)
                e.state = _AccDirty
            if e.lru:
                self._lru_remove(e)
            self._lock(e)
            e.acc_refs += 1
            if mode.write:
                e.acc_writers += 1
            return e.dev
        # CPU side
        if mode.write:
            if e.acc_refs:
                raise self._conflict(e, mode)
            if e.state is _AccDirty:
                self._d2h(e)
                e.state = _CpuDirty
            elif e.state is _Consistent and not self._unified:
                e.state = _CpuDirty
            e.cpu_writers += 1
        else:
            if e.acc_writers:
                raise self._conflict(e, mode)
            if e.state is _AccDirty:
                self._d2h(e)
                e.state = _Consistent
        if e.lru:
            self._lru_remove(e)
        self._lock(e)
        e.cpu_refs += 1
        self._epoch += 1
        return e.host

    def _lock(self, e):
        self._open_views += 1
        if e.cpu_refs == 0 and e.acc_refs == 0:
            self._view_bytes += e.nbytes

    def close(self, key, mode):
        """Close a view opened with :meth:`open`; the last close unlocks the entry."""
        d = _deferred                            # _uninterrupted, inlined (hot path)
        d.depth += 1
        try:
            self._close(key, mode)
        finally:
            d.depth -= 1
            if d.pending and not d.depth:
                interrupts.fire()

    def _close(self, key, mode):
        e = self._entries.get(key)
        if e is None:
            raise KeyError(f"no field with memory key {key!r}")
        if mode.accelerator:
            if e.acc_refs <= 0 or (mode.write and e.acc_writers <= 0):
                raise ValueError(f"close({key}, {mode.name}) without a matching open")
            if e.shared and mode.write and e.acc_writers == 1 and e.state is _AccDirty:
                self._d2h(e)                   # may raise: the view stays open, as before the close
                e.state = _Consistent
            e.acc_refs -= 1
            if mode.write:
                e.acc_writers -= 1
        else:
            if e.cpu_refs <= 0 or (mode.write and e.cpu_writers <= 0):
                raise ValueError(f"close({key}, {mode.name}) without a matching open")
            e.cpu_refs -= 1
            if mode.write:
                e.cpu_writers -= 1
        self._open_views -= 1
        if e.cpu_refs == 0 and e.acc_refs == 0:
            self._view_bytes -= e.nbytes
            if e.released:
                self._finish_release(e)
            elif e.dev is not None:               # _lru_insert, inlined (hot path)
                if e.infrequent:
                    self._lru_inf[key] = e
                    e.lru = _IN_INFREQUENT
                else:
                    self._lru[key] = e
                    e.lru = _IN_NORMAL
                self._evictable_bytes += e.nbytes

    def run_unified(self, views, buffers, fn):
        """Accelerator views of a unified device opened, ``fn(buffers)`` run and the views closed,
        as ``memory.Views.run_on`` does through :meth:`open` and :meth:`close`; None, with nothing
        done, where that path has more to do or something to report: another device, a release or
        a conflict pending, a host buffer handed out (:meth:`share_host`), or a view that would not
        give ``buffers[i]``.

        ``views``: (key, write) pairs.  On a unified device an open and a close are the view
        counts and the conflict checks alone, so here they are inline: a kept Dirac call at 8^4
        spent 5-6 us in the general path, the caches full of the fields its kernel had streamed,
        against 2 us in a loop of opens alone.  A block that raises closes its views as the
        general path does (abort on a unified device is close)."""
        es = self._unified_entries(views, buffers)
        if es is None:
            return None
        n = len(es)
        d = _deferred
        d.depth += 1
        try:
            for i in range(n):
                e = es[i]
                if e.cpu_refs == 0 and e.acc_refs == 0:
                    self._view_bytes += e.nbytes
                e.acc_refs += 1
                if views[i][1]:
                    e.writes += 1
                    e.acc_writers += 1
            self._open_views += n
            if d.pending and d.depth == 1:
                self._close_unified(views, es)
                interrupts.fire()
        finally:
            d.depth -= 1
        try:
            fn(buffers)
        finally:
            d.depth += 1
            try:
                self._close_unified(views, es)
            finally:
                d.depth -= 1
                if d.pending and not d.depth:
                    interrupts.fire()
        return True

    def kept_launch(self, views, buffers, launch):
        """A :class:`KeptLaunch`: ``launch()`` on ``buffers``, the buffers of ``views`` ((key, write)
        pairs of accelerator views) on this unified device, for a caller that runs it again."""
        return KeptLaunch(self, views, buffers, launch)

    def _unified_entries(self, views, buffers):
        """The entries of ``views`` ((key, write) pairs) where each opens on the inline paths as it
        would on the general one, giving ``buffers[i]``; None where the general path must run."""
        if not self._unified or self._freed:
            return None
        entries = self._entries
        es = [None] * len(views)
        for i in range(len(views)):
            key, write = views[i]
            e = entries.get(key)
            if (e is None or e.released or e.shared or e.host is not buffers[i]
                    or (e.cpu_refs if write else e.cpu_writers)):
                return None
            es[i] = e
        return es

    def _close_unified(self, views, es):
        for i in range(len(es) - 1, -1, -1):
            e = es[i]
            e.acc_refs -= 1
            if views[i][1]:
                e.acc_writers -= 1
            if e.cpu_refs == 0 and e.acc_refs == 0:
                self._view_bytes -= e.nbytes
                if e.released:
                    self._finish_release(e)
        self._open_views -= len(es)

    @_uninterrupted
    def abort(self, key, mode, prior):
        """Close a view whose block raised; ``prior`` is the field's State before the view was opened.

        A write view's open is undone where the contents before it survive in the other memory
        (see "Failures" in the module docstring); other views are closed as by :meth:`close`.
        """
        e = self._entries.get(key)
        if e is not None and mode.write and not self._unified and e.dev is not None:
            if mode.accelerator:
                if e.acc_writers == 1 and prior is not _AccDirty and e.state is _AccDirty:
                    e.state = _CpuDirty
            elif e.cpu_writers == 1 and prior in (_AccDirty, _Consistent):
                e.state = _AccDirty
        self.close(key, mode)

    @_uninterrupted
    def share_host(self, key):
        """Hand the host array of ``key`` out for others to read and write at any time (DLPack).

        From now on the host array is current whenever no accelerator write view is open:
        the close of the last accelerator write view copies the device buffer back, and an
        accelerator open copies the host array in again.  Permanent for the entry's life.
        Returns the host array.
        """
        if self._freed:
            self._drain()
        e = self._get(key)
        if e.acc_writers:
            raise ViewConflictError(f"field {key}: cannot share its host memory while "
                                    f"{self._describe_views(e)} are open")
        if e.state is _AccDirty:
            self._d2h(e)
            e.state = _Consistent
        e.shared = True
        self._epoch += 1
        return e.host

    def prior_state(self, key):
        """The State a view's :meth:`abort` needs: that of ``key`` now, or None if it is not live."""
        e = self._entries.get(key)
        return None if e is None or e.released else e.state

    def _describe_views(self, e):
        parts = []
        if e.cpu_refs:
            parts.append(f"{e.cpu_refs} CPU view(s) ({e.cpu_writers} writing)")
        if e.acc_refs:
            parts.append(f"{e.acc_refs} accelerator view(s) ({e.acc_writers} writing)")
        return " and ".join(parts)

    def open_views(self):
        """``(key, nbytes, description)`` of every field with a view open now."""
        return [(e.key, e.nbytes, self._describe_views(e)) for e in self._entries.values()
                if e.cpu_refs or e.acc_refs]

    def warn_open_views(self, when="at exit"):
        """Warn (LeakedViewWarning) about every view still open; returns how many fields have one."""
        leaks = self.open_views()
        for key, nbytes, views in leaks:
            warnings.warn(f"field {key} ({nbytes} bytes) still has {views} open {when}: it stays "
                          f"locked until they are closed", LeakedViewWarning, stacklevel=2)
        return len(leaks)

    def _conflict(self, e, mode):
        return ViewConflictError(
            f"cannot open a {mode.name} view of field {e.key}: it has {e.cpu_refs} CPU view(s) "
            f"({e.cpu_writers} writing) and {e.acc_refs} accelerator view(s) "
            f"({e.acc_writers} writing) open; close them first")

    # ---------------------------------------------------------------- transfers
    def _h2d(self, e):
        self.device.to_device(e.host, e.dev)
        self._h2d_bytes += e.nbytes
        self._h2d_count += 1

    def _d2h(self, e):
        self.device.to_host(e.dev, e.host)
        self._d2h_bytes += e.nbytes
        self._d2h_count += 1

    # ------------------------------------------------------- allocation/eviction
    def _oom(self, nbytes, what):
        locked = self._live_bytes - self._evictable_bytes
        wm = self._watermark
        need_mb = max(1, math.ceil((locked + nbytes) / MB))
        return DeviceMemoryError(
            f"device memory exhausted: {what} needs {nbytes} bytes ({_mb(nbytes):.2f} MB) on "
            f"the device, {locked} bytes ({_mb(locked):.2f} MB) are locked by open views, "
            f"and the watermark is {wm} bytes ({_mb(wm):.2f} MB); raise --device-mem to at "
            f"least {need_mb} MB (currently {_mb(wm):g} MB)")

    def _allocate(self, e):
        nbytes = e.nbytes
        if self._watermark <= 0:
            raise self._oom(nbytes, f"field {e.key}")
        pk = (nbytes, e.dtype.str)
        bucket = self._pool.get(pk)
        if bucket:
            _, buf = bucket.popitem()           # most recently pooled
            if not bucket:
                del self._pool[pk]
            del self._pool_order[id(buf)]
            self._pool_bytes -= nbytes
            self._live_bytes += nbytes
            self._pool_hits += 1
            e.dev = buf if buf.shape == e.shape else buf.reshape(e.shape)
            return
        over = self._live_bytes + self._pool_bytes + nbytes - self._watermark
        if over > 0:
            if self._live_bytes - self._evictable_bytes + nbytes > self._watermark:
                raise self._oom(nbytes, f"field {e.key}")
            self._make_room(over)
        try:
            buf = self.device.alloc(nbytes, e.dtype, e.shape)
        except MemoryError as exc:
            if isinstance(exc, DeviceMemoryError):
                raise
            raise DeviceMemoryError(
                f"the device refused to allocate {nbytes} bytes for field {e.key} "
                f"(footprint {self.device_bytes} bytes under a watermark of "
                f"{self._watermark} bytes): lower --device-mem to what the device really "
                f"has") from exc
        e.dev = buf
        self._allocations += 1
        self._live_bytes += nbytes
        total = self._live_bytes + self._pool_bytes
        if total > self._peak:
            self._peak = total

    def _make_room(self, over):
        """Free ``over`` bytes: pool first (oldest), then InfrequentUse, then Normal LRU.

        The caller has checked that pool + evictable bytes suffice.
        """
        pool_order = self._pool_order
        while over > 0 and pool_order:
            _, (pk, buf) = pool_order.popitem(last=False)
            bucket = self._pool[pk]
            del bucket[id(buf)]
            if not bucket:
                del self._pool[pk]
            self._pool_bytes -= pk[0]
            over -= pk[0]
            self.device.free(buf)
        while over > 0:
            victim = next(iter((self._lru_inf if self._lru_inf else self._lru).values()))
            over -= victim.nbytes
            self._evict(victim)

    def _evict(self, e):
        """Free the device buffer of an unlocked entry; the copy back comes first, so a failing copy
        leaves the entry as it was (on the device, in its LRU list)."""
        if e.state is _AccDirty:
            self._d2h(e)
        self._lru_remove(e)
        dev = e.dev
        e.dev = None
        e.state = _Empty
        self._live_bytes -= e.nbytes
        self._evictions += 1
        self.device.free(dev)

    @_uninterrupted
    def set_watermark(self, watermark_bytes):
        """Change the watermark, evicting at once if the footprint is over it.

        If the entries locked by open views alone exceed the new watermark, raise
        DeviceMemoryError and change nothing.
        """
        if self._freed:
            self._drain()
        wm = self._check_watermark(watermark_bytes)
        if self._unified:
            self._watermark = wm
            return
        locked = self._live_bytes - self._evictable_bytes
        if locked > wm:
            need_mb = math.ceil(locked / MB)
            raise DeviceMemoryError(
                f"cannot lower the device watermark to {wm} bytes ({_mb(wm):.2f} MB): "
                f"{locked} bytes ({_mb(locked):.2f} MB) are locked by open views, 0 more "
                f"bytes needed; current watermark {self._watermark} bytes "
                f"({_mb(self._watermark):.2f} MB); keep --device-mem at least {need_mb} MB")
        over = self._live_bytes + self._pool_bytes - wm
        if over > 0:
            self._make_room(over)
        self._watermark = wm

    @_uninterrupted
    def trim_pool(self):
        """Free every pooled device buffer."""
        if self._pool_bytes:
            self._make_room(self._pool_bytes)

    # ------------------------------------------------------------------ advice
    @_uninterrupted
    def advise(self, key, advice):
        """Advise.InfrequentUse makes the entry a preferred victim; Advise.Normal undoes it."""
        if self._freed:
            self._drain()
        e = self._get(key)
        if not isinstance(advice, Advise):
            raise ConfigError(f"advise needs an Advise member, not {advice!r}")
        infrequent = advice is Advise.InfrequentUse
        if infrequent != e.infrequent:
            was_in = e.lru
            if was_in:
                self._lru_remove(e)
            e.infrequent = infrequent
            if was_in:
                self._lru_insert(e)

    # ------------------------------------------------------------ introspection
    def state(self, key):
        """The coherence State of ``key``."""
        return self._get(key).state

    def entry_info(self, key):
        """A dict describing the entry (for tests and debugging)."""
        e = self._entries.get(key)
        if e is None:
            raise KeyError(f"no field with memory key {key!r}")
        return {"key": e.key, "nbytes": e.nbytes, "state": e.state,
                "on_device": e.dev is not None, "cpu_views": e.cpu_refs,
                "accelerator_views": e.acc_refs, "cpu_writers": e.cpu_writers,
                "accelerator_writers": e.acc_writers,
                "advise": Advise.InfrequentUse if e.infrequent else Advise.Normal,
                "released": e.released, "shared": e.shared}

    def peek(self, key):
        """The array holding the current data, without transfer or state change.

        That is the device array when it holds the only current copy
        (AcceleratorDirty), else the host array.  For debugging and tests only:
        do not write through it.
        """
        e = self._get(key)
        return e.dev if e.state is _AccDirty and not self._unified else e.host

    def __contains__(self, key):
        e = self._entries.get(key)
        return e is not None and not e.released

    def __len__(self):
        return len(self._entries)

    # ------------------------------------------------------------------- stats
    def reset_stats(self):
        """Zero the transfer, eviction, allocation and pool-hit counters; peak := current."""
        self._h2d_bytes = self._h2d_count = 0
        self._d2h_bytes = self._d2h_count = 0
        self._evictions = self._allocations = self._pool_hits = 0
        self._peak = self._live_bytes + self._pool_bytes
        if hasattr(self.device, "reset_extra_stats"):
            self.device.reset_extra_stats()

    def stats(self):
        """Counters since the last reset_stats() and the current footprint."""
        if self._freed:
            self._drain()
        return {
            "h2d_bytes": self._h2d_bytes,
            "h2d_count": self._h2d_count,
            "d2h_bytes": self._d2h_bytes,
            "d2h_count": self._d2h_count,
            "evictions": self._evictions,
            "device_bytes": self._live_bytes + self._pool_bytes,
            "peak_device_bytes": self._peak,
            "entries": len(self._entries),
            "allocations": self._allocations,
            "pool_hits": self._pool_hits,
            "pool_bytes": self._pool_bytes,
            "locked_bytes": self._live_bytes - self._evictable_bytes,
            "open_views": self._open_views,
            "view_locked_bytes": self._view_bytes,
            "watermark_bytes": self._watermark,
            # a device may count what reached host memory outside the manager (a host
            # fallback of an operation that is not a device kernel on its backend)
            **(self.device.extra_stats() if hasattr(self.device, "extra_stats") else {}),
        }

    def report(self):
        """A Grid-style multi-line summary (printed at exit by --debug-mem)."""
        s = self.stats()
        p = "MemoryManager:"
        lines = [
            f"{p} device {self.device.name}, watermark {s['watermark_bytes']} bytes "
            f"({_mb(s['watermark_bytes']):.2f} MB)",
            f"{p} {s['entries']} fields, device footprint {s['device_bytes']} bytes "
            f"({_mb(s['device_bytes']):.2f} MB), peak {s['peak_device_bytes']} bytes "
            f"({_mb(s['peak_device_bytes']):.2f} MB)",
            f"{p} {s['open_views']} open views on {s['view_locked_bytes']} bytes of fields, "
            f"{s['locked_bytes']} device bytes locked by them, pool {s['pool_bytes']} bytes",
            f"{p} host->device {s['h2d_count']} transfers, {s['h2d_bytes']} bytes "
            f"({_mb(s['h2d_bytes']):.2f} MB)",
            f"{p} device->host {s['d2h_count']} transfers, {s['d2h_bytes']} bytes "
            f"({_mb(s['d2h_bytes']):.2f} MB)",
            f"{p} {s['evictions']} evictions, {s['allocations']} device allocations, "
            f"{s['pool_hits']} pool hits",
        ]
        return "\n".join(lines)

    def __repr__(self):
        return (f"MemoryManager(device={self.device!r}, watermark_bytes={self._watermark}, "
                f"entries={len(self._entries)})")


class KeptLaunch:
    """A compiled launch (a kernel's entry point, which runs no Python) on the buffers of
    accelerator views of a unified device, run again with the views' opens reduced to what they
    check.  Nothing can look at the views' counts while the launch runs (the manager serves one
    thread, and a compiled launch does not call back), so they are not taken; each call adds the
    write views' write counts.  Whether every view would open as on the general path, giving the
    same buffer, is checked once per value of the manager's ``_epoch``, which every step that can
    change the answer moves.  A kept Dirac call at 8^4 spent 2.1 us checking its three views'
    entries every call, the caches full of the fields its kernel had streamed."""

    __slots__ = ("manager", "views", "buffers", "launch", "epoch", "written")

    def __init__(self, manager, views, buffers, launch):
        self.manager, self.views, self.buffers, self.launch = manager, views, tuple(buffers), launch
        self.epoch, self.written = None, ()

    def run(self):
        """Run the launch; None, with nothing done, where the general path must open the views: a
        release or a conflict pending, a host buffer handed out, or a view that would not give its
        buffer.  A method, not ``__call__``: calling an instance goes through the type's call slot,
        which took about 0.3 us of a kept Dirac call at 8^4 (the caches full of the kernel's fields),
        where a method call runs in the caller's interpreter loop."""
        m = self.manager
        if self.epoch != m._epoch or m._freed:
            es = m._unified_entries(self.views, self.buffers)
            if es is None:
                return None
            views = self.views
            self.written = tuple(es[i] for i in range(len(es)) if views[i][1])
            self.epoch = m._epoch
        for e in self.written:
            e.writes += 1
        self.launch()
        d = _deferred
        if d.pending and not d.depth:     # a Ctrl-C that reached these lines
            interrupts.fire()
        return True
