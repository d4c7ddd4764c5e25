# ctest driver: compiles SOURCE once per case of CASES (-DPOSENC_CASE=<n>, syntax only). Case 0 must
# compile without a diagnostic (so that the other cases fail for the reason they test); every other
# case must fail with a diagnostic matching EXPECT.
# -DCXX=<compiler> -DSOURCE=<the .cpp> -DCASES=<1|2|...> -DEXPECT=<regex> -DPOSENC_INCLUDE=<dir>
# -DDEPENDENCY_INCLUDES=<dirs joined by |, passed as -isystem> -DIMPLICIT_INCLUDES=<dirs joined by |: left out>
cmake_minimum_required(VERSION 3.20)
include("${CMAKE_CURRENT_LIST_DIR}/include_flags.cmake")
posenc_include_flags(includes "${POSENC_INCLUDE}" "${DEPENDENCY_INCLUDES}" "${IMPLICIT_INCLUDES}")
set(ENV{LC_ALL} C)  # EXPECT may be a compiler's English message
set(flags -std=c++20 -fsyntax-only -Wall -Wextra -Wpedantic ${includes})
string(REPLACE "|" ";" cases "${CASES}")
foreach(c 0 ${cases})
  execute_process(COMMAND "${CXX}" ${flags} -DPOSENC_CASE=${c} "${SOURCE}" RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE out)
  if(c EQUAL 0)
    if(NOT rc EQUAL 0 OR NOT out STREQUAL "")
      message(FATAL_ERROR "case 0 must compile cleanly (exit ${rc}):\n${out}")
    endif()
  elseif(rc EQUAL 0 OR NOT out MATCHES "${EXPECT}")
    message(FATAL_ERROR "case ${c}: expected an error matching '${EXPECT}' (exit ${rc}):\n${out}")
  endif()
endforeach()
message(STATUS "case 0 compiled; cases ${CASES} stopped at '${EXPECT}'")
