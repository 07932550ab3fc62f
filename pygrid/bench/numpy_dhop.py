"""The Wilson hopping term as a careful numpy user writes it: the baseline the benchmarks compare with.

Per direction mu, the neighbour spinor is gathered into a preallocated buffer by two slice
copies (no ``np.roll`` allocation), the colour product is one ``np.matmul`` over the whole
lattice and the spin factor ``(1 -+ gamma_mu)`` one more, each written into preallocated
arrays; the backward term multiplies by ``U^dag`` at the site and shifts the product.  The
plain ``np.roll`` + ``einsum`` reference (:func:`pygrid.qcd.reference.dhop`) is the other
baseline.  Same convention (docs/conventions.md): ``Dhop psi(x) = -1/2 sum_mu [(1 - g_mu)
U_mu(x) psi(x+mu) + (1 + g_mu) U_mu(x-mu)^dag psi(x-mu)]``.
"""
from __future__ import annotations

import numpy as np

from ..tensors.constant import Gamma


def _shift(src, mu, disp, out):
    """out(x) = src(x + disp mu) (periodic), by two slice copies along axis mu."""
    n = src.shape[mu]
    d = disp % n
    a = [slice(None)] * src.ndim
    b = [slice(None)] * src.ndim
    a[mu], b[mu] = slice(0, n - d), slice(d, n)
    out[tuple(a)] = src[tuple(b)]
    a[mu], b[mu] = slice(n - d, n), slice(0, d)
    out[tuple(a)] = src[tuple(b)]
    return out


class MatmulDhop:
    """``Dhop(psi, out)`` on arrays ``U[x, y, z, t, mu, a, b]``, ``psi[x, y, z, t, spin, colour]``
    (``to_numpy()`` layouts), with every temporary allocated once."""

    def __init__(self, U: np.ndarray, lattice_axes=(0, 1, 2, 3)):
        self.dtype = U.dtype
        self.axes = lattice_axes
        # U_mu^T for psi @ U^T, and conj(U_mu) for psi @ conj(U) = (U^dag psi) in row form
        self.UT = [np.ascontiguousarray(np.swapaxes(U[..., mu, :, :], -1, -2)) for mu in range(4)]
        self.Uc = [np.ascontiguousarray(U[..., mu, :, :].conj()) for mu in range(4)]
        g = [np.array(getattr(Gamma, n).array(), dtype=self.dtype) for n in ("X", "Y", "Z", "T")]
        one = np.eye(4, dtype=self.dtype)
        self.minus = [(-0.5 * (one - gm)).astype(self.dtype) for gm in g]
        self.plus = [(-0.5 * (one + gm)).astype(self.dtype) for gm in g]
        self._bufs = None

    def __call__(self, psi: np.ndarray, out: np.ndarray) -> np.ndarray:
        if self._bufs is None or self._bufs[0].shape != psi.shape:
            self._bufs = tuple(np.empty_like(psi) for _ in range(3))
        nb, prod, spin = self._bufs
        out[...] = 0
        for mu in range(4):
            ax = self.axes[mu]
            # forward: (1 - g_mu) U_mu(x) psi(x + mu)
            _shift(psi, ax, 1, nb)
            np.matmul(nb, self.UT[mu], out=prod)
            np.matmul(self.minus[mu], prod, out=spin)
            out += spin
            # backward: (1 + g_mu) U_mu(x - mu)^dag psi(x - mu): U^dag psi at x, then shifted
            np.matmul(psi, self.Uc[mu], out=prod)
            _shift(prod, ax, -1, nb)
            np.matmul(self.plus[mu], nb, out=spin)
            out += spin
        return out
