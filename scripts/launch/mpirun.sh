#!/bin/bash
# OpenMPI (or MPICH/Intel MPI via PMI_RANK/PMI_SIZE): ranks come from OMPI_COMM_WORLD_*. MPI is only
# the launcher: collectives run over Gloo/NCCL. Rendezvous either at MASTER_ADDR:MASTER_PORT
# (exported to every rank with -x) or through a file on a shared file system (no master needed).
#   scripts/launch/mpirun.sh 8 configs/gpt_char.yaml
set -euo pipefail
NP=${1:?usage: mpirun.sh NPROCS CONFIG [trainer run args...]}; CONFIG=${2:?config}; shift 2
TRAINER=${TRAINER:-trainer}

# one node: a TCPStore on loopback
export MASTER_ADDR=${MASTER_ADDR:-127.0.0.1} MASTER_PORT=${MASTER_PORT:-29500}
mpirun -np "$NP" -x MASTER_ADDR -x MASTER_PORT -x OMP_NUM_THREADS=1 \
  "$TRAINER" run "$CONFIG" "$@"

# several nodes without a known master: a FileStore on a shared path, removed before each job
#   rm -f /shared/$USER/rdzv; mpirun -np 16 --hostfile hosts "$TRAINER" run "$CONFIG" \
#     --set dist.store=file:///shared/$USER/rdzv
