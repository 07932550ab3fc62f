"""The processor grid: how ranks tile the lattice."""
from __future__ import annotations

import math

from ..errors import GridError


def processor_coor(rank, mpi_layout):
    """Coordinates of ``rank`` in the processor grid, dimension 0 fastest."""
    out = []
    for p in mpi_layout:
        out.append(rank % p)
        rank //= p
    return tuple(out)


def rank_of(coor, mpi_layout):
    """The rank at processor coordinates ``coor`` (taken periodically)."""
    r, s = 0, 1
    for c, p in zip(coor, mpi_layout):
        r += (c % p) * s
        s *= p
    return r


def default_mpi_layout(gdims, nranks):
    """A processor grid for ``nranks`` ranks over a lattice ``gdims``.

    Prime factors of ``nranks``, largest first, go one at a time to the
    dimension with the largest local extent that they divide, the last
    dimension first on ties (Grid's habit of splitting time first), so
    local volumes stay as cubic as the lattice allows.
    """
    gdims = tuple(int(g) for g in gdims)
    layout = [1] * len(gdims)
    factors, n, f = [], int(nranks), 2
    while n > 1:
        while n % f == 0:
            factors.append(f)
            n //= f
        f += 1
    for f in sorted(factors, reverse=True):
        best = None
        for d in reversed(range(len(gdims))):
            local = gdims[d] // layout[d]
            if gdims[d] % (layout[d] * f) == 0 and (best is None or local > gdims[best] // layout[best]):
                best = d
        if best is None:
            raise GridError(f"cannot lay {nranks} ranks out over the lattice {'.'.join(map(str, gdims))}: "
                            f"no dimension is divisible by the factor {f}; give --mpi explicitly")
        layout[best] *= f
    assert math.prod(layout) == nranks
    return tuple(layout)
