// Units of work and their results, as they travel between ranks (plain structs).
#pragma once

#include <cstdint>

#include "stages/chunk_stats.h"

namespace shardq {

// A task's phases: its group's reduction, the factors it needs, then encode + write.
enum class WorkKind : int32_t { reduce, factor, encode, wait };

struct WorkItem {
  WorkKind kind = WorkKind::wait;
  int32_t task = 0;     // index into Plan::tasks(); factor: index into Plan::factor_sets()
  int64_t index = 0;    // chunk (reduce, encode) or factor item (factor)
  float reduction = 0;  // encode: the group's reduced value
};

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
