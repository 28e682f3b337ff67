#include "pipeline/report.h"

#include <algorithm>

namespace shardq {

std::vector<TaskTotals> task_totals(const Plan& plan, const CheckpointState& state) {
  std::vector<float> group_values(plan.group_tasks.size(), 0.0f);
  for (size_t t = 0; t < plan.tasks().size(); ++t) {
    float& value = group_values[plan.tasks()[t].group];
    for (const auto& r : state.tasks[t].reductions) value = std::max(value, r.value);
  }
  std::vector<TaskTotals> totals(plan.tasks().size());
  for (size_t t = 0; t < totals.size(); ++t) {
    for (const auto& chunk : state.tasks[t].chunks) {
      totals[t].stats.merge(chunk.stats);
      totals[t].compute_seconds += chunk.seconds;
    }
    totals[t].reduction = group_values[plan.tasks()[t].group];
  }
  return totals;
}

nlohmann::ordered_json build_report(const Plan& plan, const CheckpointState& state, const std::vector<RankInfo>& ranks,
                                    double wall_seconds) {
  nlohmann::ordered_json report;
  report["product"] = std::string(plan.recipe->name());
  report["tool_version"] = SHARDQ_VERSION;
  // What it was made from, content not path (a copy elsewhere is the same source): verify
  // says in one line that an output was made from other bytes.
  report["source"] = {{"headers_digest", fingerprint_value(plan, "source_headers")},
                      {"sample_digest", fingerprint_value(plan, "source_sample")}};
  const auto totals = task_totals(plan, state);
  const nlohmann::ordered_json section = plan.recipe->report(plan.recipe_plan, plan.params, totals);
  for (const auto& [key, value] : section.items()) report[key] = value;
  nlohmann::ordered_json run;
  run["ranks"] = ranks.size();
  std::vector<int> threads;
  for (const auto& rank : ranks) threads.push_back(rank.threads);
  run["threads_per_rank"] = threads;
  run["backend"] = "cpu";
  run["write_mode"] = plan.job.write_mode;
  run["rows_per_chunk"] = plan.job.rows_per_chunk;
  run["wall_seconds"] = wall_seconds;
  run["rows_per_second"] = wall_seconds > 0 ? double(plan.total_rows()) / wall_seconds : 0.0;
  report["run"] = run;
  return report;
}

} // namespace shardq
