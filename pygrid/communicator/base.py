"""What every communicator provides, and the statistics it keeps."""
from __future__ import annotations

from dataclasses import dataclass


def layout_str(layout):
    return ".".join(str(int(p)) for p in layout)


@dataclass
class CommStats:
    """Halo traffic of one communicator since the last ``reset()``.

    ``messages`` and ``bytes_sent`` count the halos sent as messages; ``shared_transfers`` and
    ``shared_bytes`` those read straight from a neighbour's memory on the same node, one
    transfer per neighbour and face (:mod:`pygrid.communicator.shared`).  ``comm_s`` is the
    time from posting an exchange until it was seen complete; ``exposed_s`` the part of it a
    rank spent blocked waiting, with nothing left to compute: 1 - exposed / comm is the fraction
    hidden behind computation.
    """

    exchanges: int = 0
    messages: int = 0
    bytes_sent: int = 0
    shared_transfers: int = 0
    shared_bytes: int = 0
    comm_s: float = 0.0
    exposed_s: float = 0.0
    pack_s: float = 0.0

    def reset(self):
        self.exchanges = self.messages = self.bytes_sent = self.shared_transfers = self.shared_bytes = 0
        self.comm_s = self.exposed_s = self.pack_s = 0.0


class Communicator:
    """Ranks and collectives.  Subclasses: SingleRank, and MpiComm (pygrid.communicator.mpi).

    * ``size``, ``rank``;
    * ``sum(x)`` / ``max(x)``: a number or numpy array reduced over ranks, every rank gets the result;
    * ``barrier()``, ``bcast(obj, root)``, ``allgather(obj)`` (a list, by rank),
      ``allgather_array(a)`` (numpy, stacked by rank);
    * ``exchange(sends, recvs)``: post point-to-point messages, ``sends`` a list of
      (contiguous array, dest rank, tag), ``recvs`` of (array to fill, source rank, tag);
      returns requests with ``test()`` (True once all are complete) and ``wait()``;
    * ``node_ranks()``: {rank: its rank on the node} for the ranks that share this rank's memory
      (none on one rank);
    * ``abort(message)``: end every rank of the job.
    """

    size = 1
    rank = 0

    def __init__(self):
        self.stats = CommStats()

    def node_ranks(self):
        return {}

    @property
    def is_root(self):
        return self.rank == 0

    def __repr__(self):
        return f"{type(self).__name__}(rank {self.rank} of {self.size})"
