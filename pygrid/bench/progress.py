"""The progress line of long benchmark runs, on stderr."""
from __future__ import annotations

import sys


class Progress:
    """A progress line on stderr.

    On a terminal the line is rewritten in place with ``\\r``; otherwise (CI
    logs, pipes) each step is one short line of its own, so logs stay readable.
    ``quiet=True`` prints nothing.
    """

    def __init__(self, stream=None, quiet=False):
        self.stream = sys.stderr if stream is None else stream
        self.quiet = quiet
        try:
            self.tty = self.stream.isatty()
        except (AttributeError, ValueError):
            self.tty = False
        self._width = 0
        self._last = None

    def update(self, text: str, force=False):
        if self.quiet:
            return
        if self.tty:
            text = text[:100]
            pad = max(0, self._width - len(text))
            self.stream.write("\r" + text + " " * pad)
            self._width = len(text)
            self.stream.flush()
        elif force or text != self._last:
            # one short line per step; the per-iteration updates are tty-only
            self.stream.write("[pygrid] " + text[:72] + "\n")
            self.stream.flush()
        self._last = text

    def step(self, text: str):
        """A new step (printed on a terminal and in logs)."""
        self.update(text, force=True)

    def tick(self, text: str):
        """A frequent update (printed on a terminal only)."""
        if self.tty:
            self.update(text)

    def clear(self):
        if self.quiet or not self.tty or not self._width:
            return
        self.stream.write("\r" + " " * self._width + "\r")
        self.stream.flush()
        self._width = 0
