#!/usr/bin/env bash
# The interop tests (CTest label `interop`): our exports, event files and gRPC API driven by
# the other side's own Python libraries (transformers, safetensors, tensorboard, the generated
# Python client), from the pip flavour's virtual environment (build-torch2/venv, pinned
# packages of scripts/interop-requirements.txt). Called by scripts/run_tests.sh after the
# torch 2.x stage (MLCD_SKIP_INTEROP=1 leaves it out); runs on its own too:
#   scripts/run_interop_tests.sh [ctest args...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
jobs=${MLCD_JOBS:-$(nproc)}
build_dir=${MLCD_BUILD_DIR:-$root/build}
torch2_dir=${MLCD_TORCH2_BUILD_DIR:-$root/build-torch2}
start=$(date +%s)
# The venv (torch wheel + interop packages); configure only, the torch 2.x stage builds.
MLCD_TORCH=pip MLCD_BUILD_DIR="$torch2_dir" MLCD_SETUP_CONFIGURE_ONLY=1 \
  MLCD_CMAKE_ARGS="-DMLCD_WERROR=ON -DMLCD_BUILD_BENCH=OFF" "$root/scripts/setup.sh"
mapfile -t targets < <(ctest --test-dir "$build_dir" -L '^interop$' -N 2>/dev/null |
                        sed -n 's/^ *Test *#[0-9]*: *//p')
if ((${#targets[@]} == 0)); then
  echo "run_interop_tests: no test carries the label interop in $build_dir" >&2
  exit 1
fi
cmake -S "$root" -B "$build_dir" -DMLCD_INTEROP_PYTHON="$torch2_dir/venv/bin/python3" >/dev/null
cmake --build "$build_dir" -j "$jobs" --target "${targets[@]}"
ctest --test-dir "$build_dir" -L '^interop$' --output-on-failure -j "${MLCD_TEST_JOBS:-2}" "$@"
echo "interop: passed in $(( $(date +%s) - start )) s"
