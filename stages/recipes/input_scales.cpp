#include "stages/recipes/input_scales.h"

#include <algorithm>
#include <set>
#include <utility>

namespace shardq {
namespace {

using ExpertKey = std::pair<int, int>; // (layer, expert)

// Experts whose three projections all carry the model-wide maximum.
std::set<ExpertKey> uncalibrated_experts(const std::vector<ExpertProjection>& projections,
                                         const std::map<std::string, float>& reference, float model_max) {
  std::map<ExpertKey, int> at_max;
  for (const auto& p : projections) {
    if (reference.at(p.prefix + ".input_scale") == model_max) ++at_max[{p.layer, p.expert}];
  }
  std::set<ExpertKey> uncalibrated;
  for (const auto& [key, count] : at_max) {
    if (count == 3) uncalibrated.insert(key);
  }
  return uncalibrated;
}

} // namespace

InputScales plan_input_scales(const std::vector<ExpertProjection>& projections,
                              const std::function<float(const std::string&)>& read) {
  InputScales scales;
  std::map<std::string, float> reference;
  for (const auto& p : projections) {
    const float value = read(p.prefix + ".input_scale");
    reference[p.prefix + ".input_scale"] = value;
    scales.model_max = std::max(scales.model_max, value);
  }
  const std::set<ExpertKey> uncalibrated = uncalibrated_experts(projections, reference, scales.model_max);
  // The largest calibrated value per (layer, projection).
  std::map<std::pair<int, int>, float> calibrated_max;
  for (const auto& p : projections) {
    if (uncalibrated.count({p.layer, p.expert})) continue;
    float& best = calibrated_max[{p.layer, p.projection}];
    best = std::max(best, reference[p.prefix + ".input_scale"]);
  }
  for (const auto& p : projections) {
    const std::string tensor = p.prefix + ".input_scale";
    const float value = reference[tensor];
    const auto best = calibrated_max.find({p.layer, p.projection});
    // An uncalibrated w1/w3 whose layer's calibrated maximum is its own value keeps it: it
    // is copied, not lifted (the report lists only values that changed).
    const bool lift = uncalibrated.count({p.layer, p.expert}) && p.projection != 2 && best != calibrated_max.end() &&
                      best->second != value;
    scales.values[tensor] = lift ? best->second : value;
    if (lift) scales.lifted.push_back({tensor, p.layer, p.expert, p.projection, value, best->second});
    else ++scales.copied;
  }
  return scales;
}

} // namespace shardq
