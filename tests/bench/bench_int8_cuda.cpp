// W8A8 INT8 rows on the CUDA device through Int8CudaWorkspace::quantize, from FP8 (E4M3,
// E8M0 per 32x32 block) and FP4 (E2M1, E8M0 per 32 of a row) sources, 131072 rows x 2048
// columns (256 MiB of I8 output), every row's report sums. The call takes host memory, so
// each iteration includes the copy to the device, the kernel and the copies back: the figure
// a stage calling it would see. Pageable and pinned input (tests/bench/cuda_bench_util.h).
// GB/s of OUTPUT (I8 codes + one F32 scale per row), as the CPU rows in bench_kernels.cpp.
// CUDA builds only (SHARDQ_WITH_CUDA); skipped when no device is there.
#ifdef SHARDQ_WITH_CUDA

#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda/int8_cuda.h"
#include "kernels/formats.h"
#include "kernels/int8.h"
#include "tests/bench/cuda_bench_util.h"

namespace {

constexpr int kCols = 2048;
constexpr int kRows = 1 << 17;
constexpr int kDistinctRows = 4096; // generated once, then tiled

// The source's code bytes (E4M3 one per value, E2M1 two per byte) and its E8M0 scales.
struct Source {
  shardq::Int8CudaSource kind;
  size_t code_bytes;
  size_t scale_bytes;
  int rows_per_scale_row;
};

Source source_of(shardq::Int8CudaSource kind) {
  const size_t values = size_t(kRows) * kCols;
  if (kind == shardq::Int8CudaSource::fp8_e4m3) return {kind, values, values / 32 / 32, 32};
  return {kind, values / 2, values / 32, 1};
}

// Random codes (no E4M3 NaN) and scales around 2^-8, the first kDistinctRows rows tiled.
void fill(const Source& source, uint8_t* codes, uint8_t* scales) {
  std::mt19937 rng(48);
  const size_t tile = source.code_bytes / (kRows / kDistinctRows);
  for (size_t i = 0; i < tile; ++i) {
    codes[i] = uint8_t(rng());
    if (source.kind == shardq::Int8CudaSource::fp8_e4m3 && shardq::E4M3::is_nan(codes[i])) codes[i] = 0x7E;
  }
  for (size_t start = tile; start < source.code_bytes; start += tile) std::memcpy(codes + start, codes, tile);
  for (size_t i = 0; i < source.scale_bytes; ++i) scales[i] = uint8_t(115 + rng() % 10);
}

// state.range(0): 0 = FP8 source, 1 = FP4; state.range(1): 1 = pinned input.
void BM_int8_cuda_rows(benchmark::State& state) {
  if (!shardq::test::have_cuda_device()) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const Source source =
      source_of(state.range(0) == 0 ? shardq::Int8CudaSource::fp8_e4m3 : shardq::Int8CudaSource::fp4_e2m1);
  const shardq::bench::HostBuffer<uint8_t> codes(source.code_bytes, state.range(1) != 0);
  const shardq::bench::HostBuffer<uint8_t> scales(source.scale_bytes, state.range(1) != 0);
  if (codes.data() == nullptr || scales.data() == nullptr) {
    state.SkipWithError("cudaMallocHost of the input failed");
    return;
  }
  fill(source, codes.data(), scales.data());
  std::vector<int8_t> out(size_t(kRows) * kCols);
  std::vector<float> row_scales(kRows);
  std::vector<shardq::Int8RowSums> sums(kRows);
  shardq::Int8CudaWorkspace workspace;
  const shardq::Int8CudaRows rows{source.kind, codes.data(), scales.data(), kRows, kCols, source.rows_per_scale_row};
  const auto quantize = [&] { return workspace.quantize(rows, out.data(), row_scales.data(), sums.data()); };
  if (!shardq::bench::time_device_calls(state, "Int8CudaWorkspace::quantize", quantize)) return;
  const double iterations = double(state.iterations());
  state.counters["GB/s"] = benchmark::Counter(iterations * double(out.size() + row_scales.size() * sizeof(float)) / 1e9,
                                              benchmark::Counter::kIsRate);
  state.counters["rows/s"] = benchmark::Counter(iterations * kRows, benchmark::Counter::kIsRate);
}

} // namespace

BENCHMARK(BM_int8_cuda_rows)
    ->ArgNames({"fp4", "pinned"})
    ->Args({0, 0})
    ->Args({1, 0})
    ->Args({0, 1})
    ->Args({1, 1})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

#endif
