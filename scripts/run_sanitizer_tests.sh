#!/usr/bin/env bash
# The unit tests of the threaded parts (CTest label `sanitize`: common/ with the prefetch
# queue, the label store's storage, the coordinator's persisted state and gang scheduler)
# under AddressSanitizer + UndefinedBehaviorSanitizer and under ThreadSanitizer; the ASan
# build also runs the suites of label `asan` (the services without torch over gRPC: label
# store, clusterd, coordinator protocol, mlcdctl). Each build has a folder of its own
# (build-asan, build-tsan) and compiles only the targets those tests need, none of them torch.
# Both use clang (installed for the fuzzers): it compiles an instrumented translation unit in
# about half of GCC's time (bench/RESULTS.md, "Test command time"), which keeps the test command
# inside CI's budget; a folder configured with another compiler is made again. Called by
# scripts/run_tests.sh; runs on its own too:
#   scripts/run_sanitizer_tests.sh              # both
#   scripts/run_sanitizer_tests.sh address,undefined
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
jobs=${MLCD_JOBS:-$(nproc)}
kinds=("$@")
((${#kinds[@]})) || kinds=(address,undefined thread)

for kind in "${kinds[@]}"; do
  case "$kind" in
    address,undefined) dir="$root/build-asan" labels='^(sanitize|asan)$' ;;
    thread) dir="$root/build-tsan" labels='^sanitize$' ;;
    *) echo "run_sanitizer_tests: unknown sanitizer '$kind' (use address,undefined or thread)" >&2; exit 2 ;;
  esac
  start=$(date +%s)
  if [ -f "$dir/CMakeCache.txt" ] && ! grep -q '^CMAKE_CXX_COMPILER:FILEPATH=.*clang++' "$dir/CMakeCache.txt"; then
    echo "sanitizers ($kind): $dir was configured with another compiler; configuring it again with clang"
    rm -rf "$dir"
  fi
  if [ ! -f "$dir/build.ninja" ]; then
    cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMLCD_SANITIZE="$kind" \
      -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
      -DMLCD_WERROR=ON -DMLCD_BUILD_BENCH=OFF >/dev/null
  else
    cmake -S "$root" -B "$dir" >/dev/null  # the test list below comes from the configure step
  fi
  # The test binaries of the label, as CTest lists them.
  mapfile -t targets < <(ctest --test-dir "$dir" -L "$labels" -N 2>/dev/null |
                          sed -n 's/^ *Test *#[0-9]*: *//p')
  if ((${#targets[@]} == 0)); then
    echo "run_sanitizer_tests: no test carries the labels $labels in $dir" >&2
    exit 1
  fi
  echo "sanitizers ($kind): building ${targets[*]} in $dir"
  cmake --build "$dir" -j "$jobs" --target "${targets[@]}"
  ctest --test-dir "$dir" -L "$labels" --output-on-failure -j "${MLCD_TEST_JOBS:-2}"
  echo "sanitizers ($kind): passed in $(( $(date +%s) - start )) s"
done
