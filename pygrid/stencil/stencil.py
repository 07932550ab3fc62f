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

    Halo buffers (MPI, not implemented here).  With more than one rank in a
    dimension, a neighbour across the rank boundary lives in a halo buffer
    rather than in the local field.  The layout reserved for that is:
    ``halo_offsets[p]`` the first index of point p's face in one halo array of
    shape (nhalo, ncomp, 2, nsimd) (same site layout as a field buffer), and
    ``neighbours[p, o] = osites + halo_offsets[p] + k`` for the k-th face site,
    so a kernel reads ``psi[n]`` when ``n < osites`` and ``halo[n - osites]``
    otherwise, with the same lane permute rules.  A face exchange (i) gathers
    the boundary outer sites ``face_sites(p)`` of the source field (the sites
    whose neighbour for the *opposite* displacement leaves the rank), packs
    them (optionally spin-projected to half spinors, as Grid does), (ii) sends
    them to the neighbouring rank in direction -disp_p with
    ``communicator.sendrecv``, and (iii) writes the received faces into the
    halo array at ``halo_offsets[p]``; then the unchanged kernel runs.  On
    one rank ``nhalo == 0`` and every neighbour is local (periodic wrap), which
    is all this version builds.
    """

    def __init__(self, grid, displacements, checkerboard=None):
        if not isinstance(grid, GridCartesian):
            raise GridError(f"Stencil needs a grid, got {type(grid).__name__}")
        if grid.checkerboarded:
            if checkerboard not in (0, 1):
                raise GridError("a stencil on a red-black grid needs checkerboard 0 or 1 (the source checkerboard)")
        elif checkerboard is not None:
            raise GridError("checkerboard is only meaningful for a stencil on a red-black grid")
        if any(p > 1 for p in grid.mpi_layout):
            raise GridError("Stencil: halo exchange across ranks is not implemented yet (mpi_layout must be all 1)")
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
        for p, d in enumerate(disps):
            nbr, perm, lanes, dest_cb = shift_table(grid, checkerboard, d)
            self.neighbours[p] = nbr
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
        # halo layout (empty on one rank; see the class docstring)
        self.halo_offsets = np.zeros(self.npoints, dtype=np.int64)
        self.nhalo = 0
        for a in (self.neighbours, self.permutes, self.perm, self.lanes, self.lane_xor):
            a.setflags(write=False)

    @property
    def dest_checkerboard(self):
        """The output checkerboard when every point gives the same one (else a GridError)."""
        s = set(self.dest_checkerboards)
        if len(s) != 1:
            raise GridError("the points of this stencil write to different checkerboards")
        return s.pop()

    def face_sites(self, p):
        """Outer sites whose neighbour for point p lies in another virtual node (a lane permute).

        With MPI, the sites whose neighbour leaves the rank are a subset of these
        when the dimension is SIMD-split; the halo builder will compute them from
        the coordinates instead.
        """
        return np.nonzero(self.permutes[p] != 0)[0]

    def __repr__(self):
        cb = "" if self.checkerboard is None else f", cb={self.checkerboard}"
        return f"Stencil({self.grid}, {self.npoints} points{cb})"
