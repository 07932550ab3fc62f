"""Grids: global and local dimensions, processor grid, SIMD layout, checkerboards.

Sites are numbered lexicographically with dimension 0 fastest, as in Grid: the
outer site index o = sum_d o_d * prod_{d'<d} rdims[d'], and likewise the lane
index over simd_layout.  A local coordinate x_d = o_d + rdims[d] * l_d.
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from .. import communicator
from ..errors import GridError, PerformanceWarning
from .simd import check_layout, default_nsimd, default_simd_layout

if TYPE_CHECKING:
    from ..communicator.base import Communicator


MAX_EXTENT = 2 ** 31 - 1
MAX_SITES = 2 ** 62


def _dims(name, value, nd=None):
    try:
        dims = tuple(int(v) for v in value)
    except (TypeError, ValueError):
        raise GridError(f"{name} must be a sequence of positive integers, got {value!r}") from None
    if any(d != v for d, v in zip(dims, value)):
        raise GridError(f"{name} must hold integers, got {tuple(value)}")
    if nd is not None and len(dims) != nd:
        raise GridError(f"{name} {dims} has {len(dims)} entries; expected {nd}")
    if not dims or any(d <= 0 for d in dims):
        raise GridError(f"{name} {dims}: every dimension must be a positive integer")
    if any(d > MAX_EXTENT for d in dims) or math.prod(dims) > MAX_SITES:
        raise GridError(f"{name} {dims}: at most {MAX_EXTENT} per dimension and {MAX_SITES} in all "
                        f"(site indices are 64-bit integers)")
    return dims


def _strides(extents):
    s, out = 1, []
    for e in extents:
        out.append(s)
        s *= e
    return np.array(out, dtype=np.int64)


class GridCartesian:
    """A Cartesian lattice, its decomposition over ranks and its SIMD layout.

    ``fdims`` are the global dimensions, ``(x, y, z, t)`` for 4D; without them, those of
    ``--grid`` (Grid's ``GridDefaultLatt()``).  ``simd_layout``
    splits each local dimension into virtual nodes (lanes); by default it is
    chosen from ``precision`` and the host's SIMD width.
    """

    checkerboarded = False

    def __init__(self, fdims: Sequence[int] | None = None, simd_layout: Sequence[int] | None = None,
                 mpi_layout: Sequence[int] | None = None, precision: str = "double", nsimd: int | None = None,
                 comm: Communicator | None = None) -> None:
        if fdims is None:
            fdims = self._configured_grid()
        fdims = _dims("grid dimensions", fdims)
        nd = len(fdims)
        self.comm = communicator.world() if comm is None else comm
        if mpi_layout is None:
            mpi_layout = self._configured_mpi(nd)
        if mpi_layout is None:
            mpi_layout = communicator.default_mpi_layout(fdims, self.comm.size)
        mpi_layout = _dims("mpi_layout", mpi_layout, nd)
        for d, (f, p) in enumerate(zip(fdims, mpi_layout)):
            if f % p:
                raise GridError(
                    f"the lattice {'.'.join(map(str, fdims))} cannot be split by --mpi "
                    f"{'.'.join(map(str, mpi_layout))}: extent {f} in dimension {d} is not divisible by {p}"
                )
        if precision not in ("double", "single"):
            raise GridError(f"precision must be 'double' or 'single', got {precision!r}")
        self.nd = nd
        self.gdims = fdims
        self.mpi_layout = mpi_layout
        self.processor_coor = communicator.check_ranks(mpi_layout, self.comm)
        self.ldims = tuple(f // p for f, p in zip(fdims, mpi_layout))
        self.lstart = tuple(c * l for c, l in zip(self.processor_coor, self.ldims))
        if simd_layout is None:
            want = nsimd or default_nsimd(precision)
            skip = tuple(self._no_simd_dims())
            simd_layout = default_simd_layout(self.ldims, want, skip=skip)
            if math.prod(simd_layout) < want:
                warnings.warn(
                    f"the local lattice {'.'.join(map(str, self.ldims))} can hold only Nsimd "
                    f"{math.prod(simd_layout)} of the {want} SIMD lanes of {precision} precision "
                    f"here, so kernels use part of the vector width; extents with more factors of "
                    f"two (at least 4 in a dimension for each factor) fill them",
                    PerformanceWarning, stacklevel=2)
            # lanes in a rank-split dimension make halo rows half remote (a merge, and twice the bytes sent):
            # keep them out of those dimensions when the others can hold as many lanes
            split = tuple(d for d, p in enumerate(mpi_layout) if p > 1)
            if split:
                alt = default_simd_layout(self.ldims, want, skip=skip + split)
                if math.prod(alt) == math.prod(simd_layout):
                    simd_layout = alt
        else:
            simd_layout = tuple(simd_layout)
        self._set_layout(self.ldims, simd_layout)
        self.parity_dims = tuple(range(nd))
        self._rb = None

    @staticmethod
    def _configured_grid():
        # Grid's GridDefaultLatt(): the lattice of --grid when the program names none
        from ..config import current

        grid = current().grid
        if grid is None:
            raise GridError("GridCartesian() without dimensions takes them from --grid X.Y.Z.T "
                            "(pg.init(sys.argv[1:]) or pg.init(grid=...)), and none was given")
        return grid

    @staticmethod
    def _configured_mpi(nd):
        from ..config import current

        mpi = current().mpi
        return mpi if mpi is not None and len(mpi) == nd else None

    def neighbour_rank(self, mu: int, disp: int = 1) -> int:
        """The rank holding the block ``disp`` blocks away from this one in dimension ``mu`` (periodic)."""
        if not 0 <= mu < self.nd:
            raise GridError(f"neighbour_rank: dimension {mu} out of range 0..{self.nd - 1}")
        c = list(self.processor_coor)
        c[mu] += int(disp)
        return communicator.rank_of(c, self.mpi_layout)

    @property
    def decomposed(self) -> bool:
        """Whether some dimension is split over ranks (neighbours may live on another rank)."""
        return any(p > 1 for p in self.mpi_layout)

    def _no_simd_dims(self):
        return ()

    def _set_layout(self, sdims, simd_layout):
        check_layout(sdims, simd_layout)
        self.sdims = tuple(sdims)  # the stored (possibly checkerboard-halved) local dims
        self.simd_layout = tuple(int(s) for s in simd_layout)
        self.nsimd = math.prod(self.simd_layout)
        self.rdims = tuple(l // s for l, s in zip(sdims, self.simd_layout))
        self.osites = math.prod(self.rdims)
        self.lsites = math.prod(sdims)  # stored sites on this rank
        self.gsites = math.prod(self.gdims)

    # identity -------------------------------------------------------------
    def key(self):
        return (type(self).__name__, self.gdims, self.mpi_layout, self.simd_layout, id(self.comm))

    def __eq__(self, other):
        return self is other or (isinstance(other, GridCartesian) and self.key() == other.key())

    def __hash__(self):
        return hash(self.key())

    def __repr__(self):
        dims = ".".join(map(str, self.gdims))
        simd = ".".join(map(str, self.simd_layout))
        mpi = f", mpi={'.'.join(map(str, self.mpi_layout))}" if self.decomposed else ""
        return f"{type(self).__name__}({dims}{mpi}, simd={simd}, Nsimd={self.nsimd}, osites={self.osites})"

    @property
    def lshape(self) -> tuple[int, ...]:
        """Shape of this rank's part of a field, ``to_local_numpy()``, without the site indices."""
        return self.sdims

    @property
    def gshape(self) -> tuple[int, ...]:
        """Shape of ``to_numpy()`` (the whole lattice) without the site indices."""
        return tuple(s * p for s, p in zip(self.sdims, self.mpi_layout))

    def block_of(self, rank: int) -> tuple[slice, ...]:
        """Index (a tuple of slices) of ``rank``'s part in a ``gshape`` array."""
        c = communicator.processor_coor(rank, self.mpi_layout)
        return tuple(slice(ci * s, (ci + 1) * s) for ci, s in zip(c, self.sdims))

    @property
    def red_black(self) -> GridRedBlackCartesian:
        """The checkerboarded half grid of this grid (built once)."""
        if self._rb is None:
            self._rb = GridRedBlackCartesian(self)
        return self._rb

    # coordinates ----------------------------------------------------------
    def outer_lane_of(self, coor):
        """(outer site, lane) of a stored local coordinate (array (..., nd) or tuple)."""
        c = np.asarray(coor, dtype=np.int64)
        r = np.array(self.rdims)
        o = c % r
        lane = c // r
        return o @ _strides(self.rdims), lane @ _strides(self.simd_layout)

    def stored_coords(self):
        """Stored local coordinate of every (outer site, lane): int array (osites, nsimd, nd)."""
        o = np.arange(self.osites)
        lane = np.arange(self.nsimd)
        oc = (o[:, None] // _strides(self.rdims)) % np.array(self.rdims)
        lc = (lane[:, None] // _strides(self.simd_layout)) % np.array(self.simd_layout)
        return oc[:, None, :] + np.array(self.rdims) * lc[None, :, :]

    def full_coords(self, cb=None):
        """Full local coordinate of every (outer site, lane) for fields of checkerboard cb."""
        return self.stored_coords()

    def global_site_indices(self, checkerboard=None):
        """Global lexicographic index (dimension 0 fastest) of each local site, shaped lshape."""
        full = self.full_coords(checkerboard) + np.array(self.lstart)
        g = full @ _strides(self.gdims)
        out = np.empty(self.lshape, dtype=np.int64)
        idx = tuple(self.stored_coords().reshape(-1, self.nd).T)
        out[idx] = g.reshape(-1)
        return out

    # layout conversion ----------------------------------------------------
    def buffer_to_sites(self, buf):
        """(osites, ncomp, planes, nsimd) buffer -> (*lshape, ncomp, planes) array (a copy)."""
        nd = self.nd
        ncomp, planes = buf.shape[1], buf.shape[2]
        b = buf.reshape(self.rdims[::-1] + (ncomp, planes) + self.simd_layout[::-1])
        # axes now: r_{nd-1}..r_0, ncomp, planes, s_{nd-1}..s_0
        order = []
        for d in range(nd):
            order += [nd + 2 + (nd - 1 - d), nd - 1 - d]  # (l_d slow, o_d fast) for x_d = o_d + r_d l_d
        order += [nd, nd + 1]
        return b.transpose(order).reshape(self.lshape + (ncomp, planes))

    def sites_to_buffer(self, arr, out):
        """Inverse of buffer_to_sites, writing into out (osites, ncomp, planes, nsimd)."""
        nd = self.nd
        ncomp, planes = out.shape[1], out.shape[2]
        shape = []
        for d in range(nd):
            shape += [self.simd_layout[d], self.rdims[d]]
        a = arr.reshape(tuple(shape) + (ncomp, planes))
        # axes: (s_0, r_0, s_1, r_1, ...), ncomp, planes -> r_{nd-1}..r_0, ncomp, planes, s_{nd-1}..s_0
        order = (
            [2 * d + 1 for d in reversed(range(nd))]
            + [2 * nd, 2 * nd + 1]
            + [2 * d for d in reversed(range(nd))]
        )
        out[...] = a.transpose(order).reshape(out.shape)
        return out


class GridCartesian5D(GridCartesian):
    """A 5D grid for domain-wall fermions: dimensions (s, x, y, z, t), s fastest in memory.

    The fifth dimension is dimension 0 and is never split over lanes or ranks;
    the checkerboard is the 4D one, (x + y + z + t) % 2.
    """

    def __init__(self, grid4: GridCartesian, Ls: int) -> None:
        if not isinstance(grid4, GridCartesian) or grid4.checkerboarded or grid4.nd != 4:
            raise GridError("GridCartesian5D needs a full (not checkerboarded) 4D GridCartesian")
        if not isinstance(Ls, (int, np.integer)) or Ls < 1:
            raise GridError(f"Ls must be a positive integer, got {Ls!r}")
        self.grid4 = grid4
        self.Ls = int(Ls)
        super().__init__(
            (int(Ls),) + grid4.gdims,
            simd_layout=(1,) + grid4.simd_layout,
            mpi_layout=(1,) + grid4.mpi_layout,
            comm=grid4.comm,
        )
        self.parity_dims = (1, 2, 3, 4)


class GridRedBlackCartesian(GridCartesian):
    """Half of a grid: the sites of one parity (sum of the 4D coordinates mod 2).

    The first parity dimension (x, or x of a 5D grid) is halved; a field on
    this grid carries a checkerboard, 0 (even) or 1 (odd).  Stored site
    (xh, y, z, t) of checkerboard cb is the full site x = 2 xh + (cb + y + z + t) % 2.
    """

    checkerboarded = True

    def __init__(self, grid: GridCartesian) -> None:
        if not isinstance(grid, GridCartesian) or grid.checkerboarded:
            raise GridError("GridRedBlackCartesian needs a full GridCartesian")
        self.full = grid
        self.nd = grid.nd
        self.gdims = grid.gdims
        self.mpi_layout = grid.mpi_layout
        self.comm = grid.comm
        self.processor_coor = grid.processor_coor
        self.ldims = grid.ldims
        self.lstart = grid.lstart
        self.parity_dims = grid.parity_dims
        self.cb_dim = self.parity_dims[0]
        if any(self.ldims[d] % 2 for d in self.parity_dims):
            raise GridError(
                f"red-black checkerboarding needs even local dimensions, got {self.ldims}"
            )
        if any(self.lstart[d] % 2 for d in self.parity_dims):
            raise GridError("red-black checkerboarding needs even local origins on every rank")
        sdims = list(self.ldims)
        sdims[self.cb_dim] //= 2
        simd = grid.simd_layout
        if sdims[self.cb_dim] % simd[self.cb_dim]:
            raise GridError(
                f"the checkerboarded dimension {self.cb_dim} of half extent {sdims[self.cb_dim]} "
                f"is not divisible by simd_layout[{self.cb_dim}] = {simd[self.cb_dim]}"
            )
        self._set_layout(sdims, simd)
        for d in self.parity_dims[1:]:
            if self.rdims[d] % 2:
                raise GridError(
                    f"red-black grids need an even number of outer sites in dimension {d} "
                    f"(local extent {self.ldims[d]} / simd {simd[d]} = {self.rdims[d]}); "
                    "choose another simd_layout"
                )
        self._rb = self

    def key(self):
        return ("rb",) + self.full.key()

    def full_coords(self, cb=None):
        if cb not in (0, 1):
            raise GridError(f"a red-black field needs checkerboard 0 or 1, got {cb!r}")
        c = self.stored_coords().copy()
        par = np.zeros(c.shape[:-1], dtype=np.int64)
        for d in self.parity_dims[1:]:
            par += c[..., d] + self.lstart[d]
        par += cb + self.lstart[self.cb_dim]
        c[..., self.cb_dim] = 2 * c[..., self.cb_dim] + par % 2
        return c
