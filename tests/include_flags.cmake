# For the ctest drivers that run the compiler themselves (included by them):
# posenc_include_flags(<out> <posenc include dir> <dependency include dirs joined by |>
#                      <the compiler's own include dirs joined by |>)
# sets <out> to -I<posenc> and -isystem <dir> for each dependency dir, the compiler's own left out as
# CMake does.
function(posenc_include_flags out posenc_include dependency_includes implicit_includes)
  set(flags "-I${posenc_include}")
  string(REPLACE "|" ";" dirs "${dependency_includes}")
  string(REPLACE "|" ";" implicit "${implicit_includes}")
  foreach(d IN LISTS dirs)
    if(NOT d STREQUAL "" AND NOT d STREQUAL posenc_include AND NOT d IN_LIST implicit)
      list(APPEND flags -isystem "${d}")
    endif()
  endforeach()
  set(${out} ${flags} PARENT_SCOPE)
endfunction()
