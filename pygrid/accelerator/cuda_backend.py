"""GPU backends from generated C: 'cuda' and 'hip' through CuPy, and their CPU emulation.

* ``cuda`` / ``hip``: the CUDA-dialect source of :mod:`.codegen_c` compiled by
  CuPy's ``RawKernel`` (NVRTC on NVIDIA, hipRTC with CuPy for ROCm on AMD),
  launched with one thread per (outer site, lane) and ``accelerator_threads``
  threads per block (``--accelerator-threads``).  Device buffers are CuPy
  arrays allocated through CuPy's memory pool under the MemoryManager
  (device name 'cuda' / 'hip' in ``pygrid.memory.devices``); reductions run on
  the device with CuPy and return host numbers.  Selecting the backend without
  CuPy or without a device raises :class:`BackendError` saying what to install.
  **Not run on GPU hardware yet** (there is none on the development machines).

* ``cuda-emulated``: the very same CUDA source, compiled by the host C++
  compiler with ``simt_emulation.h`` (our definitions of ``__global__``,
  ``threadIdx``, ``blockIdx``, ``blockDim`` and a launch loop), loaded with
  ctypes and run on the CPU over numpy arrays, thread by thread.  It is how the
  generated CUDA C is tested here.  ``opencl-emulated`` does the same for the
  OpenCL C dialect that the SYCL backend gives dpctl.

Compiled emulation libraries are cached on disk by a hash of source, header
and compiler flags (``$PYGRID_CACHE_DIR/simt/<hash>.so``), so each distinct
kernel is compiled once per machine.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tempfile
import threading

import numpy as np

from ..errors import BackendError
from ..memory.devices import Device
from . import codegen_c
from .backends import NumpyBackend

HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "simt_emulation.h")
CXXFLAGS = ["-O2", "-shared", "-fPIC", "-w", "-x", "c++"]


def threads_per_block():
    """``--accelerator-threads`` (pygrid.config: accelerator_threads), default 128."""
    from ..config import current

    return int(current().accelerator_threads)


# ---------------------------------------------------------------------------------
# CPU emulation of the generated kernels (host C++ compiler + ctypes)
# ---------------------------------------------------------------------------------

_libs = {}
_lock = threading.Lock()
_compiles = [0]


def launch_wrapper(source):
    """The launch wrapper appended to a kernel for emulation, read off the kernel's own parameter list.

    ``pygrid_launch(void** a, int osites, int blocks, int threads)`` runs
    ``SIMT_LAUNCH(blocks, threads, pygrid_kernel(a[0], a[1], ..., osites))``:
    ``a`` holds the array pointers in the kernel's argument order, ``osites`` last.
    """
    head = source.index(codegen_c.KERNEL_NAME + "(") + len(codegen_c.KERNEL_NAME) + 1
    params = source[head:source.index(")", head)].split(",")
    args = []
    for i, p in enumerate(params):
        words = [w for w in p.replace("*", " * ").split()
                 if w not in ("__global", "__restrict__", "restrict")]
        if "*" in words:
            args.append(f"({' '.join(words[:-1])})a[{i}]")
        else:
            args.append(words[-1])  # the trailing osites
    call = f"{codegen_c.KERNEL_NAME}({', '.join(args)})"
    return (
        '\nextern "C" void pygrid_launch(void** a, int osites, int blocks, int threads)\n'
        f"{{\n    SIMT_LAUNCH(blocks, threads, {call});\n}}\n"
    )


def compiler():
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    if not cxx:
        raise BackendError("the emulated GPU backends need a C++ compiler: apt-get install g++ (or set CXX)")
    return cxx


def compile_emulated(source, argtypes=None):
    """Compile ``source`` (kernel + wrapper) with the SIMT emulation header; the loaded ctypes library."""
    from .compile_cache import cache_dir

    header = open(HEADER).read()
    cxx = compiler()
    key = codegen_c.source_hash(source, header + " ".join([cxx] + CXXFLAGS))
    with _lock:
        lib = _libs.get(key)
        if lib is not None:
            return lib
        d = os.path.join(cache_dir(), "simt")
        os.makedirs(d, exist_ok=True)
        so = os.path.join(d, key + ".so")
        if not os.path.exists(so):
            src = os.path.join(d, key + ".cu")
            with open(src, "w") as f:
                f.write(source)
            fd, tmp = tempfile.mkstemp(dir=d, suffix=".so.tmp")
            os.close(fd)
            cmd = [cxx] + CXXFLAGS + ["-include", HEADER, src, "-o", tmp]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                os.unlink(tmp)
                raise BackendError(f"compiling generated kernel {src} failed:\n{' '.join(cmd)}\n{r.stderr[-4000:]}")
            os.replace(tmp, so)  # atomic: a concurrent process never loads half a library
            _compiles[0] += 1
        lib = ctypes.CDLL(so)
        if argtypes is False:  # a library of several entry points: the caller sets their types
            _libs[key] = lib
            return lib
        lib.pygrid_launch.argtypes = argtypes or [ctypes.POINTER(ctypes.c_void_p)] + [ctypes.c_int] * 3
        lib.pygrid_launch.restype = None
        _libs[key] = lib
        return lib


def compile_count():
    """How many emulation libraries this process compiled (not loaded from the disk cache)."""
    return _compiles[0]


class EmulatedSIMTBackend(NumpyBackend):
    """Generated GPU source run on the CPU under simt_emulation.h (``cuda-emulated``, ``opencl-emulated``).

    Buffers are host numpy arrays (the unified device, or the emulated device of
    ``--emulate-device``); reductions are the numpy ones.
    """

    def __init__(self, dialect="cuda"):
        self.dialect = dialect
        self.name = f"{dialect}-emulated"
        compiler()

    def launch(self, kernel, args, nsimd, dtype):
        emulated_launch(self.dialect, kernel, args, nsimd, dtype)

    def relayout(self, kind, out, inp, om=None, lm=None):
        """The device layout kernels (pygrid.accelerator.layout_kernels), their source under the emulation."""
        from . import layout_kernels as lk

        src = lk.source(self.dialect, out.dtype.name, inp.dtype.name)
        lib = compile_emulated(src + lk.emulation_wrappers(out.dtype.name, inp.dtype.name), argtypes=False)
        name, ints, threads = lk.launch_plan(kind, out, inp, om, lm)
        arrs = [out, inp] + ([] if kind == "cast" else [np.ascontiguousarray(m, dtype=np.int32) for m in (om, lm)])
        for a in arrs[:2]:
            if not a.flags.c_contiguous:
                raise BackendError(f"relayout {kind}: buffers must be C-contiguous")
        fn = getattr(lib, "pygrid_launch_" + name)
        fn.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_long), ctypes.c_int, ctypes.c_int]
        blocks, tpb = codegen_c.launch_dims(threads, 1, threads_per_block())
        fn((ctypes.c_void_p * len(arrs))(*[a.ctypes.data for a in arrs]), (ctypes.c_long * len(ints))(*ints),
           blocks, tpb)

    def source(self, ir, nsimd, alias, dtype):
        src = codegen_c.kernel_source(ir, nsimd, alias, dtype, self.dialect)
        return src + launch_wrapper(src)

    def run(self, ir, out, inputs, shifts, coefs, nsimd, alias=False):
        rdt = out.dtype
        if rdt not in (np.float64, np.float32):
            raise BackendError(f"generated kernels take float64 or float32 buffers, not {rdt}")
        lib = compile_emulated(self.source(ir, nsimd, alias, rdt.name))
        arrs = codegen_c.kernel_args(ir, out, inputs, shifts, coefs, rdt)
        for a in arrs:
            if not a.flags.c_contiguous:
                raise BackendError("generated kernels need C-contiguous buffers")
        ptrs = (ctypes.c_void_p * len(arrs))(*[a.ctypes.data for a in arrs])
        osites = out.shape[0]
        blocks, tpb = codegen_c.launch_dims(osites, nsimd, threads_per_block())
        lib.pygrid_launch(ptrs, osites, blocks, tpb)


def emulated_launch(dialect, kernel, args, nsimd, dtype):
    """Run a covariant kernel's generated ``dialect`` C under the SIMT emulation, on host arrays."""
    from . import covariant

    src = covariant.generate(kernel, dialect, nsimd, dtype)
    lib = compile_emulated(src + covariant.c_launch_wrapper(kernel, src), covariant.C_LAUNCH_ARGTYPES)
    tables = covariant.c_tables(kernel, args, dtype)
    ptrs, ints = [], []
    for p in kernel.params:
        if p.kind == "int":
            ints.append(int(args[p.name]))
            continue
        a = tables.get(p.name, args[p.name])
        if not isinstance(a, np.ndarray) or not a.flags.c_contiguous:
            raise BackendError(f"{kernel.name}: {p.name} must be a C-contiguous host array on an emulated backend")
        ptrs.append(a.ctypes.data)
    n = covariant.thread_count(kernel, args, nsimd) // int(nsimd)
    blocks, tpb = codegen_c.launch_dims(n, nsimd, threads_per_block())
    lib.pygrid_launch((ctypes.c_void_p * len(ptrs))(*ptrs), (ctypes.c_long * max(1, len(ints)))(*ints),
                      blocks, tpb)


# ---------------------------------------------------------------------------------
# CUDA and HIP through CuPy
# ---------------------------------------------------------------------------------

_INSTALL = {
    "cuda": "pip install pygrid[cuda] (CuPy for CUDA 12: cupy-cuda12x)",
    "hip": "install CuPy for ROCm (AMD's cupy wheel for your ROCm version; see docs/backends.md)",
}


def import_cupy(name="cuda"):
    """CuPy with at least one device, or BackendError saying what is missing."""
    try:
        import cupy
    except ImportError as e:
        raise BackendError(f"the {name} backend needs CuPy, and cupy is not installed: {_INSTALL[name]}; "
                           "or use --accelerator openmp (the CPU)") from e
    kind = "CUDA" if name == "cuda" else "ROCm/HIP"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # CUDARuntimeError without a driver, etc.
        raise BackendError(f"no {kind} device found: CuPy could not query devices ({e}); "
                           "use --accelerator openmp on this machine") from e
    if n < 1:
        raise BackendError(f"no {kind} device found; use --accelerator openmp on this machine")
    if (name == "hip") != bool(getattr(cupy.cuda.runtime, "is_hip", False)):
        raise BackendError(f"the installed CuPy is built for {'ROCm' if name == 'cuda' else 'CUDA'}, "
                           f"not for {kind}: {_INSTALL[name]}")
    return cupy


class CupyDevice(Device):
    """Device allocations for the MemoryManager through CuPy's memory pool."""

    unified = False

    def __init__(self, name="cuda"):
        self.name = name
        self.cupy = import_cupy(name)

    def alloc(self, nbytes, dtype, shape):
        try:
            return self.cupy.empty(shape, dtype=dtype)
        except self.cupy.cuda.memory.OutOfMemoryError as e:
            raise MemoryError(str(e)) from e

    def free(self, array):
        pass  # CuPy's pool takes the memory back when the last reference goes

    def to_device(self, host, dev):
        dev.set(np.ascontiguousarray(host))

    def to_host(self, dev, host):
        dev.get(out=host)

    def __repr__(self):
        return f"CupyDevice({self.name!r})"


class CudaBackend(NumpyBackend):
    """Generated CUDA C through CuPy RawKernel on an NVIDIA ('cuda') or AMD ('hip') GPU."""

    def __init__(self, name="cuda"):
        self.name = name
        self.device = name
        self.cupy = import_cupy(name)
        from ..memory.devices import register_device

        register_device(name, lambda: CupyDevice(name))
        self._kernels = {}
        self._tables = {}
        from .covariant import ContentCache

        self._rtables = ContentCache(lambda a: self.cupy.asarray(a))

    def kernel(self, ir, nsimd, alias, dtype):
        key = (ir.key(), nsimd, alias, dtype)
        k = self._kernels.get(key)
        if k is None:
            src = codegen_c.kernel_source(ir, nsimd, alias, dtype, "cuda")
            k = self.cupy.RawKernel(src, codegen_c.KERNEL_NAME, options=("-std=c++11",))
            self._kernels[key] = k
        return k

    def _dev(self, a):
        return a if isinstance(a, self.cupy.ndarray) else self.cupy.asarray(a)

    def run(self, ir, out, inputs, shifts, coefs, nsimd, alias=False):
        cp = self.cupy
        rdt = np.dtype(out.dtype)
        k = self.kernel(ir, nsimd, alias, rdt.name)
        consts = codegen_c.device_shift_tables(self._tables, shifts, cp.asarray)
        cf = codegen_c.coef_reals(coefs, rdt)
        osites = int(out.shape[0])
        blocks, tpb = codegen_c.launch_dims(osites, nsimd, threads_per_block())
        dout = self._dev(out)  # a host buffer (unified memory manager) goes through a device copy
        args = [dout] + [self._dev(a) for a in inputs] + consts + [self._rtable(cf, rdt), np.int32(osites)]
        k((blocks,), (tpb,), tuple(args))
        if dout is not out:
            out[...] = cp.asnumpy(dout)

    # reductions on the device, accumulated in double
    def inner_product(self, a, b):
        cp = self.cupy
        a = self._dev(a).astype(cp.float64, copy=False)
        b = self._dev(b).astype(cp.float64, copy=False)
        re = cp.sum(a[:, :, 0] * b[:, :, 0]) + cp.sum(a[:, :, 1] * b[:, :, 1])
        im = cp.sum(a[:, :, 0] * b[:, :, 1]) - cp.sum(a[:, :, 1] * b[:, :, 0])
        return complex(float(re), float(im))

    def norm2(self, a):
        cp = self.cupy
        a = self._dev(a).astype(cp.float64, copy=False).reshape(-1)
        return float(cp.dot(a, a))

    def slice_sum(self, a, table):
        cp = self.cupy
        if not isinstance(a, cp.ndarray):
            return super().slice_sum(a, table)
        osites, ncomp, _, ns = a.shape
        v = a.astype(cp.float64, copy=False).transpose(0, 3, 1, 2).reshape(osites * ns, ncomp, 2)
        s = cp.asnumpy(v[self._int_table(table).reshape(np.shape(table))].sum(axis=1))
        return s[..., 0] + 1j * s[..., 1]

    def _rtable(self, a, dtype):
        """A small real table on the device, cached by content."""
        return self._rtables.get(a, dtype)

    def _int_table(self, table):
        """An integer table on the device as int32, flat (copied once per host array)."""
        from . import covariant

        if not hasattr(self, "_itables"):
            cp = self.cupy
            self._itables = covariant.TableCache(
                lambda t: cp.asarray(np.ascontiguousarray(t, dtype=np.int32).reshape(-1)))
        return self._itables.get(table)

    def site_sum(self, a):
        cp = self.cupy
        s = cp.asnumpy(self._dev(a).astype(cp.float64, copy=False).sum(axis=(0, 3)))
        return s[:, 0] + 1j * s[:, 1]

    def _cov_kernel(self, kernel, nsimd, dtype):
        from . import covariant

        key = kernel.key(nsimd, dtype, self.name)
        k = self._kernels.get(key)
        if k is None:
            src = covariant.generate(kernel, "cuda", nsimd, dtype)
            k = self._kernels[key] = self.cupy.RawKernel(src, kernel.name, options=("-std=c++11",))
        return k

    def launch(self, kernel, args, nsimd, dtype):
        """Run a covariant kernel (pygrid.accelerator.covariant): its CUDA C through CuPy."""
        from . import covariant

        cp = self.cupy
        k = self._cov_kernel(kernel, nsimd, dtype)
        call, back = covariant.device_call(
            kernel, args, self._dev, self._int_table,
            lambda a: self._rtable(a, dtype), np.int64)
        n = covariant.thread_count(kernel, args, nsimd) // int(nsimd)
        blocks, tpb = codegen_c.launch_dims(n, nsimd, threads_per_block())
        k((blocks,), (tpb,), tuple(call))
        for host, d in back:
            host[...] = cp.asnumpy(d)

    def relayout(self, kind, out, inp, om=None, lm=None):
        """The device layout kernels (pygrid.accelerator.layout_kernels) through CuPy."""
        from . import layout_kernels as lk

        cp = self.cupy
        if not isinstance(out, cp.ndarray) and not isinstance(inp, cp.ndarray):
            return super().relayout(kind, out, inp, om, lm)
        key = ("layout", out.dtype.name, inp.dtype.name)
        mod = self._kernels.get(key)
        if mod is None:
            mod = self._kernels[key] = {n: self.cupy.RawKernel(lk.source("cuda", out.dtype.name, inp.dtype.name), n)
                                        for n in lk.KERNELS}
        name, ints, threads = lk.launch_plan(kind, out, inp, om, lm)
        dout, dinp = self._dev(out), self._dev(inp)
        args = [dout, dinp] + ([] if kind == "cast" else [self._int_table(om), self._int_table(lm)])
        blocks, tpb = codegen_c.launch_dims(threads, 1, threads_per_block())
        mod[name]((blocks,), (tpb,), tuple(args + [np.int64(i) for i in ints]))
        if dout is not out:
            out[...] = cp.asnumpy(dout)

    def bench_copy(self, n, dtype):
        """A device-to-device copy of ``n`` reals (CuPy): the device's bandwidth ceiling; runs one and waits."""
        cp = self.cupy
        src = cp.asarray(1.0 + np.arange(n, dtype=dtype) * 1e-6)
        dst = cp.asarray(np.ones(n, dtype=dtype))

        def run():
            cp.copyto(dst, src)
            cp.cuda.Device().synchronize()

        return run

    def accelerator_for(self, osites, kernel, *args):
        raise BackendError(f"hand-written numba kernels (accelerator_for) do not run on the {self.name} backend")


def make_backend(name):
    """The backend for 'cuda', 'hip', 'cuda-emulated' or 'opencl-emulated'."""
    if name in ("cuda", "hip"):
        return CudaBackend(name)
    if name == "cuda-emulated":
        return EmulatedSIMTBackend("cuda")
    if name == "opencl-emulated":
        return EmulatedSIMTBackend("opencl")
    raise BackendError(f"unknown GPU backend {name!r}")


def route_openmp_kernels(dialect="cuda"):
    """Test hook: make the openmp backend run every generated kernel through the SIMT emulation.

    The openmp backend's ``run`` is replaced in this process by the emulated
    ``dialect`` kernels ('cuda' or 'opencl'), so an existing test suite whose
    checks compare "openmp" against the numpy evaluator checks the generated
    GPU source instead (reductions and hand-written kernels stay numba).
    Used by tests/test_codegen_c.py to run the expression and cshift suites
    on the generated CUDA C.
    """
    from .backends import OpenMPBackend

    emu = EmulatedSIMTBackend(dialect)

    def run(self, ir, out, inputs, shifts, coefs, nsimd, alias=False):
        emu.run(ir, out, inputs, shifts, coefs, nsimd, alias)

    OpenMPBackend.run = run
    return emu
