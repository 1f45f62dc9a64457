#!/usr/bin/env bash
# The main job of README.md, end to end on the embedded defaults.
#
# First version (label store): set-up (packages + build), start mlcd-labelstore on loopback
# with its data under ./.mlcd/, create a label set, load 60000 x 8 labels through
# `mlcdctl labels put`, read them all back and compare, time random batched reads, print the
# figures, stop the store cleanly. Later issues grow this into the full training job.
#
#   scripts/run_main_job.sh
#   MLCD_BUILD_DIR=dir MLCD_STATE_DIR=dir MLCD_MAIN_JOB_ROWS=60000 scripts/run_main_job.sh
#   MLCD_SKIP_SETUP=1 ...   skips packages + build (binaries already built in the build dir)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
if [ "${MLCD_SKIP_SETUP:-0}" != 1 ]; then
  "$root/scripts/setup.sh"
fi

build_dir=${MLCD_BUILD_DIR:-$root/build}
bin=$build_dir/bin
state_dir=${MLCD_STATE_DIR:-$root/.mlcd}
work=$state_dir/main-job
rows=${MLCD_MAIN_JOB_ROWS:-60000}
k=1000
l=8
set_name=main-job/r0
python=/usr/bin/python3
mkdir -p "$work"

free_port() { "$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
port=$(free_port)
metrics_port=$(free_port)
export MLCD_LABELSTORE=127.0.0.1:$port

echo "main job: starting mlcd-labelstore on $MLCD_LABELSTORE (metrics :$metrics_port, data $state_dir/labelstore)"
"$bin/mlcd-labelstore" --listen "$MLCD_LABELSTORE" --metrics-listen "127.0.0.1:$metrics_port" \
  --data-dir "$state_dir/labelstore" >"$work/labelstore.log" 2>&1 &
store_pid=$!
stop_store() {
  if kill -0 "$store_pid" 2>/dev/null; then
    kill -TERM "$store_pid"
    wait "$store_pid" || true
  fi
}
trap stop_store EXIT

for _ in $(seq 1 100); do
  if "$bin/mlcdctl" --timeout 2 labels list >/dev/null 2>&1; then break; fi
  if ! kill -0 "$store_pid" 2>/dev/null; then
    echo "main job: mlcd-labelstore exited; its log:" >&2
    cat "$work/labelstore.log" >&2
    exit 1
  fi
  sleep 0.2
done

# Synthetic top-l assignments: l distinct cluster ids in [0, k) per sample, deterministic.
"$python" - "$work/labels.npy" "$rows" "$k" "$l" <<'EOF'
import sys
import numpy as np
path, n, k, l = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = np.random.default_rng(0)
base = rng.integers(0, k, size=(n, 1))
stride = k // l
np.save(path, ((base + stride * np.arange(l)[None, :]) % k).astype(np.int32))
EOF

"$bin/mlcdctl" labels delete --name "$set_name" --allow-missing >/dev/null
"$bin/mlcdctl" labels create --name "$set_name" --k "$k" --l "$l" --meta source=run_main_job.sh >/dev/null
"$bin/mlcdctl" -o json labels put --name "$set_name" --labels "$work/labels.npy" --seal >"$work/put.json"
"$bin/mlcdctl" -o json labels get --name "$set_name" --ids "0:$rows" --out "$work/labels_back.npy" >"$work/get.json"
"$bin/mlcdctl" -o json labels bench --name "$set_name" --batch 1024 --seconds 2 >"$work/bench1024.json"
"$bin/mlcdctl" -o json labels bench --name "$set_name" --batch 1 --seconds 1 >"$work/bench1.json"
"$bin/mlcdctl" labels describe --name "$set_name"

"$python" - "$work" "$metrics_port" <<'EOF'
import json, sys, urllib.request
import numpy as np
work, metrics_port = sys.argv[1], sys.argv[2]
put = json.load(open(f"{work}/put.json"))
get = json.load(open(f"{work}/get.json"))
b1024 = json.load(open(f"{work}/bench1024.json"))
b1 = json.load(open(f"{work}/bench1.json"))
sent, back = np.load(f"{work}/labels.npy"), np.load(f"{work}/labels_back.npy")
if sent.shape != back.shape or not (sent == back).all() or get["missing_ids"]:
    sys.exit("main job: labels read back differ from those written")
print(f"write (mlcdctl labels put, {put['messages']} stream messages): {put['rows_written']} rows "
      f"in {put['seconds']:.3f} s = {put['rows_per_second']:,.0f} rows/s (WAL synced before ack)")
print(f"read back all {get['num_ids']} rows in one call: {get['seconds'] * 1e3:.1f} ms = "
      f"{get['num_ids'] / get['seconds']:,.0f} rows/s; identical to what was written")
for b in (b1024, b1):
    print(f"GetLabels, batches of {b['batch']} random ids: {b['rows_per_second']:,.0f} rows/s, "
          f"p50 {b['p50_ms']:.3f} ms, p99 {b['p99_ms']:.3f} ms ({b['calls']} calls)")
text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
for line in text.splitlines():
    if line.startswith(("mlcd_labelstore_ids_read_total", "mlcd_labelstore_rows_written_total",
                        "mlcd_labelstore_requests_total")):
        print("metric", line)
EOF

kill -TERM "$store_pid"
if wait "$store_pid"; then
  echo "main job: label store stopped cleanly (log: $work/labelstore.log)"
else
  echo "main job: label store exited with an error; see $work/labelstore.log" >&2
  exit 1
fi
trap - EXIT
echo "main job: done"
