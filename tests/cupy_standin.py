"""A stand-in for CuPy: the cuda backend's own code (launches, tables, reductions, device arrays,
page-locked host arrays) runs on a machine without a GPU.

"Device" arrays are a numpy subclass, so host arrays are copied in and out as with CuPy;
``RawKernel`` compiles the CUDA source under the SIMT emulation
(``pygrid/accelerator/simt_emulation.h``), so what runs is the source a GPU would run.
:func:`fake_cupy` has the expression and reduction kernels; :func:`dirac_cupy` adds the Dirac
and layout kernels, CuPy's ``get``/``set``, ``empty`` for fields in (stand-in) device memory and
pinned memory, which is plain memory here.
"""
from __future__ import annotations

import ctypes
import re
import types

import numpy as np

from pygrid.accelerator import codegen_c, covariant, emulated_backend, layout_kernels, reduction_kernels
from pygrid.accelerator.covariant import Kernel
from pygrid.qcd import kernels_generic


def _entry(src, types_pattern, wrappers, name):
    """``pygrid_launch_<name>`` of ``src`` (a source of several kernels) under the emulation, its two
    real types read off the source by ``types_pattern``."""
    dt = {"double": "float64", "float": "float32"}
    a, b = re.search(types_pattern, src).groups()
    lib = emulated_backend.compile_emulated(src + wrappers(dt[a], dt[b]), argtypes=False)
    fn = getattr(lib, "pygrid_launch_" + name)
    fn.argtypes = covariant.C_LAUNCH_ARGTYPES
    return fn


def fake_cupy(devices=1):
    """A stand-in for CuPy: "device" arrays are a numpy subclass, so host arrays are copied
    in and out as with CuPy, and RawKernel compiles the source under the SIMT emulation."""

    class DeviceArray(np.ndarray):
        pass

    cp = types.ModuleType("cupy")
    cp.ndarray = DeviceArray
    cp.float64 = np.float64
    cp.asarray = lambda a: a if isinstance(a, DeviceArray) else np.array(a, order="C").view(DeviceArray)
    cp.asnumpy = lambda a: np.array(a).view(np.ndarray)
    cp.sum = np.sum
    cp.dot = np.dot
    cp.empty = np.empty
    runtime = types.SimpleNamespace(getDeviceCount=lambda: devices, is_hip=False)
    used = []  # the devices made current, in order

    class Device:
        def __init__(self, i=None):
            self.id = used[-1] if i is None else i

        def use(self):
            used.append(self.id)

        def synchronize(self):
            pass

    cp.cuda = types.SimpleNamespace(
        runtime=runtime, memory=types.SimpleNamespace(OutOfMemoryError=MemoryError), Device=Device, used=used
    )
    launches = []

    class RawKernel:
        def __init__(self, src, name, options=()):
            self.name = name
            if name in reduction_kernels.KERNELS:  # real and accumulation types read off the signature
                self.fn = _entry(src, r"pg_norm2\(const (\w+)\* __restrict__ a, (\w+)\*",
                                 reduction_kernels.emulation_wrappers, name)
                return
            assert name == codegen_c.KERNEL_NAME
            self.lib = emulated_backend.compile_emulated(src + emulated_backend.launch_wrapper(src))

        def __call__(self, grid_, block, args):
            if self.name in reduction_kernels.KERNELS:
                launches.append((grid_, block, self.name))
                ptrs = [a.ctypes.data for a in args if isinstance(a, np.ndarray)]
                ints = [int(a) for a in args if not isinstance(a, np.ndarray)]
                self.fn((ctypes.c_void_p * len(ptrs))(*ptrs), (ctypes.c_long * len(ints))(*ints),
                        grid_[0], block[0])
                return
            arrs, osites = args[:-1], int(args[-1])
            launches.append((grid_, block, osites))
            ptrs = (ctypes.c_void_p * len(arrs))(*[a.ctypes.data for a in arrs])
            self.lib.pygrid_launch(ptrs, osites, grid_[0], block[0])

    cp.RawKernel = RawKernel
    cp.launches = launches
    return cp


def dirac_cupy(devices=1):
    """:func:`fake_cupy` with every Dirac kernel of :mod:`pygrid.qcd.kernels_generic` and the layout
    kernels under the emulation, device arrays with CuPy's ``get``/``set``, ``empty``, and
    ``cuda.alloc_pinned_memory`` (plain memory, kept in ``cp.pinned``).  ``cp.launched`` lists the
    Dirac and layout kernels launched, by name; a host array reaching one fails."""
    cp = fake_cupy(devices)
    expression_kernel = cp.RawKernel
    kernels = {k.name: k for k in vars(kernels_generic).values() if isinstance(k, Kernel)}
    launched = []

    class RawKernel:
        def __new__(cls, src, name, options=()):
            if name not in kernels and name not in layout_kernels.KERNELS:
                return expression_kernel(src, name, options)
            return super().__new__(cls)

        def __init__(self, src, name, options=()):
            self.name = name
            if name in layout_kernels.KERNELS:  # the layout kernels: real types read off the signature
                self.fn = _entry(src, r"pg_gather\((\w+)\* __restrict__ out, const (\w+)\*",
                                 layout_kernels.emulation_wrappers, name)
            else:
                lib = emulated_backend.compile_emulated(src + covariant.c_launch_wrapper(kernels[name], src),
                                                        covariant.C_LAUNCH_ARGTYPES)
                self.fn = lib.pygrid_launch

        def __call__(self, grid_, block, args):
            assert all(isinstance(a, (cp.ndarray, np.int64)) for a in args), "a host array reached the kernel"
            launched.append(self.name)
            ptrs = [a.ctypes.data for a in args if isinstance(a, np.ndarray)]
            ints = [int(a) for a in args if not isinstance(a, np.ndarray)]
            self.fn((ctypes.c_void_p * len(ptrs))(*ptrs), (ctypes.c_long * len(ints))(*ints),
                    grid_[0], block[0])

    cp.RawKernel = RawKernel
    cp.launched = launched
    cp.empty = lambda shape, dtype=np.float64: np.empty(shape, dtype).view(cp.ndarray)
    cp.ndarray.set = lambda self, a: np.copyto(self.view(np.ndarray), np.asarray(a).reshape(self.shape))
    cp.ndarray.get = lambda self, out: np.copyto(out, self.view(np.ndarray))
    cp.pinned = []
    cp.cuda.alloc_pinned_memory = lambda n: cp.pinned.append(bytearray(n)) or cp.pinned[-1]
    return cp
