// Stage `write`: where a chunk's bytes land in its output shard. The plan is pure
// arithmetic on the planned layout; the pipeline does the pwrite and the fsync.
#pragma once

#include <array>
#include <cstdint>
#include <span>


namespace shardq {

// Where row 0 of an output tensor lies in its shard's data buffer, and the bytes of one row.
struct OutputSlot {
  uint64_t offset = 0;
  uint64_t row_bytes = 0;
  uint64_t rows = 0;
};

struct WritePiece {
  uint64_t offset = 0; // in the shard's data buffer
  std::span<const uint8_t> bytes;
};

// The two pieces of a chunk starting at table row `first_row`: codes into the weight
// tensor, scales into the weight_scale tensor. Throws StageError if it would leave a slot.
std::array<WritePiece, 2> plan_chunk_writes(std::span<const uint8_t> packed, std::span<const uint8_t> scales,
                                            uint64_t first_row, uint64_t rows, const OutputSlot& weight,
                                            const OutputSlot& weight_scale);

} // namespace shardq
