#include "pipeline/work.h"

#include <algorithm>

#include "pipeline/plan.h"

namespace shardq {

uint64_t item_source_bytes(const Plan& plan, const WorkItem& item) {
  if (item.kind != WorkKind::reduce && item.kind != WorkKind::encode) return 0;
  const Task& task = plan.tasks()[size_t(item.task)];
  const uint64_t chunk = uint64_t(item.index), first = task.chunk_first_row(chunk), count = task.chunk_rows(chunk);
  uint64_t bytes = 0;
  const auto& sources = plan.task_sources[size_t(item.task)];
  for (size_t i = 0; i < task.inputs.size(); ++i) bytes += task.input_row_count(i, first, count) * sources[i].row_bytes;
  return bytes;
}

std::optional<WorkRequest> work_to_request(const RankLoad& load) {
  if (load.unsent_bytes >= kMaxUnsentBytes) return std::nullopt;
  const size_t items_wanted = kItemsPerThread * load.threads;
  if (load.items >= items_wanted && load.queued_bytes >= kQueuedBytes) return std::nullopt;
  return WorkRequest{load.rank, int32_t(items_wanted - std::min(load.items, items_wanted)),
                     kQueuedBytes - std::min(load.queued_bytes, kQueuedBytes)};
}

} // namespace shardq
