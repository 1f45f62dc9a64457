#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/, clang with -fsanitize=fuzzer,address,undefined) in
# build-fuzz/ and runs each for SECONDS (default 120) from a copy of its seed corpus, on one
# core each in turn. Writes bench/results/fuzz-latest.json: per target the executions, the seconds it
# ran (less than SECONDS when it stopped at a crash), the corpus size reached and the crashes
# found in this run (their inputs kept under build-fuzz/crashes/<target>/). Exits 1 when any target crashed (after
# writing the JSON), so a crash fails the caller.
#
#   scripts/run_fuzzers.sh [SECONDS] [TARGET ...]
#   MLCD_FUZZ_RESULTS=FILE   the JSON goes there instead (the test command's short run)
#   MLCD_FUZZ_SEED=N         libFuzzer's -seed (default: its own, from the clock)
# A crash input belongs in tests/fuzz/corpus/<target>/ as regression_<what> once fixed: the
# ordinary build's fuzz_replay_<target> test replays it on every run.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-120}
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(npy idx spec checkpoint_index labelstore_request metrics_http annotations)
build=build-fuzz
if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DMLCD_FUZZ=ON -DMLCD_BUILD_TESTS=OFF -DMLCD_BUILD_BENCH=OFF -DMLCD_WERROR=ON >/dev/null
fi
cmake --build "$build" -j2 --target $(printf 'fuzz_%s ' "${targets[@]}")
results_file=${MLCD_FUZZ_RESULTS:-bench/results/fuzz-latest.json}
seed_flag=()
[ -n "${MLCD_FUZZ_SEED:-}" ] && seed_flag=(-seed="$MLCD_FUZZ_SEED")
mkdir -p "$build/crashes" "$build/corpus" "$(dirname "$results_file")"
results="["
crashed=0
for t in "${targets[@]}"; do
  work="$build/corpus/$t"
  rm -rf "$work" && mkdir -p "$work" && cp tests/fuzz/corpus/"$t"/* "$work"/
  log="$build/fuzz_$t.log"
  mkdir -p "$build/crashes/$t"
  stamp="$build/crashes/.start_$t" && touch "$stamp"
  start=$(date +%s)
  set +e
  "$build/bin/fuzz_$t" "$work" -max_total_time="$seconds" -print_final_stats=1 "${seed_flag[@]}" \
    -rss_limit_mb=2048 -timeout=10 -artifact_prefix="$build/crashes/$t/" >"$log" 2>&1
  rc=$?
  set -e
  elapsed=$(($(date +%s) - start))
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  crashes=$(find "$build/crashes/$t" -type f -newer "$stamp" | wc -l)  # this run's
  corpus=$(find "$work" -type f | wc -l)
  echo "fuzz_$t: ${execs:-0} executions in ${elapsed} s, corpus $corpus, crashes $crashes (rc $rc)"
  if [ "$crashes" -gt 0 ] || [ "$rc" -ne 0 ]; then
    crashed=1
    echo "fuzz_$t crashed: inputs in $build/crashes/$t/, log $log" >&2
    tail -40 "$log" >&2
  fi
  results+="{\"target\": \"$t\", \"seconds\": $elapsed, \"executions\": ${execs:-0}, \"corpus\": $corpus, \"crashes\": $crashes, \"exit_code\": $rc},"
done
results="${results%,}]"
echo "{\"fuzzers\": $results, \"machine\": \"$(lscpu | grep 'Model name' | sed 's/.*: *//')\"}" \
  > "$results_file"
echo "wrote $results_file"
exit "$crashed"
