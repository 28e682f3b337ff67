// GPTQ on one core: rows of 256 through one hash column's factor, for gptq (amax scales)
// and gptq-mse, next to the row quantizers (rtn, mse: the SIMD kernels the stage runs) and
// to this machine's SGEMM with the same BLAS, single thread, measured interleaved with the
// GPTQ iterations (this 2-core VM's speed drifts by +-30% over seconds: a reference taken
// once, before, made the ratio drift with it).
// Flop count used: 2 * 32,640 flops per row = every column j updates the 255 - j later
// columns once (sum = 256 * 255 / 2 FMAs, docs/gptq.md "Cost": ~33K FMA per row), counting an
// FMA as 2 flops; the quantization itself and the stats are not counted. The kernel runs as
// the quantize stage calls it (GptqSums::counters_only: the stage sums errors per row).
#include <benchmark/benchmark.h>

#include <cblas.h>

#include <ctime>
#include <random>
#include <thread>
#include <vector>

#include "kernels/gptq.h"
#include "stages/factors.h"

namespace {

constexpr int kCols = shardq::kGptqCols;
constexpr int kRows = 16384;
constexpr double kFlopsPerRow = 2.0 * (kCols * (kCols - 1) / 2);

const std::vector<float>& source_rows() {
  static const std::vector<float> rows = [] {
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    std::vector<float> out(size_t(kRows) * kCols);
    for (float& v : out) v = normal(rng);
    return out;
  }();
  return rows;
}

// A factor from a random correlated W (the speed does not depend on its values).
const std::vector<float>& factor_fp32() {
  static const std::vector<float> upper = [] {
    constexpr int out_rows = 1024;
    std::mt19937 rng(8);
    std::normal_distribution<float> normal(0.0f, 0.01f);
    std::vector<float> w(size_t(out_rows) * kCols);
    for (float& v : w) v = normal(rng);
    for (int r = 0; r < out_rows; ++r)
      for (int d = 1; d < kCols; ++d) w[size_t(r) * kCols + d] += 0.5f * w[size_t(r) * kCols + d - 1];
    const auto factor = shardq::compute_column_factor(w.data(), out_rows, kCols, 0, 0.01, 1);
    return shardq::gptq_factor_fp32(factor.upper.data());
  }();
  return upper;
}

float global_scale() { return shardq::Nvfp4::global_scale(0.1f); }

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// CPU seconds of `calls` single-thread SGEMMs 256^3 (the same clock Google Benchmark's
// rates use, so a loaded machine skews neither side).
constexpr int kSgemmDim = 256, kSgemmCallsPerIteration = 8;
constexpr double kSgemmFlops = 2.0 * kSgemmDim * kSgemmDim * kSgemmDim;

double timed_sgemm_seconds(int calls) {
  static std::vector<float> a(size_t(kSgemmDim) * kSgemmDim, 0.5f), b(a.size(), 0.25f), c(a.size(), 0.0f);
  const double start = thread_cpu_seconds();
  for (int i = 0; i < calls; ++i)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, kSgemmDim, kSgemmDim, kSgemmDim, 1.0f, a.data(), kSgemmDim,
                b.data(), kSgemmDim, 0.0f, c.data(), kSgemmDim);
  benchmark::DoNotOptimize(c.data());
  return thread_cpu_seconds() - start;
}

void set_row_counters(benchmark::State& state) {
  const double rows = double(state.iterations()) * kRows;
  state.counters["rows/s"] = benchmark::Counter(rows, benchmark::Counter::kIsRate);
}

void BM_sgemm_single_thread(benchmark::State& state) {
  shardq::gptq_pin_blas_threads();
  const int m = int(state.range(0)), n = int(state.range(1)), k = int(state.range(2));
  std::vector<float> a(size_t(m) * k, 0.5f), b(size_t(k) * n, 0.25f), c(size_t(m) * n, 0.0f);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n);
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * m * n * k * double(state.iterations()) / 1e9,
                                                 benchmark::Counter::kIsRate);
}

void BM_gptq(benchmark::State& state) {
  shardq::gptq_pin_blas_threads();
  double sgemm_seconds = 0.0;
  const shardq::ScaleSearch search{int(state.range(0)), 0.75};
  const int width = int(state.range(1));
  const auto& upper = factor_fp32();
  const std::vector<float>& x = source_rows();
  std::vector<uint8_t> packed(size_t(kRows) * kCols / 2), scales(size_t(kRows) * kCols / 16);
  shardq::GptqWorkspace workspace;
  for (auto _ : state) {
    shardq::BlockStats stats;
    shardq::gptq_quantize_rows(x.data(), kRows, upper.data(), global_scale(), search, width, packed.data(),
                               scales.data(), stats, workspace, shardq::GptqSums::counters_only);
    benchmark::DoNotOptimize(stats);
    state.PauseTiming();
    sgemm_seconds += timed_sgemm_seconds(kSgemmCallsPerIteration);
    state.ResumeTiming();
  }
  set_row_counters(state);
  const double sgemm_rate = kSgemmFlops * kSgemmCallsPerIteration * double(state.iterations()) / sgemm_seconds / 1e9;
  const double gflops = kFlopsPerRow * double(state.iterations()) * kRows / 1e9;
  state.counters["GFLOP/s"] = benchmark::Counter(gflops, benchmark::Counter::kIsRate);
  state.counters["sgemm_GFLOP/s"] = sgemm_rate;
  // vs_sgemm = GFLOP/s / sgemm_GFLOP/s, printed by scripts/bench.sh (a rate counter is only
  // final after the run).
}

void BM_row_quantizer(benchmark::State& state) {
  const shardq::ScaleSearch search{int(state.range(0)), 0.75};
  const auto& x = source_rows();
  std::vector<uint8_t> packed(size_t(kRows) * kCols / 2), scales(size_t(kRows) * kCols / 16);
  for (auto _ : state) {
    shardq::BlockStats stats;
    for (int r = 0; r < kRows; ++r)
      shardq::quantize_row_nvfp4_simd(x.data() + size_t(r) * kCols, kCols, global_scale(), search,
                                     packed.data() + size_t(r) * kCols / 2, scales.data() + size_t(r) * kCols / 16,
                                     stats);
    benchmark::DoNotOptimize(stats);
  }
  set_row_counters(state);
}

// The factors stage alone: the Gram, damping, Cholesky and inverse of every hash column
// of a wkv-like linear (1024 x 8 columns of 256), the columns spread over `threads`
// threads as a rank's compute threads take factor items. Wall time.
void BM_column_factors(benchmark::State& state) {
  shardq::gptq_pin_blas_threads();
  constexpr int out_rows = 1024, columns = 8;
  const int threads = int(state.range(0));
  static const std::vector<float> w = [] {
    std::mt19937 rng(9);
    std::normal_distribution<float> normal(0.0f, 0.01f);
    std::vector<float> values(size_t(out_rows) * columns * kCols);
    for (float& v : values) v = normal(rng);
    return values;
  }();
  for (auto _ : state) {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        for (int column = t; column < columns; column += threads) {
          benchmark::DoNotOptimize(shardq::compute_column_factor(w.data(), out_rows, columns * kCols, column, 0.01, 1));
        }
      });
    }
    for (auto& thread : pool) thread.join();
  }
  state.counters["columns/s"] = benchmark::Counter(double(columns) * double(state.iterations()), benchmark::Counter::kIsRate);
}

} // namespace

// Shapes: the 256^3 reference and the lazy GEMM of B = 128 (240..128 x 64 x 128).
BENCHMARK(BM_sgemm_single_thread)->Args({256, 256, 256})->Args({128, 64, 128})->Unit(benchmark::kMicrosecond);
// Args: {scale candidates (1 = gptq, 8 = gptq-mse), lazy width B}.
BENCHMARK(BM_gptq)->ArgNames({"cand", "B"})->Args({1, 128})->Args({8, 128})->Args({1, 64})->Args({1, 256})
    ->Unit(benchmark::kMillisecond);
// Args: {scale candidates}: 1 = rtn, 8 = mse (quantize_row_nvfp4_simd).
BENCHMARK(BM_row_quantizer)->ArgNames({"cand"})->Arg(1)->Arg(8)->Unit(benchmark::kMillisecond);
// Args: {threads}.
BENCHMARK(BM_column_factors)->ArgNames({"threads"})->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
