// Stage `quantize`: a chunk of FP8 source rows -> NVFP4 codes and scales, with the
// chunk's report figures. Methods rtn / mse work row by row; gptq / gptq-mse group the
// rows by hash column and feed each row's error forward through that column's factor.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/gptq.h"
#include "kernels/nvfp4.h"
#include "stages/chunk_stats.h"
#include "stages/source_rows.h"

namespace shardq {

class EngramLayout;

enum class QuantMethod { rtn, mse, gptq, gptq_mse };

// Every method's name, in the enum's order: the one list that parsing, job validation and
// the CLI's messages use.
inline constexpr std::array<std::string_view, 4> kQuantMethodNames = {"rtn", "mse", "gptq", "gptq-mse"};

QuantMethod parse_quant_method(std::string_view name); // throws StageError
const char* quant_method_name(QuantMethod method);

// The 24 factors of one Engram layer: U_c rounded to fp32 for the kernel and the
// undamped Gram H_c in the weighted error's form.
struct LayerFactors {
  int layer = 0;
  std::vector<std::vector<float>> upper;  // per hash column, 256x256
  std::vector<GramRoot> roots;            // per hash column
};

struct QuantizeParams {
  QuantMethod method = QuantMethod::rtn;
  ScaleSearch search;            // candidates 1 for rtn/gptq
  float global_scale = 1.0f;
  int gptq_block = 128;
  int layer = 0;
  const EngramLayout* layout = nullptr;   // gptq methods: rows -> hash columns
  const LayerFactors* factors = nullptr;  // gptq methods
};

QuantizeParams make_quantize_params(QuantMethod method, int mse_candidates, double mse_alpha_min, float global_scale);

// Output buffers of one chunk: packed codes rows x cols/2, scales rows x cols/16.
struct Nvfp4Chunk {
  std::vector<uint8_t> packed;
  std::vector<uint8_t> scales;
  ChunkStats stats;
  void resize(uint64_t rows, int cols);
};

// Rows of one hash column, dequantized (n x cols, row-major; read only), with any
// method: codes and scales out, exact per-row sums into stats, and the weighted error
// through H_c whenever params.factors is set (every method).
void quantize_column_rows(const float* rows, uint64_t n, int cols, int column, const QuantizeParams& params,
                          uint8_t* packed, uint8_t* scales, ChunkStats& stats);

// Returns false when `cancel` became true mid-chunk (the chunk is then incomplete and
// must be dropped). Stats are exact per row (ChunkStats), so any chunking sums alike.
bool quantize_chunk_nvfp4(const Fp8RowChunk& chunk, const QuantizeParams& params, Nvfp4Chunk& out,
                          const std::atomic<bool>* cancel);

} // namespace shardq
