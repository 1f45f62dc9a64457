#!/usr/bin/env bash
# Issue 28's GPU checks alone, on a GPU machine with the torch wheel the pip flavour was built
# against: the gang's CUDA memory refusal (bench/gpu/cluster_memory_check.sh), a job whose
# clustering runs on the gang on the GPU (bench/gpu/run_job.sh, tiny shapes), and the gang
# k-means and top-8 assignment bench (bench/gpu/cluster_gang_gpu.py). Binaries and libraries
# from bench/gpu/pack.sh in $1; results in $2.
#   bench/gpu/run_cluster_checks.sh .devbin "$OUT" [--assign-rows N]
set -uo pipefail
bin=${1:-.devbin}
out=${2:-/tmp/gpu-out}
shift 2 || true
mkdir -p "$out"
export LD_LIBRARY_PATH=$(bench/gpu/unpack.sh "$bin")
export PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c 'import torch; print("torch", torch.__version__)'
  lscpu | grep -E "Model name|^CPU\(s\)"; } | tee "$out/gpu.txt"
echo "== gang memory refusal on CUDA"
timeout 120 bench/gpu/cluster_memory_check.sh "$bin" 2>&1 | tee "$out/cluster_memory_check.txt"
echo "== a job on the gang engine, on the GPU (one rank, NCCL), tiny shapes"
MLCD_GPU_JOB_SMOKE=1 MLCD_GPU_JOB_ENGINE=gang MLCD_GPU_JOB_PRECISION=bf16 \
  timeout 300 bench/gpu/run_job.sh "$bin" /tmp/gang_job > /tmp/gang_job.log 2>&1
echo "run_job exit $?"
grep -E "^== |job |state|SUCCEEDED|FAILED" /tmp/gang_job.log | head -30
cp /tmp/gang_job/job.txt "$out/gang_job.txt" 2>/dev/null
cp /tmp/gang_job/job.json "$out/gang_job.json" 2>/dev/null
tail -n 30 /tmp/gang_job/job.txt 2>/dev/null
echo "== gang clustering on the GPU (issue 28)"
timeout 480 python3 bench/gpu/cluster_gang_gpu.py --worker "$bin/mlcd-worker" --out "$out" "$@" 2>&1 | tail -80
