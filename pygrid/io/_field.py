"""Moving gauge fields between pygrid's buffer layout and file order, one time slice at a time.

File order (NERSC, ILDG, SciDAC): sites lexicographic with x fastest, then y,
z, t; per site mu = 0..3, each 3x3 matrix row-major, each complex number as
(real, imaginary).  One time slice is therefore the array
``[z, y, x, mu, a, b, re/im]``.

On a grid split over ranks each rank moves its own block: the slices below
are this rank's local time slices, ``(lz, ly, lx, ...)``, with local
coordinates (global = local + ``grid.lstart``).

pygrid's buffer is ``real[osites][ncomp][2][nsimd]`` with outer sites
lexicographic in the reduced dimensions (x fastest) and local coordinate
``x_d = o_d + rdims[d] * l_d``.  A time slice t is the outer slice
``o_t = t % rdims[3]`` in lane slice ``l_t = t // rdims[3]``: a strided view of
the buffer, so a slice is read or written in place, without a second copy of
the field.
"""
from __future__ import annotations

import numpy as np

from ..cartesian import GridCartesian
from ..communicator import world
from ..errors import GridError
from ..lattice import Lattice, LatticeGaugeField
from ..memory import ViewMode
from ..tensors import sitetype as st
from ._parallel import on_root
from .errors import FormatError, dims_text

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


def reader_target(what, path, grid, into, precision, read_meta):
    """The grid and precision a gauge reader fills, and the file's metadata read on the root rank.

    ``read_meta()`` parses the file and returns a tuple whose first item has ``dims``; it runs
    on rank 0 of the grid's communicator (the job's, when the grid comes from the header)
    and its result, or its error, reaches every rank.  Returns ``(grid, precision, meta)``.
    """
    if into is not None:
        check_gauge_field(into, f"{what}(into=...)")
        if grid is not None and grid != into.grid:
            raise FormatError(f"{what}: pass either grid or into, not both with different grids")
        grid, precision = into.grid, into.precision
    precision = precision or "double"
    meta = on_root(world() if grid is None else grid.comm, read_meta)
    dims = meta[0].dims
    if grid is None:
        try:
            grid = GridCartesian(list(dims), precision=precision)
        except GridError as e:  # e.g. a lattice the job's ranks cannot divide
            raise GridError(f"{path}: the file's {dims_text(dims)} lattice: {e}") from None
    check_grid(grid, what)
    if tuple(grid.gdims) != dims:
        raise FormatError(f"{path}: the file holds a {dims_text(dims)} lattice, the grid is "
                          f"{'x'.join(map(str, grid.gdims))} (dimensions do not match)")
    return grid, precision, meta


def new_gauge_field(grid, precision):
    return LatticeGaugeField(grid, precision)


def _slice_view(buf, grid, t):
    """A (z, y, x, ncomp, 2) view of local time slice t of a (osites, ncomp, 2, nsimd) buffer."""
    r = grid.rdims
    s = grid.simd_layout
    b = buf.reshape((r[3], r[2], r[1], r[0], NCOMP, 2, s[3], s[2], s[1], s[0]))
    sl = b[t % r[3], :, :, :, :, :, t // r[3]]  # (r_z, r_y, r_x, ncomp, 2, s_z, s_y, s_x)
    return sl.transpose(5, 0, 6, 1, 7, 2, 3, 4)  # (s_z, r_z, s_y, r_y, s_x, r_x, ncomp, 2)


class SliceReader:
    """Open on a field for reading: ``get(t)`` -> real array (z, y, x, 4, 3, 3, 2) of local time slice t."""

    def __init__(self, U):
        self.U = U
        self._view = U.view(ViewMode.CpuRead)

    def __enter__(self):
        self.buf = self._view.__enter__()
        return self

    def __exit__(self, *exc):
        return self._view.__exit__(*exc)

    def get(self, t):
        X, Y, Z, _ = self.U.grid.ldims
        v = _slice_view(self.buf, self.U.grid, t)
        return np.ascontiguousarray(v).reshape((Z, Y, X, 4, 3, 3, 2))


class SliceWriter:
    """Open on a (fresh) field for writing: ``put(t, a)`` writes local time slice t from a real array
    (z, y, x, 4, 3, 3, 2)."""

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
    """(plaquette, link trace) of U, normalised to 1 on the unit field, as pygrid.qcd.gauge defines them.

    Collective.  The per-site values come from the same kernels as
    pygrid.qcd.plaquette / link_trace, but they are summed exactly
    (_parallel.exact_sum) instead of in floating point: the result is then the
    same to the last bit for any decomposition over ranks or SIMD lanes, so the
    digits a writer prints, and so the file, do not depend on how the job was laid out.
    """
    # pygrid.lattice beside io in docs/design.md's layer table; imported here, where it is needed
    from ..lattice import adj, cshift, eval as evaluate, peek_lorentz, trace
    from ._parallel import exact_sum

    g = U.grid
    links = [peek_lorentz(U, mu) for mu in range(4)]

    def site_values(expr):
        return evaluate(expr).to_local_numpy().real

    # generators: one plane's site values in memory at a time
    plaq = (
        site_values(
            trace(links[mu] * cshift(links[nu], mu, 1) * adj(cshift(links[mu], nu, 1)) * adj(links[nu]))
        )
        for mu in range(4)
        for nu in range(mu + 1, 4)
    )
    ltr = (site_values(trace(links[mu])) for mu in range(4))
    volume = float(np.prod(g.gdims))
    return exact_sum(g.comm, plaq) / (3.0 * 6 * volume), exact_sum(g.comm, ltr) / (3.0 * 4 * volume)
