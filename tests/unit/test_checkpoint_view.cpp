// CheckpointView (stages/recipes/recipe.h): lookups by name, find_near against find, and a
// name stored in two shards refused; the W8A8 report's module kinds, and its plan the same
// whatever order the shards are planned in; what it takes for a linear, the refusal of one
// it cannot quantize outside the ignore list, and the audit's linears found in the output.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

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

TEST(CheckpointView, ShardStartsAndViewsOutOfShardOrderRefused) {
  CheckpointView view = two_shard_view();
  EXPECT_EQ(view.shard_starts(), (std::vector<size_t>{0, 6, 8}));
  std::swap(view.tensors[5], view.tensors[6]);
  EXPECT_THROW(view.index(), StageError);
  CheckpointView unindexed;
  unindexed.shard_files = {"model.safetensors"};
  EXPECT_THROW(unindexed.shard_starts(), StageError);
}

// Three shards of FP8 linears, FP4 experts, an ignored module and copied tensors.
CheckpointView linears_view() {
  CheckpointView view;
  view.dir = "/models/src";
  view.shard_files = {"a.safetensors", "b.safetensors", "c.safetensors"};
  for (size_t shard = 0; shard < 3; ++shard) {
    const std::string layer = "layers." + std::to_string(shard);
    view.tensors.push_back({{layer + ".attn.wq_a.scale", Dtype::F8_E8M0, {2, 2}}, shard});
    view.tensors.push_back({{layer + ".attn.wq_a.weight", Dtype::F8_E4M3, {64, 64}}, shard});
    view.tensors.push_back({{layer + ".attn.wq_b.scale", Dtype::F8_E8M0, {2, 2}}, shard});
    view.tensors.push_back({{layer + ".attn.wq_b.weight", Dtype::F8_E4M3, {64, 64}}, shard});
    view.tensors.push_back({{layer + ".attn_norm.weight", Dtype::BF16, {64}}, shard});
    for (int e = 0; e < 3; ++e) {
      const std::string expert = layer + ".ffn.experts." + std::to_string(e) + ".w1";
      view.tensors.push_back({{expert + ".scale", Dtype::F8_E8M0, {32, 2}}, shard});
      view.tensors.push_back({{expert + ".weight", Dtype::I8, {32, 32}}, shard});
    }
  }
  view.index();
  return view;
}

TEST(W8a8Plan, SameTasksAndEntriesWhateverTheShardOrder) {
  const CheckpointView view = linears_view();
  RecipeParams params;
  params.ignore = {"attn.wq_a"};
  params.rows_per_chunk = 32;
  const RecipePlan in_order = W8a8Int8Recipe().plan({params, view, nullptr, {}, {}});
  const ForEach backwards = [](size_t count, const std::function<void(size_t)>& body) {
    for (size_t i = count; i-- > 0;) body(i);
  };
  const RecipePlan reversed = W8a8Int8Recipe().plan({params, view, nullptr, {}, backwards});
  ASSERT_EQ(in_order.tasks.size(), 9u); // 2 attention linears and one task of 3 small experts per shard
  ASSERT_EQ(reversed.tasks.size(), in_order.tasks.size());
  for (size_t t = 0; t < in_order.tasks.size(); ++t) {
    EXPECT_EQ(reversed.tasks[t].name, in_order.tasks[t].name);
    EXPECT_EQ(reversed.tasks[t].group, t);
    EXPECT_EQ(in_order.tasks[t].group, t);
    EXPECT_EQ(reversed.tasks[t].codec, in_order.tasks[t].codec);
    EXPECT_EQ(reversed.tasks[t].outputs, in_order.tasks[t].outputs);
  }
  EXPECT_EQ(in_order.tasks[0].name, "layers.0.attn.wq_a");
  EXPECT_EQ(in_order.tasks[0].codec, CodecKind::fp8_to_bf16);
  const Task& experts = in_order.tasks[8];
  EXPECT_EQ(experts.name, "layers.2.ffn.experts.0.w1 and 2 more");
  EXPECT_EQ(experts.codec, CodecKind::fp4_to_int8);
  EXPECT_EQ(experts.stacked_tensors, 3u);
  ASSERT_EQ(linear_count(experts), 3u);
  for (size_t e = 0; e < 3; ++e) {
    const std::string module = "layers.2.ffn.experts." + std::to_string(e) + ".w1";
    const LinearSlots slots = linear_slots(experts, e);
    EXPECT_EQ(experts.inputs[slots.weight], module + ".weight");
    EXPECT_EQ(experts.inputs[slots.scale], module + ".scale");
    EXPECT_EQ(experts.outputs[slots.output], (TensorSpec{module + ".weight", Dtype::I8, {32, 64}}));
    ASSERT_TRUE(slots.output_scale);
    EXPECT_EQ(experts.outputs[*slots.output_scale], (TensorSpec{module + ".weight_scale", Dtype::F32, {32, 1}}));
    EXPECT_EQ(linear_module(experts, e), module);
  }
  ASSERT_EQ(reversed.shards.size(), 3u);
  for (const auto& [shard, entries] : in_order.shards) {
    const auto& other = reversed.shards.at(shard);
    ASSERT_EQ(other.size(), entries.size());
    for (size_t i = 0; i < entries.size(); ++i) {
      EXPECT_EQ(other[i].spec, entries[i].spec);
      EXPECT_EQ(other[i].source, entries[i].source);
      EXPECT_EQ(other[i].task, entries[i].task);
      if (entries[i].source == EntrySource::task_output) {
        EXPECT_EQ(in_order.tasks[entries[i].task].outputs[entries[i].output], entries[i].spec);
      }
    }
  }
}

// Small linears share a task only with their own kind and shape, up to a task's source
// budget (256 KiB); one over the small limit (64 KiB) is a task of its own.
TEST(W8a8Plan, SmallLinearsOfOneKindAndShapeShareATask) {
  CheckpointView view;
  view.dir = "/models/src";
  view.shard_files = {"a.safetensors"};
  const auto add_fp4 = [&](const std::string& module, uint64_t out, uint64_t packed_in) {
    view.tensors.push_back({{module + ".weight", Dtype::I8, {out, packed_in}}, 0});
    view.tensors.push_back({{module + ".scale", Dtype::F8_E8M0, {out, packed_in * 2 / 32}}, 0});
  };
  for (int e = 0; e < 13; ++e) { // 640 x 32 bytes + 640 x 2 scales: 21,760 bytes each, 12 a task
    add_fp4("layers.0.ffn.experts." + std::to_string(e) + ".w1", 640, 32);
    add_fp4("layers.0.ffn.experts." + std::to_string(e) + ".w2", 32, 640);
  }
  add_fp4("layers.0.ffn.shared_experts.w1", 640, 32); // the experts' shape, another kind
  add_fp4("layers.0.ffn.experts.13.w1", 4096, 32);    // the kind, over the small limit
  view.index();
  RecipeParams params;
  const RecipePlan plan = W8a8Int8Recipe().plan({params, view, nullptr, {}, {}});
  std::vector<std::pair<std::string, size_t>> tasks;
  for (const Task& task : plan.tasks) tasks.emplace_back(task.name, linear_count(task));
  const std::vector<std::pair<std::string, size_t>> expected = {
      {"layers.0.ffn.experts.0.w1 and 11 more", 12}, {"layers.0.ffn.experts.0.w2 and 11 more", 12},
      {"layers.0.ffn.experts.12.w1", 1},             {"layers.0.ffn.experts.12.w2", 1},
      {"layers.0.ffn.shared_experts.w1", 1},         {"layers.0.ffn.experts.13.w1", 1}};
  EXPECT_EQ(tasks, expected);
}

std::string kind_of(std::string_view module) {
  std::string kind = "left over from an earlier module"; // module_kind replaces the buffer's text
  module_kind(module, kind);
  return kind;
}

TEST(W8a8ModuleKind, DropsLayerAndExpertNumbersAndTheLeadingLayers) {
  EXPECT_EQ(kind_of("layers.3.ffn.experts.7.w1"), "ffn.experts.w1");
  EXPECT_EQ(kind_of("layers.12.attn.wq_b"), "attn.wq_b");
  EXPECT_EQ(kind_of("mtp.0.layers.1.ffn.shared_experts.w2"), "mtp.layers.ffn.shared_experts.w2");
  EXPECT_EQ(kind_of("head"), "head");
  EXPECT_EQ(kind_of("layers.0"), "");
  EXPECT_EQ(kind_of("vision.blocks.10.attn.qkv"), "vision.blocks.attn.qkv");
}

// The seed's rule by hand: an entry matches where it stands in the module name starting a
// dotted component and ending one (or ending in '.').
TEST(W8a8Plan, IgnoreEntriesMatchWholeComponents) {
  const std::vector<std::string> ignore = {"attn.wq_a", "attn.wkv", "engram.wkv", "vision.", "aligner."};
  EXPECT_TRUE(ignore_matches("layers.3.attn.wq_a", ignore));
  EXPECT_TRUE(ignore_matches("attn.wkv", ignore));
  EXPECT_TRUE(ignore_matches("layers.2.engram.wkv", ignore));
  EXPECT_TRUE(ignore_matches("vision.blocks.0.fc1", ignore));
  EXPECT_TRUE(ignore_matches("model.aligner.proj", ignore));
  EXPECT_FALSE(ignore_matches("layers.3.attn.wq_a_b", ignore));  // not where a component ends
  EXPECT_FALSE(ignore_matches("layers.3.xattn.wq_a", ignore));   // not where one starts
  EXPECT_FALSE(ignore_matches("layers.3.attn.wq_b", ignore));
  EXPECT_FALSE(ignore_matches("layers.3.attn.compressor.wkv", ignore));
  EXPECT_FALSE(ignore_matches("visionx.blocks.0", ignore));
  EXPECT_FALSE(ignore_matches("layers.0.vision", ignore));       // "vision." needs the dot
  EXPECT_TRUE(ignore_matches("layers.3.attn.wq_a", {"3.attn"}));  // entries may span numbered components
  EXPECT_FALSE(ignore_matches("layers.13.attn.wq_a", {"3.attn"}));
  EXPECT_FALSE(ignore_matches("layers.3.attn", {""}));
}

// A one-shard view of `tensors`, in their order.
CheckpointView one_shard_view(const std::string& dir, const std::vector<TensorSpec>& tensors) {
  CheckpointView view;
  view.dir = dir;
  view.shard_files = {"model-00001-of-00001.safetensors"};
  for (const TensorSpec& spec : tensors) view.tensors.push_back({spec, 0});
  view.index();
  return view;
}

// A linear is a 2-D <module>.weight that is not a norm, an embedding, an Engram table, a
// head or a router gate, whatever its dtype.
TEST(W8a8Plan, LinearWeightsByNameAndShape) {
  const auto module_of = [](const std::string& name, std::vector<uint64_t> shape) -> std::optional<std::string> {
    const TensorSpec spec{name, Dtype::BF16, std::move(shape)};
    const auto module = linear_weight_module(spec); // a view of spec.name
    return module ? std::optional<std::string>(*module) : std::nullopt;
  };
  EXPECT_EQ(module_of("layers.2.attn.indexer.weights_proj.weight", {4, 256}), "layers.2.attn.indexer.weights_proj");
  EXPECT_EQ(module_of("vision.blocks.0.fc1.weight", {64, 32}), "vision.blocks.0.fc1");
  EXPECT_EQ(module_of("layers.0.ffn.experts.3.w1.weight", {64, 32}), "layers.0.ffn.experts.3.w1");
  EXPECT_EQ(module_of("layers.0.ffn.gate.weight", {8, 256}), std::nullopt);
  EXPECT_EQ(module_of("embed.weight", {1024, 256}), std::nullopt);
  EXPECT_EQ(module_of("head.weight", {1024, 256}), std::nullopt);
  EXPECT_EQ(module_of("mtp.0.head.weight", {1024, 256}), std::nullopt);
  EXPECT_EQ(module_of("markov_head.proj.weight", {64, 64}), std::nullopt);
  EXPECT_EQ(module_of("layers.1.engram.embed.weight", {4096, 256}), std::nullopt);
  EXPECT_EQ(module_of("layers.0.attn_norm.weight", {64, 64}), std::nullopt);
  EXPECT_EQ(module_of("mtp.0.enorm.weight", {64, 64}), std::nullopt);
  EXPECT_EQ(module_of("layers.0.attn.wq_b.weight", {64}), std::nullopt);         // not a matrix
  EXPECT_EQ(module_of("layers.1.engram.q_weight", {4, 256}), std::nullopt);      // not <module>.weight
  EXPECT_EQ(module_of("layers.0.attn.wq_b.weight_scale", {64, 1}), std::nullopt);
  EXPECT_EQ(module_of("layers.0.shead.weight", {64, 64}), "layers.0.shead");     // "head" is a whole component
}

// A router gate or head stored FP8 with an E8M0 scale is kept as it is (weight and scale
// copied), as the audit's key diff expects: not made INT8 because a scale lies beside it.
TEST(W8a8Plan, QuantizedGateAndHeadKeptAsTheyAre) {
  const CheckpointView view = one_shard_view("/models/src", {{"head.weight", Dtype::F8_E4M3, {64, 64}},
                                                             {"head.scale", Dtype::F8_E8M0, {2, 2}},
                                                             {"layers.0.ffn.gate.weight", Dtype::F8_E4M3, {32, 64}},
                                                             {"layers.0.ffn.gate.scale", Dtype::F8_E8M0, {1, 2}},
                                                             {"layers.0.attn.wq_b.weight", Dtype::F8_E4M3, {64, 64}},
                                                             {"layers.0.attn.wq_b.scale", Dtype::F8_E8M0, {2, 2}}});
  const RecipePlan plan = W8a8Int8Recipe().plan({RecipeParams{}, view, nullptr, {}, {}});
  ASSERT_EQ(plan.tasks.size(), 1u);
  EXPECT_EQ(plan.tasks[0].name, "layers.0.attn.wq_b");
  for (const std::string name : {"head.weight", "head.scale", "layers.0.ffn.gate.weight", "layers.0.ffn.gate.scale"}) {
    const auto& entries = plan.shards.at(0);
    const auto kept = std::ranges::find_if(entries, [&](const ShardEntry& e) { return e.spec.name == name; });
    ASSERT_NE(kept, entries.end()) << name;
    EXPECT_EQ(kept->source, EntrySource::copy) << name;
  }
}

// The StageError a W8A8 plan of `view` throws, or "" (and a test failure) if it plans.
std::string plan_error(const RecipeParams& params, const CheckpointView& view) {
  try {
    W8a8Int8Recipe().plan({params, view, nullptr, {}, {}});
  } catch (const StageError& e) {
    return e.what();
  }
  ADD_FAILURE() << "the plan was made";
  return "";
}

// A linear without an E8M0 scale (natively BF16) is copied where the ignore list names it and
// refused elsewhere, naming the file, the tensor and the fix; the other BF16 matrices are copied.
TEST(W8a8Plan, UnscaledLinearOutsideTheIgnoreListRefused) {
  const CheckpointView view = one_shard_view("/models/src", {{"embed.weight", Dtype::BF16, {1024, 64}},
                                                             {"head.weight", Dtype::BF16, {1024, 64}},
                                                             {"layers.0.attn_norm.weight", Dtype::BF16, {64}},
                                                             {"layers.0.ffn.gate.weight", Dtype::BF16, {8, 64}},
                                                             {"layers.0.attn.wq_b.weight", Dtype::F8_E4M3, {64, 64}},
                                                             {"layers.0.attn.wq_b.scale", Dtype::F8_E8M0, {2, 2}},
                                                             {"layers.0.attn.indexer.weights_proj.weight", Dtype::BF16, {4, 64}}});
  RecipeParams params;
  params.ignore = {"attn.indexer.weights_proj"};
  const RecipePlan plan = W8a8Int8Recipe().plan({params, view, nullptr, {}, {}});
  ASSERT_EQ(plan.tasks.size(), 1u);
  EXPECT_EQ(plan.tasks[0].name, "layers.0.attn.wq_b");
  const auto& entries = plan.shards.at(0);
  const auto copied = std::ranges::find_if(entries, [](const ShardEntry& e) {
    return e.spec.name == "layers.0.attn.indexer.weights_proj.weight";
  });
  ASSERT_NE(copied, entries.end());
  EXPECT_EQ(copied->source, EntrySource::copy);
  EXPECT_EQ(copied->spec.dtype, Dtype::BF16);

  // Modules the model lacks altogether (the seed lists those of other variants) and
  // tensors that are not linears (the router gate, copied anyway) warn.
  params.ignore = {"attn.indexer.weights_proj", "vision.", "aligner.proj", "ffn.gate"};
  const RecipePlan warned = W8a8Int8Recipe().plan({params, view, nullptr, {}, {}});
  ASSERT_EQ(warned.warnings.size(), 3u);
  EXPECT_THAT(warned.warnings[0], HasSubstr("quant.ignore entry 'vision.' matches no linear of the source (a module"));
  EXPECT_THAT(warned.warnings[1], HasSubstr("quant.ignore entry 'aligner.proj' matches no linear"));
  EXPECT_THAT(warned.warnings[2], HasSubstr("quant.ignore entry 'ffn.gate' matches no linear"));
  EXPECT_EQ(warned.notes.at("ignore_unmatched"), (nlohmann::ordered_json{"vision.", "aligner.proj", "ffn.gate"}));
  EXPECT_TRUE(plan.warnings.empty()) << plan.warnings.front();

  // A typo in a family the model has, or a layer it lacks, would leave the module it
  // meant INT8: refused, with the family's linear kinds.
  for (const std::string entry : {"attn.wq-b", "layers.7.attn.wq_b"}) {
    params.ignore = {"attn.indexer.weights_proj", entry, "vision."};
    EXPECT_THAT(plan_error(params, view), HasSubstr("quant.ignore entry '" + entry + "' matches no tensor of the source, "
                                                    "though it has attn linears (attn.indexer.weights_proj, attn.wq_b): a "
                                                    "typo, or a layer the model does not have?"));
  }

  params.ignore = {"attn.wq_a"};
  const std::string outside = plan_error(params, view);
  EXPECT_THAT(outside, HasSubstr("/models/src/model-00001-of-00001.safetensors"));
  EXPECT_THAT(outside, HasSubstr("'layers.0.attn.indexer.weights_proj.weight' is BF16 [4, 64]"));
  EXPECT_THAT(outside, HasSubstr("quant.ignore"));

  // Ignored, but not BF16 (an FP8 linear with V3's F32 weight_scale_inv): not copied as FP8.
  const CheckpointView v3 = one_shard_view("/models/v3", {{"layers.0.attn.wq_a.weight", Dtype::F8_E4M3, {64, 64}},
                                                          {"layers.0.attn.wq_a.weight_scale_inv", Dtype::F32, {1, 1}}});
  const std::string not_bf16 = plan_error(params, v3);
  EXPECT_THAT(not_bf16, HasSubstr("'layers.0.attn.wq_a.weight' is F8_E4M3 [64, 64] without an F8_E8M0 '.scale'"));
  EXPECT_THAT(not_bf16, HasSubstr("an ignored linear becomes BF16"));
}

// The audit's checks of one category: (what, ok) in the order made.
using Checks = std::vector<std::pair<std::string, bool>>;
std::map<std::string, Checks> audit_checks(const RecipeParams& params, const CheckpointView& source,
                                           const CheckpointView& output) {
  std::map<std::string, Checks> checks;
  const AuditCheck check = [&](const std::string& category, bool ok, const std::string& what, const std::string&) {
    checks[category].emplace_back(what, ok);
  };
  W8a8Int8Recipe().audit(RecipePlan{}, params, source, output, check);
  return checks;
}

CheckpointView shards_view(std::vector<std::string> files) {
  CheckpointView view;
  view.dir = "/models";
  view.shard_files = std::move(files);
  for (size_t s = 0; s < view.shard_files.size(); ++s) {
    view.tensors.push_back({{std::string("t").append(std::to_string(s)), Dtype::BF16, {4}}, s});
  }
  view.index();
  return view;
}

// Continuous and closed whatever the zero padding (DeepSeek's "-of-000163"); a missing
// number, a wrong total or a shard the source does not have fail.
TEST(W8a8Audit, ShardSetContinuousAndClosed) {
  const std::vector<std::string> six = {"model-00001-of-000003.safetensors", "model-00002-of-000003.safetensors",
                                        "model-00003-of-000003.safetensors"};
  const auto failures = [](const CheckpointView& source, const CheckpointView& output) {
    std::vector<std::string> failed;
    auto checks = audit_checks({}, source, output);
    for (const auto& [what, ok] : checks["shard set continuous and closed"]) {
      if (!ok) failed.push_back(what);
    }
    return failed;
  };
  EXPECT_THAT(failures(shards_view(six), shards_view(six)), ::testing::IsEmpty());
  const std::vector<std::string> other = {"weights-a.safetensors", "weights-b.safetensors"};
  EXPECT_THAT(failures(shards_view(other), shards_view(other)), ::testing::IsEmpty());
  const std::vector<std::string> gap = {"model-00001-of-000003.safetensors", "model-00003-of-000003.safetensors"};
  EXPECT_EQ(failures(shards_view(gap), shards_view(gap)),
            (std::vector<std::string>{"model-00001-of-000003.safetensors", "model-00003-of-000003.safetensors"}));
  EXPECT_EQ(failures(shards_view(six), shards_view({six[0], six[1], "model-00003-of-00003.safetensors"})),
            (std::vector<std::string>{"model-00003-of-00003.safetensors"}));
  EXPECT_EQ(failures(shards_view(six), shards_view({six[0], six[1]})), (std::vector<std::string>{six[0], six[1]}));
}

// The key diff goes by the source and the rules, not by the plan: an INT8 linear's scale
// becomes its weight_scale, an ignored one's goes, the Engram table's stays, the rest stay.
TEST(W8a8Audit, KeyDiffAgainstTheSource) {
  const CheckpointView source = one_shard_view("/models/src", {{"layers.0.attn.wq_a.weight", Dtype::F8_E4M3, {64, 64}},
                                                               {"layers.0.attn.wq_a.scale", Dtype::F8_E8M0, {2, 2}},
                                                               {"layers.0.attn.wq_b.weight", Dtype::F8_E4M3, {64, 64}},
                                                               {"layers.0.attn.wq_b.scale", Dtype::F8_E8M0, {2, 2}},
                                                               {"layers.1.engram.embed.weight", Dtype::F8_E4M3, {96, 64}},
                                                               {"layers.1.engram.embed.scale", Dtype::F8_E8M0, {96, 2}},
                                                               {"layers.0.attn_norm.weight", Dtype::BF16, {64}}});
  std::vector<TensorSpec> good = {{"layers.0.attn.wq_a.weight", Dtype::BF16, {64, 64}},
                                  {"layers.0.attn.wq_b.weight", Dtype::I8, {64, 64}},
                                  {"layers.0.attn.wq_b.weight_scale", Dtype::F32, {64, 1}},
                                  {"layers.1.engram.embed.weight", Dtype::F8_E4M3, {96, 64}},
                                  {"layers.1.engram.embed.scale", Dtype::F8_E8M0, {96, 2}},
                                  {"layers.0.attn_norm.weight", Dtype::BF16, {64}}};
  RecipeParams params;
  params.ignore = {"attn.wq_a"};
  EXPECT_EQ(audit_checks(params, source, one_shard_view("/models/dst", good))["key diff vs source"],
            (Checks{{"tensor names", true}}));
  std::vector<TensorSpec> kept_scale = good;
  kept_scale.push_back({"layers.0.attn.wq_a.scale", Dtype::F8_E8M0, {2, 2}}); // an ignored linear's scale kept
  kept_scale.erase(kept_scale.begin() + 5);                                   // and the norm lost
  EXPECT_EQ(audit_checks(params, source, one_shard_view("/models/dst", kept_scale))["key diff vs source"],
            (Checks{{"tensor names", false}}));
}

// The audit finds the linears in the output's headers, not in the plan: a natively BF16
// ignored linear counts as ignore-matched, a BF16 one outside the list fails, the other
// matrices are not linears.
TEST(W8a8Audit, LinearsFoundInTheOutputHeaders) {
  const CheckpointView output = one_shard_view("/models/dst", {{"embed.weight", Dtype::BF16, {1024, 64}},
                                                               {"layers.0.ffn.gate.weight", Dtype::BF16, {8, 64}},
                                                               {"layers.0.attn.wq_a.weight", Dtype::BF16, {64, 64}},
                                                               {"layers.0.attn.indexer.weights_proj.weight", Dtype::BF16, {4, 64}},
                                                               {"layers.0.attn.wq_b.weight", Dtype::I8, {64, 64}},
                                                               {"layers.0.attn.wq_b.weight_scale", Dtype::F32, {64, 1}},
                                                               {"layers.0.attn.wo_b.weight", Dtype::BF16, {64, 64}},
                                                               {"layers.0.attn.wkv.weight", Dtype::I8, {64, 64}},
                                                               {"layers.0.attn.wkv.weight_scale", Dtype::F32, {64, 1}}});
  RecipeParams params;
  params.ignore = {"attn.wq_a", "attn.wkv", "attn.indexer.weights_proj"};
  auto checks = audit_checks(params, CheckpointView{}, output);
  EXPECT_EQ(checks["ignore-matched linears BF16"], (Checks{{"layers.0.attn.wq_a.weight", true},
                                                          {"layers.0.attn.indexer.weights_proj.weight", true},
                                                          {"layers.0.attn.wkv.weight", false}}));
  EXPECT_EQ(checks["no BF16 linear outside the ignore rules"],
            (Checks{{"layers.0.attn.wq_b.weight", true}, {"layers.0.attn.wo_b.weight", false}}));
  EXPECT_EQ(checks["I8 weights paired with F32 [out, 1] scales"],
            (Checks{{"layers.0.attn.wq_b.weight", true}, {"layers.0.attn.wkv.weight", true}}));
}

} // namespace
} // namespace shardq
