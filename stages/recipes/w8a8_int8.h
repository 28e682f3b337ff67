// Product w8a8-int8 (seed 003): every quantized linear of the source (FP8 32x32 blocks,
// FP4 experts) dequantized exactly and re-quantized to symmetric per-channel INT8
// (`weight` I8 [out, in], `weight_scale` F32 [out, 1]); modules matched by the job's
// ignore list become BF16; everything else (Engram tables, embeddings, head, norms, router
// gates, ...) is copied byte for byte. A linear it cannot quantize (no E8M0 scale: natively
// BF16) must be in the ignore list, or the plan is refused.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "stages/recipes/recipe.h"

namespace shardq {

class W8a8Int8Recipe : public Recipe {
 public:
  std::string_view name() const override { return "w8a8-int8"; }
  std::vector<std::string_view> quant_keys() const override { return {"ignore"}; }
  RecipePlan plan(const RecipeInputs& inputs) const override;
  nlohmann::ordered_json report(const RecipePlan& plan, const RecipeParams& params,
                                std::span<const TaskTotals> totals) const override;
  // The model card's layout audit: shard set continuous and closed, key diff vs source,
  // every I8 weight paired with an F32 [out, 1] scale, ignore-matched linears BF16, Engram
  // tables byte-identical (checked by the engine's copies), no BF16 linear outside the
  // ignore rules.
  void audit(const RecipePlan& plan, const RecipeParams& params, const CheckpointView& source,
             const CheckpointView& output, const AuditCheck& check) const override;
};

// Whether module `name` (a tensor name without its .weight) matches an ignore entry: the
// entry occurs in the dotted name on component boundaries ("attn.wkv" matches
// "layers.3.attn.wkv" but not "layers.3.attn.compressor.wkv"; "vision." matches every
// module under vision).
bool ignore_matches(std::string_view module, const std::vector<std::string>& ignore);
bool matches_components(std::string_view module, std::string_view entry); // one entry, as above

// The module of a tensor that is a linear's weight by its name and shape: <module>.weight,
// 2-D, not a norm and not one of the model's other matrices (embeddings, Engram tables,
// heads, router gates). Whatever its dtype: the audit finds the output's linears by it.
std::optional<std::string_view> linear_weight_module(const TensorSpec& spec);
// The same by name alone (a view of `name`).
std::optional<std::string_view> linear_module_by_name(std::string_view name);

// The module of linear `linear` of a W8A8 task (its weight's name without .weight).
std::string_view linear_module(const Task& task, size_t linear);

// The kind of a module for the report: its name without layer and expert numbers and
// without the leading "layers." (layers.3.ffn.experts.7.w1 -> ffn.experts.w1).
void module_kind(std::string_view module, std::string& kind); // into `kind`, reusing its buffer

} // namespace shardq
