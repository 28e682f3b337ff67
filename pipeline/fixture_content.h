// Deterministic content for the fixtures: counter-based random numbers (every row of every
// tensor can be made on its own, in any order, on any thread) and the quantizers that turn
// float rows into the stored formats the way the real checkpoints' producers did.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "kernels/formats.h"

namespace shardq::fixture {

// splitmix64's finalizer: a bijective 64-bit mix.
constexpr uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The stream key of one tensor: FNV-1a of its name mixed with the seed, so adding a
// tensor never changes another tensor's bytes.
uint64_t tensor_key(uint64_t seed, std::string_view name);

// The random stream of one (key, row).
class RowRng {
 public:
  RowRng(uint64_t key, uint64_t row) : state_(mix64(key ^ mix64(row + 0x632BE59BD9B4E019ull))) {}
  uint64_t next() {
    state_ += 0x9E3779B97F4A7C15ull;
    return mix64(state_);
  }
  // Uniform in [0, 1) from 24 bits (exact in fp32).
  float uniform() { return float(next() >> 40) * 0x1p-24f; }
  // Standard normal approximated by the sum of four 16-bit uniforms (Irwin-Hall): the sum
  // is an exact integer and one multiply rounds it, so the bytes are the same on every
  // compiler and libm (Box-Muller's log/cos are not); tails end at +-3.46 sigma.
  float normal() {
    const uint64_t bits = next();
    const int64_t sum = int64_t(bits & 0xFFFF) + int64_t((bits >> 16) & 0xFFFF) + int64_t((bits >> 32) & 0xFFFF) +
                        int64_t(bits >> 48) - 131070;
    return float(sum) * kNormalScale;
  }

 private:
  static constexpr float kNormalScale = 1.7320508f * 0x1p-16f; // sqrt(3) / 65536: unit variance
  uint64_t state_;
};

// E8M0 byte of 2^ceil(log2(amax / format_max)): the smallest power of two that brings the
// block into the format's range (DeepSeek's FP8 and FP4 quantizers, NVIDIA's RCEIL).
// A block with amax below amax_floor is scaled as if its amax were amax_floor (DeepSeek
// clamps at 1e-4), so all-zero blocks get a finite scale.
uint8_t e8m0_ceil_scale(float amax, float format_max, float amax_floor);

inline constexpr float kDeepSeekAmaxFloor = 1e-4f;

// e4m3_from_float for |x| <= 448 (what a block scaled by its own E8M0 scale holds),
// inline and branch-light: the fixture converts ~2G values for a benchmark-size table.
// Tested equal to e4m3_from_float over that range.
inline uint8_t e4m3_code_in_range(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint8_t sign = uint8_t((bits >> 24) & 0x80);
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude < 0x3C800000u) {
    // Below 2^-6, E4M3 is subnormal: code = RNE(|x| * 2^9), by the 2^23 trick.
    const float scaled = std::bit_cast<float>(magnitude) * 512.0f;
    return sign | uint8_t((scaled + 0x1p23f) - 0x1p23f);
  }
  // Keep the top 3 mantissa bits with round-to-nearest-even on the dropped 20 (a carry
  // moves into the exponent), then rebias 127 -> 7.
  const uint32_t rounded = magnitude + 0x7FFFFu + ((magnitude >> 20) & 1u);
  const uint32_t code = (rounded >> 20) - ((127u - 7u) << 3);
  return sign | uint8_t(code > E4M3::max_code ? E4M3::max_code : code);
}

// One row of FP8 E4M3 with an E8M0 scale per 32 values (Engram tables): codes[cols],
// scales[cols / 32]; codes = e4m3(x / scale).
void quantize_row_fp8_e8m0_32(const float* x, int cols, uint8_t* codes, uint8_t* scales);

// A whole [rows, cols] matrix as FP8 E4M3 with E8M0 scales over 32x32 blocks
// ([ceil(rows/32), ceil(cols/32)] scales), like DeepSeek's FP8 linears.
void quantize_fp8_blocks_32x32(std::span<const float> w, uint64_t rows, uint64_t cols, std::vector<uint8_t>& codes,
                               std::vector<uint8_t>& scales);

// One row of DeepSeek's MXFP4 experts (E2M1 packed, low nibble = even column, round half
// to even; E8M0 per 32, 2^ceil(log2(amax/6)), an all-zero block at the 1e-4 floor's scale).
// NVIDIA's Engram MXFP4 is another rule: kernels/mxfp4.h.
void quantize_row_mxfp4_deepseek(const float* x, int cols, uint8_t* packed, uint8_t* scales);

// Per-column gains of an Engram wkv slice: literal multipliers whose squares span 65x, so
// GPTQ's Hessian proxy W_c^T W_c is far from isotropic.
inline constexpr std::array<float, 7> kWkvColumnGains = {0.35f, 0.5f, 0.7f, 1.0f, 1.41f, 2.0f, 2.83f};

// The float rows of one Engram table (before FP8 quantization): per-row exponents over
// seven binades, per-dimension gains, rare outliers, all-zero pad rows (the first row of
// every hash column and ~1/512 of the rest) and ~1/256 tiny rows (2^-20) whose NVFP4
// block scales underflow.
class EngramTableContent {
 public:
  EngramTableContent(uint64_t key, std::span<const uint64_t> column_offsets, int cols);
  void row(uint64_t r, float* out) const;
  enum class RowKind { pad, zero, tiny, normal };
  RowKind kind(uint64_t r) const;

 private:
  uint64_t key_;
  std::vector<uint64_t> column_offsets_;
  std::vector<float> dim_gains_;
};

// The float matrix of an Engram wkv [out, columns * head_dim]: per slice c,
// (N + A_c B_c) diag(gain_c) * 2^-6 with a rank-4 component A_c B_c shared by the slice's
// columns (they correlate) and per-column gains from kWkvColumnGains.
std::vector<float> engram_wkv_matrix(uint64_t key, uint64_t out, int columns, int head_dim);

} // namespace shardq::fixture
