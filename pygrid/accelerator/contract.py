"""The backend contract: every primitive a backend provides, in one place.

pygrid's layers above ``accelerator/`` reach the hardware only through these
members of the current backend (``pygrid.get_backend()``).  Each backend class
implements all of them itself, sharing code through the helper modules
(``host.py``: numpy reductions and relayouts on host arrays, the serial site
loop, coefficient packing; ``device_tables.py``: device copies of tables), not
through inheritance from another backend.

Buffers are the raw view arrays of fields, shaped ``(osites, ncomp, 2, nsimd)``
(docs/design.md, Data layout): numpy arrays on the CPU backends and under the
emulations, device arrays (``UsmArray`` on sycl, CuPy arrays on cuda and hip)
on the device backends, which also accept host arrays (copied in and out) when
the MemoryManager runs on the unified device.

The implementations, and where they are registered by name:

=================  ==============================  ========================
name               class                           module
=================  ==============================  ========================
numpy              ``NumpyBackend``                ``numpy_backend.py``
openmp             ``OpenMPBackend``               ``openmp_backend.py``
cuda, hip          ``CudaBackend``                 ``cuda_backend.py``
sycl               ``SyclBackend``                 ``sycl_backend.py``
cuda-emulated,     ``EmulatedSIMTBackend``         ``emulated_backend.py``
opencl-emulated
=================  ==============================  ========================

``backends.get_backend`` maps names to instances.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import numpy as np

#: what a buffer is on some backend: a numpy array, a ``UsmArray`` or a CuPy array
Buffer = Any


@runtime_checkable
class Backend(Protocol):
    """What every backend provides (numpy, openmp, cuda, hip, sycl and the emulations)."""

    #: the name the backend is selected by (``--accelerator``)
    name: str
    #: the MemoryManager device holding this backend's fields: 'unified', 'sycl', 'cuda' or 'hip'
    device: str
    #: whether a kernel launch returns before its kernel has run (the GPUs'): ``synchronize()``
    #: waits for them, and a host-side timer of one launch measures only its submission
    asynchronous: bool

    def describe(self) -> str:
        """One line naming the backend and the device it runs on, for banners and reports."""

    # ---- kernels ----------------------------------------------------------------
    def run(self, ir: Any, out: Buffer, inputs: list[Buffer], shifts: list[tuple[np.ndarray, ...]],
            coefs: np.ndarray, nsimd: int, alias: bool = False, keep: bool = True) -> None:
        """Evaluate one lowered expression (:class:`pygrid.accelerator.ir.KernelIR`) into ``out``.

        ``inputs`` holds one buffer per slot, ``shifts`` the (neighbour, permute, lanes)
        tables per shift, ``coefs`` the complex coefficient vector; ``alias`` says that
        ``out`` is also an input.  ``keep``: a backend may keep the launch for a next run on
        these buffers; False for a run that will not come again (an evaluation into a new
        field), which then pays nothing for it.
        """

    def prepare(self, ir: Any, shifts: list[tuple[np.ndarray, ...]], coefs: np.ndarray, nsimd: int,
                alias: bool, dtype: Any, osites: int | None = None) -> None:
        """Compile (or load from the cache) the kernel :meth:`run` will take for these arguments,
        touching no field: callers prepare before they open views, so a failing or interrupted
        compile leaves every field as it was.  ``osites``, the launch's outer sites when known,
        lets a backend skip what a launch of that size does not use."""

    def launch(self, kernel: Any, args: dict[str, Any], nsimd: int, dtype: Any) -> None:
        """Run a covariant kernel (:class:`pygrid.accelerator.covariant.Kernel`) on ``args``
        (parameter name -> buffer, table or integer)."""

    def relayout(self, kind: str, out: Buffer, inp: Buffer, om: np.ndarray | None = None,
                 lm: np.ndarray | None = None) -> None:
        """Move field data between layouts: 'gather' / 'scatter' through the outer-site and lane
        maps ``om``, ``lm`` (checkerboards), 'cast' (precision), 'setcomp' (components ``om`` of
        ``out`` from components ``lm`` of ``inp``)."""

    def accelerator_for(self, osites: int, kernel: Callable, *args: Any) -> None:
        """Run a host kernel ``kernel(lo, hi, *args)`` over outer sites [0, osites); ``args[0]``
        is the array it writes (or reduces), whose size decides whether openmp splits the launch
        over its threads (``min_parallel_bytes``).

        The CPU backends run it (split over threads on openmp); backends whose
        buffers are not host arrays raise :class:`pygrid.errors.BackendError`.
        """

    def device_copy(self, host: np.ndarray) -> Buffer:
        """A copy of the host array ``host`` that kernels launched here read as a field buffer:
        ``host`` itself on the backends whose buffers are host arrays (the CPU backends and the
        emulations), a new device array on the others.  For data a caller makes once and keeps
        beside the fields (an operator's compressed links): it is not a field, so it lies outside
        the MemoryManager and its ``--device-mem`` watermark, and lives as long as the caller
        holds it."""

    def copy_to_host(self, buf: Buffer, out: np.ndarray) -> None:
        """Copy ``buf``, a buffer of :meth:`device_copy`'s kind, into the host array ``out`` of its
        shape: the reverse of :meth:`device_copy`, for a kernel's output that travels on from the
        host (the halo a rank packs for MPI); nothing to copy where ``buf`` is ``out``."""

    def copy_from_host(self, buf: Buffer, host: np.ndarray) -> None:
        """Copy the host array ``host`` into ``buf``, a buffer of :meth:`device_copy`'s kind and of
        its shape, in place: the halo a rank received, into the array its kernels read; nothing to
        copy where ``buf`` is ``host``."""

    def host_array(self, shape: tuple, dtype: Any) -> np.ndarray:
        """An uninitialised host array of ``shape`` and ``dtype``, for data kept from call to call
        that :meth:`copy_to_host` and :meth:`copy_from_host` move (the halo a rank packs and
        receives): page-locked on cuda and hip, where a copy to or from pageable memory goes
        through the driver's staging buffer at a fraction of the bus's speed; a numpy array on the
        others."""

    def bind_kernel(self, kernel: Callable, *args: Any, balance: bool = False) -> Callable[..., None]:
        """``launch(osites, *args)``: :meth:`accelerator_for` of ``kernel`` for arguments of the
        types of ``args``, with what can be looked up once looked up here (openmp: the parallel
        driver's entry point for those types).  ``launch.again(osites)`` runs it on ``args``
        themselves (held weakly: the caller holds them; openmp packs them once), and
        ``launch.prepared(osites)`` gives a function of no arguments that does the same with what
        it can look up once looked up (the Python around a kept Dirac call at 8^4 is a tenth of it).
        A caller that launches the same kernel on the same buffers over and over keeps it; backends
        that refuse host kernels refuse here.  ``balance``: the kernel's outer sites are independent
        (each writes its own results, nothing indexed by its block, as a reduction's partial sums
        are), so a backend running blocks on threads may hand their pieces to whichever thread is
        free (openmp's prepared launch; the serial backends have nothing to balance).
        """

    # ---- reductions, accumulated in double (single on a device without double) -----
    def norm2(self, a: Buffer) -> float:
        """Sum of the squares of every real of ``a``."""

    def inner_product(self, a: Buffer, b: Buffer) -> complex:
        """sum conj(a) b over sites and components."""

    def site_sum(self, a: Buffer) -> np.ndarray:
        """Sum over sites and lanes: complex array (ncomp,)."""

    def slice_sum(self, a: Buffer, table: np.ndarray) -> np.ndarray:
        """Sums over slices: ``table`` (nslices, m) lists the flat (outer site, lane) indices
        of each slice; complex array (nslices, ncomp)."""

    # ---- threads and benchmarks ----------------------------------------------------
    def set_threads(self, n: int | None) -> None:
        """Set the CPU threads the backend uses (None keeps the current count)."""

    def threads(self) -> int:
        """The CPU threads the backend uses."""

    def bench_copy(self, n: int, dtype: Any) -> Callable[[], None] | None:
        """A function that runs one device-to-device copy of ``n`` reals of ``dtype`` and waits:
        the benchmarks' bandwidth ceiling on a device with memory of its own; None on the
        backends whose fields live in host memory (the benchmarks then copy on the host)."""

    def synchronize(self) -> None:
        """Wait until every kernel launched so far has finished.  GPU launches return before the
        kernel runs, so timers call this before reading the clock; a no-op where launches wait."""


class FusedUpdates(Protocol):
    """Members a backend may add (the openmp backend has them): a solver's vector updates as one
    kernel each.  Where a backend lacks them, :func:`pygrid.axpy`, :func:`pygrid.axpy_norm2` and
    :func:`pygrid.axpy_xpay` evaluate the expressions and take the norm separately."""

    def axpy(self, z: Buffer, a: complex, x: Buffer, y: Buffer) -> None:
        """z = a x + y on buffers of one shape and dtype; z may be x or y."""

    def axpy_norm2(self, z: Buffer, a: complex, x: Buffer, y: Buffer) -> float:
        """:meth:`axpy`, returning the sum of the squares of z as written, in the same pass."""

    def axpy_xpay(self, x: Buffer, a: complex, p: Buffer, r: Buffer, b: complex) -> None:
        """x = a p + x, then p = r + b p with the p before, in one pass (three distinct buffers)."""

    def kept_update(self, name: str, *buffers: Buffer) -> Any:
        """The launch the last call of ``name`` (``'norm2'``, ``'inner_product'`` or one of the
        updates above) on ``buffers`` bound to them, for a caller that runs it again on the same
        buffers (a ``host.KeptBinding``: ``prepared()``, a function of no arguments that runs the
        kernel and no Python, and ``again(gate, coefs)``, the coefficients written where the kernel
        reads them, ``gate()`` run, the partial sums' totals returned); None where none is kept."""


class KeptRuns(Protocol):
    """A member a backend may add (the openmp backend has it): where it is missing, an expression
    evaluated again into the same field takes :meth:`Backend.run` through its views."""

    def kept_run(self, ir: Any, alias: bool, out: Buffer, inputs: list[Buffer],
                 shifts: list[tuple[np.ndarray, ...]]) -> Any:
        """The launch the last :meth:`Backend.run` of ``ir`` on these buffers kept (a
        ``host.KeptBinding``: ``prepared()``, ``again(gate, coefs)``), for a kept evaluation to run
        through a ``memory.KeptLaunch``; None where none serves them now."""


#: the optional members of :class:`FusedUpdates`
FUSED = ("axpy", "axpy_norm2", "axpy_xpay", "kept_update")

#: the members a backend must define, checked by the tests for every backend class
MEMBERS = ("name", "device", "asynchronous", "describe", "run", "prepare", "launch", "relayout",
           "accelerator_for", "device_copy", "copy_to_host", "copy_from_host", "host_array", "bind_kernel",
           "norm2", "inner_product", "site_sum", "slice_sum", "set_threads", "threads", "bench_copy",
           "synchronize")
