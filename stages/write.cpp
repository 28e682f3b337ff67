#include "stages/write.h"

#include <fmt/format.h>

#include "stages/stage_error.h"

namespace shardq {
namespace {

WritePiece piece(std::span<const uint8_t> bytes, uint64_t first_row, uint64_t rows, const OutputSlot& slot,
                 const char* what) {
  if (first_row + rows > slot.rows || bytes.size() != rows * slot.row_bytes) {
    throw StageError(fmt::format("chunk at row {} ({} rows, {} bytes) does not fit the {} tensor of {} rows x {} bytes",
                                 first_row, rows, bytes.size(), what, slot.rows, slot.row_bytes));
  }
  return {slot.offset + first_row * slot.row_bytes, bytes};
}

} // namespace

std::array<WritePiece, 2> plan_chunk_writes(std::span<const uint8_t> packed, std::span<const uint8_t> scales,
                                            uint64_t first_row, uint64_t rows, const OutputSlot& weight,
                                            const OutputSlot& weight_scale) {
  return {piece(packed, first_row, rows, weight, "weight"), piece(scales, first_row, rows, weight_scale, "weight_scale")};
}

} // namespace shardq
