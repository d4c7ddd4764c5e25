# ctest driver: compile, link and run tests/consumer/native_warnings.cpp the way a user would build
# their own unit, -march=native -Wall -Wextra -Wpedantic -Werror, no run-time dispatch (g++ 12 with
# AVX-512 warns ~1,100 times inside its own headers unless posenc silences it). Prints
# "posenc-skip:" and succeeds (ctest reports a skip) when the compiler does not take -march=native.
# -DCXX=<compiler> -DSOURCE_DIR=<posenc's source> -DWORK_DIR=<scratch directory>
# -DDEPENDENCY_INCLUDES=<the dependencies' include dirs joined by |>
# -DIMPLICIT_INCLUDES=<the compiler's own include dirs joined by |: left out, as CMake does>
cmake_minimum_required(VERSION 3.20)  # IN_LIST (a -P script starts with no policies set)
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

file(WRITE "${WORK_DIR}/empty.cpp" "int main() { return 0; }\n")
execute_process(COMMAND "${CXX}" -march=native -c "${WORK_DIR}/empty.cpp" -o "${WORK_DIR}/empty.o"
                RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
if(NOT rc EQUAL 0)
  message("posenc-skip: ${CXX} does not accept -march=native")
  return()
endif()

include("${CMAKE_CURRENT_LIST_DIR}/include_flags.cmake")
posenc_include_flags(includes "${SOURCE_DIR}/include" "${DEPENDENCY_INCLUDES}" "${IMPLICIT_INCLUDES}")
set(flags -std=c++20 -O2 -march=native -Wall -Wextra -Wpedantic -Werror ${includes})
set(program "${WORK_DIR}/native_warnings")
execute_process(COMMAND "${CXX}" ${flags} "${SOURCE_DIR}/tests/consumer/native_warnings.cpp" -o "${program}" -pthread
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  string(REGEX MATCHALL "\\[-W[^]\n]*\\]" kinds "${out}")
  list(LENGTH kinds count)
  string(SUBSTRING "${out}" 0 6000 head)
  message(FATAL_ERROR "${CXX} ${flags} failed (${rc}, ${count} diagnostics):\n${head}")
endif()
execute_process(COMMAND "${program}" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${program} exited with ${rc}")
endif()
