// Stage `write`: where a chunk's bytes land in its output shard. The plan is pure
// arithmetic on the planned layout; the pipeline does the pwrite and the fsync.
#pragma once

#include <cstdint>
#include <span>
#include <string>

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

// The piece of output `tensor` holding rows [first_row, first_row + rows) of a chunk.
// Throws StageError naming the tensor if the bytes would leave its slot.
WritePiece plan_rows_write(std::span<const uint8_t> bytes, uint64_t first_row, uint64_t rows, const OutputSlot& slot,
                           const std::string& tensor);

} // namespace shardq
