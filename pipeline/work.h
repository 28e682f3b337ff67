// Units of work and their results, as they travel between ranks (plain structs).
#pragma once

#include <cstdint>

#include "stages/chunk_stats.h"

namespace shardq {

enum class WorkKind : int32_t { amax, factor, quantize, wait };

struct WorkItem {
  WorkKind kind = WorkKind::wait;
  int32_t table = 0;      // index into Plan::tables
  int64_t index = 0;      // chunk (amax, quantize) or hash column (factor)
  float global_scale = 0; // quantize
};

struct AmaxResult {
  int32_t table = 0;
  int64_t chunk = 0;
  float amax = 0;
  double seconds = 0;
};

struct FactorResult {
  int32_t table = 0;
  int32_t column = 0;
  // followed by gram[256*256] and upper[256*256] doubles
};

struct ChunkResult {
  int32_t table = 0;
  int64_t chunk = 0;
  uint64_t checksum = 0;
  double seconds = 0;
  int32_t rank = 0;
  ChunkStats stats;
  // chunk_data: followed by the packed codes and the scales
};

struct FinalizeShard {
  int32_t shard = 0;
  int32_t tables = 0;
  float global_scales[8] = {}; // of the shard's tables, in ShardPlan::tables order
};

} // namespace shardq
