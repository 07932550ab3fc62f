"""Evaluating an expression into a field: checks, lowering, views, launch."""
from __future__ import annotations

import numpy as np

from ..accelerator import get_backend
from ..accelerator.rows import all_rows, host_rows
from ..cartesian.shift import shift_table
from ..errors import ConformabilityError, SiteTypeError
from ..memory import ViewMode
from ..stencil.halo import exchange_rows, halo_plan
from .lower import lower, lower_cached
from .nodes import Leaf, as_expr


def check_assignable(e, out):
    if e.grid is None:
        raise SiteTypeError("an expression without any field cannot be evaluated on a lattice")
    if e.grid != out.grid:
        raise ConformabilityError(f"cannot assign an expression on {e.grid} to a field on {out.grid}")
    if e.checkerboard != out.checkerboard:
        names = {None: "full grid", 0: "even", 1: "odd"}
        raise ConformabilityError(
            f"cannot assign an {names[e.checkerboard]} expression to an {names[out.checkerboard]} field; "
            "set the destination's checkerboard first"
        )
    if e.precision != out.precision:
        raise ConformabilityError(
            f"cannot assign a {e.precision} precision expression to a {out.precision} field; use pg.convert"
        )
    if e.site_type.levels != out.site_type.levels:
        raise SiteTypeError(f"cannot assign a {e.site_type} expression to a {out.site_type} field")
    if out.site_type.is_real and not e.site_type.is_real:
        raise SiteTypeError(f"cannot assign a complex expression to the Real field {out}")


def evaluate(expr, out, backend=None):
    """out = expr, as one kernel.  Checks everything before touching ``out``."""
    e = as_expr(expr)
    check_assignable(e, out)
    launch = lower_cached(e, out.site_type.ncomp)
    backend = backend or get_backend()
    grid = out.grid
    tables = []
    halos = []  # (shift index, slot, HaloPlan) of shifts that read other ranks
    for i, (slot, disp) in enumerate(launch.shifts):
        f = launch.fields[slot]
        nbr, perm, lanes, _ = shift_table(grid, f.checkerboard, disp)
        if grid.decomposed:
            plan = halo_plan(grid, f.checkerboard, (tuple(disp),))
            if plan.nhalo:
                halos.append((i, slot, plan))
                nbr = plan.neighbours[0]
        tables.append((nbr, perm, lanes))
    aliased_slot = next((i for i, f in enumerate(launch.fields) if f is out), None)
    shifted_alias = aliased_slot is not None and any(s == aliased_slot for s, _ in launch.shifts)
    alias = aliased_slot is not None and not shifted_alias
    # every kernel is compiled before the first view opens: a failed or interrupted compile
    # (seconds, when cold) must leave ``out`` and the device cache untouched
    osites = out.grid.osites
    backend.prepare(launch.ir, tables, launch.coefs, grid.nsimd, alias, out.real_dtype, osites)
    if shifted_alias:
        # the kernel would read neighbours it already overwrote: evaluate aside, then copy
        copy = lower(Leaf(out), out.site_type.ncomp)
        backend.prepare(copy.ir, [], copy.coefs, grid.nsimd, False, out.real_dtype, osites)
        tmp = out.new_like()
        _run(backend, launch, tmp, tables, False, halos)
        _run(backend, lower(Leaf(tmp), out.site_type.ncomp), out, [], False)
        return out
    _run(backend, launch, out, tables, alias, halos)
    return out


def _with_halos(inputs, tables, halos):
    """Inputs of shifted slots extended by their halo rows (received from the neighbouring ranks),
    and tables pointing into them: the kernel reads ``osites + k`` as it reads any other row."""
    inputs, tables = list(inputs), list(tables)
    backend = get_backend()
    for slot in dict.fromkeys(s for _, s, _ in halos):
        base = inputs[slot]
        if not isinstance(base, np.ndarray):
            # a device buffer is extended on the host and goes back with the launch: the whole
            # shifted field crosses twice (the Dirac operators move only their faces)
            base = host_rows(backend, base, all_rows(base.shape[0]))
        parts, extra = [base], 0
        for i, s, plan in halos:
            if s != slot:
                continue
            parts.append(exchange_rows(plan, base))
            if extra:
                nbr = plan.neighbours[0].astype(np.int32)
                nbr[nbr >= base.shape[0]] += extra
                tables[i] = (nbr,) + tuple(tables[i][1:])
            extra += plan.nhalo
        inputs[slot] = np.concatenate(parts)
    return inputs, tables


def _run(backend, launch, out, tables, alias, halos=()):
    views = [f._kernel_view(ViewMode.AcceleratorRead) for f in launch.fields if f is not out]
    arrays = {}
    try:
        for v in views:
            arrays[id(v)] = v.__enter__()
        mode = ViewMode.AcceleratorWrite if alias else ViewMode.AcceleratorWriteDiscard
        with out._kernel_view(mode) as o:
            inputs = []
            it = iter(views)
            for f in launch.fields:
                inputs.append(o if f is out else arrays[id(next(it))])
            if halos:
                inputs, tables = _with_halos(inputs, tables, halos)
            backend.run(launch.ir, o, inputs, tables, launch.coefs, out.grid.nsimd, alias)
    finally:
        for v in views:
            if id(v) in arrays:
                v.__exit__(None, None, None)
