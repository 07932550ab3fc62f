"""Stencils: neighbour tables with SIMD lane permutes for a list of displacements.

See :class:`Stencil`.
"""
from .stencil import Stencil, wilson_displacements

__all__ = ["Stencil", "wilson_displacements"]
