"""Atomic file writing: a temporary file in the target's directory, fsynced and
renamed over the target only when complete.

A crash, a full disk or an exception while writing leaves the target untouched
(the old file, or no file) and removes the temporary file.
"""
from __future__ import annotations

import os
import tempfile


def _open_stream(fd):
    """The binary stream over the temporary file's descriptor (tests replace this to inject failures)."""
    return os.fdopen(fd, "w+b")


class AtomicWriter:
    """``with AtomicWriter(path) as f: f.write(...)``; ``f`` also has ``seek``/``tell``.

    On a clean exit the data are flushed, fsynced and renamed to ``path`` (and
    the directory entry fsynced); on an exception the temporary file is removed
    and the exception propagates.
    """

    def __init__(self, path):
        self.path = os.fspath(path)
        self.tmp = None
        self.stream = None

    def __enter__(self):
        d = os.path.dirname(os.path.abspath(self.path))
        fd, self.tmp = tempfile.mkstemp(dir=d, prefix="." + os.path.basename(self.path) + ".", suffix=".tmp")
        try:
            umask = os.umask(0)
            os.umask(umask)
            os.fchmod(fd, 0o666 & ~umask)
            self.stream = _open_stream(fd)
        except BaseException:
            os.close(fd)
            self._discard()
            raise
        return self.stream

    def _discard(self):
        if self.tmp is not None:
            try:
                os.unlink(self.tmp)
            except FileNotFoundError:
                pass
            self.tmp = None

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            try:
                self.stream.close()
            except Exception:
                pass
            self._discard()
            return False
        try:
            self.stream.flush()
            os.fsync(self.stream.fileno())
            self.stream.close()
            os.replace(self.tmp, self.path)
            self.tmp = None
        except BaseException:
            try:
                self.stream.close()
            except Exception:
                pass
            self._discard()
            raise
        try:  # make the rename itself durable
            dfd = os.open(os.path.dirname(os.path.abspath(self.path)), os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError:
            pass
        return False
