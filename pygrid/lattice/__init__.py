from .lattice import (
    Lattice, LatticeColourMatrix, LatticeColourVector, LatticeComplex, LatticeFermion, LatticeGaugeField,
    LatticeLorentzColourMatrix, LatticePropagator, LatticeReal, LatticeSpinColourMatrix,
    LatticeSpinColourVector, LatticeSpinMatrix, LatticeSpinVector,
)
from .ops import (
    adj, conjugate, convert, coordinate, cshift, eval, inner_product, local_inner_product, norm2,
    outer_product, peek_colour, peek_index, peek_lorentz, peek_spin, pick_checkerboard, poke_colour,
    poke_index, poke_lorentz, poke_spin, set_checkerboard, slice_sum, sum, trace, trace_colour,
    trace_spin, transpose, transpose_colour, transpose_spin, where,
)
