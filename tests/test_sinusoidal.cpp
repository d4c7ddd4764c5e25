// Sinusoidal absolute embeddings against DistilBERT's and fairseq's float64 tables
// (tests/data/hf_golden_public.json, sinusoidal_absolute, ≤ 1e-6 at every listed position), closed forms
// for odd widths and huge positions, the linearity property PE(p + k) = R_k·PE(p), add_to, and errors.
#include <posenc/posenc.hpp>

#include <cmath>
#include <limits>

#include "support/catch.hpp"
#include "support/errors.hpp"
#include "support/golden.hpp"
#include "support/reference.hpp"

using posenc_test::expect_config_error;

namespace {


// Closed forms, in double, written from the formulas.
std::vector<double> reference_row(std::size_t d, posenc::sinusoidal_form form, double p) {
    std::vector<double> pe(d, 0.0);
    if (form == posenc::sinusoidal_form::interleaved) {
        for (std::size_t j = 0; j < d; ++j) {
            const double angle = p / std::pow(10000.0, static_cast<double>(2 * (j / 2)) / static_cast<double>(d));
            pe[j] = j % 2 == 0 ? std::sin(angle) : std::cos(angle);
        }
    } else {
        const std::size_t half = d / 2;
        for (std::size_t i = 0; i < half; ++i) {
            const double w = std::exp(-static_cast<double>(i) * std::log(10000.0) / static_cast<double>(half - 1));
            pe[i] = std::sin(p * w);
            pe[half + i] = std::cos(p * w);
        }
    }
    return pe;
}

/// Largest |a − b| over one row (NaN when the lengths differ, which fails any check).
double max_row_error(const std::vector<float>& a, const std::vector<double>& b) {
    if (a.size() != b.size()) return std::numeric_limits<double>::quiet_NaN();
    double m = 0;
    for (std::size_t i = 0; i < a.size(); ++i) m = posenc_test::worst_of(m, std::abs(a[i] - b[i]));
    return m;
}

}  // namespace

TEST_CASE("sinusoidal tables match DistilBERT and fairseq float64 at every listed position", "[sinusoidal][golden]") {
    std::size_t rows = 0;
    for (const auto& e : posenc_test::golden().at("sinusoidal_absolute")) {
        INFO(e.at("id").get<std::string>());
        const std::string variant = e.at("variant");
        REQUIRE((variant == "vaswani_interleaved" || variant == "concat_fairseq_t2t"));
        const posenc::sinusoidal pe{.d_model = e.at("d_model"),
                                    .form = variant == "vaswani_interleaved" ? posenc::sinusoidal_form::interleaved
                                                                             : posenc::sinusoidal_form::concatenated};
        const auto positions = e.at("positions").get<std::vector<std::int64_t>>();
        const auto& expected = e.at("table_f64");
        const auto table = pe.table(positions);
        std::vector<float> added(positions.size() * pe.d_model, 0.0f);
        pe.add_to(added, positions);
        for (std::size_t t = 0; t < positions.size(); ++t) {
            INFO("position " << positions[t]);
            const auto want = expected[t].get<std::vector<double>>();
            REQUIRE(want.size() == pe.d_model);
            CHECK(max_row_error(pe.row(positions[t]), want) <= 1e-6);
            const std::vector<float> from_table(table.begin() + static_cast<std::ptrdiff_t>(t * pe.d_model),
                                                table.begin() + static_cast<std::ptrdiff_t>((t + 1) * pe.d_model));
            CHECK(max_row_error(from_table, want) <= 1e-6);
            const std::vector<float> from_add(added.begin() + static_cast<std::ptrdiff_t>(t * pe.d_model),
                                              added.begin() + static_cast<std::ptrdiff_t>((t + 1) * pe.d_model));
            CHECK(max_row_error(from_add, want) <= 1e-6);
            ++rows;
        }
    }
    REQUIRE(rows == 4 * 5);
}

TEST_CASE("sinusoidal rows follow the closed forms: odd widths, negative and huge positions", "[sinusoidal]") {
    for (auto form : {posenc::sinusoidal_form::interleaved, posenc::sinusoidal_form::concatenated}) {
        for (std::size_t d : {4u, 5u, 7u, 16u, 33u, 768u, 1025u}) {
            const posenc::sinusoidal pe{.d_model = d, .form = form};
            for (std::int64_t p : {std::int64_t{0}, std::int64_t{1}, std::int64_t{-3}, std::int64_t{4097},
                                   std::int64_t{123456}, std::int64_t{1'000'000'000}}) {
                INFO(posenc::to_string(form) << " d=" << d << " p=" << p);
                const auto row = pe.row(p);
                CHECK(max_row_error(row, reference_row(d, form, static_cast<double>(p))) <= 1e-6);
                if (form == posenc::sinusoidal_form::concatenated && d % 2 == 1) CHECK(row[d - 1] == 0.0f);
            }
        }
    }
    // Tiny widths: interleaved d = 1 is sin(p); concatenated d = 2, 3 is [sin p, cos p (, 0)] (tensor2tensor).
    CHECK(posenc::sinusoidal{.d_model = 1}.row(2)[0] == static_cast<float>(std::sin(2.0)));
    const auto r3 = posenc::sinusoidal{.d_model = 3, .form = posenc::sinusoidal_form::concatenated}.row(2);
    CHECK(r3 == std::vector<float>{static_cast<float>(std::sin(2.0)), static_cast<float>(std::cos(2.0)), 0.0f});
}

TEST_CASE("sinusoidal PE(p + k) is a fixed rotation of PE(p)", "[sinusoidal][properties]") {
    // For every frequency ω: [sin((p+k)ω), cos((p+k)ω)] = [[cos kω, sin kω], [−sin kω, cos kω]]·[sin pω, cos pω]:
    // a rotation that depends on k only (the property Vaswani et al. chose the encoding for).
    for (auto form : {posenc::sinusoidal_form::interleaved, posenc::sinusoidal_form::concatenated}) {
        const std::size_t d = 64;
        const posenc::sinusoidal pe{.d_model = d, .form = form};
        const auto w = pe.frequencies();
        REQUIRE(w.size() == d / 2);
        for (std::int64_t k : {1, 7, 300, 65536}) {
            for (std::int64_t p : {0, 5, 1000, 123456}) {
                INFO(posenc::to_string(form) << " p=" << p << " k=" << k);
                const auto a = pe.row(p), b = pe.row(p + k);
                double worst = 0;
                for (std::size_t i = 0; i < d / 2; ++i) {
                    const std::size_t js = form == posenc::sinusoidal_form::interleaved ? 2 * i : i;
                    const std::size_t jc = form == posenc::sinusoidal_form::interleaved ? 2 * i + 1 : d / 2 + i;
                    const double c = std::cos(static_cast<double>(k) * w[i]), s = std::sin(static_cast<double>(k) * w[i]);
                    const double sin_next = c * a[js] + s * a[jc];
                    const double cos_next = -s * a[js] + c * a[jc];
                    worst = posenc_test::worst_of(posenc_test::worst_of(worst, std::abs(sin_next - b[js])), std::abs(cos_next - b[jc]));
                }
                CHECK(worst <= 2e-6);
            }
        }
    }
}

TEST_CASE("sinusoidal add_to adds in place to strided rows and leaves the rest alone", "[sinusoidal][add_to]") {
    const std::size_t d = 48, stride = 56, tokens = 9;
    const posenc::sinusoidal pe{.d_model = d};
    const auto original = posenc_test::random_floats(tokens * stride, 3u);
    auto buffer = original;
    const std::vector<std::int64_t> positions{7, 0, 3, 100000, 2, 2, 9, 31, 4096};
    pe.add_to(buffer, positions, stride);
    for (std::size_t t = 0; t < tokens; ++t) {
        const auto ref = reference_row(d, posenc::sinusoidal_form::interleaved, static_cast<double>(positions[t]));
        for (std::size_t j = 0; j < stride; ++j) {
            const float got = buffer[t * stride + j], was = original[t * stride + j];
            if (j < d)
                CHECK(std::abs(got - (was + ref[j])) <= 1e-6);
            else
                CHECK(got == was);
        }
    }
    // Consecutive positions give the same as the explicit list.
    auto a = original, b = original;
    pe.add_to(a, posenc::position_ids::consecutive(10, tokens), stride);
    std::vector<std::int64_t> explicit_positions(tokens);
    for (std::size_t t = 0; t < tokens; ++t) explicit_positions[t] = 10 + static_cast<std::int64_t>(t);
    pe.add_to(b, explicit_positions, stride);
    CHECK(a == b);
}

TEST_CASE("sinusoidal errors name the parameter and write nothing", "[sinusoidal][errors]") {
    expect_config_error([] { (void)posenc::sinusoidal{.d_model = 0}.row(0); }, "d_model", "0");
    expect_config_error([] { (void)posenc::sinusoidal{.d_model = 0}.table(4); }, "d_model", "0");
    expect_config_error(
        [] { (void)posenc::sinusoidal{.d_model = 1, .form = posenc::sinusoidal_form::concatenated}.row(0); },
        "d_model", "1");
    expect_config_error([] { (void)posenc::sinusoidal{.d_model = 8, .base = 1.0}.row(0); }, "base", "1");
    const posenc::sinusoidal pe{.d_model = 8};
    std::vector<float> buf(20, 1.0f);
    expect_config_error([&] { pe.add_to(buf, posenc::position_ids::consecutive(0, 2), 7); }, "row_stride", "7");
    CHECK_THROWS_AS(pe.add_to(buf, posenc::position_ids::consecutive(0, 3)), posenc::range_error);
    CHECK(buf == std::vector<float>(20, 1.0f));
    std::vector<float> row(7);
    expect_config_error([&] { pe.row(0, row); }, "row.size", "7");
}
