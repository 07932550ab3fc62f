"""The 'cuda' and 'hip' backends: generated CUDA C through CuPy on an NVIDIA or AMD GPU.

The CUDA-dialect source of :mod:`.codegen_c` (and of the covariant and layout
kernels) is compiled by CuPy's ``RawKernel`` (NVRTC on NVIDIA, hipRTC with CuPy
for ROCm on AMD) and launched with one thread per (outer site, lane) and
``accelerator_threads`` threads per block (``--accelerator-threads``).  Device
buffers are CuPy arrays allocated through CuPy's memory pool under the
MemoryManager (device name 'cuda' / 'hip' in ``pygrid.memory.devices``);
reductions are the one-pass kernels of :mod:`.reduction_kernels`, their partial sums
added on the device by CuPy.  Selecting the
backend without CuPy or without a device raises :class:`BackendError` saying
what to install.  What has run on GPU hardware is in docs/backends.md; the same
source runs here under the SIMT emulation (``emulated_backend.py``).
"""
from __future__ import annotations

import os

import numpy as np

from ..communicator import rank_on_this_node
from ..errors import BackendError
from ..memory.devices import Device
from . import codegen_c, host, reduction_kernels as rk
from .codegen_c import threads_per_block
from .device_tables import DeviceTables

#: NVRTC / hipRTC options: C++17, NVRTC's default since CUDA 11, named so hipRTC compiles the same dialect
NVRTC_OPTIONS = ("-std=c++17",)

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


def choose_device(count):
    """The GPU this process uses among the ``count`` it sees: ``PYGRID_CUDA_DEVICE`` where set,
    else its rank on the node modulo ``count``, as Grid chooses: ranks sharing a node take a GPU
    each, and share them in turn where they outnumber them.  A launcher that shows each rank one
    GPU (``srun --gpus-per-task=1``) leaves one to choose."""
    raw = os.environ.get("PYGRID_CUDA_DEVICE", "").strip()
    if not raw:
        return rank_on_this_node() % count
    if not raw.isdigit() or int(raw) >= count:
        raise BackendError(f"PYGRID_CUDA_DEVICE={raw!r} names no device: this process sees {count} "
                           f"(0 to {count - 1}); unset it to choose by the rank on the node")
    return int(raw)


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

    def to_device(self, hbuf, dev):
        dev.set(np.ascontiguousarray(hbuf))

    def to_host(self, dev, hbuf):
        dev.get(out=hbuf)

    def __repr__(self):
        return f"CupyDevice({self.name!r})"


class CudaBackend:
    """Generated CUDA C through CuPy RawKernel on an NVIDIA ('cuda') or AMD ('hip') GPU."""

    asynchronous = True  # launches queue on the current stream

    def __init__(self, name="cuda"):
        self.name = name
        self.device = name
        self.cupy = import_cupy(name)
        # the current device of this thread: where CuPy allocates and launches from here on
        self.device_count = int(self.cupy.cuda.runtime.getDeviceCount())
        self.device_id = choose_device(self.device_count)
        self.cupy.cuda.Device(self.device_id).use()
        from ..memory.devices import register_device

        register_device(name, lambda: CupyDevice(name))
        self._kernels = {}
        self.tables = DeviceTables(self.cupy.asarray)

    def describe(self) -> str:
        try:
            label = self.cupy.cuda.runtime.getDeviceProperties(self.device_id)["name"]
            label = label.decode() if isinstance(label, bytes) else str(label)
        except Exception:  # a stand-in or an old CuPy without properties: the device number alone
            label = "GPU"
        if self.device_count > 1:
            label += f", device {self.device_id} of {self.device_count}"
        return f"{self.name} ({label})"

    def set_threads(self, n):
        pass  # the GPU's threads are set per launch (--accelerator-threads)

    def threads(self):
        return 1

    def kernel(self, ir, nsimd, alias, dtype):
        key = (ir.key(), nsimd, alias, dtype)
        k = self._kernels.get(key)
        if k is None:
            src = codegen_c.kernel_source(ir, nsimd, alias, dtype, "cuda")
            k = self.cupy.RawKernel(src, codegen_c.KERNEL_NAME, options=NVRTC_OPTIONS)
            self._kernels[key] = k
        return k

    def _dev(self, a):
        return a if isinstance(a, self.cupy.ndarray) else self.cupy.asarray(a)

    def prepare(self, ir, shifts, coefs, nsimd, alias, dtype, osites=None):
        k = self.kernel(ir, nsimd, alias, np.dtype(dtype).name)
        if hasattr(k, "compile"):  # CuPy compiles a RawKernel at its first launch otherwise
            k.compile()

    def run(self, ir, out, inputs, shifts, coefs, nsimd, alias=False, keep=True):
        cp = self.cupy
        rdt = np.dtype(out.dtype)
        k = self.kernel(ir, nsimd, alias, rdt.name)
        consts = self.tables.shifts(shifts)
        cf = host.coef_reals(coefs, rdt)
        osites = int(out.shape[0])
        blocks, tpb = codegen_c.launch_dims(osites, nsimd, threads_per_block())
        dout = self._dev(out)  # a host buffer (unified memory manager) goes through a device copy
        args = (
            [dout] + [self._dev(a) for a in inputs] + consts + [self.tables.reals(cf, rdt), np.int32(osites)]
        )
        k((blocks,), (tpb,), tuple(args))
        if dout is not out:
            out[...] = cp.asnumpy(dout)

    # ---- reductions on the device, accumulated in double, one pass over the field ----
    #: most threads of a reduction: enough to keep a large GPU's memory busy; their partial sums
    #: (8 bytes each) are added on the device
    REDUCE_ROWS = 1 << 17
    #: numbers each thread of norm2 and the inner product loads at a time (reduction_kernels):
    #: one, as measured on the H200 (benchmarks/bench_device_reductions.py sweeps it)
    REDUCE_LOADS = 1

    def _reduce(self, plan, dtype, pointers, ncomp=None):
        """Run one reduction (pygrid.accelerator.reduction_kernels); its value on the host."""
        cp = self.cupy
        nsimd = int(pointers[0].shape[3])
        loads = int(self.REDUCE_LOADS)
        key = ("reduce", np.dtype(dtype).name, nsimd, loads)
        mod = self._kernels.get(key)
        if mod is None:
            src = rk.source(self.name, dtype, np.float64, nsimd, loads)
            mod = self._kernels[key] = {n: cp.RawKernel(src, n, options=NVRTC_OPTIONS) for n in rk.KERNELS}
        part = cp.empty(plan.rows * plan.width, dtype=np.float64)
        blocks, tpb = codegen_c.launch_dims(plan.rows, 1, threads_per_block())
        mod[plan.name]((blocks,), (tpb,), tuple(pointers + [part] + [np.int64(i) for i in plan.ints]))
        return rk.finish(plan, cp.asnumpy(rk.partial_sums(plan, part)), ncomp)

    def inner_product(self, a, b):
        da, db = self._dev(a), self._dev(b)
        if db.dtype != da.dtype:
            db = db.astype(da.dtype)
        plan = rk.plan_inner(da.shape, self.REDUCE_ROWS)
        return self._reduce(plan, da.dtype, [da, db])

    def norm2(self, a):
        d = self._dev(a)
        return self._reduce(rk.plan_norm2(d.shape, self.REDUCE_ROWS), d.dtype, [d])

    def slice_sum(self, a, table):
        if not isinstance(a, self.cupy.ndarray):
            return host.slice_sum(a, table)
        plan = rk.plan_slice_sum(a.shape, np.shape(table))
        return self._reduce(plan, a.dtype, [a, self.tables.ints(table)], a.shape[1])

    def site_sum(self, a):
        d = self._dev(a)
        return self._reduce(rk.plan_site_sum(d.shape, self.REDUCE_ROWS), d.dtype, [d])

    def _cov_kernel(self, kernel, nsimd, dtype):
        from . import covariant

        key = kernel.key(nsimd, dtype, self.name)
        k = self._kernels.get(key)
        if k is None:
            src = covariant.generate(kernel, "cuda", nsimd, dtype)
            k = self._kernels[key] = self.cupy.RawKernel(src, kernel.name, options=NVRTC_OPTIONS)
        return k

    def launch(self, kernel, args, nsimd, dtype):
        """Run a covariant kernel (pygrid.accelerator.covariant): its CUDA C through CuPy."""
        from . import covariant

        cp = self.cupy
        k = self._cov_kernel(kernel, nsimd, dtype)
        call, back = covariant.device_call(
            kernel, args, self._dev, self.tables.ints,
            lambda a: self.tables.reals(a, dtype), np.int64)
        n = covariant.thread_count(kernel, args, nsimd) // int(nsimd)
        blocks, tpb = codegen_c.launch_dims(n, nsimd, threads_per_block())
        k((blocks,), (tpb,), tuple(call))
        for hbuf, d in back:
            hbuf[...] = cp.asnumpy(d)

    def relayout(self, kind, out, inp, om=None, lm=None):
        """The device layout kernels (pygrid.accelerator.layout_kernels) through CuPy."""
        from . import layout_kernels as lk

        cp = self.cupy
        if not isinstance(out, cp.ndarray) and not isinstance(inp, cp.ndarray):
            return host.relayout(kind, out, inp, om, lm)
        key = ("layout", out.dtype.name, inp.dtype.name)
        mod = self._kernels.get(key)
        if mod is None:
            mod = self._kernels[key] = {
                n: self.cupy.RawKernel(lk.source("cuda", out.dtype.name, inp.dtype.name), n,
                                        options=NVRTC_OPTIONS)
                for n in lk.KERNELS
            }
        name, ints, threads = lk.launch_plan(kind, out, inp, om, lm)
        dout, dinp = self._dev(out), self._dev(inp)
        args = [dout, dinp] + ([] if kind == "cast" else [self.tables.ints(om), self.tables.ints(lm)])
        blocks, tpb = codegen_c.launch_dims(threads, 1, threads_per_block())
        mod[name]((blocks,), (tpb,), tuple(args + [np.int64(i) for i in ints]))
        if dout is not out:
            out[...] = cp.asnumpy(dout)

    def synchronize(self):
        self.cupy.cuda.Device().synchronize()

    def device_copy(self, host):
        """A CuPy array holding a copy of the host array ``host``."""
        return self.cupy.asarray(host)

    def copy_to_host(self, buf, out):
        """The CuPy array ``buf`` into the host array ``out`` (waits for the copy)."""
        buf.get(out=out)

    def copy_from_host(self, buf, host):
        """The host array ``host`` into the CuPy array ``buf``."""
        buf.set(host)

    def host_array(self, shape, dtype):
        """A numpy array over page-locked memory from CuPy's pinned memory pool (returned to the
        pool when the array dies); pageable memory where the driver refuses to lock more, since
        only the copies' speed depends on it."""
        dtype = np.dtype(dtype)
        n = int(np.prod(shape, dtype=np.int64))
        try:
            mem = self.cupy.cuda.alloc_pinned_memory(max(n * dtype.itemsize, 1))
        except (MemoryError, self.cupy.cuda.runtime.CUDARuntimeError):
            return np.empty(shape, dtype)
        return np.frombuffer(mem, dtype, n).reshape(shape)

    def bench_copy(self, n, dtype):
        """A device-to-device copy of ``n`` reals (CuPy): the device's bandwidth ceiling; runs one and
        waits."""
        cp = self.cupy
        src = cp.asarray(1.0 + np.arange(n, dtype=dtype) * 1e-6)
        dst = cp.asarray(np.ones(n, dtype=dtype))

        def run():
            cp.copyto(dst, src)
            cp.cuda.Device().synchronize()

        return run

    def accelerator_for(self, osites, kernel, *args):
        raise BackendError(
            f"hand-written numba kernels (accelerator_for) do not run on the {self.name} backend"
        )

    def bind_kernel(self, kernel, *args, balance=False):
        raise BackendError(
            f"hand-written numba kernels (bind_kernel) do not run on the {self.name} backend"
        )
