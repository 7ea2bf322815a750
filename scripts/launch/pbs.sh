#!/bin/bash
# PBS Pro / Torque: two nodes, four GPUs each. The first host of $PBS_NODEFILE hosts the rendezvous
# store; mpirun starts one rank per GPU slot (OpenMPI's variables give the ranks).
#   qsub -v CONFIG=configs/gpt_char.yaml scripts/launch/pbs.sh
#PBS -N trainer
#PBS -l select=2:ncpus=48:ngpus=4:mpiprocs=4
#PBS -l walltime=24:00:00
#PBS -j oe
set -euo pipefail
cd "$PBS_O_WORKDIR"
TRAINER=${TRAINER:-trainer}
export MASTER_ADDR=$(head -n 1 "$PBS_NODEFILE")
export MASTER_PORT=$((20000 + ${PBS_JOBID%%.*} % 20000))   # per job, like the SLURM default
NP=$(wc -l < "$PBS_NODEFILE")
mpirun -np "$NP" --hostfile "$PBS_NODEFILE" -x MASTER_ADDR -x MASTER_PORT \
  "$TRAINER" run "$CONFIG" --resume auto
