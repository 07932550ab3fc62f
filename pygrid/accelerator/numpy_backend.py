"""The numpy backend (``--accelerator numpy``): kernel IR evaluated over all outer sites at once.

Slow and plain on purpose: it is the oracle the compiled backends are tested
against.  Values are complex arrays shaped (osites, ncomp, nsimd).  Covariant
kernels run through their numba version, serially; reductions and relayouts
are the host ones of ``host.py``.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from . import host, ir as IR
from .ir import csr_rows


class NumpyBackend:
    """The plain numpy evaluator: the test oracle."""

    name = "numpy"
    device = "unified"
    asynchronous = False

    def describe(self) -> str:
        return "numpy (host, one thread)"

    def run(self, ir, out, inputs, shifts, coefs, nsimd, alias=False, keep=True) -> None:
        run_ir(ir, out, inputs, shifts, coefs)

    def prepare(self, ir, shifts, coefs, nsimd, alias, dtype, osites=None) -> None:
        pass  # nothing is compiled

    def launch(self, kernel, args, nsimd, dtype) -> None:
        from . import covariant

        covariant.host_launch(self, kernel, args, nsimd, dtype)

    def relayout(self, kind, out, inp, om=None, lm=None) -> None:
        host.relayout(kind, out, inp, om, lm)

    def accelerator_for(self, osites: int, kernel: Callable, *args: Any) -> None:
        host.serial_for(osites, kernel, *args)

    def bind_kernel(self, kernel: Callable, *args: Any, balance: bool = False) -> Callable[..., None]:
        return host.serial_launcher(kernel, args)

    def norm2(self, a) -> float:
        return host.norm2(a)

    def inner_product(self, a, b) -> complex:
        return host.inner_product(a, b)

    def site_sum(self, a) -> np.ndarray:
        return host.site_sum(a)

    def slice_sum(self, a, table) -> np.ndarray:
        return host.slice_sum(a, table)

    def set_threads(self, n: int | None) -> None:
        pass

    def threads(self) -> int:
        return 1

    def synchronize(self) -> None:
        pass  # every launch returns when its kernel has finished

    def device_copy(self, host):
        return host  # kernels here read host arrays

    def copy_to_host(self, buf, out):
        host.copy_to_host(buf, out)

    def copy_from_host(self, buf, hbuf):
        host.copy_from_host(buf, hbuf)

    def host_array(self, shape, dtype):
        return host.host_array(shape, dtype)

    def bench_copy(self, n, dtype) -> None:
        return None


def _cplx(buf):
    return buf[:, :, 0, :] + 1j * buf[:, :, 1, :]


def run_ir(ir, out, inputs, shifts, coefs):
    """Evaluate ``ir`` writing into ``out`` (osites, ncomp, 2, nsimd).

    inputs: one array per slot; shifts: (nbr, perm, lanes) per shift index;
    coefs: complex coefficient vector.
    """
    shape = (out.shape[0], None, out.shape[3])
    vals = []
    for op in ir.ops:
        vals.append(_EVAL[type(op)](op, ir, vals, inputs, shifts, coefs, shape))
    res = vals[ir.result]
    out[:, :, 0, :] = res.real
    out[:, :, 1, :] = res.imag


def _zeros(shape, n):
    return np.zeros((shape[0], n, shape[2]), dtype=np.complex128)


def _load(op, ir, vals, inputs, shifts, coefs, shape):
    x = _cplx(inputs[op.slot])
    if op.shift >= 0:
        nbr, perm, lanes = shifts[op.shift]
        x = np.take_along_axis(x[nbr], lanes[perm][:, None, :], axis=2)
    return x


def _const(op, ir, vals, inputs, shifts, coefs, shape):
    c = coefs[op.offset:op.offset + op.ncomp]
    return np.broadcast_to(c[None, :, None], (shape[0], op.ncomp, shape[2]))


def _contract(op, ir, vals, inputs, shifts, coefs, shape):
    start, ia, ib = ir.contract_tables(op)
    A = np.conj(vals[op.a]) if op.conj_a else vals[op.a]
    B = np.conj(vals[op.b]) if op.conj_b else vals[op.b]
    r = _zeros(shape, op.ncomp)
    np.add.at(r, (slice(None), csr_rows(start)), A[:, ia] * B[:, ib])
    return r


def _remap(op, ir, vals, inputs, shifts, coefs, shape):
    start, ia, cf = ir.remap_tables(op)
    A = np.conj(vals[op.a]) if op.conj else vals[op.a]
    c = cf[:, 0] + 1j * cf[:, 1]
    r = _zeros(shape, op.ncomp)
    np.add.at(r, (slice(None), csr_rows(start)), c[None, :, None] * A[:, ia])
    return r


def _lincomb(op, ir, vals, inputs, shifts, coefs, shape):
    r = 0
    for t in op.terms:
        term = vals[t.value] if t.coef is None else coefs[t.coef] * vals[t.value]
        r = r + t.sign * term
    return r


def _where(op, ir, vals, inputs, shifts, coefs, shape):
    return np.where(vals[op.mask].real != 0, vals[op.a], vals[op.b])


_COMPARE = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal}


def _compare(op, ir, vals, inputs, shifts, coefs, shape):
    return _COMPARE[op.op](vals[op.a].real, vals[op.b].real).astype(np.float64) + 0j


_EVAL = {
    IR.Load: _load, IR.Const: _const, IR.Contract: _contract, IR.Remap: _remap,
    IR.LinComb: _lincomb, IR.Where: _where, IR.Compare: _compare,
}
