#include "pipeline/work.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "pipeline/pipeline_error.h"
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

namespace {

uint64_t output_row_bytes(const Task& task) {
  uint64_t bytes = 0;
  for (const auto& output : task.outputs) bytes += tensor_row_bytes(output);
  return bytes;
}

} // namespace

uint64_t chunk_message_bytes(const Task& task, uint64_t chunk) {
  return sizeof(ChunkResult) + task.chunk_rows(chunk) * output_row_bytes(task);
}

uint64_t rows_per_chunk_within(const Task& task, uint64_t limit) {
  const uint64_t row_bytes = std::max<uint64_t>(1, output_row_bytes(task));
  if (limit < sizeof(ChunkResult)) return 0;
  const uint64_t rows = (limit - sizeof(ChunkResult)) / row_bytes;
  return rows / task.row_alignment * task.row_alignment;
}

void refuse_chunk_messages_past(const std::vector<Task>& tasks, int ranks, bool owner_writes, uint64_t limit) {
  if (ranks < 2 || !owner_writes) return;
  const Task* largest = nullptr;
  uint64_t largest_bytes = 0, fitting_rows = UINT64_MAX;
  for (const Task& task : tasks) {
    const uint64_t bytes = chunk_message_bytes(task, 0); // chunk 0 is a full one
    if (bytes <= limit) continue;
    fitting_rows = std::min(fitting_rows, rows_per_chunk_within(task, limit));
    if (bytes > largest_bytes) largest = &task, largest_bytes = bytes;
  }
  if (!largest) return;
  const std::string remedy = fitting_rows > 0 ? fmt::format("set run.rows_per_chunk to at most {}, or ", fitting_rows)
                                              : std::string("its rows are too wide for any rows_per_chunk: ");
  throw PipelineError(fmt::format("task {}: a chunk of {} rows is a {}-byte message to the rank that writes its shard, "
                                  "past the {} bytes an MPI message holds (run.write_mode owner, {} ranks); {}set "
                                  "run.write_mode = \"direct\" on a folder every rank shares",
                                  largest->name, largest->chunk_rows(0), largest_bytes, limit, ranks, remedy));
}

std::optional<WorkRequest> work_to_request(const RankLoad& load) {
  if (load.unsent_bytes >= load.max_unsent_bytes) return std::nullopt;
  const size_t items_wanted = kItemsPerThread * load.threads;
  if (load.items >= items_wanted && load.queued_bytes >= kQueuedBytes) return std::nullopt;
  return WorkRequest{load.rank, int32_t(items_wanted - std::min(load.items, items_wanted)),
                     kQueuedBytes - std::min(load.queued_bytes, kQueuedBytes)};
}

} // namespace shardq
