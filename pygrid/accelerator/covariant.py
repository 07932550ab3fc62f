"""A covariant kernel vocabulary: a kernel is written once and emitted as numba SIMD or CUDA/OpenCL SIMT.

This is Grid's "one code, four APIs" for hand-written kernels (the Dirac
operators).  A kernel body is a Python function that calls the vocabulary of
an emitter ``E``; each emitter turns the same calls into source for its target:

* :class:`NumbaEmitter` (the openmp and numpy backends): a covariant value is
  one ``<Nsimd x real>`` vector (:mod:`.simd_numba`), the kernel is a nogil
  ``kernel(lo, hi, ...)`` over outer sites run by ``accelerator_for``;
* :class:`CEmitter` (cuda, hip, sycl and their emulations): a covariant value
  is one scalar of the thread that owns (outer site, lane); one thread per
  (outer site, inner index, lane), lanes fastest, so reads are coalesced.

The vocabulary (Grid's ``coalescedRead`` family):

* integer expressions (:class:`IExpr`, uniform over the lanes): parameters,
  loop variables, ``E.itable(name)[i]`` reads of integer tables, ``+ - *``;
* ``E.read(field, site, plane, perm=None)``: real plane ``plane`` (component
  ``plane // 2``, real or imaginary part) of ``field`` at outer site ``site``.
  With a permutation ``P = E.permutation(m)`` it is the neighbour read of
  Grid's ``coalescedReadPermute``: on SIMT the permuted lane is read directly,
  on SIMD the vector is read as it is and carries ``P`` until ``E.permute``;
* ``E.read_either(field, halo, site, limit, plane, perm)``: ``field`` at
  ``site`` when ``site < limit``, else ``halo`` at ``site - limit`` (the rows
  a neighbouring rank sent, laid out as the field's), with the same lane rules;
* ``E.permute(values, P)``: applies the lane permute on SIMD (a no-op on SIMT,
  where the read already did).  Values carrying different permutations never
  mix: the emitters raise, so a description that forgets a permute fails on
  every target, not only on the CPU;
* arithmetic on covariant values: ``a + b``, ``a - b``, ``a * b``, ``a / b``, ``-a``, ``E.sqrt(a)``,
  ``E.fma(a, b, c) = a * b + c``, ``E.fms(a, b, c) = c - a * b``;
  ``E.uniform(table, i)`` and ``E.const(x)`` give lane-uniform values;
* ``E.store(field, site, plane, value)``; ``E.var(v)`` / ``E.set(var, v)``
  for loop-carried values; ``with E.loop(name, lo, hi)`` (sequential) and
  ``with E.when(cond)`` / ``with E.otherwise()``.

A :class:`Kernel` names its parameters (:class:`Param`), its parallel index
space (``n`` outer sites, optionally times an ``inner`` extent that is a
parallel dimension on SIMT and a sequential loop inside each outer site on
SIMD) and its body.  Field parameters are the ``[osites][ncomp][2][nsimd]``
buffers of pygrid fields, flat.
"""
from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from . import codegen_c
from .host import read_only

# ---------------------------------------------------------------------------------
# integer (lane-uniform) expressions
# ---------------------------------------------------------------------------------


class IExpr:
    """An integer expression, the same for every lane: rendered as C (long) or numba (uint64)."""

    def c(self) -> str:
        raise NotImplementedError

    def py(self) -> str:
        raise NotImplementedError

    def _bin(self, op, other, swap=False):
        o = as_iexpr(other)
        return _IBin(op, o, self) if swap else _IBin(op, self, o)

    def __add__(self, o):
        return self._bin("+", o)

    def __radd__(self, o):
        return self._bin("+", o, True)

    def __sub__(self, o):
        return self._bin("-", o)

    def __rsub__(self, o):
        return self._bin("-", o, True)

    def __mul__(self, o):
        return self._bin("*", o)

    def __rmul__(self, o):
        return self._bin("*", o, True)

    def less(self, o):
        """``self < o``: a condition for :meth:`_Emitter.when` (1 or 0)."""
        return self._bin("<", o)

    def equals(self, o):
        """``self == o``: a condition for :meth:`_Emitter.when` (1 or 0)."""
        return self._bin("==", o)


@dataclass(frozen=True, eq=False)
class _IConst(IExpr):
    value: int

    def c(self):
        return f"{int(self.value)}L" if abs(int(self.value)) >= 2 ** 31 else str(int(self.value))

    def py(self):
        return f"U({int(self.value)})"


@dataclass(frozen=True, eq=False)
class _IName(IExpr):
    name: str

    def c(self):
        return self.name

    def py(self):
        return self.name


@dataclass(frozen=True, eq=False)
class _IBin(IExpr):
    op: str
    a: IExpr
    b: IExpr

    def c(self):
        return f"({self.a.c()} {self.op} {self.b.c()})"

    def py(self):
        return f"({self.a.py()} {self.op} {self.b.py()})"


@dataclass(frozen=True, eq=False)
class _IRead(IExpr):
    table: str
    index: IExpr

    def c(self):
        return f"(long){self.table}[{self.index.c()}]"

    def py(self):
        return f"U({self.table}[{self.index.py()}])"


def as_iexpr(x) -> IExpr:
    if isinstance(x, IExpr):
        return x
    if isinstance(x, (int, np.integer)):
        return _IConst(int(x))
    raise TypeError(f"not an integer expression: {x!r}")


class ITable:
    """An integer table parameter: ``tab[i]`` is an :class:`IExpr`."""

    def __init__(self, name):
        self.name = name

    def __getitem__(self, i):
        return _IRead(self.name, as_iexpr(i))


# ---------------------------------------------------------------------------------
# kernel declaration
# ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Param:
    """A kernel parameter.

    kind: 'field' (a field buffer of ``ncomp`` complex components per site; ``out``
    when the kernel writes it), 'itable' (integer table, read uniformly),
    'rtable' (real table in the kernel's precision, read uniformly) or 'int'
    (an integer scalar).
    """

    name: str
    kind: str
    ncomp: int = 0
    out: bool = False


@dataclass(frozen=True)
class Kernel:
    """A kernel description: parameters, index space and body.

    ``body(E, o, s)`` is called once with the emitter, the outer site ``o`` and
    the inner index ``s`` (:class:`IExpr`; ``s`` is 0 without ``inner``).
    ``prologue(E)`` (optional) makes lane-uniform values once per thread/block
    and returns them; they are passed to the body as ``E.pro``.  ``statics`` are
    the compile-time choices the body closes over: part of the cache key.
    """

    name: str
    params: tuple
    n: str
    body: Callable
    inner: str | None = None
    prologue: Callable | None = None
    statics: tuple = ()
    doc: str = ""

    def key(self, nsimd, dtype, target):
        return (self.name, self.statics, int(nsimd), np.dtype(dtype).name, target)

    def param(self, name):
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)


# ---------------------------------------------------------------------------------
# covariant values and the emitters
# ---------------------------------------------------------------------------------


class CV:
    """A covariant real value (a vector of lanes on SIMD, one lane's scalar on SIMT)."""

    __slots__ = ("E", "name", "perm", "mutable")

    def __init__(self, E, name, perm=None, mutable=False):
        self.E, self.name, self.perm, self.mutable = E, name, perm, mutable

    def __add__(self, o):
        return self.E._binary("+", self, o)

    def __sub__(self, o):
        return self.E._binary("-", self, o)

    def __mul__(self, o):
        return self.E._binary("*", self, o)

    def __truediv__(self, o):
        return self.E._binary("/", self, o)

    def __neg__(self):
        return self.E._neg(self)


#: the ``perm`` of a lane-uniform value: it commutes with every lane permute
UNIFORM = "uniform"


class Permutation:
    """The lane permute of one neighbour read: ``m`` indexes the stencil's lane table (0: none)."""

    def __init__(self, E, m, ident):
        self.E, self.m, self.id = E, m, ident


class DescriptionError(Exception):
    """A kernel description broke a rule of the vocabulary (a bug in pygrid, not in user input)."""


class _Emitter:
    """What both emitters share: names, indentation, permutation bookkeeping."""

    def __init__(self, kernel: Kernel, nsimd: int, dtype):
        self.k = kernel
        self.NS = int(nsimd)
        self.dtype = np.dtype(dtype)
        self.lines: list[str] = []
        self.indent = 1
        self._n = 0
        self._perms = 0
        self.pro = None
        self._consts = {}

    def fresh(self, prefix="t"):
        self._n += 1
        return f"{prefix}{self._n}"

    def emit(self, text):
        self.lines.append("    " * self.indent + text)

    def itable(self, name) -> ITable:
        p = self.k.param(name)
        if p.kind != "itable":
            raise DescriptionError(f"{name} is not an integer table")
        return ITable(name)

    def int_param(self, name) -> IExpr:
        if self.k.param(name).kind != "int":
            raise DescriptionError(f"{name} is not an integer parameter")
        return _IName(name)

    def _stride(self, field_name):
        p = self.k.param(field_name)
        if p.kind != "field":
            raise DescriptionError(f"{field_name} is not a field")
        return p.ncomp * 2 * self.NS

    def _offset(self, field_name, site, plane) -> IExpr:
        return as_iexpr(site) * self._stride(field_name) + int(plane) * self.NS

    @staticmethod
    def _join(*vals):
        """The permutation the result of combining ``vals`` carries (UNIFORM if every one is uniform)."""
        for v in vals:
            if not isinstance(v, CV):
                raise DescriptionError(f"not a covariant value: {v!r}")
        kinds = {id(v.perm): v.perm for v in vals if v.perm is not UNIFORM}
        if len(kinds) > 1:
            raise DescriptionError("values read with different lane permutes are combined without E.permute")
        return next(iter(kinds.values())) if kinds else UNIFORM

    @staticmethod
    def _check_permute(values, P):
        for v in values:
            if v.perm not in (None, UNIFORM) and v.perm is not P:
                raise DescriptionError("E.permute with another permutation than the values were read with")

    def let(self, value: IExpr, prefix="i") -> IExpr:
        """Bind an integer expression to a name (evaluated once)."""
        name = self.fresh(prefix)
        self._let(name, as_iexpr(value))
        return _IName(name)

    def _either(self, field_name, halo_name, site, limit, plane):
        """(offset in field, offset in halo, the condition 'in field'), for read_either."""
        if self._stride(halo_name) != self._stride(field_name):
            raise DescriptionError(f"halo {halo_name} must have the components of {field_name}")
        site, limit = as_iexpr(site), as_iexpr(limit)
        return (
            self._offset(field_name, site, plane),
            self._offset(halo_name, site - limit, plane),
            site,
            limit,
        )

    def permutation(self, m) -> Permutation:
        self._perms += 1
        P = Permutation(self, self.let(m, "m"), self._perms)
        self._permutation(P)
        return P

    def fma(self, a, b, c):
        return self._ternary("fma", a, b, c)

    def sqrt(self, a):
        """The square root (lane by lane)."""
        return self._call("sqrt", a)

    def prefetch(self, field_name, site, level=1):
        """A hint that ``field`` at outer ``site`` is read soon: its cache lines are prefetched on SIMD
        targets (the hardware prefetcher does not follow strided streams such as the slices of a 5D
        neighbour), into L1 or, ``level=2``, into L2 only (for data read after more than L1 holds);
        nothing on SIMT, where other threads hide the latency."""

    def fms(self, a, b, c):
        return self._ternary("fms", a, b, c)

    # arithmetic: one new value each, spelled by the emitter (_define, _spell_call, _spell_fma)
    def _value(self, expr, perm):
        name = self.fresh()
        self.emit(self._define(name, expr))
        return CV(self, name, perm)

    def _binary(self, op, a, b):
        return self._value(f"{a.name} {op} {b.name}", self._join(a, b))

    def _neg(self, a):
        return self._value(f"-{a.name}", a.perm)

    def _call(self, fn, a):
        return self._value(self._spell_call(fn, a.name), self._join(a))

    def _ternary(self, kind, a, b, c):
        return self._value(self._spell_fma(kind, a.name, b.name, c.name), self._join(a, b, c))

    def var(self, v: CV, perm: Permutation | None = None) -> CV:
        """A mutable value starting as ``v``.  With ``perm``, it holds values read with that lane
        permute (and not yet permuted), which every :meth:`set` must give it: the branches of an
        :meth:`when` that read one neighbour from different arrays."""
        if v.perm not in (None, UNIFORM, perm):
            raise DescriptionError("a loop-carried value must not carry a lane permute")
        name = self.fresh("v")
        self._var(name, v)
        return CV(self, name, perm, True)

    def set(self, var: CV, v: CV):
        if not var.mutable:
            raise DescriptionError("E.set needs a value made by E.var")
        if v.perm not in (None, UNIFORM) and v.perm is not var.perm:
            raise DescriptionError("E.set of a value read with another lane permute than its variable's")
        if v.perm is None and var.perm is not None:
            raise DescriptionError("E.set of an unpermuted value into a variable of permuted values")
        self.emit(self._assign(var.name, v.name))

    def source(self) -> str:
        raise NotImplementedError


class CEmitter(_Emitter):
    """SIMT C (``dialect`` 'cuda' or 'opencl'): one thread per (outer site, inner index, lane)."""

    def __init__(self, kernel, nsimd, dtype, dialect="cuda"):
        super().__init__(kernel, nsimd, dtype)
        self.D = codegen_c.DIALECTS[dialect]
        self.dialect = dialect
        self.real = {"float64": "double", "float32": "float"}[self.dtype.name]
        self.suffix = "f" if self.real == "float" else ""

    def _let(self, name, e):
        self.emit(f"const long {name} = {e.c()};")

    def _permutation(self, P):
        # the permuted lane of this thread, read once for every load of the neighbour
        P.lane = self.fresh("pl")
        self.emit(f"const long {P.lane} = {P.m.c()} ? (long)lanes[{P.m.c()} * {self.NS} + l] : l;")

    def read(self, field_name, site, plane, perm: Permutation | None = None) -> CV:
        off = self._offset(field_name, site, plane).c()
        lane = perm.lane if perm is not None else "l"
        name = self.fresh()
        self.emit(f"const {self.real} {name} = {field_name}[{off} + {lane}];")
        return CV(self, name, perm)

    def read_either(self, field_name, halo_name, site, limit, plane, perm: Permutation | None = None) -> CV:
        off, hoff, site, limit = self._either(field_name, halo_name, site, limit, plane)
        lane = perm.lane if perm is not None else "l"
        name = self.fresh()
        self.emit(f"const {self.real} {name} = ({site.c()} < {limit.c()}) ? {field_name}[{off.c()} + {lane}] "
                  f": {halo_name}[{hoff.c()} + {lane}];")
        return CV(self, name, perm)

    def permute(self, values, P: Permutation):
        self._check_permute(values, P)
        return [CV(self, v.name) for v in values]

    def store(self, field_name, site, plane, v: CV):
        if v.perm not in (None, UNIFORM):
            raise DescriptionError("storing a value that still carries a lane permute")
        off = self._offset(field_name, site, plane).c()
        self.emit(f"{field_name}[{off} + l] = {v.name};")

    def uniform(self, table, index) -> CV:
        name = self.fresh("u")
        self.emit(f"const {self.real} {name} = {table}[{as_iexpr(index).c()}];")
        return CV(self, name, UNIFORM)

    def const(self, x) -> CV:
        return CV(self, f"(({self.real}){float(x)!r}{self.suffix})", UNIFORM)

    def _define(self, name, expr):
        return f"const {self.real} {name} = {expr};"

    @staticmethod
    def _spell_call(fn, x):
        return f"{fn}({x})"

    @staticmethod
    def _spell_fma(kind, a, b, c):
        return f"{a} * {b} + {c}" if kind == "fma" else f"{c} - {a} * {b}"

    def _var(self, name, v):
        self.emit(f"{self.real} {name} = {v.name};")

    @staticmethod
    def _assign(name, value):
        return f"{name} = {value};"

    @contextlib.contextmanager
    def loop(self, name, lo, hi):
        self.emit(f"for (long {name} = {as_iexpr(lo).c()}; {name} < {as_iexpr(hi).c()}; ++{name}) {{")
        self.indent += 1
        yield _IName(name)
        self.indent -= 1
        self.emit("}")

    @contextlib.contextmanager
    def when(self, cond: IExpr):
        self.emit(f"if ({as_iexpr(cond).c()} != 0) {{")
        self.indent += 1
        yield
        self.indent -= 1
        self.emit("}")

    @contextlib.contextmanager
    def otherwise(self):
        if self.lines[-1].strip() != "}":
            raise DescriptionError("E.otherwise must follow E.when")
        self.lines[-1] = self.lines[-1] + " else {"
        self.indent += 1
        yield
        self.indent -= 1
        self.emit("}")

    def source(self):
        k = self.k
        G, R = self.D["global"], self.D["restrict"]
        params = []
        for p in k.params:
            if p.kind == "field":
                const = "" if p.out else "const "
                params.append(f"{G}{const}{self.real}* {p.name}")
            elif p.kind == "itable":
                params.append(f"{G}const int* {R} {p.name}")
            elif p.kind == "rtable":
                params.append(f"{G}const {self.real}* {R} {p.name}")
            elif p.kind == "int":
                params.append(f"const long {p.name}")
            else:
                raise DescriptionError(f"unknown parameter kind {p.kind}")
        body_lines = self.lines
        self.lines = []
        inner = k.inner
        total = f"{k.n} * {inner}" if inner else k.n
        head = [
            f"/* pygrid {k.name}: {self.dialect}, {self.real}, nsimd={self.NS} */",
            self.D["preamble"][self.dtype.name].rstrip("\n"),
            f"{self.D['kernel']} {k.name}(",
            "    " + ",\n    ".join(params) + ")",
            "{",
        ]
        if inner:
            # the thread's site index runs over (outer site, inner index), inner fastest
            head += codegen_c.thread_coords(self.dialect, total, self.NS, "o_")
            head += [f"    const long o = o_ / {inner};", f"    const long s = o_ - o * {inner};"]
        else:
            head += codegen_c.thread_coords(self.dialect, total, self.NS) + ["    const long s = 0;"]
        return "\n".join(x for x in head if x) + "\n" + "\n".join(body_lines) + "\n}\n"


class CVectorEmitter(CEmitter):
    """OpenCL C with vector types (target 'opencl-simd'): one work-item per (outer site, inner
    index), one ``realN`` vector of the site's ``N = nsimd`` lanes per covariant value.

    This is the SIMD form of the numba target in OpenCL C, for a CPU device: its runtime
    vectorises a SIMT kernel across work-items, and a kernel of one lane a work-item ran at
    half the speed of vector loads there (a copy in both forms on the CPU OpenCL device).  A
    neighbour read carries its permutation until :meth:`permute`, which shuffles the vectors
    by the row of ``lanes`` (row 0, the identity, skips it)."""

    WIDTHS = codegen_c.VECTOR_WIDTHS

    def __init__(self, kernel, nsimd, dtype):
        super().__init__(kernel, nsimd, dtype, "opencl")
        if self.NS not in self.WIDTHS:
            raise DescriptionError(f"{kernel.name}: the OpenCL vector target takes Nsimd in {self.WIDTHS}, "
                                   f"not {self.NS}")
        self.scalar = self.real
        self.real = f"{self.scalar}{self.NS}"
        self.mask = ("ulong" if self.scalar == "double" else "uint") + str(self.NS)
        self._open = [0]  # the blocks enclosing the current line
        self._nblocks = 0
        self._rows: dict = {}  # (field, halo, site, limit) -> (block, name of the row's pointer)

    def _permutation(self, P):
        P.mask = self.fresh("pk")
        self.emit(f"const {self.mask} {P.mask} = convert_{self.mask}(vload{self.NS}({P.m.c()}, lanes));")

    @contextlib.contextmanager
    def _block(self):
        self._nblocks += 1
        self._open.append(self._nblocks)
        try:
            yield
        finally:
            self._open.pop()

    @contextlib.contextmanager
    def loop(self, name, lo, hi):
        with super().loop(name, lo, hi) as i, self._block():
            yield i

    @contextlib.contextmanager
    def when(self, cond: IExpr):
        with super().when(cond), self._block():
            yield

    @contextlib.contextmanager
    def otherwise(self):
        with super().otherwise(), self._block():
            yield

    def _row(self, field_name, site, halo_name=None, limit=None):
        """A pointer to the start of the site's row (in ``field_name``, or in the halo past ``limit``),
        named once in the block that first reads it: the loads of its planes are constant offsets."""
        site = as_iexpr(site)
        key = (field_name, halo_name, site.c(), None if limit is None else as_iexpr(limit).c())
        hit = self._rows.get(key)
        if hit is not None and hit[0] in self._open:
            return hit[1]
        name = self.fresh("r")
        const = "" if self.k.param(field_name).out else "const "
        stride, ptr = self._stride(field_name), f"{self.D['global']}{const}{self.scalar}*"
        if halo_name is None:
            self.emit(f"{ptr} {name} = {field_name} + {site.c()} * {stride};")
        else:
            self._either(field_name, halo_name, site, limit, 0)  # checks the halo's shape
            lim = as_iexpr(limit).c()
            self.emit(f"{ptr} {name} = ({site.c()} < {lim}) ? {field_name} + {site.c()} * {stride} : "
                      f"{halo_name} + ({site.c()} - {lim}) * {stride};")
        self._rows[key] = (self._open[-1], name)
        return name

    def _vload(self, row, plane, perm):
        name = self.fresh()
        self.emit(f"const {self.real} {name} = vload{self.NS}(0, {row} + {int(plane) * self.NS});")
        return CV(self, name, perm)

    def read(self, field_name, site, plane, perm: Permutation | None = None) -> CV:
        return self._vload(self._row(field_name, site), plane, perm)

    def read_either(self, field_name, halo_name, site, limit, plane, perm: Permutation | None = None) -> CV:
        return self._vload(self._row(field_name, site, halo_name, limit), plane, perm)

    def permute(self, values, P: Permutation):
        self._check_permute(values, P)
        out = [CV(self, self.fresh("q")) for _ in values]
        self.emit(f"{self.real} " + ", ".join(f"{o.name} = {v.name}" for o, v in zip(out, values)) + ";")
        self.emit(f"if ({P.m.c()} != 0) {{")
        for o, v in zip(out, values):
            self.emit(f"    {o.name} = shuffle({v.name}, {P.mask});")
        self.emit("}")
        return out

    def store(self, field_name, site, plane, v: CV):
        if v.perm not in (None, UNIFORM):
            raise DescriptionError("storing a value that still carries a lane permute")
        row = self._row(field_name, site)
        self.emit(f"vstore{self.NS}({v.name}, 0, {row} + {int(plane) * self.NS});")

    def uniform(self, table, index) -> CV:
        name = self.fresh("u")
        self.emit(f"const {self.real} {name} = ({self.real})({table}[{as_iexpr(index).c()}]);")
        return CV(self, name, UNIFORM)

    def const(self, x) -> CV:
        return CV(self, f"(({self.real})({float(x)!r}{self.suffix}))", UNIFORM)

    def source(self):
        k = self.k
        G, R = self.D["global"], self.D["restrict"]
        params = []
        for p in k.params:
            if p.kind == "field":
                params.append(f"{G}{'' if p.out else 'const '}{self.scalar}* {p.name}")
            elif p.kind == "itable":
                params.append(f"{G}const int* {R} {p.name}")
            elif p.kind == "rtable":
                params.append(f"{G}const {self.scalar}* {R} {p.name}")
            else:
                params.append(f"const long {p.name}")
        total = f"{k.n} * {k.inner}" if k.inner else k.n
        head = [
            f"/* pygrid {k.name}: opencl-simd, {self.scalar}, nsimd={self.NS} */",
            self.D["preamble"][self.dtype.name].rstrip("\n"),
            f"{codegen_c.vector_kernel(self.real)} {k.name}(",
            "    " + ",\n    ".join(params) + ")",
            "{",
            "    const long o_ = (long)get_global_id(0);",
            f"    if (o_ >= (long)({total})) return;",
        ]
        if k.inner:
            head += [f"    const long o = o_ / {k.inner};", f"    const long s = o_ - o * {k.inner};"]
        else:
            head += ["    const long o = o_;", "    const long s = 0;"]
        return "\n".join(x for x in head if x) + "\n" + "\n".join(self.lines) + "\n}\n"


class NumbaEmitter(_Emitter):
    """numba with explicit SIMD vectors: one vector per covariant value, a loop over outer sites.

    The start of a site's row (and, for ``read_either``, which array holds it) is
    computed once and named, and every plane of that site is read at a constant offset
    from it: numba's front end pays per expression node and per branch, and a Dirac
    kernel reads 24 planes of each of 8 neighbours.  A name is reused only inside the
    block that defined it (``loop``, ``when``, ``otherwise`` open new blocks).
    """

    def __init__(self, kernel, nsimd, dtype):
        super().__init__(kernel, nsimd, dtype)
        self.indent = 2  # inside the site loop
        self.pre: list[str] = []
        self._open = [0]        # the blocks enclosing the current line
        self._nblocks = 0
        self._rows: dict = {}   # (array, halo, site, limit) -> (block, array name, row start name)

    def _let(self, name, e):
        self.emit(f"{name} = {e.py()}")

    def _permutation(self, P):
        pass

    @contextlib.contextmanager
    def _block(self):
        self._nblocks += 1
        self._open.append(self._nblocks)
        self.indent += 1
        try:
            yield
        finally:
            self.indent -= 1
            self._open.pop()

    def _row(self, field_name, site, halo_name=None, limit=None):
        """(array, start of the site's row in it), named once per block."""
        site = as_iexpr(site)
        key = (field_name, halo_name, site.py(), None if limit is None else as_iexpr(limit).py())
        hit = self._rows.get(key)
        if hit is not None and hit[0] in self._open:
            return hit[1], hit[2]
        stride = self._stride(field_name)
        row = self.fresh("r")
        if halo_name is None:
            arr = field_name
            self.emit(f"{row} = {site.py()} * U({stride})")
        else:
            cond, arr = self.fresh("c"), self.fresh("a")
            limit = as_iexpr(limit)
            self.emit(f"{cond} = {site.py()} < {limit.py()}")
            self.emit(f"{row} = ({site.py()} if {cond} else {site.py()} - {limit.py()}) * U({stride})")
            self.emit(f"{arr} = {field_name} if {cond} else {halo_name}")
        self._rows[key] = (self._open[-1], arr, row)
        return arr, row

    def read(self, field_name, site, plane, perm=None) -> CV:
        arr, row = self._row(field_name, site)
        name = self.fresh()
        self.emit(f"{name} = vload({arr}, {row} + U({int(plane) * self.NS}), W)")
        return CV(self, name, perm)

    def read_either(self, field_name, halo_name, site, limit, plane, perm=None) -> CV:
        self._either(field_name, halo_name, site, limit, plane)  # checks the halo's shape
        arr, row = self._row(field_name, site, halo_name, limit)
        name = self.fresh()
        self.emit(f"{name} = vload({arr}, {row} + U({int(plane) * self.NS}), W)")
        return CV(self, name, perm)

    def permute(self, values, P: Permutation):
        self._check_permute(values, P)
        out = [CV(self, self.fresh("q")) for _ in values]
        for o, v in zip(out, values):
            self.emit(f"{o.name} = {v.name}")
        m = P.m.py()
        self.emit(f"if {m} != U(0):")
        self.emit(f"    x_ = pxor[{m}]")
        for k, x in enumerate([1 << b for b in range(self.NS.bit_length() - 1)]):
            self.emit(f"    {'if' if k == 0 else 'elif'} x_ == {x}:")
            for o in out:
                self.emit(f"        {o.name} = vxor({o.name}, {x})")
        self.emit("    else:" if self.NS > 1 else "    if True:")
        for o in out:
            self.emit(f"        {o.name} = vpermute({o.name}, lanes, {m} * U({self.NS}))")
        return out

    def store(self, field_name, site, plane, v: CV):
        if v.perm not in (None, UNIFORM):
            raise DescriptionError("storing a value that still carries a lane permute")
        arr, row = self._row(field_name, site)
        self.emit(f"vstore({arr}, {row} + U({int(plane) * self.NS}), {v.name})")

    def uniform(self, table, index) -> CV:
        name = self.fresh("u")
        self.emit(f"{name} = vsplat({table}[{as_iexpr(index).py()}], W)")
        return CV(self, name, UNIFORM)

    def prefetch(self, field_name, site, level=1):
        arr, row = self._row(field_name, site)
        line = 64 // self.dtype.itemsize
        fn = "prefetch_lines" if level == 1 else "prefetch_l2_lines"
        self.emit(f"{fn}({arr}, {row}, {-(-self._stride(field_name) // line)})")

    def const(self, x) -> CV:
        x = float(x)
        if x not in self._consts:
            name = f"k{len(self._consts)}"
            self._consts[x] = name
            self.pre.append(f"    {name} = vsplat(Z({x!r}), W)")
        return CV(self, self._consts[x], UNIFORM)

    def _define(self, name, expr):
        return f"{name} = {expr}"

    @staticmethod
    def _spell_call(fn, x):
        return f"v{fn}({x})"

    @staticmethod
    def _spell_fma(kind, a, b, c):
        return f"v{kind}({a}, {b}, {c})"

    def _var(self, name, v):
        self.emit(f"{name} = {v.name}")

    @staticmethod
    def _assign(name, value):
        return f"{name} = {value}"

    @contextlib.contextmanager
    def loop(self, name, lo, hi):
        self.emit(f"for {name}_ in range({as_iexpr(lo).py()}, {as_iexpr(hi).py()}):")
        with self._block():
            self.emit(f"{name} = U({name}_)")
            yield _IName(name)

    @contextlib.contextmanager
    def when(self, cond):
        self.emit(f"if {as_iexpr(cond).py()} != U(0):")
        with self._block():
            yield

    @contextlib.contextmanager
    def otherwise(self):
        self.emit("else:")
        with self._block():
            yield

    def source(self):
        k = self.k
        names = [p.name for p in k.params]
        ints = [p.name for p in k.params if p.kind == "int"]
        out = [
            "import numpy as np",
            "from numba import njit",
            "from pygrid.accelerator.simd_numba import vload, vstore, vsplat, vfma, vfms, vxor, vpermute, "
            "vsqrt, prefetch_lines, prefetch_l2_lines",
            f"# simd_numba version {_simd_version()}",
            "",
            f"W = {self.NS}",
            f"Z = np.{self.dtype.name}",
            "U = np.uint64",
            "",
            '@njit(fastmath=True, cache=True, nogil=True, error_model="numpy", boundscheck=False)',
            f"def {k.name}(lo, hi, {', '.join(n + '_a' if n in ints else n for n in names)}):",
        ]
        if k.doc:
            out.append(f'    """{k.doc}"""')
        out += [f"    {n} = U({n}_a)" for n in ints]
        out += self.pre
        if k.inner:
            out += ["    for o_ in range(lo, hi):", "        o = U(o_)",
                    f"        for s_ in range({k.inner}):", "            s = U(s_)"]
            body = ["    " + x for x in self.lines]
        else:
            out += ["    for o_ in range(lo, hi):", "        o = U(o_)", "        s = U(0)"]
            body = self.lines
        return "\n".join(out + body) + "\n"


def _simd_version():
    from .simd_numba import VERSION

    return VERSION


#: names the generated sources use themselves: no parameter may take one
RESERVED = frozenset({"U", "W", "Z", "np", "njit", "lo", "hi", "o", "o_", "s", "s_", "l", "idx", "x_",
                      "vload", "vstore", "vsplat", "vfma", "vfms", "vxor", "vpermute", "vsqrt"})


def generate(kernel: Kernel, target: str, nsimd: int, dtype) -> str:
    """Source of ``kernel`` for ``target`` ('numba', 'cuda', 'hip', 'opencl' or 'opencl-simd')."""
    clash = RESERVED.intersection(p.name for p in kernel.params)
    if clash:
        raise DescriptionError(
            f"{kernel.name}: parameter names {sorted(clash)} are used by the generated code"
        )
    if target == "numba":
        E = NumbaEmitter(kernel, nsimd, dtype)
    elif target == "opencl-simd":
        E = CVectorEmitter(kernel, nsimd, dtype)
    else:
        E = CEmitter(kernel, nsimd, dtype, "cuda" if target == "hip" else target)
    E.pro = kernel.prologue(E) if kernel.prologue else None
    if target == "numba":
        # the prologue's statements run once per call, before the site loop
        E.pre += ["    " + x.strip() for x in E.lines]
        E.lines = []
    kernel.body(E, _IName("o"), _IName("s"))
    return E.source()


# ---------------------------------------------------------------------------------
# launching on the host: what every backend does with a kernel's arguments
# ---------------------------------------------------------------------------------


def thread_count(kernel: Kernel, args: dict, nsimd: int) -> int:
    """Threads of a SIMT launch: outer sites x inner extent x lanes."""
    n = int(args[kernel.n]) * (int(args[kernel.inner]) if kernel.inner else 1)
    return n * int(nsimd)


#: ctypes argument types of :func:`c_launch_wrapper`'s ``pygrid_launch``
C_LAUNCH_ARGTYPES = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_long)] + [ctypes.c_int] * 2


def c_launch_wrapper(kernel: Kernel, source: str) -> str:
    """``pygrid_launch(void** a, long* ints, int blocks, int threads)`` for the SIMT emulation.

    ``a`` holds the array parameters and ``ints`` the integer ones, each in parameter order.
    """
    real = "double" if "double" in source.split("\n", 1)[0] else "float"
    args, ia, ii = [], 0, 0
    for p in kernel.params:
        if p.kind == "int":
            args.append(f"ints[{ii}]")
            ii += 1
        else:
            t = "int" if p.kind == "itable" else real
            args.append(f"({t}*)a[{ia}]")
            ia += 1
    launch = codegen_c.emulation_launch(source, f"{kernel.name}({', '.join(args)})")
    return (f'\nextern "C" void pygrid_launch(void** a, long* ints, int blocks, int threads)\n'
            f"{{\n    {launch};\n}}\n")


# ---------------------------------------------------------------------------------
# the numba target (numpy and openmp backends)
# ---------------------------------------------------------------------------------

_numba_kernels: dict = {}


def numba_kernel(kernel: Kernel, nsimd: int, dtype):
    """The compiled numba function of ``kernel`` (generated source cached on disk, machine code by numba)."""
    key = kernel.key(nsimd, dtype, "numba")
    fn = _numba_kernels.get(key)
    if fn is None:
        from .compile_cache import load_module

        label = f"kernel {kernel.name} ({np.dtype(dtype).name}, Nsimd {nsimd})"
        module = load_module(generate(kernel, "numba", nsimd, dtype), "pygrid_cov", label=label)
        fn = getattr(module, kernel.name)
        _numba_kernels[key] = fn
    return fn


def host_launch(backend, kernel: Kernel, args: dict, nsimd: int, dtype):
    """Run ``kernel`` through ``backend.accelerator_for`` on host (numpy) buffers."""
    fn = numba_kernel(kernel, nsimd, dtype)
    flat = []
    for p in kernel.params:
        a = args[p.name]
        if p.kind == "int":
            flat.append(int(a))
            continue
        if not isinstance(a, np.ndarray):
            from ..errors import BackendError

            raise BackendError(f"{kernel.name} on the {backend.name} backend: {p.name} is a "
                               f"{type(a).__name__}, not a host array")
        if p.kind == "rtable":
            a = np.ascontiguousarray(a, dtype=dtype)
        elif p.kind == "field" and not a.flags.c_contiguous:
            from ..errors import ConformabilityError

            raise ConformabilityError(f"{kernel.name}: {p.name} buffer must be C-contiguous")
        flat.append(a.reshape(-1) if p.out else read_only(a.reshape(-1)))
    backend.accelerator_for(int(args[kernel.n]), fn, *flat)


def device_call(kernel: Kernel, args: dict, field: Callable, itable: Callable, rtable: Callable,
                integer: Callable):
    """A device launch's arguments in parameter order, and the output fields to copy back.

    ``field(a)`` gives the device array of a field buffer (``a`` itself when it is
    one already, else a copy); ``itable``, ``rtable`` and ``integer`` give the
    kernel argument of a table or integer.  A buffer passed twice is copied once.
    Returns (arguments, [(host buffer, device array)] of host outputs to copy back).
    """
    call, back, devs = [], [], {}
    for p in kernel.params:
        a = args[p.name]
        if p.kind == "field":
            d = devs.get(id(a))
            if d is None:
                d = devs[id(a)] = field(a)
                if d is not a and p.out:
                    back.append((a, d))
            call.append(d)
        elif p.kind == "itable":
            call.append(itable(a))
        elif p.kind == "rtable":
            call.append(rtable(a))
        else:
            call.append(integer(int(a)))
    return call, back


def c_tables(kernel: Kernel, args: dict, dtype):
    """Host copies of the tables as the C kernels take them: integer tables int32, real ones in ``dtype``."""
    out = {}
    for p in kernel.params:
        if p.kind == "itable":
            out[p.name] = np.ascontiguousarray(args[p.name], dtype=np.int32).reshape(-1)
        elif p.kind == "rtable":
            out[p.name] = np.ascontiguousarray(args[p.name], dtype=dtype).reshape(-1)
    return out
