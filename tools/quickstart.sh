#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to a result:
#   tools/quickstart.sh bench   install what is missing, build (Release), run the bundled benchmarks
#                               (posenc vs scalar baseline vs the memory-bandwidth limit; a markdown
#                               table by tools/perf-table.py, the JSON kept in the build directory) and
#                               posenc-inspect on a bundled Llama-3.1 config
#   tools/quickstart.sh test    install what is missing, build, run the whole test suite
#   tools/quickstart.sh deps    only install the Debian packages
# Environment: BUILD_DIR (default build), CMAKE_ARGS (extra configure arguments), CXX (compiler).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(g++ cmake make pkgconf libxsimd-dev catch2 libbenchmark-dev nlohmann-json3-dev libeigen3-dev)
install_deps() {
  local missing=()
  for p in "${packages[@]}" "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo=sudo
  echo "quickstart: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

build_dir=${BUILD_DIR:-build}
build() {
  # shellcheck disable=SC2086  # CMAKE_ARGS is a list of arguments on purpose
  cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release ${CMAKE_ARGS:-} >/dev/null
  cmake --build "$build_dir" -j "$(nproc)"
}

case "${1:-}" in
  deps)
    shift
    install_deps "$@"
    ;;
  bench)
    install_deps python3
    build
    echo "quickstart: running every benchmark, 5 repetitions (several minutes); the table is their medians"
    python3 tools/perf-table.py --bench "$build_dir/bench/posenc-bench" --filter . --repetitions 5 --min-time 0.2 \
      --save-json "$build_dir/bench.json"
    echo
    "$build_dir/tools/posenc-inspect" examples/configs/llama-3.1-8b.json --positions 0,8191,131071
    ;;
  test)
    install_deps
    build
    ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)"
    ;;
  *)
    echo "usage: $0 bench|test|deps" >&2
    exit 2
    ;;
esac
