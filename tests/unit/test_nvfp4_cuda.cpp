// quantize_rows_nvfp4_cuda == quantize_row_nvfp4_ref, bit for bit (codes, scales, every
// stat), RTN and the MSE search. Skips when built without CUDA or when no device is there.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "kernels/nvfp4.h"
#include "nvfp4_test_util.h"

#include "cuda_test_util.h"

#ifdef SHARDQ_WITH_CUDA
#include "kernels/cuda/nvfp4_cuda.h"
#endif

using namespace shardq;
using namespace shardq::test;

namespace {

#ifdef SHARDQ_WITH_CUDA
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
    expect_same_stats(cuda, ref, where);
  }
}
#endif

} // namespace

TEST(Nvfp4Cuda, RowsEqualRef) {
#ifndef SHARDQ_WITH_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  if (!test::have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(29);
  for (float spread : {1.0f, 3.0f, 60.0f}) {
    const auto x = random_values(rng, size_t(300) * 256, spread);
    expect_cuda_equals_ref(x, 256, Nvfp4::global_scale(amax_of(x)), "random, spread " + std::to_string(spread));
  }
  const auto wide = random_values(rng, size_t(3) * 7168, 3.0f);
  expect_cuda_equals_ref(wide, 7168, 1e-30f, "scales clamped at 448");
#endif
}

TEST(Nvfp4Cuda, ZeroTinyAndTieBlocksEqualRef) {
#ifndef SHARDQ_WITH_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  if (!test::have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(31);
  auto x = random_values(rng, 512, 2.0f);
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
