"""Layout-independent parallel random numbers (counter-based Philox4x32-10).

``ParallelRNG(grid, seed)`` fills lattice fields with numbers keyed by global
site index, so a seed gives the same field whatever the SIMD layout, thread
count or MPI decomposition. See :mod:`pygrid.random.rng` for the conventions and
:mod:`pygrid.random.counter` for the generator and its counter layout.
"""

from .counter import RandomError, gaussian, random_bits, uniform
from .rng import (
    ParallelRNG,
    gaussian_array,
    random_sun_array,
    random_sun_near_identity_array,
    seed_to_key,
    sun_from_ginibre,
    uniform_array,
)

__all__ = [
    "ParallelRNG",
    "RandomError",
    "random_bits",
    "uniform",
    "gaussian",
    "seed_to_key",
    "uniform_array",
    "gaussian_array",
    "sun_from_ginibre",
    "random_sun_array",
    "random_sun_near_identity_array",
]
