#!/usr/bin/env bash
# The include graph of include/posenc runs one way, lower rooms first:
#   core (+ core/detail) → simd → rope (+ rope/detail) → absolute, bias, logit, xpos, analysis
#   → attention → grad, hf;  and posenc.hpp on top of all but hf (needs nlohmann-json) and grad (training only).
# A room's detail/ folder belongs to that room. Fails, naming the file and the include, when a header
# includes one from a room its own may not reach. Run from anywhere; $1 overrides the include root.
set -euo pipefail
root=${1:-"$(dirname "$0")/../include"}
allowed() {  # the rooms a header of room $1 may include
  case $1 in
    core) echo "core" ;;
    simd) echo "core simd" ;;
    rope) echo "core simd rope" ;;
    absolute | bias | logit | xpos | analysis) echo "core simd rope $1" ;;
    attention) echo "core simd rope absolute bias logit xpos attention" ;;
    grad) echo "core simd rope absolute bias logit xpos attention grad" ;;
    hf) echo "core simd rope absolute bias logit xpos attention hf" ;;
    posenc.hpp) echo "core simd rope absolute bias logit xpos analysis attention" ;;
    *) echo "" ;;
  esac
}
status=0
checked=0
while IFS= read -r header; do
  rel=${header#"$root"/posenc/}
  room=${rel%%/*}
  rooms=$(allowed "$room")
  [ -n "$rooms" ] || { echo "check-include-layers: $rel is in no known room (add it to $0)" >&2; status=1; continue; }
  while IFS= read -r target; do
    target_room=${target%%/*}
    if [[ " $rooms " != *" $target_room "* ]]; then
      echo "check-include-layers: $rel ($room) includes posenc/$target ($target_room): not one of its rooms ($rooms)" >&2
      status=1
    fi
  done < <(sed -n -E 's@^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]posenc/([^>"]+)[>"].*@\1@p' "$header")
  checked=$((checked + 1))
done < <(find "$root/posenc" -name '*.hpp' | sort)
[ $checked -gt 0 ] || { echo "check-include-layers: no headers under $root/posenc" >&2; exit 1; }
[ $status -eq 0 ] && echo "check-include-layers: $checked headers include only their own and lower rooms"
exit $status
