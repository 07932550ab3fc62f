"""The 'sycl' backend: generated OpenCL C built into a SYCL program by dpctl, on USM device memory.

* Kernels: :func:`codegen_c.kernel_source` and the covariant Dirac kernels in OpenCL C, built
  with ``dpctl.program.create_program_from_source`` and submitted on a ``dpctl.SyclQueue``: on a
  CPU device in the vector form (``opencl-simd``, a work-item per outer site, its lanes one
  OpenCL vector), on a GPU in the SIMT form (a work-item per (outer site, lane),
  ``accelerator_threads`` work-items per work-group); :meth:`SyclBackend.form`.
* Memory: device buffers are USM device allocations (``dpctl.memory``) seen
  as arrays by :class:`UsmArray`, allocated for the MemoryManager by
  :class:`UsmDevice` (device name 'sycl').  Neither ``dpctl.tensor`` nor dpnp
  is needed.
* Reductions run on the device: the OpenCL C of :mod:`.reduction_kernels` leaves
  per-work-item partial sums, accumulated in double, in host USM, that the host adds.
* The CPU OpenCL device (``intel-opencl-rt``): the ICD file that the wheel
  installs points at a path that does not exist
  (``/opt/anaconda1anaconda2anaconda3/lib/libintelocl.so``), so
  :func:`setup_opencl_icd` writes an ICD directory of its own (one ``.icd`` file
  holding the absolute path of the installed ``libintelocl.so``) and exports
  ``OCL_ICD_VENDORS`` and ``LD_LIBRARY_PATH`` *before* dpctl is imported;
  nobody has to do it by hand.

Where it has run, and with which package versions: docs/backends.md.
"""
from __future__ import annotations

import ctypes
import glob
import os
import sys
import tempfile

import numpy as np

from ..communicator import rank_on_this_node
from ..errors import BackendError, ConformabilityError
from ..memory.devices import Device
from . import codegen_c, host, reduction_kernels as rk
from .codegen_c import threads_per_block
from .device_tables import DeviceTables

INSTALL = "pip install pygrid[sycl] (dpctl and intel-opencl-rt)"


def find_libintelocl(prefix=None):
    """Absolute path of the installed libintelocl.so (under ``prefix``/lib), or None."""
    prefix = prefix or sys.prefix
    for pat in (
        "lib/libintelocl.so",
        "lib/libintelocl.so.*",
        "lib/**/libintelocl.so",
        "lib64/libintelocl.so",
    ):
        hits = sorted(glob.glob(os.path.join(prefix, pat), recursive=True))
        if hits:
            return os.path.abspath(hits[0])
    return None


def setup_opencl_icd(prefix=None, icd_dir=None):
    """Make the CPU OpenCL runtime of ``prefix`` visible to the ICD loader; returns the ICD dir or None.

    Writes ``<icd_dir>/pygrid-intel-cpu.icd`` whose single line is the absolute
    path of libintelocl.so, sets ``OCL_ICD_VENDORS`` to ``icd_dir`` and puts
    ``prefix/lib`` first on ``LD_LIBRARY_PATH`` (for child processes; in this
    process the runtime's libraries are found through the absolute path and
    preloaded).  Must run before dpctl is imported.  An ``OCL_ICD_VENDORS``
    already set by the user is left alone.
    """
    from .compile_cache import cache_dir

    prefix = prefix or sys.prefix
    lib = find_libintelocl(prefix)
    if lib is None:
        return None
    if os.environ.get("OCL_ICD_VENDORS") and not os.environ.get("PYGRID_OWN_ICD"):
        return os.environ["OCL_ICD_VENDORS"]
    icd_dir = icd_dir or os.path.join(cache_dir(), "opencl-icd")
    os.makedirs(icd_dir, exist_ok=True)
    path = os.path.join(icd_dir, "pygrid-intel-cpu.icd")
    if not os.path.exists(path) or open(path).read().strip() != lib:
        # a temporary name of this process's own: the ranks of an MPI job start here at once
        fd, tmp = tempfile.mkstemp(dir=icd_dir, suffix=".icd.tmp")
        with os.fdopen(fd, "w") as f:
            f.write(lib + "\n")
        os.replace(tmp, path)
    os.environ["OCL_ICD_VENDORS"] = icd_dir
    os.environ["PYGRID_OWN_ICD"] = "1"
    libdir = os.path.dirname(lib)
    parts = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    if libdir not in parts:
        os.environ["LD_LIBRARY_PATH"] = os.pathsep.join([libdir] + parts)
    try:  # the dynamic loader read LD_LIBRARY_PATH at start-up: load the runtime by path now
        ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
    except OSError:
        pass
    return icd_dir


def import_dpctl():
    """dpctl (with dpctl.program and dpctl.memory) after the ICD set-up, or BackendError.

    Only dpctl's core is used (queues, programs built from OpenCL C, USM
    allocations); neither ``dpctl.tensor`` nor dpnp is needed.
    """
    setup_opencl_icd()
    try:
        import dpctl
        import dpctl.memory
        import dpctl.program
    except ImportError as e:
        raise BackendError(f"the sycl backend needs dpctl, and dpctl is not installed: {INSTALL}; "
                           "or use --accelerator openmp (the CPU)") from e
    return dpctl


def node_device(default, devices):
    """The device of this rank among ``devices`` (those of the default device's backend and kind):
    its rank on the node modulo their number, as the cuda backend chooses among GPUs; ``default``
    where there is one."""
    devices = list(devices)
    return devices[rank_on_this_node() % len(devices)] if len(devices) > 1 else default


def make_queue(dpctl, selector=None):
    """A queue on the device ``selector`` (or ``PYGRID_SYCL_DEVICE``) names, else on the default
    device; where that is one of several GPUs of one kind, on this rank's own (:func:`node_device`)."""
    selector = selector or os.environ.get("PYGRID_SYCL_DEVICE") or ""
    try:
        if selector:
            return dpctl.SyclQueue(selector)
        q = dpctl.SyclQueue()
        dev = q.sycl_device
        if not dev.is_gpu:
            return q
        mine = node_device(dev, dpctl.get_devices(backend=dev.backend, device_type=dev.device_type))
        return q if mine == dev else dpctl.SyclQueue(mine)
    except Exception as e:
        try:
            devs = [str(d) for d in dpctl.get_devices()]
        except Exception:  # pragma: no cover - broken runtime
            devs = []
        raise BackendError(
            f"no SYCL device found{' for ' + repr(selector) if selector else ''} ({e}); devices: "
            f"{devs or 'none'}. "
            f"For the CPU OpenCL device: {INSTALL}"
        ) from e


class UsmArray:
    """A USM device allocation seen as an array (shape, dtype) for the MemoryManager and the kernels.

    The kernels get ``usm_data`` (a ``dpctl.memory.MemoryUSMDevice``).  A
    ``reshape`` shares the allocation.  Code that treats an accelerator view as
    a numpy array (the numpy evaluator, ``poke_index``, ``convert``,
    ``pick_checkerboard``/``set_checkerboard`` in pygrid.lattice.ops) still
    works, through a copy to the host (``__array__``, ``__getitem__``) and, for
    writes (``__setitem__``, writes into a ``transpose``), a copy back: correct,
    not fast; those operations are not device kernels on this backend.
    """

    __slots__ = ("usm_data", "shape", "dtype", "stats", "writable")

    def __init__(self, mem, shape, dtype, stats=None, writable=True):
        self.usm_data = mem
        self.shape = tuple(int(n) for n in shape)
        self.dtype = np.dtype(dtype)
        # the owning UsmDevice's counters of host round trips outside the memory manager
        self.stats = stats
        self.writable = writable

    def read_only(self):
        """The same allocation, refusing ``set`` and item assignment (what a read view hands out)."""
        return UsmArray(self.usm_data, self.shape, self.dtype, self.stats, writable=False)

    @property
    def size(self):
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self):
        return self.size * self.dtype.itemsize

    @property
    def ndim(self):
        return len(self.shape)

    def reshape(self, *shape):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        n = self.size
        shape = tuple(int(s) for s in shape)
        if -1 in shape:
            known = int(np.prod([s for s in shape if s != -1], dtype=np.int64)) or 1
            shape = tuple(n // known if s == -1 else s for s in shape)
        if int(np.prod(shape, dtype=np.int64)) != n:
            raise ValueError(f"cannot reshape a device array of shape {self.shape} to {shape}")
        return UsmArray(self.usm_data, shape, self.dtype, self.stats, self.writable)

    # ---- host round trips (numpy interop) ----
    def _count(self, key):
        if self.stats is not None:
            self.stats[key + "_count"] += 1
            self.stats[key + "_bytes"] += self.nbytes

    def get(self):
        host = np.empty(self.shape, dtype=self.dtype)
        if self.nbytes:
            self.usm_data.copy_to_host(host.reshape(-1).view(np.uint8))
        self._count("host_read")
        return host

    def set(self, host, count=True):
        if not self.writable:
            raise ValueError("assignment destination is read-only (a read view of a field)")
        host = np.ascontiguousarray(host, dtype=self.dtype)
        if host.size != self.size:
            raise ValueError(f"set: {host.shape} does not fit a device array of shape {self.shape}")
        if self.nbytes:
            self.usm_data.copy_from_host(host.reshape(-1).view(np.uint8))
        if count:
            self._count("host_write")

    def __array__(self, dtype=None, copy=None):
        a = self.get()
        return a if dtype is None else a.astype(dtype, copy=False)

    def astype(self, dtype, copy=True):
        return self.get().astype(dtype, copy=False)

    def __getitem__(self, key):
        return self.get()[key]

    def __setitem__(self, key, value):
        if not self.writable:
            raise ValueError("assignment destination is read-only (a read view of a field)")
        host = self.get()
        host[key] = np.asarray(value)
        self.set(host)

    def transpose(self, *axes):
        return _UsmTransposed(
            self, axes[0] if len(axes) == 1 and isinstance(axes[0], (tuple, list)) else axes
        )

    def __len__(self):
        return self.shape[0]

    def __repr__(self):
        return f"UsmArray(shape={self.shape}, dtype={self.dtype})"


class _UsmTransposed:
    """``UsmArray.transpose(axes)``: reads and writes go through a host copy of the parent."""

    def __init__(self, parent, axes):
        self.parent, self.axes = parent, tuple(axes)

    def __array__(self, dtype=None, copy=None):
        a = self.parent.get().transpose(self.axes)
        return a if dtype is None else a.astype(dtype)

    def __getitem__(self, key):
        return self.parent.get().transpose(self.axes)[key]

    def __setitem__(self, key, value):
        host = self.parent.get()
        host.transpose(self.axes)[key] = np.asarray(value)
        self.parent.set(host)


class UsmDevice(Device):
    """USM device allocations on a SYCL queue for the MemoryManager (device name 'sycl')."""

    unified = False
    name = "sycl"

    def __init__(self, queue=None):
        self.dpctl = import_dpctl()
        self.queue = queue or make_queue(self.dpctl)
        self.allocated_bytes = 0
        self.host_stats = dict.fromkeys(("host_read_count", "host_read_bytes", "host_write_count",
                                         "host_write_bytes"), 0)

    def extra_stats(self):
        """Host round trips of field buffers that did not go through the manager (see UsmArray)."""
        return dict(self.host_stats)

    def reset_extra_stats(self):
        for k in self.host_stats:
            self.host_stats[k] = 0

    def alloc(self, nbytes, dtype, shape):
        try:
            mem = self.dpctl.memory.MemoryUSMDevice(max(1, int(nbytes)), queue=self.queue)
        except Exception as e:
            raise MemoryError(f"USM device allocation of {nbytes} bytes failed: {e}") from e
        self.allocated_bytes += int(nbytes)
        return UsmArray(mem, shape, dtype, self.host_stats)

    def free(self, array):
        self.allocated_bytes -= array.nbytes  # the USM memory is freed when the last reference goes

    def to_device(self, host, dev):
        dev.set(host, count=False)  # the manager counts its own transfers

    def to_host(self, dev, host):
        if host.flags.c_contiguous:
            dev.usm_data.copy_to_host(host.reshape(-1).view(np.uint8))
        else:  # pragma: no cover - field buffers are contiguous
            host[...] = dev.get().reshape(host.shape)

    def __repr__(self):
        return f"UsmDevice({self.queue.sycl_device.name!r}, allocated_bytes={self.allocated_bytes})"


class SyclBackend:
    """Generated OpenCL C on a SYCL device through dpctl (``--accelerator sycl``).

    Field buffers are :class:`UsmArray` when the MemoryManager runs on the 'sycl'
    device (``pg.init(accelerator='sycl')`` with ``--device-mem``, or
    ``pg.configure_memory(device='sycl')``); host numpy buffers (the unified
    manager) are copied to the device and back at each launch.
    """

    name = "sycl"
    device = "sycl"
    asynchronous = False  # every submission is waited for
    #: partial sums a reduction leaves for the host to add, at most (on a GPU device: its rows
    #: times their width)
    REDUCE_PARTIALS = 8192
    #: rows of the vector reductions on a CPU device, for each of its compute units: each sums
    #: one contiguous chunk (more rows than cores, for the runtime to balance them)
    CPU_ROWS_PER_UNIT = 64

    def __init__(self, selector=None):
        self.dpctl = import_dpctl()
        self.queue = make_queue(self.dpctl, selector)
        self.fp64 = bool(getattr(self.queue.sycl_device, "has_aspect_fp64", True))
        # read once: every launch asks which form its kernels take (form())
        self.is_cpu = bool(self.queue.sycl_device.is_cpu)
        from ..memory.devices import register_device

        queue = self.queue
        register_device("sycl", lambda: UsmDevice(queue))
        self._kernels = {}
        self._reduce_kernels = {}
        self._partials = {}
        self._plans = {}
        self.tables = DeviceTables(self.to_device)
        self.compiles = 0
        self.compile_seconds = 0.0

    def _build(self, src, name):
        import time

        t = time.perf_counter()
        try:
            prog = self.dpctl.program.create_program_from_source(self.queue, src)
        except Exception as e:
            raise BackendError(f"the SYCL device {self.queue.sycl_device.name} did not build a generated "
                               f"kernel ({e}):\n{src}") from e
        self.compiles += 1
        self.compile_seconds += time.perf_counter() - t
        return prog.get_sycl_kernel(name)

    def kernel(self, ir, nsimd, alias, dtype):
        if dtype == "float64" and not self.fp64:
            raise BackendError(f"the SYCL device {self.queue.sycl_device.name} has no double precision; "
                               "use single precision fields")
        form = self.form(nsimd)
        key = (ir.key(), nsimd, alias, dtype, form)
        k = self._kernels.get(key)
        if k is None:
            src = codegen_c.kernel_source(ir, nsimd, alias, dtype, form)
            k = self._kernels[key] = self._build(src, codegen_c.KERNEL_NAME)
        return k

    def to_device(self, a, dtype=None):
        """A UsmArray holding ``a`` (returned as is when it already is one)."""
        if isinstance(a, UsmArray):
            return a
        a = np.ascontiguousarray(a, dtype=dtype)
        mem = self.dpctl.memory.MemoryUSMDevice(max(1, a.nbytes), queue=self.queue)
        d = UsmArray(mem, a.shape, a.dtype)
        d.set(a)
        return d

    def describe(self) -> str:
        return f"sycl ({self.queue.sycl_device.name})"

    def set_threads(self, n):
        pass  # the SYCL runtime owns the device's threads

    def threads(self):
        return 1

    def prepare(self, ir, shifts, coefs, nsimd, alias, dtype, osites=None):
        self.kernel(ir, nsimd, alias, np.dtype(dtype).name)

    def run(self, ir, out, inputs, shifts, coefs, nsimd, alias=False, keep=True):
        rdt = np.dtype(out.dtype)
        if rdt not in (np.float64, np.float32):
            raise BackendError(f"generated kernels take float64 or float32 buffers, not {rdt}")
        k = self.kernel(ir, nsimd, alias, rdt.name)
        consts = self.tables.shifts(shifts)
        cf = host.coef_reals(coefs, rdt)
        dout = self.to_device(out)  # a host buffer (unified memory manager) goes through a device copy
        devs = {id(out): dout}  # an input that is the output (in place) or repeated is copied once
        ins = []
        for a in inputs:
            if id(a) not in devs:
                devs[id(a)] = self.to_device(a)
            ins.append(devs[id(a)])
        osites = int(out.shape[0])
        args = [dout.usm_data] + [a.usm_data for a in ins] + [a.usm_data for a in consts]
        args += [self.tables.reals(cf, rdt).usm_data, ctypes.c_int(osites)]
        self._submit(self.form(nsimd), k, args, osites, nsimd)
        if dout is not out:
            out[...] = dout.get()

    # ---- reductions on the device, accumulated in double where the device has it ----
    def _reduce(self, plan, dtype, pointers):
        """Run one reduction (pygrid.accelerator.reduction_kernels) and add its partial sums here."""
        acc = np.float64 if self.fp64 else np.float32
        nsimd = pointers[0].shape[3]
        key = (plan.name, np.dtype(dtype).name, nsimd)
        k = self._reduce_kernels.get(key)
        if k is None:
            k = self._reduce_kernels[key] = self._build(rk.source("opencl", dtype, acc, nsimd), plan.name)
        size = plan.rows * plan.width
        part = self._partials.get((size, acc))
        if part is None:
            # host USM the kernel writes and numpy reads in place: a device buffer's copy back
            # cost 40 us a reduction on the CPU device, more than a norm2 of 16^4 in single
            mem = self.dpctl.memory.MemoryUSMHost(size * np.dtype(acc).itemsize, queue=self.queue)
            part = self._partials[(size, acc)] = (mem, np.frombuffer(mem, dtype=acc))
        args = [p.usm_data for p in pointers] + [part[0]] + [ctypes.c_longlong(i) for i in plan.ints]
        if plan.name in ("pg_norm2", "pg_inner"):
            self.queue.submit(k, args, [plan.rows], [plan.ints[2]]).wait()
        else:
            self.queue.submit(k, args, [plan.rows]).wait()
        return rk.partial_sums(plan, part[1])

    def _vector_rows(self, shape, dtype, complex_):
        """(most rows, rows a group) of ``pg_norm2`` / ``pg_inner`` on this device: on a CPU one
        contiguous chunk a work-item; on a GPU a work-group's rows on neighbouring vectors, the
        partial sums held to REDUCE_PARTIALS."""
        if self.is_cpu:
            return self.CPU_ROWS_PER_UNIT * max(1, int(self.queue.sycl_device.max_compute_units)), 1
        L = threads_per_block()
        width = rk.vector_width(shape[3], dtype) * (2 if complex_ else 1)
        return max(L, self.REDUCE_PARTIALS // width // L * L), L

    def _vector_plan(self, make, shape, dtype):
        """The plan of ``pg_norm2`` or ``pg_inner`` on this device (a solver asks every iteration)."""
        key = (make, shape, dtype)
        plan = self._plans.get(key)
        if plan is None:
            rows, stride = self._vector_rows(shape, dtype, make is rk.plan_inner)
            plan = self._plans[key] = make(shape, rows, "opencl", dtype, stride)
        return plan

    def norm2(self, a):
        d = self.to_device(a)
        plan = self._vector_plan(rk.plan_norm2, d.shape, d.dtype)
        return rk.finish(plan, self._reduce(plan, d.dtype, [d]))

    def inner_product(self, a, b):
        da, db = self.to_device(a), self.to_device(b)
        if da.dtype != db.dtype:
            db = self.to_device(db.get().astype(da.dtype))
        plan = self._vector_plan(rk.plan_inner, da.shape, da.dtype)
        return rk.finish(plan, self._reduce(plan, da.dtype, [da, db]))

    def slice_sum(self, a, table):
        if not isinstance(a, UsmArray):
            return host.slice_sum(a, table)
        plan = rk.plan_slice_sum(a.shape, np.shape(table))
        return rk.finish(plan, self._reduce(plan, a.dtype, [a, self.tables.ints(table)]), a.shape[1])

    def site_sum(self, a):
        d = self.to_device(a)
        plan = rk.plan_site_sum(d.shape, self.REDUCE_PARTIALS // 2)
        return rk.finish(plan, self._reduce(plan, d.dtype, [d]))

    #: the form of the generated kernels (expressions and Dirac): 'opencl-simd' (a work-item a
    #: site, its lanes one OpenCL vector), 'opencl' (SIMT: a work-item a lane) or None for the
    #: device's own: SIMD on a CPU device, whose runtime vectorises a SIMT kernel across the
    #: lanes' work-items and ran it at half the speed of vector loads
    FORM = None

    def form(self, nsimd):
        """The generated kernels' form on this device for ``nsimd`` lanes."""
        form = self.FORM
        if form is None:
            form = "opencl-simd" if self.is_cpu else "opencl"
        if form == "opencl-simd" and int(nsimd) not in codegen_c.VECTOR_WIDTHS:
            form = "opencl"  # no OpenCL vector of that many lanes
        return form

    def _submit(self, form, k, args, sites, nsimd):
        """Run a generated kernel over ``sites`` outer sites and wait: a work-item a site in the
        vector form, else (site, lane) pairs (``codegen_c.thread_coords``) in a 2D range, given in
        SYCL's order, whose last dimension is OpenCL's dimension 0, the lane."""
        if form == "opencl-simd":
            self.queue.submit(k, args, [int(sites)]).wait()
            return
        groups, spg = codegen_c.site_groups(sites, nsimd, threads_per_block())
        self.queue.submit(k, args, [groups * spg, int(nsimd)], [spg, int(nsimd)]).wait()

    def _cov_kernel(self, kernel, nsimd, dtype, form):
        from . import covariant

        if np.dtype(dtype) == np.float64 and not self.fp64:
            raise BackendError(
                f"{kernel.name}: the SYCL device {self.queue.sycl_device.name} has no double "
                "precision; use single precision fields"
            )
        key = kernel.key(nsimd, dtype, form)
        k = self._kernels.get(key)
        if k is None:
            k = self._kernels[key] = self._build(covariant.generate(kernel, form, nsimd, dtype), kernel.name)
        return k

    def launch(self, kernel, args, nsimd, dtype):
        """Run a covariant kernel (pygrid.accelerator.covariant): its OpenCL C on the queue."""
        from . import covariant

        form = self.form(nsimd)
        k = self._cov_kernel(kernel, nsimd, dtype, form)
        # a host buffer (the unified memory manager) goes through a device copy
        call, back = covariant.device_call(kernel, args, self.to_device, self.tables.ints,
                                           lambda a: self.tables.reals(a, dtype), ctypes.c_longlong)
        call = [a.usm_data if isinstance(a, UsmArray) else a for a in call]
        self._submit(form, k, call, covariant.thread_count(kernel, args, nsimd) // int(nsimd), nsimd)
        for hbuf, d in back:
            hbuf[...] = d.get()

    def relayout(self, kind, out, inp, om=None, lm=None):
        """The device layout kernels (pygrid.accelerator.layout_kernels) on the queue."""
        from . import layout_kernels as lk

        if not isinstance(out, UsmArray) and not isinstance(inp, UsmArray):
            return host.relayout(kind, out, inp, om, lm)
        key = ("layout", out.dtype.name, inp.dtype.name)
        prog = self._kernels.get(key)
        if prog is None:
            src = lk.source("opencl", out.dtype.name, inp.dtype.name)
            prog = self._kernels[key] = {n: self._build(src, n) for n in lk.KERNELS}
        name, ints, threads = lk.launch_plan(kind, out, inp, om, lm)
        dout, dinp = self.to_device(out), self.to_device(inp)
        args = [dout.usm_data, dinp.usm_data]
        if kind != "cast":
            args += [self.tables.ints(om).usm_data, self.tables.ints(lm).usm_data]
        blocks, tpb = codegen_c.launch_dims(threads, 1, threads_per_block())
        args += [ctypes.c_longlong(i) for i in ints]
        self.queue.submit(prog[name], args, [blocks * tpb], [tpb]).wait()
        if dout is not out:
            out[...] = dout.get()

    def synchronize(self) -> None:
        pass  # every launch returns when its kernel has finished

    def device_copy(self, host):
        """A UsmArray holding a copy of the host array ``host``."""
        return self.to_device(host)

    def copy_to_host(self, buf, out):
        """The UsmArray ``buf`` into the host array ``out``."""
        if isinstance(buf, UsmArray):
            if out.size != buf.size or out.dtype != buf.dtype or not out.flags.c_contiguous:
                raise ConformabilityError(
                    f"copy_to_host: a device array {buf.shape} {buf.dtype} into a host array {out.shape} "
                    f"{out.dtype} (contiguous, of its size and dtype)")
            if buf.nbytes:
                buf.usm_data.copy_to_host(out.reshape(-1).view(np.uint8))
            buf._count("host_read")
        elif buf is not out:
            out[...] = buf

    def copy_from_host(self, buf, host):
        """The host array ``host`` into the UsmArray ``buf``."""
        if isinstance(buf, UsmArray):
            buf.set(host)
        elif buf is not host:
            buf[...] = host

    def host_array(self, shape, dtype):
        return host.host_array(shape, dtype)

    def bench_copy(self, n, dtype):
        """A hand-written OpenCL copy of ``n`` reals between two USM buffers: the device's bandwidth ceiling.

        Eight reals per work-item as one vector (``double8``), exactly as many work-items
        as vectors and no bounds check (a guarded copy is 4-5x slower on the CPU
        OpenCL device).  Returns a function that runs one copy and waits.
        """
        real = "double" if np.dtype(dtype) == np.float64 else "float"
        w = next(v for v in (8, 4, 2, 1) if n % v == 0)
        vec = f"{real}{w}" if w > 1 else real
        pragma = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n" if real == "double" else ""
        k = self._build(pragma + f"__kernel void pg_copy(__global const {vec}* restrict a, "
                        f"__global {vec}* restrict b)\n"
                        "{ const size_t i = get_global_id(0); b[i] = a[i]; }\n",
                        "pg_copy")
        src = self.to_device(1.0 + np.arange(n, dtype=dtype) * 1e-6)
        dst = self.to_device(np.ones(n, dtype=dtype))

        def run():
            self.queue.submit(k, [src.usm_data, dst.usm_data], [n // w]).wait()

        return run

    def accelerator_for(self, osites, kernel, *args):
        raise BackendError("hand-written numba kernels (accelerator_for) do not run on the sycl backend")

    def bind_kernel(self, kernel, *args, balance=False):
        raise BackendError("hand-written numba kernels (bind_kernel) do not run on the sycl backend")
