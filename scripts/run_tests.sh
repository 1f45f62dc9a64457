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
suite_start=$(date +%s)
# The pip flavour's virtual environment (the torch wheel and the interop packages, ~5.5 GB from
# PyPI on a new machine) is made in the background while the first build compiles: the
# download needs the network, the build the cores. Packages of both flavours are installed
# first so that the two never run apt-get at once.
venv_pid=""
torch2_dir=${MLCD_TORCH2_BUILD_DIR:-$root/build-torch2}
venv_log="$torch2_dir/venv-setup.log"
if [ "${MLCD_SKIP_TORCH2:-0}" != 1 ] || [ "${MLCD_SKIP_INTEROP:-0}" != 1 ]; then
  MLCD_TORCH=pip MLCD_BUILD_DIR="$torch2_dir" MLCD_SETUP_PACKAGES_ONLY=1 "$root/scripts/setup.sh"
  mkdir -p "$torch2_dir"
  MLCD_TORCH=pip MLCD_BUILD_DIR="$torch2_dir" MLCD_SETUP_VENV_ONLY=1 "$root/scripts/setup.sh" \
    >"$venv_log" 2>&1 &
  venv_pid=$!
fi
# Waits for the background venv set-up; its log is printed if it failed.
wait_for_venv() {
  [ -n "$venv_pid" ] || return 0
  if ! wait "$venv_pid"; then
    echo "run_tests: setting up the pip flavour's virtual environment failed:" >&2
    cat "$venv_log" >&2
    exit 1
  fi
  venv_pid=""
  echo "venv: ready (its set-up log: $venv_log)"
}
MLCD_CMAKE_ARGS="${MLCD_CMAKE_ARGS:-} -DMLCD_WERROR=ON" "$root/scripts/setup.sh"
echo "build: done $(( $(date +%s) - suite_start )) s after the start"
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
  wait_for_venv
  "$root/scripts/run_torch2_tests.sh"
fi
if [ "${MLCD_SKIP_INTEROP:-0}" != 1 ]; then
  wait_for_venv
  "$root/scripts/run_interop_tests.sh"
fi
echo "all stages: passed in $(( $(date +%s) - suite_start )) s"
