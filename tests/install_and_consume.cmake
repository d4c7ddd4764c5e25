# ctest driver: install posenc from BUILD_DIR into a fresh prefix, then configure, build and run the
# consumer project against it (MODE=install, also checks posenc.pc with pkg-config when available),
# or against the source tree via add_subdirectory (MODE=subdirectory).
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

set(config "${SOURCE_DIR}/tests/data/configs/llama-3.1-8b.json")
if(MODE STREQUAL "install")
  run("${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${work}/prefix")
  run("${CMAKE_COMMAND}" -S "${SOURCE_DIR}/tests/consumer" -B "${work}/build"
      "-DCMAKE_PREFIX_PATH=${work}/prefix" "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
  find_program(PKG_CONFIG pkg-config)
  if(PKG_CONFIG)
    set(ENV{PKG_CONFIG_PATH} "${work}/prefix/share/pkgconfig")
    execute_process(COMMAND "${PKG_CONFIG}" --cflags posenc OUTPUT_VARIABLE cflags OUTPUT_STRIP_TRAILING_WHITESPACE
                    RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0 OR NOT cflags MATCHES "${work}/prefix")
      message(FATAL_ERROR "pkg-config --cflags posenc gave '${cflags}' (rc ${rc})")
    endif()
    separate_arguments(cflags UNIX_COMMAND "${cflags}")
    run("${CXX_COMPILER}" -std=c++20 ${cflags} -fsyntax-only "${SOURCE_DIR}/tests/consumer/main.cpp")
  endif()
  if(NOT EXISTS "${work}/prefix/bin/posenc-inspect")
    message(FATAL_ERROR "posenc-inspect was not installed")
  endif()
  run("${work}/prefix/bin/posenc-inspect" "${config}" --json)
else()
  run("${CMAKE_COMMAND}" -S "${SOURCE_DIR}/tests/consumer" -B "${work}/build"
      -DCONSUMER_USE_SUBDIRECTORY=ON "-DPOSENC_SOURCE_DIR=${SOURCE_DIR}" "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
endif()
run("${CMAKE_COMMAND}" --build "${work}/build" -j2)
run("${work}/build/consumer" "${config}")
