"""The operator protocol the solvers are written against, and adapters.

Protocol
--------
An *operator* is any object with

``M(x, out=None)``
    the linear map applied to the field ``x`` (a :class:`pygrid.Lattice`);
    returns a field.  With ``out`` it writes the result into ``out`` and
    returns ``out``.
``Mdag(x, out=None)``
    the adjoint (only solvers that need it call it).
``MdagM(x, out=None)`` (optional)
    ``Mdag(M(x))``, if the operator has a faster fused form.
``converted(precision, native=False)`` (optional; ``native`` optional too)
    the same operator in ``'single'`` or ``'double'`` precision (its gauge
    links etc. converted), used by mixed-precision solvers.  With ``native``
    it may live on a grid of that precision's own SIMD layout.
``grid`` (optional attribute)
    the grid of the fields ``M`` applies to; the mixed-precision solvers convert
    their fields onto the grid of the operator they iterate with.
``flops_per_apply`` (optional attribute)
    floating-point operations of one ``M``, for the solver's flop estimate.

Operators written by pygrid (``pg.qcd.WilsonFermion`` ...) follow this
protocol.  Plain functions are wrapped by :class:`LinearOperator`.

A *Hermitian operator* is an operator whose ``M`` is Hermitian (and whose
``Mdag`` is therefore ``M``); conjugate gradient needs one that is also
positive definite.  :class:`MdagMOperator` turns any operator into its normal
operator ``Mdag M``, which is.
"""
from __future__ import annotations

import inspect
import weakref

from ..errors import PyGridError
from ..lattice import Lattice, convert as _convert, eval as _eval, norm2

__all__ = [
    "LinearOperator", "HermitianOperator", "MdagMOperator", "as_operator", "as_hermitian",
    "apply_M", "converted_operator", "operand_grid", "mixed_operators",
]


def _materialise(y, out):
    """Turn what a function returned (field or lazy expression) into a field, into ``out`` if given."""
    if out is not None:
        if y is not out:
            out @= y
        return out
    if isinstance(y, Lattice):
        return y
    return _eval(y)


#: a function -> whether it accepts out= (held weakly)
_TAKES_OUT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _takes_out(fn):
    # asked at every application inside a solver: inspect.signature took tens of microseconds, so
    # the answer is kept per function (a bound method is a new object at every attribute access:
    # the key is the function under it)
    key = getattr(fn, "__func__", fn)
    try:
        hit = _TAKES_OUT.get(key)
    except TypeError:       # not weakly referenceable or not hashable: asked each time
        key, hit = None, None
    if hit is not None:
        return hit
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    takes = "out" in sig.parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values())
    if key is not None:
        try:
            _TAKES_OUT[key] = takes
        except TypeError:
            pass
    return takes


def _call(fn, x, out):
    """Apply ``fn`` to x honouring ``out`` whether or not fn accepts it."""
    if out is not None and _takes_out(fn):
        return _materialise(fn(x, out=out), out)
    return _materialise(fn(x), out)


class LinearOperator:
    """An operator from Python functions.

    ``LinearOperator(M, Mdag=None, hermitian=False, converted=None, flops_per_apply=None)``

    ``M(x)`` returns a field or a lazy expression (it may also accept ``out=``).
    ``Mdag`` defaults to ``M`` when ``hermitian=True``; otherwise calling
    ``Mdag`` without one raises.  ``converted`` is a callable
    ``precision -> operator`` or a dict ``{'single': op, ...}`` giving the
    operator in another precision; if the functions work in any precision
    (they capture no fields), pass ``converted='same'``.
    """

    def __init__(self, M, Mdag=None, hermitian=False, converted=None, flops_per_apply=None, name=None):
        if not callable(M):
            raise TypeError(f"LinearOperator needs a callable M, got {M!r}")
        self._M = M
        self._Mdag = Mdag if Mdag is not None else (M if hermitian else None)
        self.hermitian = bool(hermitian)
        self._converted = converted
        self.flops_per_apply = flops_per_apply
        self.name = name or getattr(M, "__name__", "LinearOperator")

    def M(self, x, out=None):
        return _call(self._M, x, out)

    def Mdag(self, x, out=None):
        if self._Mdag is None:
            raise PyGridError(
                f"{self.name}: no adjoint given; pass Mdag= (or hermitian=True) to LinearOperator")
        return _call(self._Mdag, x, out)

    def MdagM(self, x, out=None):
        return self.Mdag(self.M(x), out=out)

    def __call__(self, x, out=None):
        return self.M(x, out=out)

    def converted(self, precision):
        c = self._converted
        if c is None:
            raise PyGridError(
                f"{self.name}: no {precision}-precision version; pass converted= to LinearOperator "
                f"or op_single= to the solver")
        if isinstance(c, str) and c == "same":
            return self
        if isinstance(c, dict):
            if precision not in c:
                raise PyGridError(f"{self.name}: no {precision}-precision version in converted=")
            return c[precision]
        return c(precision)


class HermitianOperator:
    """Adapter: an operator known to be Hermitian; ``M = Mdag = op.M``.

    Wraps an object following the protocol or a plain function (then
    ``M(x)`` returns a field or expression).  Calling it applies ``M``.
    """

    def __init__(self, op):
        self.op = op
        self._fn = op.M if hasattr(op, "M") else op
        if not callable(self._fn):
            raise TypeError(f"HermitianOperator needs an operator with M or a callable, got {op!r}")
        self.flops_per_apply = getattr(op, "flops_per_apply", None)

    def M(self, x, out=None):
        return _call(self._fn, x, out)

    Mdag = M

    def MdagM(self, x, out=None):
        return self.M(self.M(x), out=out)

    def __call__(self, x, out=None):
        return self.M(x, out=out)

    def converted(self, precision, native=False):
        return HermitianOperator(converted_operator(self.op, precision, native))


class MdagMOperator(HermitianOperator):
    """The normal operator ``Mdag M`` of any operator: Hermitian positive (semi)definite.

    Uses ``op.MdagM`` when the operator has one, else ``op.Mdag(op.M(x))``.
    """

    def __init__(self, op):
        if not (hasattr(op, "M") and hasattr(op, "Mdag")):
            raise TypeError(f"MdagMOperator needs an operator with M and Mdag, got {op!r}")
        self.op = op
        fpa = getattr(op, "flops_per_apply", None)
        self.flops_per_apply = 2 * fpa if fpa else None
        if hasattr(op, "MdagM"):
            self._fn = op.MdagM
        else:
            def mdagm(x, out=None):
                return _call(op.Mdag, _call(op.M, x, None), out)
            self._fn = mdagm

    def apply_and_norm(self, x, out=None):
        """``(Mdag M x, |M x|^2)``: CG's ``<x, Mdag M x>`` as the norm of the intermediate ``M x``
        (one field read where the inner product reads two, as Grid's ``HermOpAndNorm``).  The
        intermediate is a field this operator keeps for the next call."""
        op = self.op
        mid = getattr(self, "_mid", None)
        direct = getattr(self, "_direct", None)
        if direct is None:
            direct = self._direct = _takes_out(op.M) and _takes_out(op.Mdag)
        if direct and mid is not None and out is not None:
            # the general path's _call inline: a CG iteration at 8^4 spends this Python with the
            # caches full of the fields its kernels streamed
            y = op.M(x, out=mid)
            if y is not mid:
                mid @= y
            y = op.Mdag(mid, out=out)
            if y is not out:
                out @= y
            return out, norm2(mid)
        mid = self._mid = _call(op.M, x, mid)
        return _call(op.Mdag, mid, out), norm2(mid)

    def converted(self, precision, native=False):
        return MdagMOperator(converted_operator(self.op, precision, native))


def converted_operator(op, precision, native=False):
    """``op`` in another precision through its ``converted`` method, with a clear error if it has none;
    ``native``: on the precision's own SIMD layout where the method offers it."""
    conv = getattr(op, "converted", None)
    if conv is None:
        raise PyGridError(
            f"{op!r} has no converted(precision) method: give it one, or pass op_single= to the solver")
    if native and _has_parameter(conv, "native"):
        return conv(precision, native=True)
    return conv(precision)


def mixed_operators(op, b, op_single=None):
    """What a mixed-precision solve of ``op x = b`` works with: ``op`` as a Hermitian operator
    ``A``; ``A_s``, ``op_single`` or else ``A.converted('single', native=True)`` (on single
    precision's own SIMD layout where the operator offers it), Hermitian too; the grid of
    ``A_s``'s fields (None where it does not say); and ``b`` in double."""
    A = as_hermitian(op)
    A_s = as_hermitian(op_single if op_single is not None else converted_operator(A, "single", native=True))
    return A, A_s, operand_grid(A_s), b if b.precision == "double" else _convert(b, "double")


def _has_parameter(fn, name):
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def operand_grid(op):
    """The grid of the fields ``op`` applies to (its ``grid``, or that of the operator it wraps), or None
    where it does not say."""
    from ..cartesian import GridCartesian

    for _ in range(8):  # the wrappers around an operator are few
        g = getattr(op, "grid", None)
        if isinstance(g, GridCartesian):
            return g
        op = getattr(op, "op", None)
        if op is None:
            return None
    return None


def as_operator(op):
    """An object with ``M(x, out=None)``: ``op`` itself, or a plain callable wrapped (assumed Hermitian)."""
    if hasattr(op, "M"):
        return op
    if callable(op):
        return LinearOperator(op, hermitian=True)
    raise TypeError(f"expected an operator (with M, Mdag) or a callable, got {op!r}")


def as_hermitian(op):
    """The Hermitian operator CG applies: ``op`` if already one, else wrapped in HermitianOperator."""
    if isinstance(op, HermitianOperator):
        return op
    return HermitianOperator(op)


def apply_M(op, x, out=None):
    """``op.M(x, out)`` for any protocol object, whether or not its M accepts ``out``."""
    return _call(op.M, x, out)
