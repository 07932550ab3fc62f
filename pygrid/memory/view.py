"""Views as context managers."""

import numpy as np

from .interrupts import defer_in, deferred, fire

__all__ = ["View", "Views", "read_only"]
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


#: the priors of Views whose run_on runs on a unified device (open, nothing to restore)
_RUNNING = ()
_UNKNOWN = object()


class _Moved(Exception):
    """Leaves a :meth:`Views.run_on` block whose arrays are not the buffers given."""


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


class Views:
    """``with Views(((manager, key, mode), ...)) as arrays:`` several views opened as one step.

    What a kernel of several fields needs, at a fraction of the cost of one :class:`View` each (a
    Dirac call at 8^4 spent 20 us opening and closing its three): the views open in order, and if
    one cannot open, those before it are closed again and the error raised, so the block never runs
    with part of them.  They close in the reverse order; after a block that raised, the write views
    are closed by :meth:`MemoryManager.abort`, as :class:`View` closes them.  The arrays are the
    buffers themselves, writable (views for pygrid's own kernels, which never write their inputs).
    """

    __slots__ = ("views", "_priors", "_unified")

    def __init__(self, views):
        self.views = tuple(views)
        self._priors = None
        self._unified = _UNKNOWN

    @property
    def unified(self):
        """``(manager, ((key, write), ...))`` where the views are accelerator views of one manager on
        a unified device, else None: what :meth:`MemoryManager.run_unified` takes, the inline path
        of :meth:`run_on` (a caller that keeps these views may take it itself)."""
        u = self._unified
        if u is _UNKNOWN:
            views = self.views
            u = None
            if (views and len({id(m) for m, _, _ in views}) == 1 and views[0][0].device.unified
                    and all(mode.accelerator for _, _, mode in views)):
                u = (views[0][0], tuple((key, mode.write) for _, key, mode in views))
            self._unified = u
        return u

    def __enter__(self):
        if self._priors is not None:
            raise RuntimeError(f"{self!r} is already open")
        d = deferred
        d.depth += 1
        try:
            arrays, priors = [], []
            try:
                for manager, key, mode in self.views:
                    priors.append(manager.prior_state(key) if mode.write else None)
                    arrays.append(manager._open(key, mode))
            except BaseException:
                self._close(self.views[:len(arrays)], priors, True)
                raise
            self._priors = priors
            if d.pending and d.depth == 1:
                self.__exit__(KeyboardInterrupt, None, None)
                fire()
            return arrays
        finally:
            d.depth -= 1

    @property
    def is_open(self) -> bool:
        return self._priors is not None

    def run_on(self, buffers, fn) -> bool:
        """Open the views and, where they give ``buffers`` (the same objects, in order: what a kept
        launch was bound to), call ``fn(arrays)`` before closing them; True then.  Where a view
        gives another buffer (a device cache moved a field) they close as after a failure, so a
        write view that let the device drop a field's contents gives them back to whatever path
        the caller takes next, and False is returned."""
        unified = self.unified
        if unified is not None and self._priors is None:
            self._priors = _RUNNING
            try:
                done = unified[0].run_unified(unified[1], buffers, fn)
            finally:
                self._priors = None
            if done is not None:
                return done
        try:
            with self as arrays:
                for i in range(len(buffers)):
                    if arrays[i] is not buffers[i]:
                        raise _Moved
                fn(arrays)
        except _Moved:
            return False
        return True

    def __exit__(self, exc_type, exc, tb):
        priors, self._priors = self._priors, None
        self._close(self.views, priors, exc_type is not None)
        return False

    @staticmethod
    def _close(views, priors, failed):
        # every view is closed even when one close raises (a device copy that failed), and the
        # first error is raised at the end: the nested Views of a ``with`` statement do the same
        d = deferred
        d.depth += 1
        error = None
        try:
            for i in range(len(views) - 1, -1, -1):
                manager, key, mode = views[i]
                try:
                    if (failed or error is not None) and mode.write:
                        manager.abort(key, mode, priors[i])
                    else:
                        manager._close(key, mode)
                except BaseException as e:  # noqa: PERF203 - one close failing is rare
                    if error is None:
                        error = e
        finally:
            d.depth -= 1
        if error is not None:
            raise error
        if d.pending and not d.depth:
            fire()

    def __repr__(self):
        state = "open" if self._priors is not None else "closed"
        return f"Views({[(key, mode.name) for _, key, mode in self.views]}, {state})"
