#!/usr/bin/env bash
# Input-pipeline benchmark (bench/RESULTS.md "Input pipeline"): makes web-size JPEGs in an
# ImageFolder tree, then runs in one go
#   1. the C++ side (input_pipeline_bench): the libjpeg-turbo decode-only ceiling and the
#      worker's pipeline (RandomResizedCrop 224 + flip + normalise) on THREADS threads;
#   2. the torchvision side: ImageFolder + PIL + DataLoader(num_workers=THREADS) with the same
#      transforms on the same files;
# and writes both with the ratios to OUT (default bench/results/input_pipeline.json).
#
#   bench/input_pipeline/run_input_pipeline.sh [OUT]
#   COUNT=400 THREADS=2 EPOCHS=3 ROUNDS=3 MLCD_BUILD_DIR=build bench/input_pipeline/run_input_pipeline.sh
#   IMAGES=dir (an existing ImageFolder tree instead of new images), PYTHON=python with
#   torchvision, PIN="taskset -c 0,1" (both sides on the same two cores)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${MLCD_BUILD_DIR:-$root/build}
out=${1:-$root/bench/results/input_pipeline.json}
count=${COUNT:-400}
threads=${THREADS:-2}
epochs=${EPOCHS:-3}
rounds=${ROUNDS:-3}
python=${PYTHON:-/usr/bin/python3}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
images=${IMAGES:-}
if [ -z "$images" ]; then
  images=$work/images
  "$python" "$here/make_images.py" "$images" --count "$count"
fi
# PIN="taskset -c 0,1" runs both sides on the same two cores of a larger machine.
${PIN:-} "$build/bin/input_pipeline_bench" --dir "$images" --threads "$threads" --epochs "$epochs" \
  --rounds "$rounds" --out "$work/cpp.json"
${PIN:-} "$python" "$here/input_pipeline_torchvision.py" "$images" --workers "$threads" \
  --batch 64 --epochs "$epochs" --out "$work/torchvision.json" > /dev/null
"$python" - "$work/cpp.json" "$work/torchvision.json" "$out" <<'PY'
import json, os, subprocess, sys, time
cpp, tv = (json.load(open(p)) for p in sys.argv[1:3])
ours, ceiling, loader = cpp["train"], cpp["decode_ceiling"], tv["loader"]
lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
model = next((l.split(":", 1)[1].strip() for l in lscpu.splitlines() if l.startswith("Model name")), "")
result = {
    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    "cpu": model, "cores": int(subprocess.run(["nproc"], capture_output=True, text=True).stdout),
    "load_average": open("/proc/loadavg").read().split()[:3],
    "pinned": os.environ.get("PIN", ""),
    "cpp": cpp, "torchvision": tv,
    "speedup_vs_torchvision": ours["images_per_second"] / loader["images_per_second"],
    "speedup_vs_torchvision_per_cpu": ours["images_per_cpu_second"] / loader["images_per_cpu_second"],
    "share_of_decode_ceiling": ours["images_per_second"] / ceiling["images_per_second"],
    "share_of_decode_ceiling_per_cpu": ours["images_per_cpu_second"] / ceiling["images_per_cpu_second"],
    # ViT-B/16 at the paper's step: 32800 images / 80 GPUs / 0.49 s = ~840 images/s per GPU.
    "cores_for_840_images_per_second": 840 / ours["images_per_cpu_second"],
    "torchvision_cores_for_840_images_per_second": 840 / loader["images_per_cpu_second"],
}
json.dump(result, open(sys.argv[3], "w"), indent=2)
print(f"{cpp['images']} JPEGs, mean {cpp['mean_kb']:.1f} KB; {cpp['threads']} threads; load {result['load_average']}")
for name, r in (("decode-only ceiling", ceiling), ("ours: RRC+flip+normalise", ours),
                ("ours, no region decode", cpp["train_no_region_decode"]), ("ours, whole decode", cpp["train_whole_decode"]), ("ours: eval", cpp["eval"]),
                ("torchvision DataLoader", loader)):
    print(f"{name:28s} {r['images_per_second']:8.1f} images/s  {r['images_per_cpu_second']:8.1f} images/cpu-s")
print(f"PIL decode, 1 thread: {tv['pil_decode_one_thread']['images_per_second']:.1f} images/s")
print("ours vs torchvision: {:.2f}x (wall), {:.2f}x (per cpu)".format(
    result["speedup_vs_torchvision"], result["speedup_vs_torchvision_per_cpu"]))
print("ours / decode ceiling: {:.2f} (wall), {:.2f} (per cpu)".format(
    result["share_of_decode_ceiling"], result["share_of_decode_ceiling_per_cpu"]))
print("ours, share of pool time:", {k: round(v, 3) for k, v in ours["share"].items()})
print("torchvision, share of one-thread time:",
      {k: round(v, 3) for k, v in tv["stages_one_thread"]["share"].items()})
print("cores for 840 images/s: ours {:.2f}, torchvision {:.2f}".format(
    result["cores_for_840_images_per_second"], result["torchvision_cores_for_840_images_per_second"]))
print("wrote", sys.argv[3])
PY
