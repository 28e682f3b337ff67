// NVFP4 row kernels on one core: rows of 256 fp32 values, RTN and MSE, ref and SIMD,
// next to memcpy of the same input bytes. The working set (64 MiB of fp32 input, twice the 32 MiB L3 here) is
// larger than the caches, so memcpy is the memory-bound ceiling the kernels are held to.
// Counters: rows/s and GB/s of fp32 input (1 KiB per row).
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/nvfp4.h"

namespace {

constexpr int kCols = 256;
constexpr int kRows = 65536;

using RowKernel = void (*)(const float*, int, float, const shardq::ScaleSearch&, uint8_t*, uint8_t*,
                           shardq::BlockStats&);

const std::vector<float>& input_rows() {
  static const std::vector<float> rows = [] {
    std::mt19937 rng(42);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    std::vector<float> out(size_t(kRows) * kCols);
    for (float& v : out) v = normal(rng);
    return out;
  }();
  return rows;
}

void set_counters(benchmark::State& state) {
  const double rows = double(state.iterations()) * kRows;
  state.counters["rows/s"] = benchmark::Counter(rows, benchmark::Counter::kIsRate);
  state.counters["GB/s"] = benchmark::Counter(rows * kCols * sizeof(float) / 1e9, benchmark::Counter::kIsRate);
}

void run_kernel(benchmark::State& state, RowKernel kernel, int candidates) {
  const auto& x = input_rows();
  const shardq::ScaleSearch search{candidates, 0.75};
  const float global = shardq::Nvfp4::global_scale(0.1f);
  std::vector<uint8_t> packed(size_t(kRows) * kCols / 2), scales(size_t(kRows) * kCols / 16);
  for (auto _ : state) {
    shardq::BlockStats stats;
    for (int r = 0; r < kRows; ++r)
      kernel(x.data() + size_t(r) * kCols, kCols, global, search, packed.data() + size_t(r) * kCols / 2,
             scales.data() + size_t(r) * kCols / 16, stats);
    benchmark::DoNotOptimize(stats);
    benchmark::ClobberMemory();
  }
  set_counters(state);
}

void BM_memcpy_fp32_rows(benchmark::State& state) {
  const auto& x = input_rows();
  std::vector<float> out(x.size());
  for (auto _ : state) {
    std::memcpy(out.data(), x.data(), x.size() * sizeof(float));
    benchmark::ClobberMemory();
  }
  set_counters(state);
}

// Times decode_row(r, out_row) over all rows; GB/s counts the fp32 output bytes (1 KiB per
// row, as the quantizers count their input).
template <class DecodeRow>
void time_row_decoder(benchmark::State& state, DecodeRow decode_row) {
  std::vector<float> out(size_t(kRows) * kCols);
  for (auto _ : state) {
    for (int r = 0; r < kRows; ++r) decode_row(r, out.data() + size_t(r) * kCols);
    benchmark::ClobberMemory();
  }
  set_counters(state);
}

// The stage's source decode: E4M3 codes + one E8M0 scale per 32 -> fp32, the same rows.
using Fp8RowKernel = void (*)(const uint8_t*, const uint8_t*, int, float*);

void run_fp8_dequantize(benchmark::State& state, Fp8RowKernel kernel) {
  std::vector<uint8_t> codes(size_t(kRows) * kCols), scales(size_t(kRows) * kCols / 32);
  std::mt19937 rng(43);
  for (auto& c : codes) c = uint8_t(rng() % 0x7F); // no NaN codes, both signs via bit 7 below
  for (size_t i = 0; i < codes.size(); i += 3) codes[i] |= 0x80;
  for (auto& s : scales) s = uint8_t(120 + rng() % 8);
  time_row_decoder(state, [&](int r, float* out) {
    kernel(codes.data() + size_t(r) * kCols, scales.data() + size_t(r) * kCols / 32, kCols, out);
  });
}

void BM_fp8_dequantize_scalar(benchmark::State& state) { run_fp8_dequantize(state, shardq::dequantize_row_fp8_e8m0_32); }
void BM_fp8_dequantize_simd(benchmark::State& state) {
  run_fp8_dequantize(state, shardq::dequantize_row_fp8_e8m0_32_simd);
}

// The stage's decode of its own output for the error sums: NVFP4 codes + E4M3 scales -> fp32.
using Nvfp4RowDecoder = void (*)(const uint8_t*, const uint8_t*, int, float, float*);

void run_nvfp4_dequantize(benchmark::State& state, Nvfp4RowDecoder kernel) {
  std::vector<uint8_t> packed(size_t(kRows) * kCols / 2), scales(size_t(kRows) * kCols / 16);
  std::mt19937 rng(44);
  for (auto& byte : packed) byte = uint8_t(rng());
  for (auto& s : scales) s = uint8_t(40 + rng() % 40); // finite E4M3 scales
  const float global = shardq::Nvfp4::global_scale(0.1f);
  time_row_decoder(state, [&](int r, float* out) {
    kernel(packed.data() + size_t(r) * kCols / 2, scales.data() + size_t(r) * kCols / 16, kCols, global, out);
  });
}

void BM_nvfp4_dequantize_scalar(benchmark::State& state) { run_nvfp4_dequantize(state, shardq::dequantize_row_nvfp4); }
void BM_nvfp4_dequantize_simd(benchmark::State& state) {
  run_nvfp4_dequantize(state, shardq::dequantize_row_nvfp4_simd);
}

void BM_nvfp4_rtn_ref(benchmark::State& state) { run_kernel(state, shardq::quantize_row_nvfp4_ref, 1); }
void BM_nvfp4_rtn_simd(benchmark::State& state) { run_kernel(state, shardq::quantize_row_nvfp4_simd, 1); }
void BM_nvfp4_mse_ref(benchmark::State& state) { run_kernel(state, shardq::quantize_row_nvfp4_ref, 8); }
void BM_nvfp4_mse_simd(benchmark::State& state) { run_kernel(state, shardq::quantize_row_nvfp4_simd, 8); }

} // namespace

BENCHMARK(BM_memcpy_fp32_rows)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_fp8_dequantize_scalar)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_fp8_dequantize_simd)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_nvfp4_dequantize_scalar)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_nvfp4_dequantize_simd)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_nvfp4_rtn_ref)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_nvfp4_rtn_simd)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_nvfp4_mse_ref)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_nvfp4_mse_simd)->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
