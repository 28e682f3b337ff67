#include "stages/recipes/nvfp4_1017.h"

#include <fmt/format.h>
#define XXH_INLINE_ALL
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <regex>

#include "kernels/formats.h"
#include "kernels/mxfp4.h"
#include "stages/digest.h"
#include "stages/recipes/engram_tables.h"
#include "stages/recipes/input_scales.h"
#include "stages/stage_error.h"

namespace shardq {
namespace {

using Json = nlohmann::ordered_json;

// A routed expert projection of the source: MXFP4 codes I8 [out, in/2], E8M0 [out, in/32].
struct SourceExpert {
  ExpertProjection projection;
  bool mtp = false;
  const SourceTensor* weight = nullptr;
  const SourceTensor* scale = nullptr;
};

std::optional<SourceExpert> parse_expert(const CheckpointView& source, const SourceTensor& tensor) {
  static const std::regex pattern(R"(^(layers|mtp)\.(\d+)\.ffn\.experts\.(\d+)\.w([123])\.weight$)");
  std::smatch match;
  if (!std::regex_match(tensor.spec.name, match, pattern)) return std::nullopt;
  SourceExpert expert;
  expert.mtp = match[1] == "mtp";
  const std::string prefix = tensor.spec.name.substr(0, tensor.spec.name.size() - std::string(".weight").size());
  expert.projection = {prefix, std::stoi(match[2]), std::stoi(match[3]), std::stoi(match[4])};
  expert.weight = &tensor;
  const std::string file = (source.dir / source.shard_files[tensor.shard]).string();
  expert.scale = source.find_near(prefix + ".scale", tensor);
  if (!expert.scale || expert.scale->shard != tensor.shard) {
    throw StageError(fmt::format("{}: expert '{}' has no '{}.scale' in the same shard", file, tensor.spec.name, prefix));
  }
  const auto& shape = tensor.spec.shape;
  if (tensor.spec.dtype != Dtype::I8 || shape.size() != 2 || shape[1] * 2 % Mxfp4::block != 0) {
    throw StageError(fmt::format("{}: expert '{}' is {} {}; I8 [out, in/2] with in a multiple of 32 was expected", file,
                                 tensor.spec.name, dtype_name(tensor.spec.dtype), shape_text(shape)));
  }
  expect_tensor(source, *expert.scale, Dtype::F8_E8M0, {shape[0], shape[1] * 2 / Mxfp4::block});
  return expert;
}

Task expert_task(const SourceExpert& expert, const RecipeParams& params, size_t group) {
  const auto& shape = expert.weight->spec.shape;
  const std::string& prefix = expert.projection.prefix;
  Task task;
  task.name = prefix;
  task.codec = CodecKind::transcode_mxfp4_nvfp4;
  task.inputs = {expert.weight->spec.name, expert.scale->spec.name};
  task.outputs = {{prefix + ".weight", Dtype::U8, shape},
                  {prefix + ".weight_scale", Dtype::F8_E4M3, {shape[0], shape[1] * 2 / Nvfp4::block}}};
  task.rows = shape[0];
  task.cols = int(shape[1] * 2);
  task.rows_per_chunk = params.rows_per_chunk;
  task.shard = expert.weight->shard;
  task.group = group;
  task.layer = expert.projection.layer;
  return task;
}

Task table_task(const EngramTable& table, const RecipeParams& params, size_t group) {
  Task task;
  task.name = engram_prefix(table.layer);
  task.codec = CodecKind::engram_mxfp4;
  task.inputs = {table.weight, table.scale};
  task.outputs = {{table.weight, Dtype::U8, {table.rows, uint64_t(table.cols / 2)}},
                  {table.scale, Dtype::F8_E8M0, {table.rows, uint64_t(table.cols / Mxfp4::block)}}};
  task.rows = table.rows;
  task.cols = table.cols;
  task.rows_per_chunk = params.rows_per_chunk;
  task.shard = table.shard;
  task.group = group;
  task.layer = table.layer;
  return task;
}

std::vector<uint8_t> f32_bytes(float value) {
  std::vector<uint8_t> bytes(4);
  std::memcpy(bytes.data(), &value, 4); // little-endian, the only byte order we build for
  return bytes;
}

// The reference's F32 scalar `name`, refused naming the reference when missing or malformed.
float reference_scalar(const RecipeInputs& inputs, const std::string& name) {
  const CheckpointView& reference = *inputs.reference;
  const SourceTensor* tensor = reference.find(name);
  if (!tensor) throw StageError(fmt::format("{}: the reference has no '{}'", reference.dir.string(), name));
  if (tensor->spec.dtype != Dtype::F32 || !tensor->spec.shape.empty()) {
    throw StageError(fmt::format("{}: reference tensor '{}' is {} {}; F32 [] was expected", reference.dir.string(), name,
                                 dtype_name(tensor->spec.dtype), shape_text(tensor->spec.shape)));
  }
  const std::vector<uint8_t> bytes = inputs.read_reference(name);
  float value = 0;
  std::memcpy(&value, bytes.data(), 4);
  if (!std::isfinite(value) || value <= 0) {
    throw StageError(fmt::format("{}: reference tensor '{}' is {}; a positive scale was expected", reference.dir.string(), name, value));
  }
  return value;
}

// Keys of config.json that the product may find different in the reference: its format
// (quantization_config, the Engram table keys this recipe sets anyway) and who wrote it.
bool format_or_provenance_key(std::string_view key) {
  return key == "quantization_config" || key.starts_with("engram_embed_") || key == "transformers_version" ||
         key == "_name_or_path";
}

// The output's config.json is the reference's (the card: "taken verbatim"), which is right
// only where the source has the same architecture: every other key at every depth equal.
void check_same_architecture(const nlohmann::ordered_json& source, const nlohmann::ordered_json& reference,
                             const CheckpointView& source_view, const CheckpointView& reference_view,
                             const std::string& path = "") {
  std::set<std::string> keys;
  for (const auto& [key, value] : source.items()) keys.insert(key);
  for (const auto& [key, value] : reference.items()) keys.insert(key);
  for (const std::string& key : keys) {
    if (format_or_provenance_key(key)) continue;
    const std::string at = path.empty() ? key : path + "." + key;
    const bool in_source = source.contains(key), in_reference = reference.contains(key);
    if (in_source && in_reference && source[key].is_object() && reference[key].is_object()) {
      check_same_architecture(source[key], reference[key], source_view, reference_view, at);
      continue;
    }
    if (in_source && in_reference && source[key] == reference[key]) continue;
    throw StageError(fmt::format("{}/config.json: '{}' is {} where the reference's ({}/config.json) is {}: the output "
                                 "takes the reference's config.json, which holds only for the same architecture",
                                 source_view.dir.string(), at, in_source ? source[key].dump() : "absent",
                                 reference_view.dir.string(), in_reference ? reference[key].dump() : "absent"));
  }
}

// Every output tensor (changed shards as planned, others as they are) against the
// reference: the same names, dtypes and shapes.
void check_reference_layout(const RecipePlan& plan, const CheckpointView& source, const CheckpointView& reference) {
  std::map<std::string, TensorSpec> planned;
  for (const auto& tensor : source.tensors) {
    if (!plan.shards.count(tensor.shard)) planned[tensor.spec.name] = tensor.spec;
  }
  for (const auto& [shard, entries] : plan.shards) {
    for (const auto& entry : entries) planned[entry.spec.name] = entry.spec;
  }
  const std::string where = reference.dir.string();
  for (const auto& [name, spec] : planned) {
    const SourceTensor* ref = reference.find(name);
    if (!ref) throw StageError(fmt::format("{}: the reference has no '{}', which the output has (another layout?)", where, name));
    if (ref->spec.dtype != spec.dtype || ref->spec.shape != spec.shape) {
      throw StageError(fmt::format("{}: reference tensor '{}' is {} {}, the output's {} {}", where, name,
                                   dtype_name(ref->spec.dtype), shape_text(ref->spec.shape), dtype_name(spec.dtype),
                                   shape_text(spec.shape)));
    }
  }
  for (const auto& tensor : reference.tensors) {
    if (!planned.count(tensor.spec.name)) {
      throw StageError(fmt::format("{}: the reference has '{}', which the output would not (another layout?)", where,
                                   tensor.spec.name));
    }
  }
}

std::vector<std::pair<std::string, std::string>> reference_fingerprint(const CheckpointView& reference,
                                                                       const InputScales& scales) {
  std::string headers = reference.config.dump() + reference.hf_quant_config.dump();
  for (const auto& t : reference.tensors) {
    headers += fmt::format("{}:{}:{}:{};", reference.shard_files[t.shard], t.spec.name, dtype_name(t.spec.dtype),
                           shape_text(t.spec.shape));
  }
  std::string values;
  for (const auto& [name, value] : scales.values) values += fmt::format("{}={:a};", name, value);
  return {{"reference_headers", hex_digest(headers)}, {"input_scales", hex_digest(values)}};
}

Json lifted_report(const InputScales& scales) {
  Json lifted = Json::array();
  for (const auto& l : scales.lifted) {
    lifted.push_back({{"layer", l.layer}, {"expert", l.expert}, {"projection", fmt::format("w{}", l.projection)},
                      {"old", l.reference}, {"new", l.lifted}});
  }
  return {{"copied_unchanged", scales.copied}, {"lifted", lifted}, {"model_max", scales.model_max}};
}

// keep_mtp = false would transcode the MTP layers' experts too, into an output that does not
// load: the reference has no input scales for them (they were never calibrated) and its
// quantization config excludes mtp*. The product keeps them as they are.
void refuse_transcoded_mtp(const RecipeInputs& inputs) {
  if (inputs.params.keep_mtp) return;
  throw StageError(fmt::format("quant.keep_mtp = false: the reference {} has no input scales for the MTP layers' "
                               "experts and its quantization config excludes mtp*, so transcoded MTP experts would "
                               "not load; nvfp4-1017 keeps them as they are (keep_mtp = true)",
                               inputs.params.input_scales_from));
}

struct Planner {
  const RecipeInputs& inputs;
  RecipePlan plan;
  std::map<std::string, size_t> task_of_input; // source tensor -> task
  std::map<std::string, float> input_scales;
  std::map<std::string, size_t> group_of;      // expert + (w1w3 | w2) -> group

  size_t group(const SourceExpert& expert) {
    const std::string prefix = expert.projection.prefix.substr(0, expert.projection.prefix.rfind('.'));
    const std::string key = prefix + (expert.projection.projection == 2 ? ":w2" : ":w1w3");
    const auto [it, added] = group_of.emplace(key, plan.groups);
    if (added) ++plan.groups;
    return it->second;
  }

  void add_task(Task task) {
    for (const auto& input : task.inputs) task_of_input[input] = plan.tasks.size();
    plan.tasks.push_back(std::move(task));
  }

  // An expert's two tensors become weight / weight_scale, then weight_scale_2 and (main
  // layers) input_scale; a table's keep their names in MXFP4.
  bool replace(const SourceTensor& tensor, std::vector<ShardEntry>& entries) const {
    const auto it = task_of_input.find(tensor.spec.name);
    if (it == task_of_input.end()) return false;
    const size_t t = it->second;
    const Task& task = plan.tasks[t];
    if (tensor.spec.name == task.inputs[0]) {
      entries.push_back(task_output_entry(task, t, 0));
      return true;
    }
    entries.push_back(task_output_entry(task, t, 1));
    if (task.codec == CodecKind::transcode_mxfp4_nvfp4) {
      entries.push_back(group_scalar_entry(task.name + ".weight_scale_2", t));
      const auto scale = input_scales.find(task.name + ".input_scale");
      if (scale != input_scales.end()) entries.push_back(constant_entry({scale->first, Dtype::F32, {}}, f32_bytes(scale->second)));
    }
    return true;
  }
};

} // namespace

RecipePlan Nvfp4_1017Recipe::plan(const RecipeInputs& inputs) const {
  const CheckpointView& source = inputs.source;
  if (!inputs.reference) {
    throw StageError("recipe nvfp4-1017 needs quant.input_scales_from = the reference NVFP4 checkpoint (its input "
                     "scales, config.json and hf_quant_config.json)");
  }
  const CheckpointView& reference = *inputs.reference;
  refuse_transcoded_mtp(inputs);
  if (reference.hf_quant_config.is_null()) {
    throw StageError(fmt::format("{}: the reference has no hf_quant_config.json", reference.dir.string()));
  }
  Planner planner{inputs, {}, {}, {}, {}};
  RecipePlan& plan = planner.plan;
  plan.codec_params.engram_layout = engram_layout_of(source);
  std::vector<SourceExpert> experts;
  for (const auto& tensor : source.tensors) {
    if (auto expert = parse_expert(source, tensor)) experts.push_back(*expert);
  }
  std::vector<ExpertProjection> calibrated;
  for (const auto& expert : experts) {
    if (!expert.mtp) calibrated.push_back(expert.projection);
  }
  const InputScales scales = plan_input_scales(calibrated, [&](const std::string& name) { return reference_scalar(inputs, name); });
  planner.input_scales = scales.values;
  std::set<size_t> shards;
  for (const auto& expert : experts) {
    if (expert.mtp) continue; // kept as they are (refuse_transcoded_mtp)
    planner.add_task(expert_task(expert, inputs.params, planner.group(expert)));
    shards.insert(expert.weight->shard);
  }
  for (const EngramTable& table : engram_tables(source, *plan.codec_params.engram_layout)) {
    planner.add_task(table_task(table, inputs.params, plan.groups++));
    shards.insert(table.shard);
  }
  plan_changed_shards(
      source, shards, [&](const SourceTensor& t, std::vector<ShardEntry>& entries) { return planner.replace(t, entries); }, plan);
  check_reference_layout(plan, source, reference);
  check_same_architecture(source.config, reference.config, source, reference);
  plan.config = reference.config;
  auto& text_config = plan.config.contains("text_config") ? plan.config["text_config"] : plan.config;
  text_config["engram_embed_quant"] = "mxfp4";
  text_config["engram_embed_block_size"] = Mxfp4::block;
  text_config["engram_embed_scale_dtype"] = "ue8m0";
  text_config["engram_embed_layers"] = plan.codec_params.engram_layout->config().layer_ids;
  plan.side_files.push_back({"hf_quant_config.json", reference.hf_quant_config});
  plan.fingerprint = reference_fingerprint(reference, scales);
  plan.notes["input_scales"] = lifted_report(scales);
  return plan;
}

namespace {

double cosine(const ChunkStats& s) {
  const double x = s.reference_sq.to_double(), y = s.output_sq.to_double(), e = s.error_sq.to_double();
  if (x == 0 || y == 0) return x == y ? 1.0 : 0.0;
  return (x + y - e) / 2.0 / std::sqrt(x * y); // x.y = (|x|^2 + |y|^2 - |x - y|^2) / 2
}

Json experts_report(const RecipePlan& plan, std::span<const TaskTotals> totals) {
  uint64_t tensors = 0, blocks = 0, inexact = 0;
  Json inexact_tensors = Json::array();
  for (size_t t = 0; t < plan.tasks.size(); ++t) {
    if (plan.tasks[t].codec != CodecKind::transcode_mxfp4_nvfp4) continue;
    const ChunkStats& stats = totals[t].stats;
    ++tensors;
    blocks += stats.blocks;
    inexact += stats.inexact_blocks;
    if (stats.inexact_blocks) inexact_tensors.push_back({{"tensor", plan.tasks[t].outputs[0].name}, {"inexact_blocks", stats.inexact_blocks}});
  }
  return {{"transcoded_tensors", tensors}, {"blocks", blocks}, {"inexact_blocks", inexact},
          {"inexact_tensors", inexact_tensors}, {"lossless", inexact == 0}};
}

Json tables_report(const RecipePlan& plan, std::span<const TaskTotals> totals) {
  Json tables = Json::array();
  for (size_t t = 0; t < plan.tasks.size(); ++t) {
    const Task& task = plan.tasks[t];
    if (task.codec != CodecKind::engram_mxfp4) continue;
    const ChunkStats& stats = totals[t].stats;
    const double reference = stats.reference_sq.to_double();
    tables.push_back({{"tensor", task.outputs[0].name}, {"layer", task.layer}, {"rows", task.rows}, {"cols", task.cols},
                      {"cosine", cosine(stats)},
                      {"rel_rms_error", reference > 0 ? std::sqrt(stats.error_sq.to_double() / reference) : 0.0},
                      {"blocks", stats.blocks}, {"zero_blocks", stats.zero_blocks}, {"chunks", task.chunks()},
                      {"compute_seconds", totals[t].compute_seconds}});
  }
  return tables;
}

} // namespace

Json Nvfp4_1017Recipe::report(const RecipePlan& plan, const RecipeParams& params, std::span<const TaskTotals> totals) const {
  Json report;
  report["method"] = "transcode";
  report["parameters"] = {{"experts", "mxfp4 -> nvfp4, codes untouched, weight_scale_2 = 2^(emax - 135), emax over w1+w3"},
                          {"engram", "mxfp4, scale = smallest power of two >= amax / 6, ties toward zero"},
                          {"keep_mtp", params.keep_mtp},
                          {"input_scales_from", params.input_scales_from},
                          {"engram_min_cosine", params.engram_min_cosine}};
  report["experts"] = experts_report(plan, totals);
  report["tables"] = tables_report(plan, totals);
  report["input_scales"] = plan.notes.at("input_scales");
  return report;
}

} // namespace shardq
