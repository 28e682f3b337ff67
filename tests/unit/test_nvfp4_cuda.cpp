// quantize_rows_nvfp4_cuda == quantize_row_nvfp4_ref, bit for bit (codes, scales, every
// stat), RTN and the MSE search. Skips when built without CUDA or when no device is there.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/nvfp4.h"

#ifdef SHARDQ_WITH_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda/nvfp4_cuda.h"
#endif

using namespace shardq;

namespace {

#ifdef SHARDQ_WITH_CUDA
bool have_device() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

void expect_cuda_equals_ref(const std::vector<float>& x, int cols, float global, const std::string& what) {
  const int rows = int(x.size()) / cols;
  for (const ScaleSearch search : {ScaleSearch{1}, ScaleSearch{8, 0.75}}) {
    std::vector<uint8_t> packed_ref(x.size() / 2), packed_cuda(x.size() / 2, 0xEE);
    std::vector<uint8_t> scales_ref(x.size() / 16), scales_cuda(x.size() / 16, 0xEE);
    BlockStats ref, cuda;
    for (int r = 0; r < rows; ++r)
      quantize_row_nvfp4_ref(x.data() + size_t(r) * cols, cols, global, search, packed_ref.data() + size_t(r) * cols / 2,
                             scales_ref.data() + size_t(r) * cols / 16, ref);
    const char* error = quantize_rows_nvfp4_cuda(x.data(), rows, cols, global, search, packed_cuda.data(),
                                                 scales_cuda.data(), cuda);
    const std::string where = what + ", candidates " + std::to_string(search.candidates);
    ASSERT_EQ(error, nullptr) << where << ": " << error;
    ASSERT_EQ(packed_cuda, packed_ref) << where;
    ASSERT_EQ(scales_cuda, scales_ref) << where;
    EXPECT_EQ(cuda.blocks, ref.blocks) << where;
    EXPECT_EQ(cuda.zero_blocks, ref.zero_blocks) << where;
    EXPECT_EQ(cuda.scale_underflows, ref.scale_underflows) << where;
    EXPECT_EQ(cuda.candidate_wins, ref.candidate_wins) << where;
    EXPECT_TRUE(same_bits(cuda.error_sq, ref.error_sq)) << where << ": " << cuda.error_sq << " vs " << ref.error_sq;
    EXPECT_TRUE(same_bits(cuda.reference_sq, ref.reference_sq)) << where;
  }
}

std::vector<float> random_rows(std::mt19937& rng, size_t count, float spread_exponent) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> exponent(-spread_exponent, spread_exponent);
  std::vector<float> out(count);
  for (float& v : out) v = normal(rng) * std::exp2(exponent(rng));
  return out;
}

float amax_of(const std::vector<float>& x) {
  float amax = 0.0f;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  return amax;
}
#endif

} // namespace

TEST(Nvfp4Cuda, RowsEqualRef) {
#ifndef SHARDQ_WITH_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(29);
  for (float spread : {1.0f, 3.0f, 60.0f}) {
    const auto x = random_rows(rng, size_t(300) * 256, spread);
    expect_cuda_equals_ref(x, 256, Nvfp4::global_scale(amax_of(x)), "random, spread " + std::to_string(spread));
  }
  const auto wide = random_rows(rng, size_t(3) * 7168, 3.0f);
  expect_cuda_equals_ref(wide, 7168, 1e-30f, "scales clamped at 448");
#endif
}

TEST(Nvfp4Cuda, ZeroTinyAndTieBlocksEqualRef) {
#ifndef SHARDQ_WITH_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(31);
  auto x = random_rows(rng, 512, 2.0f);
  for (size_t i = 0; i < 16; ++i) x[i] = (i % 2) ? -0.0f : 0.0f; // a zero block
  for (size_t i = 256; i < 512; ++i) x[i] *= 1e-7f;              // scale underflows
  x[300] = 0x1p-149f;
  expect_cuda_equals_ref(x, 256, Nvfp4::global_scale(amax_of(x)), "zero and tiny");
  // Quotients on every E2M1 midpoint and code, both signs, for exact E4M3 scales.
  const float quotients[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f};
  std::vector<float> ties;
  for (float scale : {0x1p-9f, 0.1875f, 1.0f, 1.125f, 448.0f})
    for (int sign = 0; sign < 2; ++sign) {
      ties.push_back(6.0f * scale);
      for (float q : quotients) ties.push_back((sign ? -q : q) * scale);
      while (ties.size() % 16) ties.push_back(sign ? -0.0f : 0.0f);
    }
  expect_cuda_equals_ref(ties, 16, 1.0f, "ties");
#endif
}
