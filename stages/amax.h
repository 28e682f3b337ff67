// Stage `amax`: the largest |value| of a chunk of FP8 source rows. max is exact and
// order-free, so the table's amax (the max over chunks) is the same for any schedule.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "stages/source_rows.h"

namespace shardq {

// Checks the chunk for NaN codes first (StageError naming tensor, row and column).
float amax_fp8_chunk(const Fp8RowChunk& chunk);

// Fills `codes` with the E4M3 codes of chunk rows [first, first + count) (chunk-relative).
using ReadChunkCodes = std::function<void(uint64_t first, uint64_t count, std::span<uint8_t> codes)>;

// The same amax from the chunk's scales and only the rows that can decide it: a 32-block
// with scale 2^k holds values of at most 448 * 2^k, so the rows holding the chunk's
// largest scale are read first, then only rows with a block whose bound exceeds the amax
// found so far. Typical tables are read ~1/30 (scales) plus a few rows; the result is
// bit-identical to amax_fp8_chunk on the whole chunk. `chunk.codes` is ignored; NaN
// scales are refused (all are read), NaN codes in the rows read too (the quantize stage
// checks every row). rows_read (optional): how many rows' codes were read.
float amax_fp8_chunk_from_scales(const Fp8RowChunk& chunk, const ReadChunkCodes& read_codes,
                                 uint64_t* rows_read = nullptr);

} // namespace shardq
