"""Constant site tensors (gamma matrices, unit matrices) and their algebra.

A constant multiplies a field as a sparse remap folded at kernel-build time,
so a gamma matrix costs one signed, phased read per component, not a dense
4x4 product.
"""
from __future__ import annotations

import numbers

import numpy as np

from ..errors import SiteTypeError
from . import algebra
from .sitetype import SiteType, SpinMatrix


class ConstTensor:
    """A site tensor with fixed values, e.g. ``Gamma.X`` or ``1 - Gamma.T``."""

    __array_priority__ = 1000  # keep numpy scalars from broadcasting over us

    def __init__(self, site_type: SiteType, values, name=None):
        v = np.asarray(values, dtype=np.complex128).reshape(-1)
        if v.size != site_type.ncomp:
            raise SiteTypeError(
                f"{v.size} values for a constant of type {site_type} ({site_type.ncomp} components)"
            )
        self.site_type = site_type
        self.values = v
        self.values.setflags(write=False)
        self.name = name

    def array(self):
        return self.values.reshape(self.site_type.shape)

    def key(self):
        return (self.site_type, self.values.tobytes())

    def __repr__(self):
        return self.name or f"ConstTensor({self.site_type}, {self.array()!r})"

    def __eq__(self, other):
        return isinstance(other, ConstTensor) and self.key() == other.key()

    def __hash__(self):
        return hash(self.key())

    # algebra among constants; fields take over through their reflected operators
    def __mul__(self, other):
        if isinstance(other, numbers.Number):
            return ConstTensor(self.site_type, self.values * other)
        if isinstance(other, ConstTensor):
            out, table = algebra.product(self.site_type, other.site_type)
            vals = np.zeros(out.ncomp, dtype=np.complex128)
            np.add.at(vals, table[:, 0], self.values[table[:, 1]] * other.values[table[:, 2]])
            return ConstTensor(out.as_complex(), vals, _join(self.name, other.name))
        return NotImplemented

    def __rmul__(self, other):
        if isinstance(other, numbers.Number):
            return ConstTensor(self.site_type, self.values * other)
        return NotImplemented

    def _add(self, other, sign):
        if isinstance(other, numbers.Number):
            other = ConstTensor(self.site_type, algebra.identity_values(self.site_type) * other)
        if not isinstance(other, ConstTensor):
            return NotImplemented
        if other.site_type.levels != self.site_type.levels:
            raise SiteTypeError(f"cannot add constants of types {self.site_type} and {other.site_type}")
        return ConstTensor(self.site_type, self.values + sign * other.values)

    def __add__(self, other):
        return self._add(other, 1)

    def __radd__(self, other):
        return self._add(other, 1)

    def __sub__(self, other):
        return self._add(other, -1)

    def __rsub__(self, other):
        r = self._add(other, -1)
        return r if r is NotImplemented else -r

    def __neg__(self):
        return ConstTensor(self.site_type, -self.values)


def _join(a, b):
    return f"{a}*{b}" if a and b else None


# Grid's chiral basis (docs/conventions.md)
_I = 1j
_GX = [[0, 0, 0, _I], [0, 0, _I, 0], [0, -_I, 0, 0], [-_I, 0, 0, 0]]
_GY = [[0, 0, 0, -1], [0, 0, 1, 0], [0, 1, 0, 0], [-1, 0, 0, 0]]
_GZ = [[0, 0, _I, 0], [0, 0, 0, -_I], [-_I, 0, 0, 0], [0, _I, 0, 0]]
_GT = [[0, 0, 1, 0], [0, 0, 0, 1], [1, 0, 0, 0], [0, 1, 0, 0]]


class Gamma:
    """Gamma matrices in Grid's chiral basis, acting on the spin level.

    ``Gamma.X, Gamma.Y, Gamma.Z, Gamma.T`` (also ``Gamma.mu[0..3]``),
    ``Gamma.Five = X Y Z T = diag(1, 1, -1, -1)``, ``Gamma.Identity``; products
    such as ``Gamma.X * Gamma.Five`` are constants too.
    """

    X = ConstTensor(SpinMatrix(), _GX, "Gamma.X")
    Y = ConstTensor(SpinMatrix(), _GY, "Gamma.Y")
    Z = ConstTensor(SpinMatrix(), _GZ, "Gamma.Z")
    T = ConstTensor(SpinMatrix(), _GT, "Gamma.T")
    Five = ConstTensor(
        SpinMatrix(), np.array(_GX) @ np.array(_GY) @ np.array(_GZ) @ np.array(_GT), "Gamma.Five"
    )
    Identity = ConstTensor(SpinMatrix(), np.eye(4), "Gamma.Identity")
    mu = (X, Y, Z, T)
