// Codecs: what turns a chunk of source rows into output rows and report figures
// (docs/design.md "Recipes, tasks, codecs"). A task names its codec; the engine calls
// these entry points and knows nothing of the formats behind them. Figures are exact
// per-row sums (ChunkStats), so no codec's report depends on ranks, threads or chunking.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "stages/chunk_stats.h"
#include "stages/quantize.h"

namespace shardq {

struct Task;
class EngramLayout;

enum class CodecKind : int32_t {
  engram_nvfp4,          // FP8 rows (E8M0 per 32) -> NVFP4 (rtn, mse, gptq, gptq-mse)
  engram_mxfp4,          // FP8 rows (E8M0 per 32) -> MXFP4, NVIDIA's RCEIL scale rule
  transcode_mxfp4_nvfp4, // MXFP4 expert rows -> NVFP4, codes untouched, lossless
  fp8_to_int8,           // FP8 linear (E8M0 per 32x32) -> INT8 per channel + F32 [out, 1]
  fp4_to_int8,           // FP4 expert (E8M0 per 32 of a row) -> INT8 per channel + F32 [out, 1]
  fp8_to_bf16,           // FP8 linear -> BF16 (ignored modules), round to nearest even
  fp4_to_bf16,           // FP4 expert -> BF16 (ignored modules)
};

std::string_view codec_name(CodecKind codec);

// The W8A8 codecs (fp8/fp4_to_int8, fp8/fp4_to_bf16) take one linear, or several small ones
// of one shape (they share a task: 50K tiny tensors would otherwise be 50K tasks, each
// with its chunk record, checksum, journal entry and scheduling). Linear m reads task
// inputs 2m (codes) and 2m + 1 (E8M0 scales) and writes output 2m (I8) and 2m + 1 (F32
// scale), or output m (BF16). One place for that order: codecs, verify and the recipe.
struct LinearSlots {
  size_t weight = 0, scale = 0; // task inputs
  size_t output = 0;            // the re-encoded weight
  std::optional<size_t> output_scale; // INT8 only
};
size_t linear_count(const Task& task);
LinearSlots linear_slots(const Task& task, size_t linear);

// Parameters every task of a plan shares.
struct CodecParams {
  QuantMethod method = QuantMethod::rtn;
  int mse_candidates = 8;
  double mse_alpha_min = 0.75;
  int gptq_block = 128;
  std::shared_ptr<const EngramLayout> engram_layout; // Engram codecs: rows -> hash columns
};

// Rows [first_row, first_row + rows) of a task, one span per task input (whole rows).
struct ChunkInput {
  const Task& task;
  uint64_t first_row = 0;
  uint64_t rows = 0;
  std::vector<std::span<const uint8_t>> inputs;
  // The buffers behind `inputs`, when the caller lends them: a codec whose output is an
  // input unchanged (transcoded codes) takes the buffer instead of copying it.
  std::vector<std::vector<uint8_t>>* input_buffers = nullptr;
};

// One buffer per task output (rows x output row bytes), and the chunk's figures.
struct EncodedChunk {
  std::vector<std::vector<uint8_t>> buffers;
  ChunkStats stats;
};

// Whether the codec has a reduction phase (a max over the chunks of its scale group).
bool codec_reduces(CodecKind codec);
// The inputs a reduction reads whole (others it reads itself, row by row, if it must).
std::vector<size_t> reduction_inputs(CodecKind codec);
// Reads rows [first, first + count) (chunk-relative) of task input `input` into `out`.
using ReadInputRows = std::function<void(size_t input, uint64_t first, uint64_t count, std::span<uint8_t> out)>;
// The chunk's contribution to its group's reduction (exact max: order-free).
float reduce_chunk(const ChunkInput& chunk, const ReadInputRows& read_rows);
// The group's scalar output (weight_scale_2) from its reduced value.
float group_scalar(CodecKind codec, float reduction);

struct EncodeContext {
  const CodecParams& params;
  float reduction = 0.0f;                // the group's reduced value (if the codec reduces)
  const LayerFactors* factors = nullptr; // GPTQ methods of engram_nvfp4
};

// Checks the input (NaN codes or scales: StageError naming tensor, row, column), then
// encodes. Returns false when `cancel` became true mid-chunk (the chunk is dropped).
bool encode_chunk(const ChunkInput& chunk, const EncodeContext& context, EncodedChunk& out,
                  const std::atomic<bool>* cancel);

// xxh3-64 over the chunk's output buffers in order (recorded in the checkpoint;
// --verify-done re-reads the bytes and compares).
uint64_t chunk_checksum(const std::vector<std::vector<uint8_t>>& buffers);

} // namespace shardq
