// A recipe is a product: it reads the job's parameters and the source (and reference)
// headers and returns a plan of tasks, the tensors copied, renamed or dropped, the side
// files and its report section (docs/design.md "Recipes, tasks, codecs"). The engine
// (pipeline/) runs any plan and knows no recipe by name; adding a product is adding a
// recipe here, a job file and tests.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "stages/chunk_stats.h"
#include "stages/codec.h"
#include "stages/name_index.h"
#include "stages/tensor.h"

namespace shardq {

// The job's keys that decide bytes, as a recipe sees them.
struct RecipeParams {
  std::string method = "gptq-mse";
  int mse_candidates = 8;
  double mse_alpha_min = 0.75;
  double gptq_damp = 0.01;
  int gptq_block = 128;
  bool keep_mtp = true;
  std::vector<std::string> ignore;
  std::string input_scales_from;  // the reference checkpoint, as the job names it
  double engram_min_cosine = 0.99; // what verify holds an MXFP4 Engram table to
  uint64_t rows_per_chunk = 1048576;
  bool uses_gptq() const { return method == "gptq" || method == "gptq-mse"; }
  bool uses_mse() const { return method == "mse" || method == "gptq-mse"; }
};

struct SourceTensor {
  TensorSpec spec;
  size_t shard = 0; // index into CheckpointView::shard_files
};

// The headers of a checkpoint folder: config, shard files (in name order) and every
// tensor (shard by shard, in offset order).
struct CheckpointView {
  std::filesystem::path dir;
  nlohmann::ordered_json config;
  nlohmann::ordered_json hf_quant_config; // null when the folder has none
  std::vector<std::string> shard_files;
  std::vector<SourceTensor> tensors;

  // Builds the name lookup and the shard starts after tensors are filled; StageError on a
  // name stored twice or a tensor out of shard order.
  void index();
  // Positions in tensors of each shard's first tensor, and one past the last (shard_files.size() + 1),
  // as index() found them (a plan asks a few times; each count would walk 100K tensors).
  const std::vector<size_t>& shard_starts() const;
  const SourceTensor* find(std::string_view name) const;
  // find, looking first at the few tensors stored beside `near` in its shard: a linear's
  // scale usually sits next to its weight, and a neighbour is in cache where a lookup in
  // the index of 100K names costs a few cache misses. The same tensor as find (names are
  // unique in a view).
  const SourceTensor* find_near(std::string_view name, const SourceTensor& near) const;
  const SourceTensor& at(std::string_view name) const; // StageError naming dir and tensor
  const nlohmann::ordered_json& text_config() const;

 private:
  std::vector<size_t> starts_of_shards() const;
  NameIndex by_name_;          // into tensors
  std::vector<size_t> starts_; // shard_starts()
};

// Reads a whole small tensor of the reference (an input_scale): the pipeline does the I/O.
using ReadTensorBytes = std::function<std::vector<uint8_t>(const std::string& tensor)>;
// Runs body(i) for every i in [0, count), on the pipeline's cores when it gives one (its
// threads are its own); a failing body's error is the one a plain loop would have met first.
using ForEach = std::function<void(size_t count, const std::function<void(size_t)>& body)>;

struct RecipeInputs {
  RecipeParams params;
  const CheckpointView& source;
  const CheckpointView* reference = nullptr; // input_scales_from, when the job names one
  ReadTensorBytes read_reference;
  ForEach for_each; // empty: a plain loop
};

// for_each(count, body), or a plain loop when for_each is empty.
void run_each(const ForEach& for_each, size_t count, const std::function<void(size_t)>& body);

// One output group: rows of its input tensors (row-aligned) through a codec into its
// output tensors; rows of one task may be spread over ranks in chunks.
struct Task {
  std::string name;                // for messages and the report, e.g. layers.1.engram.embed
  CodecKind codec = CodecKind::engram_nvfp4;
  std::vector<std::string> inputs; // source tensors read row by row (codec order)
  std::vector<TensorSpec> outputs; // written row by row (codec order), same row count
  uint64_t rows = 0;
  int cols = 0;                    // values per row
  uint64_t row_alignment = 1;      // chunk boundaries fall on multiples of this
  uint64_t rows_per_chunk = 0;     // a multiple of row_alignment
  size_t shard = 0;                // source shard, holding every input (the output shard has the same name)
  size_t group = 0;                // scale group: tasks sharing one reduction
  int factor_set = -1;             // index into RecipePlan::factor_sets, or -1
  int layer = -1;                  // codec parameter (Engram layer: rows -> hash columns)
  // Task rows per row of input i (empty: 1 for every input): an FP8 linear's E8M0 scale
  // has one row per 32 weight rows (32x32 blocks).
  std::vector<uint32_t> input_row_groups;
  // Tensors whose rows each task row covers: 1, or more where small tensors of one shape
  // share a task (W8A8's tiny linears). Progress and rows/s count rows times this.
  uint32_t stacked_tensors = 1;

  uint64_t chunks() const { return (rows + rows_per_chunk - 1) / rows_per_chunk; }
  uint64_t chunk_first_row(uint64_t chunk) const { return chunk * rows_per_chunk; }
  uint64_t chunk_rows(uint64_t chunk) const;
  uint64_t tensor_rows(uint64_t task_rows) const { return task_rows * stacked_tensors; }
  uint32_t row_group(size_t input) const { return input_row_groups.empty() ? 1 : input_row_groups[input]; }
  // Rows of input i that task rows [first, first + count) read.
  uint64_t input_first_row(size_t input, uint64_t first) const { return first / row_group(input); }
  uint64_t input_row_count(size_t input, uint64_t first, uint64_t count) const;
};

// Factors computed once before encoding, item by item (GPTQ: one per hash column), from
// one FP8 linear of the source.
struct FactorSet {
  std::string name;        // e.g. layers.1.engram.wkv
  std::string weight, scale;
  int layer = 0;
  int items = 0;           // hash columns
  int dim = 0;             // each item is a dim x dim matrix (twice: Gram and factor)
};

// Where one tensor of an output shard comes from.
enum class EntrySource { copy, task_output, group_scalar, constant };

struct ShardEntry {
  TensorSpec spec;           // as written
  EntrySource source = EntrySource::copy;
  std::string from;          // copy: source tensor name (may differ from spec.name)
  size_t task = 0;           // task_output, group_scalar
  size_t output = 0;         // task_output: index into Task::outputs
  std::vector<uint8_t> bytes; // constant: the tensor's bytes
};

ShardEntry copy_entry(const TensorSpec& spec, const std::string& from);
ShardEntry task_output_entry(const Task& task, size_t task_index, size_t output);
ShardEntry group_scalar_entry(const std::string& name, size_t task_index); // F32 []
ShardEntry constant_entry(const TensorSpec& spec, std::vector<uint8_t> bytes);

struct RecipePlan {
  std::vector<Task> tasks;
  size_t groups = 0;
  std::vector<FactorSet> factor_sets;
  // Output layout of every shard that changes (source shard index -> tensors in order);
  // shards not listed are linked unchanged.
  std::map<size_t, std::vector<ShardEntry>> shards;
  nlohmann::ordered_json config;                                 // the output config.json
  std::vector<std::pair<std::string, nlohmann::ordered_json>> side_files; // e.g. hf_quant_config.json
  std::vector<std::pair<std::string, std::string>> fingerprint;  // recipe keys beyond the job's
  CodecParams codec_params;
  nlohmann::ordered_json notes = nlohmann::ordered_json::object(); // plan-time report figures
  std::vector<std::string> warnings; // for the run's log: what looks unintended but is not wrong
};

// A task's figures summed over its chunks in chunk order.
struct TaskTotals {
  ChunkStats stats;
  float reduction = 0.0f; // the group's reduced value (amax, largest exponent), 0 if none
  double compute_seconds = 0;
};

// One audit check: its category (a row of verify's table), whether it passed, what was
// checked and, on failure, what is wrong.
using AuditCheck = std::function<void(const std::string& category, bool ok, const std::string& what,
                                      const std::string& detail)>;

// A recipe's report in its output folder, by the recipe's name (what marks a finished
// output, and which product it is).
inline std::string report_file_of(std::string_view recipe) { return std::string(recipe) + ".json"; }

class Recipe {
 public:
  virtual ~Recipe() = default;
  virtual std::string_view name() const = 0;
  // The job's [quant] keys the product reads (without "quant."). A job that sets another
  // is refused: the key would do nothing, and a user who set it meant something by it.
  virtual std::vector<std::string_view> quant_keys() const = 0;
  // Throws StageError naming the tensor and what was expected when the source (or the
  // reference) does not fit; nothing is done before this passes.
  virtual RecipePlan plan(const RecipeInputs& inputs) const = 0;
  // The recipe's part of the report: per task or tensor kind figures.
  virtual nlohmann::ordered_json report(const RecipePlan& plan, const RecipeParams& params,
                                        std::span<const TaskTotals> totals) const = 0;
  // The product's own audits of a finished output's headers (verify), beyond the engine's.
  virtual void audit(const RecipePlan& plan, const RecipeParams& params, const CheckpointView& source,
                     const CheckpointView& output, const AuditCheck& check) const;
  std::string report_file() const { return report_file_of(name()); }
  // The heap its plan takes at a run's peak per byte of the source index (the index holds
  // every tensor's name, so it scales with them), for the run to populate ahead of the
  // plan; 0 where the plan is small enough to fault in as it grows.
  virtual uint64_t plan_heap_per_index_byte() const { return 0; }
};

// The recipe named by job.recipe; StageError for an unknown name (listing the known ones).
std::unique_ptr<Recipe> make_recipe(std::string_view name);
std::vector<std::string> recipe_names();

} // namespace shardq
