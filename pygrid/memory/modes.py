"""View intents, advice and cache-entry states of the device memory manager.

These mirror Grid's ``ViewMode``, ``ViewAdvise`` and the cache-entry states of
``MemoryManagerCache.cc``.
"""

import enum

__all__ = ["ViewMode", "Advise", "State"]


class ViewMode(enum.Enum):
    """The intent with which a view of a field is opened.

    Each member carries two plain attributes (set below, read on the hot path
    of :meth:`MemoryManager.open` without a function call):

    ``accelerator``  True for the three Accelerator* intents.
    ``write``        True for every intent that may modify the data.
    """

    CpuRead = "CpuRead"
    CpuWrite = "CpuWrite"
    AcceleratorRead = "AcceleratorRead"
    AcceleratorWrite = "AcceleratorWrite"
    AcceleratorWriteDiscard = "AcceleratorWriteDiscard"


for _m in ViewMode:
    _m.accelerator = _m.name.startswith("Accelerator")
    _m.write = _m.name.endswith(("Write", "WriteDiscard"))
del _m


class Advise(enum.Enum):
    """Advice about how a field will be used.

    ``InfrequentUse`` makes the field's device copy a preferred eviction victim:
    such entries are evicted before any ``Normal`` entry, least recently used
    first among themselves.
    """

    Normal = "Normal"
    InfrequentUse = "InfrequentUse"


class State(enum.Enum):
    """Coherence state of one cache entry.

    ``Empty``             no device buffer; the host array holds the data.
    ``CpuDirty``          a device buffer exists but is stale; host is current.
    ``AcceleratorDirty``  the device buffer is the only current copy.
    ``Consistent``        host and device buffers hold the same data.
    """

    Empty = "Empty"
    CpuDirty = "CpuDirty"
    AcceleratorDirty = "AcceleratorDirty"
    Consistent = "Consistent"
