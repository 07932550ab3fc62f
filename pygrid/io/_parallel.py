"""Gauge IO on a lattice split over ranks: shared outcomes and decomposition-independent sums.

The readers and writers are collective: every rank of the grid's communicator
calls them.  A step that rank 0 performs alone (parsing a header, writing the
file) broadcasts its outcome, and a step that every rank performs on its own
block (reading it) allgathers its outcome, so that a failure raises on every
rank rather than leaving the others waiting in the next collective.  On one
rank these helpers simply call the function.
"""
from __future__ import annotations

import pickle

import numpy as np

from ..errors import PyGridError


def _portable(exc):
    """``exc`` if it survives pickling (the way it travels to the other ranks), else a
    PyGridError with its type and message."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return PyGridError(f"{type(exc).__name__}: {exc}")


def on_root(comm, fn):
    """``fn()`` run by rank 0 alone; every rank returns its result or raises its exception."""
    if comm.size == 1:
        return fn()
    outcome, own = None, None
    if comm.rank == 0:
        try:
            outcome = (True, fn())
        except BaseException as e:  # a Ctrl-C on rank 0 too: the others must not wait in bcast
            own, outcome = e, (False, _portable(e))
    ok, value = comm.bcast(outcome, root=0)
    if own is not None:
        raise own  # rank 0 keeps its traceback
    if not ok:
        raise value
    return value


def on_every_rank(comm, fn):
    """``fn()`` run by every rank on its own part; if it fails anywhere, every rank raises.

    A rank whose own call failed raises its exception; the others raise that of
    the lowest failing rank.
    """
    if comm.size == 1:
        return fn()
    result, own = None, None
    try:
        result = fn()
    except BaseException as e:  # KeyboardInterrupt included: the others must not wait
        own = e
    errors = comm.allgather(None if own is None else _portable(own))
    if own is not None:
        raise own
    for e in errors:
        if e is not None:
            raise e
    return result


def root_outcome(comm, own, result):
    """After rank 0 alone did a step: every rank returns ``result`` (rank 0's) or raises ``own``
    (the exception rank 0 caught, None if it succeeded).

    Only rank 0's arguments count.  The broadcast also orders the ranks: none
    returns before rank 0 has finished the step (e.g. renamed the file into place).
    """
    if comm.size == 1:
        if own is not None:
            raise own
        return result
    outcome = None
    if comm.rank == 0:
        outcome = (True, result) if own is None else (False, _portable(own))
    ok, value = comm.bcast(outcome, root=0)
    if comm.rank == 0 and own is not None:
        raise own
    if not ok:
        raise value
    return value


# ---- sums that do not depend on the decomposition --------------------------------

_HALF = 26  # mantissas split into two halves so that int64 sums of up to 2**36 values cannot overflow


def _exact_local(values):
    """The exact sum of the finite float64 ``values`` as (N, E): N * 2**E with Python int N.

    A sum of floats depends on the order of its terms; an exact sum does not,
    so summing the parts of every rank exactly gives the same number for any
    decomposition, SIMD layout or order of the sites.
    """
    v = values[values != 0]
    if not v.size:
        return 0, 0
    m, e = np.frexp(v)
    mant = np.ldexp(m, 53).astype(np.int64)  # exact: |m| < 1, so |mant| < 2**53
    e = e.astype(np.int16) - np.int16(
        53
    )  # v = mant * 2**e; int16 (exponents lie in -1127..971) sorts by radix
    order = np.argsort(e, kind="stable")
    e, mant = e[order], mant[order]
    exps, starts = np.unique(e, return_index=True)
    hi = np.add.reduceat(mant >> _HALF, starts)
    lo = np.add.reduceat(mant & ((1 << _HALF) - 1), starts)
    low = int(exps[0])
    total = 0
    for x, h, l in zip(exps.tolist(), hi.tolist(), lo.tolist()):
        total += ((h << _HALF) + l) << (x - low)
    return total, low


def exact_sum(comm, arrays):
    """The sum over every rank of all elements of ``arrays`` (float arrays), correctly rounded
    to a float: the same on every rank and for any decomposition of the sites.

    A non-finite element makes the result the float sum of the non-finite ones (nan or inf).
    """
    parts = []
    bad = 0.0
    for a in arrays:
        v = np.asarray(a, dtype=np.float64).reshape(-1)
        finite = np.isfinite(v)
        if not finite.all():
            bad += float(np.sum(v[~finite]))
            v = v[finite]
        parts.append(_exact_local(v))
    mine = (bad, _combine(parts))
    every = comm.allgather(mine) if comm.size > 1 else [mine]
    if any(b != 0.0 for b, _ in every):
        return float(sum(b for b, _ in every))
    n, e = _combine([p for _, p in every])
    # Python's int / int is correctly rounded
    return float(n << e) if e >= 0 else n / (1 << -e)


def _combine(parts):
    """Sum of (N, E) pairs as one (N, E)."""
    parts = [(n, e) for n, e in parts if n]
    if not parts:
        return 0, 0
    low = min(e for _, e in parts)
    return sum(n << (e - low) for n, e in parts), low
