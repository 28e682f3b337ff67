#include "stages/amax.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/formats.h"

namespace shardq {
namespace {

// Rows closer than this are read in one piece (one pread instead of two; the rows in
// between only add values no larger than the chunk's amax).
constexpr uint64_t kCoalesceGapRows = 16;

// Marks (in `taken`) and returns the rows not yet taken that have a block whose scale
// code satisfies `wanted`.
template <typename Wanted>
std::vector<uint64_t> take_rows(const Fp8RowChunk& chunk, std::vector<char>& taken, Wanted wanted) {
  const int scale_cols = chunk.cols / 32;
  std::vector<uint64_t> rows;
  for (uint64_t r = 0; r < chunk.rows; ++r) {
    if (taken[r]) continue;
    const uint8_t* scales = chunk.scales.data() + r * scale_cols;
    if (std::any_of(scales, scales + scale_cols, wanted)) {
      taken[r] = 1;
      rows.push_back(r);
    }
  }
  return rows;
}

// amax over the given rows (ascending), read in coalesced runs.
float amax_of_rows(const Fp8RowChunk& chunk, const std::vector<uint64_t>& rows, const ReadChunkCodes& read_codes,
                   uint64_t& rows_read) {
  const int scale_cols = chunk.cols / 32;
  std::vector<uint8_t> codes;
  float amax = 0.0f;
  for (size_t i = 0; i < rows.size();) {
    size_t j = i + 1;
    while (j < rows.size() && rows[j] - rows[j - 1] <= kCoalesceGapRows) ++j;
    const uint64_t first = rows[i], count = rows[j - 1] - first + 1;
    codes.resize(count * chunk.cols);
    read_codes(first, count, codes);
    rows_read += count;
    const Fp8RowChunk piece{chunk.tensor, chunk.first_row + first, count, chunk.cols, codes,
                            chunk.scales.subspan(first * scale_cols, count * scale_cols), chunk.scale_tensor};
    amax = std::max(amax, amax_fp8_chunk(piece));
    i = j;
  }
  return amax;
}

} // namespace

float amax_fp8_chunk(const Fp8RowChunk& chunk) {
  check_fp8_chunk(chunk);
  // |e4m3 * 2^k| is largest where the code magnitude is: take the largest code magnitude
  // of each 32-block and scale it once.
  const int scale_cols = chunk.cols / 32;
  float amax = 0.0f;
  for (uint64_t r = 0; r < chunk.rows; ++r) {
    const uint8_t* codes = chunk.codes.data() + r * chunk.cols;
    const uint8_t* scales = chunk.scales.data() + r * scale_cols;
    for (int s = 0; s < scale_cols; ++s) {
      uint8_t largest = 0;
      for (int i = 0; i < 32; ++i) largest = std::max<uint8_t>(largest, codes[s * 32 + i] & 0x7F);
      amax = std::max(amax, e4m3_to_float(largest) * e8m0_to_float(scales[s]));
    }
  }
  return amax;
}

float amax_fp8_chunk_from_scales(const Fp8RowChunk& chunk, const ReadChunkCodes& read_codes, uint64_t* rows_read) {
  check_e8m0_scales(chunk);
  uint64_t read = 0;
  float amax = 0.0f;
  if (chunk.rows > 0) {
    std::vector<char> taken(chunk.rows, 0);
    const uint8_t top = *std::max_element(chunk.scales.begin(), chunk.scales.end());
    amax = amax_of_rows(chunk, take_rows(chunk, taken, [&](uint8_t code) { return code == top; }), read_codes, read);
    // Every block left out now has all its values <= its bound <= amax.
    const auto can_exceed = [&](uint8_t code) { return E4M3::max * e8m0_to_float(code) > amax; };
    amax = std::max(amax, amax_of_rows(chunk, take_rows(chunk, taken, can_exceed), read_codes, read));
  }
  if (rows_read) *rows_read = read;
  return amax;
}

} // namespace shardq
