#!/usr/bin/env bash
# On a GPU machine with the torch wheel the pip flavour was built against (bench/RESULTS.md
# "GPU step"): the step suite on CUDA, a 2-step vit-b16 batch-64 training step on one GPU
# (bf16 and fp32), the loss check on CUDA against the host layer, and 2 ranks over NCCL on
# the one GPU. Binaries and libraries from bench/gpu/pack.sh in $1; results into $2.
set -uo pipefail
bin=${1:-.devbin}
out=${2:-/tmp/gpu-out}
mkdir -p "$out"
torch_lib=$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__) + "/lib")')
export LD_LIBRARY_PATH="$torch_lib:$PWD/$bin/lib"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
python3 -c 'import torch; print("torch", torch.__version__)' | tee -a "$out/gpu.txt"
nproc | tee -a "$out/gpu.txt"
echo "== step suite on CUDA"
"$bin/worker_train_step_test" 2>&1 | tail -25 | tee "$out/train_step_test.txt"
for p in bf16 fp32; do
  echo "== vit-b16 batch 64 $p"
  "$bin/worker_step_bench" --preset vit-b16 --batch 64 --device cuda --precision "$p" \
    --warmup 2 --steps 5 --out "$out/step_vit_b16_$p.json" 2>&1 | tail -30
done
echo "== loss check on CUDA"
python3 bench/gpu/loss_check_cuda.py --worker "$bin/mlcd-worker" --out "$out/loss_check.json" 2>&1 | tail -40
echo "== 2 ranks, NCCL, one GPU"
for r in 0 1; do
  timeout 300 "$bin/worker_step_bench" --preset vit-b16 --batch 64 --device cuda:0 --precision bf16 \
    --warmup 2 --steps 5 --world-size 2 --rank "$r" --rendezvous 127.0.0.1:29533 \
    --out "$out/step_nccl_rank$r.json" > "$out/nccl_rank$r.log" 2>&1 &
done
wait
tail -n 40 "$out/nccl_rank0.log" "$out/nccl_rank1.log"
echo "== gang clustering on the GPU (issue 28)"
timeout 420 python3 bench/gpu/cluster_gang_gpu.py --worker "$bin/mlcd-worker" --out "$out" 2>&1 | tail -60
