#!/usr/bin/env bash
# The test command of README.md: set-up (packages + a build with warnings as errors), every
# CTest suite, then the sanitizer builds' unit tests of the threaded parts
# (scripts/run_sanitizer_tests.sh; MLCD_SKIP_SANITIZERS=1 leaves them out), then a short run of
# every libFuzzer target (clang; MLCD_FUZZ_SECONDS each, default 15, fixed seed; a crash fails
# the tests; MLCD_SKIP_FUZZ=1 leaves it out; scripts/run_fuzzers.sh), then the worker's
# suites built against the torch wheel's libtorch 2.x with CUDA and NCCL, run on the CPU
# (scripts/run_torch2_tests.sh; MLCD_SKIP_TORCH2=1 leaves them out), then the interop tests
# with the Python side's own libraries (scripts/run_interop_tests.sh; MLCD_SKIP_INTEROP=1).
#   scripts/run_tests.sh [ctest args...]     e.g. scripts/run_tests.sh -L unit
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
MLCD_CMAKE_ARGS="${MLCD_CMAKE_ARGS:-} -DMLCD_WERROR=ON" "$root/scripts/setup.sh"
build_dir=${MLCD_BUILD_DIR:-$root/build}
start=$(date +%s)
# The interop tests need the pip flavour's venv: their own stage below.
ctest --test-dir "$build_dir" --output-on-failure -j "${MLCD_TEST_JOBS:-2}" -LE '^interop$' "$@"
echo "tests: passed in $(( $(date +%s) - start )) s"
if [ "${MLCD_SKIP_SANITIZERS:-0}" != 1 ]; then
  "$root/scripts/run_sanitizer_tests.sh"
fi
if [ "${MLCD_SKIP_FUZZ:-0}" != 1 ]; then
  start=$(date +%s)
  MLCD_FUZZ_RESULTS="$root/build-fuzz/fuzz-tests.json" MLCD_FUZZ_SEED=1 \
    "$root/scripts/run_fuzzers.sh" "${MLCD_FUZZ_SECONDS:-15}"
  echo "fuzz: passed in $(( $(date +%s) - start )) s"
fi
if [ "${MLCD_SKIP_TORCH2:-0}" != 1 ]; then
  "$root/scripts/run_torch2_tests.sh"
fi
if [ "${MLCD_SKIP_INTEROP:-0}" != 1 ]; then
  "$root/scripts/run_interop_tests.sh"
fi
