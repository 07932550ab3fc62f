"""Plain numpy references for the QCD kernels, used by the tests and the benchmarks' checks.

Written from the definitions in docs/conventions.md with ``np.roll`` and
``einsum`` on natural-order arrays (``to_numpy()``), independently of the
kernels they check; the gamma matrices are typed in from the same page
(Grid's chiral basis), not taken from pygrid's tables.
"""
from __future__ import annotations

import numpy as np

_I = 1j
GAMMA_X = np.array([[0, 0, 0, _I], [0, 0, _I, 0], [0, -_I, 0, 0], [-_I, 0, 0, 0]])
GAMMA_Y = np.array([[0, 0, 0, -1], [0, 0, 1, 0], [0, 1, 0, 0], [-1, 0, 0, 0]], dtype=complex)
GAMMA_Z = np.array([[0, 0, _I, 0], [0, 0, 0, -_I], [-_I, 0, 0, 0], [0, _I, 0, 0]])
GAMMA_T = np.array([[0, 0, 1, 0], [0, 0, 0, 1], [1, 0, 0, 0], [0, 1, 0, 0]], dtype=complex)
GAMMA_MU = [GAMMA_X, GAMMA_Y, GAMMA_Z, GAMMA_T]
GAMMA_5 = np.diag([1, 1, -1, -1]).astype(complex)


def _hop_phases(L, phase, twist):
    """(forward, backward) phase per coordinate along one axis: what psi(x+mu) and psi(x-mu) pick up
    on the way to x, from the boundary phase at the edge and the twist on every hop."""
    w = np.exp(2j * np.pi * twist / L)
    fwd = np.full(L, w, dtype=np.complex128)
    fwd[L - 1] *= phase
    bwd = np.full(L, np.conj(w), dtype=np.complex128)
    bwd[0] *= np.conj(phase)
    return fwd, bwd


def dhop(U: np.ndarray, psi: np.ndarray, dag: bool = False,
         lattice_axes: tuple[int, int, int, int] = (0, 1, 2, 3), boundary_phases=None,
         twists=None) -> np.ndarray:
    """Grid's Wilson hopping term, in complex128.

        Dhop psi(x) = -1/2 sum_mu [(1 - g_mu) U_mu(x) psi(x+mu) + (1 + g_mu) U_mu(x-mu)^dag psi(x-mu)]

    ``U``: [x, y, z, t, mu, a, b] links; ``psi``: [..., x, y, z, t, spin, colour] with the four
    lattice axes of psi at ``lattice_axes`` (a leading s axis for 5D fields); ``dag`` swaps the
    projectors (the adjoint, g5 Dhop g5).  ``boundary_phases`` / ``twists`` (docs/conventions.md,
    "Fermion boundary conditions"): here the neighbour psi(x +- mu) carries the phase, the links are
    left as they are.
    """
    U = np.asarray(U, dtype=np.complex128)
    psi = np.asarray(psi, dtype=np.complex128)
    phases = [1.0] * 4 if boundary_phases is None else list(boundary_phases)
    tw = [0.0] * 4 if twists is None else list(twists)
    sgn = 1.0 if dag else -1.0
    res = np.zeros_like(psi)
    for mu in range(4):
        ax = lattice_axes[mu]
        L = psi.shape[ax]
        fwd, bwd = _hop_phases(L, phases[mu], tw[mu])
        shape = [1] * psi.ndim
        shape[ax] = L
        Umu = U[..., mu, :, :]
        t = np.einsum("...ab,...sb->...sa", Umu, np.roll(psi, -1, axis=ax) * fwd.reshape(shape))
        res += t + sgn * np.einsum("st,...tc->...sc", GAMMA_MU[mu], t)
        Ub = np.roll(Umu, 1, axis=mu)
        t = np.einsum("...ba,...sb->...sa", Ub.conj(), np.roll(psi, 1, axis=ax) * bwd.reshape(shape))
        res += t - sgn * np.einsum("st,...tc->...sc", GAMMA_MU[mu], t)
    return -0.5 * res


def plaquette(Un: np.ndarray) -> float:
    """1/(6V) sum_x sum_{mu<nu} Re tr[U_mu(x) U_nu(x+mu) U_mu(x+nu)^dag U_nu(x)^dag] / 3;
    ``Un`` is [x, y, z, t, mu, a, b]."""
    tot, n = 0.0, 0
    for mu in range(4):
        for nu in range(mu + 1, 4):
            a = Un[..., mu, :, :]
            b = np.roll(Un[..., nu, :, :], -1, axis=mu)
            c = np.roll(Un[..., mu, :, :], -1, axis=nu).conj().swapaxes(-1, -2)
            d = Un[..., nu, :, :].conj().swapaxes(-1, -2)
            tot += np.einsum("...ab,...bc,...cd,...da->...", a, b, c, d).real.sum()
            n += 1
    return tot / (3 * n * np.prod(Un.shape[:4]))


def link_trace(Un: np.ndarray) -> float:
    """The average of Re tr U_mu(x) / 3."""
    return np.einsum("...aa->...", Un).real.mean() / 3
