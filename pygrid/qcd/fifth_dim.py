"""The fifth dimension of domain-wall fermions: the s matrices and their structure.

The Möbius operator's s matrices (``S``, ``b + c S``, ``M5D``, ``Mooee`` and
their adjoints and inverses) act per chirality, the same on every 4D site: each
is a real array (2, Ls, Ls), index 0 acting on the P_+ spins (0, 1) and 1 on the
P_- spins (2, 3).  Every one of them is cyclic bidiagonal
(:func:`bidiag_structure`), so the operators apply them with the O(Ls) kernels
of :mod:`pygrid.qcd.dslash` (tables from :func:`bidiag_structure` and
:func:`bidiag_solver`); the dense numpy :func:`s_apply` is the reference in
tests, and the fallback for a matrix without that structure.
"""
from __future__ import annotations

import numpy as np

from ..errors import ConformabilityError


def s_apply(out, x, ax, y=None, by=None, Ls=None):
    """out = ax . x (+ by . y): per-chirality dense Ls x Ls matrices in s, in numpy (the test reference).

    ``ax``/``by`` are real arrays (2, Ls, Ls), index 0 acting on the P_+ spins (0, 1)
    and 1 on the P_- spins (2, 3); buffers are host view arrays (Ls * n4, 12, 2, nsimd)
    of 5D fermions; ``out`` may alias ``x`` or ``y``.  The operators apply their s
    matrices with the O(Ls) kernels of :mod:`pygrid.qcd.dslash`.
    """
    if Ls is None:
        Ls = ax.shape[1]
    for name, a in (("x", x), ("y", y)):
        if a is not None and (a.shape != out.shape or a.dtype != out.dtype):
            raise ConformabilityError(f"s_apply: {name} buffer {a.shape} {a.dtype} does not match out "
                                      f"{out.shape} {out.dtype}")
    if out.ndim != 4 or out.shape[1] != 12 or out.shape[0] % Ls:
        raise ConformabilityError(f"s_apply: out buffer {out.shape} is not a 5D fermion with Ls={Ls}")

    def apply(m, v):
        v5 = v.reshape((-1, Ls, 2, 6) + v.shape[2:]).astype(np.float64)
        r = np.einsum("cst,otc...->osc...", np.asarray(m, np.float64), v5)
        return r.reshape(out.shape)

    res = apply(ax, x)
    if y is not None:
        res = res + apply(by, y)
    out[...] = res
    return out


def bidiag_structure(A, tol=1e-12):
    """(order, d, e, f) when every A[c] (2, Ls, Ls) is cyclic bidiagonal, else None.

    In sweep order j (slices ``order[c]``, ascending for a lower and descending
    for an upper matrix), row j of A[c] is d x_j + e x_{j-1} and row 0 is
    d x_0 + f x_last: every s matrix of the Möbius operator (Mooee, M5D, b + c S
    and their adjoints) has this form.
    """
    A = np.asarray(A, dtype=np.float64)
    Ls = A.shape[1]
    order = np.zeros((2, Ls), np.int32)
    d, e, f = np.zeros(2), np.zeros(2), np.zeros(2)
    for c in range(2):
        a = A[c]
        if Ls == 1:  # a 1 x 1 matrix: d alone
            d[c] = a[0, 0]
            continue
        lower = Ls == 2 or a[1, 0] != 0
        idx = np.arange(Ls) if lower else np.arange(Ls)[::-1]
        d[c] = a[0, 0]
        e[c], f[c] = (a[1, 0], a[0, Ls - 1]) if lower else (a[0, 1], a[Ls - 1, 0])
        rebuilt = np.zeros((Ls, Ls))
        for j in range(Ls):
            rebuilt[idx[j], idx[j]] += d[c]
            rebuilt[idx[j], idx[j - 1]] += e[c] if j else f[c]
        if not np.allclose(rebuilt, a, rtol=0, atol=tol * max(np.abs(a).max(), 1e-300)):
            return None
        order[c] = idx
    return order, d, e, f


def bidiag_solver(A, tol=1e-12):
    """O(Ls) solver tables for per-chirality cyclic bidiagonal matrices A (2, Ls, Ls), or None.

    With the structure of :func:`bidiag_structure`, x_j = p_j + q_j x_last where
    p_j = b_j / d - (e / d) p_{j-1}, q_0 = -f / d, q_j = -(e / d) q_{j-1}, and
    x_last = p_last / (1 - q_last).  Returns (order, 1/d, e/d, q, r = 1/(1 - q_last)),
    or None when A has another structure or the sweep would be ill-conditioned.
    """
    st = bidiag_structure(A, tol)
    if st is None:
        return None
    order, d, e, f = st
    Ls = order.shape[1]
    if np.any(d == 0):
        return None
    invd, ed, r = 1.0 / d, e / d, np.zeros(2)
    q = np.zeros((2, Ls))
    for c in range(2):
        q[c, 0] = -f[c] / d[c]
        for j in range(1, Ls):
            q[c, j] = -ed[c] * q[c, j - 1]
        if abs(1.0 - q[c, Ls - 1]) < 1e-8:
            return None
        r[c] = 1.0 / (1.0 - q[c, Ls - 1])
    return order, invd, ed, q, r


def fifth_dim_hop_matrices(Ls, mass):
    """The matrices (2, Ls, Ls) of S (index 0: P_+ chirality, 1: P_-); S^dag is their transpose."""
    S = np.zeros((2, Ls, Ls))
    for s in range(Ls):
        # P_+ psi_{s-1}
        if s == 0:
            S[0, 0, Ls - 1] += -mass
        else:
            S[0, s, s - 1] += 1.0
        # P_- psi_{s+1}
        if s == Ls - 1:
            S[1, Ls - 1, 0] += -mass
        else:
            S[1, s, s + 1] += 1.0
    return S


def dagger(m):
    return np.ascontiguousarray(np.transpose(m, (0, 2, 1)))
