#include "stages/recipes/engram_nvfp4.h"

#include <fmt/format.h>

#include <cmath>

#include "kernels/formats.h"
#include "stages/factors.h"
#include "stages/recipes/engram_tables.h"

namespace shardq {
namespace {

using Json = nlohmann::ordered_json;

Task table_task(const EngramTable& table, const RecipeParams& params, size_t index, int factor_set) {
  Task task;
  task.name = engram_prefix(table.layer);
  task.codec = CodecKind::engram_nvfp4;
  task.inputs = {table.weight, table.scale};
  task.outputs = {{table.weight, Dtype::U8, {table.rows, uint64_t(table.cols / 2)}},
                  {engram_prefix(table.layer) + ".weight_scale", Dtype::F8_E4M3, {table.rows, uint64_t(table.cols / Nvfp4::block)}}};
  task.rows = table.rows;
  task.cols = table.cols;
  task.rows_per_chunk = params.rows_per_chunk;
  task.shard = table.shard;
  task.group = index; // each table has its own global scale
  task.factor_set = factor_set;
  task.layer = table.layer;
  return task;
}

// The table's two tensors become weight / weight_scale, and weight_scale_2 follows them.
bool replace_table_tensor(const RecipePlan& plan, const SourceTensor& tensor, std::vector<ShardEntry>& entries) {
  for (size_t t = 0; t < plan.tasks.size(); ++t) {
    const Task& task = plan.tasks[t];
    if (tensor.spec.name == task.inputs[0]) {
      entries.push_back(task_output_entry(task, t, 0));
      return true;
    }
    if (tensor.spec.name == task.inputs[1]) {
      entries.push_back(task_output_entry(task, t, 1));
      entries.push_back(group_scalar_entry(task.name + ".weight_scale_2", t));
      return true;
    }
  }
  return false;
}

Json table_report(const Task& task, const TaskTotals& totals, const RecipeParams& params) {
  const ChunkStats& total = totals.stats;
  Json out;
  out["tensor"] = task.outputs[0].name;
  out["layer"] = task.layer;
  out["rows"] = task.rows;
  out["cols"] = task.cols;
  out["amax"] = totals.reduction;
  out["global_scale"] = Nvfp4::global_scale(totals.reduction);
  out["all_zero"] = totals.reduction == 0.0f;
  const double reference = total.reference_sq.to_double();
  out["rel_rms_error"] = reference > 0 ? std::sqrt(total.error_sq.to_double() / reference) : 0.0;
  if (params.uses_gptq()) {
    const double weighted_reference = total.weighted_reference_sq.to_double();
    out["weighted_rel_error"] = weighted_reference > 0 ? total.weighted_error_sq.to_double() / weighted_reference : 0.0;
  } else {
    out["weighted_rel_error"] = nullptr; // needs the wkv factors: gptq methods and `shardq study`
  }
  out["blocks"] = total.blocks;
  out["scale_underflows"] = total.scale_underflows;
  out["zero_blocks"] = total.zero_blocks;
  if (params.uses_mse()) {
    const ScaleSearch search{params.mse_candidates, params.mse_alpha_min};
    const auto alphas = search.alphas();
    Json histogram = Json::array();
    for (int k = 0; k < search.candidates; ++k) {
      histogram.push_back({{"alpha", alphas[size_t(k)]}, {"wins", total.candidate_wins[size_t(k)]}});
    }
    out["mse_candidate_wins"] = histogram;
  }
  out["chunks"] = task.chunks();
  out["compute_seconds"] = totals.compute_seconds;
  out["rows_per_compute_second"] = totals.compute_seconds > 0 ? double(task.rows) / totals.compute_seconds : 0.0;
  return out;
}

} // namespace

RecipePlan EngramNvfp4Recipe::plan(const RecipeInputs& inputs) const {
  const CheckpointView& source = inputs.source;
  const RecipeParams& params = inputs.params;
  RecipePlan plan;
  plan.codec_params = {parse_quant_method(params.method), params.mse_candidates, params.mse_alpha_min,
                       params.gptq_block, engram_layout_of(source)};
  const EngramLayout& layout = *plan.codec_params.engram_layout;
  std::set<size_t> shards;
  for (const EngramTable& table : engram_tables(source, layout)) {
    int factor_set = -1;
    if (params.uses_gptq()) {
      const std::string wkv = fmt::format("layers.{}.engram.wkv", table.layer);
      factor_set = int(plan.factor_sets.size());
      plan.factor_sets.push_back({wkv, wkv + ".weight", wkv + ".scale", table.layer, layout.columns(), kGptqCols});
    }
    plan.tasks.push_back(table_task(table, params, plan.tasks.size(), factor_set));
    shards.insert(table.shard);
  }
  plan.groups = plan.tasks.size();
  plan_changed_shards(
      source, shards, [&](const SourceTensor& t, std::vector<ShardEntry>& entries) { return replace_table_tensor(plan, t, entries); }, plan);
  plan.config = source.config;
  auto& text_config = plan.config.contains("text_config") ? plan.config["text_config"] : plan.config;
  text_config["engram_embed_quant"] = "nvfp4";
  text_config["engram_embed_block_size"] = Nvfp4::block;
  text_config["engram_embed_scale_dtype"] = "e4m3";
  text_config["engram_embed_layers"] = layout.config().layer_ids;
  return plan;
}

Json EngramNvfp4Recipe::report(const RecipePlan& plan, const RecipeParams& params,
                               std::span<const TaskTotals> totals) const {
  Json report;
  report["method"] = params.method;
  Json parameters;
  parameters["format"] = "nvfp4";
  parameters["block_size"] = Nvfp4::block;
  parameters["scale_dtype"] = "e4m3";
  parameters["global_scale_rule"] = "amax / (6 * 448)";
  if (params.uses_mse()) {
    parameters["mse_candidates"] = params.mse_candidates;
    parameters["mse_alpha_min"] = params.mse_alpha_min;
  }
  if (params.uses_gptq()) {
    parameters["gptq_damp"] = params.gptq_damp;
    parameters["gptq_block"] = params.gptq_block;
  }
  report["parameters"] = parameters;
  Json tables = Json::array();
  for (size_t t = 0; t < plan.tasks.size(); ++t) tables.push_back(table_report(plan.tasks[t], totals[t], params));
  report["tables"] = tables;
  return report;
}

} // namespace shardq
