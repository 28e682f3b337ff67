// Int8CudaWorkspace::quantize == quantize_row_int8_ref, bit for bit (codes, scale, sums,
// the all-zero flag), from fp32 rows and from FP8 / FP4 source rows (decoded on the CPU as
// the fused SIMD rows decode them, then the ref). Skips when built without CUDA or when no
// device is there.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/formats.h"
#include "kernels/int8.h"

#include "cuda_test_util.h"

#ifdef SHARDQ_WITH_CUDA
#include "kernels/cuda/int8_cuda.h"
#endif

using namespace shardq;

namespace {

#ifdef SHARDQ_WITH_CUDA
uint64_t bits_of(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  return bits;
}

// The rows' decoded values (what the CPU quantizes), `rows.cols` per row.
std::vector<float> decoded(const Int8CudaRows& rows) {
  std::vector<float> x(size_t(rows.rows) * size_t(rows.cols));
  for (int r = 0; r < rows.rows; ++r)
    for (int c = 0; c < rows.cols; ++c) {
      const size_t i = size_t(r) * size_t(rows.cols) + size_t(c);
      if (rows.source == Int8CudaSource::f32) {
        x[i] = static_cast<const float*>(rows.values)[i];
        continue;
      }
      const float scale = e8m0_to_float(rows.scales[size_t(r / rows.rows_per_scale_row) * size_t(rows.cols / 32) + size_t(c / 32)]);
      if (rows.source == Int8CudaSource::fp8_e4m3) {
        x[i] = e4m3_to_float(static_cast<const uint8_t*>(rows.values)[i]) * scale;
      } else {
        const uint8_t byte = static_cast<const uint8_t*>(rows.values)[i / 2];
        x[i] = e2m1_to_float(c % 2 == 0 ? byte & 0xF : byte >> 4) * scale;
      }
    }
  return x;
}

void expect_cuda_equals_ref(Int8CudaWorkspace& workspace, const Int8CudaRows& rows, const std::string& what) {
  const std::vector<float> x = decoded(rows);
  const size_t n = size_t(rows.rows), cols = size_t(rows.cols);
  std::vector<int8_t> codes_ref(n * cols), codes_cuda(n * cols, int8_t(0x55));
  std::vector<float> scales_ref(n), scales_cuda(n, -1.0f);
  std::vector<Int8RowSums> sums_ref(n), sums_cuda(n);
  for (size_t r = 0; r < n; ++r)
    scales_ref[r] = quantize_row_int8_ref(x.data() + r * cols, rows.cols, codes_ref.data() + r * cols, &sums_ref[r]);
  const char* error = workspace.quantize(rows, codes_cuda.data(), scales_cuda.data(), sums_cuda.data());
  ASSERT_EQ(error, nullptr) << what << ": " << error;
  ASSERT_EQ(codes_cuda, codes_ref) << what;
  for (size_t r = 0; r < n; ++r) {
    ASSERT_EQ(std::bit_cast<uint32_t>(scales_cuda[r]), std::bit_cast<uint32_t>(scales_ref[r])) << what << ", row " << r;
    ASSERT_EQ(bits_of(sums_cuda[r].source_sq), bits_of(sums_ref[r].source_sq)) << what << ", row " << r;
    ASSERT_EQ(bits_of(sums_cuda[r].error_sq), bits_of(sums_ref[r].error_sq)) << what << ", row " << r;
    ASSERT_EQ(sums_cuda[r].all_zero, sums_ref[r].all_zero) << what << ", row " << r;
  }
}
#endif

} // namespace

TEST(Int8Cuda, FloatRowsEqualRef) {
#ifndef SHARDQ_WITH_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  if (!test::have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  Int8CudaWorkspace workspace;
  std::mt19937 rng(41);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int cols : {1, 17, 256, 300, 2048, 7168}) {
    std::vector<float> x(size_t(37) * size_t(cols));
    for (float& v : x) v = normal(rng);
    Int8CudaRows rows{Int8CudaSource::f32, x.data(), nullptr, 37, cols, 1};
    expect_cuda_equals_ref(workspace, rows, "random, cols " + std::to_string(cols));
  }
  // Adversarial rows of 256: quotients exactly on .5 (scale 1 and 2), an all-zero row with
  // a negative zero, one huge value among tiny ones, subnormals, a subnormal scale.
  std::vector<float> x(size_t(6) * 256, 0.0f);
  for (int c = 0; c < 256; ++c) {
    x[size_t(c)] = c == 0 ? 127.0f : float(c % 127) - 63.5f;        // scale 1: ties
    x[256 + size_t(c)] = c == 0 ? -254.0f : float(2 * (c % 127) - 125); // scale 2: ties
    x[3 * 256 + size_t(c)] = c == 5 ? 3e38f : normal(rng) * 1e-30f;
    x[4 * 256 + size_t(c)] = normal(rng) * 0x1p-140f;                 // subnormal values and scale
    x[5 * 256 + size_t(c)] = normal(rng) * 0x1p-100f;
  }
  x[2 * 256 + 7] = -0.0f;
  Int8CudaRows rows{Int8CudaSource::f32, x.data(), nullptr, 6, 256, 1};
  expect_cuda_equals_ref(workspace, rows, "ties, zero, huge, subnormal");
#endif
}

TEST(Int8Cuda, Fp8AndFp4RowsEqualRef) {
#ifndef SHARDQ_WITH_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  if (!test::have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  Int8CudaWorkspace workspace;
  std::mt19937 rng(43);
  const int rows = 96, cols = 2048;
  std::vector<uint8_t> codes(size_t(rows) * cols), packed(size_t(rows) * cols / 2);
  for (uint8_t& code : codes) {
    do code = uint8_t(rng()); while (E4M3::is_nan(code));
  }
  for (uint8_t& byte : packed) byte = uint8_t(rng());
  // Scale bytes over the E8M0 range, byte 0 (the subnormal 2^-127) included, up to where
  // 448 and 6 times the scale stay finite (245).
  for (const auto& [low, high] : {std::pair{112, 124}, std::pair{0, 20}, std::pair{230, 245}}) {
    std::uniform_int_distribution<int> byte(low, high);
    std::vector<uint8_t> fp8_scales(size_t(rows / 32) * (cols / 32)), fp4_scales(size_t(rows) * (cols / 32));
    for (uint8_t& s : fp8_scales) s = uint8_t(byte(rng));
    for (uint8_t& s : fp4_scales) s = uint8_t(byte(rng));
    const std::string range = " scales " + std::to_string(low) + ".." + std::to_string(high);
    expect_cuda_equals_ref(workspace, {Int8CudaSource::fp8_e4m3, codes.data(), fp8_scales.data(), rows, cols, 32},
                           "FP8" + range);
    expect_cuda_equals_ref(workspace, {Int8CudaSource::fp4_e2m1, packed.data(), fp4_scales.data(), rows, cols, 1},
                           "FP4" + range);
  }
  // An all-zero FP8 row group and FP4 rows of zeros with their sign bits set.
  std::fill(codes.begin(), codes.begin() + 32 * cols, uint8_t{0});
  codes[5] = 0x80;
  std::fill(packed.begin(), packed.begin() + cols, uint8_t{0x88});
  const std::vector<uint8_t> fp8_scales(size_t(rows / 32) * (cols / 32), 127), fp4_scales(size_t(rows) * (cols / 32), 127);
  expect_cuda_equals_ref(workspace, {Int8CudaSource::fp8_e4m3, codes.data(), fp8_scales.data(), rows, cols, 32},
                         "FP8 zero rows");
  expect_cuda_equals_ref(workspace, {Int8CudaSource::fp4_e2m1, packed.data(), fp4_scales.data(), rows, cols, 1},
                         "FP4 zero rows");
#endif
}
