#pragma once
// POSENC_DETAIL_LIFETIMEBOUND marks what a returned view points into: a parameter (after its name)
// or, after a member function's qualifiers, the object itself. Clang then warns (-Wdangling) when a
// view, or a reference, that initialises a variable outlives the temporary it came from (not when
// it is assigned or stored in a container, and not through a copy: `position_ids b =
// tmp().ids().axis(0);` goes unflagged); other compilers see nothing.
#if defined(__has_cpp_attribute)
#if __has_cpp_attribute(clang::lifetimebound)
#define POSENC_DETAIL_LIFETIMEBOUND [[clang::lifetimebound]]
#endif
#endif
#ifndef POSENC_DETAIL_LIFETIMEBOUND
#define POSENC_DETAIL_LIFETIMEBOUND
#endif
