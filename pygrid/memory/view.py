"""Views as context managers."""

from .interrupts import defer_in, deferred, fire

__all__ = ["View"]
defer_in(__file__)


class View:
    """``with View(manager, key, mode) as arr:`` opens a view on enter, closes it on exit.

    The view is closed even when the block raises; a write view is then closed by
    :meth:`MemoryManager.abort`, which keeps the field's previous contents where they
    survive (see "Failures" in :mod:`pygrid.memory.manager`).  A View object can be
    entered again after it was closed, but not while it is open.
    """

    __slots__ = ("manager", "key", "mode", "_open", "_prior")

    def __init__(self, manager, key, mode):
        self.manager = manager
        self.key = key
        self.mode = mode
        self._open = False
        self._prior = None

    def __enter__(self):
        if self._open:
            raise RuntimeError(f"View of field {self.key} ({self.mode.name}) is already open")
        d = deferred
        d.depth += 1                      # no Ctrl-C between the open and ``_open`` (see interrupts)
        try:
            if self.mode.write:
                self._prior = self.manager.prior_state(self.key)
            arr = self.manager.open(self.key, self.mode)
            self._open = True
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
