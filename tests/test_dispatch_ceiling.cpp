// POSENC_SIMD_MAX_ARCH: the widest architecture run-time dispatch may pick (simd/dispatch.hpp).
// ctest runs the second case again with the variable set to avx2 (tests/CMakeLists.txt), so the names
// expected here are xsimd's, written out, not what the dispatcher returns.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "posenc/attention/dispatch.hpp"
#include "posenc/simd/dispatch.hpp"

#ifdef POSENC_SIMD_RUNTIME_DISPATCH
TEST_CASE("dispatch ceiling: an architecture's name sets the widest entry, anything else none", "[dispatch]") {
    using posenc::simd::dispatch_ceiling_for;
    using posenc::simd::dispatch_position;
    CHECK(dispatch_ceiling_for(nullptr) == 0);
    CHECK(dispatch_ceiling_for("") == 0);
    CHECK(dispatch_ceiling_for("avx512bw") == 0);
    CHECK(dispatch_ceiling_for("avx2") == 1);
    CHECK(dispatch_ceiling_for("sse4_2") == 2);
    CHECK(dispatch_ceiling_for("sse2") == 3);
    CHECK(dispatch_ceiling_for("AVX2") == 0);  // not a name of the list: ignored
    CHECK(dispatch_ceiling_for("avx") == 0);
    // The positions the walk compares with are the same list's (simd/archs.hpp), whatever list it walks.
    CHECK(dispatch_position<xsimd::avx512bw>() == 0);
    CHECK(dispatch_position<xsimd::fma3<xsimd::avx2>>() == 1);
    CHECK(dispatch_position<xsimd::sse4_2>() == 2);
    CHECK(dispatch_position<xsimd::sse2>() == 3);
}

TEST_CASE("dispatch ceiling: the rotary and attention kernels both follow POSENC_SIMD_MAX_ARCH", "[dispatch]") {
    const char* env = std::getenv("POSENC_SIMD_MAX_ARCH");
    std::string wanted = env ? env : "";
    if (wanted != "avx512bw" && wanted != "avx2" && wanted != "sse4_2" && wanted != "sse2") wanted.clear();  // ignored
    std::string expected;  // xsimd's name of the widest entry this CPU runs at or below `wanted`
    const bool has512 = posenc::simd::compat::cpu_supports<xsimd::avx512bw>();
    const bool has2 = posenc::simd::compat::cpu_supports<xsimd::fma3<xsimd::avx2>>();
    const bool has42 = posenc::simd::compat::cpu_supports<xsimd::sse4_2>();
    if (has512 && (wanted.empty() || wanted == "avx512bw"))
        expected = "avx512bw";
    else if (has2 && (wanted.empty() || wanted == "avx512bw" || wanted == "avx2"))
        expected = "fma3+avx2";
    else if (has42 && wanted != "sse2")
        expected = "sse4.2";
    else
        expected = "sse2";
    INFO("POSENC_SIMD_MAX_ARCH=" << (env ? env : "(unset)"));
    CHECK(std::string(posenc::simd::active_arch_name()) == expected);
    CHECK(std::string(posenc::simd::attention_kernels().arch) == expected);
}
#endif
