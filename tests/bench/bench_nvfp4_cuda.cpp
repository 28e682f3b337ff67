// NVFP4 rows on the CUDA device through quantize_rows_nvfp4_cuda, RTN and MSE, on 1M rows of
// 256 fp32 values (1 GiB of input). The call takes host memory, so each iteration includes the
// copy to the device, the kernel, the copies back and the host's stats fold: the figure a
// stage calling it sees. Pageable and pinned input (tests/bench/cuda_bench_util.h).
// Wall-clock time; counters as bench_kernels.cpp: rows/s and GB/s of fp32 input (1 KiB per row).
// CUDA builds only (SHARDQ_WITH_CUDA); skipped when no device is there.
#ifdef SHARDQ_WITH_CUDA

#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda/nvfp4_cuda.h"
#include "kernels/nvfp4.h"
#include "tests/bench/cuda_bench_util.h"

namespace {

constexpr int kCols = 256;
constexpr int kRows = 1 << 20;
constexpr int kDistinctRows = 65536; // generated once, then tiled: the device caches none of 1 GiB

void fill_rows(float* out) {
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  const size_t tile = size_t(kDistinctRows) * kCols;
  for (size_t i = 0; i < tile; ++i) out[i] = normal(rng);
  for (size_t start = tile; start < size_t(kRows) * kCols; start += tile)
    std::memcpy(out + start, out, tile * sizeof(float));
}

void set_counters(benchmark::State& state) {
  const double rows = double(state.iterations()) * kRows;
  state.counters["rows/s"] = benchmark::Counter(rows, benchmark::Counter::kIsRate);
  state.counters["GB/s"] = benchmark::Counter(rows * kCols * sizeof(float) / 1e9, benchmark::Counter::kIsRate);
}

// state.range(0): candidates (1 = RTN, 8 = MSE); state.range(1): 1 = pinned input.
void BM_nvfp4_cuda_rows(benchmark::State& state) {
  if (!shardq::test::have_cuda_device()) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const shardq::bench::HostBuffer<float> x(size_t(kRows) * kCols, state.range(1) != 0);
  if (x.data() == nullptr) {
    state.SkipWithError("cudaMallocHost of the input failed");
    return;
  }
  fill_rows(x.data());
  const shardq::ScaleSearch search{int(state.range(0)), 0.75};
  const float global = shardq::Nvfp4::global_scale(0.1f);
  std::vector<uint8_t> packed(size_t(kRows) * kCols / 2), scales(size_t(kRows) * kCols / 16);
  const auto quantize = [&] {
    shardq::BlockStats stats;
    const char* error =
        shardq::quantize_rows_nvfp4_cuda(x.data(), kRows, kCols, global, search, packed.data(), scales.data(), stats);
    benchmark::DoNotOptimize(stats);
    return error;
  };
  if (shardq::bench::time_device_calls(state, "quantize_rows_nvfp4_cuda", quantize)) set_counters(state);
}

} // namespace

BENCHMARK(BM_nvfp4_cuda_rows)
    ->ArgNames({"cand", "pinned"})
    ->Args({1, 0})
    ->Args({8, 0})
    ->Args({1, 1})
    ->Args({8, 1})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

#endif
