#include "pipeline/work.h"

#include <fmt/format.h>

#include <cstring>

#include "pipeline/pipeline_error.h"
#include "pipeline/plan.h"

namespace shardq {

std::vector<uint8_t> encode_items(const std::vector<WorkItem>& items) {
  std::vector<uint8_t> bytes(items.size() * sizeof(WorkItem));
  if (!items.empty()) std::memcpy(bytes.data(), items.data(), bytes.size());
  return bytes;
}

std::vector<WorkItem> decode_items(std::span<const uint8_t> bytes) {
  if (bytes.size() % sizeof(WorkItem) != 0) {
    throw PipelineError(fmt::format("an assign message of {} bytes is not a whole number of work items", bytes.size()));
  }
  std::vector<WorkItem> items(bytes.size() / sizeof(WorkItem));
  if (!items.empty()) std::memcpy(items.data(), bytes.data(), bytes.size());
  return items;
}

uint64_t item_source_bytes(const Plan& plan, const WorkItem& item) {
  if (item.kind != WorkKind::reduce && item.kind != WorkKind::encode) return 0;
  const Task& task = plan.tasks()[size_t(item.task)];
  const uint64_t chunk = uint64_t(item.index), first = task.chunk_first_row(chunk), count = task.chunk_rows(chunk);
  uint64_t bytes = 0;
  for (size_t i = 0; i < task.inputs.size(); ++i) {
    bytes += task.input_row_count(i, first, count) * tensor_row_bytes(plan.source.at(task.inputs[i]).spec);
  }
  return bytes;
}

} // namespace shardq
