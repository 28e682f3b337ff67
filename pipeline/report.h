// The run report (DESIGN.md "Reports"): method, parameters and per-table figures summed
// from the checkpoint's chunk records in chunk order.
#pragma once

#include <nlohmann/json.hpp>

#include "pipeline/checkpoint.h"
#include "pipeline/plan.h"

namespace shardq {

nlohmann::ordered_json build_report(const Plan& plan, const CheckpointState& state, int ranks, double wall_seconds);

} // namespace shardq
