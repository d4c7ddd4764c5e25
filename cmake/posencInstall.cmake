# Install rules: headers, the exported targets (posenc::posenc, posenc::hf when nlohmann_json was
# found), the CMake package (config + version file) and posenc.pc for pkg-config.
include(CMakePackageConfigHelpers)

set(POSENC_CMAKE_DIR "${CMAKE_INSTALL_DATADIR}/cmake/posenc")   # header-only: arch independent

install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/" DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")

install(TARGETS posenc EXPORT posencTargets)
install(EXPORT posencTargets NAMESPACE posenc:: DESTINATION "${POSENC_CMAKE_DIR}")
if(TARGET posenc_hf)
  install(TARGETS posenc_hf EXPORT posencHfTargets)
  install(EXPORT posencHfTargets NAMESPACE posenc:: DESTINATION "${POSENC_CMAKE_DIR}")
endif()

configure_package_config_file("${PROJECT_SOURCE_DIR}/cmake/posencConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/posencConfig.cmake" INSTALL_DESTINATION "${POSENC_CMAKE_DIR}"
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR)
write_basic_package_version_file("${PROJECT_BINARY_DIR}/posencConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion ARCH_INDEPENDENT)
install(FILES
  "${PROJECT_BINARY_DIR}/posencConfig.cmake"
  "${PROJECT_BINARY_DIR}/posencConfigVersion.cmake"
  "${PROJECT_SOURCE_DIR}/cmake/posencXsimdFix.cmake"
  "${PROJECT_SOURCE_DIR}/cmake/posencSimd.cmake"
  DESTINATION "${POSENC_CMAKE_DIR}")

configure_file("${PROJECT_SOURCE_DIR}/cmake/posenc.pc.in" "${PROJECT_BINARY_DIR}/posenc.pc" @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/posenc.pc" DESTINATION "${CMAKE_INSTALL_DATADIR}/pkgconfig")
