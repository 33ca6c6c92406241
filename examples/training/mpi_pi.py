"""An ordinary mpi4py program: pi by the midpoint rule, split over the ranks of
MPI_COMM_WORLD and summed with Allreduce; each rank says where it ran (Gather).

Meridian launches it as a gang with Open MPI's mpirun (examples/training/mpi-pi.yaml):
rank 0's member runs mpirun, whose daemons Meridian starts in the other members.
Rank 0 prints one JSON line.
"""

import json
import os
import socket

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
n = 10_000_000
h = 1.0 / n
# This rank's share of the midpoints: i = rank, rank + size, ...
local = sum(4.0 / (1.0 + ((i + 0.5) * h) ** 2) for i in range(rank, n, size)) * h
pi = comm.allreduce(local, op=MPI.SUM)
ranks = comm.allreduce(rank + 1, op=MPI.SUM)  # 1 + 2 + ... + size
where = comm.gather({"rank": rank, "node": os.environ.get("MERIDIAN_NODE", socket.gethostname()),
                     "site": os.environ.get("MERIDIAN_SITE", "")}, root=0)
if rank == 0:
    print(json.dumps({"world_size": size, "pi": pi, "error": abs(pi - 3.141592653589793),
                      "rank_sum": ranks, "ranks": where}), flush=True)
