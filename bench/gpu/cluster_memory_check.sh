#!/usr/bin/env bash
# Issue 28, item 5 on a GPU: the gang refuses, before it reads a row, a share of rows that
# cannot fit the CUDA device, naming the bytes, what the device has free and the world size
# that would fit. The features are a sparse .npy (a header, then a hole) of 200 GiB, so no
# disk or memory is used; a refusal that read them would take minutes instead of a second.
#   bench/gpu/cluster_memory_check.sh BIN   (BIN/mlcd-worker; LD_LIBRARY_PATH set as unpack.sh says)
set -uo pipefail
bin=${1:-.devbin}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$tmp/sparse.npy" <<'PY'
import sys, numpy as np
rows, d = 200 * (1 << 30) // 1024, 256
with open(sys.argv[1], "wb") as f:
    np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": (rows, d)})
    f.truncate(f.tell() + rows * d * 4)
print("sparse features: %d x %d float32 (%.0f GiB)" % (rows, d, rows * d * 4 / 2**30))
PY
du -h "$tmp/sparse.npy"
start=$(date +%s.%N)
"$bin/mlcd-worker" cluster-gang --features "$tmp/sparse.npy" --k 1000 --niter 1 --device cuda \
  --bf16 --out "$tmp/out" > "$tmp/stdout" 2> "$tmp/stderr"
rc=$?
end=$(date +%s.%N)
echo "rc $rc in $(python3 -c "print(round($end - $start, 2))") s"
cat "$tmp/stderr" | tail -5
if [ "$rc" -ne 0 ] && grep -q "cuda:0 has" "$tmp/stderr" && grep -q "world size of" "$tmp/stderr"; then
  echo "cluster_memory_check: PASS (refused before reading, naming the device's free bytes)"
else
  echo "cluster_memory_check: FAIL"
  exit 1
fi
