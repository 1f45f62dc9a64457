#!/usr/bin/env bash
# The test command of README.md: set-up (packages + a build with warnings as errors), every
# CTest suite, then the sanitizer builds' unit tests of the threaded parts
# (scripts/run_sanitizer_tests.sh; MLCD_SKIP_SANITIZERS=1 leaves them out), then the worker's
# suites built against the torch wheel's libtorch 2.x with CUDA and NCCL, run on the CPU
# (scripts/run_torch2_tests.sh; MLCD_SKIP_TORCH2=1 leaves them out).
#   scripts/run_tests.sh [ctest args...]     e.g. scripts/run_tests.sh -L unit
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
MLCD_CMAKE_ARGS="${MLCD_CMAKE_ARGS:-} -DMLCD_WERROR=ON" "$root/scripts/setup.sh"
build_dir=${MLCD_BUILD_DIR:-$root/build}
start=$(date +%s)
ctest --test-dir "$build_dir" --output-on-failure -j "${MLCD_TEST_JOBS:-2}" "$@"
echo "tests: passed in $(( $(date +%s) - start )) s"
if [ "${MLCD_SKIP_SANITIZERS:-0}" != 1 ]; then
  "$root/scripts/run_sanitizer_tests.sh"
fi
if [ "${MLCD_SKIP_TORCH2:-0}" != 1 ]; then
  "$root/scripts/run_torch2_tests.sh"
fi
