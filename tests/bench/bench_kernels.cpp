// NVFP4 row kernels on one core: rows of 256 fp32 values, RTN and MSE, ref and SIMD,
// next to memcpy of the same input bytes. The working set (64 MiB of fp32 input, twice the 32 MiB L3 here) is
// larger than the caches, so memcpy is the memory-bound ceiling the kernels are held to.
// Counters: rows/s and GB/s of fp32 input (1 KiB per row). The MXFP4 benchmarks below say
// what they count.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "kernels/int8.h"
#include "kernels/mxfp4.h"
#include "kernels/nvfp4.h"
#include "stages/codec.h"
#include "stages/linear_rows.h"
#include "stages/recipes/recipe.h"

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

using Mxfp4RowKernel = shardq::Mxfp4RowSums (*)(const float*, int, uint8_t*, uint8_t*);

// Times quantize_row(r, packed_row, scales_row) over all rows into one MXFP4 output
// (kCols / 2 code bytes and kCols / 32 E8M0 scales a row); the error sums are kept so the
// work is not optimized away.
template <class QuantizeRow> void time_mxfp4_rows(benchmark::State& state, QuantizeRow quantize_row) {
  std::vector<uint8_t> packed(size_t(kRows) * kCols / 2), scales(size_t(kRows) * kCols / 32);
  for (auto _ : state) {
    shardq::Mxfp4RowSums total;
    for (int r = 0; r < kRows; ++r)
      total.error_sq += quantize_row(r, packed.data() + size_t(r) * kCols / 2, scales.data() + size_t(r) * kCols / 32).error_sq;
    benchmark::DoNotOptimize(total);
    benchmark::ClobberMemory();
  }
}

// The Engram MXFP4 quantizer (ModelOpt's rule) on the same fp32 rows: rows/s, GB/s of input.
// The SIMD one is bit-identical to the ref.
void run_mxfp4_quantize(benchmark::State& state, Mxfp4RowKernel kernel) {
  const auto& x = input_rows();
  time_mxfp4_rows(state, [&](int r, uint8_t* packed, uint8_t* scales) {
    return kernel(x.data() + size_t(r) * kCols, kCols, packed, scales);
  });
  set_counters(state);
}

void BM_mxfp4_quantize_ref(benchmark::State& state) { run_mxfp4_quantize(state, shardq::quantize_row_mxfp4_ref); }
void BM_mxfp4_quantize_simd(benchmark::State& state) { run_mxfp4_quantize(state, shardq::quantize_row_mxfp4_simd); }

// The Engram MXFP4 codec's row path from its FP8 source (E4M3 codes + one E8M0 scale per 32,
// 16 MiB of codes): decode to fp32 then quantize (what encode_engram_mxfp4 did), and fused.
// Counters: rows/s and GB/s of FP8 input (codes + scales, 264 bytes per row).
struct Fp8SourceRows {
  std::vector<uint8_t> codes, scales;
};

const Fp8SourceRows& fp8_source_rows() {
  static const Fp8SourceRows rows = [] {
    // The fp32 rows above as FP8 with RCEIL E8M0 scales per 32 (amax / 448, rounded up).
    const auto& x = input_rows();
    Fp8SourceRows out{std::vector<uint8_t>(x.size()), std::vector<uint8_t>(x.size() / 32)};
    for (size_t g = 0; g < out.scales.size(); ++g) {
      float amax = 0.0f;
      for (size_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[g * 32 + i]));
      out.scales[g] = shardq::e8m0_from_float(amax / shardq::E4M3::max, shardq::E8M0Rounding::toward_pos_inf);
      const float inverse = 1.0f / shardq::e8m0_to_float(out.scales[g]);
      for (size_t i = 0; i < 32; ++i) out.codes[g * 32 + i] = shardq::e4m3_from_float(x[g * 32 + i] * inverse);
    }
    return out;
  }();
  return rows;
}

void set_fp8_counters(benchmark::State& state) {
  const double rows = double(state.iterations()) * kRows;
  state.counters["rows/s"] = benchmark::Counter(rows, benchmark::Counter::kIsRate);
  state.counters["GB/s"] = benchmark::Counter(rows * (kCols + kCols / 32) / 1e9, benchmark::Counter::kIsRate);
}

void run_fp8_to_mxfp4_decoded(benchmark::State& state, Mxfp4RowKernel kernel) {
  const auto& source = fp8_source_rows();
  std::vector<float> values(kCols);
  time_mxfp4_rows(state, [&](int r, uint8_t* packed, uint8_t* scales) {
    shardq::dequantize_row_fp8_e8m0_32_simd(source.codes.data() + size_t(r) * kCols,
                                            source.scales.data() + size_t(r) * kCols / 32, kCols, values.data());
    return kernel(values.data(), kCols, packed, scales);
  });
  set_fp8_counters(state);
}

void BM_mxfp4_codec_row_decode_ref(benchmark::State& state) {
  run_fp8_to_mxfp4_decoded(state, shardq::quantize_row_mxfp4_ref);
}
void BM_mxfp4_codec_row_decode_simd(benchmark::State& state) {
  run_fp8_to_mxfp4_decoded(state, shardq::quantize_row_mxfp4_simd);
}

void BM_mxfp4_codec_row_fused(benchmark::State& state) {
  const auto& source = fp8_source_rows();
  time_mxfp4_rows(state, [&](int r, uint8_t* packed, uint8_t* scales) {
    return shardq::quantize_row_mxfp4_from_fp8_simd(source.codes.data() + size_t(r) * kCols,
                                                    source.scales.data() + size_t(r) * kCols / 32, kCols, packed, scales);
  });
  set_fp8_counters(state);
}

// MXFP4 -> NVFP4 scale transcode of routed-expert rows: 64 MiB of codes (4096 columns, 32768
// rows) and their E8M0 scales, next to a memcpy of the same bytes. GB/s counts codes + scales.
constexpr int kExpertCols = 4096;
constexpr int kExpertRows = 32768;
constexpr size_t kExpertCodeBytes = size_t(kExpertRows) * kExpertCols / 2;
constexpr size_t kExpertScaleBytes = size_t(kExpertRows) * kExpertCols / 32;

struct ExpertRows {
  std::vector<uint8_t> codes, e8m0;
  uint8_t emax;
};

const ExpertRows& expert_rows() {
  static const ExpertRows rows = [] {
    ExpertRows out{std::vector<uint8_t>(kExpertCodeBytes), std::vector<uint8_t>(kExpertScaleBytes), 0};
    std::mt19937 rng(45);
    for (auto& byte : out.codes) byte = uint8_t(rng());
    // Scales within 17 binades of the max, one block in 256 further down (the inexact path).
    for (auto& e : out.e8m0) e = uint8_t(rng() % 256 == 0 ? 90 : 118 + rng() % 10);
    out.emax = shardq::e8m0_max_of(out.e8m0.data(), out.e8m0.size());
    return out;
  }();
  return rows;
}

void set_expert_counters(benchmark::State& state) {
  const double bytes = double(state.iterations()) * double(kExpertCodeBytes + kExpertScaleBytes);
  state.counters["GB/s"] = benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsRate);
  state.counters["rows/s"] = benchmark::Counter(double(state.iterations()) * kExpertRows, benchmark::Counter::kIsRate);
}

void BM_memcpy_mxfp4_expert_bytes(benchmark::State& state) {
  const auto& rows = expert_rows();
  std::vector<uint8_t> codes(kExpertCodeBytes), scales(kExpertScaleBytes);
  for (auto _ : state) {
    std::memcpy(codes.data(), rows.codes.data(), kExpertCodeBytes);
    std::memcpy(scales.data(), rows.e8m0.data(), kExpertScaleBytes);
    benchmark::ClobberMemory();
  }
  set_expert_counters(state);
}

// The codec's whole work on a chunk (its codes are not copied: the buffer they were read
// into is the one written out), against memcpy of the same input bytes.
void BM_transcode_mxfp4_nvfp4(benchmark::State& state) {
  const auto& rows = expert_rows();
  std::vector<uint8_t> e4m3(kExpertScaleBytes * 2);
  for (auto _ : state) {
    const shardq::Mxfp4ToNvfp4 transcoder(rows.emax); // once per chunk, as the codec does
    uint64_t inexact = 0;
    for (int r = 0; r < kExpertRows; ++r)
      inexact += transcoder.transcode_row(rows.codes.data() + size_t(r) * kExpertCols / 2,
                                          rows.e8m0.data() + size_t(r) * kExpertCols / 32, kExpertCols,
                                          e4m3.data() + size_t(r) * kExpertCols / 16);
    benchmark::DoNotOptimize(inexact);
    benchmark::ClobberMemory();
  }
  set_expert_counters(state);
}

// W8A8 INT8 rows (seed 003) on one core: a source linear decoded exactly (FP8 E4M3 with
// E8M0 per 32x32 block, or a DeepSeek FP4 expert: E2M1 two per byte, E8M0 per 32 of a row)
// and quantized per channel (the fused SIMD row, and the scalar decode + quantize_row_int8_ref
// it is tested against), 4096 rows x 2048 columns; then the
// codec's whole chunk (encode_chunk: NaN scan, decode, quantize, figures); next to memcpy
// of the same output bytes. GB/s counts OUTPUT bytes: I8 codes + one F32 scale per row
// (8 MiB + 16 KiB).
// The _narrow rows are the same bytes as 131072 rows x 64 columns (the real-count fixture's
// w1 / w3 expert width: per-row costs show there), _narrow32 as 262144 rows x 32 (its w2).
constexpr int kInt8Rows = 4096;
constexpr int kInt8Cols = 2048;
constexpr int kInt8NarrowCols = 64;
constexpr int kInt8Narrow32Cols = 32;
constexpr size_t kInt8CodeBytes = size_t(kInt8Rows) * kInt8Cols;
constexpr size_t kInt8ScaleBytes = size_t(kInt8Rows) * sizeof(float);

struct LinearSourceBytes {
  int rows = 0, cols = 0;
  std::vector<uint8_t> codes, scales;
};

// E4M3 [rows, cols] (no NaN code), E8M0 [rows / 32, cols / 32] around 2^-8.
LinearSourceBytes make_int8_fp8_source(int cols) {
  const int rows = int(kInt8CodeBytes / size_t(cols));
  LinearSourceBytes out{rows, cols, std::vector<uint8_t>(kInt8CodeBytes), std::vector<uint8_t>(size_t(rows / 32) * size_t(cols / 32))};
  std::mt19937 rng(46);
  for (auto& c : out.codes) {
    c = uint8_t(rng());
    if (shardq::E4M3::is_nan(c)) c = 0x7E;
  }
  for (auto& s : out.scales) s = uint8_t(115 + rng() % 10);
  return out;
}

// E2M1 codes [rows, cols / 2], E8M0 [rows, cols / 32].
LinearSourceBytes make_int8_fp4_source(int cols) {
  const int rows = int(kInt8CodeBytes / size_t(cols));
  LinearSourceBytes out{rows, cols, std::vector<uint8_t>(kInt8CodeBytes / 2), std::vector<uint8_t>(size_t(rows) * size_t(cols / 32))};
  std::mt19937 rng(47);
  for (auto& c : out.codes) c = uint8_t(rng());
  for (auto& s : out.scales) s = uint8_t(115 + rng() % 10);
  return out;
}

const LinearSourceBytes& int8_source(shardq::LinearSource kind, int cols) {
  static std::map<std::pair<shardq::LinearSource, int>, LinearSourceBytes> sources;
  auto it = sources.find({kind, cols});
  if (it == sources.end()) {
    it = sources.emplace(std::pair{kind, cols}, kind == shardq::LinearSource::fp8_block32 ? make_int8_fp8_source(cols)
                                                                                           : make_int8_fp4_source(cols)).first;
  }
  return it->second;
}

void set_int8_counters(benchmark::State& state, int rows) {
  const double iterations = double(state.iterations());
  state.counters["GB/s"] = benchmark::Counter(iterations * double(kInt8CodeBytes + size_t(rows) * sizeof(float)) / 1e9,
                                              benchmark::Counter::kIsRate);
  state.counters["rows/s"] = benchmark::Counter(iterations * rows, benchmark::Counter::kIsRate);
}

// As the codec takes them: every row's codes at once (quantize_linear_rows_int8, the SIMD
// kernels' fused decode + quantize), then the report's sample of rows (is_int8_report_row)
// again with their sums (quantize_linear_row_int8); or row by row, the scalar truth they
// are tested against (decode_linear_row + quantize_row_int8_ref, sums on every row).
template <bool kRef>
void run_int8_rows(benchmark::State& state, shardq::LinearSource kind, int cols) {
  const LinearSourceBytes& source = int8_source(kind, cols);
  const shardq::LinearRows rows{kind, "weight", "scale", 0, uint64_t(source.rows), cols, source.codes, source.scales};
  std::vector<int8_t> codes(kInt8CodeBytes);
  std::vector<float> scales(static_cast<size_t>(source.rows)), values(static_cast<size_t>(cols));
  for (auto _ : state) {
    double error_sq = 0.0;
    if constexpr (!kRef) shardq::quantize_linear_rows_int8(rows, codes.data(), scales.data());
    for (int r = 0; r < source.rows; ++r) {
      shardq::Int8RowSums sums;
      int8_t* row_codes = codes.data() + size_t(r) * size_t(cols);
      if constexpr (kRef) {
        shardq::decode_linear_row(rows, uint64_t(r), values.data());
        scales[size_t(r)] = shardq::quantize_row_int8_ref(values.data(), cols, row_codes, &sums);
      } else if (shardq::is_int8_report_row(uint64_t(r))) {
        scales[size_t(r)] = shardq::quantize_linear_row_int8(rows, uint64_t(r), row_codes, &sums);
      }
      error_sq += sums.error_sq;
    }
    benchmark::DoNotOptimize(error_sq);
    benchmark::ClobberMemory();
  }
  set_int8_counters(state, source.rows);
}

constexpr auto kFp8 = shardq::LinearSource::fp8_block32;
constexpr auto kFp4 = shardq::LinearSource::fp4_row32;
void BM_int8_fp8_rows(benchmark::State& state) { run_int8_rows<false>(state, kFp8, kInt8Cols); }
void BM_int8_fp4_rows(benchmark::State& state) { run_int8_rows<false>(state, kFp4, kInt8Cols); }
void BM_int8_fp8_rows_narrow(benchmark::State& state) { run_int8_rows<false>(state, kFp8, kInt8NarrowCols); }
void BM_int8_fp4_rows_narrow(benchmark::State& state) { run_int8_rows<false>(state, kFp4, kInt8NarrowCols); }
void BM_int8_fp4_rows_narrow32(benchmark::State& state) { run_int8_rows<false>(state, kFp4, kInt8Narrow32Cols); }
void BM_int8_fp8_rows_ref(benchmark::State& state) { run_int8_rows<true>(state, kFp8, kInt8Cols); }
void BM_int8_fp4_rows_ref(benchmark::State& state) { run_int8_rows<true>(state, kFp4, kInt8Cols); }

// The codec's chunk of 4096 rows as the worker calls it (output buffers reused).
void run_int8_codec(benchmark::State& state, shardq::CodecKind codec) {
  const bool fp8 = codec == shardq::CodecKind::fp8_to_int8;
  const LinearSourceBytes& source = int8_source(fp8 ? kFp8 : kFp4, kInt8Cols);
  shardq::Task task;
  task.name = "bench";
  task.codec = codec;
  task.inputs = {"bench.weight", "bench.scale"};
  task.outputs = {{"bench.weight", shardq::Dtype::I8, {kInt8Rows, kInt8Cols}},
                  {"bench.weight_scale", shardq::Dtype::F32, {kInt8Rows, 1}}};
  task.rows = kInt8Rows;
  task.cols = kInt8Cols;
  task.row_alignment = fp8 ? 32 : 1;
  task.rows_per_chunk = kInt8Rows;
  if (fp8) task.input_row_groups = {1, 32};
  const shardq::CodecParams params;
  const shardq::EncodeContext context{params, 0.0f, nullptr};
  const shardq::ChunkInput chunk{task, 0, kInt8Rows, {source.codes, source.scales}, nullptr};
  shardq::EncodedChunk out;
  for (auto _ : state) {
    benchmark::DoNotOptimize(shardq::encode_chunk(chunk, context, out, nullptr));
    benchmark::ClobberMemory();
  }
  set_int8_counters(state, kInt8Rows);
}

void BM_int8_fp8_codec(benchmark::State& state) { run_int8_codec(state, shardq::CodecKind::fp8_to_int8); }
void BM_int8_fp4_codec(benchmark::State& state) { run_int8_codec(state, shardq::CodecKind::fp4_to_int8); }

// memcpy of the output bytes (codes + scales) the rows above write.
void BM_memcpy_int8_output(benchmark::State& state) {
  std::vector<uint8_t> from_codes(kInt8CodeBytes, 1), to_codes(kInt8CodeBytes);
  std::vector<uint8_t> from_scales(kInt8ScaleBytes, 2), to_scales(kInt8ScaleBytes);
  for (auto _ : state) {
    std::memcpy(to_codes.data(), from_codes.data(), kInt8CodeBytes);
    std::memcpy(to_scales.data(), from_scales.data(), kInt8ScaleBytes);
    benchmark::ClobberMemory();
  }
  set_int8_counters(state, kInt8Rows);
}

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
BENCHMARK(BM_mxfp4_quantize_ref)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_mxfp4_quantize_simd)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_mxfp4_codec_row_decode_ref)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_mxfp4_codec_row_decode_simd)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_mxfp4_codec_row_fused)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_memcpy_mxfp4_expert_bytes)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_transcode_mxfp4_nvfp4)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_memcpy_int8_output)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_int8_fp8_rows)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_int8_fp4_rows)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_int8_fp8_rows_narrow)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_int8_fp4_rows_narrow)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_int8_fp4_rows_narrow32)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_int8_fp8_rows_ref)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_int8_fp4_rows_ref)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_int8_fp8_codec)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_int8_fp4_codec)->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
