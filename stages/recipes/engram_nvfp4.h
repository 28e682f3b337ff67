// Product engram-nvfp4 (seed 000): the Engram tables to NVFP4 (rtn, mse, gptq, gptq-mse),
// every other tensor byte-identical.
#pragma once

#include "stages/recipes/recipe.h"

namespace shardq {

class EngramNvfp4Recipe : public Recipe {
 public:
  std::string_view name() const override { return "engram-nvfp4"; }
  std::vector<std::string_view> quant_keys() const override {
    return {"method", "mse_candidates", "mse_alpha_min", "gptq_damp", "gptq_block"};
  }
  RecipePlan plan(const RecipeInputs& inputs) const override;
  nlohmann::ordered_json report(const RecipePlan& plan, const RecipeParams& params,
                                std::span<const TaskTotals> totals) const override;
};

} // namespace shardq
