"""Ctrl-C during the cache's bookkeeping: deferred to the end of the operation.

Python raises KeyboardInterrupt between any two bytecodes, so a SIGINT could land between two
updates of the cache's bookkeeping (a reference count and its LRU list, say) and leave them
disagreeing.  While a MemoryManager operation runs, the handler installed here only records the
signal; the operation completes (or is undone, for an open whose view was not handed out yet)
and the KeyboardInterrupt is raised as it returns.  One that arrives in the last instructions of
an open, when the view is already handed out, is raised at the end of the next operation: at the
latest the close of that view.  A manager operation is microseconds, or one copy of a field, so
the delay is not felt.

The handler is installed by the first MemoryManager, in the main thread, and only where SIGINT
still has Python's default handler: a program's own handler is left alone (it then gets the
signal at once, as before).  Outside a manager operation it raises KeyboardInterrupt as the
default handler does.
"""
from __future__ import annotations

import signal
import threading

__all__ = ["install", "deferred", "defer_in", "fire", "uninterrupted"]


class _Deferral:
    __slots__ = ("depth", "pending")

    def __init__(self):
        self.depth = 0
        self.pending = False


deferred = _Deferral()
_installed = [False]


#: files whose code runs with Ctrl-C deferred: the bookkeeping itself, and the lines around it
#: (a handler runs where the interpreter checks for signals, which can be before a depth count)
DEFERRING_FILES = {__file__}


def defer_in(path):
    """Defer Ctrl-C while the interpreter runs code of the file ``path``."""
    DEFERRING_FILES.add(path)


def _on_sigint(signum, frame):
    if deferred.depth or (frame is not None and frame.f_code.co_filename in DEFERRING_FILES):
        deferred.pending = True
        return
    signal.default_int_handler(signum, frame)


def install():
    """Route SIGINT through the deferral (idempotent; see the module docstring)."""
    if _installed[0] or threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)
    _installed[0] = True


def fire():
    """Raise the KeyboardInterrupt that arrived during the operation now ending."""
    deferred.pending = False
    raise KeyboardInterrupt


class uninterrupted:  # noqa: N801 - used as a context manager, like a function
    """``with uninterrupted():`` Ctrl-C deferred while the block runs, whatever it calls, and raised
    at its end: for an exchange between ranks, where one rank stopping halfway would leave its
    neighbours waiting for its messages and its own receives pending."""

    __slots__ = ()

    def __enter__(self):
        deferred.depth += 1

    def __exit__(self, *exc):
        deferred.depth -= 1
        if deferred.pending and not deferred.depth:
            fire()
        return False
