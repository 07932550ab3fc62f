"""Fermion boundary conditions: a phase on the hop across the lattice's edge, and twists.

Grid's convention (``WilsonImplParams``: ``boundary_phases``, ``twist_n_2pi_L``),
for direction mu of global extent L::

    U'_mu(x) = exp(2 pi i n_mu / L) U_mu(x)            every link (the twist n_mu, a real number)
    U'_mu(x) = phase_mu U'_mu(x)        at x_mu = L - 1 (the links that cross the edge forward)

and the operator is the one built on U'.  The backward hop reads U'^dag, so a
fermion crossing the edge backwards picks up conj(phase_mu) = 1/phase_mu: the
phases must have modulus 1 for this to be a boundary condition, and they are
checked.  ``[1, 1, 1, -1]`` is the standard antiperiodic time direction; a
twist n_mu shifts the momenta in direction mu by 2 pi n_mu / L, as a phase
exp(i 2 pi n_mu) on the edge would.
"""
from __future__ import annotations

import cmath
import math

from ..errors import GridError
from ..lattice import Lattice, coordinate, peek_lorentz, poke_lorentz, where

__all__ = ["FermionBoundary", "PERIODIC", "ANTIPERIODIC_T"]

PERIODIC = (1, 1, 1, 1)
ANTIPERIODIC_T = (1, 1, 1, -1)

#: how far from modulus 1 a boundary phase may be (rounding of user input such as exp(i theta))
_UNIT_TOL = 1e-10


class FermionBoundary:
    """Validated boundary phases and twists for an nd-dimensional operator."""

    def __init__(self, boundary_phases=None, twists=None, nd: int = 4) -> None:
        self.nd = nd
        self.phases = self._phases(boundary_phases)
        self.twists = self._twists(twists)

    def _phases(self, value):
        if value is None:
            return (1 + 0j,) * self.nd
        if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
            raise GridError(f"boundary_phases must be {self.nd} complex numbers, e.g. [1, 1, 1, -1] "
                            f"(antiperiodic in time), got {value!r}")
        if len(value) != self.nd:
            raise GridError(f"boundary_phases needs one phase per direction ({self.nd}), got {len(value)}: "
                            f"{value!r}")
        out = []
        for mu, v in enumerate(value):
            try:
                z = complex(v)
            except (TypeError, ValueError):
                raise GridError(f"boundary_phases[{mu}] = {v!r} is not a number") from None
            if not cmath.isfinite(z) or abs(abs(z) - 1.0) > _UNIT_TOL:
                raise GridError(
                    f"boundary_phases[{mu}] = {v!r} has modulus {abs(z):.6g}; a boundary phase must have "
                    f"modulus 1 (e.g. -1, or cmath.exp(1j * theta)) so that the backward hop undoes it")
            out.append(z)
        return tuple(out)

    def _twists(self, value):
        if value is None:
            return (0.0,) * self.nd
        if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != self.nd:
            raise GridError(f"twists must be {self.nd} real numbers (Grid's twist_n_2pi_L), got {value!r}")
        out = []
        for mu, v in enumerate(value):
            if isinstance(v, complex):
                raise GridError(f"twists[{mu}] = {v!r} must be real")
            try:
                x = float(v)
            except (TypeError, ValueError):
                raise GridError(f"twists[{mu}] = {v!r} is not a number") from None
            if not math.isfinite(x):
                raise GridError(f"twists[{mu}] = {v!r} must be finite")
            out.append(x)
        return tuple(out)

    @property
    def trivial(self) -> bool:
        return all(z == 1 for z in self.phases) and not any(self.twists)

    def kwargs(self) -> dict:
        """The operator keywords that rebuild these conditions."""
        return {"boundary_phases": self.phases, "twists": self.twists}

    def describe(self) -> str:
        """``''`` when periodic, else ``', boundary_phases=[...]'`` (and the twists) for a repr."""
        if self.trivial:
            return ""

        def num(z):
            return f"{z.real:g}" if z.imag == 0 else f"{z:g}"

        text = f", boundary_phases=[{', '.join(num(z) for z in self.phases)}]"
        if any(self.twists):
            text += f", twists=[{', '.join(f'{t:g}' for t in self.twists)}]"
        return text

    def apply(self, U: Lattice) -> Lattice:
        """U itself when periodic; otherwise a new gauge field U' (module docstring), made with one
        expression per direction from global coordinates, so on any backend and any number of ranks."""
        if self.trivial:
            return U
        g = U.grid
        out = U.copy()  # the periodic directions as they are (an antiperiodic t: one direction of four)
        for mu in range(self.nd):
            if self.phases[mu] == 1 and not self.twists[mu]:
                continue
            L = g.gdims[mu]
            twist = cmath.exp(2j * math.pi * self.twists[mu] / L)
            link = peek_lorentz(U, mu)
            if self.phases[mu] == 1:
                value = twist * link
            else:
                edge = coordinate(g, mu, precision=U.precision) > L - 1.5
                value = where(edge, (twist * self.phases[mu]) * link, twist * link)
            poke_lorentz(out, value, mu)
        return out
