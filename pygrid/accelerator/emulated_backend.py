"""Generated GPU source run on the CPU: the 'cuda-emulated' and 'opencl-emulated' backends.

The CUDA-dialect source of :mod:`.codegen_c` (and the covariant and layout
kernels) is compiled by the host C++ compiler with ``simt_emulation.h`` (our
definitions of ``__global__``, ``threadIdx``, ``blockIdx``, ``blockDim`` and a
launch loop), loaded with ctypes and run on the CPU over numpy arrays, thread
by thread.  It is how the generated CUDA C is tested here.  ``opencl-emulated``
does the same for the OpenCL C dialect that the SYCL backend gives dpctl.

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
from . import codegen_c, host, reduction_kernels as rk
from .codegen_c import threads_per_block

HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "simt_emulation.h")
# unoptimised: the emulation checks what the source computes on tiny lattices, and g++ spent ten
# times longer optimising the large straight-line kernels (4.1 against 0.4 s for 150 KB of the
# OpenCL vector form); the real compilers' optimised builds run in the sycl pass and on GPUs
CXXFLAGS = ["-O0", "-shared", "-fPIC", "-w", "-x", "c++"]


_libs = {}
_lock = threading.Lock()
_compiles = [0]


def launch_wrapper(source):
    """The launch wrapper appended to a kernel for emulation, read off the kernel's own parameter list.

    ``pygrid_launch(void** a, int osites, int blocks, int threads)`` runs
    ``SIMT_LAUNCH(blocks, threads, pygrid_kernel(a[0], a[1], ..., osites))`` (``SIMT_LAUNCH_2D`` for
    the OpenCL dialect, :func:`codegen_c.emulation_launch`):
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
        f"{{\n    {codegen_c.emulation_launch(source, call)};\n}}\n"
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
            # the source and the library each written under a name of this process's own, then moved
            # into place: ranks of an MPI job compile the same kernel at once, and a source file they
            # shared was truncated by one while another's compiler read it (a library without its
            # entry point, cached for every later process)
            src = os.path.join(d, key + ".cu")
            fd, src_tmp = tempfile.mkstemp(dir=d, suffix=".cu.tmp")
            with os.fdopen(fd, "w") as f:
                f.write(source)
            fd, tmp = tempfile.mkstemp(dir=d, suffix=".so.tmp")
            os.close(fd)
            cmd = [cxx] + CXXFLAGS + ["-include", HEADER, src_tmp, "-o", tmp]
            r = subprocess.run(cmd, capture_output=True, text=True)
            os.replace(src_tmp, src)  # kept beside the library, for reading
            if r.returncode != 0:
                os.unlink(tmp)
                raise BackendError(
                    f"compiling generated kernel {src} failed:\n{' '.join(cmd)}\n{r.stderr[-4000:]}"
                )
            os.replace(tmp, so)  # atomic: a concurrent process never loads half a library
            _compiles[0] += 1
        lib = ctypes.CDLL(so)
        if argtypes is not False and not hasattr(lib, "pygrid_launch"):
            raise BackendError(f"the cached emulation library {so} has no pygrid_launch (a broken "
                               f"compile); delete it and run again")
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


class EmulatedSIMTBackend:
    """Generated GPU source run on the CPU under simt_emulation.h (``cuda-emulated``, ``opencl-emulated``,
    ``opencl-simd-emulated``: the OpenCL vector form sycl runs on a CPU device).

    Buffers are host numpy arrays (the unified device, or the emulated device of
    ``--emulate-device``); reductions run the device reduction kernels under the emulation.
    """

    device = "unified"
    asynchronous = False

    def __init__(self, dialect="cuda", form=None):
        self.dialect = dialect
        #: the generated kernels' form: the dialect's SIMT form, or for OpenCL the vector form
        #: 'opencl-simd' the sycl backend runs on a CPU device
        self.form = form or dialect
        self.name = f"{self.form}-emulated"
        self._reduce_fns = {}
        compiler()

    def describe(self) -> str:
        return f"{self.name} (generated {self.dialect} C under the SIMT emulation, on the host CPU)"

    def accelerator_for(self, osites, kernel, *args):
        host.serial_for(osites, kernel, *args)

    def bind_kernel(self, kernel, *args, balance=False):
        return host.serial_launcher(kernel, args)

    # ---- reductions: the device kernels of pygrid.accelerator.reduction_kernels ----
    REDUCE_ROWS = 4096
    #: numbers a thread of the CUDA dialect's norm2 and inner product loads at a time
    REDUCE_LOADS = 1
    #: rows of a group in the OpenCL dialect's chunks (reduction_kernels.plan_norm2)
    REDUCE_STRIDE = 1

    def _reduce(self, plan, arrays, ncomp=None):
        dtype = arrays[0].dtype
        if dtype not in (np.float64, np.float32):
            raise BackendError(f"reductions take float64 or float32 buffers, not {dtype}")
        from .covariant import C_LAUNCH_ARGTYPES

        loads = int(self.REDUCE_LOADS)
        key = (plan.name, dtype.char, arrays[0].shape[3], loads)
        fn = self._reduce_fns.get(key)  # a CG calls these every iteration: no source hashed per call
        if fn is None:
            lib = compile_emulated(rk.source(self.dialect, dtype, np.float64, arrays[0].shape[3], loads)
                                   + rk.emulation_wrappers(dtype, np.float64, self.dialect), argtypes=False)
            fn = self._reduce_fns[key] = getattr(lib, "pygrid_launch_" + plan.name)
            fn.argtypes = C_LAUNCH_ARGTYPES
        part = np.empty(plan.rows * plan.width)
        arrs = [np.ascontiguousarray(x) for x in arrays] + [part]
        blocks, tpb = codegen_c.launch_dims(plan.rows, 1, threads_per_block())
        fn((ctypes.c_void_p * len(arrs))(*[x.ctypes.data for x in arrs]),
           (ctypes.c_long * len(plan.ints))(*plan.ints), blocks, tpb)
        return rk.finish(plan, rk.partial_sums(plan, part), ncomp)

    def norm2(self, a):
        return self._reduce(rk.plan_norm2(a.shape, self.REDUCE_ROWS, self.dialect, a.dtype,
                                          self.REDUCE_STRIDE), [a])

    def inner_product(self, a, b):
        plan = rk.plan_inner(a.shape, self.REDUCE_ROWS, self.dialect, a.dtype, self.REDUCE_STRIDE)
        return self._reduce(plan, [a, np.asarray(b, dtype=a.dtype)])

    def site_sum(self, a):
        return self._reduce(rk.plan_site_sum(a.shape, self.REDUCE_ROWS), [a])

    def slice_sum(self, a, table):
        plan = rk.plan_slice_sum(a.shape, np.shape(table))
        return self._reduce(plan, [a, np.asarray(table, dtype=np.int32)], a.shape[1])

    def set_threads(self, n):
        pass  # the emulation runs the threads of a launch one after another

    def threads(self):
        return 1

    def synchronize(self) -> None:
        pass  # every launch returns when its kernel has finished

    def device_copy(self, host):
        return host  # kernels here read host arrays

    def copy_to_host(self, buf, out):
        host.copy_to_host(buf, out)

    def copy_from_host(self, buf, hbuf):
        host.copy_from_host(buf, hbuf)

    def host_array(self, shape, dtype):
        return host.host_array(shape, dtype)

    def bench_copy(self, n, dtype):
        return None

    def launch(self, kernel, args, nsimd, dtype):
        emulated_launch(self.form, kernel, args, nsimd, dtype)

    def relayout(self, kind, out, inp, om=None, lm=None):
        """The device layout kernels (pygrid.accelerator.layout_kernels), their source under the emulation."""
        from . import layout_kernels as lk

        src = lk.source(self.dialect, out.dtype.name, inp.dtype.name)
        lib = compile_emulated(src + lk.emulation_wrappers(out.dtype.name, inp.dtype.name), argtypes=False)
        name, ints, threads = lk.launch_plan(kind, out, inp, om, lm)
        arrs = [out, inp] + (
            [] if kind == "cast" else [np.ascontiguousarray(m, dtype=np.int32) for m in (om, lm)]
        )
        for a in arrs[:2]:
            if not a.flags.c_contiguous:
                raise BackendError(f"relayout {kind}: buffers must be C-contiguous")
        from .covariant import C_LAUNCH_ARGTYPES

        fn = getattr(lib, "pygrid_launch_" + name)
        fn.argtypes = C_LAUNCH_ARGTYPES
        blocks, tpb = codegen_c.launch_dims(threads, 1, threads_per_block())
        fn((ctypes.c_void_p * len(arrs))(*[a.ctypes.data for a in arrs]), (ctypes.c_long * len(ints))(*ints),
           blocks, tpb)

    def source(self, ir, nsimd, alias, dtype):
        src = codegen_c.kernel_source(ir, nsimd, alias, dtype, self.form)
        return src + launch_wrapper(src)

    def prepare(self, ir, shifts, coefs, nsimd, alias, dtype, osites=None):
        compile_emulated(self.source(ir, nsimd, alias, np.dtype(dtype).name))

    def run(self, ir, out, inputs, shifts, coefs, nsimd, alias=False, keep=True):
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
        blocks, tpb = codegen_c.launch_shape(self.form, osites, nsimd, threads_per_block())
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
            raise BackendError(f"{kernel.name}: {p.name} must be a C-contiguous host array "
                               "on an emulated backend")
        ptrs.append(a.ctypes.data)
    n = covariant.thread_count(kernel, args, nsimd) // int(nsimd)
    blocks, tpb = codegen_c.launch_shape(dialect, n, nsimd, threads_per_block())
    lib.pygrid_launch((ctypes.c_void_p * len(ptrs))(*ptrs), (ctypes.c_long * max(1, len(ints)))(*ints),
                      blocks, tpb)
