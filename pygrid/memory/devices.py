"""Device allocators used by the MemoryManager.

A device is a small object with this interface (see :class:`Device`):

``unified``                      True when the "device" memory *is* the host memory
                                 (the manager then never allocates, copies or counts).
``host_memory``                  True when ``alloc`` returns numpy arrays in host memory,
                                 which the CPU backends' kernels can use in place.
``name``                         short name used in reports.
``alloc(nbytes, dtype, shape)``  a new device array of that shape and dtype
                                 (``nbytes == prod(shape) * dtype.itemsize``).
                                 May raise ``MemoryError`` when the device is full.
``free(array)``                  give a device array back to the device.
``to_device(host, dev)``         copy a whole host array into a device array of the
                                 same shape and dtype (synchronous).
``to_host(dev, host)``           copy a whole device array back into the host array.

The manager guarantees every array passed to ``free``/``to_device``/``to_host``
came from ``alloc`` of the same device (possibly reshaped to another shape with the
same byte size, when a pooled buffer is reused).  A SYCL (dpctl USM) or CuPy device
implements the same five members.
"""

import numpy as np

from ..errors import ConfigError
from .aligned import aligned_empty

__all__ = ["Device", "UnifiedDevice", "EmulatedDevice", "make_device", "register_device",
           "device_names"]


class Device:
    """Interface of a device allocator; subclasses implement every method."""

    name = "abstract"
    unified = False
    host_memory = False

    def alloc(self, nbytes, dtype, shape):
        raise NotImplementedError

    def free(self, array):
        raise NotImplementedError

    def to_device(self, host, dev):
        raise NotImplementedError

    def to_host(self, dev, host):
        raise NotImplementedError

    def __repr__(self):
        return f"{type(self).__name__}()"


class UnifiedDevice(Device):
    """Host and device are one memory (openmp / numpy backends).

    The manager returns the host array for accelerator views and never calls
    ``alloc`` or the transfer methods; they are implemented anyway so the device
    can be used on its own.
    """

    name = "unified"
    unified = True
    host_memory = True

    def alloc(self, nbytes, dtype, shape):
        return aligned_empty(shape, dtype)

    def free(self, array):
        pass

    def to_device(self, host, dev):
        if dev is not host:
            np.copyto(dev, host)

    def to_host(self, dev, host):
        if dev is not host:
            np.copyto(host, dev)


class EmulatedDevice(Device):
    """A separate "device" memory made of ordinary numpy allocations.

    Every transfer is a real ``np.copyto`` so the cache, its evictions and its state
    machine are exercised on the CPU.  ``allocated_bytes`` and ``live_buffers`` track
    what the device currently holds (what a real device would report), independently
    of the manager's own accounting.
    """

    name = "emulated"
    unified = False
    host_memory = True

    def __init__(self):
        self.allocated_bytes = 0
        self.live_buffers = 0

    def alloc(self, nbytes, dtype, shape):
        arr = aligned_empty(shape, dtype)
        if arr.nbytes != nbytes:
            raise ValueError(f"alloc: shape {shape} of {np.dtype(dtype)} is {arr.nbytes} bytes, "
                             f"not {nbytes}")
        self.allocated_bytes += nbytes
        self.live_buffers += 1
        return arr

    def free(self, array):
        self.allocated_bytes -= array.nbytes
        self.live_buffers -= 1

    def to_device(self, host, dev):
        np.copyto(dev, host)

    def to_host(self, dev, host):
        np.copyto(host, dev)

    def __repr__(self):
        return f"EmulatedDevice(allocated_bytes={self.allocated_bytes})"


_FACTORIES = {
    "unified": UnifiedDevice,
    "openmp": UnifiedDevice,
    "numpy": UnifiedDevice,
    "emulated": EmulatedDevice,
}


def register_device(name, factory):
    """Make ``make_device(name)`` return ``factory()`` (used by the GPU backends)."""
    _FACTORIES[name] = factory


def device_names():
    return sorted(_FACTORIES)


def make_device(device):
    """A Device from a name ('unified', 'openmp', 'numpy', 'emulated', ...) or a Device."""
    if isinstance(device, Device):
        return device
    if isinstance(device, str) and device in _FACTORIES:
        return _FACTORIES[device]()
    raise ConfigError(f"unknown device {device!r}; choose one of {', '.join(device_names())}")
