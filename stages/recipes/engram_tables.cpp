#include "stages/recipes/engram_tables.h"

#include <fmt/format.h>

#include "stages/engram_config.h"
#include "stages/stage_error.h"

namespace shardq {

std::string engram_prefix(int layer) { return fmt::format("layers.{}.engram.embed", layer); }

std::shared_ptr<const EngramLayout> engram_layout_of(const CheckpointView& source) {
  try {
    return std::make_shared<const EngramLayout>(engram_config_from_json(source.text_config()));
  } catch (const StageError& e) {
    throw StageError(fmt::format("{}: {}", (source.dir / "config.json").string(), e.what()));
  }
}

void expect_tensor(const CheckpointView& view, const SourceTensor& tensor, Dtype dtype,
                   std::initializer_list<uint64_t> shape) {
  if (tensor.spec.dtype == dtype && std::ranges::equal(tensor.spec.shape, shape)) return;
  throw StageError(fmt::format("{}: tensor '{}' is {} {} but {} {} was expected",
                               (view.dir / view.shard_files[tensor.shard]).string(), tensor.spec.name,
                               dtype_name(tensor.spec.dtype), shape_text(tensor.spec.shape), dtype_name(dtype),
                               shape_text(std::vector<uint64_t>(shape))));
}

std::vector<EngramTable> engram_tables(const CheckpointView& source, const EngramLayout& layout) {
  std::vector<EngramTable> tables;
  for (int layer : layout.config().layer_ids) {
    EngramTable table;
    table.layer = layer;
    table.weight = engram_prefix(layer) + ".weight";
    table.scale = engram_prefix(layer) + ".scale";
    const SourceTensor& weight = source.at(table.weight);
    const std::string file = (source.dir / source.shard_files[weight.shard]).string();
    const SourceTensor* scale = source.find(table.scale);
    if (!scale || scale->shard != weight.shard) {
      throw StageError(fmt::format("{}: Engram table '{}' has no '{}' in the same shard", file, table.weight, table.scale));
    }
    if (weight.spec.shape.size() != 2) throw StageError(fmt::format("{}: tensor '{}' must be 2-D [rows, 256]", file, table.weight));
    if (weight.spec.dtype != Dtype::F8_E4M3) { // an already packed table (NVFP4, MXFP4) has half the columns
      throw StageError(fmt::format("{}: Engram table '{}' is {} {}; F8_E4M3 [rows, {}] was expected", file, table.weight,
                                   dtype_name(weight.spec.dtype), shape_text(weight.spec.shape), layout.config().head_dim));
    }
    table.rows = weight.spec.shape[0];
    table.cols = int(weight.spec.shape[1]);
    table.shard = weight.shard;
    const int head_dim = layout.config().head_dim;
    if (table.cols != head_dim || table.cols % 32 != 0) {
      throw StageError(fmt::format("{}: tensor '{}' has {} values per row; engram_head_dim is {}", file, table.weight,
                                   table.cols, head_dim));
    }
    expect_tensor(source, weight, Dtype::F8_E4M3, {table.rows, uint64_t(table.cols)});
    expect_tensor(source, *scale, Dtype::F8_E8M0, {table.rows, uint64_t(table.cols / 32)});
    try {
      layout.check(layer, table.rows);
    } catch (const StageError& e) {
      throw StageError(fmt::format("{}: tensor '{}': {}", file, table.weight, e.what()));
    }
    tables.push_back(table);
  }
  return tables;
}

void plan_changed_shards(const CheckpointView& source, const std::set<size_t>& shards, const ReplaceTensor& replace,
                         RecipePlan& plan, const ForEach& for_each) {
  const std::vector<size_t>& starts = source.shard_starts(); // the view lists tensors shard by shard
  const std::vector<size_t> listed(shards.begin(), shards.end());
  std::vector<std::vector<ShardEntry>*> lists;
  for (size_t shard : listed) lists.push_back(&plan.shards[shard]); // the map is not touched below
  run_each(for_each, listed.size(), [&](size_t i) {
    std::vector<ShardEntry>& entries = *lists[i];
    for (size_t t = starts[listed[i]]; t < starts[listed[i] + 1]; ++t) {
      const SourceTensor& tensor = source.tensors[t];
      if (!replace(tensor, entries)) entries.push_back(copy_entry(tensor.spec, tensor.spec.name));
    }
  });
}

} // namespace shardq
