"""SU(3) gauge fields: cold and hot starts, plaquette, link trace, projection, gauge transformations.

Conventions (docs/conventions.md): U is a LatticeGaugeField, U[x, mu] the link
from x to x + mu; the plaquette is normalised to 1 on the unit field:

    plaquette(U) = 1/(6 V) sum_x sum_{mu<nu} Re tr[U_mu(x) U_nu(x+mu) U_mu(x+nu)^dag U_nu(x)^dag] / 3
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..accelerator import get_backend
from ..errors import SiteTypeError
from ..lattice import (
    Lattice,
    LatticeGaugeField,
    adj,
    cshift,
    eval as _eval,
    peek_lorentz,
    poke_lorentz,
    sum as _sum,
    trace,
)
from ..memory import ViewMode
from ..tensors import sitetype as st
from .kernels_gauge import project_su3_kernel

if TYPE_CHECKING:
    from ..cartesian import GridCartesian
    from ..random import ParallelRNG

_GAUGE = st.LorentzColourMatrix()


def _check_gauge(U, name):
    if not isinstance(U, Lattice) or U.site_type.levels != _GAUGE.levels:
        raise SiteTypeError(f"{name} needs a LatticeGaugeField (pg.LatticeGaugeField(grid)), got {U!r}")
    nd = U.site_type.lorentz.n
    return nd


def unit_gauge(grid: GridCartesian, precision: str = "double") -> Lattice:
    """The cold start: U_mu(x) = 1 on every link."""
    U = LatticeGaugeField(grid, precision)
    a = np.zeros(grid.lshape + (4, 3, 3), dtype=U.dtype)
    a[..., :, :] = np.eye(3)
    return U.from_local_numpy(a)


def random_gauge(grid: GridCartesian, rng: ParallelRNG, precision: str = "double") -> Lattice:
    """The hot start: a Haar-random SU(3) matrix on every link (``rng`` a pg.ParallelRNG)."""
    U = LatticeGaugeField(grid, precision)
    rng.random_su3(U)
    return U


def _volume(U):
    g = U.grid
    return float(np.prod(g.gdims))


def plaquette(U: Lattice) -> float:
    """Average plaquette, Re tr / 3 over the 6 planes and all sites: 1 on the unit field."""
    nd = _check_gauge(U, "plaquette")
    total = 0.0
    links = [peek_lorentz(U, mu) for mu in range(nd)]
    for mu in range(nd):
        for nu in range(mu + 1, nd):
            e = trace(links[mu] * cshift(links[nu], mu, 1) * adj(cshift(links[mu], nu, 1)) * adj(links[nu]))
            total += float(np.real(_sum(e)))
    nplanes = nd * (nd - 1) // 2
    return total / (3.0 * nplanes * _volume(U))


def link_trace(U: Lattice) -> float:
    """Average Re tr U_mu(x) / 3 over all links: 1 on the unit field."""
    nd = _check_gauge(U, "link_trace")
    total = 0.0
    for mu in range(nd):
        total += float(np.real(_sum(trace(peek_lorentz(U, mu)))))
    return total / (3.0 * nd * _volume(U))


def project_su3_array(a):
    """Nearest-SU(3) projection of an array of 3x3 matrices (..., 3, 3) by Gram-Schmidt on the rows.

    Row 0 is normalised, row 1 orthogonalised to it and normalised, and row 2 is
    conj(row0 x row1), which makes the matrix unitary with determinant 1.
    """
    a = np.asarray(a)
    r0 = a[..., 0, :]
    r0 = r0 / np.sqrt(np.sum(np.abs(r0) ** 2, axis=-1, keepdims=True))
    r1 = a[..., 1, :]
    r1 = r1 - np.sum(np.conj(r0) * r1, axis=-1, keepdims=True) * r0
    r1 = r1 / np.sqrt(np.sum(np.abs(r1) ** 2, axis=-1, keepdims=True))
    r2 = np.conj(np.cross(r0, r1))
    return np.stack([r0, r1, r2], axis=-2).astype(a.dtype, copy=False)


def project_su3(U: Lattice) -> Lattice:
    """A new field with every colour matrix of U (gauge field or ColourMatrix field) reunitarised to SU(3)."""
    if not isinstance(U, Lattice) or not U.site_type.colour_matrix or U.site_type.nc != 3:
        raise SiteTypeError(f"project_su3 needs a field of 3x3 colour matrices, got {U!r}")
    out = U.new_like()
    nmat = U.site_type.ncomp // 9
    with (
        U._kernel_view(ViewMode.AcceleratorRead) as u,
        out._kernel_view(ViewMode.AcceleratorWriteDiscard) as o,
    ):
        get_backend().launch(
            project_su3_kernel(nmat), dict(out=o, links=u, n=o.shape[0]), o.shape[3], o.dtype
        )
    return out


def gauge_transform(U, g):
    """U^g_mu(x) = g(x) U_mu(x) g(x + mu)^dag, for g a LatticeColourMatrix; a new field."""
    nd = _check_gauge(U, "gauge_transform")
    if not isinstance(g, Lattice) or g.site_type.levels != st.ColourMatrix().levels:
        raise SiteTypeError(f"gauge_transform needs g as a LatticeColourMatrix, got {g!r}")
    out = U.new_like()
    for mu in range(nd):
        poke_lorentz(out, g * peek_lorentz(U, mu) * adj(cshift(g, mu, 1)), mu)
    return out


def gauge_transform_fermion(psi, g):
    """g(x) psi(x) (colour rotation of a fermion or any colour-vector field); a new field."""
    if not isinstance(g, Lattice) or g.site_type.levels != st.ColourMatrix().levels:
        raise SiteTypeError(f"gauge_transform_fermion needs g as a LatticeColourMatrix, got {g!r}")
    return _eval(g * psi)
