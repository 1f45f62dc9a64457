#!/usr/bin/env bash
# The worker's suites (CTest label `torch2`: ViT, collectives over real Gloo groups, the
# classification layer, loss-check, data, label prefetcher, training as real processes, the
# step and its precision policy) built against the `torch` wheel's libtorch 2.x with CUDA and
# NCCL (scripts/setup.sh with MLCD_TORCH=pip, into build-torch2) and run on the CPU; then a
# checkpoint written by the Debian (libtorch 1.13) build is resumed by this one. The build
# compiles only those suites and what they start. Called by scripts/run_tests.sh
# (MLCD_SKIP_TORCH2=1 leaves it out); runs on its own too:
#   scripts/run_torch2_tests.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
jobs=${MLCD_JOBS:-$(nproc)}
dir=${MLCD_TORCH2_BUILD_DIR:-$root/build-torch2}
debian_dir=${MLCD_BUILD_DIR:-$root/build}
start=$(date +%s)

MLCD_TORCH=pip MLCD_BUILD_DIR="$dir" MLCD_SETUP_CONFIGURE_ONLY=1 \
  MLCD_CMAKE_ARGS="-DMLCD_WERROR=ON -DMLCD_BUILD_BENCH=OFF" "$root/scripts/setup.sh"
mapfile -t targets < <(ctest --test-dir "$dir" -L '^torch2$' -N 2>/dev/null |
                        sed -n 's/^ *Test *#[0-9]*: *//p')
if ((${#targets[@]} == 0)); then
  echo "run_torch2_tests: no test carries the label torch2 in $dir" >&2
  exit 1
fi
echo "torch 2.x: building ${targets[*]} in $dir"
cmake --build "$dir" -j "$jobs" --target "${targets[@]}"

# The checkpoint across builds: the Debian build writes, this build reads (in its suite).
cmake --build "$debian_dir" -j "$jobs" --target worker_train_step_test
exchange=$(mktemp -d)
trap 'rm -rf "$exchange"' EXIT
MLCD_CROSS_BUILD_CHECKPOINT="$exchange" MLCD_CROSS_BUILD_MODE=write \
  "$debian_dir/bin/worker_train_step_test" --gtest_filter='CrossBuildCheckpointTest.*' >/dev/null
MLCD_CROSS_BUILD_CHECKPOINT="$exchange" MLCD_CROSS_BUILD_MODE=read \
  ctest --test-dir "$dir" -L '^torch2$' --output-on-failure -j "${MLCD_TEST_JOBS:-2}"
echo "torch 2.x: passed in $(( $(date +%s) - start )) s"
