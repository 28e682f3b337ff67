// Miniature DeepSeek-V4.1-Flash checkpoints for tests, demos and benchmarks
// (DESIGN.md "Fixture"): the real tensor names, dtypes, scale layouts, config keys and
// Engram prime layout at a small size, the same bytes for the same seed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "pipeline/commands.h"
#include "stages/engram_layout.h"

namespace shardq {

// The miniature model's shape (both presets).
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
};

// The Engram config of the miniature model, engram_num_embeddings computed from the primes.
EngramConfig mini_engram_config(uint64_t engram_vocab);

struct FixtureResult {
  std::vector<std::string> shards; // file names, in index order
  uint64_t tensor_bytes = 0;       // the index's total_size
  EngramConfig engram;
};

// Writes preset "dsv41-mini" (DeepSeek's FP8/FP4 layout) or "dsv41-mini-ref-nvfp4"
// (NVIDIA's NVFP4 layout with per-projection input scales, two experts carrying the
// model-wide maximum as uncalibrated fallbacks) into args.out, creating it if needed.
// Throws PipelineError on an unknown preset, io::IoError on a file error.
FixtureResult write_fixture(const FixtureArgs& args);

} // namespace shardq
