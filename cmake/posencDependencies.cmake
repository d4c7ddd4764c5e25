# Dependencies of the posenc targets, shared by the build tree and the installed package
# (posencConfig.cmake includes this file too).

find_package(xsimd REQUIRED)
include("${CMAKE_CURRENT_LIST_DIR}/posencXsimdFix.cmake")

find_package(nlohmann_json 3 QUIET)

find_package(Threads REQUIRED)   # multi-threaded calls without OpenMP use std::thread
