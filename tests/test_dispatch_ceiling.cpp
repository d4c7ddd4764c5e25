// POSENC_SIMD_MAX_ARCH: the widest architecture run-time dispatch may pick (simd/dispatch.hpp).
// ctest runs the second case again with the variable set to avx2 (tests/CMakeLists.txt), so the names
// expected here are xsimd's, written out, not what the dispatcher returns.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "posenc/attention/dispatch.hpp"
#include "posenc/simd/dispatch.hpp"

#ifdef POSENC_SIMD_RUNTIME_DISPATCH
TEST_CASE("dispatch ceiling: an architecture's name caps the CPU's best, anything else leaves it", "[dispatch]") {
    using posenc::simd::dispatch_ceiling_for;
    const unsigned avx512 = xsimd::avx512bw::version(), avx2 = xsimd::fma3<xsimd::avx2>::version();
    CHECK(dispatch_ceiling_for(nullptr, avx512) == avx512);
    CHECK(dispatch_ceiling_for("", avx512) == avx512);
    CHECK(dispatch_ceiling_for("avx2", avx512) == avx2);
    CHECK(dispatch_ceiling_for("sse4_2", avx512) == xsimd::sse4_2::version());
    CHECK(dispatch_ceiling_for("sse2", avx512) == xsimd::sse2::version());
    CHECK(dispatch_ceiling_for("avx512bw", avx2) == avx2);  // never above what the CPU runs
    CHECK(dispatch_ceiling_for("AVX2", avx512) == avx512);  // not a name of the list: ignored
    CHECK(dispatch_ceiling_for("avx", avx512) == avx512);
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
