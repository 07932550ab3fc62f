"""Fault injection for the gauge IO tests: a file stream that fills up."""
from __future__ import annotations

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
