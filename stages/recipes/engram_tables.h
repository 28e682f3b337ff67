// What the Engram recipes share: finding and checking the Engram tables of a source
// (docs/formats.md "Engram"), and laying out changed shards.
#pragma once

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "stages/engram_layout.h"
#include "stages/recipes/recipe.h"

namespace shardq {

struct EngramTable {
  int layer = 0;
  std::string weight, scale; // layers.L.engram.embed.{weight,scale}
  uint64_t rows = 0;
  int cols = 0;
  size_t shard = 0;
};

// The Engram layout of text_config; StageError naming config.json when it is unusable.
std::shared_ptr<const EngramLayout> engram_layout_of(const CheckpointView& source);

// Every table of the layout: F8_E4M3 [rows, head_dim] with F8_E8M0 [rows, head_dim/32]
// in the same shard, rows equal to the prime layout's; StageError naming what differs.
std::vector<EngramTable> engram_tables(const CheckpointView& source, const EngramLayout& layout);

std::string engram_prefix(int layer); // layers.L.engram.embed

// Refuses a tensor whose dtype or shape differs (StageError naming file, tensor, both).
// The shape is a braced list (no vector made for each of 50K linears' scales).
void expect_tensor(const CheckpointView& view, const SourceTensor& tensor, Dtype dtype,
                   std::initializer_list<uint64_t> shape);

// Lays out each listed shard in source order: a tensor is copied unless `replace` returns
// true, having appended to `entries` those that take its place (none: dropped). Shards are
// laid out through `for_each` (each into its own list: `replace` must only read).
using ReplaceTensor = std::function<bool(const SourceTensor&, std::vector<ShardEntry>& entries)>;
void plan_changed_shards(const CheckpointView& source, const std::set<size_t>& shards, const ReplaceTensor& replace,
                         RecipePlan& plan, const ForEach& for_each = {});

} // namespace shardq
