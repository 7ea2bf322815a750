#!/usr/bin/env bash
# Pipeline parallel 2 against one process, with both pipeline ranks on ONE device: each rank is
# started as a node of one local rank (torchrun's variables), so both take local rank 0 (cuda:0, or
# the CPU), and they talk over Gloo (NCCL refuses two ranks on one GPU). scripts/device_check.sh's
# pp section runs it with fp16 on its GPU: the loss scale through the stages and the world's
# overflow vote, on CUDA, where one GPU is all the machine has. It runs on a CPU too (bf16, fp32).
#
#   pp_shared_device.sh TRAINER CONFIG OUT_DIR DEVICE PRECISION STEPS TOL [TIMEOUT_S]
#
# CONFIG's run.name names the run folders OUT_DIR/{one,pp}/<name>; the comparison is
# compare_runs.py's (losses within TOL relative, STEPS steps each). Exit 0 when both ran and agree.
set -uo pipefail
if [ $# -lt 7 ]; then
  sed -n '2,11p' "$0" >&2
  exit 2
fi
trainer=$1 cfg=$2 out=$3 device=$4 precision=$5 steps=$6 tol=$7 limit=${8:-300}
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python3}
name=$(sed -n 's/^run:.*name: *\([A-Za-z0-9_.-]*\).*/\1/p' "$cfg" | head -1)
[ -n "$name" ] || { echo "pp_shared_device: $cfg has no run: {name: ...} line" >&2; exit 2; }
common=(run "$cfg" --force --resume never --set train.device="$device" --set train.precision="$precision"
        --set train.max_steps="$steps")
mkdir -p "$out"
status=0
timeout "$limit" "$trainer" "${common[@]}" --out-dir "$out/one" >"$out/one.log" 2>&1 ||
  { echo "pp_shared_device: the one-process run failed (log: $out/one.log)"; status=1; }
port=$(( 20000 + RANDOM % 20000 ))
pids=()
for r in 0 1; do
  RANK=$r WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 GROUP_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    timeout "$limit" "$trainer" "${common[@]}" --set dist.pipeline_parallel=2 --set dist.backend=gloo \
    --out-dir "$out/pp" >"$out/pp_rank$r.log" 2>&1 &
  pids+=($!)
done
for r in 0 1; do
  wait "${pids[$r]}" || { echo "pp_shared_device: pipeline rank $r failed (log: $out/pp_rank$r.log)"; status=1; }
done
[ $status = 0 ] || exit 1
"$py" "$here/compare_runs.py" "$out" one pp --run "$name" --steps "$steps" --tol "$tol" --show loss_scale pp_bubble \
  --label "pp 2 on one $device ($precision, Gloo) vs one process"
