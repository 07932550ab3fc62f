"""Independent numpy references shared by the tests: written from docs/conventions.md, not from pygrid.

Gamma matrices are typed in from docs/conventions.md (Grid's chiral basis),
so tests that use them also pin pygrid's own constants (tests/test_expr.py).
"""
import zlib

import numpy as np

I = 1j
GAMMA_X = np.array([[0, 0, 0, I], [0, 0, I, 0], [0, -I, 0, 0], [-I, 0, 0, 0]])
GAMMA_Y = np.array([[0, 0, 0, -1], [0, 0, 1, 0], [0, 1, 0, 0], [-1, 0, 0, 0]], dtype=complex)
GAMMA_Z = np.array([[0, 0, I, 0], [0, 0, 0, -I], [-I, 0, 0, 0], [0, I, 0, 0]])
GAMMA_T = np.array([[0, 0, 1, 0], [0, 0, 0, 1], [1, 0, 0, 0], [0, 1, 0, 0]], dtype=complex)
GAMMA_MU = [GAMMA_X, GAMMA_Y, GAMMA_Z, GAMMA_T]
GAMMA_5 = np.diag([1, 1, -1, -1]).astype(complex)


def plaquette_ref(Un):
    """1/(6V) sum_x sum_{mu<nu} Re tr[U_mu(x) U_nu(x+mu) U_mu(x+nu)^dag U_nu(x)^dag] / 3; Un is [x,y,z,t,mu,a,b]."""
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


def link_trace_ref(Un):
    return np.einsum("...aa->...", Un).real.mean() / 3


def dhop_ref(U, psi, dag=False):
    """Wilson Dhop (docs/conventions.md): -1/2 sum_mu [(1 -+ g_mu) U_mu(x) psi(x+mu) + (1 +- g_mu) U_mu(x-mu)^dag psi(x-mu)].

    U is [x,y,z,t,mu,a,b], psi [x,y,z,t,spin,colour]; dag swaps the projectors (g5 Dhop g5).
    """
    U = U.astype(np.complex128)
    psi = psi.astype(np.complex128)
    sgn = 1.0 if dag else -1.0
    res = np.zeros_like(psi)
    for mu in range(4):
        Umu = U[..., mu, :, :]
        t = np.einsum("...ab,...sb->...sa", Umu, np.roll(psi, -1, axis=mu))
        res += t + sgn * np.einsum("st,...tc->...sc", GAMMA_MU[mu], t)
        Ub = np.roll(Umu, 1, axis=mu)
        t = np.einsum("...ba,...sb->...sa", Ub.conj(), np.roll(psi, 1, axis=mu))
        res += t - sgn * np.einsum("st,...tc->...sc", GAMMA_MU[mu], t)
    return -0.5 * res


def scidac_ref(payload, site_bytes):
    """SciDAC checksum by its definition: per-site CRC32 rotated by rank mod 29 / mod 31, XORed."""
    a = b = 0
    for r in range(len(payload) // site_bytes):
        c = zlib.crc32(payload[r * site_bytes:(r + 1) * site_bytes]) & 0xFFFFFFFF
        ra, rb = r % 29, r % 31
        a ^= ((c << ra) | (c >> (32 - ra))) & 0xFFFFFFFF
        b ^= ((c << rb) | (c >> (32 - rb))) & 0xFFFFFFFF
    return a, b
