#include "pipeline/fixture.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "kernels/mxfp4.h"
#include "kernels/nvfp4.h"
#include "stages/engram_config.h"
#include "pipeline/fixture_content.h"
#include "pipeline/io/atomic_file.h"
#include "pipeline/io/config.h"
#include "pipeline/io/index.h"
#include "pipeline/io/safetensors.h"
#include "pipeline/pipeline_error.h"

namespace shardq {

namespace {

using fixture::RowRng;
using fixture::tensor_key;
using io::Dtype;
using io::TensorInfo;
using io::TensorSpec;
using io::Writer;
using Json = nlohmann::ordered_json;

constexpr uint64_t kTableChunkRows = 65536;

enum class Preset { deepseek_fp8, reference_nvfp4 };

template <typename T>
void append_le(std::vector<uint8_t>& bytes, T value) {
  // Little-endian hosts only (x86-64, aarch64): safetensors is little-endian.
  const size_t at = bytes.size();
  bytes.resize(at + sizeof(T));
  std::memcpy(bytes.data() + at, &value, sizeof(T));
}

uint64_t numel(const std::vector<uint64_t>& shape) {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

// Rows of N(mean, std^2) for a tensor of any shape (scalars are one row).
std::vector<float> normal_values(uint64_t key, const std::vector<uint64_t>& shape, float mean, float std) {
  const uint64_t rows = shape.empty() ? 1 : shape[0];
  const uint64_t cols = rows == 0 ? 0 : numel(shape) / rows;
  std::vector<float> values(rows * cols);
  for (uint64_t r = 0; r < rows; ++r) {
    RowRng rng(key, r);
    for (uint64_t c = 0; c < cols; ++c) values[r * cols + c] = mean + std * rng.normal();
  }
  return values;
}

// A weight matrix whose rows differ in magnitude, like trained linears: N(0, 1/in) * gain.
std::vector<float> linear_values(uint64_t key, uint64_t out, uint64_t in) {
  static constexpr std::array<float, 5> row_gains = {0.5f, 0.75f, 1.0f, 1.5f, 2.0f};
  const float std = 1.0f / std::sqrt(float(in));
  std::vector<float> values(out * in);
  for (uint64_t r = 0; r < out; ++r) {
    RowRng rng(key, r);
    const float gain = row_gains[rng.next() % row_gains.size()] * std;
    for (uint64_t c = 0; c < in; ++c) values[r * in + c] = rng.normal() * gain;
  }
  return values;
}

// One or more tensors made together (a weight and its scales), bound for one shard.
struct Group {
  int shard = 0;
  std::vector<TensorSpec> specs;
  std::function<void(Writer&)> write;
};

class FixtureBuilder {
 public:
  FixtureBuilder(Preset preset, const MiniDims& dims, uint64_t seed, uint64_t engram_vocab)
      : preset_(preset), seed_(seed), dims_(dims), engram_(mini_engram_config(engram_vocab, dims)), layout_(engram_) {}

  std::vector<Group> build();
  const EngramConfig& engram() const { return engram_; }

 private:
  int shard_of_layer(int layer) const { return layer * dims_.layer_shards / dims_.layers; }
  uint64_t key(const std::string& name) const { return tensor_key(seed_, name); }

  void add(int shard, std::vector<TensorSpec> specs, std::function<void(Writer&)> write) {
    groups_.push_back({shard, std::move(specs), std::move(write)});
  }
  void add_bf16(int shard, const std::string& name, std::vector<uint64_t> shape, float mean, float std);
  void add_f32(int shard, const std::string& name, std::vector<uint64_t> shape, float mean, float std);
  void add_fp8_linear(int shard, const std::string& prefix, uint64_t out, uint64_t in);
  void add_mxfp4_expert(int shard, const std::string& prefix, uint64_t out, uint64_t in);
  void add_nvfp4_expert(int shard, const std::string& prefix, int layer, int expert);
  void add_layer(int layer);
  void add_attention(int shard, const std::string& prefix, int layer);
  void add_moe(int shard, const std::string& prefix, int layer, bool nvfp4_experts);
  void add_engram_module(int shard, int layer);
  void add_engram_table(int shard, int layer);
  void add_mtp(int shard, int index);

  float input_scale(int layer, int expert, int projection) const;
  float max_calibrated_input_scale() const;

  Preset preset_;
  uint64_t seed_;
  MiniDims dims_;
  EngramConfig engram_;
  EngramLayout layout_;
  float model_max_input_scale_ = 0.0f; // reference preset: the uncalibrated experts' value
  std::vector<Group> groups_;
};

void FixtureBuilder::add_bf16(int shard, const std::string& name, std::vector<uint64_t> shape, float mean,
                              float std) {
  const uint64_t k = key(name);
  add(shard, {{name, Dtype::BF16, shape}}, [=](Writer& writer) {
    std::vector<uint8_t> bytes;
    for (float v : normal_values(k, shape, mean, std)) append_le(bytes, bf16_from_float(v));
    writer.write_rows(writer.tensor(name), 0, bytes);
  });
}

void FixtureBuilder::add_f32(int shard, const std::string& name, std::vector<uint64_t> shape, float mean,
                             float std) {
  const uint64_t k = key(name);
  add(shard, {{name, Dtype::F32, shape}}, [=](Writer& writer) {
    std::vector<uint8_t> bytes;
    for (float v : normal_values(k, shape, mean, std)) append_le(bytes, v);
    writer.write_rows(writer.tensor(name), 0, bytes);
  });
}

// DeepSeek's FP8 linear: E4M3 [out, in] with E8M0 scales over 32x32 blocks.
void FixtureBuilder::add_fp8_linear(int shard, const std::string& prefix, uint64_t out, uint64_t in) {
  const uint64_t k = key(prefix);
  const bool engram_wkv = prefix.ends_with("engram.wkv");
  add(shard,
      {{prefix + ".weight", Dtype::F8_E4M3, {out, in}},
       {prefix + ".scale", Dtype::F8_E8M0, {(out + 31) / 32, (in + 31) / 32}}},
      [=, this](Writer& writer) {
        const std::vector<float> w =
            engram_wkv ? fixture::engram_wkv_matrix(k, out, layout_.columns(), engram_.head_dim)
                       : linear_values(k, out, in);
        std::vector<uint8_t> codes, scales;
        fixture::quantize_fp8_blocks_32x32(w, out, in, codes, scales);
        writer.write_rows(writer.tensor(prefix + ".weight"), 0, codes);
        writer.write_rows(writer.tensor(prefix + ".scale"), 0, scales);
      });
}

// DeepSeek's FP4 routed expert: I8 [out, in/2] (two E2M1 codes, low nibble = even column)
// with an E8M0 scale per 32 values.
void FixtureBuilder::add_mxfp4_expert(int shard, const std::string& prefix, uint64_t out, uint64_t in) {
  const uint64_t k = key(prefix);
  add(shard,
      {{prefix + ".weight", Dtype::I8, {out, in / 2}}, {prefix + ".scale", Dtype::F8_E8M0, {out, in / 32}}},
      [=](Writer& writer) {
        const std::vector<float> w = linear_values(k, out, in);
        std::vector<uint8_t> packed(out * in / 2), scales(out * in / 32);
        for (uint64_t r = 0; r < out; ++r) {
          fixture::quantize_row_mxfp4_deepseek(&w[r * in], int(in), &packed[r * in / 2], &scales[r * in / 32]);
        }
        writer.write_rows(writer.tensor(prefix + ".weight"), 0, packed);
        writer.write_rows(writer.tensor(prefix + ".scale"), 0, scales);
      });
}

// A calibrated activation scale amax / (6 * 448), w1 and w3 sharing their input. Each
// (layer, expert) has streams of its own (1024 per layer up to 256 experts).
float FixtureBuilder::input_scale(int layer, int expert, int projection) const {
  const uint64_t per_layer = std::max<uint64_t>(1024, 4 * uint64_t(dims_.routed_experts));
  RowRng rng(key("input_scale"), uint64_t(layer) * per_layer + uint64_t(expert) * 4 + (projection == 2 ? 1u : 0u));
  const float activation_amax = (1.0f + rng.uniform()) * std::ldexp(1.0f, int(rng.next() % 6));
  return activation_amax / (E2M1::max * E4M3::max);
}

float FixtureBuilder::max_calibrated_input_scale() const {
  float maximum = 0.0f;
  for (int layer = 0; layer < dims_.layers; ++layer) {
    for (int expert = 0; expert < dims_.routed_experts; ++expert) {
      for (int projection = 1; projection <= 3; ++projection) {
        maximum = std::max(maximum, input_scale(layer, expert, projection));
      }
    }
  }
  return maximum;
}

// NVIDIA's NVFP4 expert (ModelOpt export): U8 [out, in/2], E4M3 [out, in/16] block scales,
// F32 weight_scale_2 shared by w1 and w3, F32 input_scale per projection.
void FixtureBuilder::add_nvfp4_expert(int shard, const std::string& prefix, int layer, int expert) {
  const uint64_t hidden = uint64_t(dims_.hidden), inter = uint64_t(dims_.moe_intermediate);
  std::vector<TensorSpec> specs;
  for (int w = 1; w <= 3; ++w) {
    const std::string name = prefix + ".w" + std::to_string(w);
    const uint64_t out = w == 2 ? hidden : inter, in = w == 2 ? inter : hidden;
    specs.push_back({name + ".weight", Dtype::U8, {out, in / 2}});
    specs.push_back({name + ".weight_scale", Dtype::F8_E4M3, {out, in / 16}});
    specs.push_back({name + ".weight_scale_2", Dtype::F32, {}});
    specs.push_back({name + ".input_scale", Dtype::F32, {}});
  }
  const bool fallback = std::count(dims_.uncalibrated_experts.begin(), dims_.uncalibrated_experts.end(),
                                   std::pair<int, int>{layer, expert}) != 0;
  const float model_max = fallback ? model_max_input_scale_ : 0.0f;
  add(shard, specs, [=, this](Writer& writer) {
    std::array<std::vector<float>, 4> w;
    float amax[4] = {0, 0, 0, 0};
    for (int p = 1; p <= 3; ++p) {
      w[p] = linear_values(key(prefix + ".w" + std::to_string(p)), p == 2 ? hidden : inter, p == 2 ? inter : hidden);
      for (float v : w[p]) amax[p] = std::max(amax[p], std::fabs(v));
    }
    const float gate_up_global = Nvfp4::global_scale(std::max(amax[1], amax[3]));
    for (int p = 1; p <= 3; ++p) {
      const std::string name = prefix + ".w" + std::to_string(p);
      const uint64_t out = p == 2 ? hidden : inter, in = p == 2 ? inter : hidden;
      const float global = p == 2 ? Nvfp4::global_scale(amax[2]) : gate_up_global;
      std::vector<uint8_t> packed(out * in / 2), scales(out * in / 16);
      BlockStats stats;
      for (uint64_t r = 0; r < out; ++r) {
        quantize_row_nvfp4_ref(&w[p][r * in], int(in), global, ScaleSearch{}, &packed[r * in / 2],
                               &scales[r * in / 16], stats);
      }
      std::vector<uint8_t> global_bytes, input_bytes;
      append_le(global_bytes, global);
      append_le(input_bytes, fallback ? model_max : input_scale(layer, expert, p));
      writer.write_rows(writer.tensor(name + ".weight"), 0, packed);
      writer.write_rows(writer.tensor(name + ".weight_scale"), 0, scales);
      writer.write_rows(writer.tensor(name + ".weight_scale_2"), 0, global_bytes);
      writer.write_rows(writer.tensor(name + ".input_scale"), 0, input_bytes);
    }
  });
}

void FixtureBuilder::add_attention(int shard, const std::string& prefix, int layer) {
  const uint64_t hidden = uint64_t(dims_.hidden), q_lora = uint64_t(dims_.q_lora_rank);
  const uint64_t heads_dim = uint64_t(dims_.heads * dims_.head_dim), o_lora = uint64_t(dims_.o_lora_rank);
  const uint64_t head_dim = uint64_t(dims_.head_dim);
  add_fp8_linear(shard, prefix + ".wq_a", q_lora, hidden);
  add_bf16(shard, prefix + ".q_norm.weight", {q_lora}, 1.0f, 0.05f);
  add_fp8_linear(shard, prefix + ".wq_b", heads_dim, q_lora);
  add_fp8_linear(shard, prefix + ".wkv", head_dim, hidden);
  add_bf16(shard, prefix + ".kv_norm.weight", {head_dim}, 1.0f, 0.05f);
  add_fp8_linear(shard, prefix + ".wo_a", o_lora, heads_dim);
  add_fp8_linear(shard, prefix + ".wo_b", hidden, o_lora);
  add_f32(shard, prefix + ".attn_sink", {uint64_t(dims_.heads)}, 0.0f, 1.0f);
  if (std::count(dims_.compress_layers.begin(), dims_.compress_layers.end(), layer)) {
    const uint64_t index_dim = uint64_t(dims_.index_head_dim);
    add_fp8_linear(shard, prefix + ".compressor.wkv", head_dim, hidden);
    add_fp8_linear(shard, prefix + ".compressor.wgate", head_dim, hidden);
    add_bf16(shard, prefix + ".compressor.norm.weight", {head_dim}, 1.0f, 0.05f);
    add_fp8_linear(shard, prefix + ".indexer.wq_b", uint64_t(dims_.index_heads) * index_dim, q_lora);
    add_fp8_linear(shard, prefix + ".indexer.wk", index_dim, hidden);
    add_bf16(shard, prefix + ".indexer.weights_proj.weight", {uint64_t(dims_.index_heads), hidden}, 0.0f, 0.05f);
  }
}

void FixtureBuilder::add_moe(int shard, const std::string& prefix, int layer, bool nvfp4_experts) {
  const uint64_t hidden = uint64_t(dims_.hidden), inter = uint64_t(dims_.moe_intermediate);
  add_bf16(shard, prefix + ".gate.weight", {uint64_t(dims_.routed_experts), hidden}, 0.0f, 0.06f);
  add_f32(shard, prefix + ".gate.bias", {uint64_t(dims_.routed_experts)}, 0.0f, 0.01f);
  for (int e = 0; e < dims_.routed_experts; ++e) {
    const std::string expert = prefix + ".experts." + std::to_string(e);
    if (nvfp4_experts) {
      add_nvfp4_expert(shard, expert, layer, e);
      continue;
    }
    add_mxfp4_expert(shard, expert + ".w1", inter, hidden);
    add_mxfp4_expert(shard, expert + ".w2", hidden, inter);
    add_mxfp4_expert(shard, expert + ".w3", inter, hidden);
  }
  add_fp8_linear(shard, prefix + ".shared_experts.w1", inter, hidden);
  add_fp8_linear(shard, prefix + ".shared_experts.w2", hidden, inter);
  add_fp8_linear(shard, prefix + ".shared_experts.w3", inter, hidden);
}

void FixtureBuilder::add_engram_module(int shard, int layer) {
  const std::string prefix = "layers." + std::to_string(layer) + ".engram";
  const uint64_t hidden = uint64_t(dims_.hidden), hc = uint64_t(dims_.hc_mult);
  add_fp8_linear(shard, prefix + ".wkv", hidden * (hc + 1), uint64_t(layout_.columns()) * uint64_t(engram_.head_dim));
  add_bf16(shard, prefix + ".q_weight", {hc, hidden}, 0.0f, 0.05f);
  add_bf16(shard, prefix + ".k_weight", {hc, hidden}, 0.0f, 0.05f);
}

// An Engram table, streamed in chunks of rows over all cores: FP8 E4M3 + E8M0 per 32
// (DeepSeek) or, in the reference checkpoint, NVIDIA's MXFP4 of the same FP8 rows.
void FixtureBuilder::add_engram_table(int shard, int layer) {
  const std::string prefix = "layers." + std::to_string(layer) + ".engram.embed";
  const uint64_t rows = layout_.table_rows(layer);
  const int cols = engram_.head_dim;
  const bool mxfp4 = preset_ == Preset::reference_nvfp4;
  const uint64_t code_bytes = mxfp4 ? uint64_t(cols) / 2 : uint64_t(cols);
  const Dtype code_dtype = mxfp4 ? Dtype::U8 : Dtype::F8_E4M3;
  const auto offsets = layout_.offsets(layer);
  auto content = std::make_shared<fixture::EngramTableContent>(key(prefix), offsets, cols);
  add(shard,
      {{prefix + ".weight", code_dtype, {rows, code_bytes}},
       {prefix + ".scale", Dtype::F8_E8M0, {rows, uint64_t(cols) / 32}}},
      [=](Writer& writer) {
        const uint64_t scale_bytes = uint64_t(cols) / 32;
        std::vector<uint8_t> codes(kTableChunkRows * code_bytes), scales(kTableChunkRows * scale_bytes);
        const unsigned threads = std::clamp(std::thread::hardware_concurrency(), 1u, 16u);
        for (uint64_t first = 0; first < rows; first += kTableChunkRows) {
          const uint64_t count = std::min(kTableChunkRows, rows - first);
          auto make_rows = [&](uint64_t begin, uint64_t end) {
            std::vector<float> x(size_t(cols), 0.0f), fp8(size_t(cols), 0.0f);
            std::vector<uint8_t> fp8_codes(static_cast<size_t>(cols)), fp8_scales(scale_bytes);
            for (uint64_t i = begin; i < end; ++i) {
              content->row(first + i, x.data());
              if (!mxfp4) {
                fixture::quantize_row_fp8_e8m0_32(x.data(), cols, &codes[i * code_bytes], &scales[i * scale_bytes]);
                continue;
              }
              fixture::quantize_row_fp8_e8m0_32(x.data(), cols, fp8_codes.data(), fp8_scales.data());
              dequantize_row_fp8_e8m0_32(fp8_codes.data(), fp8_scales.data(), cols, fp8.data());
              // NVIDIA's tables are ModelOpt's MXFP4 of the FP8 rows (exact zeros as nibble 8).
              quantize_row_mxfp4_ref(fp8.data(), cols, &codes[i * code_bytes], &scales[i * scale_bytes]);
            }
          };
          std::vector<std::thread> workers;
          for (unsigned t = 0; t < threads; ++t) {
            workers.emplace_back(make_rows, count * t / threads, count * (t + 1) / threads);
          }
          for (auto& worker : workers) worker.join();
          writer.write_rows(writer.tensor(prefix + ".weight"), first, {codes.data(), count * code_bytes});
          writer.write_rows(writer.tensor(prefix + ".scale"), first, {scales.data(), count * scale_bytes});
        }
      });
}

void FixtureBuilder::add_layer(int layer) {
  const int shard = shard_of_layer(layer);
  const std::string prefix = "layers." + std::to_string(layer);
  const uint64_t hidden = uint64_t(dims_.hidden), hc = uint64_t(dims_.hc_mult);
  add_bf16(shard, prefix + ".attn_norm.weight", {hidden}, 1.0f, 0.05f);
  add_attention(shard, prefix + ".attn", layer);
  // Hyper-connections (mHC) mixing the hc_mult residual streams.
  for (const char* part : {"hc_attn", "hc_ffn"}) {
    add_f32(shard, prefix + "." + part + "_fn", {(2 + hc) * hc, hc * hidden}, 0.0f, 0.01f);
    add_f32(shard, prefix + "." + part + "_base", {(2 + hc) * hc}, 0.0f, 0.1f);
    add_f32(shard, prefix + "." + part + "_scale", {3}, 1.0f, 0.1f);
  }
  if (std::count(dims_.engram_layers.begin(), dims_.engram_layers.end(), layer)) add_engram_module(shard, layer);
  add_bf16(shard, prefix + ".ffn_norm.weight", {hidden}, 1.0f, 0.05f);
  add_moe(shard, prefix + ".ffn", layer, preset_ == Preset::reference_nvfp4);
}

// MTP (DSpark) layers keep DeepSeek's formats in both presets: NVIDIA's calibration covers
// the 40 main layers only.
void FixtureBuilder::add_mtp(int shard, int index) {
  const std::string prefix = "mtp." + std::to_string(index);
  const uint64_t hidden = uint64_t(dims_.hidden);
  add_bf16(shard, prefix + ".enorm.weight", {hidden}, 1.0f, 0.05f);
  add_bf16(shard, prefix + ".hnorm.weight", {hidden}, 1.0f, 0.05f);
  add_fp8_linear(shard, prefix + ".e_proj", hidden, hidden);
  add_fp8_linear(shard, prefix + ".h_proj", hidden, hidden);
  add_bf16(shard, prefix + ".attn_norm.weight", {hidden}, 1.0f, 0.05f);
  add_attention(shard, prefix + ".attn", -1);
  add_bf16(shard, prefix + ".ffn_norm.weight", {hidden}, 1.0f, 0.05f);
  add_moe(shard, prefix + ".ffn", -1, false);
  add_bf16(shard, prefix + ".norm.weight", {hidden}, 1.0f, 0.05f);
}

std::vector<Group> FixtureBuilder::build() {
  const uint64_t hidden = uint64_t(dims_.hidden), vocab = uint64_t(dims_.vocab), hc = uint64_t(dims_.hc_mult);
  if (preset_ == Preset::reference_nvfp4) model_max_input_scale_ = max_calibrated_input_scale();
  add_bf16(0, "embed.weight", {vocab, hidden}, 0.0f, 0.02f);
  for (int layer = 0; layer < dims_.layers; ++layer) add_layer(layer);
  const int head_shard = dims_.layer_shards - (dims_.separate_head_shard ? 0 : 1);
  add_bf16(head_shard, "norm.weight", {hidden}, 1.0f, 0.05f);
  add_f32(head_shard, "hc_head_fn", {hc, hc * hidden}, 0.0f, 0.01f);
  add_f32(head_shard, "hc_head_base", {hc}, 0.0f, 0.1f);
  add_f32(head_shard, "hc_head_scale", {1}, 1.0f, 0.1f);
  add_bf16(head_shard, "head.weight", {vocab, hidden}, 0.0f, 0.02f);
  for (int i = 0; i < dims_.mtp_layers; ++i) add_mtp(dims_.mtp_own_shards ? head_shard + 1 + i : head_shard, i);
  // Like the real checkpoint: each table alone in one of the last shards.
  const int first_table_shard = dims_.shards() - int(engram_.layer_ids.size());
  for (size_t i = 0; i < engram_.layer_ids.size(); ++i) {
    add_engram_table(first_table_shard + int(i), engram_.layer_ids[i]);
  }
  return std::move(groups_);
}

std::string shard_name(int index, int shards) {
  char name[64];
  std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", index + 1, shards);
  return name;
}

void write_json(const std::filesystem::path& path, const Json& json) { io::write_json_file(path, json); }

Json engram_text_config(const MiniDims& dims, const EngramConfig& engram, Preset preset) {
  Json text;
  text["hidden_size"] = dims.hidden;
  text["hc_mult"] = dims.hc_mult;
  text["num_hidden_layers"] = dims.layers;
  text["vocab_size"] = dims.vocab;
  engram_config_to_json(engram, text);
  text["engram_pad_token_id"] = dims.engram_pad_token;
  text["engram_compressed_vocab_size"] = dims.engram_compressed_vocab;
  if (preset == Preset::reference_nvfp4) {
    text["engram_embed_quant"] = "mxfp4";
    text["engram_embed_block_size"] = 32;
    text["engram_embed_scale_dtype"] = "ue8m0";
    text["engram_embed_layers"] = engram.layer_ids;
  }
  return text;
}

Json modelopt_exclude_modules() {
  return Json::array({"embed*", "head*", "norm*", "hc_head*", "mtp*", "*attn*", "*shared_experts*", "*ffn.gate*",
                      "*engram*"});
}

Json quantization_config(Preset preset) {
  if (preset == Preset::deepseek_fp8) {
    return {{"quant_method", "fp8"},
            {"activation_scheme", "dynamic"},
            {"weight_block_size", {32, 32}},
            {"scale_fmt", "ue8m0"},
            {"expert_dtype", "fp4"}};
  }
  const Json nvfp4_args = {{"dynamic", false}, {"num_bits", 4}, {"type", "float"}, {"group_size", 16}};
  return {{"quant_method", "modelopt"},
          {"quant_algo", "NVFP4"},
          {"producer", {{"name", "modelopt"}, {"version", "0.37.0"}}},
          {"config_groups",
           {{"group_0",
             {{"input_activations", nvfp4_args}, {"weights", nvfp4_args}, {"targets", {"Linear"}}}}}},
          {"ignore", modelopt_exclude_modules()},
          {"kv_cache_scheme", nullptr}};
}

Json model_config(const MiniDims& dims, const EngramConfig& engram, Preset preset) {
  Json config;
  config["architectures"] = {"DeepseekV41ForCausalLM"};
  config["model_type"] = "deepseek_v4_1";
  config["torch_dtype"] = "bfloat16";
  config["vocab_size"] = dims.vocab;
  config["hidden_size"] = dims.hidden;
  config["num_hidden_layers"] = dims.layers;
  config["num_attention_heads"] = dims.heads;
  config["head_dim"] = dims.head_dim;
  config["q_lora_rank"] = dims.q_lora_rank;
  config["o_lora_rank"] = dims.o_lora_rank;
  config["moe_intermediate_size"] = dims.moe_intermediate;
  config["n_routed_experts"] = dims.routed_experts;
  config["n_shared_experts"] = 1;
  config["num_experts_per_tok"] = dims.experts_per_token;
  config["num_nextn_predict_layers"] = dims.mtp_layers;
  config["hc_mult"] = dims.hc_mult;
  config["index_n_heads"] = dims.index_heads;
  config["index_head_dim"] = dims.index_head_dim;
  config["compress_layer_ids"] = dims.compress_layers;
  config["rms_norm_eps"] = 1e-6;
  config["max_position_embeddings"] = 65536;
  config["bos_token_id"] = 0;
  config["eos_token_id"] = 1;
  config["tie_word_embeddings"] = false;
  config["quantization_config"] = quantization_config(preset);
  config["text_config"] = engram_text_config(dims, engram, preset);
  return config;
}

Json tokenizer_json() {
  Json vocab = Json::object();
  const char* special[] = {"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>"};
  for (int i = 0; i < 3; ++i) vocab[special[i]] = i;
  for (int b = 0; b < 94; ++b) vocab[std::string(1, char('!' + b))] = 3 + b;
  Json added = Json::array();
  for (int i = 0; i < 3; ++i) {
    added.push_back({{"id", i}, {"content", special[i]}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"special", true}});
  }
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                             {"use_regex", true}}},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true},
                       {"use_regex", true}}},
          {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                     {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
                     {"vocab", vocab}, {"merges", Json::array()}}}};
}

constexpr const char* kLicense = R"(MIT License

Copyright (c) 2023 DeepSeek

Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
)";

void write_side_files(const std::filesystem::path& out, const MiniDims& dims, const EngramConfig& engram,
                      Preset preset) {
  write_json(out / "config.json", model_config(dims, engram, preset));
  write_json(out / "generation_config.json", {{"_from_model_config", true},
                                              {"bos_token_id", 0},
                                              {"eos_token_id", 1},
                                              {"do_sample", true},
                                              {"temperature", 1.0},
                                              {"top_p", 0.95},
                                              {"transformers_version", "4.57.0"}});
  write_json(out / "tokenizer.json", tokenizer_json());
  write_json(out / "tokenizer_config.json", {{"add_bos_token", true},
                                             {"add_eos_token", false},
                                             {"bos_token", "<｜begin▁of▁sentence｜>"},
                                             {"eos_token", "<｜end▁of▁sentence｜>"},
                                             {"pad_token", "<｜▁pad▁｜>"},
                                             {"model_max_length", 65536},
                                             {"tokenizer_class", "PreTrainedTokenizerFast"}});
  io::write_file_atomic(out / "LICENSE", kLicense);
  if (preset == Preset::reference_nvfp4) {
    write_json(out / "hf_quant_config.json",
               {{"producer", {{"name", "modelopt"}, {"version", "0.37.0"}}},
                {"quantization",
                 {{"quant_algo", "NVFP4"},
                  {"kv_cache_quant_algo", nullptr},
                  {"group_size", 16},
                  {"exclude_modules", modelopt_exclude_modules()}}}});
  }
}

// model.safetensors.index.json, byte for byte what io::write_index writes for these sorted
// entries, but in O(n log n): ordered_json's objects find keys by linear search, so
// io::write_index takes O(n^2): ~20 s for shape real-count's 100K tensors, ~55 s for its
// reference's 193K, on a 2-core VM.
void write_index(const std::filesystem::path& path, uint64_t total_size,
                 const std::map<std::string, std::string>& weight_map) {
  const nlohmann::json index = {{"metadata", {{"total_size", total_size}}}, {"weight_map", weight_map}};
  io::write_file_atomic(path, index.dump(2) + "\n");
}

Preset parse_preset(const std::string& name) {
  if (name == "dsv41-mini") return Preset::deepseek_fp8;
  if (name == "dsv41-mini-ref-nvfp4") return Preset::reference_nvfp4;
  throw PipelineError("shardq fixture: unknown preset '" + name + "' (dsv41-mini | dsv41-mini-ref-nvfp4)");
}

// The groups of a fixture, bucketed by shard (in order within each shard), and the
// builder their write functions refer to.
struct BuiltFixture {
  MiniDims dims;
  std::unique_ptr<FixtureBuilder> builder;
  EngramConfig engram;
  std::vector<std::vector<Group>> shards;
};

BuiltFixture build_fixture(const FixtureArgs& args) {
  const Preset preset = parse_preset(args.preset);
  BuiltFixture built;
  built.dims = fixture_dims(args.shape);
  built.builder = std::make_unique<FixtureBuilder>(preset, built.dims, args.seed, args.engram_vocab);
  std::vector<Group> groups = built.builder->build();
  built.engram = built.builder->engram();
  built.shards.resize(size_t(built.dims.shards()));
  for (Group& group : groups) built.shards.at(size_t(group.shard)).push_back(std::move(group));
  return built;
}

} // namespace

MiniDims fixture_dims(const std::string& shape) {
  if (shape == "mini") return MiniDims{};
  if (shape != "real-count") throw PipelineError("shardq fixture: unknown shape '" + shape + "' (mini | real-count)");
  MiniDims dims;
  dims.hidden = 64;
  dims.vocab = 256;
  dims.layers = 40;
  dims.heads = 2;
  dims.head_dim = 32;
  dims.q_lora_rank = 32;
  dims.o_lora_rank = 32;
  dims.moe_intermediate = 32;
  dims.routed_experts = 384;
  dims.experts_per_token = 6;
  dims.mtp_layers = 3;
  dims.index_heads = 2;
  dims.index_head_dim = 32;
  dims.compress_layers = {2, 8, 14, 20, 26, 32, 38};
  dims.default_engram_vocab = 300;
  dims.layer_shards = 40;
  dims.separate_head_shard = true;
  dims.mtp_own_shards = true;
  dims.uncalibrated_experts = {{3, 5}, {9, 2}, {21, 200}, {39, 383}};
  return dims;
}

size_t FixturePlan::tensor_count() const {
  size_t count = 0;
  for (const auto& shard : tensors) count += shard.size();
  return count;
}

FixturePlan plan_fixture(const FixtureArgs& args) {
  const BuiltFixture built = build_fixture(args);
  FixturePlan plan;
  plan.engram = built.engram;
  for (size_t shard = 0; shard < built.shards.size(); ++shard) {
    plan.shards.push_back(shard_name(int(shard), int(built.shards.size())));
    auto& specs = plan.tensors.emplace_back();
    for (const Group& group : built.shards[shard]) specs.insert(specs.end(), group.specs.begin(), group.specs.end());
  }
  return plan;
}

EngramConfig mini_engram_config(uint64_t engram_vocab, const MiniDims& dims) {
  EngramConfig config;
  config.layer_ids = dims.engram_layers;
  config.max_ngram_size = dims.engram_max_ngram;
  config.vocab_size = engram_vocab == 0 ? dims.default_engram_vocab : engram_vocab;
  config.n_heads = dims.engram_heads;
  config.head_dim = dims.engram_head_dim;
  const EngramLayout layout(config);
  for (int layer : config.layer_ids) config.num_embeddings.push_back(layout.table_rows(layer));
  return config;
}

FixtureResult write_fixture(const FixtureArgs& args) {
  const Preset preset = parse_preset(args.preset);
  if (args.out.empty()) throw PipelineError("shardq fixture: --out is required");
  const BuiltFixture built = build_fixture(args);
  const std::filesystem::path out(args.out);
  std::filesystem::create_directories(out);
  FixtureResult result;
  result.engram = built.engram;
  std::map<std::string, std::string> sorted_map;
  for (size_t shard = 0; shard < built.shards.size(); ++shard) {
    std::vector<TensorSpec> specs;
    for (const Group& group : built.shards[shard]) specs.insert(specs.end(), group.specs.begin(), group.specs.end());
    const std::string name = shard_name(int(shard), int(built.shards.size()));
    Writer writer(out / name, specs, {{"format", "pt"}});
    writer.open(false);
    for (const Group& group : built.shards[shard]) group.write(writer);
    writer.finish();
    for (const TensorInfo& tensor : writer.tensors()) {
      sorted_map[tensor.name] = name;
      result.tensor_bytes += tensor.end - tensor.begin;
    }
    result.shards.push_back(name);
  }
  result.tensors = sorted_map.size();
  write_index(out / io::kIndexFileName, result.tensor_bytes, sorted_map);
  write_side_files(out, built.dims, result.engram, preset);
  return result;
}

} // namespace shardq
