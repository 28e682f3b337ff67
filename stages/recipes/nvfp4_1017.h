// Product nvfp4-1017 (seed 001): routed experts transcoded MXFP4 -> NVFP4 losslessly
// (codes untouched, one power-of-two global scale per w1+w3 pair and per w2), Engram
// tables re-quantized FP8 -> MXFP4 (NVIDIA's rule), per-projection input scales imported
// from a reference NVFP4 checkpoint (uncalibrated experts lifted), and the reference's
// tensor layout and config files.
#pragma once

#include "stages/recipes/recipe.h"

namespace shardq {

class Nvfp4_1017Recipe : public Recipe {
 public:
  std::string_view name() const override { return "nvfp4-1017"; }
  std::vector<std::string_view> quant_keys() const override {
    return {"input_scales_from", "keep_mtp", "engram_min_cosine"};
  }
  RecipePlan plan(const RecipeInputs& inputs) const override;
  nlohmann::ordered_json report(const RecipePlan& plan, const RecipeParams& params,
                                std::span<const TaskTotals> totals) const override;
  // A task per expert projection: ~300 MB of plan for the real-count fixture's 7.8 MB index.
  uint64_t plan_heap_per_index_byte() const override { return 32; }
};

} // namespace shardq
