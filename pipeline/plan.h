// The plan of a job, computed up front and identically on every rank from the job, the
// recipe and the source (and reference) headers: the recipe's tasks, the output layout of
// every changed shard, the files linked unchanged. The engine runs any recipe's plan.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "pipeline/io/index.h"
#include "pipeline/io/safetensors.h"
#include "pipeline/io/shard_readers.h"
#include "pipeline/job.h"
#include "stages/recipes/recipe.h"
#include "stages/write.h"

namespace shardq {

inline constexpr const char* kConfigFile = "config.json";

struct ShardPlan {
  std::string file;                   // same name in src and dst
  bool changed = false;               // the recipe rewrites it; otherwise hard-linked
  int owner = 0;                      // rank that writes it (write_mode owner)
  std::span<const ShardEntry> entries; // output tensors in order, and where each comes from (the recipe plan's)
  std::vector<size_t> group_scalar_entries; // those written at finalize (EntrySource::group_scalar), in order
  std::vector<size_t> tasks;          // tasks writing rows into it
  io::FileLayout layout;              // planned offsets (tensors parallel to entries) and header
  std::map<std::string, std::string> metadata; // the source shard's __metadata__
};

// Where one task input is read: its shard's reader and its entry there (both the plan's),
// its place in Plan::source.tensors, and its row bytes (the scheduler sizes every item by
// them: kept here, not read from the entry's shape, a cache miss each for 100K inputs).
struct InputSource {
  const io::Reader* reader = nullptr;
  const io::TensorInfo* tensor = nullptr;
  size_t position = 0;
  uint64_t row_bytes = 0;
};

// Move-only: shards view the recipe plan's entries, which a move keeps in place.
struct Plan {
  Plan() = default;
  Plan(Plan&&) = default;
  Plan& operator=(Plan&&) = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

  Job job;
  RecipeParams params;
  std::shared_ptr<const Recipe> recipe;
  RecipePlan recipe_plan;
  std::filesystem::path src, dst;
  CheckpointView source;
  io::ShardIndex source_index;
  std::vector<ShardPlan> shards;
  std::vector<std::string> other_files; // paths below src, linked untouched (tokenizer, LICENSE, inference/...)
  std::vector<std::vector<size_t>> group_tasks; // scale group -> its tasks
  std::vector<std::pair<std::string, std::string>> fingerprint;
  // The source shards, open and their headers parsed once (by make_plan) for everyone
  // who reads them afterwards: the workers, the output index. Only looked up after
  // make_plan (every shard is in it), so shared by threads without a lock.
  std::shared_ptr<io::ShardReaders> source_readers;
  // Per task, per input: looked up once here, not by name for every chunk read.
  std::vector<std::vector<InputSource>> task_sources;
  // Per task, per output: where it starts in its shard's data buffer (planned layout).
  std::vector<std::vector<uint64_t>> task_output_offsets;

  const std::vector<Task>& tasks() const { return recipe_plan.tasks; }
  const std::vector<FactorSet>& factor_sets() const { return recipe_plan.factor_sets; }
  std::string report_file() const { return recipe->report_file(); }
  uint64_t total_rows() const;
};

// Reads index, config and every shard header of src (and of the reference when the job
// names one), then asks the job's recipe for its plan; refuses (PipelineError) anything
// that does not fit. No work is done before this passes.
Plan make_plan(const Job& job, int ranks);

// The headers of a checkpoint folder (index, config, hf_quant_config.json, shards).
CheckpointView read_checkpoint_view(const std::filesystem::path& dir, io::ShardIndex* index = nullptr);
// The same through `readers` (their folder's), which keep the shards open for later use.
CheckpointView read_checkpoint_view(io::ShardReaders& readers, io::ShardIndex* index = nullptr);

// A factor set's FP8 linear dequantized exactly (32x32 E8M0 blocks), row-major
// [out, in]; refuses a missing tensor, the wrong shape or NaN codes, naming it.
std::vector<float> read_factor_source(const Plan& plan, const FactorSet& set);
// The same checks without the dequantization (before any work: refuse a bad one early).
void check_factor_source(const Plan& plan, const FactorSet& set);

// Where output `output` of task `task` (an index into tasks()) lies in its planned shard.
OutputSlot task_output_slot(const Plan& plan, size_t task, size_t output);

// The output files a finished step stands for: "shard:<file>" its shard, "index" the
// index, "config" config.json and the recipe's side files (only a plan knows those). A
// run forgets a step whose files are gone and makes them again; status lists them.
std::vector<std::string> files_of_finished_step(std::string_view step, std::span<const std::string> config_side_files);
// The side files of this plan's recipe (hf_quant_config.json for nvfp4-1017).
std::vector<std::string> side_file_names(const Plan& plan);

// A field of the plan's fingerprint ("source_headers", ...); "" when it has none.
std::string fingerprint_value(const Plan& plan, std::string_view field);

// The output index.
io::ShardIndex output_index(const Plan& plan);
// Its text, as the output folder's model.safetensors.index.json holds it.
std::string output_index_text(const Plan& plan);

} // namespace shardq
