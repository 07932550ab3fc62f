"""Gauge-field kernels written once in the covariant vocabulary (pygrid.accelerator.covariant).

:func:`project_su3_kernel`: every 3x3 colour matrix of a site reunitarised by
Gram-Schmidt on its rows (row 0 normalised, row 1 orthogonalised to it and
normalised, row 2 = conj(row 0 x row 1), so the result is unitary with
determinant 1), the same projection as :func:`pygrid.qcd.gauge.project_su3_array`.
The colour matrix is the innermost level of the site, so a site holds
``nmat`` matrices of 9 consecutive complex components.
"""
from __future__ import annotations

import functools

from ..accelerator.covariant import Kernel, Param


def _cmul(E, a, b):
    (ar, ai), (br, bi) = a, b
    return E.fms(ai, bi, ar * br), E.fma(ai, br, ar * bi)


def _project_body(E, o, _s, nmat):
    one = E.const(1.0)
    for m in range(nmat):
        def row(i, m=m):
            return [
                (E.read("links", o, 2 * (9 * m + 3 * i + j)), E.read("links", o, 2 * (9 * m + 3 * i + j) + 1))
                for j in range(3)
            ]

        def normalised(r):
            n = r[0][0] * r[0][0]
            for k, (a, b) in enumerate(r):
                n = E.fma(b, b, n) if k == 0 else E.fma(b, b, E.fma(a, a, n))
            inv = one / E.sqrt(n)
            return [(a * inv, b * inv) for a, b in r]

        r0 = normalised(row(0))
        r1 = row(1)
        # r1 -= <r0, r1> r0, with <r0, r1> = sum conj(r0_j) r1_j
        dr = di = None
        for (ar, ai), (br, bi) in zip(r0, r1):
            if dr is None:
                dr, di = ar * br, ar * bi
            else:
                dr, di = E.fma(ar, br, dr), E.fma(ar, bi, di)
            dr, di = E.fma(ai, bi, dr), E.fms(ai, br, di)
        r1 = normalised([(E.fma(di, ai, E.fms(dr, ar, br)), E.fms(di, ar, E.fms(dr, ai, bi)))
                         for (ar, ai), (br, bi) in zip(r0, r1)])
        # row 2 = conj(r0 x r1)
        r2 = []
        for j in range(3):
            p, q = (j + 1) % 3, (j + 2) % 3
            xr, xi = _cmul(E, r0[p], r1[q])
            yr, yi = _cmul(E, r0[q], r1[p])
            r2.append((xr - yr, yi - xi))
        for i, r in enumerate((r0, r1, r2)):
            for j, (a, b) in enumerate(r):
                E.store("out", o, 2 * (9 * m + 3 * i + j), a)
                E.store("out", o, 2 * (9 * m + 3 * i + j) + 1, b)


@functools.cache
def project_su3_kernel(nmat):
    """The SU(3) projection of the sites of ``links`` holding ``nmat`` colour matrices each (out may be
    links)."""
    nc = 9 * int(nmat)
    return Kernel(
        name=f"project_su3_{nmat}",
        params=(Param("out", "field", nc, out=True), Param("links", "field", nc), Param("n", "int")),
        n="n", body=lambda E, o, s: _project_body(E, o, s, int(nmat)), statics=(int(nmat),),
        doc="Every colour matrix of a site projected to SU(3) by Gram-Schmidt (pygrid.qcd.kernels_gauge).",
    )
