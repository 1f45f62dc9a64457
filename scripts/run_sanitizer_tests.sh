#!/usr/bin/env bash
# The unit tests of the threaded parts (CTest label `sanitize`: common/ with the prefetch
# queue, the label store's storage, the coordinator's persisted state and gang scheduler)
# under AddressSanitizer + UndefinedBehaviorSanitizer and under ThreadSanitizer. Each build
# has a folder of its own (build-asan, build-tsan) and compiles only the targets those
# tests need, none of them torch. Called by scripts/run_tests.sh; runs on its own too:
#   scripts/run_sanitizer_tests.sh              # both
#   scripts/run_sanitizer_tests.sh address,undefined
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
jobs=${MLCD_JOBS:-$(nproc)}
kinds=("$@")
((${#kinds[@]})) || kinds=(address,undefined thread)

for kind in "${kinds[@]}"; do
  case "$kind" in
    address,undefined) dir="$root/build-asan" ;;
    thread) dir="$root/build-tsan" ;;
    *) echo "run_sanitizer_tests: unknown sanitizer '$kind' (use address,undefined or thread)" >&2; exit 2 ;;
  esac
  start=$(date +%s)
  if [ ! -f "$dir/build.ninja" ]; then
    cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMLCD_SANITIZE="$kind" \
      -DMLCD_WERROR=ON -DMLCD_BUILD_BENCH=OFF >/dev/null
  fi
  # The test binaries of the label, as CTest lists them.
  mapfile -t targets < <(ctest --test-dir "$dir" -L sanitize -N 2>/dev/null |
                          sed -n 's/^ *Test *#[0-9]*: *//p')
  if ((${#targets[@]} == 0)); then
    echo "run_sanitizer_tests: no test carries the label 'sanitize' in $dir" >&2
    exit 1
  fi
  echo "sanitizers ($kind): building ${targets[*]} in $dir"
  cmake --build "$dir" -j "$jobs" --target "${targets[@]}"
  ctest --test-dir "$dir" -L sanitize --output-on-failure -j "${MLCD_TEST_JOBS:-2}"
  echo "sanitizers ($kind): passed in $(( $(date +%s) - start )) s"
done
