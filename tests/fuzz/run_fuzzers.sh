#!/usr/bin/env bash
# Runs each libFuzzer target of BUILD_DIR for SECONDS (default 60) on a corpus kept in
# BUILD_DIR/fuzz-corpus/<target>, seeded from tests/data/configs/ (the config reader) and
# tests/fuzz/seeds/ (inspect's arguments). Exits non-zero on the first crash, leak, timeout or
# out-of-memory; libFuzzer leaves the input as BUILD_DIR/fuzz-corpus/crash-* for a regression test.
#   tests/fuzz/run_fuzzers.sh build-fuzz 60 [target...]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:?usage: run_fuzzers.sh BUILD_DIR [SECONDS] [target...]}
seconds=${2:-60}
shift $(( $# >= 2 ? 2 : 1 ))
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_config fuzz_inspect_args fuzz_encodings fuzz_attention)
for t in "${targets[@]}"; do
  corpus="$build/fuzz-corpus/$t"
  mkdir -p "$corpus"
  seeds=()
  case $t in
    fuzz_config) seeds=(tests/data/configs) ;;
    fuzz_inspect_args) seeds=(tests/fuzz/seeds/inspect_args) ;;
  esac
  echo "== $t: ${seconds} s"
  # -timeout: one input may take 10 s at most; -rss_limit_mb: 2 GiB.
  log="$build/fuzz-corpus/$t.log"
  rc=0
  "$build/tests/fuzz/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$build/fuzz-corpus/" "$corpus" "${seeds[@]}" >"$log" 2>&1 || rc=$?
  grep -E "^(Done|stat::number_of_executed_units)" "$log" || true
  if [ "$rc" -ne 0 ]; then
    tail -n 60 "$log"
    exit "$rc"
  fi
done
