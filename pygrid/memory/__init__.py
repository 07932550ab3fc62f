"""Device memory: views opened by intent and the LRU software device cache.

Public API::

    ViewMode, Advise, State                  enums (modes.py)
    Device, UnifiedDevice, EmulatedDevice,   device allocators (devices.py)
    make_device, register_device
    MemoryManager(device, watermark_bytes)   the cache (manager.py)
    ViewConflictError, LeakedViewWarning, MB
    View(manager, key, mode)                 context manager (view.py)
    Views(((manager, key, mode), ...))       several views opened as one (view.py)
    get_manager()                            the process-wide default manager
    configure(device='unified', device_mem_mb=...)   replace the default manager
    memory_stats()                           get_manager().stats()
    enable_debug_report(file=None)           print get_manager().report() at exit
"""

import atexit
import sys

from ..config import DEFAULT_DEVICE_MEM_MB
from ..errors import ConfigError
from . import interrupts
from .devices import Device, EmulatedDevice, UnifiedDevice, make_device, register_device
from .manager import MB, KeptLaunch, LeakedViewWarning, MemoryManager, ViewConflictError, live_managers
from .modes import Advise, State, ViewMode
from .view import View, Views

__all__ = [
    "ViewMode", "Advise", "State", "Device", "UnifiedDevice", "EmulatedDevice",
    "make_device", "register_device", "MemoryManager", "ViewConflictError", "LeakedViewWarning", "MB",
    "View", "Views", "KeptLaunch",
    "get_manager", "configure", "memory_stats", "enable_debug_report",
]

_default = None
_debug_report_registered = False


def get_manager():
    """The process-wide default MemoryManager (unified device, ``DEFAULT_DEVICE_MEM_MB`` until
    configured)."""
    global _default
    if _default is None:
        _default = MemoryManager(UnifiedDevice(), DEFAULT_DEVICE_MEM_MB * MB)
    return _default


def configure(device="unified", device_mem_mb=DEFAULT_DEVICE_MEM_MB):
    """Replace the default manager with a new one and return it.

    ``device`` is a name ('unified', 'openmp', 'numpy', 'emulated', or one added by
    register_device) or a Device; ``device_mem_mb`` the watermark in MB (2**20
    bytes, may be fractional).  Fields registered with the previous manager keep
    using it (each Lattice stores its manager).
    """
    global _default
    try:
        mb = float(device_mem_mb)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"--device-mem must be a number of MB, not {device_mem_mb!r}") from None
    if not mb >= 0 or mb == float("inf"):
        raise ConfigError(f"--device-mem must be a non-negative number of MB, not {device_mem_mb!r}")
    _default = MemoryManager(make_device(device), int(mb * MB))
    return _default


def memory_stats():
    """Statistics of the default manager (see MemoryManager.stats)."""
    return get_manager().stats()


def _print_report(file):
    print(get_manager().report(), file=file if file is not None else sys.stdout, flush=True)


def enable_debug_report(file=None):
    """Print the default manager's report() at interpreter exit (--debug-mem); idempotent."""
    global _debug_report_registered
    if not _debug_report_registered:
        atexit.register(_print_report, file)
        _debug_report_registered = True


@atexit.register
def _report_leaked_views():
    # a view left open at exit is a program bug that silently pinned its field; say so
    for manager in live_managers():
        manager.warn_open_views()
