"""The numpy evaluator: runs kernel IR over all outer sites at once with numpy.

Slow and plain on purpose: it is the oracle the compiled backends are tested
against, and the fallback when code generation cannot handle something.
Values are complex arrays shaped (osites, ncomp, nsimd).
"""
from __future__ import annotations

import numpy as np


def _cplx(buf):
    return buf[:, :, 0, :] + 1j * buf[:, :, 1, :]


def _csr_rows(start):
    """Output component of each table row from CSR row starts."""
    return np.repeat(np.arange(len(start) - 1), np.diff(start))


def run_ir(ir, out, inputs, shifts, coefs):
    """Evaluate ``ir`` writing into ``out`` (osites, ncomp, 2, nsimd).

    inputs: one array per slot; shifts: (nbr, perm, lanes) per shift index;
    coefs: complex coefficient vector.
    """
    vals = []
    for op in ir.ops:
        kind = op[0]
        if kind == "load":
            _, slot, sh = op
            x = _cplx(inputs[slot])
            if sh >= 0:
                nbr, perm, lanes = shifts[sh]
                x = np.take_along_axis(x[nbr], lanes[perm][:, None, :], axis=2)
            vals.append(x)
        elif kind == "const":
            _, off, n = op
            c = coefs[off:off + n]
            vals.append(np.broadcast_to(c[None, :, None], (out.shape[0], n, out.shape[3])))
        elif kind == "contract":
            _, a, b, _loops, (ts, tia, tib), ca, cb, nout = op
            rows = _csr_rows(ir.tables[ts])
            tab = np.stack([rows, ir.tables[tia], ir.tables[tib]], axis=1)
            A, B = vals[a], vals[b]
            if ca:
                A = np.conj(A)
            if cb:
                B = np.conj(B)
            r = np.zeros((out.shape[0], nout, out.shape[3]), dtype=np.complex128)
            np.add.at(r, (slice(None), tab[:, 0]), A[:, tab[:, 1]] * B[:, tab[:, 2]])
            vals.append(r)
        elif kind == "remap":
            _, a, (ts, tia, tcf), conj, nout = op
            rows = np.stack([_csr_rows(ir.tables[ts]), ir.tables[tia]], axis=1)
            cf = ir.tables[tcf]
            A = np.conj(vals[a]) if conj else vals[a]
            c = cf[:, 0] + 1j * cf[:, 1]
            r = np.zeros((out.shape[0], nout, out.shape[3]), dtype=np.complex128)
            np.add.at(r, (slice(None), rows[:, 0]), c[None, :, None] * A[:, rows[:, 1]])
            vals.append(r)
        elif kind == "lincomb":
            _, terms, n = op
            r = 0
            for v, c, sign in terms:
                term = vals[v] if c < 0 else coefs[c] * vals[v]
                r = r + sign * term
            vals.append(r)
        elif kind == "where":
            _, m, a, b, n = op
            vals.append(np.where(vals[m].real != 0, vals[a], vals[b]))
        elif kind == "compare":
            _, a, b, cmp = op
            x, y = vals[a].real, vals[b].real
            r = {"<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y}[cmp]
            vals.append(r.astype(np.float64) + 0j)
        else:
            raise ValueError(f"unknown IR op {kind}")
    res = vals[ir.result]
    out[:, :, 0, :] = res.real
    out[:, :, 1, :] = res.imag
