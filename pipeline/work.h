// Units of work and their results, as they travel between ranks (plain structs).
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "stages/chunk_stats.h"

namespace shardq {

struct Plan;

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

// finalize: followed by `scalars` floats, the shard's group_scalar entries in layout order.
struct FinalizeShard {
  int32_t shard = 0;
  int32_t scalars = 0;
};

} // namespace shardq
