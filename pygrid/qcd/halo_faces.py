"""The face rows a rank packs for the Wilson stencil's halo, shared by both hopping kernels.

A face row is the source site ``rows[k]`` of a point with a face
(:class:`pygrid.stencil.halo.PointHalo`), in the order of the points; it is sent
projected to the half spinor of the point's direction ``mus[k]`` with the hop's
projector sign ``signs[dag][k]``.  The packed array holds those rows, one view
of it per point (what :meth:`pygrid.stencil.halo.HaloPlan.start` sends), and the
halo the rows received from the neighbours.
"""
from __future__ import annotations

import numpy as np


def face_tables(plan, dtype):
    """(rows, mus, signs) of ``plan``'s face rows: int32 source sites and directions, and per
    ``dag`` the projector signs in ``dtype``, (forward, backward) = (-1, +1) for Dhop and (+1, -1)
    for its adjoint."""
    faces = [(p, pt) for p, pt in enumerate(plan.points) if pt.nface]
    rows = np.ascontiguousarray(np.concatenate([pt.rows for _, pt in faces]), np.int32)
    mus = np.concatenate([np.full(pt.nface, p % 4, np.int32) for p, pt in faces])
    fwd = np.concatenate([np.full(pt.nface, p < 4) for p, pt in faces])
    signs = {dag: np.where(fwd, s, -s).astype(dtype) for dag, s in ((False, -1.0), (True, 1.0))}
    return rows, mus, signs


def packed_arrays(plan, row_shape, dtype, empty=np.empty):
    """(packed, per point, halo): the host arrays of the face rows, each row ``row_shape``: every
    face row in the order of :func:`face_tables`, its view for each point (empty for a point
    without a face), and the ``(nhalo,) + row_shape`` halo; both allocated by ``empty(shape,
    dtype)`` (a backend's ``host_array`` where they cross to its device)."""
    nrows = sum(pt.nface for pt in plan.points)
    packed = empty((nrows,) + tuple(row_shape), dtype)
    views, at = [packed[:0]] * len(plan.points), 0
    for p, pt in enumerate(plan.points):
        if pt.nface:
            views[p] = packed[at:at + pt.nface]
            at += pt.nface
    return packed, views, empty((plan.nhalo,) + tuple(row_shape), dtype)
