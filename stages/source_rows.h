// A chunk of source rows as read from disk: FP8 E4M3 codes with one E8M0 scale per 32.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace shardq {

struct Fp8RowChunk {
  std::string tensor;              // for messages
  uint64_t first_row = 0;          // absolute row index of row 0 of the chunk
  uint64_t rows = 0;
  int cols = 0;                    // values per row (256 for Engram)
  std::span<const uint8_t> codes;  // rows * cols E4M3 codes
  std::span<const uint8_t> scales; // rows * cols/32 E8M0 bytes
  std::string scale_tensor;        // for messages about scales (empty: `tensor`)
};

// Throws StageError naming tensor, row and column at the first NaN code (E4M3 0x7F/0xFF)
// or NaN scale (E8M0 0xFF).
void check_fp8_chunk(const Fp8RowChunk& chunk);
// The same for rows [first, first + count) of the chunk: a codec that checks a few rows
// before it quantizes them finds them in cache for the quantizer.
void check_fp8_rows(const Fp8RowChunk& chunk, uint64_t first, uint64_t count);

// The scales only (for stages that read them alone): StageError at the first NaN scale.
void check_e8m0_scales(const Fp8RowChunk& chunk);

// Dequantize row r of the chunk (exact: e4m3 * 2^(e-127)) into out[cols].
void dequantize_chunk_row(const Fp8RowChunk& chunk, uint64_t r, float* out);

} // namespace shardq
