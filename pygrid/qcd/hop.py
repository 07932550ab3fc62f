"""The hopping term on fields: a Dirac operator's kernel views and launch, and a call on the same
fields again.

A solver applies its operator thousands of times to the same few fields.  The first call on a
set of fields opens their kernel views as one (:func:`pygrid.lattice.lattice.kernel_views`),
and :func:`pygrid.qcd.dslash.dhop` checks their buffers and binds its launch to them.  The call
is kept (a :class:`HopCall`, the :class:`pygrid.lattice.kept.KeptViews` of the solvers' updates
with a compiled launch, in a dict the operator owns); the next one on the same fields opens the
same views and, when the MemoryManager hands out the same buffers, runs the bound launch directly
(on a unified device a ``memory.KeptLaunch``: the views' checks alone, and those only after a
step that can change them, and the launch prepared once, ``launch.prepared``).  Each layer
skipped is Python that runs with the core's caches full of the fields the kernel has just
streamed: a Wilson Dhop at 8^4 in single spends about 3.8 us around its 38-55 us kernel, 0.9 of
them the launch itself (``benchmarks/bench_call_trace.py``), and each Python function it runs costs
about 0.3 us there, so an operator looks its kept call up itself under a small key (:func:`again`).
"""
from __future__ import annotations

from .. import config as _config
from ..accelerator import backends as _backends
from ..accelerator.host import keep
from ..config import current
from ..lattice.kept import KeptViews
from ..lattice.lattice import kernel_views
from ..memory import ViewMode
from . import dslash
from .dslash import bound, dhop

_READ, _WRITE = ViewMode.AcceleratorRead, ViewMode.AcceleratorWrite
_DISCARD = ViewMode.AcceleratorWriteDiscard
#: kept calls per operator: a solver uses a handful of fields; more means fields come and go
MAX_CALLS = 64


class HopCall(KeptViews):
    """A hop run before on the same fields: a ``lattice.kept.KeptViews`` whose launch is bound to
    the buffers those views gave (a backend's ``launch.prepared``, compiled code that runs no
    Python), made under the configuration and table of bound launches it checks again."""

    __slots__ = ("config", "table", "guard")

    def __init__(self, views, buffers, launch, guard=None):
        super().__init__(views, buffers, lambda _: launch(), launch)
        self.config = current()
        # the launch is one of dslash's bound launches: replacing dslash's table of them (to forget
        # every bound launch) retires the kept calls as well
        self.table = dslash._BOUND
        # on a lattice split over ranks the launch reads the links' halo of its making: ``guard()``
        # says whether the links are still those
        self.guard = guard

    def run(self, fields) -> bool:
        """Run on ``fields`` (the same objects, in order); False, with nothing done, where the call
        must take the checked path: other fields, backend or configuration, or other buffers."""
        # KeptViews.holds, get_backend() and current() inline: each Python function a call runs costs
        # about 0.3 us with the caches full of the fields the kernel streamed (a Wilson Dhop at 8^4
        # runs in 40 us); the two module globals are what those functions return once set
        refs = self.refs
        for i in range(len(refs)):
            if refs[i]() is not fields[i]:
                return False
        if (self.backend is not _backends._current or self.config is not _config._current
                or self.table is not dslash._BOUND):
            return False
        guard = self.guard
        if guard is not None and not guard():
            return False
        kept = self.kept_launch
        if kept is not None:
            done = kept.run()
            if done is not None:
                return done
        views = self.views
        # another thread's call on the same fields holds the kept views: this one opens its own
        if views.is_open:
            return False
        return views.run_on(self.buffers, self.data)


class HopPair:
    """Two kept calls run in turn on the same fields again, the second reading the field the first
    writes: a Schur operator's application (the hop into its scratch field ``t``, then the hop that
    ends it into ``out``, ``WilsonFermion._mpc_finish``), without the operator's layers between them
    (a Wilson Schur application at 8^4 in single spent 6.4 us of Python around its two 25 us
    launches, 5.3 of them in the two hops' calls).  ``first`` runs on ``(psi, *links1, t)``,
    ``second`` on ``(t, *links2, out, psi)``; held by the caller under ``psi`` and ``out``
    (``accelerator.host.keep``), whose identities the kept calls check."""

    __slots__ = ("refs", "first", "second", "links1", "links2", "t", "cb", "__weakref__")

    def __init__(self, first, second, links1, links2, t, cb):
        self.refs = ()
        self.first, self.second, self.links1, self.links2 = first, second, links1, links2
        self.t, self.cb = t, cb

    def run(self, psi, out) -> bool:
        """Both calls on ``psi`` (checkerboard ``cb``) into ``out`` (already on ``cb``); False where
        either must take the checked path (the first may have run then: it writes ``t`` alone)."""
        cb, t = self.cb, self.t
        if psi._cb != cb or out._cb != cb or t._cb != 1 - cb:   # the checkerboards, without the property
            return False
        l1, l2 = self.links1, self.links2
        return self.first.run((psi, l1[0], l1[1], t)) and self.second.run((t, l2[0], l2[1], out, psi))


def again(calls, key, fields) -> bool:
    """The call kept under ``key`` (one :func:`hop` made with that ``key``) run on ``fields`` (its
    src, uf, ub, tgt and, with a diagonal term, diag); False, with nothing done, where there is none
    or it must take the checked path."""
    call = calls.get(key)
    return call is not None and call.run(fields)


def hop(calls, src, uf, ub, tgt, stencil, Ls=1, scale=-0.5, alpha=0.0, diag=None, dag=False, halo_of=None,
        kept_only=False, diag_s=None, inv_s=None, mul_s=None, key=None, links_c=None):
    """``tgt = scale * hop(src) + alpha * diag`` on fields; returns tgt (``alpha * A diag`` with
    ``diag_s``, A's bidiagonal structure in s; A^-1 applied after the hop with ``inv_s``; the hop
    multiplied in s by B first with ``mul_s``: see :func:`pygrid.qcd.dslash.dhop`).

    :func:`pygrid.qcd.dslash.dhop` on the fields' kernel views: ``uf`` and ``ub`` the link fields
    at the output and source sites (one field on a full grid), ``stencil`` the Wilson stencil of
    the source checkerboard, ``diag`` a field, src or tgt (read only when alpha is not 0), tgt
    not aliasing src.  ``halo_of`` (a WilsonFermion) keeps the links' halo on a lattice split over
    ranks (its ``link_halo`` and ``link_halo_guard``).  ``calls`` is the operator's dict of kept
    calls.  ``kept_only``: run a kept call or nothing, returning None then (for an operator's
    first check: a kept call's fields passed its checks when it was made, and a field's grid, type
    and precision do not change).  ``key``: the
    call's key in ``calls``, from a caller whose key, with ``id(src)`` and ``id(tgt)`` in it, fixes
    every other argument (the ids of nine objects took 0.4 us of a Dirac call); by default one built
    from them all.  ``links_c``: ``uf`` and ``ub`` compressed (see :func:`pygrid.qcd.dslash.dhop`;
    a caller that changes them clears ``calls``).
    """
    if diag is None or alpha == 0.0:
        diag, alpha = None, 0.0
    if key is None:
        key = (id(src), id(uf), id(ub), id(tgt), id(diag), id(stencil), Ls, scale, alpha, dag, id(diag_s),
               id(inv_s), id(mul_s))
    fields = (src, uf, ub, tgt) if diag is None else (src, uf, ub, tgt, diag)
    call = calls.get(key)
    if call is not None and call.run(fields):
        return tgt
    if kept_only:
        return None
    views = [(src, _READ), (uf, _READ)]
    if ub is not uf:
        views.append((ub, _READ))
    views.append((tgt, _WRITE if diag is tgt else _DISCARD))
    if diag is not None and diag is not src and diag is not tgt:
        views.append((diag, _READ))
    kept = kernel_views(*views)
    with kept as arrays:
        p, u_f = arrays[0], arrays[1]
        u_b = u_f if ub is uf else arrays[2]
        o = arrays[2 if ub is uf else 3]
        d = None if diag is None else p if diag is src else o if diag is tgt else arrays[-1]
        lh = halo_of.link_halo(stencil, ub, u_b) if halo_of is not None else None
        dhop(o, p, u_f, u_b, stencil, Ls, scale, alpha, d, dag, link_halo=lh, diag_s=diag_s, inv_s=inv_s,
             mul_s=mul_s, links_c=links_c)
        launch = bound(o, p, u_f, u_b, stencil, Ls, scale, alpha, d, dag, diag_s, inv_s, mul_s, links_c, lh)
    if launch is not None:
        guard = None if lh is None else halo_of.link_halo_guard(stencil, ub)
        keep(calls, key, HopCall(kept, arrays, launch, guard), fields, MAX_CALLS)
    return tgt
