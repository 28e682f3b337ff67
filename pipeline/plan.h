// The plan of an engram-nvfp4 job, computed up front and identically on every rank from
// the job and the source headers: which tensors change, the chunks, the output layout.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "pipeline/io/safetensors.h"
#include "pipeline/job.h"
#include "stages/engram_layout.h"
#include "stages/write.h"

namespace shardq {

inline constexpr const char* kIndexFile = "model.safetensors.index.json";
inline constexpr const char* kConfigFile = "config.json";
inline constexpr const char* kReportFile = "engram-nvfp4.json";

// One Engram table: its source tensors and its three output tensors.
struct TablePlan {
  int layer = 0;
  std::string source_weight, source_scale;              // ...embed.weight / ...embed.scale
  std::string out_weight, out_scale, out_global_scale;  // weight U8, weight_scale E4M3, weight_scale_2 F32
  size_t shard = 0;                                     // index into Plan::shards
  uint64_t rows = 0;
  int cols = 0;
  uint64_t rows_per_chunk = 0;
  uint64_t chunks() const { return (rows + rows_per_chunk - 1) / rows_per_chunk; }
  uint64_t chunk_first_row(uint64_t chunk) const { return chunk * rows_per_chunk; }
  uint64_t chunk_rows(uint64_t chunk) const;
};

// A tensor copied byte for byte into a changed shard.
struct CopyPlan {
  std::string name;
};

struct ShardPlan {
  std::string file;          // same name in src and dst
  bool changed = false;      // holds an Engram table; otherwise hard-linked
  int owner = 0;             // rank that writes it (write_mode owner)
  std::vector<io::TensorSpec> specs;  // output layout, in source order
  std::vector<CopyPlan> copies;       // unchanged tensors of a changed shard
  std::vector<size_t> tables;         // tables it holds
  std::vector<io::TensorInfo> layout; // planned offsets (Writer::plan)
  uint64_t data_offset = 0;
  std::map<std::string, std::string> metadata; // the source shard's __metadata__
  const io::TensorInfo& planned(const std::string& name) const;
};

struct Plan {
  Job job;
  std::filesystem::path src, dst;
  std::vector<ShardPlan> shards;
  std::vector<TablePlan> tables;
  std::vector<std::string> other_files; // linked untouched (tokenizer, LICENSE, ...)
  std::unique_ptr<EngramLayout> layout;
  nlohmann::ordered_json source_index, source_config;
  std::vector<std::pair<std::string, std::string>> fingerprint;
  std::string wkv_weight(int layer) const;
  std::string wkv_scale(int layer) const;
  size_t shard_of_tensor(const std::string& name) const; // source shard index holding it
};

// Reads index, config and every shard header of src; refuses (PipelineError) anything
// that does not fit: missing tables, wrong dtypes or shapes, a row count that differs
// from the config's prime layout. No work is done before this passes.
Plan make_plan(const Job& job, int ranks);

// The layer's wkv weight dequantized exactly (FP8 with 32x32 E8M0 blocks), row-major
// [out, columns * 256]; refuses a missing wkv, the wrong shape or NaN codes, naming it.
std::vector<float> read_dequantized_wkv(const Plan& plan, int layer);
// The same checks without the dequantization (before any work: refuse a bad wkv early).
void check_wkv(const Plan& plan, int layer);

// Output slots (file offsets) of a table in its planned output shard.
OutputSlot weight_slot(const Plan& plan, const TablePlan& table);
OutputSlot scale_slot(const Plan& plan, const TablePlan& table);

// The output index and config.json.
nlohmann::ordered_json output_index(const Plan& plan);
nlohmann::ordered_json output_config(const Plan& plan);

} // namespace shardq
