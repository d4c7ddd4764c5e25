#pragma once
// POSENC_DETAIL_LIFETIMEBOUND marks what a returned view points into: a parameter (after its name)
// or, after a member function's qualifiers, the object itself. Clang then warns (-Wdangling) when a
// view is kept past the temporary it was made from; other compilers see nothing.
#if defined(__has_cpp_attribute)
#if __has_cpp_attribute(clang::lifetimebound)
#define POSENC_DETAIL_LIFETIMEBOUND [[clang::lifetimebound]]
#endif
#endif
#ifndef POSENC_DETAIL_LIFETIMEBOUND
#define POSENC_DETAIL_LIFETIMEBOUND
#endif
