#!/usr/bin/env bash
# The CPU benchmarks of the worker against both libtorch builds in one run (bench/RESULTS.md
# "Two libtorch builds"): the ViT train step (vit-tiny, C++ fused / C++ plain ATen / the same
# model in Python torch of the same version) and the classification layer step (against its
# PartialFC v2-style anchor in Python torch of the same version). Writes
# bench/results/torch-builds/*.json.
#   bench/worker_step/run_torch_builds.sh [debian build dir] [pip build dir] [pip python]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
debian=${1:-$root/build}
pip=${2:-$root/build-torch2}
pip_python=${3:-$pip/venv/bin/python3}
out=$root/bench/results/torch-builds
mkdir -p "$out"
for flavour in debian pip; do
  if [ "$flavour" = debian ]; then dir=$debian python=/usr/bin/python3; else dir=$pip python=$pip_python; fi
  "$dir/bin/worker_vit_bench" --preset vit-tiny --threads 2 --batch 256 --steps 5 --warmup 2 \
    --rounds 2 --python "$python" --out "$out/vit_tiny_$flavour.json"
  "$dir/bin/bench_worker_loss" --mode step --python "$python" --json "$out/loss_step_$flavour.json"
done
