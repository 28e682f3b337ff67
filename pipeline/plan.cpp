#include "pipeline/plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <string_view>

#include "kernels/formats.h"
#include "pipeline/io/config.h"
#include "pipeline/io/index.h"
#include "pipeline/io/shard_readers.h"
#include "pipeline/io/strict_json.h"
#include "pipeline/link.h"
#include "pipeline/parallel.h"
#include "pipeline/work.h"
#include "pipeline/pipeline_error.h"
#include "stages/digest.h"
#include "stages/factors.h"
#include "stages/stage_error.h"

namespace shardq {
namespace {

constexpr const char* kHfQuantConfigFile = "hf_quant_config.json";

// The shards named by the index, in file-name order.
std::vector<std::string> shard_files(const io::ShardIndex& index) {
  std::vector<std::string> files = index.shard_files();
  std::sort(files.begin(), files.end());
  return files;
}

RecipeParams recipe_params(const Job& job) {
  RecipeParams params;
  params.method = job.method;
  params.mse_candidates = int(job.mse_candidates);
  params.mse_alpha_min = job.mse_alpha_min;
  params.gptq_damp = job.gptq_damp;
  params.gptq_block = int(job.gptq_block);
  params.keep_mtp = job.keep_mtp;
  params.input_scales_from = job.input_scales_folder();
  params.engram_min_cosine = job.engram_min_cosine;
  params.ignore = job.ignore;
  params.rows_per_chunk = uint64_t(job.rows_per_chunk);
  return params;
}

// The digest of the source headers for the fingerprint: each shard's name, size, data
// offset and header hash (Reader::header_hash, taken as the header was parsed), as
// "file:size:offset:hash;". Any change to a tensor's name, dtype, shape or place, or to
// the metadata, changes it.
std::string headers_digest(const io::ShardReaders& readers, const std::vector<std::string>& files) {
  std::string text;
  for (const auto& file : files) {
    const io::Reader& reader = readers.opened(file);
    text += file;
    text += ':';
    io::append_decimal(text, reader.file_size());
    text += ':';
    io::append_decimal(text, reader.data_offset());
    text += ':';
    io::append_decimal(text, reader.header_hash());
    text += ';';
  }
  return hex_digest(text);
}

// Bytes of each source shard's data for the fingerprint: kSamplePieces pieces spread evenly
// over its data (all of it when smaller), hashed with the shard's name. The headers alone
// pass a source whose bytes changed under the same names (a revised checkpoint downloaded
// into the same folder, a stale node-local copy on one rank); the pieces catch a shard
// rewritten throughout at a cost of ~0.5 MB read a shard. A change to a few tensors of a
// shard may fall between them: `verify` reads everything.
constexpr uint64_t kSamplePieces = 8;
constexpr uint64_t kSampleBytes = 64 << 10;

std::string source_sample_digest(const io::ShardReaders& readers, const std::vector<std::string>& files) {
  std::vector<std::string> shard_digests(files.size());
  parallel_for(files.size(), [&](size_t s) {
    const io::Reader& reader = readers.opened(files[s]);
    const uint64_t size = reader.file_size() - reader.data_offset();
    std::vector<uint8_t> bytes;
    if (size <= kSamplePieces * kSampleBytes) {
      bytes.resize(size);
      reader.read_bytes(0, bytes);
    } else {
      bytes.resize(kSamplePieces * kSampleBytes);
      const uint64_t stride = (size - kSampleBytes) / (kSamplePieces - 1); // first piece at 0, last at the end
      for (uint64_t k = 0; k < kSamplePieces; ++k) {
        reader.read_bytes(k * stride, std::span<uint8_t>(bytes).subspan(k * kSampleBytes, kSampleBytes));
      }
    }
    shard_digests[s] = files[s] + ':' + hex_digest(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  });
  std::string text;
  for (const auto& digest : shard_digests) text += digest + ';';
  return hex_digest(text);
}

std::vector<std::pair<std::string, std::string>> make_fingerprint(const Plan& plan, std::string headers_digest) {
  std::vector<std::pair<std::string, std::string>> fingerprint = {
      {"tool_version", SHARDQ_VERSION},
      {"job", plan.job.canonical()},
      {"source_headers", std::move(headers_digest)},
      {"source_sample", source_sample_digest(*plan.source_readers, plan.source.shard_files)},
      {"src", std::filesystem::weakly_canonical(std::filesystem::absolute(plan.src)).string()},
      // A checkpoint kept elsewhere (--checkpoint) must not resume into another output.
      {"dst", std::filesystem::weakly_canonical(std::filesystem::absolute(plan.dst)).string()}};
  for (const auto& field : plan.recipe_plan.fingerprint) fingerprint.push_back(field);
  return fingerprint;
}

// Output layout of the changed shards, their writers, and the tasks' shards.
void plan_shards(Plan& plan, int ranks) {
  for (const auto& [shard, entries] : plan.recipe_plan.shards) {
    plan.shards[shard].changed = true;
    plan.shards[shard].entries = entries;
  }
  for (size_t t = 0; t < plan.tasks().size(); ++t) {
    const size_t shard = plan.tasks()[t].shard;
    if (!plan.shards[shard].changed) {
      throw PipelineError(fmt::format("task {}: its shard {} has no planned layout", plan.tasks()[t].name, plan.shards[shard].file));
    }
    plan.shards[shard].tasks.push_back(t);
  }
  int next_owner = 0;
  std::vector<ShardPlan*> changed;
  for (auto& shard : plan.shards) {
    if (!shard.changed) continue;
    shard.owner = next_owner++ % ranks;
    changed.push_back(&shard);
  }
  parallel_for(changed.size(), [&](size_t i) {
    ShardPlan& shard = *changed[i];
    std::vector<io::TensorSpec> specs;
    specs.reserve(shard.entries.size());
    for (size_t e = 0; e < shard.entries.size(); ++e) {
      specs.push_back(shard.entries[e].spec);
      if (shard.entries[e].source == EntrySource::group_scalar) shard.group_scalar_entries.push_back(e);
    }
    shard.layout = io::Writer::plan(std::move(specs), shard.metadata);
  });
}

// Each task input's reader and header entry, found by name once here (no chunk looks it up).
// The view lists each shard's tensors in its reader's order, so the entry is the reader's
// tensor at the same place within the shard. A task reads its own shard only, so an input
// is looked up in that shard's index: small enough to stay in cache while the shard's
// tasks are planned, where the whole view's (100K names) costs a few cache misses a
// lookup. Shard by shard on every core (each task's entry is its own slot).
void plan_task_inputs(Plan& plan) {
  const std::vector<size_t>& shard_first = plan.source.shard_starts(); // the view's first tensor of each shard
  plan.task_sources.assign(plan.tasks().size(), {});
  parallel_for(plan.shards.size(), [&](size_t s) {
    if (plan.shards[s].tasks.empty()) return;
    const io::Reader& reader = plan.source_readers->opened(plan.shards[s].file);
    for (size_t t : plan.shards[s].tasks) {
      const Task& task = plan.tasks()[t];
      auto& sources = plan.task_sources[t];
      sources.reserve(task.inputs.size());
      for (const auto& input : task.inputs) {
        const io::TensorInfo* info = reader.find(input);
        if (!info) {
          throw PipelineError(fmt::format("{}: task {} reads '{}', which is not in the task's shard", reader.path().string(), task.name, input));
        }
        sources.push_back({&reader, info, shard_first[s] + size_t(info - reader.tensors().data()), info->row_bytes()});
      }
    }
  });
}

// Each task output's offset in its shard, once here (no chunk looks it up): the layout's
// tensors are the shard's entries in order, so an output's offset is its entry's (no
// lookup by name). Shard by shard on every core; an output that no entry of its task's
// shard plans, or that two entries do, is refused.
void plan_task_outputs(Plan& plan) {
  constexpr uint64_t kUnplanned = UINT64_MAX;
  plan.task_output_offsets.assign(plan.tasks().size(), {});
  parallel_for(plan.shards.size(), [&](size_t s) {
    const ShardPlan& shard = plan.shards[s];
    for (size_t t : shard.tasks) plan.task_output_offsets[t].assign(plan.tasks()[t].outputs.size(), kUnplanned);
    for (size_t e = 0; e < shard.entries.size(); ++e) {
      const ShardEntry& entry = shard.entries[e];
      if (entry.source != EntrySource::task_output) continue;
      if (entry.task >= plan.tasks().size()) {
        throw PipelineError(fmt::format("{}: entry '{}' names task {}, beyond the plan's {}", shard.file, entry.spec.name,
                                        entry.task, plan.tasks().size()));
      }
      const Task& task = plan.tasks()[entry.task];
      if (task.shard != s || entry.output >= task.outputs.size() || task.outputs[entry.output].name != entry.spec.name) {
        throw PipelineError(fmt::format("{}: entry '{}' is not an output of task {} in this shard", shard.file, entry.spec.name, task.name));
      }
      uint64_t& offset = plan.task_output_offsets[entry.task][entry.output];
      if (offset != kUnplanned) throw PipelineError(fmt::format("{}: task {} writes '{}' twice", shard.file, task.name, entry.spec.name));
      offset = shard.layout.tensors[e].begin;
    }
    for (size_t t : shard.tasks) {
      const auto& offsets = plan.task_output_offsets[t];
      const auto missing = std::find(offsets.begin(), offsets.end(), kUnplanned);
      if (missing != offsets.end()) {
        throw PipelineError(fmt::format("{}: task {} writes '{}', which the shard does not plan", shard.file,
                                        plan.tasks()[t].name, plan.tasks()[t].outputs[size_t(missing - offsets.begin())].name));
      }
    }
  });
}

// A .safetensors file of the source that its index does not name would be linked into the
// output as an "other file" and sit there un-quantized beside the product's shards, read by
// any loader that globs the folder: refused, as leaving it out would drop it unsaid.
void refuse_unindexed_shards(const Plan& plan) {
  const auto unindexed = io::shard_files_outside(plan.src, plan.source.shard_files);
  if (unindexed.empty()) return;
  throw PipelineError(fmt::format("{}: .safetensors files that {} does not name: {}; shardq reads only the shards the "
                                  "index names and would not carry these into the output: move them out of the source folder",
                                  plan.src.string(), io::kIndexFileName, fmt::join(unindexed, ", ")));
}

// Every other file of the source, at its path below the folder: the tokenizer and license,
// and the folders beside the weights (a model's inference/ and encoding/ code) whole.
// Hidden folders (.git, .cache, a .shardq checkpoint) are not the model's.
std::vector<std::string> unlisted_files(const Plan& plan) {
  std::vector<std::string> files;
  const auto options = std::filesystem::directory_options::follow_directory_symlink;
  for (auto it = std::filesystem::recursive_directory_iterator(plan.src, options); it != decltype(it)(); ++it) {
    const std::string name = it->path().filename().string();
    if (it->is_symlink() && !std::filesystem::exists(it->path())) {
      throw PipelineError(fmt::format("{}: a link to nothing ({}): the source is incomplete", it->path().string(),
                                      std::filesystem::read_symlink(it->path()).string()));
    }
    if (it->is_directory()) {
      if (name.starts_with('.')) it.disable_recursion_pending();
      continue;
    }
    const std::string path = it->path().lexically_relative(plan.src).string();
    const bool top = it.depth() == 0;
    const bool shard = top && std::find(plan.source.shard_files.begin(), plan.source.shard_files.end(), name) !=
                                  plan.source.shard_files.end();
    const bool rewritten = top && (name == io::kIndexFileName || name == kConfigFile ||
                                   std::any_of(plan.recipe_plan.side_files.begin(), plan.recipe_plan.side_files.end(),
                                               [&](const auto& side) { return side.first == name; }));
    if (it->is_regular_file() && !shard && !rewritten) files.push_back(path);
  }
  std::sort(files.begin(), files.end());
  return files;
}

// The reference's small tensors, read whole (input scales): one per routed expert
// projection, so they come from the shards `readers` opened for the reference's view.
ReadTensorBytes reference_reader(const CheckpointView& reference, io::ShardReaders& readers) {
  return [&reference, &readers](const std::string& name) {
    const SourceTensor& tensor = reference.at(name);
    const io::Reader& reader = readers.get(reference.shard_files[tensor.shard]);
    const io::TensorInfo& info = reader.tensor(name);
    std::vector<uint8_t> bytes(info.end - info.begin);
    reader.read_bytes(info.begin, bytes);
    return bytes;
  };
}

} // namespace

std::vector<std::string> files_of_finished_step(std::string_view step, std::span<const std::string> config_side_files) {
  constexpr std::string_view kShardStep = "shard:";
  if (step.starts_with(kShardStep)) return {std::string(step.substr(kShardStep.size()))};
  if (step == "index") return {std::string(io::kIndexFileName)};
  if (step != "config") return {};
  std::vector<std::string> files = {kConfigFile};
  files.insert(files.end(), config_side_files.begin(), config_side_files.end());
  return files;
}

std::vector<std::string> side_file_names(const Plan& plan) {
  std::vector<std::string> names;
  for (const auto& side : plan.recipe_plan.side_files) names.push_back(side.first);
  return names;
}

uint64_t Plan::total_rows() const {
  uint64_t rows = 0;
  for (const auto& task : tasks()) rows += task.tensor_rows(task.rows);
  return rows;
}

CheckpointView read_checkpoint_view(const std::filesystem::path& dir, io::ShardIndex* index_out) {
  io::ShardReaders readers(dir);
  return read_checkpoint_view(readers, index_out);
}

namespace {

// The index must name every tensor the shards hold, each in the shard that holds it: the
// plan reads the shards, the output index is made from this one, and a tensor the index
// names elsewhere, or a name no shard holds (a download of mixed revisions), would
// otherwise reach the output index as it is. Names are unique across the shards
// (view.index()), so equal counts and every entry found in its shard cover both ways.
void check_index_matches_shards(const io::ShardIndex& index, const CheckpointView& view,
                                const std::filesystem::path& index_path) {
  // In blocks on every core (100K lookups); the first entry that does not match is named.
  constexpr size_t kBlock = 8192;
  const size_t blocks = (index.size() + kBlock - 1) / kBlock;
  std::vector<size_t> first_wrong(blocks, index.size());
  parallel_for(blocks, [&](size_t b) {
    for (size_t e = b * kBlock; e < std::min(index.size(), (b + 1) * kBlock); ++e) {
      const SourceTensor* held = view.find(index.tensor(e));
      if (held && view.shard_files[held->shard] == index.shard(e)) continue;
      first_wrong[b] = e;
      return;
    }
  });
  for (const size_t e : first_wrong) {
    if (e == index.size()) continue;
    const std::string_view tensor = index.tensor(e);
    const std::string& shard = index.shard(e);
    const SourceTensor* held = view.find(tensor);
    throw PipelineError(fmt::format("{}: names '{}' in {}, {}", index_path.string(), tensor, shard,
                                    held ? "but " + view.shard_files[held->shard] + " holds it" : "but no shard holds it"));
  }
  if (index.size() == view.tensors.size()) return;
  for (const SourceTensor& t : view.tensors) {
    if (index.shard_of(t.spec.name)) continue;
    throw PipelineError(fmt::format("{}: holds '{}', which the index {} does not name", (view.dir / view.shard_files[t.shard]).string(),
                                    t.spec.name, index_path.string()));
  }
}

} // namespace

CheckpointView read_checkpoint_view(io::ShardReaders& readers, io::ShardIndex* index_out) {
  const std::filesystem::path& dir = readers.folder();
  if (!std::filesystem::is_directory(dir)) {
    throw PipelineError(fmt::format("{}: {} (a model folder holding {} was expected)", dir.string(),
                                    std::filesystem::exists(dir) ? "not a folder" : "no such folder", io::kIndexFileName));
  }
  const auto index_path = dir / io::kIndexFileName;
  CheckpointView view;
  view.dir = dir;
  // The shards the index names are nearly always the folder's *.safetensors files: their
  // headers are parsed while the index is (~0.02 s for 100K names, before which no shard
  // would otherwise be opened).
  readers.start_opening_folder();
  io::ShardIndex index = io::read_index(index_path);
  view.config = io::read_config(dir / kConfigFile);
  if (std::filesystem::exists(dir / kHfQuantConfigFile)) view.hf_quant_config = io::read_json_object(dir / kHfQuantConfigFile);
  view.shard_files = shard_files(index);
  for (const auto& file : view.shard_files) {
    if (!std::filesystem::exists(dir / file)) {
      throw PipelineError(fmt::format("{}: shard '{}' named by the index is missing", index_path.string(), file));
    }
  }
  readers.open_all(view.shard_files);
  // Each shard's tensors in its slots of the view, shard by shard on every core.
  std::vector<size_t> first(view.shard_files.size() + 1, 0);
  for (size_t s = 0; s < view.shard_files.size(); ++s) first[s + 1] = first[s] + readers.opened(view.shard_files[s]).tensors().size();
  view.tensors.resize(first.back());
  parallel_for(view.shard_files.size(), [&](size_t s) {
    SourceTensor* slot = view.tensors.data() + first[s];
    for (const auto& t : readers.opened(view.shard_files[s]).tensors()) *slot++ = {{t.name, t.dtype, t.shape}, s};
  });
  view.index();
  check_index_matches_shards(index, view, index_path);
  if (index_out) *index_out = std::move(index);
  return view;
}

std::string fingerprint_value(const Plan& plan, std::string_view field) {
  for (const auto& [name, value] : plan.fingerprint) {
    if (name == field) return value;
  }
  return "";
}

Plan make_plan(const Job& job, int ranks) {
  Plan plan;
  plan.job = job;
  plan.params = recipe_params(job);
  plan.src = job.src;
  plan.dst = job.dst;
  plan.source_readers = std::make_shared<io::ShardReaders>(plan.src); // each source header parsed once
  io::ShardReaders& source_readers = *plan.source_readers;
  try {
    plan.recipe = make_recipe(job.recipe);
    plan.source = read_checkpoint_view(source_readers, &plan.source_index);
    io::ShardReaders reference_readers(job.input_scales_from);
    std::optional<CheckpointView> reference;
    if (!job.input_scales_from.empty()) reference = read_checkpoint_view(reference_readers);
    RecipeInputs inputs{plan.params, plan.source, reference ? &*reference : nullptr,
                        reference ? reference_reader(*reference, reference_readers) : ReadTensorBytes{}, parallel_for};
    plan.recipe_plan = plan.recipe->plan(inputs);
  } catch (const StageError& e) {
    throw PipelineError(e.what());
  }
  for (size_t s = 0; s < plan.source.shard_files.size(); ++s) {
    ShardPlan shard;
    shard.file = plan.source.shard_files[s];
    shard.metadata = source_readers.opened(shard.file).metadata();
    plan.shards.push_back(std::move(shard));
  }
  plan_shards(plan, ranks);
  plan_task_inputs(plan);
  plan_task_outputs(plan);
  refuse_chunk_messages_past(plan.tasks(), ranks, plan.job.write_mode == "owner", kMaxMessageBytes);
  plan.group_tasks.resize(plan.recipe_plan.groups);
  for (size_t t = 0; t < plan.tasks().size(); ++t) plan.group_tasks.at(plan.tasks()[t].group).push_back(t);
  refuse_unindexed_shards(plan);
  plan.other_files = unlisted_files(plan);
  plan.fingerprint = make_fingerprint(plan, headers_digest(source_readers, plan.source.shard_files));
  return plan;
}

namespace {

struct Fp8Linear {
  std::vector<uint8_t> codes, scales;
  uint64_t out_rows = 0, in_cols = 0;
};

const io::TensorInfo& expect_fp8(const io::Reader& reader, const std::string& name, io::Dtype dtype,
                                 const std::vector<uint64_t>& shape) {
  const io::TensorInfo& info = reader.tensor(name);
  if (info.dtype != dtype || info.shape != shape) {
    throw PipelineError(fmt::format("{}: tensor '{}' is {} {} but {} {} was expected", reader.path().string(), name,
                                    io::dtype_name(info.dtype), shape_text(info.shape), io::dtype_name(dtype),
                                    shape_text(shape)));
  }
  return info;
}

Fp8Linear read_fp8_linear(const Plan& plan, const FactorSet& set) {
  const SourceTensor* weight_tensor = plan.source.find(set.weight);
  const SourceTensor* scale_tensor = plan.source.find(set.scale);
  if (!weight_tensor || !scale_tensor) {
    throw PipelineError(fmt::format("{}: no tensor '{}' in any shard (needed for the GPTQ factors)", plan.src.string(),
                                    weight_tensor ? set.scale : set.weight));
  }
  const io::Reader weights(plan.src / plan.shards[weight_tensor->shard].file);
  const io::Reader scales(plan.src / plan.shards[scale_tensor->shard].file);
  const uint64_t in_cols = uint64_t(set.items) * uint64_t(set.dim);
  const io::TensorInfo& weight = weights.tensor(set.weight);
  if (weight.shape.size() != 2 || weight.shape[1] != in_cols) {
    throw PipelineError(fmt::format("{}: tensor '{}' must be F8_E4M3 [*, {}] ({} hash columns x {})",
                                    weights.path().string(), set.weight, in_cols, set.items, set.dim));
  }
  Fp8Linear linear;
  linear.in_cols = in_cols;
  linear.out_rows = weight.shape[0];
  expect_fp8(weights, set.weight, io::Dtype::F8_E4M3, {linear.out_rows, in_cols});
  const io::TensorInfo& scale =
      expect_fp8(scales, set.scale, io::Dtype::F8_E8M0, {(linear.out_rows + 31) / 32, (in_cols + 31) / 32});
  linear.codes.resize(weight.end - weight.begin);
  linear.scales.resize(scale.end - scale.begin);
  weights.read_bytes(weight.begin, linear.codes);
  scales.read_bytes(scale.begin, linear.scales);
  for (size_t i = 0; i < linear.codes.size(); ++i) {
    if (E4M3::is_nan(linear.codes[i])) {
      throw PipelineError(fmt::format("{}: tensor '{}' row {} column {}: E4M3 code 0x{:02X} is NaN",
                                      weights.path().string(), set.weight, i / in_cols, i % in_cols, linear.codes[i]));
    }
  }
  for (size_t i = 0; i < linear.scales.size(); ++i) {
    if (linear.scales[i] == E8M0::nan_code) {
      throw PipelineError(fmt::format("{}: tensor '{}' block {}: E8M0 scale is NaN (0xFF)", scales.path().string(),
                                      set.scale, i));
    }
  }
  return linear;
}

} // namespace

std::vector<float> read_factor_source(const Plan& plan, const FactorSet& set) {
  const Fp8Linear linear = read_fp8_linear(plan, set);
  return dequantize_wkv_fp8(linear.codes.data(), linear.scales.data(), int(linear.out_rows), int(linear.in_cols));
}

void check_factor_source(const Plan& plan, const FactorSet& set) { read_fp8_linear(plan, set); }

OutputSlot task_output_slot(const Plan& plan, size_t task, size_t output) {
  const Task& spec = plan.tasks()[task];
  return {plan.task_output_offsets[task][output], tensor_row_bytes(spec.outputs[output]), spec.rows};
}

std::string output_index_text(const Plan& plan) {
  return io::index_text(plan.dst / io::kIndexFileName, output_index(plan));
}

io::ShardIndex output_index(const Plan& plan) {
  io::ShardIndex index;
  index.extra_metadata = plan.source_index.extra_metadata;
  // Source order of the index, each tensor of a changed shard replaced by what the plan
  // puts in its place: a copy stands where its source stood, output i of a task where the
  // task's input i stood, scalars and constants after the entry before them. Names are
  // views into the plan, which outlives this function. A name is looked up in the shard
  // it is said to be in first (that shard's table stays in cache while its names go by,
  // where the whole view's costs a few cache misses a lookup), then in the whole view.
  const size_t sources = plan.source.tensors.size();
  const std::vector<size_t>& starts = plan.source.shard_starts();
  constexpr size_t kUnset = SIZE_MAX, kMissing = SIZE_MAX - 1; // no entry before; a name no source tensor has
  const auto position_of = [&](std::string_view name, size_t shard) { // shard: where to look first, if known
    if (shard < plan.shards.size()) {
      const io::Reader& reader = plan.source_readers->opened(plan.shards[shard].file);
      if (const io::TensorInfo* info = reader.find(name)) return starts[shard] + size_t(info - reader.tensors().data());
    }
    const SourceTensor* tensor = plan.source.find(name);
    return tensor ? size_t(tensor - plan.source.tensors.data()) : kMissing;
  };
  std::vector<std::pair<size_t, std::string_view>> placed; // (source tensor, output name), shard order
  std::vector<size_t> entry_from;                          // each changed shard's entries in turn
  for (size_t s = 0; s < plan.shards.size(); ++s) {
    const ShardPlan& shard = plan.shards[s];
    if (!shard.changed) continue;
    for (const auto& info : shard.layout.tensors) index.total_size += info.end - info.begin;
    size_t last_source = kUnset;
    for (const auto& entry : shard.entries) {
      size_t from = last_source;
      if (entry.source == EntrySource::copy) from = position_of(entry.from, s);
      if (entry.source == EntrySource::task_output) {
        const auto& inputs = plan.task_sources[entry.task]; // resolved at plan time: no lookup by name
        from = inputs[std::min(entry.output, inputs.size() - 1)].position;
      }
      if (from == kUnset) from = position_of(entry.spec.name, s);
      if (from != kMissing) placed.emplace_back(from, entry.spec.name);
      entry_from.push_back(from);
      last_source = from;
    }
  }
  // placed grouped by source tensor, in shard order within each (a counting sort).
  std::vector<size_t> first(sources + 1, 0);
  for (const auto& [source, name] : placed) ++first[source + 1];
  for (size_t i = 0; i < sources; ++i) first[i + 1] += first[i];
  std::vector<std::string_view> by_source(placed.size());
  std::vector<size_t> next(first.begin(), first.end() - 1);
  for (const auto& [source, name] : placed) by_source[next[source]++] = name;

  // Every name in the order it is first met: the index's, then a changed shard's entries
  // not met through it (those placed at a source tensor the index named are).
  std::vector<size_t> plan_shard_of_file(plan.source_index.shard_files().size(), plan.shards.size());
  for (size_t f = 0; f < plan_shard_of_file.size(); ++f) {
    const std::string& file = plan.source_index.shard_files()[f];
    for (size_t s = 0; s < plan.shards.size(); ++s) {
      if (plan.shards[s].file == file) plan_shard_of_file[f] = s;
    }
  }
  std::vector<uint8_t> met(sources, 0);
  std::vector<std::pair<std::string_view, std::string_view>> map; // (tensor, shard), views into the plan
  map.reserve(plan.source_index.size() + placed.size());
  for (size_t i = 0; i < plan.source_index.size(); ++i) {
    const auto [name, file] = plan.source_index[i];
    const size_t source = position_of(name, plan_shard_of_file[plan.source_index.shard_number(i)]);
    if (source != kMissing && plan.shards[plan.source.tensors[source].shard].changed) {
      met[source] = 1;
      for (size_t j = first[source]; j < first[source + 1]; ++j) map.emplace_back(by_source[j], file);
    } else {
      map.emplace_back(name, file);
    }
  }
  size_t entry = 0;
  for (const auto& shard : plan.shards) {
    if (!shard.changed) {
      for (const auto& info : plan.source_readers->opened(shard.file).tensors()) index.total_size += info.end - info.begin;
      continue;
    }
    for (const auto& planned : shard.entries) {
      const size_t from = entry_from[entry++];
      if (from == kMissing || !met[from]) map.emplace_back(planned.spec.name, shard.file);
    }
  }
  NameIndex first_met;
  const auto repeated = first_met.build(map.size(), [&](size_t i) { return map[i].first; });
  std::vector<uint8_t> drop(map.size(), 0);
  for (size_t i : repeated) drop[i] = 1;
  size_t name_bytes = 0;
  for (const auto& [name, file] : map) name_bytes += name.size();
  index.reserve(map.size() - repeated.size(), name_bytes);
  for (size_t i = 0; i < map.size(); ++i) {
    if (!drop[i]) index.add(map[i].first, map[i].second);
  }
  return index;
}

} // namespace shardq
