// Stage `amax`: the largest |value| of a chunk of FP8 source rows. max is exact and
// order-free, so the table's amax (the max over chunks) is the same for any schedule.
#pragma once

#include "stages/source_rows.h"

namespace shardq {

// Checks the chunk for NaN codes first (StageError naming tensor, row and column).
float amax_fp8_chunk(const Fp8RowChunk& chunk);

} // namespace shardq
