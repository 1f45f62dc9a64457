#!/usr/bin/env bash
# TLS + token cost on GetLabels (batches 1, 64, 128, 1024) and on a training step, same run.
#
#   bench/security/run_security_bench.sh [BUILD_DIR]
#
# 1. security_bench: GetLabels plaintext vs mTLS + token on real mlcd-labelstore processes,
#    and mTLS + token through a worker agent's label gateway (bench/results/security_tls.json).
#    ownership_bench: label-set ownership checks on WriteLabels / GetLabels, same run
#    (bench/results/security_ownership.json).
# 2. worker_step_bench: the main job's step (vit-tiny, 128 images per rank = the main job's
#    256 per step on 2 ranks, k = 1000, 1 thread) (bench/results/security_step.json).
# 3. The step's RPC: a training step reads its batch's labels once (GetLabels of 128 ids,
#    prefetched ahead by the worker); heartbeats go once a second from the agent, not per
#    step. The step overhead is the extra time of that read over the step time -- an upper
#    bound, since the prefetcher overlaps the read with the previous step.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
out=$root/bench/results
mkdir -p "$out"
"$build/bin/security_bench" --batches 1,64,128,1024 --out "$out/security_tls.json"
# Label-set ownership checks on WriteLabels and GetLabels at batch 1024, checked vs unchecked
# in the same run (issue 30; bench/results/security_ownership.json).
"$build/bin/ownership_bench" --batch 1024 --out "$out/security_ownership.json"
"$build/bin/worker_step_bench" --preset vit-tiny --batch 128 --classes 1000 --threads 1 \
  --steps 10 --warmup 2 --out "$out/security_step.json" > /dev/null
/usr/bin/python3 - "$out/security_tls.json" "$out/security_step.json" <<'PY'
import json, sys
tls = json.load(open(sys.argv[1]))
step = json.load(open(sys.argv[2]))
row = next(r for r in tls["get_labels"] if r["batch"] == 128)
extra = row["mtls_token_seconds_per_call"] - row["plain_seconds_per_call"]
s = step["median_step_seconds"]
print(f"step (vit-tiny, 128 images/rank, 1 thread): {s * 1e3:.1f} ms; its GetLabels(128): "
      f"plain {row['plain_seconds_per_call'] * 1e6:.0f} us, mTLS + token "
      f"{row['mtls_token_seconds_per_call'] * 1e6:.0f} us -> {extra / s * 100:+.3f} % of the step")
gateway = row["gateway_seconds_per_call"] - row["mtls_token_seconds_per_call"]
print(f"through the agent's label gateway (a training child's path): "
      f"{row['gateway_seconds_per_call'] * 1e6:.0f} us -> {gateway / s * 100:+.3f} % of the step "
      f"over mTLS + token")
tls["step"] = {"median_step_seconds": s, "get_labels_batch": 128,
               "extra_seconds_per_step": extra, "overhead_fraction_of_step": extra / s,
               "gateway_extra_seconds_per_step": gateway,
               "gateway_overhead_fraction_of_step": gateway / s}
json.dump(tls, open(sys.argv[1], "w"), indent=2)
PY
