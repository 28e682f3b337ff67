// plan_input_scales (nvfp4-1017): experts whose three projections all carry the model-wide
// maximum were not calibrated; their w1 and w3 take the largest calibrated value of the same
// layer and projection, their w2 keeps the reference value. Only values that change are
// reported as lifted.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "stages/recipes/input_scales.h"

namespace shardq {
namespace {

std::vector<ExpertProjection> projections_of(int layer, int experts) {
  std::vector<ExpertProjection> out;
  for (int e = 0; e < experts; ++e) {
    for (int w = 1; w <= 3; ++w) {
      out.push_back({"layers." + std::to_string(layer) + ".ffn.experts." + std::to_string(e) + ".w" + std::to_string(w),
                     layer, e, w});
    }
  }
  return out;
}

InputScales plan(const std::vector<ExpertProjection>& projections, const std::map<std::string, float>& reference) {
  return plan_input_scales(projections, [&](const std::string& name) { return reference.at(name); });
}

TEST(InputScales, UncalibratedW1W3TakeTheLayersCalibratedMaximumW2Kept) {
  const auto projections = projections_of(0, 3);
  std::map<std::string, float> reference;
  const float calibrated[2][3] = {{0.5f, 0.25f, 0.75f}, {0.125f, 2.0f, 0.375f}};
  for (int e = 0; e < 2; ++e) {
    for (int w = 1; w <= 3; ++w) reference[projections[e * 3 + w - 1].prefix + ".input_scale"] = calibrated[e][w - 1];
  }
  for (int w = 1; w <= 3; ++w) reference["layers.0.ffn.experts.2.w" + std::to_string(w) + ".input_scale"] = 8.0f;
  const InputScales scales = plan(projections, reference);
  EXPECT_EQ(scales.model_max, 8.0f);
  EXPECT_EQ(scales.values.at("layers.0.ffn.experts.2.w1.input_scale"), 0.5f);  // max(0.5, 0.125)
  EXPECT_EQ(scales.values.at("layers.0.ffn.experts.2.w3.input_scale"), 0.75f); // max(0.75, 0.375)
  EXPECT_EQ(scales.values.at("layers.0.ffn.experts.2.w2.input_scale"), 8.0f);
  ASSERT_EQ(scales.lifted.size(), 2u);
  EXPECT_EQ(scales.lifted[0].tensor, "layers.0.ffn.experts.2.w1.input_scale");
  EXPECT_EQ(scales.lifted[0].reference, 8.0f);
  EXPECT_EQ(scales.lifted[0].lifted, 0.5f);
  EXPECT_EQ(scales.copied, 7u);
}

// A calibrated expert may hold the model maximum on w1 too: the uncalibrated w1 then keeps
// its value, which is copied, not reported as a lift that changed nothing.
TEST(InputScales, ALiftToTheSameValueIsACopy) {
  const auto projections = projections_of(4, 2);
  std::map<std::string, float> reference = {
      {"layers.4.ffn.experts.0.w1.input_scale", 8.0f}, {"layers.4.ffn.experts.0.w2.input_scale", 1.0f},
      {"layers.4.ffn.experts.0.w3.input_scale", 2.0f}, {"layers.4.ffn.experts.1.w1.input_scale", 8.0f},
      {"layers.4.ffn.experts.1.w2.input_scale", 8.0f}, {"layers.4.ffn.experts.1.w3.input_scale", 8.0f}};
  const InputScales scales = plan(projections, reference);
  EXPECT_EQ(scales.values.at("layers.4.ffn.experts.1.w1.input_scale"), 8.0f);
  EXPECT_EQ(scales.values.at("layers.4.ffn.experts.1.w3.input_scale"), 2.0f);
  ASSERT_EQ(scales.lifted.size(), 1u);
  EXPECT_EQ(scales.lifted[0].tensor, "layers.4.ffn.experts.1.w3.input_scale");
  EXPECT_EQ(scales.copied, 5u);
}

} // namespace
} // namespace shardq
