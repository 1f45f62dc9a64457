#!/usr/bin/env bash
# Every GPU check of the worker in one run, ours and the PyTorch anchor alternating on the same
# card (bench/RESULTS.md "GPU step"; docs/torch-builds.md):
#   1. the suites on CUDA: the step (worker_train_step_test), the layer (worker_partial_fc_test,
#      and worker_partial_fc_device_test when the pack has it); CUDA cases skip on the CPU;
#   2. `mlcd-worker loss-check` against a float64 reference on the device
#      (bench/gpu/loss_check_cuda.py), for every layer in $LAYERS;
#   3. per K, the anchor (bench/gpu/anchor.py: eager and torch.compile), then our
#      worker_step_bench for every layer in $LAYERS: vit-b16, bf16, batch 256, r = 0.1, l = 8,
#      K = 100 000 and K = 1 000 000; then, at the first K, the device layer under
#      training.precision bf16-activations (the backbone's activations bf16 end to end);
#   4. gang clustering on the GPU (bench/gpu/cluster_gang_gpu.py);
#   5. the CPU, same run, on the machine's host cores: the ViT's kernel paths and the backbone
#      AdamW's kernels with the choices checked (worker_vit_bench against Python torch), and
#      the classification layer's device implementation on CPU tensors against the fused host
#      layer (bench_worker_loss --mode step, target <= 1.5x).
# Every figure goes to $out as JSON, and summary.json gathers them; summary.txt is the short
# text. A failed check is named at the end and makes the exit code 1; the others still run.
#
# Machine: one NVIDIA GPU (>= 40 GB for K = 1M), the torch wheel the pip flavour was built
# against importable by $PYTHON (numpy too), a C++ compiler for torch.compile, no network.
# Binaries: bench/gpu/pack.sh build-torch2 .devbin, copied there.
#
#   bench/gpu/run_checks.sh [BIN_DIR=.devbin] [OUT_DIR=/tmp/gpu-out]
#   bench/gpu/run_checks.sh --smoke [BIN_DIR=build/bin] [OUT_DIR=/tmp/gpu-smoke]
#       the CPU, tiny shapes (vit-tiny, batch 8, K = 1000, 3 steps; no test suites, no gang):
#       checks the script end to end; CI runs it (CTest gpu_checks_smoke, label interop).
# Environment: PYTHON (default python3), LAYERS (default "device host": the device layer, the
# CUDA default, and the fused host layer), MLCD_GPU_CHECK_SECONDS (each check's limit,
# default 420).
set -uo pipefail
smoke=0
if [ "${1:-}" = "--smoke" ]; then
  smoke=1
  shift
fi
py=${PYTHON:-python3}
layers=${LAYERS:-device host}
limit=${MLCD_GPU_CHECK_SECONDS:-420}
if ((smoke)); then
  bin=${1:-build/bin}
  out=${2:-/tmp/gpu-smoke}
  device=cpu preset=vit-tiny batch=8 ks="1000" steps=3 warmup=2 modes=eager
  loss_args=(--batch 16 --dim 32 --classes 200 --labels 3 --negatives 40)
  # Tiny shapes time nothing worth comparing: the smoke checks that the step runs, not the choice.
  vit_cpu_args=(--batch 8 --steps 1 --warmup 1 --rounds 1 --both-kernels false)
  layer_cpu_args=(--batch 16 --dim 32 --classes 2000 --steps 1 --warmup 1)
else
  bin=${1:-.devbin}
  out=${2:-/tmp/gpu-out}
  device=cuda preset=vit-b16 batch=256 ks="100000 1000000" steps=15 warmup=5 modes=eager,compile
  loss_args=()
  vit_cpu_args=(--batch 256 --steps 5 --warmup 2 --rounds 3)
  layer_cpu_args=()
  torch_lib=$("$py" -c 'import os, torch; print(os.path.dirname(torch.__file__) + "/lib")')
  export LD_LIBRARY_PATH="$torch_lib:$PWD/$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
failures=()
# step NAME COMMAND...: runs it under the limit, its output into $out/NAME.log (the tail
# shown), and notes a failure.
step() {
  local name=$1
  shift
  echo "== $name"
  local t0=$SECONDS
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  tail -n 15 "$out/$name.log"
  echo "== $name: exit $rc, $((SECONDS - t0)) s"
  ((rc == 0)) || failures+=("$name")
}

{
  if ((smoke)); then
    echo "smoke run on the CPU"
  else
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  fi
  "$py" -c 'import torch; print("torch", torch.__version__)'
  echo "cores $(nproc)"
} | tee "$out/machine.txt"

# 1. The suites on CUDA (their CUDA cases compare with the CPU).
if ((!smoke)); then
  for t in worker_train_step_test worker_partial_fc_test worker_partial_fc_device_test; do
    [ -x "$bin/$t" ] && step "$t" "$bin/$t" --gtest_output="json:$out/$t.gtest.json"
  done
fi

# 2. loss-check against the float64 reference.
for layer in $layers; do
  step "loss_check_$layer" "$py" "$here/loss_check_cuda.py" --worker "$bin/mlcd-worker" \
    --device "$device" "${loss_args[@]}" --layer "$layer" --out "$out/loss_check_$layer.json"
done

# 3. The anchor and ours, alternating, per K.
for k in $ks; do
  step "anchor_k$k" "$py" "$here/anchor.py" --preset "$preset" --batch "$batch" --classes "$k" \
    --modes "$modes" --steps "$steps" --warmup "$warmup" --device "$device" \
    --out "$out/anchor_k$k.json"
  for layer in $layers; do
    step "ours_${layer}_k$k" "$bin/worker_step_bench" --preset "$preset" --batch "$batch" \
      --classes "$k" --device "$device" --precision bf16 --steps "$steps" --warmup "$warmup" \
      --threads 0 --layer "$layer" --out "$out/ours_${layer}_k$k.json"
  done
done

# bf16-activations against the bf16 runs above: the default layer at the first K.
k=${ks%% *}
step "ours_device_k${k}_bf16_activations" "$bin/worker_step_bench" --preset "$preset" \
  --batch "$batch" --classes "$k" --device "$device" --precision bf16-activations \
  --steps "$steps" --warmup "$warmup" --threads 0 --layer device \
  --out "$out/ours_device_k${k}_bf16_activations.json"

# 4. Gang clustering on the GPU.
if ((!smoke)); then
  step cluster_gang "$py" "$here/cluster_gang_gpu.py" --worker "$bin/mlcd-worker" --out "$out"
fi

# 5. The CPU, same run.
step vit_kernels_cpu "$bin/worker_vit_bench" --preset vit-tiny --threads 4 "${vit_cpu_args[@]}" \
  --python "$py" --forward false --out "$out/vit_kernels_cpu.json"
step layer_cpu "$bin/bench_worker_loss" --mode step --skip-anchor --threads 4 "${layer_cpu_args[@]}" \
  --json "$out/layer_cpu.json"

# Everything in one file, and a short text.
"$py" - "$out" <<'EOF'
import glob, json, os, sys
out = sys.argv[1]
summary, lines = {}, []
for path in sorted(glob.glob(os.path.join(out, "*.json"))):
    name = os.path.basename(path)[:-5]
    if name == "summary" or name.endswith(".gtest"):
        continue
    with open(path) as f:
        summary[name] = json.load(f)
for name, value in summary.items():
    if isinstance(value, dict) and isinstance(value.get("step"), dict):
        value = value["step"]  # bench_worker_loss: the figures are under "step"
    for row in value if isinstance(value, list) else [value]:
        if isinstance(row, dict):
            keys = [k for k in ("mode", "classes", "device", "precision", "images_per_second",
                                "images_per_second_rank", "median_step_ms", "median_step_seconds",
                                "layer_fraction_of_step", "chosen_kernels", "chosen_over_aten",
                                "choice_holds", "device_over_host", "pass") if k in row]
            lines.append(name + ": " + ", ".join(f"{k} {row[k]}" for k in keys))
with open(os.path.join(out, "summary.json"), "w") as f:
    json.dump(summary, f, indent=2)
with open(os.path.join(out, "summary.txt"), "w") as f:
    f.write("\n".join(lines) + "\n")
print("\n".join(lines))
print("summary:", os.path.join(out, "summary.json"))
EOF
if ((${#failures[@]})); then
  echo "FAILED: ${failures[*]}"
  exit 1
fi
echo "all checks passed"
