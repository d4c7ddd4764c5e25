#!/usr/bin/env bash
# The COMDAT trap (docs/simd-and-precision.md): a weak (inline or template) function emitted both by a
# per-architecture kernel unit (compiled with e.g. -mavx512f) and by another object of the same
# program is merged by the linker into one copy, possibly the AVX-512 one, which then runs on CPUs
# without AVX-512. Lists such symbols in the objects under $1 (a target's object directory, built at
# -O0 where nothing is inlined) and fails if any is not a trivially safe one. Further directories add
# their objects other than kernel units to the comparison (.ci/run: posenc-thread-tests' -O0 units
# against every test file of posenc-tests; then the posenc_kernels units that posenc-tests links,
# built at -O1 there, against those files).
#   .ci/check-arch-symbols.sh OBJECT_DIR [MORE_OBJECT_DIRS...]
set -euo pipefail
dir=${1:?usage: check-arch-symbols.sh OBJECT_DIR [MORE_OBJECT_DIRS...]}
shift
# Weak code only ("W"): weak data (typeinfo that sanitizers emit, "V") holds no instructions.
weak() { nm -C --defined-only "$1" | awk '$2 == "W" { $1 = ""; $2 = ""; sub(/^  /, ""); print }' | sort -u; }
# Safe: xsimd's register wrappers (a register move, the same code for any flags), initializer_list
# accessors and clang's terminate trampoline.
safe='^(xsimd::types::simd_register<|xsimd::types::simd_avx512_bool_register<|std::initializer_list<|__clang_call_terminate$)'
status=0
mapfile -t arch_objects < <(find "$dir" -name 'posenc_simd_*.cpp.o' ! -name 'posenc_simd_sse2.cpp.o')
[ ${#arch_objects[@]} -gt 0 ] || { echo "check-arch-symbols: no kernel units under $dir" >&2; exit 1; }
more=()
for d in "$@"; do
  before=${#more[@]}
  [ -d "$d" ] && mapfile -t -O "$before" more < <(find "$d" -name '*.o' ! -name 'posenc_simd_*.cpp.o')
  [ "${#more[@]}" -gt "$before" ] || { echo "check-arch-symbols: no objects under $d" >&2; exit 1; }
done
for arch in "${arch_objects[@]}"; do
  others=$(find "$dir" -name '*.o' ! -path "$arch"; printf '%s\n' "${more[@]}")
  shared=$(comm -12 <(weak "$arch") <(for o in $others; do weak "$o"; done | sort -u) | grep -Ev "$safe" || true)
  if [ -n "$shared" ]; then
    echo "check-arch-symbols: $(basename "$arch") shares weak symbols with other objects:" >&2
    echo "$shared" | sed 's/^/  /' >&2
    status=1
  fi
done
[ $status -eq 0 ] && echo "check-arch-symbols: ${#arch_objects[@]} kernel units of $dir share no unsafe weak symbols"
exit $status
