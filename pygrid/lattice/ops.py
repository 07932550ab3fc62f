"""Operations on fields: shifts, tensor operations, reductions, checkerboards.

Everything that can be fused returns a lazy expression; reductions and
conversions evaluate their operand first.
"""
from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ..accelerator import get_backend
from ..cartesian import GridCartesian
from ..errors import ConformabilityError, GridError, SiteTypeError
from ..expr import nodes
from ..expr.evaluate import evaluate
from ..memory import ViewMode
from ..tensors import algebra
from ..tensors.sitetype import LEVELS
from . import kept
from .lattice import Lattice, kernel_views


def eval(expr: Any) -> Lattice:  # noqa: A001 - the public name pg.eval mirrors Grid's eval
    """Evaluate an expression as one fused kernel into a new field."""
    e = nodes.as_expr(expr)
    if isinstance(e, nodes.Leaf) and not any(e.disp):
        return e.field.copy()
    if e.grid is None:
        raise SiteTypeError("an expression without any field cannot be evaluated on a lattice")
    out = Lattice(e.grid, e.site_type, e.precision, checkerboard=e.checkerboard)
    # a new field: no evaluation into it comes again to take a kept launch
    return evaluate(e, out, keep=False)


def _field(x):
    """A Lattice for x: x itself, or x evaluated."""
    if isinstance(x, Lattice):
        return x
    return eval(x)


def cshift(field: Any, dim: int, disp: int) -> nodes.Expr:
    """field(x + disp * e_dim), periodic: a lazy neighbour read, fused into the expression."""
    return nodes.shift(field, dim, disp)


def adj(x: Any) -> nodes.Expr:
    return nodes.unary("adj", x)


def conjugate(x: Any) -> nodes.Expr:
    return nodes.unary("conjugate", x)


def transpose(x: Any) -> nodes.Expr:
    return nodes.unary("transpose", x)


def trace(x: Any) -> nodes.Expr:
    """Trace over every matrix level."""
    return nodes.unary("trace", x)


def trace_colour(x: Any) -> nodes.Expr:
    return nodes.unary("trace", x, levels=("colour",))


def trace_spin(x: Any) -> nodes.Expr:
    return nodes.unary("trace", x, levels=("spin",))


def transpose_colour(x: Any) -> nodes.Expr:
    return nodes.unary("transpose", x, levels=("colour",))


def transpose_spin(x: Any) -> nodes.Expr:
    return nodes.unary("transpose", x, levels=("spin",))


def _index(i):
    return tuple(i) if isinstance(i, (tuple, list)) else (i,)


def peek_index(x: Any, level: str, *index: int) -> nodes.Expr:
    """The component ``index`` of one level (e.g. peek_index(U, 'lorentz', mu))."""
    if level not in LEVELS:
        raise SiteTypeError(f"unknown level {level!r}; choose one of {', '.join(LEVELS)}")
    idx = index[0] if len(index) == 1 and isinstance(index[0], (tuple, list)) else index
    return nodes.unary("peek", x, level=level, index=tuple(int(i) for i in idx))


def peek_lorentz(x: Any, mu: int) -> nodes.Expr:
    return peek_index(x, "lorentz", mu)


def peek_spin(x: Any, *index: int) -> nodes.Expr:
    return peek_index(x, "spin", *index)


def peek_colour(x: Any, *index: int) -> nodes.Expr:
    return peek_index(x, "colour", *index)


def poke_index(field: Lattice, value: Any, level: str, *index: int) -> Lattice:
    """Set the component ``index`` of one level of ``field`` to ``value`` (in place)."""
    if not isinstance(field, Lattice):
        raise SiteTypeError("poke_index needs a Lattice to write into")
    idx = index[0] if len(index) == 1 and isinstance(index[0], (tuple, list)) else index
    r = algebra.peek(field.site_type, level, tuple(int(i) for i in idx))
    v = nodes.as_expr(value)
    if v.site_type.levels != r.out_type.levels:
        raise SiteTypeError(f"poke_index: the {level} component of {field.site_type} is a {r.out_type}, "
                            f"not a {v.site_type}")
    val = _field(value) if v.grid is not None else None
    if val is None:
        raise SiteTypeError("poke_index needs a field value")
    nodes._conform("poke_index", nodes.Leaf(field), nodes.Leaf(val))
    rows = _poke_rows(r)
    with (
        val._kernel_view(ViewMode.AcceleratorRead) as src,
        field._kernel_view(ViewMode.AcceleratorWrite) as dst,
    ):
        get_backend().relayout("setcomp", dst, src, rows[1], rows[0])
    return field


def _poke_rows(r):
    """(value components, field components) of a peek's rows, contiguous and kept with the (cached) peek,
    so a device backend uploads them once."""
    if not hasattr(r, "poke_rows"):
        r.poke_rows = tuple(np.ascontiguousarray(r.rows[:, k]) for k in (0, 1))
    return r.poke_rows


def poke_lorentz(field: Lattice, value: Any, mu: int) -> Lattice:
    return poke_index(field, value, "lorentz", mu)


def poke_spin(field: Lattice, value: Any, *index: int) -> Lattice:
    return poke_index(field, value, "spin", *index)


def poke_colour(field: Lattice, value: Any, *index: int) -> Lattice:
    return poke_index(field, value, "colour", *index)


def outer_product(a: Any, b: Any) -> nodes.Expr:
    """a adj(b) per vector level."""
    return nodes.Contract("outer_product", nodes.as_expr(a), nodes.as_expr(b))


def local_inner_product(a: Any, b: Any) -> nodes.Expr:
    """sum over components of conj(a) b, per site: a Complex field."""
    return nodes.Contract("local_inner_product", nodes.as_expr(a), nodes.as_expr(b))


def where(mask: Any, a: Any, b: Any) -> nodes.Expr:
    """Per site: a where mask != 0, else b.  Both branches are evaluated (no divergence)."""
    a, b = nodes.as_expr(a), nodes.as_expr(b)
    m = nodes.as_expr(mask)
    return nodes.Where(m, a, b)


# ---- reductions ------------------------------------------------------------

def norm2(x: Any) -> float:
    """sum over sites of |x|^2, as a float (accumulated in double precision; on single fields the
    openmp backend adds four complex components' |z|^2 in single before widening the sum, within
    4 x 2^-24 of it)."""
    k = kept.kept(("norm2", id(x)), (x,))
    if k is not None:
        r = kept.launch(k)
        if r is not None:
            return x.grid.comm.sum(r[0])
        fn, out = k.backend.norm2, []
        if kept.run(k, lambda bufs: out.append(fn(bufs[0]))):
            return x.grid.comm.sum(out[0])
    f = _field(x)
    views = kernel_views((f, ViewMode.AcceleratorRead))
    with views as (a,):
        n = get_backend().norm2(a)
    if f is x:
        kept.keep_views(("norm2", id(x)), (x,), views, (a,), update=("norm2", (a,)))
    return f.grid.comm.sum(n)


def inner_product(a: Any, b: Any) -> complex:
    """sum over sites of conj(a) . b, as a complex (accumulated in double precision; on single fields
    the openmp backend adds four components' products in single before widening the sum, within
    4 x 2^-24 of the sizes of their real products)."""
    k = kept.kept(("inner_product", id(a), id(b)), (a, b))
    if k is not None and a.checkerboard == b.checkerboard:
        r = kept.launch(k)
        if r is not None:
            return a.grid.comm.sum(complex(r[0], r[1]))
        fn, out = k.backend.inner_product, []
        if kept.run(k, lambda bufs: out.append(fn(bufs[0], bufs[1]))):
            return a.grid.comm.sum(out[0])
    fa, fb = _field(a), _field(b)
    # one grid object, checkerboard and precision conform without the expression's checks, which
    # cost microseconds of a call that reads a field in 100-300 us
    if not (fa.grid is fb.grid and fa.checkerboard == fb.checkerboard and fa.precision == fb.precision):
        nodes._conform("inner_product", nodes.Leaf(fa), nodes.Leaf(fb))
    if fa.site_type.levels != fb.site_type.levels:
        raise SiteTypeError(f"inner_product of a {fa.site_type} and a {fb.site_type}")
    views = kernel_views((fa, ViewMode.AcceleratorRead), (fb, ViewMode.AcceleratorRead))
    with views as bufs:
        r = get_backend().inner_product(bufs[0], bufs[1])
    if fa is a and fb is b:
        kept.keep_views(("inner_product", id(a), id(b)), (a, b), views, bufs,
                        update=("inner_product", (bufs[0], bufs[1])))
    return fa.grid.comm.sum(r)


def axpy(z: Lattice, a: Any, x: Any, y: Any) -> Lattice:
    """``z = a * x + y`` for a number ``a``, in one kernel; returns ``z``, which may be ``x`` or ``y``.

    The same as ``z @= a * x + y``: a solver's vector update without building and lowering an
    expression at every iteration, on backends that have the fused kernel (openmp).
    """
    if _fused_update(z, a, x, y, "axpy", False) is None:
        evaluate(a * nodes.as_expr(x) + y, z)
    return z


def axpy_norm2(z: Lattice, a: Any, x: Any, y: Any) -> float:
    """``z = a * x + y`` and ``norm2(z)``, as Grid's CG updates its residual: on backends with the
    fused kernel (openmp) one pass over the fields, z read back from registers, not memory."""
    n = _fused_update(z, a, x, y, "axpy_norm2", True)
    if n is None:
        evaluate(a * nodes.as_expr(x) + y, z)
        return norm2(z)
    return n


def axpy_xpay(x: Lattice, a: Any, p: Lattice, r: Lattice, b: Any) -> None:
    """``x = a * p + x``, then ``p = r + b * p`` with ``p`` as it was before the call in both: CG's
    updates of its solution and search direction, on backends with the fused kernel (openmp) one
    pass that reads ``p`` once.  ``x``, ``p`` and ``r`` are three different fields."""
    for name, f in (("x", x), ("p", p), ("r", r)):
        if not isinstance(f, Lattice):
            raise SiteTypeError(f"axpy_xpay: {name} must be a field, got {type(f).__name__}")
    if x is p or p is r or x is r:
        raise ConformabilityError("axpy_xpay: x, p and r must be three different fields")
    fields = (x, p, r)
    k = kept.kept(("axpy_xpay", id(x), id(p), id(r)), fields)
    if (k is not None and _is_number(a) and _is_number(b)
            and x._cb == p._cb == r._cb):   # the property's value, without its call
        a, b = complex(a), complex(b)
        if not (k.data and (a.imag or b.imag)):
            if kept.launch(k, (a.real, a.imag, b.real, b.imag)) is not None:
                return
            fn = k.backend.axpy_xpay
            if kept.run(k, lambda bufs: fn(bufs[0], a, bufs[1], bufs[2], b)):
                return
    fn = getattr(get_backend(), "axpy_xpay", None)
    g, st = x.grid, x.site_type
    if (fn is not None and _is_number(a) and _is_number(b) and p.grid is g and r.grid is g
            and p.site_type == st and r.site_type == st
            and x.checkerboard == p.checkerboard == r.checkerboard
            and x.precision == p.precision == r.precision
            and not (st.is_real and (complex(a).imag or complex(b).imag))):
        views = kernel_views((x, ViewMode.AcceleratorWrite), (p, ViewMode.AcceleratorWrite),
                             (r, ViewMode.AcceleratorRead))
        with views as bufs:
            fn(bufs[0], complex(a), bufs[1], bufs[2], complex(b))
        kept.keep_views(("axpy_xpay", id(x), id(p), id(r)), fields, views, bufs, st.is_real,
                        update=("axpy_xpay", bufs))
        return
    # both built (and so checked) before either runs; p is read by both and written by the second
    new_x, new_p = a * nodes.as_expr(p) + x, b * nodes.as_expr(p) + r
    evaluate(new_x, x)
    evaluate(new_p, p)


def _is_number(a):
    """A coefficient the fused kernels take: a Python or numpy number, not a bool."""
    return isinstance(a, (int, float, complex, np.number)) and not isinstance(a, (bool, np.bool_))


def _fused_update(z, a, x, y, name, norm):
    """The backend's fused ``axpy`` / ``axpy_norm2`` on three fields of one grid object,
    checkerboard, precision and site type (the float norm, or 0.0 for axpy); None where the
    expression path is to do it (another backend, expressions, other types: its checks give the
    errors)."""
    key = (name, id(z), id(x), id(y))
    k = kept.kept(key, (z, x, y))
    if k is not None and _is_number(a) and x._cb == z._cb == y._cb:  # checkerboards, without the property
        a = complex(a)
        is_real, ix, iy = k.data
        if not (a.imag and is_real):
            r = kept.launch(k, (a.real, a.imag))
            if r is not None:
                return z.grid.comm.sum(r[0]) if norm else 0.0
            fn, out = getattr(k.backend, name), []
            if kept.run(k, lambda bufs: out.append(fn(bufs[0], a, bufs[ix], bufs[iy]))):
                return z.grid.comm.sum(out[0]) if norm else 0.0
    if not isinstance(z, Lattice):
        raise SiteTypeError(f"{name} writes into a field, got {type(z).__name__}")
    fn = getattr(get_backend(), name, None)
    if fn is None or not isinstance(x, Lattice) or not isinstance(y, Lattice) or not _is_number(a):
        return None
    g, st = z.grid, z.site_type
    if not (x.grid is g and y.grid is g and x.site_type == st and y.site_type == st
            and x.checkerboard == z.checkerboard == y.checkerboard
            and x.precision == z.precision == y.precision):
        return None
    a = complex(a)
    if a.imag and st.is_real:
        return None
    # z written in place where it is also read; x and y read through z's view when they are z
    mode = ViewMode.AcceleratorWrite if (x is z or y is z) else ViewMode.AcceleratorWriteDiscard
    fields = [(z, mode)] + [(f, ViewMode.AcceleratorRead) for f in dict.fromkeys((x, y)) if f is not z]
    views = kernel_views(*fields)
    with views as bufs:
        at = {id(f): i for i, (f, _) in enumerate(fields)}
        r = fn(bufs[0], a, bufs[at[id(x)]], bufs[at[id(y)]])
    kept.keep_views(key, (z, x, y), views, bufs, (st.is_real, at[id(x)], at[id(y)]),
                    update=(name, (bufs[0], bufs[at[id(x)]], bufs[at[id(y)]])))
    return g.comm.sum(r) if norm else 0.0


def sum(x: Any) -> np.ndarray:  # noqa: A001
    """Sum over all sites: a numpy array of the site shape."""
    f = _field(x)
    with f._kernel_view(ViewMode.AcceleratorRead) as a:
        s = f.grid.comm.sum(get_backend().site_sum(a))
    s = np.asarray(s).reshape(f.site_shape)
    return s.real.copy() if f.is_real else s


def slice_sum(x: Any, dim: int) -> np.ndarray:
    """Sums over the sites of each slice x_dim = const: array (L_dim, *site_shape)."""
    f = _field(x)
    if f.grid.checkerboarded:
        raise ConformabilityError("slice_sum needs a full-grid field; combine the checkerboards first")
    if not 0 <= dim < f.grid.nd:
        raise ConformabilityError(f"slice_sum: dimension {dim} out of range 0..{f.grid.nd - 1}")
    table = _slice_table(f.grid, dim)
    with f._kernel_view(ViewMode.AcceleratorRead) as a:
        s = get_backend().slice_sum(a, table)
    s = np.asarray(s).reshape((table.shape[0],) + tuple(f.site_shape))
    g = f.grid
    if g.decomposed:
        whole = np.zeros((g.gdims[dim],) + s.shape[1:], dtype=s.dtype)
        whole[g.lstart[dim]:g.lstart[dim] + s.shape[0]] = s
        s = g.comm.sum(whole)
    return s.real.copy() if f.is_real else s


@functools.lru_cache(maxsize=64)
def _slice_table(grid, dim):
    """(L_dim, sites per slice) int32: the flat (outer site, lane) indices of each slice x_dim = t."""
    coord = grid.stored_coords()[..., dim].reshape(-1)
    order = np.argsort(coord, kind="stable").astype(np.int32)
    table = order.reshape(int(coord.max()) + 1, -1)
    table.setflags(write=False)
    return table


# ---- coordinates, precision, checkerboards ------------------------------------

def coordinate(grid: GridCartesian, mu: int, checkerboard: int | None = None,
               precision: str = "double") -> Lattice:
    """A Real field holding each site's global coordinate in dimension mu."""
    if not isinstance(grid, GridCartesian):
        raise GridError("coordinate needs a grid")
    if not 0 <= mu < grid.nd:
        raise GridError(f"coordinate: dimension {mu} out of range 0..{grid.nd - 1}")
    from ..tensors.sitetype import Real

    cb = (0 if checkerboard is None else checkerboard) if grid.checkerboarded else None
    out = Lattice(grid, Real, precision, checkerboard=cb)
    full = grid.full_coords(cb)[..., mu] + grid.lstart[mu]
    sites = np.zeros(grid.lshape + (1, 2))
    idx = tuple(grid.stored_coords().reshape(-1, grid.nd).T)
    sites[idx + (0, 0)] = full.reshape(-1)
    with out._kernel_view(ViewMode.CpuWrite) as b:
        grid.sites_to_buffer(sites, b)
    return out


def convert(x: Any, precision: str, grid=None) -> Lattice:
    """A copy of x in another precision ('single' or 'double').

    ``grid``: the copy on this grid, the same lattice on the same ranks in another SIMD layout (the
    lane count native to ``precision``, say); a red-black field goes to ``grid``'s red-black half.
    The sites move on the device, in one pass with the cast.
    """
    f = _field(x)
    dst = f.grid if grid is None else _same_lattice(f.grid, grid)
    out = Lattice(dst, f.site_type, precision, checkerboard=f.checkerboard)
    with (
        f._kernel_view(ViewMode.AcceleratorRead) as a,
        out._kernel_view(ViewMode.AcceleratorWriteDiscard) as b,
    ):
        if dst == f.grid:
            get_backend().relayout("cast", b, a)
        else:
            o, l = _layout_map(f.grid, dst, f.checkerboard)
            get_backend().relayout("gather", b, a, o, l)
    return out


def _same_lattice(src, grid):
    """``grid`` (its red-black half for a red-black ``src``) where it holds the sites ``src`` holds on
    this rank; ConformabilityError naming both where it does not."""
    if not isinstance(grid, GridCartesian):
        raise ConformabilityError(f"convert: grid must be a pygrid grid, not {type(grid).__name__}")
    dst = grid.red_black if src.checkerboarded and not grid.checkerboarded else grid
    if (dst.checkerboarded != src.checkerboarded or dst.gdims != src.gdims or dst.ldims != src.ldims
            or dst.lstart != src.lstart):
        raise ConformabilityError(f"convert: {grid} does not hold the sites of {src} on this rank")
    return dst


@functools.lru_cache(maxsize=64)
def _layout_map(src, dst, cb):
    """For each (outer site, lane) of ``dst``, where its site is in ``src``: two grids of one lattice
    (another SIMD layout, or a full grid and its red-black half for the checkerboards)."""
    c = dst.full_coords(cb)
    if src.checkerboarded:
        c = c.copy()
        c[..., src.cb_dim] //= 2  # the full coordinate to the red-black grid's stored one
    return src.outer_lane_of(c)


def pick_checkerboard(cb: int, full_field: Lattice) -> Lattice:
    """The sites of parity cb of a full-grid field, as a field on the red-black grid."""
    f = _field(full_field)
    if f.grid.checkerboarded:
        raise ConformabilityError("pick_checkerboard needs a full-grid field")
    if cb not in (0, 1):
        raise GridError(f"checkerboard must be 0 or 1, got {cb!r}")
    out = Lattice(f.grid.red_black, f.site_type, f.precision, checkerboard=cb)
    o, l = _layout_map(f.grid, f.grid.red_black, cb)
    with (
        f._kernel_view(ViewMode.AcceleratorRead) as a,
        out._kernel_view(ViewMode.AcceleratorWriteDiscard) as b,
    ):
        get_backend().relayout("gather", b, a, o, l)
    return out


def set_checkerboard(full_field: Lattice, half: Lattice) -> Lattice:
    """Write a red-black field into the sites of its parity of a full-grid field."""
    if not isinstance(full_field, Lattice) or full_field.grid.checkerboarded:
        raise ConformabilityError("set_checkerboard writes into a full-grid Lattice")
    h = _field(half)
    if h.grid != full_field.grid.red_black:
        raise ConformabilityError(f"set_checkerboard: {h} is not on the red-black grid of {full_field.grid}")
    if h.site_type.levels != full_field.site_type.levels or h.precision != full_field.precision:
        raise SiteTypeError(f"set_checkerboard: {h} does not match {full_field}")
    o, l = _layout_map(full_field.grid, h.grid, h.checkerboard)
    with (
        h._kernel_view(ViewMode.AcceleratorRead) as a,
        full_field._kernel_view(ViewMode.AcceleratorWrite) as b,
    ):
        get_backend().relayout("scatter", b, a, o, l)
    return full_field
