#include "stages/quantize.h"

#include <fmt/format.h>

#include <algorithm>

#include "kernels/gptq.h"
#include "stages/engram_layout.h"
#include "stages/stage_error.h"

namespace shardq {
namespace {

constexpr uint64_t kCancelCheckRows = 4096;

bool cancelled(const std::atomic<bool>* cancel) { return cancel && cancel->load(std::memory_order_relaxed); }

bool quantize_rows_independent(const Fp8RowChunk& chunk, const QuantizeParams& params, Nvfp4Chunk& out,
                               const std::atomic<bool>* cancel) {
  std::vector<float> row(chunk.cols);
  const int packed_cols = chunk.cols / 2, scale_cols = chunk.cols / Nvfp4::block;
  for (uint64_t r = 0; r < chunk.rows; ++r) {
    if (r % kCancelCheckRows == 0 && cancelled(cancel)) return false;
    dequantize_chunk_row(chunk, r, row.data());
    BlockStats row_stats;
    quantize_row_nvfp4_simd(row.data(), chunk.cols, params.global_scale, params.search,
                       out.packed.data() + r * packed_cols, out.scales.data() + r * scale_cols, row_stats);
    out.stats.add_row(row_stats);
  }
  return true;
}

// Rows [first, first + count) of the chunk, all in hash column `column`.
void quantize_column_piece_gptq(const Fp8RowChunk& chunk, const QuantizeParams& params, int column, uint64_t first,
                                uint64_t count, Nvfp4Chunk& out, GptqWorkspace& workspace) {
  const int cols = chunk.cols, packed_cols = cols / 2, scale_cols = cols / Nvfp4::block;
  std::vector<float> rows(count * cols), original(count * cols), dequantized(cols);
  for (uint64_t r = 0; r < count; ++r) dequantize_chunk_row(chunk, first + r, rows.data() + r * cols);
  std::copy(rows.begin(), rows.end(), original.begin());
  BlockStats counters;
  uint8_t* packed = out.packed.data() + first * packed_cols;
  uint8_t* scales = out.scales.data() + first * scale_cols;
  gptq_quantize_rows(rows.data(), int(count), params.factors->upper[column].data(), params.global_scale,
                     params.search, params.gptq_block, packed, scales, counters, workspace);
  out.stats.add_counters(counters);
  // Error sums per row, so that the totals are exact whatever the chunking.
  const double* gram = params.factors->gram[column].data();
  for (uint64_t r = 0; r < count; ++r) {
    const float* x = original.data() + r * cols;
    dequantize_row_nvfp4(packed + r * packed_cols, scales + r * scale_cols, cols, params.global_scale,
                         dequantized.data());
    BlockStats row_sums;
    for (int i = 0; i < cols; ++i) {
      const double diff = double(dequantized[i]) - double(x[i]);
      row_sums.error_sq += diff * diff;
      row_sums.reference_sq += double(x[i]) * double(x[i]);
    }
    out.stats.add_row(row_sums);
    double weighted_error = 0.0, weighted_reference = 0.0;
    add_weighted_error(gram, x, dequantized.data(), 1, weighted_error, weighted_reference);
    out.stats.weighted_error_sq.add(weighted_error);
    out.stats.weighted_reference_sq.add(weighted_reference);
  }
}

bool quantize_rows_gptq(const Fp8RowChunk& chunk, const QuantizeParams& params, Nvfp4Chunk& out,
                        const std::atomic<bool>* cancel) {
  if (!params.layout || !params.factors) {
    throw StageError(fmt::format("{}: GPTQ needs the layer's factors", chunk.tensor));
  }
  if (chunk.cols != kGptqCols) {
    throw StageError(fmt::format("{}: GPTQ rows must have {} values, not {}", chunk.tensor, kGptqCols, chunk.cols));
  }
  GptqWorkspace workspace;
  const auto offsets = params.layout->offsets(params.layer);
  const auto primes = params.layout->primes(params.layer);
  uint64_t r = 0;
  while (r < chunk.rows) {
    if (cancelled(cancel)) return false;
    const int column = params.layout->hash_column(params.layer, chunk.first_row + r);
    const uint64_t column_end = offsets[column] + primes[column];
    const uint64_t piece_end = std::min<uint64_t>({chunk.rows, column_end - chunk.first_row, r + kCancelCheckRows});
    quantize_column_piece_gptq(chunk, params, column, r, piece_end - r, out, workspace);
    r = piece_end;
  }
  return true;
}

} // namespace

QuantMethod parse_quant_method(const std::string& name) {
  if (name == "rtn") return QuantMethod::rtn;
  if (name == "mse") return QuantMethod::mse;
  if (name == "gptq") return QuantMethod::gptq;
  if (name == "gptq-mse") return QuantMethod::gptq_mse;
  throw StageError(fmt::format("unknown quantization method '{}' (expected rtn, mse, gptq or gptq-mse)", name));
}

const char* quant_method_name(QuantMethod method) {
  switch (method) {
    case QuantMethod::rtn: return "rtn";
    case QuantMethod::mse: return "mse";
    case QuantMethod::gptq: return "gptq";
    case QuantMethod::gptq_mse: return "gptq-mse";
  }
  return "?";
}

QuantizeParams make_quantize_params(QuantMethod method, int mse_candidates, double mse_alpha_min, float global_scale) {
  QuantizeParams params;
  params.method = method;
  params.global_scale = global_scale;
  const bool mse = method == QuantMethod::mse || method == QuantMethod::gptq_mse;
  params.search.candidates = mse ? mse_candidates : 1;
  params.search.alpha_min = mse_alpha_min;
  return params;
}

void Nvfp4Chunk::resize(uint64_t rows, int cols) {
  packed.assign(rows * cols / 2, 0);
  scales.assign(rows * cols / Nvfp4::block, 0);
  stats = ChunkStats{};
}

bool quantize_chunk_nvfp4(const Fp8RowChunk& chunk, const QuantizeParams& params, Nvfp4Chunk& out,
                          const std::atomic<bool>* cancel) {
  out.resize(chunk.rows, chunk.cols);
  const bool gptq = params.method == QuantMethod::gptq || params.method == QuantMethod::gptq_mse;
  return gptq ? quantize_rows_gptq(chunk, params, out, cancel) : quantize_rows_independent(chunk, params, out, cancel);
}

} // namespace shardq
