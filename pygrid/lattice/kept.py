"""The views of a solver's vector update on the same fields again.

CG updates the same three fields every iteration (``pg.axpy_norm2(r, -a, Ap, r)``,
``pg.axpy_xpay(x, a, p, r, b)``).  The first call checks that the fields conform, opens their
kernel views as one (:func:`pygrid.lattice.lattice.kernel_views`) and runs the backend's fused
kernel; the call is kept (a :class:`KeptViews` in a table keyed by the update and its fields,
held weakly), and the next one on the same fields, with the same backend, reopens the same
views through :meth:`pygrid.memory.Views.run_on`, their counts and checks inline, and runs the
backend's kernel where they hand out the buffers of the first call.  Only views of a unified
device (openmp, numpy) are kept: there a buffer is the field's own memory, where elsewhere a
kept buffer would hold device memory the cache evicted.  A field's grid, site type and precision
do not change; its checkerboard can, so the caller checks it again.  The reductions
(``pg.norm2``, ``pg.inner_product``) keep theirs the same way.  At 8^4 in single a fused update
spent 14-16 us a call on the general path and 9-11 on the kept one.  Where the backend kept the
launch of the call (its ``kept_update``: openmp's reductions keep theirs, bound to the buffers,
with the partial sums), the kept call runs that launch with the views' checks alone (a
``memory.KeptLaunch``, as a Dirac call does), its coefficients written where the kernel reads
them: at 8^4 in single that took about 9 us of a CG iteration's 72 outside its kernels.  A Dirac
operator's kept call (:class:`pygrid.qcd.hop.HopCall`) is a KeptViews with a compiled launch
bound to its buffers.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..accelerator import backends as _backends, get_backend
from ..accelerator.host import keep
from ..memory import Views

#: kept updates: a solver uses a handful of fields; more means fields come and go
MAX_KEPT = 64

_kept: dict = {}


class KeptViews:
    """The views of a call run before on ``fields`` (held weakly), the buffers they gave, the
    backend it ran on, and the caller's ``data`` (what it needs to run again, such as which
    buffer is which field).  With ``launch``, a compiled launch bound to those buffers (a
    backend's ``launch.prepared``, which runs no Python), ``kept_launch`` runs it with the views'
    checks alone on a unified device (a ``memory.KeptLaunch``; None elsewhere).  ``bound`` is the
    backend's kept launch of an update or reduction (its ``kept_update``), whose ``prepared()``
    is then the launch."""

    __slots__ = ("refs", "views", "buffers", "backend", "data", "bound", "kept_launch", "__weakref__")

    def __init__(self, views: Views, buffers, data=None, launch=None, bound=None) -> None:
        self.refs = ()  # the fields' weak references (host.keep)
        self.views, self.buffers, self.data, self.bound = views, tuple(buffers), data, bound
        self.backend = get_backend()
        if bound is not None:
            launch = bound.prepared()
        u = None if launch is None else views.unified
        self.kept_launch = None if u is None else u[0].kept_launch(u[1], self.buffers, launch)

    def holds(self, fields: tuple) -> bool:
        """Whether these are the views of ``fields`` (the same objects, in order) on the current
        backend."""
        refs = self.refs
        for i in range(len(refs)):
            if refs[i]() is not fields[i]:
                return False
        return self.backend is get_backend()


def kept(key, fields: tuple) -> KeptViews | None:
    """The views kept under ``key`` for ``fields`` (the same objects, in order) on the current
    backend; None where there are none, or another thread's call holds them."""
    k = _kept.get(key)
    if k is None:
        return None
    # KeptViews.holds and get_backend() inline: a CG iteration at 8^4 runs three of these, each
    # Python function about 0.3 us with the caches full of the fields the kernels streamed
    refs = k.refs
    for i in range(len(refs)):
        if refs[i]() is not fields[i]:
            return None
    if k.backend is not _backends._current or k.views.is_open:
        return None
    return k


def launch(k: KeptViews, coefs: tuple = ()) -> list | None:
    """The backend's launch kept with the views (``bound``) run again, ``coefs`` (reals) written
    where its kernel reads its coefficients: the totals of its partial sums.  None, with nothing
    done, where there is none, the views would not open inline (:func:`run` then opens them, and
    raises what the general path raises) or another thread's call holds the launch."""
    gate = k.kept_launch
    return None if gate is None else k.bound.again(gate.run, coefs)


def run(k: KeptViews, fn: Callable[[tuple], Any]) -> bool:
    """``fn(buffers)`` on the kept views; False, with nothing done, where they give other buffers
    now (a device cache moved a field)."""
    return k.views.run_on(k.buffers, fn)


def keep_views(key, fields: tuple, views: Views, buffers, data=None, update=None) -> None:
    """Keep ``views`` (opened by the caller, which gave ``buffers``) for the next update on
    ``fields`` under ``key``, on a unified device: there the buffers are the fields' own memory,
    where a device cache would see memory it evicted held here.  ``update``: the backend call the
    caller made, ``(name, buffers in its order)``, whose launch the backend may have kept (its
    ``kept_update``) for :func:`launch` to run."""
    if views.unified is None:
        return
    bound = None
    if update is not None:
        find = getattr(get_backend(), "kept_update", None)
        if find is not None:
            bound = find(update[0], *update[1])
    keep(_kept, key, KeptViews(views, buffers, data, bound=bound), fields, MAX_KEPT)
