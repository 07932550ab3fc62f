"""Moving gauge fields between pygrid's buffer layout and file order, one time slice at a time.

File order (NERSC, ILDG, SciDAC): sites lexicographic with x fastest, then y,
z, t; per site mu = 0..3, each 3x3 matrix row-major, each complex number as
(real, imaginary).  One time slice is therefore the array
``[z, y, x, mu, a, b, re/im]``.

pygrid's buffer is ``real[osites][ncomp][2][nsimd]`` with outer sites
lexicographic in the reduced dimensions (x fastest) and local coordinate
``x_d = o_d + rdims[d] * l_d``.  A time slice t is the outer slice
``o_t = t % rdims[3]`` in lane slice ``l_t = t // rdims[3]``: a strided view of
the buffer, so a slice is read or written in place, without a second copy of
the field.
"""
from __future__ import annotations

import numpy as np

from ..lattice import Lattice, LatticeGaugeField
from ..memory import ViewMode
from ..tensors import sitetype as st
from .errors import FormatError

_GAUGE_LEVELS = st.LorentzColourMatrix().levels
NCOMP = 4 * 3 * 3


def check_gauge_field(U, what):
    from ..errors import SiteTypeError

    if not isinstance(U, Lattice) or U.site_type.levels != _GAUGE_LEVELS or U.site_type.ncomp != NCOMP:
        raise SiteTypeError(f"{what} needs a LatticeGaugeField (4 SU(3) links per site), got {U!r}")
    check_grid(U.grid, what)


def check_grid(grid, what):
    if grid.checkerboarded or grid.nd != 4:
        raise FormatError(f"{what}: gauge configuration files live on a full 4D grid, got {grid}")
    if tuple(grid.ldims) != tuple(grid.gdims):
        raise FormatError(f"{what}: this version reads and writes configurations on one rank only "
                          f"(grid {grid} is split over mpi_layout {grid.mpi_layout})")


def new_gauge_field(grid, precision):
    return LatticeGaugeField(grid, precision)


def _slice_view(buf, grid, t):
    """A (z, y, x, ncomp, 2) view of time slice t of a (osites, ncomp, 2, nsimd) buffer."""
    r = grid.rdims
    s = grid.simd_layout
    b = buf.reshape((r[3], r[2], r[1], r[0], NCOMP, 2, s[3], s[2], s[1], s[0]))
    sl = b[t % r[3], :, :, :, :, :, t // r[3]]  # (r_z, r_y, r_x, ncomp, 2, s_z, s_y, s_x)
    return sl.transpose(5, 0, 6, 1, 7, 2, 3, 4)  # (s_z, r_z, s_y, r_y, s_x, r_x, ncomp, 2)


def slice_shape(grid):
    X, Y, Z, _ = grid.gdims
    return (Z, Y, X, NCOMP, 2)


class SliceReader:
    """Open on a field for reading: ``get(t)`` -> real array (z, y, x, 4, 3, 3, 2) of time slice t."""

    def __init__(self, U):
        self.U = U
        self._view = U.view(ViewMode.CpuRead)

    def __enter__(self):
        self.buf = self._view.__enter__()
        return self

    def __exit__(self, *exc):
        return self._view.__exit__(*exc)

    def get(self, t):
        X, Y, Z, _ = self.U.grid.gdims
        v = _slice_view(self.buf, self.U.grid, t)
        return np.ascontiguousarray(v).reshape((Z, Y, X, 4, 3, 3, 2))


class SliceWriter:
    """Open on a (fresh) field for writing: ``put(t, a)`` with a real array (z, y, x, 4, 3, 3, 2)."""

    def __init__(self, U):
        self.U = U
        self._view = U.view(ViewMode.CpuWrite)

    def __enter__(self):
        self.buf = self._view.__enter__()
        return self

    def __exit__(self, *exc):
        return self._view.__exit__(*exc)

    def put(self, t, a):
        g = self.U.grid
        r, s = g.rdims, g.simd_layout
        v = _slice_view(self.buf, g, t)
        v[...] = a.reshape((s[2], r[2], s[1], r[1], s[0], r[0], NCOMP, 2))


def copy_field(src, dst):
    """dst's buffer := src's (same grid and precision)."""
    with src.view(ViewMode.CpuRead) as a, dst.view(ViewMode.CpuWrite) as b:
        b[...] = a


# ---- per-site conversions ------------------------------------------------------

def reconstruct_third_row(two):
    """Real array (..., 2, 3, 2) of rows 0, 1 -> real array (..., 3, 3, 2), row 2 = conj(row0 x row1)."""
    c = two[..., 0] + 1j * two[..., 1]
    r2 = np.conj(np.cross(c[..., 0, :], c[..., 1, :]))
    out = np.empty(two.shape[:-3] + (3, 3, 2), dtype=two.dtype)
    out[..., :2, :, :] = two
    out[..., 2, :, 0] = r2.real
    out[..., 2, :, 1] = r2.imag
    return out


def gauge_statistics(U):
    """(plaquette, link trace) of U, normalised to 1 on the unit field (pygrid.qcd.gauge)."""
    # pygrid.qcd sits beside io in docs/design.md's layer table; imported here, where it is needed
    from ..qcd.gauge import link_trace, plaquette

    return float(plaquette(U)), float(link_trace(U))
