// posenc-bench: the rotary hot loop against the machine's in-place bandwidth limit and against the
// scalar loop a user would write first, all in one run (shapes: docs/benchmark-shapes.md). This file
// registers every family in one order and reports; the families live in rotary_bench.cpp (limit/S1,
// scalar, rope/S1..S4, call overhead, M-RoPE, executors, threads), engine16_bench.cpp (16-bit storage,
// kv/append, fused q/k norm) and attention_bench.cpp (attention, kv_cache, limit/S5..S6, naive,
// eigen-tiles), sharing harness.hpp.
//
//   limit/S1/threads:N          x ← a·x over the same Q and K buffers (the least work an in-place pass can do)
//   scalar/S1/<layout>          plain scalar loop over a cos/sin table
//   rope/S1/<layout>/threads:N  posenc, cached table          (Q [2048,32,128], K [2048,8,128])
//   rope/S1-yarn/...            the same with YaRN ×4 over 8192
//   rope/S2/<layout>            decode: one token at position 100000, cos/sin included
//   rope/call-overhead/<layout>[/table]  what S2's call (or S2 from a table, checked) costs beyond its
//                               kernel: the public call against the same call made straight to the SIMD
//                               kernels; time = the difference per call, limit_fraction = kernel ÷ call
//   rope/S3/<layout>/threads:N  S1 with cos/sin computed per token inside the timed region
//   table/S4                    cos/sin table of 131072 positions × 64 pairs, YaRN ×4
//   attention/S5/threads:N      causal ALiBi attention, 8 heads, seq 1024, head_dim 64, max_bias 8
//   attention/S5-rope/threads:N causal, GQA 32/8, seq 2048, head_dim 128, RoPE inside (cos/sin per tile)
//   attention/S5-rope-table/... the same with cos/sin from a table (table_transform)
//   attention/S5-rope-prerotated/... K rotated once into a copy first (timed), then keys_transformed
//   attention/S6/threads:N      decode: 1 query at 8191 over a kv_cache of 8192 rotated keys (head-major), 32/8, dim 128
//   attention/S6-token-major/... the same keys in a plain [token][kv head][dim] buffer
//   attention/S6-head-major/... a plain buffer laid out [kv head][token][dim] (what kv_cache stores)
//   attention/S6/executor:pool2, S6-bf16/...  S6 with threads = 2 on the caller's persistent pool
//                               (options.executor); limits: the read pass and the FMA peak on the same pool
//   attention/S6-200/threads:N, executor:pool2   S6 against 200 cached tokens: below the work threshold,
//                               so threads = 2 runs on the caller's thread (and its limits on one thread)
//   attention/S6-200/workspace  S6-200 on one thread with an attention_workspace: the per-call tile
//                               buffers kept between calls instead of allocated and zeroed in each
//   attention/<S5|S5-rope|S6>-bf16, -fp16/threads:N   K and V in 16 bits: S5 and S5-rope (with a cos/sin
//                               table) over converted copies, S6 over a kv_cache<rotary, bf16/fp16>
//   attention/S6-L2-bf16, -fp16/threads:1   S6's 4 query heads per kv head over 512 cached tokens of
//                               2 kv heads (512 KiB: in an L2 of 1 MiB or more), through a workspace:
//                               decode's arithmetic without its read from memory, for fma_fraction
//                               (limit_fraction: against a read pass from L2)
//   kv_cache/append/threads:N   kv_cache::append of S1's K [2048,8,128] (rotated, RoPE base 10000) and a V
//                               of the same shape into an empty cache; limit: a copy of the same bytes
//   kv_cache/append-bf16, -fp16 the same into a 16-bit cache; limit: floats read, 16-bit values written (truncated)
//   limit/S5, limit/S5-rope     one head's Eigen GEMMs QKᵀ and PV per thread (-march=native): FLOP/s
//   limit/S6                    a read pass over the cache's K and V: bytes/s
//   naive/<shape>               materialised scores and softmax (Eigen GEMMs), 1 thread
//   eigen-tiles/S5              S5 tiled like the kernel with Eigen GEMMs for the tile products, 1 thread,
//                               timed alternately with attention/S5: posenc_speedup, max_abs_diff
//
// Attention reports FLOP/s of the useful work (4·heads·D·visible pairs: causal counts the unmasked
// part), limit_fraction = its FLOP/s over the limit GEMM's and fma_fraction = its FLOP/s over the
// core's FMA peak (an FMA loop of 12 independent chains, fma_peak_pass), each timed alternately with
// the kernel in the same benchmark; S6 reports bytes/s (K and V read) against the read pass over the
// same bytes as its limit_fraction, and FLOP/s and fma_fraction as prefill (decode is bound by the read or
// the FMAs, whichever takes longer: the larger fraction is how close it comes to that bound).
//   rope/S1-bf16, S1-fp16/<layout>/threads:N   S1 in 16-bit storage; limit: x ^= sign over the same 16-bit buffers
//   rope/L2-bf16, L2-fp16/<layout>  the same for 64 tokens (640 KiB: in L2), 1 thread: the kernel's arithmetic
//                               without S1's memory traffic; ns_per_head, limit as above over those buffers
//   kv/append/<layout>          S1's K rotated from a source buffer into a cache slot; limit: a copy of the same bytes
//                               (an AVX2 loop)
//   rope/S1-qknorm/<layout>     fused per-head RMSNorm + RoPE in place (limit as S1)
//   rope/S1-qknorm-2pass/<layout>  the same as two passes (norm pass: the kernel at position 0, then RoPE)
//   threads/spawn-join          starting and joining one std::thread (what set_threads costs per call without OpenMP)
//   rope/S1-mrope/half_split    S1 with Qwen2-VL's M-RoPE over a text + 32×32 image + text prompt, rows
//                               gathered from a table per token (/on-the-fly: built from the components);
//                               rope/S1-mrope-interleaved/... the same with Qwen3-VL's interleave; limit as S1
//   rope/S1/<layout>/executor:spawn2, executor:pool2   S1 split in 2 on a caller's executor: a std::thread per
//                               slice per call, or a persistent pool
//
// Every rope/scalar benchmark reports bytes_per_second (Q+K read + written) and limit_fraction: its
// bytes/s over the limit pass's on the same buffers with the same thread count, the two measured
// alternately within the benchmark (see paired_loop); the limit pass is the faster of its prefetching
// and plain variants (limit_clock). limit/S1 also runs on its own: the prefetching pass only (faster
// than the plain one for S1 on the machines measured; the fractions use whichever was faster). A summary table
// follows Google Benchmark's own output, on stderr. Every S1 benchmark starts from S1's own values
// (no benchmark measures what an earlier one left in the buffers), and one whose data drifted into
// subnormal or non-finite values reports an error instead of a time (see representative_data).
#include "harness.hpp"

#include <cstdio>
#include <string>
#include <vector>

#include <posenc/attention/attention.hpp>  // simd::attention_kernels(): the summary names its arch

namespace {

/// Google Benchmark's own output (console, JSON or CSV, as --benchmark_format says) on stdout, then
/// one summary table on stderr, so that --benchmark_format=json output stays valid JSON.
template <class Base>
class summary_reporter : public Base {
public:
    using Run = benchmark::BenchmarkReporter::Run;
    void ReportRuns(const std::vector<Run>& runs) override {
        Base::ReportRuns(runs);
        for (const auto& r : runs) {
            if (r.run_type == Run::RT_Aggregate && r.aggregate_name != "median") continue;
            const auto bps = r.counters.find("bytes_per_second");
            const auto flops = r.counters.find("FLOP/s");
            const auto frac = r.counters.find("limit_fraction");
            const auto fma = r.counters.find("fma_fraction");
            std::string name = r.run_name.str();  // without Google Benchmark's timing suffix
            for (const char* suffix : {"/manual_time", "/real_time"})
                if (const auto at = name.find(suffix); at != std::string::npos) name.erase(at, std::string(suffix).size());
            // A benchmark that reported an error has no aggregates: one row for its repetitions.
            if (r.GetAdjustedRealTime() <= 0 && !rows_.empty() && rows_.back().name == name && rows_.back().time <= 0) continue;
            rows_.push_back({name, r.GetAdjustedRealTime(), benchmark::GetTimeUnitString(r.time_unit),
                             bps == r.counters.end() ? 0.0 : double(bps->second) / 1e9,
                             flops == r.counters.end() ? 0.0 : double(flops->second) / 1e9,
                             frac == r.counters.end() ? -1.0 : double(frac->second),
                             fma == r.counters.end() ? -1.0 : double(fma->second)});
        }
    }
    void Finalize() override {
        Base::Finalize();
        std::fprintf(stderr, "\nposenc-bench summary (kernels: %s, 16-bit prefetch %s, attention: %s; limits: x <- a*x over "
                             "the same Q and K, a copy, each the faster of prefetching and plain; Eigen GEMMs; a read pass)\n",
                     posenc::simd::active_arch_name(), posenc::simd::prefetch_16bit() ? "on" : "off",
                     posenc::simd::attention_kernels().arch);
        std::fprintf(stderr, "%-38s %12s %10s %10s %15s %13s\n", "benchmark", "time", "GB/s", "GFLOP/s", "limit_fraction",
                     "fma_fraction");
        for (const auto& row : rows_) {
            char frac[32] = "", gb[32] = "", gf[32] = "", fma[32] = "";
            if (row.fraction >= 0) std::snprintf(frac, sizeof frac, "%.2f", row.fraction);
            if (row.fma_fraction >= 0) std::snprintf(fma, sizeof fma, "%.2f", row.fma_fraction);
            if (row.gbps > 0) std::snprintf(gb, sizeof gb, "%.1f", row.gbps);
            if (row.gflops > 0) std::snprintf(gf, sizeof gf, "%.1f", row.gflops);
            if (row.time <= 0) {  // the benchmark reported an error (printed above) instead of a time
                std::fprintf(stderr, "%-38s %12s\n", row.name.c_str(), "error");
                continue;
            }
            std::fprintf(stderr, "%-38s %9.2f %-2s %10s %10s %15s %13s\n", row.name.c_str(), row.time, row.unit.c_str(), gb,
                         gf, frac, fma);
        }
    }

private:
    struct row {
        std::string name;
        double time;
        std::string unit;
        double gbps, gflops, fraction, fma_fraction;
    };
    std::vector<row> rows_;
};

}  // namespace

int main(int argc, char** argv) {
    using namespace posenc_bench;
    register_limit_s1();
    register_rotary<posenc::half_split>("half_split");
    register_engine16<posenc::half_split>("half_split");
    register_rotary_executors<posenc::half_split>("half_split");
    register_rotary<posenc::interleaved>("interleaved");
    register_engine16<posenc::interleaved>("interleaved");
    register_rotary_executors<posenc::interleaved>("interleaved");
    register_mrope();
    register_table();
    register_attention();
    register_threads();

    // The format Google Benchmark would pick (its flag is parsed by Initialize, which removes it).
    std::string format = "console";
    for (int i = 1; i < argc; ++i)
        if (std::string a = argv[i]; a.rfind("--benchmark_format=", 0) == 0) format = a.substr(19);
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    if (format == "json") {
        summary_reporter<benchmark::JSONReporter> reporter;
        benchmark::RunSpecifiedBenchmarks(&reporter);
    } else if (format != "console") {
        benchmark::RunSpecifiedBenchmarks();  // csv: Google Benchmark's own reporter, no summary
    } else {
        summary_reporter<benchmark::ConsoleReporter> reporter;
        benchmark::RunSpecifiedBenchmarks(&reporter);
    }
    benchmark::Shutdown();
}
