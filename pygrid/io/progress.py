"""A one-line progress indicator on stderr for large files."""
from __future__ import annotations

import sys
import time

#: Files with a payload above this many bytes get a progress line by default.
PROGRESS_THRESHOLD = 100 * 2 ** 20


class Progress:
    """``Progress(label, total, enabled)``: ``update(done)`` rewrites one line; ``close()`` ends it.

    ``enabled=None`` shows the line only when ``total`` exceeds PROGRESS_THRESHOLD.
    """

    def __init__(self, label, total, enabled=None, stream=None):
        self.label = label
        self.total = max(int(total), 1)
        self.enabled = (total > PROGRESS_THRESHOLD) if enabled is None else bool(enabled)
        self.stream = stream if stream is not None else sys.stderr
        self.t0 = time.perf_counter()
        self._shown = False

    def update(self, done):
        if not self.enabled:
            return
        dt = max(time.perf_counter() - self.t0, 1e-9)
        mb = done / 2 ** 20
        self.stream.write(f"\r{self.label}: {100.0 * done / self.total:5.1f}% "
                          f"({mb:.0f}/{self.total / 2 ** 20:.0f} MB, {mb / dt:.0f} MB/s)")
        self.stream.flush()
        self._shown = True

    def close(self):
        if self._shown:
            self.stream.write("\n")
            self.stream.flush()
            self._shown = False
