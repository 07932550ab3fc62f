"""Neighbour tables for a set of displacements, as Grid's CartesianStencil.

A stencil is built once per (grid, displacements, checkerboard) and read by
hand-written kernels (the Wilson hopping term) inside one loop over outer
sites.  It holds no field data.
"""
from __future__ import annotations

import numpy as np

from ..cartesian import GridCartesian
from ..cartesian.shift import shift_table
from ..errors import GridError
from .halo import halo_plan


def wilson_displacements(nd=4):
    """The 2*nd points of the Wilson stencil: +e_mu for mu = 0..nd-1, then -e_mu.

    Point p < nd is the forward neighbour x + mu (mu = p); point p >= nd is the
    backward neighbour x - mu (mu = p - nd), as in Grid's WilsonStencil order
    (Xp, Yp, Zp, Tp, Xm, Ym, Zm, Tm).
    """
    out = []
    for sign in (1, -1):
        for mu in range(nd):
            d = [0] * nd
            d[mu] = sign
            out.append(tuple(d))
    return out


def lane_xor(lanes):
    """Per lane map (row of ``lanes``), x with row[l] == l ^ x for all l if x is a power of two, else 0."""
    lanes = np.asarray(lanes).reshape(len(lanes), -1)
    ids = np.arange(lanes.shape[1])
    out = np.zeros(len(lanes), np.int64)
    for pm, row in enumerate(lanes):
        x = int(row[0])
        if pm and x and x & (x - 1) == 0 and np.array_equal(row, ids ^ x):
            out[pm] = x
    return out


class Stencil:
    """Neighbour tables of ``grid`` for a list of displacement vectors.

    ``Stencil(grid, displacements, checkerboard=None)``: ``displacements`` is a
    list of integer vectors of length ``grid.nd`` (e.g. ``wilson_displacements()``).
    On a red-black grid ``checkerboard`` is the checkerboard of the *source*
    field being read; the destination (output) checkerboard of point p is
    ``dest_checkerboards[p]`` (for the Wilson stencil, every point flips the parity).

    Tables, for point p and destination outer site o (single rank, periodic):

    ``neighbours[p, o]`` (int32, shape (npoints, osites))
        the outer site of the source field holding field(x + disp_p);
    ``permutes[p, o]`` (int32, shape (npoints, osites))
        index into ``lane_maps[p]`` (a list of int32 arrays (nmaps_p, nsimd));
        destination lane l reads source lane ``lane_maps[p][permutes[p, o]][l]``;
        index 0 is the identity, so a kernel reads unpermuted neighbours with unit stride;
    ``perm`` / ``lanes`` (the kernel form)
        ``perm[p, o]`` indexes one stacked table ``lanes`` (int32 (nmaps, nsimd))
        shared by all points, with row 0 the identity: what kernels take.
    ``lane_xor`` (int64, shape (nmaps,))
        per row of ``lanes``, x when the map is ``l -> l ^ x`` for a power of two x
        (the half swap of a 2-way split dimension, one shuffle instruction), else 0.

    Halos (MPI).  On a grid split over ranks, a neighbour on another rank is
    read from a halo array: ``neighbours[p, o] = osites + halo_offsets[p] + k``
    for the k-th face site of point p (a :class:`pygrid.stencil.halo.HaloPlan`,
    ``plan``), with the same lane permute rules; ``nhalo`` rows in all.
    ``interior`` lists the outer sites that read no halo row (computed while
    the halo messages travel), ``boundary`` the others; ``sites`` is every
    outer site.  On one rank ``nhalo == 0`` and every neighbour is local.
    """

    def __init__(self, grid, displacements, checkerboard=None):
        if not isinstance(grid, GridCartesian):
            raise GridError(f"Stencil needs a grid, got {type(grid).__name__}")
        if grid.checkerboarded:
            if checkerboard not in (0, 1):
                raise GridError(
                    "a stencil on a red-black grid needs checkerboard 0 or 1 (the source checkerboard)"
                )
        elif checkerboard is not None:
            raise GridError("checkerboard is only meaningful for a stencil on a red-black grid")
        disps = [tuple(int(v) for v in d) for d in displacements]
        if not disps:
            raise GridError("Stencil needs at least one displacement")
        self.grid = grid
        self.checkerboard = checkerboard
        self.displacements = disps
        self.npoints = len(disps)
        osites = grid.osites
        self.neighbours = np.empty((self.npoints, osites), dtype=np.int32)
        self.permutes = np.empty((self.npoints, osites), dtype=np.int32)
        self.perm = np.empty((self.npoints, osites), dtype=np.int32)
        self.lane_maps = []
        self.dest_checkerboards = []
        ident = np.arange(grid.nsimd, dtype=np.int32)
        stacked = [ident]
        self.plan = halo_plan(grid, checkerboard, tuple(disps)) if grid.decomposed else None
        for p, d in enumerate(disps):
            nbr, perm, lanes, dest_cb = shift_table(grid, checkerboard, d)
            self.neighbours[p] = nbr if self.plan is None else self.plan.neighbours[p]
            self.permutes[p] = perm
            self.lane_maps.append(lanes)
            self.dest_checkerboards.append(dest_cb)
            glob = np.zeros(len(lanes), dtype=np.int32)
            for k in range(1, len(lanes)):
                glob[k] = len(stacked)
                stacked.append(lanes[k])
            self.perm[p] = glob[perm]
        self.lanes = np.ascontiguousarray(np.array(stacked, dtype=np.int32))
        self.lane_xor = lane_xor(self.lanes)
        self.halo_offsets = np.array(
            [pt.offset for pt in self.plan.points] if self.plan else [0] * self.npoints, dtype=np.int64
        )
        self.nhalo = self.plan.nhalo if self.plan else 0
        self.sites = np.arange(osites, dtype=np.int32)
        self.interior = self.sites if self.plan is None else self.plan.interior
        self.boundary = self.sites[:0] if self.plan is None else self.plan.boundary
        for a in (self.neighbours, self.permutes, self.perm, self.lanes, self.lane_xor, self.sites):
            a.setflags(write=False)

    @property
    def dest_checkerboard(self):
        """The output checkerboard when every point gives the same one (else a GridError)."""
        s = set(self.dest_checkerboards)
        if len(s) != 1:
            raise GridError("the points of this stencil write to different checkerboards")
        return s.pop()

    def __repr__(self):
        cb = "" if self.checkerboard is None else f", cb={self.checkerboard}"
        return f"Stencil({self.grid}, {self.npoints} points{cb})"
