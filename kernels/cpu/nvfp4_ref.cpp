#include <algorithm>
#include <bit>
#include <cmath>

#include "kernels/nvfp4.h"

namespace shardq {

std::array<float, kMaxMseCandidates> ScaleSearch::alphas() const {
  std::array<float, kMaxMseCandidates> out{};
  if (candidates == 1) {
    out[0] = 1.0f;
    return out;
  }
  const double step = (1.0 - alpha_min) / double(candidates - 1);
  for (int k = 0; k < candidates; ++k) out[k] = float(alpha_min + double(k) * step);
  return out;
}

void BlockStats::merge(const BlockStats& other) {
  blocks += other.blocks;
  zero_blocks += other.zero_blocks;
  scale_underflows += other.scale_underflows;
  for (size_t k = 0; k < candidate_wins.size(); ++k) candidate_wins[k] += other.candidate_wins[k];
  error_sq += other.error_sq;
  reference_sq += other.reference_sq;
}

uint8_t nvfp4_scale_code(float unclamped_scale) {
  if (unclamped_scale == 0.0f) return kNvfp4ZeroBlockScaleCode;
  return e4m3_from_float(std::clamp(unclamped_scale, Nvfp4::min_scale, Nvfp4::max_scale));
}

uint8_t nvfp4_block_scale_code(float amax, float alpha, float global_scale) {
  // Decided by amax, not by the quotient: a non-zero block whose scale underflows to 0.0f
  // in fp32 is a scale underflow (clamped to 2^-9), not a zero block.
  if (amax == 0.0f) return kNvfp4ZeroBlockScaleCode;
  const float unclamped = (alpha * amax) / (E2M1::max * global_scale);
  return e4m3_from_float(std::clamp(unclamped, Nvfp4::min_scale, Nvfp4::max_scale));
}

void quantize_block_nvfp4(const float* x, uint8_t scale_code, float global_scale, uint8_t* nibbles) {
  // Divide by the ROUNDED scale times the global (ModelOpt), never by a reciprocal.
  const float divisor = e4m3_to_float(scale_code) * global_scale;
  for (int i = 0; i < Nvfp4::block; ++i) nibbles[i] = e2m1_from_float(x[i] / divisor);
}

template <typename T>
static T fold_in_halves(const T* terms) {
  T folded[Nvfp4::block];
  std::copy(terms, terms + Nvfp4::block, folded);
  for (int half = Nvfp4::block / 2; half >= 1; half /= 2)
    for (int i = 0; i < half; ++i) folded[i] = folded[i] + folded[i + half];
  return folded[0];
}

double sum_block_fp64(const double* terms) { return fold_in_halves(terms); }
float sum_block_fp32(const float* terms) { return fold_in_halves(terms); }

double block_error_nvfp4(const float* x, const uint8_t* nibbles, uint8_t scale_code, float global_scale) {
  double terms[Nvfp4::block];
  for (int i = 0; i < Nvfp4::block; ++i) {
    const double diff = double(dequantize_nvfp4(nibbles[i], scale_code, global_scale)) - double(x[i]);
    terms[i] = diff * diff;
  }
  return sum_block_fp64(terms);
}

static float block_amax(const float* x) {
  float amax = 0.0f;
  for (int i = 0; i < Nvfp4::block; ++i) amax = std::max(amax, std::fabs(x[i]));
  return amax;
}

ReportScale report_scale_of_amax(float amax) {
  const uint32_t exponent = std::clamp<uint32_t>(std::bit_cast<uint32_t>(amax) >> 23, 1u, 253u);
  return {std::bit_cast<float>((254u - exponent) << 23), std::bit_cast<float>(exponent << 23)};
}

BlockSums block_report_sums_nvfp4(const float* x, const float* deq) {
  const ReportScale scale = report_scale_of_amax(block_amax(x));
  float errors[Nvfp4::block], references[Nvfp4::block];
  for (int i = 0; i < Nvfp4::block; ++i) {
    const float diff = (deq[i] - x[i]) * scale.down, value = x[i] * scale.down;
    errors[i] = diff * diff;
    references[i] = value * value;
  }
  const double up = scale.up;
  return {double(sum_block_fp32(errors)) * up * up, double(sum_block_fp32(references)) * up * up};
}

BlockSums block_report_sums_nvfp4(const float* x, const uint8_t* nibbles, uint8_t scale_code, float global_scale) {
  float deq[Nvfp4::block];
  for (int i = 0; i < Nvfp4::block; ++i) deq[i] = dequantize_nvfp4(nibbles[i], scale_code, global_scale);
  return block_report_sums_nvfp4(x, deq);
}

void add_row_report_sums_nvfp4(const float* x, const float* deq, int cols, BlockStats& stats) {
  for (int b = 0; b < cols / Nvfp4::block; ++b) {
    stats.add_sums(block_report_sums_nvfp4(x + b * Nvfp4::block, deq + b * Nvfp4::block));
  }
}

uint8_t choose_and_quantize_block_nvfp4(const float* x, float global_scale, const ScaleSearch& search,
                                        uint8_t* nibbles, BlockStats& stats) {
  const float amax = block_amax(x);
  ++stats.blocks;
  if (amax == 0.0f) ++stats.zero_blocks;
  else if (amax / (E2M1::max * global_scale) < Nvfp4::min_scale) ++stats.scale_underflows;

  const auto alphas = search.alphas();
  uint8_t best_code = 0;
  double best_error = 0.0;
  int best_k = -1;
  uint8_t trial[Nvfp4::block];
  // Walk from the largest alpha down so that an exact tie keeps the larger alpha; a code
  // already tried gives the same error, so it is skipped.
  for (int k = search.candidates - 1; k >= 0; --k) {
    const uint8_t code = nvfp4_block_scale_code(amax, alphas[k], global_scale);
    if (best_k >= 0 && code == best_code) continue;
    quantize_block_nvfp4(x, code, global_scale, trial);
    const double error = search.candidates == 1 ? 0.0 : block_error_nvfp4(x, trial, code, global_scale);
    if (best_k < 0 || error < best_error) {
      best_k = k;
      best_code = code;
      best_error = error;
      std::copy(trial, trial + Nvfp4::block, nibbles);
    }
  }
  ++stats.candidate_wins[best_k];
  return best_code;
}

void quantize_row_nvfp4_ref(const float* x, int cols, float global_scale, const ScaleSearch& search,
                            uint8_t* packed, uint8_t* scales, BlockStats& stats) {
  uint8_t nibbles[Nvfp4::block];
  for (int b = 0; b < cols / Nvfp4::block; ++b) {
    const float* block = x + b * Nvfp4::block;
    scales[b] = choose_and_quantize_block_nvfp4(block, global_scale, search, nibbles, stats);
    for (int i = 0; i < Nvfp4::block; i += 2) packed[(b * Nvfp4::block + i) / 2] = pack_e2m1x2(nibbles[i], nibbles[i + 1]);
    stats.add_sums(block_report_sums_nvfp4(block, nibbles, scales[b], global_scale));
  }
}

void dequantize_row_nvfp4(const uint8_t* packed, const uint8_t* scales, int cols, float global_scale, float* out) {
  for (int b = 0; b < cols / Nvfp4::block; ++b) {
    float values[16]; // the block's 16 possible values, each exactly dequantize_nvfp4's
    for (int nibble = 0; nibble < 16; ++nibble) values[nibble] = dequantize_nvfp4(uint8_t(nibble), scales[b], global_scale);
    const uint8_t* bytes = packed + b * (Nvfp4::block / 2);
    float* block = out + b * Nvfp4::block;
    for (int i = 0; i < Nvfp4::block / 2; ++i) {
      block[2 * i] = values[bytes[i] & 0xF];
      block[2 * i + 1] = values[bytes[i] >> 4];
    }
  }
}

void dequantize_row_fp8_e8m0_32(const uint8_t* codes, const uint8_t* scales, int cols, float* out) {
  for (int i = 0; i < cols; ++i) out[i] = e4m3_to_float(codes[i]) * e8m0_to_float(scales[i / 32]);
}

} // namespace shardq
