"""Processes: ranks, the processor grid, global reductions and point-to-point messages.

A program started by ``mpiexec`` / ``srun`` runs one process per rank and
talks through MPI (mpi4py, :mod:`pygrid.communicator.mpi`); a program started
on its own is one rank (:class:`SingleRank`), whose reductions are the identity.
:func:`world` is the communicator of the running program; a grid may be given
another one (``GridCartesian(dims, comm=SingleRank())`` makes a one-rank
lattice inside an MPI job, as the tests do for their references).

Ranks form a processor grid: rank = sum_d c_d * prod_{d' < d} P_{d'} with
dimension 0 fastest, as lattice sites are numbered.
"""
from __future__ import annotations

import math
import os

from ..errors import GridError
from .base import CommStats, Communicator, layout_str
from .layout import default_mpi_layout, processor_coor, rank_of

__all__ = ["Communicator", "CommStats", "SingleRank", "world", "default_mpi_layout", "processor_coor",
           "rank_of", "launched_by_mpi", "layout_str", "ranks_on_this_node", "rank_on_this_node"]

#: the job size that MPI launchers (MPICH/Hydra, Open MPI, MVAPICH, Slurm) put in every process they start
_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE", "PMIX_SIZE", "SLURM_STEP_NUM_TASKS")


class SingleRank(Communicator):
    """The communicator of a program running as one process."""

    size = 1
    rank = 0

    def sum(self, value):
        return value

    def max(self, value):
        return value

    def barrier(self):
        pass

    def bcast(self, obj, root=0):
        return obj

    def allgather(self, obj):
        return [obj]

    def allgather_array(self, a):
        return a[None].copy()

    def exchange(self, sends, recvs):
        if sends or recvs:
            raise GridError("a one-rank communicator has no neighbours to exchange with")
        return _NoRequests()

    def abort(self, message, code=1):
        raise SystemExit(code)


class _NoRequests:
    def test(self):
        return True

    def wait(self):
        pass


def launched_by_mpi():
    """Whether an MPI launcher started this process as one of several ranks
    (``PYGRID_MPI=1`` / ``0`` forces the answer).  A one-process launch runs as
    one rank without MPI, so a single-task ``srun`` needs no mpi4py."""
    force = os.environ.get("PYGRID_MPI")
    if force is not None:
        return force.strip() not in ("", "0", "false", "no")
    for var in _SIZE_VARS:
        n = os.environ.get(var, "").split("(")[0].strip()
        if n.isdigit() and int(n) > 1:
            return True
    return False


def ranks_on_this_node():
    """Ranks an MPI launcher started on this node (1 outside MPI): they share its cores."""
    for var in ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"):
        n = os.environ.get(var, "").split("(")[0]
        if n.isdigit() and int(n) > 0:
            return int(n)
    return 1


#: the rank among those on its node that MPI launchers (MPICH's and Intel MPI's Hydra, Open MPI,
#: MVAPICH, Cray PALS) and Slurm's srun put in every process they start, the launchers' first
_LOCAL_RANK_VARS = ("MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK",
                    "PALS_LOCAL_RANKID", "SLURM_LOCALID")


def rank_on_this_node():
    """This process's place among the ranks started on its node (0 outside MPI), read from the
    launcher's environment, so that it is known before MPI starts: a GPU backend gives each rank on
    a node its own device."""
    for var in _LOCAL_RANK_VARS:
        n = os.environ.get(var, "").strip()
        if n.isdigit():
            return int(n)
    return 0


_world = None


def world():
    """The communicator of this program: MPI's COMM_WORLD under a launcher, else one rank."""
    global _world
    if _world is None:
        if launched_by_mpi():
            from .mpi import MpiComm

            _world = MpiComm.world()
        else:
            _world = SingleRank()
    return _world


def check_ranks(mpi_layout, comm):
    """The processor coordinates of ``comm``'s rank in ``mpi_layout``, or a GridError naming the mismatch."""
    n = math.prod(mpi_layout)
    if n != comm.size:
        how = ("this program runs as 1 process; start it with `mpiexec -n "
               f"{n} ...` or use --mpi {layout_str((1,) * len(mpi_layout))}" if comm.size == 1
               else f"the job has {comm.size} ranks; choose an --mpi layout whose product is {comm.size}")
        raise GridError(f"--mpi {layout_str(mpi_layout)} asks for {n} ranks, but {how}")
    return processor_coor(comm.rank, mpi_layout)
