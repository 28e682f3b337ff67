#include "pipeline/report.h"

#include <algorithm>
#include <cmath>

#include "kernels/formats.h"
#include "kernels/nvfp4.h"

namespace shardq {
namespace {

nlohmann::ordered_json table_report(const Plan& plan, const TablePlan& table, const TableRecord& record) {
  ChunkStats total;
  double seconds = 0.0;
  for (const auto& chunk : record.chunks) {
    total.merge(chunk.stats);
    seconds += chunk.seconds;
  }
  float amax = 0.0f;
  for (const auto& a : record.amax_chunks) amax = std::max(amax, a.amax);
  nlohmann::ordered_json out;
  out["tensor"] = table.out_weight;
  out["layer"] = table.layer;
  out["rows"] = table.rows;
  out["cols"] = table.cols;
  out["amax"] = amax;
  out["global_scale"] = Nvfp4::global_scale(amax);
  out["all_zero"] = amax == 0.0f;
  const double reference = total.reference_sq.to_double();
  out["rel_rms_error"] = reference > 0 ? std::sqrt(total.error_sq.to_double() / reference) : 0.0;
  if (plan.job.uses_gptq()) {
    const double weighted_reference = total.weighted_reference_sq.to_double();
    out["weighted_rel_error"] = weighted_reference > 0 ? total.weighted_error_sq.to_double() / weighted_reference : 0.0;
  } else {
    out["weighted_rel_error"] = nullptr; // needs the wkv factors: gptq methods and `shardq study`
  }
  out["blocks"] = total.blocks;
  out["scale_underflows"] = total.scale_underflows;
  out["zero_blocks"] = total.zero_blocks;
  if (plan.job.uses_mse()) {
    ScaleSearch search{int(plan.job.mse_candidates), plan.job.mse_alpha_min};
    const auto alphas = search.alphas();
    nlohmann::ordered_json histogram = nlohmann::ordered_json::array();
    for (int k = 0; k < search.candidates; ++k) {
      histogram.push_back({{"alpha", alphas[size_t(k)]}, {"wins", total.candidate_wins[size_t(k)]}});
    }
    out["mse_candidate_wins"] = histogram;
  }
  out["chunks"] = record.chunks.size();
  out["compute_seconds"] = seconds;
  out["rows_per_compute_second"] = seconds > 0 ? double(table.rows) / seconds : 0.0;
  return out;
}

} // namespace

nlohmann::ordered_json build_report(const Plan& plan, const CheckpointState& state, int ranks, double wall_seconds) {
  nlohmann::ordered_json report;
  report["product"] = "engram-nvfp4";
  report["tool_version"] = SHARDQ_VERSION;
  report["method"] = plan.job.method;
  nlohmann::ordered_json parameters;
  parameters["format"] = "nvfp4";
  parameters["block_size"] = Nvfp4::block;
  parameters["scale_dtype"] = "e4m3";
  parameters["global_scale_rule"] = "amax / (6 * 448)";
  if (plan.job.uses_mse()) {
    parameters["mse_candidates"] = plan.job.mse_candidates;
    parameters["mse_alpha_min"] = plan.job.mse_alpha_min;
  }
  if (plan.job.uses_gptq()) {
    parameters["gptq_damp"] = plan.job.gptq_damp;
    parameters["gptq_block"] = plan.job.gptq_block;
  }
  report["parameters"] = parameters;
  nlohmann::ordered_json tables = nlohmann::ordered_json::array();
  uint64_t rows = 0;
  for (size_t t = 0; t < plan.tables.size(); ++t) {
    tables.push_back(table_report(plan, plan.tables[t], state.tables[t]));
    rows += plan.tables[t].rows;
  }
  report["tables"] = tables;
  nlohmann::ordered_json run;
  run["ranks"] = ranks;
  run["backend"] = "cpu";
  run["write_mode"] = plan.job.write_mode;
  run["rows_per_chunk"] = plan.job.rows_per_chunk;
  run["wall_seconds"] = wall_seconds;
  run["rows_per_second"] = wall_seconds > 0 ? double(rows) / wall_seconds : 0.0;
  report["run"] = run;
  return report;
}

} // namespace shardq
