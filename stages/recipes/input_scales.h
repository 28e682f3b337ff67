// Per-projection activation scales (input_scale) of the routed experts, imported from a
// reference NVFP4 checkpoint (seed 001 "Activation scales"). An expert whose three
// projections all carry the model-wide maximum received no calibration tokens: its w1
// and w3 take the largest calibrated value among the other experts of the same layer and
// projection (they all see the same hidden states); its w2 keeps the reference value
// (its input is the expert's own SwiGLU output, which the other experts say nothing about,
// and an overestimate cannot clip).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace shardq {

struct ExpertProjection {
  std::string prefix; // e.g. layers.3.ffn.experts.5.w1
  int layer = 0;
  int expert = 0;
  int projection = 0; // 1, 2 or 3
};

struct LiftedScale {
  std::string tensor; // <prefix>.input_scale
  int layer = 0, expert = 0, projection = 0;
  float reference = 0, lifted = 0;
};

struct InputScales {
  std::map<std::string, float> values; // <prefix>.input_scale -> the value written
  std::vector<LiftedScale> lifted;
  size_t copied = 0;                   // entries written as the reference has them
  float model_max = 0;
};

// `read` returns the reference's value of a tensor (<prefix>.input_scale), throwing
// StageError when it is missing or not an F32 scalar.
InputScales plan_input_scales(const std::vector<ExpertProjection>& projections,
                              const std::function<float(const std::string&)>& read);

} // namespace shardq
