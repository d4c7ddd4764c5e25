# Debian 12's libxsimd-dev 8.1.0 exports target `xsimd` with INTERFACE_LINK_LIBRARIES "xtl", a library
# nothing provides: every link would fail with "cannot find -lxtl". xsimd is header-only and does not
# need xtl for anything posenc uses, so drop the dangling entry (only when no real xtl target exists).
if(TARGET xsimd AND NOT TARGET xtl AND xsimd_VERSION VERSION_LESS 9)
  get_target_property(_posenc_xsimd_libs xsimd INTERFACE_LINK_LIBRARIES)
  if(_posenc_xsimd_libs)
    list(REMOVE_ITEM _posenc_xsimd_libs xtl)
    set_target_properties(xsimd PROPERTIES INTERFACE_LINK_LIBRARIES "${_posenc_xsimd_libs}")
  endif()
  unset(_posenc_xsimd_libs)
endif()
