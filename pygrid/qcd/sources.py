"""Quark sources: point, wall, Z2 noise, and Gaussian (Wuppertal) smearing.

Each source is a ``LatticePropagator`` on a full 4D grid: the unit 12x12
spin-colour matrix times a complex profile eta(x), so that column (s, c) of the
source is the fermion source of spin s and colour c (see
:func:`pygrid.qcd.propagator`)::

    point_source(grid, x0)              eta(x) = delta(x, x0)
    wall_source(grid, t0, p)            eta(x) = delta(x_t, t0) exp(+2 pi i p.x / L)
    z2_source(grid, rng, t0=None)       eta(x) = (+-1 +- i)/sqrt(2) (on timeslice t0, or everywhere)
    gaussian_smear(U, src, width, n)    (1 + width^2 / (4 n) Laplacian_3d)^n src

Momenta ``p`` are integers: the momentum is 2 pi p_i / L_i in spatial direction
i.  The profiles are made on the host from global coordinates, so a source is
the same on any number of ranks and any SIMD layout.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..cartesian import GridCartesian
from ..errors import ConformabilityError, GridError, SiteTypeError
from ..lattice import Lattice, LatticeComplex, adj, cshift, peek_lorentz
from ..tensors import sitetype as st
from ..tensors.constant import ConstTensor

__all__ = ["point_source", "wall_source", "z2_source", "gaussian_smear", "momentum_phase",
           "local_coordinates"]

_PROP = st.SpinColourMatrix()
_UNIT = ConstTensor(_PROP, np.eye(12).reshape(4, 3, 4, 3).transpose(0, 2, 1, 3), "1")


def _check_grid(grid, name):
    if not isinstance(grid, GridCartesian) or grid.checkerboarded or grid.nd != 4:
        raise GridError(f"{name} needs a full 4D grid (pg.GridCartesian([x, y, z, t])), got {grid!r}")


def _check_t(grid, t, name, t_dir=3):
    L = grid.gdims[t_dir]
    if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or not 0 <= t < L:
        raise GridError(f"{name}: timeslice {t!r} is not an integer in 0..{L - 1}")
    return int(t)


def local_coordinates(grid: GridCartesian) -> np.ndarray:
    """The global coordinates of this rank's sites: an int array (*lshape, nd), indexed like
    ``to_local_numpy()``."""
    axes = [np.arange(lo, lo + n) for lo, n in zip(grid.lstart, grid.lshape)]
    return np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1)


def _momentum(grid, p, name):
    """p as nd integers (spatial momenta: the time component 0 when 3 are given)."""
    try:
        vals = [int(v) for v in p]
    except (TypeError, ValueError):
        raise GridError(f"{name}: momentum must be a sequence of integers, got {p!r}") from None
    if any(v != w for v, w in zip(vals, p)):
        raise GridError(f"{name}: momentum must be integers (units of 2 pi / L), got {p!r}")
    if len(vals) == grid.nd - 1:
        vals.append(0)
    if len(vals) != grid.nd:
        raise GridError(f"{name}: momentum needs {grid.nd - 1} (spatial) or {grid.nd} components, got {p!r}")
    return vals


def _phase_array(grid, p):
    """exp(2 pi i p.x / L) on this rank's sites (complex128, shaped lshape)."""
    x = local_coordinates(grid)
    arg = sum(p[mu] * x[..., mu] / grid.gdims[mu] for mu in range(grid.nd) if p[mu])
    return np.exp(2j * math.pi * np.asarray(arg, dtype=float))


def momentum_phase(grid: GridCartesian, p: Sequence[int], precision: str = "double") -> Lattice:
    """A LatticeComplex holding exp(2 pi i sum_mu p_mu x_mu / L_mu) (``p`` integers; 3 components are
    spatial, with p_t = 0)."""
    if not isinstance(grid, GridCartesian) or grid.checkerboarded:
        raise GridError(f"momentum_phase needs a full grid, got {grid!r}")
    p = _momentum(grid, p, "momentum_phase")
    return LatticeComplex(grid, precision).from_local_numpy(_phase_array(grid, p))


def _profile_source(grid, eta, precision):
    """The propagator source eta(x) * 1 from a local complex profile."""
    prof = LatticeComplex(grid, precision).from_local_numpy(eta)
    return Lattice(grid, _PROP, precision).assign(prof * _UNIT)


def point_source(grid: GridCartesian, x0: Sequence[int], precision: str = "double") -> Lattice:
    """The unit spin-colour matrix at site ``x0`` (global coordinates), zero elsewhere."""
    _check_grid(grid, "point_source")
    try:
        x0 = tuple(int(v) for v in x0)
    except (TypeError, ValueError):
        raise GridError(f"point_source: the site must be {grid.nd} integers, got {x0!r}") from None
    if len(x0) != grid.nd or any(not 0 <= c < L for c, L in zip(x0, grid.gdims)):
        raise GridError(f"point_source: site {x0} is not on the lattice {'.'.join(map(str, grid.gdims))}")
    eta = np.zeros(grid.lshape, dtype=np.complex128)
    local = tuple(c - lo for c, lo in zip(x0, grid.lstart))
    if all(0 <= c < n for c, n in zip(local, grid.lshape)):
        eta[local] = 1.0
    return _profile_source(grid, eta, precision)


def wall_source(grid: GridCartesian, t0: int, momentum: Sequence[int] = (0, 0, 0),
                precision: str = "double") -> Lattice:
    """The unit matrix times exp(2 pi i p.x / L) on every site of timeslice ``t0``."""
    _check_grid(grid, "wall_source")
    t0 = _check_t(grid, t0, "wall_source")
    p = _momentum(grid, momentum, "wall_source")
    eta = _phase_array(grid, p) * (local_coordinates(grid)[..., 3] == t0)
    return _profile_source(grid, eta, precision)


def z2_source(grid: GridCartesian, rng, t0: int | None = None, precision: str = "double") -> Lattice:
    """Complex Z2 noise, (+-1 +- i)/sqrt(2) per site from ``rng`` (a pg.ParallelRNG), times the unit
    matrix: on timeslice ``t0`` only, or on every site (``t0=None``)."""
    from ..random import ParallelRNG

    _check_grid(grid, "z2_source")
    if not isinstance(rng, ParallelRNG):
        raise GridError(f"z2_source needs a pg.ParallelRNG, got {rng!r}")
    u = rng.uniform(LatticeComplex(grid)).to_local_numpy()
    eta = (np.where(u.real < 0.5, -1.0, 1.0) + 1j * np.where(u.imag < 0.5, -1.0, 1.0)) / math.sqrt(2)
    if t0 is not None:
        eta = eta * (local_coordinates(grid)[..., 3] == _check_t(grid, t0, "z2_source"))
    return _profile_source(grid, eta, precision)


def gaussian_smear(U: Lattice, src: Lattice, width: float, iterations: int, t_dir: int = 3,
                   out: Lattice | None = None) -> Lattice:
    """Gaussian (Wuppertal) smearing in the directions other than ``t_dir``, Grid's and Chroma's
    convention::

        chi <- chi + width^2 / (4 N) * sum_{i != t_dir} [U_i(x) chi(x+i) + U_i(x-i)^dag chi(x-i) - 2 chi(x)]

    applied ``N = iterations`` times (one fused kernel each); on the free field this is about
    exp(-width^2 p^2 / 4).  ``src`` is any field with a colour index acted on from the left
    (fermion, propagator, colour vector); ``U`` a LatticeGaugeField on the same grid.  Returns a new
    field, or writes ``out``.
    """
    if not isinstance(U, Lattice) or U.site_type.levels != st.LorentzColourMatrix().levels:
        raise SiteTypeError(f"gaussian_smear needs a LatticeGaugeField, got {U!r}")
    if not isinstance(src, Lattice) or src.site_type.nc != 3 or src.site_type.lorentz.shape:
        raise SiteTypeError(f"gaussian_smear needs a field with a colour index, got {src!r}")
    if src.grid != U.grid:
        raise ConformabilityError(f"gaussian_smear: {src} is not on the gauge field's grid {U.grid}")
    if src.precision != U.precision:
        raise ConformabilityError(
            f"gaussian_smear: a {src.precision} source with a {U.precision} gauge field")
    if isinstance(iterations, bool) or not isinstance(iterations, (int, np.integer)) or iterations < 0:
        raise GridError(f"gaussian_smear: iterations must be a non-negative integer, got {iterations!r}")
    width = float(width)
    if not math.isfinite(width) or width < 0:
        raise GridError(f"gaussian_smear: width must be finite and >= 0, got {width!r}")
    nd = U.grid.nd
    if not 0 <= t_dir < nd:
        raise GridError(f"gaussian_smear: t_dir {t_dir} out of range 0..{nd - 1}")
    dirs = [mu for mu in range(nd) if mu != t_dir]
    chi = src.copy()
    if iterations:
        coeff = width * width / (4.0 * iterations)
        links = [peek_lorentz(U, mu) for mu in dirs]
        nxt = chi.new_like()
        for _ in range(iterations):
            lap = -2.0 * len(dirs) * chi
            for mu, u in zip(dirs, links):
                lap = lap + u * cshift(chi, mu, 1) + cshift(adj(u) * chi, mu, -1)
            nxt.assign(chi + coeff * lap)
            chi, nxt = nxt, chi
    return chi if out is None else out.assign(chi)
