#!/usr/bin/env bash
# Second GPU run (bench/RESULTS.md "GPU step"): where the step's time goes as the host's
# threads and the batch change, and the 2-rank NCCL attempt on one GPU. $1 = bench/gpu/pack.sh
# folder, $2 = results folder.
set -uo pipefail
bin=${1:-.devbin}
out=${2:-/tmp/gpu-out}
mkdir -p "$out"
torch_lib=$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__) + "/lib")')
export LD_LIBRARY_PATH="$torch_lib:$PWD/$bin/lib"
run() {  # name, args...
  local name=$1; shift
  echo "== $name: $*"
  "$bin/worker_step_bench" --preset vit-b16 --device cuda --warmup 2 --steps 5 "$@" \
    --out "$out/$name.json" 2>&1 | grep -E 'images_per_second|median_step|classification_layer"|backbone_(forward|backward)"|centre_opt|error|UNAVAIL|INVALID'
}
run b64_bf16_t16_l0 --batch 64 --precision bf16 --threads 16 --layer-threads 0
run b64_bf16_t8_l1 --batch 64 --precision bf16 --threads 8 --layer-threads 1
run b256_bf16_t16_l0 --batch 256 --precision bf16 --threads 16 --layer-threads 0
run b256_fp32_t16_l0 --batch 256 --precision fp32 --threads 16 --layer-threads 0
run b256_bf16_k10k --batch 256 --precision bf16 --threads 16 --layer-threads 0 --classes 10000
echo "== 2 ranks, NCCL, one GPU"
for r in 0 1; do
  timeout 120 "$bin/worker_step_bench" --preset vit-b16 --batch 64 --device cuda:0 --precision bf16 \
    --warmup 1 --steps 2 --world-size 2 --rank "$r" --rendezvous 127.0.0.1:29533 \
    > "$out/nccl_rank$r.log" 2>&1 &
done
wait
grep -h worker_step_bench "$out"/nccl_rank*.log
