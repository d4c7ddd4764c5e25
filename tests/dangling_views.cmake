# ctest driver (clang only): tests/dangling/views_of_temporaries.cpp draws a -Wdangling warning on
# exactly the lines marked `// dangles` (views of, or references into, a temporary kept past it,
# which posenc marks with core/detail/lifetimebound.hpp) and no other diagnostic.
# -DCXX=<clang++> -DSOURCE=<the .cpp> -DPOSENC_INCLUDE=<posenc's include dir>
# -DDEPENDENCY_INCLUDES=<the dependencies' include dirs joined by |, passed as -isystem>
# -DIMPLICIT_INCLUDES=<the compiler's own include dirs joined by |: left out, as CMake does>
cmake_minimum_required(VERSION 3.20)  # IN_LIST (a -P script starts with no policies set)
include("${CMAKE_CURRENT_LIST_DIR}/include_flags.cmake")
posenc_include_flags(includes "${POSENC_INCLUDE}" "${DEPENDENCY_INCLUDES}" "${IMPLICIT_INCLUDES}")
set(flags -std=c++20 -fsyntax-only -Wall -Wextra -Wpedantic -fno-caret-diagnostics -fno-color-diagnostics
          ${includes})
execute_process(COMMAND "${CXX}" ${flags} "${SOURCE}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)

# The marked line numbers. The text is read whole and split by hand, '[', ']', ';' and '\' made
# harmless first: file(STRINGS) and list iteration would merge lines across a lone '[' or a
# trailing '\' and split them at ';'.
file(READ "${SOURCE}" text)
string(REGEX REPLACE "[][;\\]" "_" text "${text}")
string(REPLACE "\n" ";" lines "${text}")
set(expected "")
set(n 0)
foreach(line IN LISTS lines)
  math(EXPR n "${n} + 1")
  if(line MATCHES "// dangles$")
    list(APPEND expected ${n})
  endif()
endforeach()

set(flagged "")
string(REGEX MATCHALL "[^\n]*(warning|error|note):[^\n]*" diagnostics "${out}")
foreach(d IN LISTS diagnostics)
  if(d MATCHES ":([0-9]+):[0-9]+: warning: .* will be destroyed at the end of the full-expression \\[-Wdangling\\]$")
    list(APPEND flagged ${CMAKE_MATCH_1})
  else()
    message(FATAL_ERROR "unexpected diagnostic:\n${d}\n\nall output:\n${out}")
  endif()
endforeach()
list(REMOVE_DUPLICATES flagged)
list(SORT flagged COMPARE NATURAL)  # (a template's warnings come when it is instantiated)
list(LENGTH expected count)
if(count EQUAL 0 OR NOT rc EQUAL 0 OR NOT flagged STREQUAL expected)
  message(FATAL_ERROR "-Wdangling on lines [${flagged}], expected on [${expected}] (exit ${rc}):\n${out}")
endif()
message(STATUS "-Wdangling on the ${count} marked lines and nowhere else")
