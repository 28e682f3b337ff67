#include "stages/recipes/recipe.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "stages/recipes/engram_nvfp4.h"
#include "stages/recipes/nvfp4_1017.h"
#include "stages/recipes/w8a8_int8.h"
#include "stages/stage_error.h"

namespace shardq {

uint64_t Task::chunk_rows(uint64_t chunk) const { return std::min(rows_per_chunk, rows - chunk_first_row(chunk)); }

uint64_t Task::input_row_count(size_t input, uint64_t first, uint64_t count) const {
  const uint64_t rows_per_input_row = row_group(input);
  return (first + count + rows_per_input_row - 1) / rows_per_input_row - first / rows_per_input_row;
}

void CheckpointView::index() {
  starts_ = starts_of_shards();
  const auto repeated = by_name_.build(tensors.size(), [&](size_t i) -> std::string_view { return tensors[i].spec.name; });
  if (!repeated.empty()) {
    const SourceTensor& again = tensors[repeated.front()];
    const SourceTensor& first = *find(again.spec.name);
    throw StageError(fmt::format("{}: tensor '{}' is stored twice, in shards '{}' and '{}'", dir.string(), again.spec.name,
                                 shard_files.at(first.shard), shard_files.at(again.shard)));
  }
}

const std::vector<size_t>& CheckpointView::shard_starts() const {
  if (starts_.size() != shard_files.size() + 1) throw StageError(fmt::format("{}: the view is not indexed", dir.string()));
  return starts_;
}

std::vector<size_t> CheckpointView::starts_of_shards() const {
  std::vector<size_t> starts(shard_files.size() + 1, 0);
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].shard >= shard_files.size() || (i > 0 && tensors[i].shard < tensors[i - 1].shard)) {
      throw StageError(fmt::format("{}: tensor '{}' is out of shard order in the view", dir.string(), tensors[i].spec.name));
    }
    ++starts[tensors[i].shard + 1];
  }
  for (size_t s = 0; s < shard_files.size(); ++s) starts[s + 1] += starts[s];
  return starts;
}

void run_each(const ForEach& for_each, size_t count, const std::function<void(size_t)>& body) {
  if (for_each) return for_each(count, body);
  for (size_t i = 0; i < count; ++i) body(i);
}

const SourceTensor* CheckpointView::find(std::string_view name) const {
  const auto at = by_name_.find(name, [&](size_t i) -> std::string_view { return tensors[i].spec.name; });
  return at ? &tensors[*at] : nullptr;
}

const SourceTensor* CheckpointView::find_near(std::string_view name, const SourceTensor& near) const {
  constexpr size_t kBeside = 2;
  const size_t position = size_t(&near - tensors.data());
  const size_t first = position - std::min(position, kBeside), last = std::min(tensors.size(), position + kBeside + 1);
  for (size_t i = first; i < last; ++i) {
    if (tensors[i].spec.name == name) return &tensors[i]; // names are unique (index())
  }
  return find(name);
}

const SourceTensor& CheckpointView::at(std::string_view name) const {
  if (const SourceTensor* tensor = find(name)) return *tensor;
  throw StageError(fmt::format("{}: no tensor '{}' in any shard", dir.string(), name));
}

const nlohmann::ordered_json& CheckpointView::text_config() const {
  return config.contains("text_config") ? config["text_config"] : config;
}

ShardEntry copy_entry(const TensorSpec& spec, const std::string& from) {
  ShardEntry entry;
  entry.spec = spec;
  entry.source = EntrySource::copy;
  entry.from = from;
  return entry;
}

ShardEntry task_output_entry(const Task& task, size_t task_index, size_t output) {
  ShardEntry entry;
  entry.spec = task.outputs.at(output);
  entry.source = EntrySource::task_output;
  entry.task = task_index;
  entry.output = output;
  return entry;
}

ShardEntry group_scalar_entry(const std::string& name, size_t task_index) {
  ShardEntry entry;
  entry.spec = {name, Dtype::F32, {}};
  entry.source = EntrySource::group_scalar;
  entry.task = task_index;
  return entry;
}

ShardEntry constant_entry(const TensorSpec& spec, std::vector<uint8_t> bytes) {
  ShardEntry entry;
  entry.spec = spec;
  entry.source = EntrySource::constant;
  entry.bytes = std::move(bytes);
  return entry;
}

void Recipe::audit(const RecipePlan&, const RecipeParams&, const CheckpointView&, const CheckpointView&,
                   const AuditCheck&) const {}

std::vector<std::string> recipe_names() { return {"engram-nvfp4", "nvfp4-1017", "w8a8-int8"}; }

std::unique_ptr<Recipe> make_recipe(std::string_view name) {
  if (name == "engram-nvfp4") return std::make_unique<EngramNvfp4Recipe>();
  if (name == "nvfp4-1017") return std::make_unique<Nvfp4_1017Recipe>();
  if (name == "w8a8-int8") return std::make_unique<W8a8Int8Recipe>();
  throw StageError(fmt::format("unknown recipe '{}' (available: {})", name, fmt::join(recipe_names(), ", ")));
}

} // namespace shardq
