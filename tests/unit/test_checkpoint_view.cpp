// CheckpointView (stages/recipes/recipe.h): lookups by name, find_near against find, and a
// name stored in two shards refused; the W8A8 report's module kinds.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "stages/recipes/recipe.h"
#include "stages/recipes/w8a8_int8.h"
#include "stages/stage_error.h"

namespace shardq {
namespace {

using ::testing::HasSubstr;

// Two shards: layers.0 (a linear's scale and weight, a norm) and layers.1 (one more linear).
CheckpointView two_shard_view() {
  CheckpointView view;
  view.dir = "/models/src";
  view.shard_files = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
  const auto add = [&](const std::string& name, Dtype dtype, size_t shard) {
    view.tensors.push_back({{name, dtype, {64, 64}}, shard});
  };
  add("layers.0.attn.wq_b.scale", Dtype::F8_E8M0, 0);
  add("layers.0.attn.wq_b.weight", Dtype::F8_E4M3, 0);
  add("layers.0.attn_norm.weight", Dtype::BF16, 0);
  add("layers.0.ffn.w1.weight", Dtype::F8_E4M3, 0);
  add("layers.0.ffn.w2.weight", Dtype::F8_E4M3, 0);
  add("layers.0.ffn.w3.weight", Dtype::F8_E4M3, 0);
  add("layers.1.attn.wq_b.weight", Dtype::F8_E4M3, 1);
  add("layers.1.attn.wq_b.scale", Dtype::F8_E8M0, 1);
  view.index();
  return view;
}

TEST(CheckpointView, FindNearGivesWhatFindGives) {
  const CheckpointView view = two_shard_view();
  for (const auto& near : view.tensors) {
    for (const auto& wanted : view.tensors) {
      EXPECT_EQ(view.find_near(wanted.spec.name, near), view.find(wanted.spec.name))
          << wanted.spec.name << " near " << near.spec.name;
      EXPECT_EQ(view.find_near(wanted.spec.name, near), &wanted);
    }
    EXPECT_EQ(view.find_near("layers.0.attn.wq_b.input_scale", near), nullptr);
  }
}

TEST(CheckpointView, AtNamesTheFolderAndTheMissingTensor) {
  const CheckpointView view = two_shard_view();
  EXPECT_EQ(&view.at("layers.1.attn.wq_b.scale"), &view.tensors[7]);
  try {
    (void)view.at("layers.2.attn.wq_b.weight");
    FAIL() << "a missing tensor was found";
  } catch (const StageError& e) {
    EXPECT_THAT(e.what(), HasSubstr("/models/src"));
    EXPECT_THAT(e.what(), HasSubstr("'layers.2.attn.wq_b.weight'"));
  }
}

TEST(CheckpointView, NameStoredInTwoShardsRefused) {
  CheckpointView view = two_shard_view();
  view.tensors.push_back({{"layers.0.attn_norm.weight", Dtype::BF16, {64}}, 1});
  try {
    view.index();
    FAIL() << "a name stored twice was indexed";
  } catch (const StageError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'layers.0.attn_norm.weight' is stored twice"));
    EXPECT_THAT(e.what(), HasSubstr("model-00001-of-00002.safetensors"));
    EXPECT_THAT(e.what(), HasSubstr("model-00002-of-00002.safetensors"));
  }
}

TEST(W8a8ModuleKind, DropsLayerAndExpertNumbersAndTheLeadingLayers) {
  EXPECT_EQ(module_kind("layers.3.ffn.experts.7.w1"), "ffn.experts.w1");
  EXPECT_EQ(module_kind("layers.12.attn.wq_b"), "attn.wq_b");
  EXPECT_EQ(module_kind("mtp.0.layers.1.ffn.shared_experts.w2"), "mtp.layers.ffn.shared_experts.w2");
  EXPECT_EQ(module_kind("head"), "head");
  EXPECT_EQ(module_kind("layers.0"), "");
  EXPECT_EQ(module_kind("vision.blocks.10.attn.qkv"), "vision.blocks.attn.qkv");
}

} // namespace
} // namespace shardq
