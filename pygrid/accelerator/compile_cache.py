"""Where generated kernels live: in memory, and on disk for the next process.

Generated source is written to ``$PYGRID_CACHE_DIR/kernels/<hash>.py`` (default
``~/.cache/pygrid``) and imported from there, so numba's own on-disk cache
(``cache=True``) keeps the compiled machine code beside it and a second run of
the same program compiles nothing.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
import threading

from .compile_log import install_numba_listener, label_module

_memory = {}
_lock = threading.Lock()


def cache_dir():
    d = os.environ.get("PYGRID_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "pygrid")
    return os.path.abspath(d)


def load_module(source: str, prefix: str = "pygrid", module_name: str | None = None,
                label: str | None = None):
    """Import generated source (written once to the disk cache) and return the module.

    The module is registered in sys.modules under its name, so other generated
    modules can import from it.  ``label`` names its kernels in compile messages.
    """
    name = module_name or f"{prefix}_{hashlib.sha1(source.encode()).hexdigest()[:20]}"
    install_numba_listener()
    if label:
        label_module(name, label)
    with _lock:
        mod = _memory.get(name)
        if mod is not None:
            return mod
        kdir = os.path.join(cache_dir(), "kernels")
        os.makedirs(kdir, exist_ok=True)
        path = os.path.join(kdir, name + ".py")
        if not os.path.exists(path) or open(path).read() != source:
            # write then rename, so a concurrent process never imports half a file
            fd, tmp = tempfile.mkstemp(dir=kdir, suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                f.write(source)
            os.replace(tmp, path)
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        _memory[name] = mod
        return mod


def stats():
    return {"kernels_in_memory": len(_memory), "cache_dir": cache_dir()}
