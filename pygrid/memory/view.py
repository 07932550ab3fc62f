"""Views as context managers."""

import numpy as np

from .interrupts import defer_in, deferred, fire

__all__ = ["View", "read_only"]
defer_in(__file__)


def read_only(arr):
    """An alias of ``arr`` that refuses writes: numpy's writeable flag off, or the device array's
    ``read_only()`` where its backend has one (CuPy arrays have no such flag: returned as they are)."""
    if isinstance(arr, np.ndarray):
        ro = arr.view()
        ro.flags.writeable = False
        return ro
    alias = getattr(arr, "read_only", None)
    return alias() if alias is not None else arr


class View:
    """``with View(manager, key, mode) as arr:`` opens a view on enter, closes it on exit.

    A read view (CpuRead, AcceleratorRead) gives a read-only alias (:func:`read_only`):
    writing through it would change the data behind the manager's back.  ``read_only=False``
    gives the array itself (pygrid's kernels, which never write their inputs).

    The view is closed even when the block raises; a write view is then closed by
    :meth:`MemoryManager.abort`, which keeps the field's previous contents where they
    survive (see "Failures" in :mod:`pygrid.memory.manager`).  A View object can be
    entered again after it was closed, but not while it is open.
    """

    __slots__ = ("manager", "key", "mode", "_open", "_prior", "_read_only")

    def __init__(self, manager, key, mode, read_only=True):
        self.manager = manager
        self.key = key
        self.mode = mode
        self._open = False
        self._prior = None
        self._read_only = read_only and not mode.write

    def __enter__(self):
        if self._open:
            raise RuntimeError(f"View of field {self.key} ({self.mode.name}) is already open")
        d = deferred
        d.depth += 1                      # no Ctrl-C between the open and ``_open`` (see interrupts)
        try:
            if self.mode.write:
                self._prior = self.manager.prior_state(self.key)
            # the manager's open() without its own deferral and prior state, which this method holds
            arr = self.manager._open(self.key, self.mode)
            self._open = True
            if self._read_only:
                arr = read_only(arr)
            if d.pending and d.depth == 1:
                self.__exit__(KeyboardInterrupt, None, None)
                fire()
            return arr
        finally:
            d.depth -= 1

    def __exit__(self, exc_type, exc, tb):
        self._open = False
        if exc_type is not None and self.mode.write:
            self.manager.abort(self.key, self.mode, self._prior)
        else:
            self.manager.close(self.key, self.mode)
        return False

    def __repr__(self):
        state = "open" if self._open else "closed"
        return f"View(key={self.key}, mode={self.mode.name}, {state})"
