# ctest driver: README's C++ block after `<!-- rope_quickstart snippet -->` must be
# examples/rope_quickstart.cpp minus its first comment line, so that the usage snippet users copy is the
# program CI compiles and runs.
file(READ "${SOURCE_DIR}/README.md" readme)
set(marker "<!-- rope_quickstart snippet -->\n```cpp\n")
string(FIND "${readme}" "${marker}" start)
if(start EQUAL -1)
  message(FATAL_ERROR "README.md has no '<!-- rope_quickstart snippet -->' followed by a ```cpp block")
endif()
string(LENGTH "${marker}" marker_length)
math(EXPR start "${start} + ${marker_length}")
string(SUBSTRING "${readme}" ${start} -1 rest)
string(FIND "${rest}" "```" stop)
string(SUBSTRING "${rest}" 0 ${stop} snippet)
file(READ "${SOURCE_DIR}/examples/rope_quickstart.cpp" example)
string(REGEX REPLACE "^// [^\n]*\n" "" example "${example}")
if(NOT snippet STREQUAL example)
  message(FATAL_ERROR "README's usage snippet differs from examples/rope_quickstart.cpp")
endif()
