"""Feedback while kernels compile, and the compile time of a run.

A kernel compile can take tens of seconds (a Dirac kernel's first call); the user
should see that something is happening and why.  Every compile of every backend
(numba dispatchers through numba's ``numba:compile`` event, the sycl backend's
OpenCL builds and the cuda backend's NVRTC builds through :func:`compiling`) is
timed here:

- under ``--log message`` (the default) a compile still running after
  ``SLOW_SECONDS`` announces itself, and its end prints the time and the count so far;
- under ``--log debug`` every compile prints its time;
- under ``--log warning`` or ``error`` nothing is printed.

Lines go to stdout, rank 0 only under MPI, in the solvers' format
(``pygrid : INFO      : ...``).  :func:`totals` gives the count and seconds of
compiles in this process (the benchmarks report them apart from the run time).
"""
from __future__ import annotations

import contextlib
import sys
import threading
import time

__all__ = ["SLOW_SECONDS", "compiling", "label_module", "totals", "history", "install_numba_listener"]

#: A compile that runs longer than this is announced (seconds).
SLOW_SECONDS = 1.0

_labels: dict[str, str] = {}
_lock = threading.Lock()
_depth = 0
_count = 0
_seconds = 0.0
_history: list[tuple[str, float]] = []


def label_module(module_name: str, label: str) -> None:
    """Name the kernels of a generated module in compile messages (e.g. 'Wilson Dhop, double')."""
    _labels[module_name] = label


def totals() -> tuple[int, float]:
    """(kernels compiled, seconds spent compiling) in this process so far."""
    return _count, _seconds


def history() -> list[tuple[str, float]]:
    """(what, seconds) of every compile in this process, in order."""
    return list(_history)


def _level() -> str:
    try:
        from ..config import current

        return current().log
    except Exception:  # pragma: no cover - before the configuration exists
        return "message"


def _say(level: str, text: str) -> None:
    try:
        from ..communicator import world

        if not world().is_root:
            return
    except Exception:  # pragma: no cover - no communicator yet
        pass
    tag = {"message": "INFO", "debug": "DEBUG"}[level]  # the solvers' log format
    print(f"pygrid : {tag:<9} : {text}", file=sys.stdout, flush=True)


@contextlib.contextmanager
def compiling(what: str):
    """Time one compile of ``what``; nested compiles (a kernel's callees) count in the outermost."""
    global _depth, _count, _seconds
    with _lock:
        _depth += 1
        outer = _depth == 1
    if not outer:
        try:
            yield
        finally:
            with _lock:
                _depth -= 1
        return
    level = _level()
    announced = threading.Event()

    def announce():
        if level in ("message", "iterative", "debug"):
            announced.set()
            _say("message", f"compiling {what} ...")

    timer = threading.Timer(SLOW_SECONDS, announce)
    timer.daemon = True
    t0 = time.perf_counter()
    timer.start()
    ok = False
    try:
        yield
        ok = True
    finally:
        timer.cancel()
        dt = time.perf_counter() - t0
        with _lock:
            _depth -= 1
            _count += 1
            _seconds += dt
            _history.append((what, dt))
            count, total = _count, _seconds
        if ok and (announced.is_set() or level == "debug"):
            _say("message" if announced.is_set() else "debug",
                 f"compiled {what} in {dt:.1f} s ({count} kernel{'s' if count > 1 else ''}, "
                 f"{total:.1f} s compiling so far)")


def describe(py_func) -> str:
    """What a numba-compiled Python function is, for a compile message."""
    module = getattr(py_func, "__module__", "") or ""
    name = getattr(py_func, "__qualname__", getattr(py_func, "__name__", "?"))
    label = _labels.get(module)
    if label:
        return label if name == "kernel" else f"{label}: {name}"
    return f"{module}.{name}"


_installed = False


def install_numba_listener() -> None:
    """Route numba's compile events through :func:`compiling` (once per process)."""
    global _installed
    if _installed:
        return
    from numba.core import event

    class _Listener(event.Listener):
        def __init__(self):
            self._open = []

        def on_start(self, ev):
            disp = (ev.data or {}).get("dispatcher")
            cm = compiling(describe(getattr(disp, "py_func", None)))
            cm.__enter__()
            self._open.append(cm)

        def on_end(self, ev):
            if self._open:
                cm = self._open.pop()
                # (numba's Event.is_failed is inverted in the versions we use: read the details)
                if getattr(ev, "_exc_details", None) is not None:
                    cm.__exit__(RuntimeError, RuntimeError("compile failed"), None)
                else:
                    cm.__exit__(None, None, None)

    event.register("numba:compile", _Listener())
    _installed = True
