"""Processes and global reductions.

Today pygrid runs as one process: this module describes that one rank and its
reductions are the identity.  The MPI communicator (mpi4py) plugs in here, so
the layers above already ask it for ranks, processor coordinates and sums.
"""
from __future__ import annotations

import math

from ..errors import GridError


class SingleRank:
    """The communicator of a program running as one process."""

    size = 1
    rank = 0

    def processor_coor(self, mpi_layout):
        if math.prod(mpi_layout) != 1:
            raise GridError(
                f"--mpi {'.'.join(map(str, mpi_layout))} asks for {math.prod(mpi_layout)} ranks, "
                "but this program runs as 1 process (multi-rank runs need the MPI backend, not available yet); "
                "use --mpi 1.1.1.1"
            )
        return (0,) * len(mpi_layout)

    def sum(self, value):
        return value


_world = SingleRank()


def world():
    return _world
