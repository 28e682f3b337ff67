// Units of work and their results, as they travel between ranks (plain structs).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "stages/chunk_stats.h"

namespace shardq {

struct Plan;
struct Task;

// A task's phases: its group's reduction, the factors it needs, then encode + write.
enum class WorkKind : int32_t { reduce, factor, encode, wait };

struct WorkItem {
  WorkKind kind = WorkKind::wait;
  int32_t task = 0;     // index into Plan::tasks(); factor: index into Plan::factor_sets()
  int64_t index = 0;    // chunk (reduce, encode) or factor item (factor)
  float reduction = 0;  // encode: the group's reduced value
};

// request: a rank asks for up to `items` more, or for more until their source rows reach
// `bytes` (small tasks travel many to a message: a round trip per tiny task would cost
// more than the task).
struct WorkRequest {
  int32_t rank = 0;
  int32_t items = 0;
  uint64_t bytes = 0;
};

// Work items held per compute thread: the one computing and the next one read (or being
// read), so disk and compute overlap; a third would only leave one rank working alone at
// the end.
inline constexpr size_t kItemsPerThread = 2;
// Source bytes a rank keeps queued when items are small (tiny tensors): enough that the
// request round trip (up to an idle wait on each side) hides behind the work.
inline constexpr uint64_t kQueuedBytes = uint64_t(2) << 20;
// Bytes a rank lets wait to leave before it asks for more work. A chunk for another rank's
// shards stays in this rank's memory until its owner takes it; an owner that writes slower
// than the others compute (its writer's queue full: a slow NFS mount) would otherwise let
// them pile up chunks without bound (~150 MB each for an Engram table at the default
// rows_per_chunk). What the worker already holds still finishes: the peak is this plus
// kItemsPerThread chunks per thread and the chunks of up to kQueuedBytes of source
// (tests/mpi/test_back_pressure.sh). Every message counts: rank 0 sending a layer's factor
// sets (hundreds of MB) pauses its own asking too, until they leave.
inline constexpr uint64_t kMaxUnsentBytes = uint64_t(512) << 20;

// What a rank holds when it considers asking for work.
struct RankLoad {
  int32_t rank = 0;
  size_t threads = 1;
  size_t items = 0;          // items queued, being read, read or computing
  uint64_t queued_bytes = 0; // source bytes of the items not yet computing
  uint64_t unsent_bytes = 0; // bytes of messages sent and not yet received (chunks for their owners)
  uint64_t max_unsent_bytes = kMaxUnsentBytes;
};

// The request a rank sends rank 0 now, if any: when its worker holds fewer items than its
// threads can take, or fewer source bytes than hide a round trip, and its unsent messages
// are under max_unsent_bytes.
std::optional<WorkRequest> work_to_request(const RankLoad& load);

// A rank as rank 0 knows it (gathered once at start).
struct RankInfo {
  std::string host;
  int threads = 1;
};

// Rank 0 writes each rank's figures for `shardq status` here, beside the checkpoint.
inline std::filesystem::path rank_figures_path(const std::filesystem::path& checkpoint) {
  return checkpoint.string() + ".ranks.json";
}

// Bytes of source rows an item reads (0 for factor items, which read their set once).
uint64_t item_source_bytes(const Plan& plan, const WorkItem& item);

struct ReduceResult {
  int32_t task = 0;
  int64_t chunk = 0;
  float value = 0;
  double seconds = 0;
};

struct FactorResult {
  int32_t set = 0;
  int32_t item = 0;
  // followed by gram[dim*dim] and upper[dim*dim] doubles
};

struct ChunkResult {
  int32_t task = 0;
  int64_t chunk = 0;
  uint64_t checksum = 0;
  double seconds = 0;
  int32_t rank = 0;
  ChunkStats stats;
  // chunk_data: followed by the task's output buffers in order
};

// The bytes of the chunk_data message that carries chunk `chunk` of `task` to the rank
// writing its shard: its ChunkResult and the chunk's rows of every output.
uint64_t chunk_message_bytes(const Task& task, uint64_t chunk);
// The largest rows_per_chunk, a multiple of the task's row_alignment, whose chunk messages
// fit in `limit` bytes; 0 when not even one aligned group of rows does.
uint64_t rows_per_chunk_within(const Task& task, uint64_t limit);
// With write_mode owner and more than one rank, a chunk computed on one rank travels to the
// rank writing its shard as one message: PipelineError, before any work, when a task's
// chunk would not fit in `limit` bytes (MPI's kMaxMessageBytes), naming the task, the
// message's size and the rows_per_chunk that fits every task.
void refuse_chunk_messages_past(const std::vector<Task>& tasks, int ranks, bool owner_writes, uint64_t limit);

// finalize: followed by `scalars` floats, the shard's group_scalar entries in layout order.
struct FinalizeShard {
  int32_t shard = 0;
  int32_t scalars = 0;
};

} // namespace shardq
