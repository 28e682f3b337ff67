#include "pipeline/fixture_content.h"

#include <algorithm>
#include <cmath>

namespace shardq::fixture {

uint64_t tensor_key(uint64_t seed, std::string_view name) {
  uint64_t hash = 0xCBF29CE484222325ull;
  for (unsigned char c : name) hash = (hash ^ c) * 0x100000001B3ull;
  return mix64(hash ^ mix64(seed));
}

uint8_t e8m0_ceil_scale(float amax, float format_max, float amax_floor) {
  return e8m0_from_float(std::max(amax, amax_floor) / format_max, E8M0Rounding::toward_pos_inf);
}

namespace {

float block_amax(const float* x, int n) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  return amax;
}

} // namespace

void quantize_row_fp8_e8m0_32(const float* x, int cols, uint8_t* codes, uint8_t* scales) {
  for (int b = 0; b < cols / 32; ++b) {
    const float* block = x + 32 * b;
    const uint8_t scale = e8m0_ceil_scale(block_amax(block, 32), E4M3::max, kDeepSeekAmaxFloor);
    scales[b] = scale;
    // Dividing by a power of two is exact, and scale >= amax / 448 keeps every quotient
    // inside E4M3's range.
    const float inverse = e8m0_to_float(uint8_t(254 - scale));
    for (int i = 0; i < 32; ++i) codes[32 * b + i] = e4m3_code_in_range(block[i] * inverse);
  }
}

void quantize_fp8_blocks_32x32(std::span<const float> w, uint64_t rows, uint64_t cols, std::vector<uint8_t>& codes,
                               std::vector<uint8_t>& scales) {
  const uint64_t block_rows = (rows + 31) / 32, block_cols = (cols + 31) / 32;
  codes.assign(rows * cols, 0);
  scales.assign(block_rows * block_cols, 0);
  for (uint64_t br = 0; br < block_rows; ++br) {
    const uint64_t r_end = std::min(rows, 32 * br + 32);
    for (uint64_t bc = 0; bc < block_cols; ++bc) {
      const uint64_t c_end = std::min(cols, 32 * bc + 32);
      float amax = 0.0f;
      for (uint64_t r = 32 * br; r < r_end; ++r) {
        for (uint64_t c = 32 * bc; c < c_end; ++c) amax = std::max(amax, std::fabs(w[r * cols + c]));
      }
      const uint8_t scale = e8m0_ceil_scale(amax, E4M3::max, kDeepSeekAmaxFloor);
      scales[br * block_cols + bc] = scale;
      const float inverse = e8m0_to_float(uint8_t(254 - scale));
      for (uint64_t r = 32 * br; r < r_end; ++r) {
        for (uint64_t c = 32 * bc; c < c_end; ++c) codes[r * cols + c] = e4m3_code_in_range(w[r * cols + c] * inverse);
      }
    }
  }
}

void quantize_row_mxfp4_deepseek(const float* x, int cols, uint8_t* packed, uint8_t* scales) {
  for (int b = 0; b < cols / 32; ++b) {
    const float* block = x + 32 * b;
    const uint8_t scale = e8m0_ceil_scale(block_amax(block, 32), E2M1::max, kDeepSeekAmaxFloor);
    scales[b] = scale;
    const float inverse = e8m0_to_float(uint8_t(254 - scale));
    for (int i = 0; i < 32; i += 2) {
      packed[16 * b + i / 2] = pack_e2m1x2(e2m1_from_float(block[i] * inverse), e2m1_from_float(block[i + 1] * inverse));
    }
  }
}

EngramTableContent::EngramTableContent(uint64_t key, std::span<const uint64_t> column_offsets, int cols)
    : key_(key), column_offsets_(column_offsets.begin(), column_offsets.end()), dim_gains_(size_t(cols)) {
  // Some embedding dimensions are consistently larger than others, as in trained tables.
  static constexpr std::array<float, 6> gains = {0.5f, 1.0f, 1.0f, 1.0f, 1.5f, 2.0f};
  RowRng rng(key_, ~0ull);
  for (float& gain : dim_gains_) gain = gains[rng.next() % gains.size()];
}

EngramTableContent::RowKind EngramTableContent::kind(uint64_t r) const {
  if (std::binary_search(column_offsets_.begin(), column_offsets_.end(), r)) return RowKind::pad;
  RowRng rng(key_, r);
  const uint64_t draw = rng.next() % 512;
  if (draw == 0) return RowKind::zero;
  if (draw <= 2) return RowKind::tiny;
  return RowKind::normal;
}

void EngramTableContent::row(uint64_t r, float* out) const {
  const RowKind row_kind = kind(r);
  const size_t cols = dim_gains_.size();
  if (row_kind == RowKind::pad || row_kind == RowKind::zero) {
    std::fill(out, out + cols, 0.0f);
    return;
  }
  RowRng rng(key_, r);
  const uint64_t first = rng.next(); // the draw kind() used
  // Rows spread over binades 2^-7 .. 2^-1; tiny rows sit at 2^-20.
  const int exponent = row_kind == RowKind::tiny ? -20 : -7 + int((first >> 16) % 7);
  const float row_scale = std::ldexp(1.0f, exponent);
  uint64_t outlier_bits = 0;
  for (size_t d = 0; d < cols; ++d) {
    if (d % 8 == 0) outlier_bits = rng.next();
    // About one value in 64 is an outlier four times larger.
    const float outlier = ((outlier_bits >> (8 * (d % 8))) & 63) == 0 ? 4.0f : 1.0f;
    out[d] = rng.normal() * row_scale * dim_gains_[d] * outlier;
  }
}

std::vector<float> engram_wkv_matrix(uint64_t key, uint64_t out, int columns, int head_dim) {
  constexpr int rank = 4;
  const uint64_t in = uint64_t(columns) * uint64_t(head_dim);
  // B_c [rank, head_dim] and the column gains are per tensor; A_c [out, rank] per row.
  std::vector<float> low_rank_b(size_t(columns) * rank * size_t(head_dim));
  std::vector<float> gains(in);
  RowRng tensor_rng(key, ~0ull);
  for (float& b : low_rank_b) b = tensor_rng.normal();
  for (float& gain : gains) gain = kWkvColumnGains[tensor_rng.next() % kWkvColumnGains.size()];
  std::vector<float> w(out * in);
  for (uint64_t r = 0; r < out; ++r) {
    RowRng rng(key, r);
    for (int c = 0; c < columns; ++c) {
      float a[rank];
      for (float& value : a) value = 0.5f * rng.normal();
      for (int j = 0; j < head_dim; ++j) {
        float shared = 0.0f;
        for (int k = 0; k < rank; ++k) shared += a[k] * low_rank_b[(size_t(c) * rank + k) * size_t(head_dim) + j];
        const uint64_t col = uint64_t(c) * uint64_t(head_dim) + uint64_t(j);
        w[r * in + col] = (rng.normal() + shared) * gains[col] * 0x1p-6f;
      }
    }
  }
  return w;
}

} // namespace shardq::fixture
