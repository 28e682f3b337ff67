// Miniature DeepSeek-V4.1-Flash checkpoints for tests, demos and benchmarks
// (docs/design.md "Fixture"): the real tensor names, dtypes, scale layouts, config keys and
// Engram prime layout at a small size, the same bytes for the same seed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "pipeline/commands.h"
#include "stages/tensor.h"
#include "stages/engram_layout.h"

namespace shardq {

// The miniature model's shape (both presets). The defaults are shape "mini".
struct MiniDims {
  int hidden = 256;
  int vocab = 1024;
  int layers = 16;
  int heads = 4;
  int head_dim = 64;
  int q_lora_rank = 64;
  int o_lora_rank = 128;
  int moe_intermediate = 128;
  int routed_experts = 8;
  int experts_per_token = 2;
  int mtp_layers = 2;
  int hc_mult = 4;
  int index_heads = 4;
  int index_head_dim = 64;
  std::vector<int> compress_layers = {2, 8, 14}; // layers with attn.compressor / attn.indexer
  std::vector<int> engram_layers = {1, 14};
  int engram_max_ngram = 4;
  int engram_heads = 8;
  int engram_head_dim = 256;
  int engram_pad_token = 2;
  int engram_compressed_vocab = 800;
  uint64_t default_engram_vocab = 2000;
  // Shards: the layers spread evenly over the first layer_shards files; then head and MTP
  // layers (in the last layer shard unless separate_head_shard; each MTP layer in a shard
  // of its own if mtp_own_shards); then one shard per Engram table, as in the real model.
  int layer_shards = 4;
  bool separate_head_shard = false;
  bool mtp_own_shards = false;
  // Reference preset: experts (layer, expert) without calibration tokens, whose three
  // projections carry the model-wide maximum input_scale.
  std::vector<std::pair<int, int>> uncalibrated_experts = {{3, 5}, {9, 2}};
  int shards() const {
    return layer_shards + (separate_head_shard ? 1 : 0) + (mtp_own_shards ? mtp_layers : 0) + int(engram_layers.size());
  }
};

// The dimensions of a fixture shape:
//  "mini" (default): the MiniDims defaults above, 6 shards.
//  "real-count": the real model's tensor count at small sizes: 40 layers, 384 routed
//    experts per MoE layer (6 per token), 3 MTP layers, Engram at layers 1 and 14 (8 heads
//    of 256, n-grams 2..4, the real prime layout from a small engram_vocab_size), hidden
//    64, moe_intermediate 32 (every FP4 / FP8 / NVFP4 block whole), compressor and
//    indexer at every 6th layer from 2; one shard per layer, one for the head, one per
//    MTP layer, one per table: 46 shards.
// Throws PipelineError on an unknown shape.
MiniDims fixture_dims(const std::string& shape);

// The Engram config of a miniature model, engram_num_embeddings computed from the primes
// (engram_vocab 0 = the shape's default).
EngramConfig mini_engram_config(uint64_t engram_vocab, const MiniDims& dims = MiniDims{});

// What write_fixture would write, without computing any tensor data: the shard files in
// index order and the tensors of each.
struct FixturePlan {
  std::vector<std::string> shards;
  std::vector<std::vector<TensorSpec>> tensors; // parallel to shards
  EngramConfig engram;
  size_t tensor_count() const;
};
// Throws PipelineError on an unknown preset or shape.
FixturePlan plan_fixture(const FixtureArgs& args);

struct FixtureResult {
  std::vector<std::string> shards; // file names, in index order
  uint64_t tensors = 0;            // entries of the index's weight_map
  uint64_t tensor_bytes = 0;       // the index's total_size
  EngramConfig engram;
};

// Writes preset "dsv41-mini" (DeepSeek's FP8/FP4 layout) or "dsv41-mini-ref-nvfp4"
// (NVIDIA's NVFP4 layout with per-projection input scales, two experts (shape
// "real-count": four) carrying the model-wide maximum as uncalibrated fallbacks) of shape
// args.shape into args.out, creating it if needed.
// Throws PipelineError on an unknown preset or shape, io::IoError on a file error.
FixtureResult write_fixture(const FixtureArgs& args);

} // namespace shardq
