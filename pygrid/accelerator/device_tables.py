"""Device copies of the small tables kernels read: shift tables, index maps, coefficients.

A device backend holds one :class:`DeviceTables` built on its upload function,
so a table is copied to the device once and found again at the next launch.
Integer tables (shift tables, checkerboard maps, slice tables) are keyed by the
host array's identity: the library passes the same read-only, cached objects
at every launch, so the key costs nothing, unlike hashing their bytes; an entry
keeps its host array alive, so its id cannot be reused while the entry lives.
A writable array could change between launches and is uploaded every time.
Real tables (coefficients, structure constants) change from call to call and
are keyed by content.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class ContentCache:
    """Device copies of small real tables, keyed by their content."""

    upload: Callable[[np.ndarray], Any]
    limit: int = 1024
    _entries: dict = field(default_factory=dict)

    def get(self, a: np.ndarray, dtype: Any) -> Any:
        a = np.ascontiguousarray(a, dtype=dtype).reshape(-1)
        key = (a.dtype.str, a.tobytes())
        d = self._entries.get(key)
        if d is None:
            if len(self._entries) >= self.limit:
                self._entries.clear()
            d = self._entries[key] = self.upload(a)
        return d


@dataclass
class TableCache:
    """Device copies of host tables, keyed by the host array's identity (the array is kept alive).

    With ``writable_uploads`` a writable host array is uploaded at every call and not kept;
    the cache holds at most ``limit`` arrays, dropping the oldest first.
    """

    upload: Callable[[np.ndarray], Any]
    limit: int = 512
    writable_uploads: bool = False
    _entries: dict = field(default_factory=dict)

    def get(self, host: np.ndarray) -> Any:
        e = self._entries.get(id(host))
        if e is not None and e[0] is host:
            return e[1]
        dev = self.upload(host)
        if self.writable_uploads and (getattr(host, "flags", None) is None or host.flags.writeable):
            return dev
        while len(self._entries) >= self.limit:
            del self._entries[next(iter(self._entries))]
        self._entries[id(host)] = (host, dev)
        return dev

    def __len__(self) -> int:
        return len(self._entries)

    def holds(self, host: np.ndarray) -> bool:
        e = self._entries.get(id(host))
        return e is not None and e[0] is host


def int32_flat(t: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(t, dtype=np.int32).reshape(-1)


class DeviceTables:
    """The table caches of one device backend, on its ``upload(numpy array) -> device array``."""

    def __init__(self, upload: Callable[[np.ndarray], Any], shift_limit: int = 256):
        self._ints = TableCache(lambda t: upload(int32_flat(t)))
        self._shifts = TableCache(lambda t: upload(int32_flat(t)), limit=shift_limit, writable_uploads=True)
        self._reals = ContentCache(upload)

    def ints(self, table: np.ndarray) -> Any:
        """An integer table on the device, int32 and flat."""
        return self._ints.get(table)

    def reals(self, a: np.ndarray, dtype: Any) -> Any:
        """A small real table on the device, in ``dtype``."""
        return self._reals.get(a, dtype)

    def shifts(self, shifts: Sequence[Sequence[np.ndarray]]) -> list:
        """The arrays of every shift table on the device, in kernel argument order."""
        return [self._shifts.get(x) for s in shifts for x in s]
