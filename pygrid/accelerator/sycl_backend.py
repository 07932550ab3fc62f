"""The 'sycl' backend: generated OpenCL C built into a SYCL program by dpctl, on USM device memory.

* Kernels: :func:`codegen_c.kernel_source` in the ``opencl`` dialect, built with
  ``dpctl.program.create_program_from_source`` and submitted on a
  ``dpctl.SyclQueue`` with one work-item per (outer site, lane) and
  ``accelerator_threads`` work-items per work-group.
* Memory: device buffers are ``dpctl.tensor`` USM device arrays, allocated for
  the MemoryManager by :class:`UsmDevice` (device name 'sycl').
* Reductions run on the device with ``dpctl.tensor``.
* The CPU OpenCL device (``intel-opencl-rt``): the ICD file that the wheel
  installs points at a path that does not exist, so :func:`setup_opencl_icd`
  writes our own ICD directory (one ``.icd`` file holding the absolute path of
  the installed ``libintelocl.so``) and exports ``OCL_ICD_VENDORS`` and
  ``LD_LIBRARY_PATH`` *before* dpctl is imported; nobody has to do it by hand.

Status (see docs/backends.md): the OpenCL C this backend builds is compiled
and run in the tests under the SIMT emulation header (``opencl-emulated``),
but this launch code has NOT run on a real SYCL device: installing
dpctl + dpnp + intel-opencl-rt takes about 2.7 GB here, over the project's
limit for a test dependency.
"""
from __future__ import annotations

import ctypes
import glob
import os
import sys

import numpy as np

from ..errors import BackendError
from . import codegen_c
from .backends import NumpyBackend

INSTALL = "pip install pygrid[sycl] (dpctl, dpnp and intel-opencl-rt)"


def find_libintelocl(prefix=None):
    """Absolute path of the installed libintelocl.so (under ``prefix``/lib), or None."""
    prefix = prefix or sys.prefix
    for pat in ("lib/libintelocl.so", "lib/libintelocl.so.*", "lib/**/libintelocl.so", "lib64/libintelocl.so"):
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
        with open(path + ".tmp", "w") as f:
            f.write(lib + "\n")
        os.replace(path + ".tmp", path)
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
    """dpctl (and dpctl.tensor, dpctl.program) after the ICD set-up, or BackendError."""
    setup_opencl_icd()
    try:
        import dpctl
        import dpctl.program
        import dpctl.tensor
    except ImportError as e:
        raise BackendError(f"the sycl backend needs dpctl, and dpctl is not installed: {INSTALL}") from e
    return dpctl


def make_queue(dpctl, selector=None):
    selector = selector or os.environ.get("PYGRID_SYCL_DEVICE") or ""
    try:
        return dpctl.SyclQueue(selector) if selector else dpctl.SyclQueue()
    except Exception as e:
        try:
            devs = [str(d) for d in dpctl.get_devices()]
        except Exception:  # pragma: no cover - broken runtime
            devs = []
        raise BackendError(
            f"no SYCL device found{' for ' + repr(selector) if selector else ''} ({e}); devices: {devs or 'none'}. "
            f"For the CPU OpenCL device: {INSTALL}"
        ) from e


class UsmDevice:
    """USM device allocations on a SYCL queue for the MemoryManager."""

    unified = False
    name = "sycl"

    def __init__(self, queue=None):
        self.dpctl = import_dpctl()
        self.queue = queue or make_queue(self.dpctl)

    def alloc(self, nbytes, dtype, shape):
        try:
            return self.dpctl.tensor.empty(shape, dtype=dtype, usm_type="device", sycl_queue=self.queue)
        except Exception as e:
            raise MemoryError(f"USM device allocation of {nbytes} bytes failed: {e}") from e

    def free(self, array):
        pass  # freed when the last reference goes

    def to_device(self, host, dev):
        dev.usm_data.copy_from_host(np.ascontiguousarray(host).reshape(-1).view(np.uint8))

    def to_host(self, dev, host):
        dev.usm_data.copy_to_host(host.reshape(-1).view(np.uint8))


class SyclBackend(NumpyBackend):
    """Generated OpenCL C on a SYCL device through dpctl (``--accelerator sycl``)."""

    name = "sycl"
    device = "sycl"

    def __init__(self, selector=None):
        self.dpctl = import_dpctl()
        self.dpt = self.dpctl.tensor
        self.queue = make_queue(self.dpctl, selector)
        self.fp64 = bool(getattr(self.queue.sycl_device, "has_aspect_fp64", True))
        from ..memory.devices import register_device

        queue = self.queue
        register_device("sycl", lambda: UsmDevice(queue))
        self._kernels = {}

    def kernel(self, ir, nsimd, alias, dtype):
        if dtype == "float64" and not self.fp64:
            raise BackendError(f"the SYCL device {self.queue.sycl_device.name} has no double precision; "
                               "use single precision fields")
        key = (ir.key(), nsimd, alias, dtype)
        k = self._kernels.get(key)
        if k is None:
            src = codegen_c.kernel_source(ir, nsimd, alias, dtype, "opencl")
            prog = self.dpctl.program.create_program_from_source(self.queue, src)
            k = prog.get_sycl_kernel(codegen_c.KERNEL_NAME)
            self._kernels[key] = k
        return k

    def _usm(self, a):
        if isinstance(a, self.dpt.usm_ndarray):
            return a
        return self.dpt.asarray(np.ascontiguousarray(a), usm_type="device", sycl_queue=self.queue)

    def run(self, ir, out, inputs, shifts, coefs, nsimd, alias=False):
        from .cuda_backend import threads_per_block

        rdt = np.dtype(out.dtype)
        k = self.kernel(ir, nsimd, alias, rdt.name)
        host = codegen_c.kernel_args(ir, np.empty((0,), rdt), [], shifts, coefs, rdt)[1:]
        arrays = [self._usm(out)] + [self._usm(a) for a in inputs] + [self._usm(a) for a in host]
        osites = int(out.shape[0])
        blocks, tpb = codegen_c.launch_dims(osites, nsimd, threads_per_block())
        args = [a.usm_data for a in arrays] + [ctypes.c_int(osites)]
        self.queue.submit(k, args, [blocks * tpb], [tpb]).wait()
        if arrays[0] is not out:  # a host buffer (unified memory manager) went through a device copy
            out[...] = self.dpt.asnumpy(arrays[0])

    # reductions on the device, accumulated in double where the device has it
    def _f(self, a):
        a = self._usm(a)
        return self.dpt.astype(a, self.dpt.float64 if self.fp64 else self.dpt.float32)

    def inner_product(self, a, b):
        a, b = self._f(a), self._f(b)
        s = self.dpt.sum
        re = s(a[:, :, 0] * b[:, :, 0]) + s(a[:, :, 1] * b[:, :, 1])
        im = s(a[:, :, 0] * b[:, :, 1]) - s(a[:, :, 1] * b[:, :, 0])
        return complex(float(self.dpt.asnumpy(re)), float(self.dpt.asnumpy(im)))

    def norm2(self, a):
        a = self._f(a)
        return float(self.dpt.asnumpy(self.dpt.sum(a * a)))

    def site_sum(self, a):
        s = self.dpt.asnumpy(self.dpt.sum(self._f(a), axis=(0, 3))).astype(np.float64)
        return s[:, 0] + 1j * s[:, 1]

    def accelerator_for(self, osites, kernel, *args):
        raise BackendError("hand-written numba kernels (accelerator_for) do not run on the sycl backend")
