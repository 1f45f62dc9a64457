#!/usr/bin/env bash
# The test command of README.md: set-up (packages + build), then every CTest suite.
#   scripts/run_tests.sh [ctest args...]     e.g. scripts/run_tests.sh -L unit
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
build_dir=${MLCD_BUILD_DIR:-$root/build}
start=$(date +%s)
ctest --test-dir "$build_dir" --output-on-failure -j "${MLCD_TEST_JOBS:-2}" "$@"
echo "tests: passed in $(( $(date +%s) - start )) s"
