#!/usr/bin/env bash
# Runs each libFuzzer target of BUILD_DIR for SECONDS (default 60) on a corpus kept in
# BUILD_DIR/fuzz-corpus/<target>, seeded from tests/data/configs/ (the config reader) and
# tests/fuzz/seeds/ (inspect's arguments); as many targets at a time as there are cores (FUZZ_JOBS
# overrides). Once all have run, prints each one's result and exits non-zero if any found a crash,
# leak, timeout or out-of-memory (the end of its log is printed); libFuzzer leaves the input as
# BUILD_DIR/fuzz-corpus/<target>-crash-* for a regression test.
#   tests/fuzz/run_fuzzers.sh build-fuzz 60 [target...]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:?usage: run_fuzzers.sh BUILD_DIR [SECONDS] [target...]}
seconds=${2:-60}
shift $(( $# >= 2 ? 2 : 1 ))
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_config fuzz_inspect_args fuzz_encodings fuzz_attention)
jobs=${FUZZ_JOBS:-$(nproc)}
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "run_fuzzers.sh: FUZZ_JOBS must be a whole number >= 1, not '$jobs'" >&2; exit 2; }
out="$build/fuzz-corpus"

# One target; its exit status goes to $out/<target>.rc (a target without one has failed).
run_one() {
  local t=$1 seeds=() rc=0
  mkdir -p "$out/$t"
  case $t in
    fuzz_config) seeds=(tests/data/configs) ;;
    fuzz_inspect_args) seeds=(tests/fuzz/seeds/inspect_args) ;;
  esac
  # -timeout: one input may take 10 s at most; -rss_limit_mb: 2 GiB.
  "$build/tests/fuzz/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$out/$t-" "$out/$t" "${seeds[@]}" >"$out/$t.log" 2>&1 || rc=$?
  echo "$rc" >"$out/$t.rc"
}

mkdir -p "$out"
for t in "${targets[@]}"; do rm -f "$out/$t.rc" "$out/$t.log"; done
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT INT TERM   # no fuzzer outlives this script
echo "== ${targets[*]}: ${seconds} s each, ${jobs} at a time"
running=0
for t in "${targets[@]}"; do
  if [ "$running" -ge "$jobs" ]; then wait -n || true; running=$((running - 1)); fi
  run_one "$t" &
  running=$((running + 1))
done
wait || true

status=0
for t in "${targets[@]}"; do
  rc=$(cat "$out/$t.rc" 2>/dev/null || echo 1)
  echo "== $t: exit $rc"
  grep -E "^(Done|stat::number_of_executed_units)" "$out/$t.log" 2>/dev/null || true
  if [ "$rc" -ne 0 ]; then
    tail -n 60 "$out/$t.log" 2>/dev/null || true
    status=$rc
  fi
done
exit "$status"
