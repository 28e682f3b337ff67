// The run report (docs/design.md "Reports"): the recipe's section, built from every task's
// chunk records summed in chunk order, between the product and the run figures.
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "pipeline/checkpoint.h"
#include "pipeline/plan.h"
#include "pipeline/work.h"

namespace shardq {

// Every task's figures: its chunks' stats merged in chunk order, its group's reduction.
std::vector<TaskTotals> task_totals(const Plan& plan, const CheckpointState& state);

// `ranks`: this run's ranks, their hosts and compute threads.
nlohmann::ordered_json build_report(const Plan& plan, const CheckpointState& state, const std::vector<RankInfo>& ranks,
                                    double wall_seconds);

} // namespace shardq
