#include "stages/codec.h"

#define XXH_STATIC_LINKING_ONLY // XXH3_state_t on the stack
#include <xxhash.h>
#if defined(__x86_64__)
// The library's XXH3 on the CPU's widest SIMD, chosen at run time (the same hash values):
// inlined here it would be the baseline target's SSE2, ~10% of the INT8 job's CPU time.
#include <xxh_x86dispatch.h>
#endif

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <utility>

#include "kernels/int8.h"
#include "kernels/mxfp4.h"
#include "stages/amax.h"
#include "stages/linear_rows.h"
#include "stages/recipes/recipe.h"
#include "stages/source_rows.h"
#include "stages/stage_error.h"

namespace shardq {
namespace {

// Engram tables are FP8 rows with one E8M0 scale per 32 values: inputs (weight, scale).
Fp8RowChunk fp8_rows(const ChunkInput& chunk) {
  const Task& task = chunk.task;
  return {task.inputs[0], chunk.first_row, chunk.rows, task.cols, chunk.inputs[0], chunk.inputs[1], task.inputs[1]};
}

bool encode_engram_nvfp4(const ChunkInput& chunk, const EncodeContext& context, EncodedChunk& out,
                         const std::atomic<bool>* cancel) {
  const Fp8RowChunk rows = fp8_rows(chunk);
  check_fp8_chunk(rows);
  const CodecParams& params = context.params;
  QuantizeParams quantize = make_quantize_params(params.method, params.mse_candidates, params.mse_alpha_min,
                                                 Nvfp4::global_scale(context.reduction));
  quantize.gptq_block = params.gptq_block;
  quantize.layer = chunk.task.layer;
  quantize.layout = params.engram_layout.get();
  quantize.factors = context.factors;
  // The quantizer fills its own buffers: lend it ours (no copy), then take them back.
  out.buffers.resize(2);
  Nvfp4Chunk nvfp4;
  std::swap(nvfp4.packed, out.buffers[0]);
  std::swap(nvfp4.scales, out.buffers[1]);
  const bool done = quantize_chunk_nvfp4(rows, quantize, nvfp4, cancel);
  std::swap(nvfp4.packed, out.buffers[0]);
  std::swap(nvfp4.scales, out.buffers[1]);
  out.stats = nvfp4.stats;
  return done;
}

// Rows checked for NaN codes at a time, just before they are quantized: the slice (64 KiB
// of Engram codes) is still in cache when the quantizer reads it, where a check of the
// whole chunk first would stream it from memory twice.
constexpr uint64_t kRowsPerCheck = 256;

// Engram MXFP4: each row dequantized exactly, then NVIDIA's MXFP4 rule; the row's sums of
// x^2, deq^2 and (deq - x)^2 give the report's cosine and relative error. The SIMD kernel
// does both steps in one pass, bit-identical to dequantize_chunk_row + quantize_row_mxfp4_ref.
bool encode_engram_mxfp4(const ChunkInput& chunk, EncodedChunk& out, const std::atomic<bool>* cancel) {
  const Fp8RowChunk rows = fp8_rows(chunk);
  const int cols = rows.cols, packed_cols = cols / 2, scale_cols = cols / Mxfp4::block;
  out.buffers.resize(2);
  out.buffers[0].resize(rows.rows * uint64_t(packed_cols));
  out.buffers[1].resize(rows.rows * uint64_t(scale_cols));
  out.stats = ChunkStats{};
  for (uint64_t r = 0; r < rows.rows; ++r) {
    if (r % kRowsPerCheck == 0) {
      if (cancel && cancel->load(std::memory_order_relaxed)) return false;
      check_fp8_rows(rows, r, std::min<uint64_t>(kRowsPerCheck, rows.rows - r));
    }
    const uint8_t* scales = out.buffers[1].data() + r * uint64_t(scale_cols);
    const Mxfp4RowSums sums = quantize_row_mxfp4_from_fp8_simd(
        rows.codes.data() + r * uint64_t(cols), rows.scales.data() + r * uint64_t(scale_cols), cols,
        out.buffers[0].data() + r * uint64_t(packed_cols), out.buffers[1].data() + r * uint64_t(scale_cols));
    ++out.stats.rows;
    out.stats.blocks += uint64_t(scale_cols);
    out.stats.zero_blocks += uint64_t(std::count(scales, scales + scale_cols, uint8_t{0}));
    out.stats.reference_sq.add(sums.source_sq);
    out.stats.output_sq.add(sums.dequant_sq);
    out.stats.error_sq.add(sums.error_sq);
  }
  return true;
}

// MXFP4 expert rows: inputs (codes I8 [rows, cols/2], E8M0 [rows, cols/32]).
void check_e8m0_rows(const ChunkInput& chunk) {
  const std::span<const uint8_t> scales = chunk.inputs[1];
  const size_t at = find_e8m0_nan(scales.data(), scales.size());
  if (at == scales.size()) return;
  const size_t per_row = size_t(chunk.task.cols / Mxfp4::block);
  throw StageError(fmt::format("tensor '{}' row {} block {}: E8M0 scale is NaN (0xFF)", chunk.task.inputs[1],
                               chunk.first_row + at / per_row, at % per_row));
}

// Codes copied as they are; each E8M0 scale becomes two E4M3 scales relative to the
// group's largest exponent (the reduction).
bool encode_transcode(const ChunkInput& chunk, const EncodeContext& context, EncodedChunk& out) {
  check_e8m0_rows(chunk);
  const int cols = chunk.task.cols;
  const uint8_t emax = uint8_t(context.reduction);
  out.buffers.resize(2);
  if (chunk.input_buffers) std::swap(out.buffers[0], (*chunk.input_buffers)[0]); // the codes as read
  else out.buffers[0].assign(chunk.inputs[0].begin(), chunk.inputs[0].end());
  out.buffers[1].resize(chunk.rows * uint64_t(cols / Nvfp4::block));
  out.stats = ChunkStats{};
  const Mxfp4ToNvfp4 transcoder(emax);
  for (uint64_t r = 0; r < chunk.rows; ++r) {
    out.stats.inexact_blocks += transcoder.transcode_row(out.buffers[0].data() + r * uint64_t(cols / 2),
                                                         chunk.inputs[1].data() + r * uint64_t(cols / Mxfp4::block),
                                                         cols, out.buffers[1].data() + r * uint64_t(cols / Nvfp4::block));
  }
  out.stats.rows = chunk.rows;
  out.stats.blocks = chunk.rows * uint64_t(cols / Mxfp4::block);
  return true;
}

LinearRows linear_rows(const ChunkInput& chunk, LinearSource source, const LinearSlots& slots) {
  const Task& task = chunk.task;
  return {source,         task.inputs[slots.weight], task.inputs[slots.scale],  chunk.first_row,
          chunk.rows,     task.cols,                 chunk.inputs[slots.weight], chunk.inputs[slots.scale]};
}

// A stop request is looked at every this many rows: a stop never waits for a whole chunk.
constexpr uint64_t kCancelRows = 256;

// Sizes one output buffer per task output (rows x its row bytes), then encodes each linear
// of the task row by row: encode(linear's slots, its rows, chunk row r).
template <class EncodeRow>
bool encode_linears(const ChunkInput& chunk, LinearSource source, EncodedChunk& out, const std::atomic<bool>* cancel,
                    EncodeRow encode) {
  const Task& task = chunk.task;
  out.buffers.resize(task.outputs.size());
  for (size_t o = 0; o < task.outputs.size(); ++o) out.buffers[o].resize(chunk.rows * tensor_row_bytes(task.outputs[o]));
  out.stats = ChunkStats{};
  uint64_t done = 0; // rows of all linears, for the stop check
  for (size_t linear = 0; linear < linear_count(task); ++linear) {
    const LinearSlots slots = linear_slots(task, linear);
    const LinearRows rows = linear_rows(chunk, source, slots);
    for (uint64_t r = 0; r < rows.rows; ++r, ++done) {
      if (done % kCancelRows == 0 && cancel && cancel->load(std::memory_order_relaxed)) return false;
      encode(slots, rows, r);
    }
  }
  return true;
}

// W8A8: each row decoded exactly and quantized to symmetric per-channel INT8, in one pass
// that also finds NaN codes (a linear's rows at once: quantize_linear_rows_int8).
// Figures: rows, all-zero rows (zero_blocks: a row is the INT8 block), and on the report's
// sample of rows (is_int8_report_row) sum x^2 and sum (deq - x)^2.
bool encode_int8(const ChunkInput& chunk, LinearSource source, EncodedChunk& out, const std::atomic<bool>* cancel) {
  const uint64_t cols = uint64_t(chunk.task.cols);
  thread_local std::vector<float> row_scales; // a linear's rows, all codes and scales at once
  const auto encode = [&](const LinearSlots& slots, const LinearRows& rows, uint64_t r) {
    int8_t* codes = reinterpret_cast<int8_t*>(out.buffers[slots.output].data() + r * cols);
    if (r == 0) {
      check_linear_scales(rows);
      row_scales.resize(rows.rows);
      quantize_linear_rows_int8(rows, codes, row_scales.data());
    }
    Int8RowSums sums;
    const bool report_row = is_int8_report_row(rows.first_row + r);
    // A report row is quantized again with its sums (the same scale and codes).
    const float scale = report_row ? quantize_linear_row_int8(rows, r, codes, &sums) : row_scales[r];
    if (std::isnan(scale)) { // a NaN code: the kernel saw it in its one pass over the row
      check_linear_codes(rows, r, 1);
      throw StageError(fmt::format("{}: row {}: the INT8 kernel found a NaN code the check did not", rows.tensor,
                                   rows.first_row + r));
    }
    if (std::isinf(scale)) refuse_infinite_row(rows, r); // amax overflowed
    std::memcpy(out.buffers[*slots.output_scale].data() + r * sizeof(float), &scale, sizeof(float)); // F32 little-endian
    ++out.stats.rows;
    ++out.stats.blocks;
    out.stats.zero_blocks += is_all_zero_int8_row(scale, codes, rows.cols) ? 1 : 0;
    if (!report_row) return;
    out.stats.reference_sq.add(sums.source_sq);
    out.stats.error_sq.add(sums.error_sq);
  };
  return encode_linears(chunk, source, out, cancel, encode);
}

// Ignored modules: each row decoded exactly, then BF16 (round to nearest even).
bool encode_bf16(const ChunkInput& chunk, LinearSource source, EncodedChunk& out, const std::atomic<bool>* cancel) {
  const uint64_t cols = uint64_t(chunk.task.cols);
  thread_local std::vector<float> values;
  values.resize(cols);
  const auto encode = [&](const LinearSlots& slots, const LinearRows& rows, uint64_t r) {
    if (r == 0) check_linear_rows(rows);
    decode_linear_row(rows, r, values.data());
    uint8_t* bytes = out.buffers[slots.output].data() + r * cols * 2;
    double source_sq = 0, error_sq = 0;
    for (uint64_t c = 0; c < cols; ++c) {
      const uint16_t bits = bf16_from_float(values[c]);
      bytes[2 * c] = uint8_t(bits & 0xFF); // little-endian
      bytes[2 * c + 1] = uint8_t(bits >> 8);
      const double error = double(bf16_to_float(bits)) - double(values[c]);
      source_sq += double(values[c]) * double(values[c]);
      error_sq += error * error;
    }
    if (std::isinf(source_sq)) refuse_infinite_row(rows, r); // a value overflowed
    ++out.stats.rows;
    out.stats.reference_sq.add(source_sq);
    out.stats.error_sq.add(error_sq);
  };
  return encode_linears(chunk, source, out, cancel, encode);
}

} // namespace

std::string_view codec_name(CodecKind codec) {
  switch (codec) {
    case CodecKind::engram_nvfp4: return "engram-nvfp4";
    case CodecKind::engram_mxfp4: return "engram-mxfp4";
    case CodecKind::transcode_mxfp4_nvfp4: return "transcode-mxfp4-nvfp4";
    case CodecKind::fp8_to_int8: return "fp8-to-int8";
    case CodecKind::fp4_to_int8: return "fp4-to-int8";
    case CodecKind::fp8_to_bf16: return "fp8-to-bf16";
    case CodecKind::fp4_to_bf16: return "fp4-to-bf16";
  }
  return "?";
}

size_t linear_count(const Task& task) { return task.inputs.size() / 2; }

LinearSlots linear_slots(const Task& task, size_t linear) {
  const bool int8 = task.codec == CodecKind::fp8_to_int8 || task.codec == CodecKind::fp4_to_int8;
  LinearSlots slots{2 * linear, 2 * linear + 1, int8 ? 2 * linear : linear, std::nullopt};
  if (int8) slots.output_scale = 2 * linear + 1;
  return slots;
}

bool codec_reduces(CodecKind codec) {
  return codec == CodecKind::engram_nvfp4 || codec == CodecKind::transcode_mxfp4_nvfp4;
}

std::vector<size_t> reduction_inputs(CodecKind codec) {
  if (codec_reduces(codec)) return {1}; // the scales; the amax reads the codes it needs
  return {};
}

float reduce_chunk(const ChunkInput& chunk, const ReadInputRows& read_rows) {
  switch (chunk.task.codec) {
    case CodecKind::engram_nvfp4: {
      const auto read_codes = [&](uint64_t first, uint64_t count, std::span<uint8_t> codes) {
        read_rows(0, first, count, codes);
      };
      return amax_fp8_chunk_from_scales(fp8_rows(chunk), read_codes);
    }
    case CodecKind::transcode_mxfp4_nvfp4: {
      check_e8m0_rows(chunk);
      return float(e8m0_max_of(chunk.inputs[1].data(), chunk.inputs[1].size())); // exact: bytes are small integers
    }
    default:
      throw StageError(fmt::format("{}: codec {} has no reduction", chunk.task.name, codec_name(chunk.task.codec)));
  }
}

float group_scalar(CodecKind codec, float reduction) {
  switch (codec) {
    case CodecKind::engram_nvfp4: return Nvfp4::global_scale(reduction);
    case CodecKind::transcode_mxfp4_nvfp4: return nvfp4_global_scale_from_e8m0_max(uint8_t(reduction));
    default: throw StageError(fmt::format("codec {} has no group scalar", codec_name(codec)));
  }
}

bool encode_chunk(const ChunkInput& chunk, const EncodeContext& context, EncodedChunk& out,
                  const std::atomic<bool>* cancel) {
  switch (chunk.task.codec) {
    case CodecKind::engram_nvfp4: return encode_engram_nvfp4(chunk, context, out, cancel);
    case CodecKind::engram_mxfp4: return encode_engram_mxfp4(chunk, out, cancel);
    case CodecKind::transcode_mxfp4_nvfp4: return encode_transcode(chunk, context, out);
    case CodecKind::fp8_to_int8: return encode_int8(chunk, LinearSource::fp8_block32, out, cancel);
    case CodecKind::fp4_to_int8: return encode_int8(chunk, LinearSource::fp4_row32, out, cancel);
    case CodecKind::fp8_to_bf16: return encode_bf16(chunk, LinearSource::fp8_block32, out, cancel);
    case CodecKind::fp4_to_bf16: return encode_bf16(chunk, LinearSource::fp4_row32, out, cancel);
  }
  throw StageError(fmt::format("{}: unknown codec {}", chunk.task.name, int(chunk.task.codec)));
}

uint64_t chunk_checksum(const std::vector<std::vector<uint8_t>>& buffers) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  for (const auto& buffer : buffers) XXH3_64bits_update(&state, buffer.data(), buffer.size());
  return XXH3_64bits_digest(&state);
}

} // namespace shardq
