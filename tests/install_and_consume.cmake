# ctest driver: build and run the consumer project of tests/consumer against posenc
#   MODE=install       installed from BUILD_DIR (built) into a fresh prefix: find_package with
#                      COMPONENTS hf and posenc_add_simd_dispatch, posenc.pc with pkg-config when
#                      available, the installed posenc-inspect;
#   MODE=unbuilt       installed right after a default configure of a fresh build directory of the
#                      source, nothing built (`cmake -S . -B b && cmake --install b`): the same
#                      find_package consumer without the dispatch units (to stay quick) and pkg-config;
#   MODE=subdirectory  the source tree through add_subdirectory.
cmake_minimum_required(VERSION 3.20)
set(work "${WORK_DIR}/${MODE}")
file(REMOVE_RECURSE "${work}")
file(MAKE_DIRECTORY "${work}")

function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGV}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()

# posenc.pc from the prefix gives flags that compile the consumer (when pkg-config is installed).
function(check_pkg_config prefix)
  find_program(PKG_CONFIG pkg-config)
  if(NOT PKG_CONFIG)
    message(STATUS "no pkg-config: posenc.pc not checked")
    return()
  endif()
  set(ENV{PKG_CONFIG_PATH} "${prefix}/share/pkgconfig")
  execute_process(COMMAND "${PKG_CONFIG}" --cflags posenc OUTPUT_VARIABLE cflags OUTPUT_STRIP_TRAILING_WHITESPACE
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0 OR NOT cflags MATCHES "${prefix}")
    message(FATAL_ERROR "pkg-config --cflags posenc gave '${cflags}' (rc ${rc})")
  endif()
  separate_arguments(cflags UNIX_COMMAND "${cflags}")
  run("${CXX_COMPILER}" -std=c++20 ${cflags} -fsyntax-only "${SOURCE_DIR}/tests/consumer/main.cpp")
endfunction()

set(config "${SOURCE_DIR}/tests/data/configs/llama-3.1-8b.json")
if(MODE STREQUAL "install")
  run("${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${work}/prefix")
  run("${CMAKE_COMMAND}" -S "${SOURCE_DIR}/tests/consumer" -B "${work}/build"
      "-DCMAKE_PREFIX_PATH=${work}/prefix" "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
  check_pkg_config("${work}/prefix")
  if(NOT EXISTS "${work}/prefix/bin/posenc-inspect")
    message(FATAL_ERROR "posenc-inspect was not installed")
  endif()
  run("${work}/prefix/bin/posenc-inspect" "${config}" --json)
elseif(MODE STREQUAL "unbuilt")
  run("${CMAKE_COMMAND}" -S "${SOURCE_DIR}" -B "${work}/posenc-build" "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
  run("${CMAKE_COMMAND}" --install "${work}/posenc-build" --prefix "${work}/prefix")
  foreach(file include/posenc/posenc.hpp include/posenc/hf/config.hpp share/cmake/posenc/posencConfig.cmake
               share/cmake/posenc/posencHfTargets.cmake share/pkgconfig/posenc.pc)
    if(NOT EXISTS "${work}/prefix/${file}")
      message(FATAL_ERROR "cmake --install after configure did not install ${file}")
    endif()
  endforeach()
  if(EXISTS "${work}/prefix/bin/posenc-inspect")
    message(FATAL_ERROR "posenc-inspect was installed, but nothing was built")
  endif()
  run("${CMAKE_COMMAND}" -S "${SOURCE_DIR}/tests/consumer" -B "${work}/build" -DCONSUMER_SIMD_DISPATCH=OFF
      "-DCMAKE_PREFIX_PATH=${work}/prefix" "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
  check_pkg_config("${work}/prefix")
else()
  run("${CMAKE_COMMAND}" -S "${SOURCE_DIR}/tests/consumer" -B "${work}/build"
      -DCONSUMER_USE_SUBDIRECTORY=ON "-DPOSENC_SOURCE_DIR=${SOURCE_DIR}" "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
endif()
run("${CMAKE_COMMAND}" --build "${work}/build" -j2)
run("${work}/build/consumer" "${config}")
