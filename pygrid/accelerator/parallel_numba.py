"""Numba kernels over blocks of outer sites on OpenMP threads: the openmp backend's ``accelerator_for``.

A kernel ``kernel(lo, hi, *args)`` (a numba dispatcher, ``nogil``) runs as one
block of outer sites per thread inside a small driver, ``drive(address, nblocks, osites,
*args)``: for kernels whose arguments come packed (below), one libgomp parallel region
entered from compiled code where numba's threads are libgomp's (:mod:`.gomp_team`), else a
``prange``.  Why OpenMP and not a Python thread
pool: handing a block to a pool thread costs 40-60 us on a virtual machine (the
thread is woken through the GIL and a futex), which is a quarter of a Wilson Dhop
at 8^4 and more than a whole kernel on small fields; OpenMP's threads spin for a
while after each region (libgomp's default wait policy) and start the next one in
microseconds.

The driver calls the kernel through the address of its compiled code
(:func:`call_kernel`), not by name: a call by name would make numba link the
kernel's whole LLVM module into the driver and optimise and generate it a second
time, which took as long as compiling the kernel (6 s of a Wilson kernel's 13).
A kernel's arguments (arrays and scalars of numbers and booleans) reach it packed:
a small function per combination of argument types stores them into an array of
64-bit words after the kernel's address (``pack``), and another loads them and calls
the kernel (``tramp``, :func:`call_stored`); the one driver of a single argument runs
``tramp`` by address over the blocks.  So one parallel driver, compiled once and kept
in numba's disk cache (the libgomp region's or the ``prange`` one, :func:`packed_driver`), serves
every kernel: a driver typed by each kernel's arguments
compiled for 1.5-2.3 s per combination of types, the two small functions take a
fraction of a second.  A kernel with arguments of other types runs through a driver of
its argument count typed by them (:func:`driver`).  The kernel's address and the
packing are looked up once per kernel and types (keyed by numba's C fingerprint of
each argument, about 0.2 us each); after the first launch the next ones call the
compiled entry points of ``pack`` and of the driver directly, without numba's
dispatch; a caller that launches one kernel on the same buffers over and over binds
it once (:class:`Bound`, the openmp backend's ``bind_kernel``), which skips the lookup
by fingerprints, and its ``again`` packs the arguments once and hands the driver the
words alone (a driver unboxing 20-odd arguments took microseconds a launch).  An
exception the kernel raises reaches the caller of :func:`parallel_for` as itself:
numba's parallel loop drops one raised on a worker thread, so the driver reports
which blocks failed and those blocks run again on the calling thread, where they
raise.  A kernel whose overload cannot be found that way runs through a driver that
takes the kernel itself (linked, compiled once per process; there an exception on a
worker thread is lost, as in any numba parallel loop); a plain Python callable runs
on the calling thread.
"""
from __future__ import annotations

import hashlib
import threading

import numpy as np
from numba import njit, prange, typeof, types
from numba._dispatcher import compute_fingerprint
from numba.core import cgutils
from numba.core.extending import intrinsic
from numba.core.registry import CPUDispatcher
from numba.np import numpy_support

from . import gomp_team
from .host import weak_args

_drivers: dict = {}     # number of kernel arguments -> generic driver
_launches: dict = {}    # (kernel, argument fingerprints) -> _Launch
_lock = threading.Lock()


@intrinsic
def call_kernel(typingctx, address, lo, hi, args):
    """Call the compiled kernel at ``address`` (numba's native calling convention) as
    ``kernel(lo, hi, *args)``; 1 if it raised an exception, else 0.

    The exception itself is not passed on: on a worker thread of the parallel loop there is no
    Python thread state to pass it to, and numba drops it; :func:`parallel_for` runs a block
    that failed again on the calling thread, where it raises.  The caller guarantees that the
    kernel was compiled for exactly ``(int64, int64, *args)`` (:func:`parallel_for` looks the
    address up by the arguments' types)."""
    if not isinstance(address, types.Integer) or not isinstance(args, types.BaseTuple):
        return None

    def codegen(context, builder, sig, llargs):
        addr, lo_v, hi_v, tup = llargs
        argtys = [types.int64, types.int64, *args.types]
        vals = [context.cast(builder, lo_v, lo, types.int64), context.cast(builder, hi_v, hi, types.int64),
                *cgutils.unpack_tuple(builder, tup, len(args.types))]
        fnty = context.call_conv.get_function_type(types.none, argtys)
        fn = builder.inttoptr(addr, fnty.as_pointer())
        status, _ = context.call_conv.call_function(builder, fn, types.none, argtys, vals)
        return builder.zext(status.is_error, context.get_value_type(types.uint8))

    return types.uint8(address, lo, hi, args), codegen


def _own_digest() -> str:
    with open(__file__, "rb") as f:
        return hashlib.sha1(f.read()).hexdigest()[:16]


def driver_source(nargs: int) -> str:
    """Source of the cached driver of every kernel taking ``nargs`` arguments after (lo, hi).

    It names a digest of this module: a cached driver compiled against another
    :func:`call_kernel` would call kernels with the wrong convention, so a changed module
    gets new driver modules (their names come from their source)."""
    args = ", ".join(f"a{i}" for i in range(nargs))
    tup = f"({args},)" if nargs else "()"
    tail = f", {args}" if nargs else ""
    return "\n".join([
        f"# the parallel driver of the kernels of {nargs} arguments after (lo, hi), called by address",
        f"# (pygrid/accelerator/parallel_numba.py digest {_own_digest()})",
        "from numba import njit, prange",
        "from pygrid.accelerator.parallel_numba import call_kernel",
        "",
        "",
        "@njit(parallel=True, nogil=True, cache=True)",
        f"def drive(address, nblocks, osites, failed{tail}):",
        "    n = 0",
        "    for b in prange(nblocks):",
        f"        f = call_kernel(address, b * osites // nblocks, (b + 1) * osites // nblocks, {tup})",
        "        failed[b] = f",
        "        n += f",
        "    return n",
        "",
    ])


@njit(parallel=True, nogil=True)
def _drive_linked(kernel, nblocks, osites, args):
    for b in prange(nblocks):
        kernel(b * osites // nblocks, (b + 1) * osites // nblocks, *args)


def driver(nargs: int):
    """``drive(address, nblocks, osites, failed, *args)`` for kernels of ``nargs`` arguments after
    (lo, hi): the number of blocks whose kernel raised, each marked 1 in ``failed`` (uint8,
    ``nblocks`` long)."""
    d = _drivers.get(nargs)
    if d is None:
        from .compile_cache import load_module

        with _lock:
            d = _drivers.get(nargs)
            if d is None:
                d = _drivers[nargs] = load_module(driver_source(nargs), "pygrid_par",
                                                  label=f"the parallel driver of {nargs} arguments").drive
    return d


def packed_driver():
    """The driver of kernels whose arguments come packed: one libgomp region entered from compiled
    code where numba's threads are libgomp's (:mod:`.gomp_team`), else the ``prange`` driver of one
    argument.  Both take ``(address, nblocks, osites, failed, words)``."""
    return gomp_team.driver() or driver(1)


def _address(kernel, args) -> int | None:
    """The address of ``kernel``'s compiled overload for ``(0, 0, *args)``, compiled (or loaded
    from numba's cache) here if needed; None when numba keeps no such overload."""
    sig = tuple(typeof(x) for x in (0, 0, *args))
    kernel.compile(sig)
    cres = kernel.overloads.get(sig)
    if cres is None:
        return None
    addr = cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)
    return int(addr) if addr else None


def entry_point(dispatcher, args):
    """The compiled entry point of ``dispatcher``'s overload for these arguments' types, once numba
    has it (it unboxes them without numba's dispatch, a few microseconds of a launch), else the
    dispatcher."""
    cres = dispatcher.overloads.get(tuple(typeof(x) for x in args))
    return dispatcher if cres is None else cres.entry_point


# ---- arguments packed into words --------------------------------------------------------------
#
# A driver typed by its kernel's arguments is compiled once per combination of argument types
# (1.5-2.3 s each, a parallel loop), and a launch unboxes every argument.  Instead, a small function
# per combination (``pack``) stores the arguments, as numba lays out their data, into an array of
# 64-bit words after the kernel's address, and another (``tramp``) loads them from there and calls the
# kernel at that address; the one driver of a single argument runs ``tramp`` by address over the
# blocks.  Both small functions compile in a fraction of a second, and a launch bound to the same
# arguments packs them once.

def _type_code(ty) -> str | None:
    """A text naming ``ty`` for :func:`_code_type`: arrays and scalars of numbers and booleans; None
    for any other type (such a kernel runs through a driver typed by its arguments)."""
    if isinstance(ty, types.Boolean):
        return "B"
    if isinstance(ty, (types.Integer, types.Float, types.Complex)):
        return "S" + numpy_support.as_dtype(ty).str
    if isinstance(ty, types.Array) and isinstance(ty.dtype, (types.Boolean, types.Integer, types.Float,
                                                             types.Complex)):
        return f"A{numpy_support.as_dtype(ty.dtype).str},{ty.ndim},{ty.layout},{'w' if ty.mutable else 'r'}"
    return None


def _code_type(code: str):
    if code == "B":
        return types.boolean
    if code[0] == "S":
        return numpy_support.from_dtype(np.dtype(code[1:]))
    dtype, ndim, layout, access = code[1:].split(",")  # a dtype's text may hold "|" ("|u1")
    return types.Array(numpy_support.from_dtype(np.dtype(dtype)), int(ndim), layout, readonly=access == "r")


def _spec_types(spec: str):
    return [_code_type(c) for c in spec.split(";")] if spec else []


def _word_offsets(context, tys):
    """(the first word of each argument, the words in all): word 0 holds the kernel's address, each
    argument its data layout rounded up to whole words."""
    offsets, at = [], 1
    for ty in tys:
        offsets.append(at)
        at += -(-context.get_abi_sizeof(context.get_data_type(ty)) // 8)
    return offsets, at


def _word_pointer(context, builder, base, at, ty):
    return builder.bitcast(cgutils.gep(builder, base, at), context.get_data_type(ty).as_pointer())


@intrinsic
def store_args(typingctx, words, address, args, spec):
    """Store ``address`` and the tuple ``args`` (of the types the literal ``spec`` names) into the
    uint64 array ``words``, laid out as :func:`call_stored` reads them."""
    if not isinstance(spec, types.StringLiteral):
        return None
    tys = _spec_types(spec.literal_value)
    if not isinstance(args, types.BaseTuple) or list(args.types) != tys:
        return None

    def codegen(context, builder, sig, llargs):
        base = context.make_array(sig.args[0])(context, builder, llargs[0]).data
        builder.store(context.cast(builder, llargs[1], sig.args[1], types.uint64), base)
        offsets, _ = _word_offsets(context, tys)
        for ty, at, v in zip(tys, offsets, cgutils.unpack_tuple(builder, llargs[2], len(tys))):
            if isinstance(ty, types.Array):
                # the memory's owner goes with this call's unboxed array, freed when it returns: the
                # packed array has none (reference counts skip a null owner), the caller keeps the
                # memory alive
                ary = context.make_array(ty)(context, builder, value=v)
                ary.meminfo = cgutils.get_null_value(ary.meminfo.type)
                ary.parent = cgutils.get_null_value(ary.parent.type)
                v = ary._getvalue()
            context.pack_value(builder, ty, v, _word_pointer(context, builder, base, at, ty))
        return context.get_dummy_value()

    return types.none(words, address, args, spec), codegen


@intrinsic
def call_stored(typingctx, words, lo, hi, spec):
    """Call the kernel whose address and arguments :func:`store_args` put in ``words`` as
    ``kernel(lo, hi, *args)`` (numba's native calling convention); an exception the kernel raises
    is this function's, so the driver that called it by address sees it as a failed block."""
    if not isinstance(spec, types.StringLiteral):
        return None
    tys = _spec_types(spec.literal_value)

    def codegen(context, builder, sig, llargs):
        base = context.make_array(sig.args[0])(context, builder, llargs[0]).data
        offsets, _ = _word_offsets(context, tys)
        vals = [context.cast(builder, llargs[1], sig.args[1], types.int64),
                context.cast(builder, llargs[2], sig.args[2], types.int64)]
        vals += [context.unpack_value(builder, ty, _word_pointer(context, builder, base, at, ty))
                 for ty, at in zip(tys, offsets)]
        argtys = [types.int64, types.int64, *tys]
        fnty = context.call_conv.get_function_type(types.none, argtys)
        fn = builder.inttoptr(builder.load(base), fnty.as_pointer())
        status, _ = context.call_conv.call_function(builder, fn, types.none, argtys, vals)
        with cgutils.if_unlikely(builder, status.is_error):
            context.call_conv.return_status_propagate(builder, status)
        return context.get_dummy_value()

    return types.none(words, lo, hi, spec), codegen


def packed_source(spec: str) -> str:
    """Source of ``pack(words, address, *args)`` and ``tramp(lo, hi, words)`` for arguments of the
    types ``spec`` names (it names this module's digest, as :func:`driver_source` does)."""
    n = len(spec.split(";")) if spec else 0
    args = ", ".join(f"a{i}" for i in range(n))
    tup = f"({args},)" if n else "()"
    return "\n".join([
        "# a kernel's arguments packed into words, and the call that unpacks them",
        f"# (pygrid/accelerator/parallel_numba.py digest {_own_digest()})",
        "from numba import njit",
        "from pygrid.accelerator.parallel_numba import call_stored, store_args",
        "",
        "",
        "@njit(nogil=True, cache=True)",
        f"def pack(words, address{', ' + args if n else ''}):",
        f'    store_args(words, address, {tup}, "{spec}")',
        "",
        "",
        "@njit(nogil=True, cache=True)",
        "def tramp(lo, hi, words):",
        f'    call_stored(words, lo, hi, "{spec}")',
        "",
    ])


class _Packing:
    """One combination of argument types: ``pack`` (the dispatcher until its first call, then its
    entry point), ``tramp``'s address and entry point, and the number of words."""

    __slots__ = ("pack", "tramp", "tramp_address", "nwords")


_packings: dict = {}   # spec -> _Packing
_WORDS = np.zeros(1, np.uint64)


def _packing(spec: str) -> _Packing:
    hit = _packings.get(spec)
    if hit is not None:
        return hit
    from numba.core.registry import cpu_target

    from .compile_cache import load_module

    with _lock:
        hit = _packings.get(spec)
        if hit is None:
            mod = load_module(packed_source(spec), "pygrid_pack", label="a kernel's packed arguments")
            hit = _Packing()
            hit.pack = mod.pack
            hit.tramp_address = _address(mod.tramp, (_WORDS,))
            hit.tramp = entry_point(mod.tramp, (0, 0, _WORDS))
            hit.nwords = _word_offsets(cpu_target.target_context, _spec_types(spec))[1]
            _packings[spec] = hit
    return hit


class _Launch:
    """How a kernel runs on arguments of some types: ``drive(address, nblocks, osites, failed,
    *args)`` at the kernel's ``address``, or, packed (``packing`` not None), the driver of one
    argument running ``tramp`` on the words :meth:`words` fills."""

    __slots__ = ("drive", "address", "packing")

    def __init__(self, drive, address, packing=None):
        self.drive, self.address, self.packing = drive, address, packing

    def words(self, args, into=None):
        """The words of ``args`` (into ``into`` when given)."""
        packing = self.packing
        words = np.empty(packing.nwords, np.uint64) if into is None else into
        pack = packing.pack
        pack(words, self.address, *args)
        if isinstance(pack, CPUDispatcher):  # compiled (or loaded) now: its entry point from here on
            packing.pack = entry_point(pack, (words, self.address, *args))
        return words

    def run(self, nblocks, osites, args, kernel, failed=None, words=None):
        if self.packing is None:
            _run(self, nblocks, osites, args, kernel, failed)
            return
        if words is None:
            words = self.words(args)
        _run(self, nblocks, osites, (words,), kernel, failed, args)


def _launch(kernel, args):
    """``(launch, key)`` for ``kernel`` on arguments of these types (:class:`_Launch`)."""
    try:
        key = (kernel, tuple(map(compute_fingerprint, args)))
    except (ValueError, TypeError):  # an argument numba fingerprints not: the linked driver
        key = None
    hit = _launches.get(key) if key is not None else None
    if hit is None:
        addr = _address(kernel, args) if key is not None else None
        if addr is None:
            def linked(address, nblocks, osites, failed, *a, _k=kernel):
                # called by name, the kernel's exception on the calling thread comes as the cause
                # of a SystemError; one on a worker thread is lost, as numba's parallel loops lose it
                try:
                    _drive_linked(_k, nblocks, osites, a)
                except SystemError as e:
                    if e.__cause__ is None:
                        raise
                    raise e.__cause__ from None
                return 0

            hit = _Launch(linked, 0)
        else:
            codes = [_type_code(typeof(x)) for x in args]
            if None in codes:
                hit = _Launch(driver(len(args)), addr)
            else:
                hit = _Launch(packed_driver(), addr, _packing(";".join(codes)))
        if key is not None:
            _launches[key] = hit
    return hit, key


#: the type of the driver's ``failed`` argument, for the signature of its entry point
_FAILED = np.zeros(1, np.uint8)


def _run(launch, nblocks, osites, dargs, kernel, failed=None, kargs=None):
    """Run ``launch.drive`` on the driver's arguments ``dargs``; the first call through numba's
    dispatcher leaves the driver's compiled entry point in ``launch`` for the next ones.
    ``kargs``: the kernel's own arguments when ``dargs`` are the packed words."""
    if failed is None or len(failed) < nblocks:
        failed = np.zeros(nblocks, np.uint8)
    drive = launch.drive
    address = launch.address if launch.packing is None else launch.packing.tramp_address
    if drive(address, nblocks, osites, failed, *dargs):
        _raise_failed(kernel, nblocks, osites, dargs if kargs is None else kargs, failed)
    if isinstance(drive, CPUDispatcher):
        launch.drive = entry_point(drive, (address, nblocks, osites, _FAILED, *dargs))


def _raise_failed(kernel, nblocks, osites, args, failed):
    """Run the blocks whose kernel raised again, in order, on the calling thread, where the
    exception reaches the caller as itself (a kernel that fails fails the same way again)."""
    blocks = [(b * osites // nblocks, (b + 1) * osites // nblocks) for b in np.flatnonzero(failed[:nblocks])]
    for lo, hi in blocks:
        kernel(lo, hi, *args)
    name = getattr(kernel, "__name__", repr(kernel))
    raise RuntimeError(f"kernel {name} raised an exception on a worker thread (outer sites [lo, hi): "
                       f"{blocks}) and not when run again on the calling thread")


def parallel_for(nblocks: int, osites: int, kernel, *args) -> None:
    """``kernel(lo, hi, *args)`` over outer sites [0, osites) in ``nblocks`` blocks, one per thread."""
    if not isinstance(kernel, CPUDispatcher):
        kernel(0, osites, *args)
        return
    _launch(kernel, args)[0].run(nblocks, osites, args, kernel)


def run_packed(osites: int, kernel, *args) -> None:
    """``kernel(0, osites, *args)`` on the calling thread, on its arguments packed where their types
    allow it, as :class:`Bound` runs one block: the kernel sees its arrays without their owners."""
    if isinstance(kernel, CPUDispatcher):
        launch = _launch(kernel, args)[0]
        if launch.packing is not None:
            _one_block_packed(launch, osites, args)
            return
    kernel(0, osites, *args)


def _one_block_packed(launch, osites, args):
    # packed, the kernel sees its arrays without their owners: the reference counts numba keeps
    # inside its loops (an array passed to an inlined helper) are no-ops, where on unboxed arrays
    # each is an atomic operation that waits for the streamed stores before it (a Wilson hop past
    # the caches ran 0.8x on one thread so, AVX2 machine)
    launch.packing.tramp(0, osites, launch.words(args))


class Bound:
    """``kernel`` bound to the types of one set of arguments: ``bound(nblocks, osites, *args)`` is
    :func:`parallel_for` without the lookup of its driver by the arguments' fingerprints, and
    ``bound.again(nblocks, osites)`` runs it on the arguments it was bound with (``bound.args()``,
    held weakly), packed once.  One block runs on the calling thread, through the compiled entry
    points (the kernel's, or the one that unpacks the words), without numba's dispatch.

    The caller passes arguments of exactly the types of those it was bound with (the same
    arrays again, say): they are unboxed or packed by those types unchecked.  ``again`` reads
    the bound arguments' memory: only while the caller holds every one of them."""

    __slots__ = ("kernel", "args", "_launch", "_failed", "_words", "_serial")

    def __init__(self, kernel, args):
        self.kernel = kernel
        # the driver's per-block failure flags, kept: a fresh array cost 15 us a launch once the
        # kernel had pushed numpy's allocator out of the caches (a launch writes each flag)
        self._failed = np.zeros(256, np.uint8)
        self._launch = _launch(kernel, args)[0] if isinstance(kernel, CPUDispatcher) else None
        self._words = None
        self.args = weak_args(args)
        # one block: the kernel's entry point for these types (compiled by _launch), unboxing its
        # arguments without numba's dispatch of 20-odd of them
        self._serial = kernel if self._launch is None else entry_point(kernel, (0, 0, *args))

    def __call__(self, nblocks, osites, *args):
        launch = self._launch
        if nblocks == 1 and launch is not None and launch.packing is not None:
            _one_block_packed(launch, osites, args)
        elif launch is None or nblocks == 1:
            self._serial(0, osites, *args)
        else:
            self._launch.run(nblocks, osites, args, self.kernel, self._failed)

    def runner(self, nblocks, osites, cell=None, fallback=None, piece_sites=0):
        """``run()``: ``again(nblocks, osites)`` with everything it looks up each time looked up
        now, down to the driver's compiled entry point (once a launch has compiled it): what a
        caller repeating one launch on the same buffers keeps.  With ``cell`` (a list) and
        ``fallback``: ``fallback()`` instead where ``cell[0]`` has changed since (a backend's thread
        count, checked in the one function a kept launch runs).  ``piece_sites``: a kernel whose
        outer sites are independent, balanced over the threads in pieces of at least this many
        sites where the driver is libgomp's region (:func:`.gomp_team.task`)."""
        launch, now = self._launch, None if cell is None else cell[0]
        if (launch is None or launch.packing is None or nblocks == 1
                or isinstance(launch.drive, CPUDispatcher)):
            return lambda: self.again(nblocks, osites) if cell is None or cell[0] == now else fallback()
        if self._words is None:
            self._words = launch.words(self.args())
        drive, address, failed, words = launch.drive, launch.packing.tramp_address, self._failed, self._words
        task = gomp_team.task(address, nblocks, osites, failed, words, piece_sites)
        if task is not None:
            # the launch's words built once: the region's entry unboxes one integer
            go, at = gomp_team.runner(), task.ctypes.data

            def run(_task=task):
                if cell is not None and cell[0] != now:
                    fallback()
                elif go(at):
                    _raise_failed(self.kernel, nblocks, osites, self.args(), failed)

            return run

        def run():
            if cell is not None and cell[0] != now:
                fallback()
            elif drive(address, nblocks, osites, failed, words):
                _raise_failed(self.kernel, nblocks, osites, self.args(), failed)

        return run

    def again(self, nblocks, osites):
        launch = self._launch
        if launch is None or launch.packing is None:
            self(nblocks, osites, *self.args())
            return
        words = self._words
        if words is None:
            words = self._words = launch.words(self.args())
        if nblocks == 1:  # on the calling thread: the kernel's exception comes through as itself
            launch.packing.tramp(0, osites, words)
            return
        drive, address = launch.drive, launch.packing.tramp_address
        if drive(address, nblocks, osites, self._failed, words):
            _raise_failed(self.kernel, nblocks, osites, self.args(), self._failed)
        if isinstance(drive, CPUDispatcher):
            launch.drive = entry_point(drive, (address, nblocks, osites, _FAILED, words))
