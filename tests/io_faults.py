"""Fault injection for the gauge IO tests: a file stream that fills up, one interrupted while read."""
from __future__ import annotations

import builtins
import errno


class FullDisk:
    """A file stream that fails with ENOSPC once ``limit`` bytes have been written."""

    def __init__(self, inner, limit):
        self.inner, self.limit, self.n = inner, limit, 0

    def write(self, data):
        n = len(memoryview(data).cast("B"))
        if self.n + n > self.limit:
            raise OSError(errno.ENOSPC, "No space left on device (injected)")
        self.n += n
        return self.inner.write(data)

    def __getattr__(self, name):
        return getattr(self.inner, name)


class InterruptedRead:
    """A file opened for reading that raises KeyboardInterrupt (Ctrl-C) once a read would go past
    byte ``limit`` of the file.  ``opener(limit)`` replaces ``open`` in the reader's module."""

    def __init__(self, inner, limit):
        self.inner, self.limit = inner, limit

    @classmethod
    def opener(cls, limit):
        def open_(path, mode="r", *args, **kwargs):
            return cls(builtins.open(path, mode, *args, **kwargs), limit)
        return open_

    def _reach(self, end):
        if end > self.limit:
            raise KeyboardInterrupt(f"interrupted reading past byte {self.limit} (injected)")

    def read(self, size=-1):
        data = self.inner.read(size)
        self._reach(self.inner.tell())
        return data

    def readline(self, size=-1):
        line = self.inner.readline(size)
        self._reach(self.inner.tell())
        return line

    def readinto(self, b):
        self._reach(self.inner.tell() + len(memoryview(b).cast("B")))
        return self.inner.readinto(b)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.inner.close()

    def __getattr__(self, name):
        return getattr(self.inner, name)
