"""Evaluating an expression into a field: checks, lowering, views, launch."""
from __future__ import annotations

import numpy as np

from ..accelerator import get_backend, host
from ..accelerator.rows import all_rows, host_rows
from ..cartesian.shift import shift_table
from ..errors import ConformabilityError, SiteTypeError
from ..memory import ViewMode, Views
from ..stencil.halo import exchange_rows, halo_plan
from .lower import lower, lower_signed, signature
from .nodes import Leaf, as_expr


def check_assignable(e, out):
    if e.grid is None:
        raise SiteTypeError("an expression without any field cannot be evaluated on a lattice")
    if e.grid is not out.grid and e.grid != out.grid:
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
    if e.site_type.levels_key != out.site_type.levels_key:
        raise SiteTypeError(f"cannot assign a {e.site_type} expression to a {out.site_type} field")
    if out.site_type.is_real and not e.site_type.is_real:
        raise SiteTypeError(f"cannot assign a complex expression to the Real field {out}")


def evaluate(expr, out, backend=None, keep=True):
    """out = expr, as one kernel.  Checks everything before touching ``out``.  ``keep``: keep the
    evaluation and its launch for the next one of the same shape into ``out`` from the same fields;
    False where none will come (``out`` new, as in ``pg.eval``): keeping costs a third of such a call
    on small fields."""
    e = as_expr(expr)
    check_assignable(e, out)
    backend = backend or get_backend()
    sig, fields, coefs = signature(e, out.site_type.ncomp)
    # the shape's signature, not its IR, keys the kept evaluation: a statement run again finds it
    # without the IR's lookup and the launch's coefficient array
    key = (sig, id(out), *map(id, fields))
    kept = _kept.get(key)
    if kept is not None and kept.run(backend, out, fields, coefs):
        return out
    launch, known = lower_signed(e, sig, fields, coefs)
    fields = launch.fields
    grid = out.grid
    tables = []
    halos = []  # (shift index, slot, HaloPlan) of shifts that read other ranks
    for i, (slot, disp) in enumerate(launch.shifts):
        f = fields[slot]
        nbr, perm, lanes, _ = shift_table(grid, f.checkerboard, disp)
        if grid.decomposed:
            plan = halo_plan(grid, f.checkerboard, (tuple(disp),))
            if plan.nhalo:
                halos.append((i, slot, plan))
                nbr = plan.neighbours[0]
        tables.append((nbr, perm, lanes))
    aliased_slot = next((i for i, f in enumerate(fields) if f is out), None)
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
    views, buffers = _run(backend, launch, out, tables, alias, halos, keep)
    if keep and not halos and known:
        entry = KeptEvaluation(backend, launch, out, tables, alias, views, buffers)
        host.keep(_kept, key, entry, (out, *fields), MAX_KEPT)
    return out


#: evaluations kept for the next one of the same expression shape into the same field from the same
#: fields; a program evaluates a handful of expressions over and over on a handful of fields
MAX_KEPT = 256
_kept: dict = {}  # (shape signature, out, the fields read, by id) -> KeptEvaluation


class KeptEvaluation:
    """An expression evaluated before into ``out`` from the same fields (held weakly): the views
    its kernel opened (a ``memory.Views``, opened again each time), the buffers they gave, and
    the checked launch on them.  What it skips on the next evaluation (the shift tables, the alias
    analysis, the kernel's compile check, the views one by one) is Python that runs with the
    caches full of the fields the last kernel streamed: on fields of 8^4 sites as long as the
    kernel itself."""

    __slots__ = ("refs", "backend", "ir", "tables", "alias", "nsimd", "views", "buffers", "order",
                 "grid", "checkerboards", "bound", "gate", "__weakref__")

    def __init__(self, backend, launch, out, tables, alias, views, buffers):
        self.refs = ()  # out's and the fields' weak references (host.keep)
        self.backend, self.ir, self.tables, self.alias = backend, launch.ir, tables, alias
        self.nsimd, self.grid = out.grid.nsimd, out.grid
        self.views, self.buffers = views, tuple(buffers)
        # the kernel's inputs in slot order among the views' arrays (out's is the last)
        others = [f for f in launch.fields if f is not out]
        self.order = tuple(len(others) if f is out else others.index(f) for f in launch.fields)
        # the shift tables were made for the checkerboards the shifted fields had
        self.checkerboards = tuple((s, launch.fields[s].checkerboard) for s, _ in launch.shifts)
        # on a unified device, the backend's launch kept on these buffers (its kept_run), run with
        # the views' checks alone (a memory.KeptLaunch), as a kept Dirac call runs its launch
        self.bound = self.gate = None
        find, u = getattr(backend, "kept_run", None), views.unified
        if find is not None and u is not None:
            b = self.buffers
            bound = find(launch.ir, alias, b[-1], [b[k] for k in self.order], tables)
            run = None if bound is None else bound.prepared()
            if run is not None:
                self.bound, self.gate = bound, u[0].kept_launch(u[1], self.buffers, run)

    def run(self, backend, out, fields, coefs) -> bool:
        """Evaluate again into ``out`` from ``fields`` (the same objects, in slot order) with
        ``coefs`` (complex numbers, a sequence); False, with nothing done, where the evaluation must
        take the checked path."""
        refs = self.refs
        if refs[0]() is not out:
            return False
        for i in range(len(fields)):
            if refs[i + 1]() is not fields[i]:
                return False
        views = self.views
        # another thread's evaluation holds the kept views: this one opens its own
        if backend is not self.backend or views.is_open or out.grid is not self.grid:
            return False
        for slot, cb in self.checkerboards:
            if fields[slot].checkerboard != cb:
                return False
        gate = self.gate
        if gate is not None and self.bound.again(gate.run, coefs) is not None:
            return True
        order, c = self.order, np.asarray(coefs, dtype=np.complex128)
        return views.run_on(self.buffers, lambda a: backend.run(
            self.ir, a[-1], [a[k] for k in order], self.tables, c, self.nsimd, self.alias))


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


def _run(backend, launch, out, tables, alias, halos=(), keep=False):
    """The launch on the fields' kernel views, opened as one; returns the views and the buffers
    they gave (the fields read, then out)."""
    others = [f for f in launch.fields if f is not out]
    mode = ViewMode.AcceleratorWrite if alias else ViewMode.AcceleratorWriteDiscard
    views = Views([f._kernel_intent(ViewMode.AcceleratorRead) for f in others] + [out._kernel_intent(mode)])
    with views as arrays:
        o = arrays[-1]
        it = iter(arrays)
        inputs = [o if f is out else next(it) for f in launch.fields]
        if halos:
            inputs, tables = _with_halos(inputs, tables, halos)
        backend.run(launch.ir, o, inputs, tables, launch.coefs, out.grid.nsimd, alias, keep)
    return views, arrays
