#include "stages/write.h"

#include <fmt/format.h>

#include "stages/stage_error.h"

namespace shardq {

WritePiece plan_rows_write(std::span<const uint8_t> bytes, uint64_t first_row, uint64_t rows, const OutputSlot& slot,
                           const std::string& tensor) {
  if (first_row + rows > slot.rows || bytes.size() != rows * slot.row_bytes) {
    throw StageError(fmt::format("chunk at row {} ({} rows, {} bytes) does not fit tensor '{}' of {} rows x {} bytes",
                                 first_row, rows, bytes.size(), tensor, slot.rows, slot.row_bytes));
  }
  return {slot.offset + first_row * slot.row_bytes, bytes};
}

} // namespace shardq
