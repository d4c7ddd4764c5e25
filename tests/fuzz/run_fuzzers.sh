#!/usr/bin/env bash
# Runs each libFuzzer target of BUILD_DIR for SECONDS (default 60) on a corpus kept in
# BUILD_DIR/fuzz-corpus/<target>, seeded from tests/data/configs/ (the config reader) and
# tests/fuzz/seeds/ (inspect's arguments); as many targets at a time as there are cores (FUZZ_JOBS
# overrides), each on one. Exits non-zero if any target found a crash, leak, timeout or
# out-of-memory, after printing the end of its log; libFuzzer leaves the input as
# BUILD_DIR/fuzz-corpus/crash-* for a regression test.
#   tests/fuzz/run_fuzzers.sh build-fuzz 60 [target...]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:?usage: run_fuzzers.sh BUILD_DIR [SECONDS] [target...]}
seconds=${2:-60}
shift $(( $# >= 2 ? 2 : 1 ))
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_config fuzz_inspect_args fuzz_encodings fuzz_attention)
jobs=${FUZZ_JOBS:-$(nproc)}

# One target; its exit status goes to fuzz-corpus/<target>.rc.
run_one() {
  local t=$1 corpus="$build/fuzz-corpus/$1" seeds=() rc=0
  mkdir -p "$corpus"
  case $t in
    fuzz_config) seeds=(tests/data/configs) ;;
    fuzz_inspect_args) seeds=(tests/fuzz/seeds/inspect_args) ;;
  esac
  # -timeout: one input may take 10 s at most; -rss_limit_mb: 2 GiB.
  "$build/tests/fuzz/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$build/fuzz-corpus/" "$corpus" "${seeds[@]}" >"$build/fuzz-corpus/$t.log" 2>&1 || rc=$?
  echo "$rc" >"$build/fuzz-corpus/$t.rc"
}

mkdir -p "$build/fuzz-corpus"
for t in "${targets[@]}"; do rm -f "$build/fuzz-corpus/$t.rc"; done  # a target that dies without one failed
echo "== ${targets[*]}: ${seconds} s each, ${jobs} at a time"
running=0
for t in "${targets[@]}"; do
  if [ "$running" -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
  run_one "$t" &
  running=$((running + 1))
done
wait

status=0
for t in "${targets[@]}"; do
  log="$build/fuzz-corpus/$t.log"
  rc=$(cat "$build/fuzz-corpus/$t.rc" 2>/dev/null || echo 1)
  echo "== $t: exit $rc"
  grep -E "^(Done|stat::number_of_executed_units)" "$log" || true
  if [ "$rc" -ne 0 ]; then
    tail -n 60 "$log"
    status=$rc
  fi
done
exit "$status"
