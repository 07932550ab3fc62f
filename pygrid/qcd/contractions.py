"""Meson two-point functions: contractions, momentum projection, effective masses.

For quark propagators ``S1``, ``S2`` from the same source point x0 (``S(x) = S(x, x0)``,
spin-colour matrices), the connected meson contraction with the interpolating
operators ``psibar_2 Gamma psi_1`` is, by gamma5-hermiticity
``S(x0, x) = g5 S(x, x0)^dag g5``::

    meson(S1, S2, G_snk, G_src)(x) = tr[ G_snk S1(x) G_src^dag g5 S2(x)^dag g5 ]

(Grid's Hadrons convention, overall fermion-loop sign left out: the pion,
``G_snk = G_src = g5``, is ``sum |S|^2 > 0``).  The correlator at momentum p
sums the sites of each timeslice with the sink phase exp(-2 pi i p.(x - x0) / L)::

    C(t) = sum_{x, x_t = t0 + t} exp(-2 pi i p.(x - x0)/L) meson(x)
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import ConformabilityError, GridError, SiteTypeError
from ..lattice import Lattice, adj, slice_sum, trace
from ..tensors import sitetype as st
from ..tensors.constant import ConstTensor, Gamma
from .sources import _momentum, momentum_phase

__all__ = ["meson", "correlator", "effective_mass"]

_PROP = st.SpinColourMatrix()


def _adjoint(g: ConstTensor) -> ConstTensor:
    a = np.asarray(g.array())
    return ConstTensor(g.site_type, a.conj().T, None if g.name is None else f"adj({g.name})")


def _check_gamma(g, name):
    if not isinstance(g, ConstTensor) or g.site_type.levels != st.SpinMatrix().levels:
        raise SiteTypeError(f"meson: {name} must be a constant spin matrix such as pg.Gamma.Five or "
                            f"pg.Gamma.X * pg.Gamma.Five, got {g!r}")


def meson(S1: Lattice, S2: Lattice, gamma_snk: ConstTensor = Gamma.Five,
          gamma_src: ConstTensor = Gamma.Five):
    """The connected meson contraction tr[G_snk S1 G_src^dag g5 S2^dag g5] per site (a lazy
    LatticeComplex expression: ``pg.eval`` it, or pass it to :func:`correlator`)."""
    for S, name in ((S1, "S1"), (S2, "S2")):
        if not isinstance(S, Lattice) or S.site_type.levels != _PROP.levels:
            raise SiteTypeError(f"meson: {name} must be a LatticePropagator, got {S!r}")
    if S1.grid != S2.grid:
        raise ConformabilityError(f"meson: S1 on {S1.grid} and S2 on {S2.grid}")
    _check_gamma(gamma_snk, "gamma_snk")
    _check_gamma(gamma_src, "gamma_src")
    g5 = Gamma.Five
    return trace(gamma_snk * S1 * (_adjoint(gamma_src) * g5) * adj(S2) * g5)


def correlator(c, momentum: Sequence[int] | None = None, t0: int = 0, origin: Sequence[int] | None = None,
               t_dir: int = 3) -> np.ndarray:
    """The timeslice sums of a complex field ``c`` (a Lattice or an expression such as
    :func:`meson`), projected to momentum ``p`` (integers, units of 2 pi / L; 3 spatial components or
    all 4; default zero) with the sink phase exp(-2 pi i p.(x - origin) / L), and rotated so that
    entry t is timeslice ``(t0 + t) % L_t``.  ``origin`` (the source point) defaults to t0 on the time
    axis and 0 elsewhere; the phase convention makes the result independent of it at zero momentum.
    """
    from ..lattice import eval as _eval

    f = c if isinstance(c, Lattice) else _eval(c)
    g = f.grid
    if f.site_shape != ():
        raise SiteTypeError(f"correlator needs a complex (scalar) field, got {f!r}; take a trace first")
    if g.checkerboarded:
        raise ConformabilityError("correlator needs a full-grid field")
    if not 0 <= t_dir < g.nd:
        raise GridError(f"correlator: t_dir {t_dir} out of range 0..{g.nd - 1}")
    Lt = g.gdims[t_dir]
    if isinstance(t0, bool) or not isinstance(t0, (int, np.integer)) or not 0 <= t0 < Lt:
        raise GridError(f"correlator: t0 {t0!r} is not an integer in 0..{Lt - 1}")
    p = [0] * g.nd if momentum is None else _momentum(g, momentum, "correlator")
    if t_dir != g.nd - 1 and momentum is not None and len(momentum) == g.nd - 1:
        raise GridError("correlator: give all components of the momentum when t_dir is not the last axis")
    if origin is None:
        origin = [0] * g.nd
        origin[t_dir] = t0
    if len(origin) != g.nd:
        raise GridError(f"correlator: origin needs {g.nd} coordinates, got {origin!r}")
    if any(p):
        shift = np.exp(2j * np.pi * sum(p[mu] * origin[mu] / g.gdims[mu] for mu in range(g.nd)))
        sums = slice_sum(momentum_phase(g, [-v for v in p], f.precision) * f, t_dir) * shift
    else:
        sums = slice_sum(f, t_dir).astype(np.complex128)
    return np.roll(sums, -int(t0))


def effective_mass(corr: Sequence[float] | np.ndarray, kind: str = "log") -> np.ndarray:
    """The effective mass of a correlator, one entry fewer (``log``) or two fewer (``cosh``):

        log:   m(t) = log(C(t) / C(t+1))                            (entries t = 0 .. L-2)
        cosh:  m(t) = arccosh((C(t-1) + C(t+1)) / (2 C(t)))         (entries t = 1 .. L-2)

    On the real part of ``corr``; NaN where the ratio has no real logarithm or arccosh.
    """
    c = np.real(np.asarray(corr, dtype=np.complex128))
    if c.ndim != 1 or c.size < 3:
        raise GridError(f"effective_mass needs a 1D correlator of 3 or more timeslices, got shape {c.shape}")
    with np.errstate(divide="ignore", invalid="ignore"):
        if kind == "log":
            return np.log(c[:-1] / c[1:])
        if kind == "cosh":
            return np.arccosh((c[:-2] + c[2:]) / (2.0 * c[1:-1]))
    raise GridError(f"effective_mass: kind must be 'log' or 'cosh', got {kind!r}")
