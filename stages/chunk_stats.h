// What one chunk of a table contributes to the report; stored per chunk in the checkpoint
// and summed in chunk order, so the figures never depend on ranks or schedule.
#pragma once

#include <cstdint>

#include "kernels/nvfp4.h"

namespace shardq {

struct ChunkStats {
  BlockStats blocks;                 // counters, candidate wins, sum (deq - x)^2 and sum x^2
  double weighted_error_sq = 0.0;    // sum ||W_c (x - deq)||^2 (GPTQ proxy, undamped H_c)
  double weighted_reference_sq = 0.0; // sum ||W_c x||^2
  void merge(const ChunkStats& other) {
    blocks.merge(other.blocks);
    weighted_error_sq += other.weighted_error_sq;
    weighted_reference_sq += other.weighted_reference_sq;
  }
};

} // namespace shardq
