#!/usr/bin/env bash
# The whole system on one GPU machine (issue 27, item 7): a local cluster (label store,
# clusterd, coordinator, one worker agent whose children train on `--device auto` = the GPU)
# runs one job on RGB JPEGs made here at run time, through EXTRACTING (round-0 features are
# the random model's own embeddings), CLUSTERING, ASSIGNING, TRAINING, EVALUATING, then the
# checkpoint is exported (torchvision). The training images/s through the real input
# pipeline (C++ JPEG decode on dataset.loader_threads) is recorded beside the step bench's
# rate at the same batch on the same machine (random tensors, no input pipeline).
#
#   bench/gpu/run_job.sh BIN OUT           # vit-b16 at 224, bf16, batch 256, K = 10 000
#   MLCD_GPU_JOB_SMOKE=1 bench/gpu/run_job.sh build/bin /tmp/job-out   # CPU, tiny shapes
#   MLCD_GPU_JOB_ENGINE=gang   clustering on the worker gang (NCCL on the GPU), not clusterd
#   MLCD_GPU_JOB_PRECISION=bf16   overrides the flavour's precision (the smoke's is fp32)
#
# BIN holds mlcdctl, mlcd-coordinator, mlcd-labelstore, mlcd-clusterd, mlcd-worker (the
# pip flavour's, with CUDA) and worker_step_bench (bench/gpu/pack.sh); the machine needs
# python3 with numpy and Pillow (and torch: its lib folder is put on LD_LIBRARY_PATH).
# Figures: OUT/job.json (mlcdctl get -o json), OUT/step_bench.json, OUT/job_summary.json.
set -uo pipefail
bin=$(cd "${1:?BIN}" && pwd)
out=$(mkdir -p "${2:?OUT}" && cd "$2" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
smoke=${MLCD_GPU_JOB_SMOKE:-0}
py=${MLCD_PYTHON:-python3}
[ -f "$bin/lib.tar.xz" ] && [ ! -d "$bin/lib" ] && tar -C "$bin" -xJf "$bin/lib.tar.xz"
if torch_lib=$("$py" -c 'import os, torch; print(os.path.dirname(torch.__file__) + "/lib")' 2>/dev/null); then
  export LD_LIBRARY_PATH="$torch_lib:$bin/lib:${LD_LIBRARY_PATH:-}"
else
  export LD_LIBRARY_PATH="$bin/lib:${LD_LIBRARY_PATH:-}"
fi
work=$(mktemp -d /tmp/mlcd-gpujob.XXXXXX)
cd "$work" || exit 1
cleanup() { "$bin/mlcdctl" local down --dir "$work/local" >/dev/null 2>&1; }
trap cleanup EXIT
t0=$(date +%s)
stamp() { echo "== $(( $(date +%s) - t0 )) s: $*"; }

if [ "$smoke" = 1 ]; then
  classes=4 train_per=64 test_per=8 width=96 height=72 workers_py=2
  model="preset: vit-tiny
    image_size: 28" k=16 batch=32 epochs=2 threads=1 loaders=2 precision=fp32
  bench_args=(--preset vit-tiny --device cpu)
else
  classes=100 train_per=256 test_per=20 width=512 height=384 workers_py=$(nproc)
  model="preset: vit-b16" k=10000 batch=256 epochs=3 threads=8 loaders=$(( $(nproc) - 4 )) precision=bf16
  bench_args=(--preset vit-b16 --device cuda)
fi

engine=${MLCD_GPU_JOB_ENGINE:-clusterd}
precision=${MLCD_GPU_JOB_PRECISION:-$precision}

stamp "making $((classes * (train_per + test_per))) JPEGs of ${width}x$height"
"$py" "$src/bench/gpu/make_jpegs.py" --out "$work/data" --classes "$classes" \
  --train-per-class "$train_per" --test-per-class "$test_per" --width "$width" --height "$height" \
  --workers "$workers_py" || exit 1
for split in train test; do
  "$bin/mlcdctl" dataset index --format image-folder --path "$work/data/$split" \
    --out "$work/data/$split.idx" || exit 1
done

stamp "local cluster"
"$bin/mlcdctl" local up --workers 1 --dir "$work/local" --ports auto --bin-dir "$bin" --detach \
  > "$out/local_up.log" 2>&1 || { cat "$out/local_up.log"; exit 1; }
# shellcheck disable=SC1091
. "$work/local/env"

cat > "$work/job.yaml" <<SPEC
apiVersion: mlcd/v1
kind: TrainingJob
metadata:
  name: gpu-whole-job
spec:
  dataset:
    format: image-folder
    path: $work/data/train
    index: $work/data/train.idx
    loader_threads: $loaders
  clustering:
    engine: $engine
    features: {kind: model}
    k: $k
    l: 8
  loss:
    variant: mlcd
    sample_ratio: 0.1
  model:
    $model
  training:
    world_size: 1
    batch_size: $batch
    epochs_per_round: $epochs
    threads_per_worker: $threads
    precision: $precision
  evaluation:
    baselines: false
    dataset:
      format: image-folder
      index: $work/data/train.idx
      test_index: $work/data/test.idx
SPEC
cp "$work/job.yaml" "$out/job.yaml"

stamp "submit"
job=$("$bin/mlcdctl" submit "$work/job.yaml" 2>"$out/submit.err" | tail -n 1)
[ -n "$job" ] || { cat "$out/submit.err"; exit 1; }
echo "job $job"
timeout 1500 "$bin/mlcdctl" watch "$job" > "$out/watch.log" 2>&1
rc=$?
"$bin/mlcdctl" get "$job" > "$out/job.txt" 2>&1
"$bin/mlcdctl" -o json get "$job" > "$out/job.json" 2>&1
stamp "job ended (watch exit $rc)"
tail -n 40 "$out/job.txt"

ckpt=$(find "$work/local" -type d -name 'ckpt' -path "*$job*" | head -1)
latest=""
[ -n "$ckpt" ] && [ -f "$ckpt/LATEST" ] && latest="$ckpt/$(cat "$ckpt/LATEST")"
if [ -n "$latest" ]; then
  stamp "export $latest"
  /usr/bin/time -f "export %e s" "$bin/mlcdctl" export --checkpoint "$latest" --format torchvision \
    --out "$work/vit.pt" > "$out/export.log" 2>&1
  ls -la "$work/vit.pt" >> "$out/export.log" 2>&1
  cat "$out/export.log"
fi

stamp "step bench, same batch and shapes, no input pipeline"
"$bin/worker_step_bench" "${bench_args[@]}" --batch "$batch" --classes "$k" --precision "$precision" \
  --threads "$threads" --warmup 3 --steps 10 --out "$out/step_bench.json" > "$out/step_bench.log" 2>&1
tail -n 5 "$out/step_bench.log"

"$py" - "$out" <<'PY'
import json, sys, re
out = sys.argv[1]
summary = {}
try:
    job = json.load(open(f"{out}/job.json"))
    summary["state"] = job.get("state")
    text = json.dumps(job)
    for key in ("samples_per_second", "imagesPerSecond", "images_per_second", "samplesPerSecond"):
        m = re.findall(r'"%s":\s*([0-9.]+)' % key, text)
        if m:
            summary["job_" + key] = [float(x) for x in m]
except Exception as e:  # the figures are still in the text files
    summary["job_error"] = str(e)
try:
    bench = json.load(open(f"{out}/step_bench.json"))
    summary["step_bench"] = {k: v for k, v in bench.items() if not isinstance(v, (list, dict))}
except Exception as e:
    summary["bench_error"] = str(e)
json.dump(summary, open(f"{out}/job_summary.json", "w"), indent=1)
print(json.dumps(summary, indent=1))
PY
stamp "done"
