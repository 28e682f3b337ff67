// Stage amax: the scale-guided amax (reads only the rows that can decide it) equals the
// full pass bit for bit, on random and adversarial chunks, and reads few rows when the
// largest scales are rare.
#include <gtest/gtest.h>

#include <bit>
#include <random>
#include <vector>

#include "stages/amax.h"
#include "stages/stage_error.h"

namespace shardq {
namespace {

constexpr int kCols = 256, kScaleCols = kCols / 32;

struct Chunk {
  std::vector<uint8_t> codes, scales;
  uint64_t rows;
  explicit Chunk(uint64_t n) : codes(n * kCols), scales(n * kScaleCols), rows(n) {}
  Fp8RowChunk view() const { return {"t.weight", 1000, rows, kCols, codes, scales, "t.scale"}; }
};

// Random finite codes and scales drawn from [low, high].
Chunk random_chunk(uint64_t rows, uint8_t low, uint8_t high, uint32_t seed) {
  std::mt19937 rng(seed);
  Chunk chunk(rows);
  for (auto& code : chunk.codes) {
    do code = uint8_t(rng()); while ((code & 0x7F) == 0x7F);
  }
  for (auto& scale : chunk.scales) scale = uint8_t(low + rng() % (high - low + 1));
  return chunk;
}

struct SparseResult {
  float amax;
  uint64_t rows_read;
};

SparseResult sparse_amax(const Chunk& chunk) {
  uint64_t rows_read = 0;
  const auto read = [&](uint64_t first, uint64_t count, std::span<uint8_t> out) {
    ASSERT_LE(first + count, chunk.rows);
    ASSERT_EQ(out.size(), count * kCols);
    std::copy_n(chunk.codes.begin() + ptrdiff_t(first * kCols), count * kCols, out.begin());
  };
  const float amax = amax_fp8_chunk_from_scales(chunk.view(), read, &rows_read);
  return {amax, rows_read};
}

void expect_same_amax(const Chunk& chunk) {
  const float full = amax_fp8_chunk(chunk.view());
  const SparseResult sparse = sparse_amax(chunk);
  EXPECT_EQ(std::bit_cast<uint32_t>(sparse.amax), std::bit_cast<uint32_t>(full)) << sparse.amax << " vs " << full;
  EXPECT_LE(sparse.rows_read, chunk.rows);
}

TEST(AmaxStage, FromScalesEqualsFullPassOnRandomChunks) {
  uint32_t seed = 1;
  for (const auto& [low, high] : {std::pair<int, int>{120, 130}, {0, 254}, {127, 127}, {0, 3}, {250, 254}}) {
    for (uint64_t rows : {1u, 7u, 300u, 2048u}) expect_same_amax(random_chunk(rows, uint8_t(low), uint8_t(high), seed++));
  }
}

TEST(AmaxStage, FromScalesReadsFewRowsWhenTheLargestScaleIsRare) {
  Chunk chunk = random_chunk(4096, 110, 120, 9);
  chunk.scales[size_t(1234) * kScaleCols + 3] = 126; // one outlier block
  const SparseResult sparse = sparse_amax(chunk);
  EXPECT_EQ(sparse.amax, amax_fp8_chunk(chunk.view()));
  EXPECT_LE(sparse.rows_read, 1u + 16u) << "only the outlier's row (and its coalesced neighbours) should be read";
}

TEST(AmaxStage, FromScalesReadsMoreRowsWhenTheTopBlocksAreSmall) {
  // The rows with the largest scale hold only tiny codes: blocks one scale lower can still
  // exceed them, and are read too.
  Chunk chunk = random_chunk(512, 120, 121, 4);
  for (uint64_t r = 0; r < chunk.rows; ++r)
    for (int s = 0; s < kScaleCols; ++s) chunk.scales[r * kScaleCols + s] = r == 0 ? 122 : 121;
  for (int c = 0; c < kCols; ++c) chunk.codes[size_t(c)] = 0x01; // row 0: tiny codes
  chunk.codes[size_t(300) * kCols + 5] = 0x7E;                    // row 300: 448 * 2^-6
  const SparseResult sparse = sparse_amax(chunk);
  EXPECT_EQ(sparse.amax, amax_fp8_chunk(chunk.view()));
  EXPECT_EQ(sparse.amax, 448.0f * 0x1p-6f);
  EXPECT_EQ(sparse.rows_read, chunk.rows) << "every row of scale 121 can exceed row 0's tiny amax";
}

TEST(AmaxStage, FromScalesOfAllZeroCodesIsZero) {
  Chunk chunk = random_chunk(100, 100, 140, 5);
  std::fill(chunk.codes.begin(), chunk.codes.end(), uint8_t{0x80}); // -0
  EXPECT_EQ(sparse_amax(chunk).amax, 0.0f);
  EXPECT_EQ(amax_fp8_chunk(chunk.view()), 0.0f);
}

TEST(AmaxStage, FromScalesRefusesNanScaleNamingTensorRowColumn) {
  Chunk chunk = random_chunk(64, 100, 110, 6);
  chunk.scales[size_t(17) * kScaleCols + 5] = 0xFF;
  try {
    sparse_amax(chunk);
    FAIL() << "a NaN scale was accepted";
  } catch (const StageError& e) {
    EXPECT_STREQ(e.what(), "t.scale: row 1017 column 5: E8M0 scale is NaN (0xFF); expected a finite scale");
  }
}

TEST(AmaxStage, FromScalesRefusesNanCodeInARowItReads) {
  Chunk chunk = random_chunk(64, 100, 100, 7);
  chunk.scales[size_t(40) * kScaleCols] = 101; // row 40 holds the largest scale: it is read
  chunk.codes[size_t(40) * kCols + 9] = 0xFF;
  EXPECT_THROW(sparse_amax(chunk), StageError);
}

} // namespace
} // namespace shardq
