#pragma once
// Catch2 v2 (Debian 12: <catch2/catch.hpp>) or v3, whichever is installed.
#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>
#else
#include <catch2/catch.hpp>
#endif
