"""Backend primitives on host (numpy) arrays, shared by every backend that meets host buffers.

The numpy backend is made of these; the emulated backends use them for their
reductions and host kernels; the device backends fall back to them when they
are handed host arrays.  Buffers are shaped (osites, ncomp, 2, nsimd); sums
are accumulated in double.
"""
from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import BackendError
from .caches import scaled


def serial_for(osites: int, kernel: Callable, *args: Any) -> None:
    """``kernel(lo, hi, *args)`` over all outer sites, on the calling thread."""
    kernel(0, osites, *args)


def launch_bytes(args: tuple) -> int:
    """The bytes of a launch's first argument, the array it writes (or reduces): what decides
    whether a CPU backend splits it over threads (0 where there is no such array)."""
    return getattr(args[0], "nbytes", 0) if args else 0


#: ``pg.axpy`` into a buffer apart from its inputs, all of them together of more bytes than this (the
#: last-level cache of both development machines, scaled to the host's by :mod:`.caches`), writes past
#: the caches (non-temporal stores): no line is read before it is written.  Against cached stores on
#: the AVX2 machine, two threads (2026-11-29): 1.31-1.49x in double from 36 MiB up, 1.08x and 1.33x
#: in single at 44 and 91 MiB;
#: 0.83-0.94x at 18-27 MiB and 0.54-0.65x at 1-11 MiB.  (The expression kernels written the same
#: way, through a scratch tensor a site, ran level with their cached stores: 0.96-1.07x at 24^4.)
STREAM_BYTES = 32 << 20


def streams(out: np.ndarray, inputs, nsimd: int, threads: int | None = None) -> bool:
    """Whether a kernel writing ``out`` from ``inputs`` on ``threads`` threads writes it past the
    caches: ``out`` apart from every input (whose reads would otherwise have brought its lines in),
    each vector of ``nsimd`` lanes of it aligned, and the buffers larger than the caches
    (:data:`STREAM_BYTES` scaled to the cache the threads reach)."""
    return (out.nbytes + sum(a.nbytes for a in inputs) > scaled(STREAM_BYTES, threads)
            and out.ctypes.data % (nsimd * out.itemsize) == 0
            and not any(np.may_share_memory(out, a) for a in inputs))


def serial_launcher(kernel: Callable, args: tuple = (),
                    entry_of: Callable[[tuple], Callable] | None = None) -> Callable[..., None]:
    """``launch(osites, *args)``, :func:`serial_for` of ``kernel``, and ``launch.again(osites)`` and
    ``launch.prepared(osites)()`` on ``args`` (held weakly): the serial backends' ``bind_kernel``.
    ``entry_of(args)``: ``kernel`` for arguments of exactly the types of ``args`` (a compiled entry
    point, which skips the dispatch on the types of each argument), for those two to run; looked
    up at their first run, since many a kept launch never runs again (``pg.eval`` into a new
    field each time) and the lookup types every argument."""
    def launch(osites: int, *a: Any) -> None:
        kernel(0, osites, *a)

    bound = weak_args(args)
    entry = [] if entry_of is not None else [kernel]

    def run(osites: int) -> None:
        a = bound()
        if not entry:
            entry.append(entry_of(a))
        entry[0](0, osites, *a)

    launch.again = run
    launch.prepared = lambda osites: lambda: run(osites)
    return launch


def weak_args(args: tuple) -> Callable[[], tuple]:
    """A callable returning ``args`` again, holding its arrays weakly (numbers as they are): a bound
    launch must not keep its fields' buffers alive.  It raises where one of them has died."""
    refs = []
    for x in args:
        try:
            refs.append(weakref.ref(x))
        except TypeError:
            refs.append(lambda x=x: x)

    def get() -> tuple:
        out = tuple(r() for r in refs)
        for x in out:
            if x is None:
                raise RuntimeError("a bound kernel launch outlived one of its arguments")
        return out

    return get


def read_only(a: np.ndarray) -> np.ndarray:
    """``a`` as a read-only array (a view when it is writeable).

    numba compiles one specialisation per combination of writeable flags, and a
    Dirac kernel takes seconds to a minute to compile: every input a host kernel reads is
    passed read-only, so the same kernel is not compiled again when an input
    happens to come from a read view one time and a scratch array the next.
    """
    if not a.flags.writeable:
        return a
    v = a.view()
    v.flags.writeable = False
    return v


def relayout(kind: str, out: np.ndarray, inp: np.ndarray, om: np.ndarray | None = None,
             lm: np.ndarray | None = None) -> None:
    """The backend ``relayout`` (see contract.py) on host arrays, with numpy."""
    if kind == "cast":
        out[...] = inp
    elif kind == "gather":
        out[...] = inp.transpose(0, 3, 1, 2)[om, lm].transpose(0, 2, 3, 1)
    elif kind == "scatter":
        out.transpose(0, 3, 1, 2)[om, lm] = inp.transpose(0, 3, 1, 2)
    elif kind == "setcomp":
        out[:, om] = inp[:, lm]
    else:
        raise BackendError(f"unknown relayout {kind!r}")


def norm2(a: np.ndarray) -> float:
    a = a.astype(np.float64, copy=False).reshape(-1)
    return float(np.dot(a, a))


def inner_product(a: np.ndarray, b: np.ndarray) -> complex:
    a = a.astype(np.float64, copy=False)
    b = b.astype(np.float64, copy=False)
    re = np.sum(a[:, :, 0] * b[:, :, 0]) + np.sum(a[:, :, 1] * b[:, :, 1])
    im = np.sum(a[:, :, 0] * b[:, :, 1]) - np.sum(a[:, :, 1] * b[:, :, 0])
    return complex(re, im)


def site_sum(a: np.ndarray) -> np.ndarray:
    s = a.astype(np.float64, copy=False).sum(axis=(0, 3))
    return s[:, 0] + 1j * s[:, 1]


def slice_sum(a: np.ndarray, table: np.ndarray) -> np.ndarray:
    osites, ncomp, _, ns = a.shape
    v = a.astype(np.float64, copy=False).transpose(0, 3, 1, 2).reshape(osites * ns, ncomp, 2)
    s = v[table].sum(axis=1)
    return s[..., 0] + 1j * s[..., 1]


def coef_reals(coefs: np.ndarray, dtype: Any) -> np.ndarray:
    """The complex coefficients as interleaved (re, im) reals of ``dtype``, at least two of them
    (the kernels take a non-empty array)."""
    cf = np.zeros(max(2, 2 * len(coefs)), dtype=dtype)
    cf[0:2 * len(coefs):2] = np.real(coefs)
    cf[1:2 * len(coefs):2] = np.imag(coefs)
    return cf


# ---- launches kept for the buffers they ran on (reductions, expression kernels, Dirac calls) ----

def holds_a_buffer(args, buffers) -> bool:
    """Whether an array among ``args`` is a view whose base is one of ``buffers`` (a buffer that
    owns its memory): keeping it would keep the buffer alive, and whatever is keyed by it."""
    return any(isinstance(a, np.ndarray) and any(a.base is b for b in buffers) for a in args)


def keep(table: dict, key, entry, objects, limit: int = 256) -> None:
    """``table[key] = entry``, with ``entry.refs`` weak references to ``objects`` whose death takes
    the entry out of the table again (while it is still the one there).  A table of ``limit``
    entries is emptied first."""
    if len(table) >= limit:
        table.clear()
    me = weakref.ref(entry)

    def forget(_, key=key):
        if table.get(key) is me():
            table.pop(key, None)

    entry.refs = tuple(weakref.ref(x, forget) for x in objects)
    table[key] = entry


class KeptBinding:
    """A kernel's launch bound to the buffers of a call (``bound``: a backend's ``kept_launch``
    on ``args``), kept for the next call on the same buffers (``refs``, weak: :func:`keep`), with
    what the launch writes its results into and reads its coefficients from.  ``lock`` is held
    while a call uses it: another thread's call on the same buffers meanwhile takes the unkept path.
    A caller that keeps it in turn runs :meth:`prepared` through a ``memory.KeptLaunch``, each time
    with :meth:`again`."""

    __slots__ = ("refs", "backend", "osites", "nbytes", "nblocks", "bound", "args", "lock", "threads",
                 "__weakref__")

    def set_coefficients(self, coefs) -> None:
        """Write ``coefs`` where the kernel reads its coefficients."""
        raise NotImplementedError

    def totals(self) -> list:
        """What the launch computed besides its output: the totals of its partial sums."""
        return []

    def run_held(self, coefs=()):
        """For a call that took the lock: ``coefs`` written, the bound launch run on its own
        arguments, the lock released; :meth:`totals`."""
        try:
            if len(coefs):
                self.set_coefficients(coefs)
            self.bound.again(self.osites)
            return self.totals()
        finally:
            self.lock.release()

    def prepared(self):
        """The launch as a function of no arguments that runs the kernel and no Python
        (``launch.prepared``); None where the backend would split it into other blocks now than
        the launch was bound for (its partial sums are one per block)."""
        backend = self.backend
        if backend.blocks(self.nbytes) != self.nblocks:
            return None
        self.threads = backend.threads()
        return self.bound.prepared(self.osites)

    def again(self, gate, coefs=()):
        """``coefs`` written (:meth:`set_coefficients`), then ``gate()`` (the ``run`` of a
        ``memory.KeptLaunch`` of :meth:`prepared`): :meth:`totals`, or None where the gate refused,
        another thread's call holds this launch, or the thread count changed since :meth:`prepared`."""
        if self.backend.threads() != self.threads or not self.lock.acquire(False):
            return None
        try:
            if len(coefs):
                self.set_coefficients(coefs)
            if gate() is None:
                return None
            return self.totals()
        finally:
            self.lock.release()


def copy_to_host(buf, out):
    """``Backend.copy_to_host`` of the backends whose kernels read host arrays (their
    ``device_copy`` is the array itself): a copy only where ``buf`` is another array."""
    if buf is not out:
        out[...] = buf


def copy_from_host(buf, host):
    """``Backend.copy_from_host`` of the backends whose kernels read host arrays."""
    if buf is not host:
        buf[...] = host


def host_array(shape, dtype):
    """``Backend.host_array`` of the backends with nothing faster than a numpy array to copy from."""
    return np.empty(shape, dtype)
