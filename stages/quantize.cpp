#include "stages/quantize.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "kernels/gptq.h"
#include "stages/engram_layout.h"
#include "stages/stage_error.h"

namespace shardq {
namespace {

// Rows per piece: decoded fp32 rows and their dequantized copy (256 KiB each) stay in L2
// from decoding to the error sums, instead of streaming MBs through L3 that the ranks of a
// node share. Also how often a stop request is looked at.
constexpr uint64_t kPieceRows = 256;

bool is_gptq(QuantMethod method) { return method == QuantMethod::gptq || method == QuantMethod::gptq_mse; }

// GPTQ's kernel sums errors over its row tiles: here each row's error is summed on its
// own (from the original rows, the report rule of the row kernels), so that the totals
// are exact whatever the chunking.
void add_row_errors(const float* original, const float* dequantized, uint64_t n, int cols, ChunkStats& stats) {
  for (uint64_t r = 0; r < n; ++r) {
    BlockStats row_sums;
    add_row_report_sums_nvfp4_simd(original + r * cols, dequantized + r * cols, cols, row_sums);
    stats.add_row(row_sums);
  }
}

// sum ||W_c e||^2 and sum ||W_c x||^2, one term per row.
void add_weighted_errors(const float* original, const float* dequantized, uint64_t n, int column,
                         const LayerFactors& factors, ChunkStats& stats) {
  std::vector<double> weighted_error(n), weighted_reference(n);
  weighted_error_rows(factors.roots[size_t(column)], original, dequantized, int(n), weighted_error.data(),
                      weighted_reference.data());
  for (uint64_t r = 0; r < n; ++r) {
    stats.weighted_error_sq.add(weighted_error[r]);
    stats.weighted_reference_sq.add(weighted_reference[r]);
  }
}

// Rows [first, first + count) of the chunk, all in hash column `column`.
void quantize_chunk_piece(const Fp8RowChunk& chunk, const QuantizeParams& params, int column, uint64_t first,
                          uint64_t count, Nvfp4Chunk& out) {
  const int cols = chunk.cols;
  thread_local std::vector<float> rows; // grows once to a piece; never cleared (all written)
  if (rows.size() < count * cols) rows.resize(count * cols);
  for (uint64_t r = 0; r < count; ++r) dequantize_chunk_row(chunk, first + r, rows.data() + r * cols);
  quantize_column_rows(rows.data(), count, cols, column, params, out.packed.data() + first * (cols / 2),
                       out.scales.data() + first * (cols / Nvfp4::block), out.stats);
}

} // namespace

void quantize_column_rows(const float* rows, uint64_t n, int cols, int column, const QuantizeParams& params,
                          uint8_t* packed, uint8_t* scales, ChunkStats& stats) {
  const int packed_cols = cols / 2, scale_cols = cols / Nvfp4::block;
  const bool gptq = is_gptq(params.method);
  if (gptq) {
    if (!params.factors || cols != kGptqCols) {
      throw StageError(fmt::format("GPTQ needs the layer's factors and rows of {} values", kGptqCols));
    }
    thread_local GptqWorkspace workspace;
    BlockStats counters;
    gptq_quantize_rows(rows, int(n), params.factors->upper[size_t(column)].data(), params.global_scale, params.search,
                       params.gptq_block, packed, scales, counters, workspace, GptqSums::counters_only);
    stats.add_counters(counters);
  } else {
    for (uint64_t r = 0; r < n; ++r) {
      BlockStats row_stats; // the kernel's own per-row error sums
      quantize_row_nvfp4_simd(rows + r * cols, cols, params.global_scale, params.search, packed + r * packed_cols,
                              scales + r * scale_cols, row_stats);
      stats.add_row(row_stats);
    }
  }
  if (!gptq && !params.factors) return;
  thread_local std::vector<float> dequantized; // grows once to a piece; every value written
  if (dequantized.size() < n * cols) dequantized.resize(n * cols);
  for (uint64_t r = 0; r < n; ++r) {
    dequantize_row_nvfp4_simd(packed + r * packed_cols, scales + r * scale_cols, cols, params.global_scale,
                              dequantized.data() + r * cols);
  }
  if (gptq) add_row_errors(rows, dequantized.data(), n, cols, stats);
  if (params.factors) add_weighted_errors(rows, dequantized.data(), n, column, *params.factors, stats);
}

QuantMethod parse_quant_method(std::string_view name) {
  const auto found = std::find(kQuantMethodNames.begin(), kQuantMethodNames.end(), name);
  if (found == kQuantMethodNames.end()) {
    throw StageError(fmt::format("unknown quantization method '{}' (expected {})", name, fmt::join(kQuantMethodNames, ", ")));
  }
  return QuantMethod(found - kQuantMethodNames.begin());
}

const char* quant_method_name(QuantMethod method) {
  return kQuantMethodNames.at(size_t(method)).data(); // literals: NUL-terminated
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
  // Every byte is overwritten by the quantizer: no clearing pass over the chunk.
  packed.resize(rows * cols / 2);
  scales.resize(rows * cols / Nvfp4::block);
  stats = ChunkStats{};
}

bool quantize_chunk_nvfp4(const Fp8RowChunk& chunk, const QuantizeParams& params, Nvfp4Chunk& out,
                          const std::atomic<bool>* cancel) {
  out.resize(chunk.rows, chunk.cols);
  // Pieces never straddle a hash column (each has its own factor).
  uint64_t r = 0;
  while (r < chunk.rows) {
    if (cancel && cancel->load(std::memory_order_relaxed)) return false;
    uint64_t piece_end = std::min<uint64_t>(chunk.rows, r + kPieceRows);
    int column = 0;
    if (params.layout) {
      column = params.layout->hash_column(params.layer, chunk.first_row + r);
      const uint64_t column_end = params.layout->offsets(params.layer)[size_t(column)] +
                                  params.layout->primes(params.layer)[size_t(column)];
      piece_end = std::min<uint64_t>(piece_end, column_end - chunk.first_row);
    } else if (is_gptq(params.method)) {
      throw StageError(fmt::format("{}: GPTQ needs the Engram layout", chunk.tensor));
    }
    quantize_chunk_piece(chunk, params, column, r, piece_end - r, out);
    r = piece_end;
  }
  return true;
}

} // namespace shardq
