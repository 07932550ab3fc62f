"""Site types: nested index levels over complex (or real) scalars.

Every site type has the same three levels, outermost first: Lorentz, spin,
colour.  Each level is a scalar, a vector of n or an n x n matrix, so a
fermion is (scalar, vector 4, vector 3) and a gauge field (vector 4, scalar,
matrix 3).  The flattened component order is row-major over the concatenated
level shapes, which is also the order of the trailing axes of ``to_numpy()``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

LEVELS = ("lorentz", "spin", "colour")
SCALAR, VECTOR, MATRIX = "scalar", "vector", "matrix"


@dataclass(frozen=True)
class Level:
    kind: str = SCALAR
    n: int = 1

    @cached_property
    def shape(self):
        return {SCALAR: (), VECTOR: (self.n,), MATRIX: (self.n, self.n)}[self.kind]

    def describe(self):
        return {SCALAR: "scalar", VECTOR: f"vector({self.n})", MATRIX: f"matrix({self.n}x{self.n})"}[
            self.kind
        ]


S = Level()


def V(n):
    return Level(VECTOR, int(n))


def M(n):
    return Level(MATRIX, int(n))


_NAMES = {}


@dataclass(frozen=True)
class SiteType:
    lorentz: Level = S
    spin: Level = S
    colour: Level = S
    is_real: bool = False

    # cached: the expression engine asks for these several times per node (frozen, so never stale)
    @cached_property
    def _hash(self):
        return hash((self.lorentz, self.spin, self.colour, self.is_real))

    def __hash__(self):
        # an expression's signature holds its site types and is hashed at every evaluation: the
        # dataclass's hash hashed the three levels again each time
        return self._hash

    @cached_property
    def levels(self):
        return (self.lorentz, self.spin, self.colour)

    @cached_property
    def key(self):
        """The site type as a tuple of strings and numbers: equal for equal site types, and
        compared without the dataclasses' ``__eq__`` (an expression's signature holds it, and is
        compared at every evaluation)."""
        return (*(x for lv in self.levels for x in (lv.kind, lv.n)), self.is_real)

    @cached_property
    def levels_key(self):
        """:attr:`key` without the realness: equal where :attr:`levels` are."""
        return self.key[:-1]

    @cached_property
    def shape(self):
        return self.lorentz.shape + self.spin.shape + self.colour.shape

    @cached_property
    def ncomp(self):
        return math.prod(self.shape)

    @property
    def colour_matrix(self):
        return self.colour.kind == MATRIX

    @property
    def nc(self):
        return self.colour.n if self.colour.kind != SCALAR else None

    def level(self, name):
        return self.levels[LEVELS.index(name)]

    def with_level(self, name, level):
        levels = list(self.levels)
        levels[LEVELS.index(name)] = level
        return SiteType(*levels, is_real=self.is_real)

    def as_complex(self):
        return SiteType(*self.levels, is_real=False)

    @property
    def name(self):
        known = _NAMES.get(SiteType(*self.levels))
        if known:
            return ("Real" if self.is_real and known == "Complex" else known)
        parts = [f"{n}={lv.describe()}" for n, lv in zip(LEVELS, self.levels) if lv.kind != SCALAR]
        return ("Real" if self.is_real else "Complex") + ("[" + ", ".join(parts) + "]" if parts else "")

    def __repr__(self):
        return self.name


def _named(name, st):
    _NAMES.setdefault(st, name)
    return st


Complex = _named("Complex", SiteType())
Real = SiteType(is_real=True)


def ColourVector(nc=3):
    return _named("ColourVector" if nc == 3 else f"ColourVector{nc}", SiteType(colour=V(nc)))


def ColourMatrix(nc=3):
    return _named("ColourMatrix" if nc == 3 else f"ColourMatrix{nc}", SiteType(colour=M(nc)))


def SpinVector(ns=4):
    return _named("SpinVector", SiteType(spin=V(ns)))


def SpinMatrix(ns=4):
    return _named("SpinMatrix", SiteType(spin=M(ns)))


def SpinColourVector(nc=3, ns=4):
    return _named("SpinColourVector", SiteType(spin=V(ns), colour=V(nc)))


def SpinColourMatrix(nc=3, ns=4):
    return _named("SpinColourMatrix", SiteType(spin=M(ns), colour=M(nc)))


def LorentzColourMatrix(nc=3, nd=4):
    return _named("LorentzColourMatrix", SiteType(lorentz=V(nd), colour=M(nc)))


def LorentzComplex(nd=4):
    return _named("LorentzComplex", SiteType(lorentz=V(nd)))


for _f in (ColourVector, ColourMatrix, SpinColourVector, SpinColourMatrix, LorentzColourMatrix):
    _f()
SpinVector()
SpinMatrix()
LorentzComplex()
