#!/bin/bash
# torchrun from the project's Python environment starts the ranks (--no_python: trainer is not a
# Python script); trainer reads RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT.
#   scripts/launch/torchrun.sh 2 configs/gpt_char.yaml
# Several nodes: run on each with --nnodes N --node_rank I --master_addr HOST0 --master_port P.
set -euo pipefail
NP=${1:?usage: torchrun.sh NPROC_PER_NODE CONFIG [trainer run args...]}; CONFIG=${2:?config}; shift 2
VENV=${TRAINER_VENV:-$HOME/.cache/trainer/venv-torch-2.11.0}
# the build's binary beside this script, else one on PATH (setup installs nothing there), else TRAINER=
HERE=$(cd "$(dirname "$0")/../.." && pwd)
if [ -z "${TRAINER:-}" ]; then
  if [ -x "$HERE/build/trainer" ]; then TRAINER=$HERE/build/trainer
  else TRAINER=$(command -v trainer || true); fi
fi
[ -n "$TRAINER" ] && [ -x "$TRAINER" ] || { echo "torchrun.sh: no trainer binary: build it (scripts/setup.sh) or pass TRAINER=/path/to/build/trainer" >&2; exit 2; }
[ -x "$VENV/bin/torchrun" ] || { echo "torchrun.sh: no torchrun in $VENV (scripts/setup.sh makes it; or set TRAINER_VENV)" >&2; exit 2; }
# MASTER_PORT: another job on this host may hold torchrun's default 29500
"$VENV/bin/torchrun" --no_python --nproc_per_node "$NP" --master_addr 127.0.0.1 --master_port "${MASTER_PORT:-29500}" \
  "$TRAINER" run "$CONFIG" "$@"
# The same without Python: trainer launch -n "$NP" -- run "$CONFIG"
