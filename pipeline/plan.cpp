#include "pipeline/plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "pipeline/engram_config.h"
#include "pipeline/io/config.h"
#include "pipeline/io/index.h"
#include "kernels/formats.h"
#include "pipeline/pipeline_error.h"
#include "stages/factors.h"
#include "stages/stage_error.h"

namespace shardq {
namespace {

std::string table_prefix(int layer) { return fmt::format("layers.{}.engram.embed", layer); }

void expect_tensor(const io::TensorInfo& info, io::Dtype dtype, const std::vector<uint64_t>& shape,
                   const std::string& file) {
  if (info.dtype != dtype || info.shape != shape) {
    auto dims = [](const std::vector<uint64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); };
    throw PipelineError(fmt::format("{}: tensor '{}' is {} {} but {} {} was expected", file, info.name,
                                    io::dtype_name(info.dtype), dims(info.shape), io::dtype_name(dtype), dims(shape)));
  }
}

// The source shards named by the index, in file-name order.
std::vector<std::string> shard_files(const nlohmann::ordered_json& index, const std::filesystem::path& index_path) {
  if (!index.contains("weight_map") || !index["weight_map"].is_object()) {
    throw PipelineError(fmt::format("{}: no weight_map object", index_path.string()));
  }
  std::set<std::string> files;
  for (const auto& [name, file] : index["weight_map"].items()) {
    if (!file.is_string()) throw PipelineError(fmt::format("{}: weight_map['{}'] is not a file name", index_path.string(), name));
    const std::string shard = file.get<std::string>();
    io::check_shard_name(shard, index_path, name);
    files.insert(shard);
  }
  return {files.begin(), files.end()};
}

TablePlan plan_table(const Plan& plan, int layer, const io::Reader& reader, size_t shard) {
  TablePlan table;
  table.layer = layer;
  table.source_weight = table_prefix(layer) + ".weight";
  table.source_scale = table_prefix(layer) + ".scale";
  table.out_weight = table.source_weight;
  table.out_scale = table_prefix(layer) + ".weight_scale";
  table.out_global_scale = table_prefix(layer) + ".weight_scale_2";
  table.shard = shard;
  const io::TensorInfo& weight = reader.tensor(table.source_weight);
  const io::TensorInfo* scale = reader.find(table.source_scale);
  const std::string file = reader.path().string();
  if (!scale) throw PipelineError(fmt::format("{}: Engram table '{}' has no '{}' in the same shard", file, table.source_weight, table.source_scale));
  if (weight.shape.size() != 2) throw PipelineError(fmt::format("{}: tensor '{}' must be 2-D [rows, 256]", file, weight.name));
  table.rows = weight.shape[0];
  table.cols = int(weight.shape[1]);
  const int head_dim = plan.layout->config().head_dim;
  if (table.cols != head_dim || table.cols % 32 != 0) {
    throw PipelineError(fmt::format("{}: tensor '{}' has {} values per row; engram_head_dim is {}", file, weight.name, table.cols, head_dim));
  }
  expect_tensor(weight, io::Dtype::F8_E4M3, {table.rows, uint64_t(table.cols)}, file);
  expect_tensor(*scale, io::Dtype::F8_E8M0, {table.rows, uint64_t(table.cols / 32)}, file);
  try {
    plan.layout->check(layer, table.rows);
  } catch (const StageError& e) {
    throw PipelineError(fmt::format("{}: tensor '{}': {}", file, weight.name, e.what()));
  }
  table.rows_per_chunk = uint64_t(plan.job.rows_per_chunk);
  return table;
}

// Output layout of a changed shard: source order, the table's two tensors replaced by
// weight / weight_scale, and weight_scale_2 right after them.
void plan_changed_shard(Plan& plan, ShardPlan& shard, const io::Reader& reader) {
  for (const auto& info : reader.tensors()) {
    const auto table_it = std::find_if(shard.tables.begin(), shard.tables.end(), [&](size_t t) {
      return plan.tables[t].source_weight == info.name || plan.tables[t].source_scale == info.name;
    });
    if (table_it == shard.tables.end()) {
      shard.specs.push_back({info.name, info.dtype, info.shape});
      shard.copies.push_back({info.name});
      continue;
    }
    const TablePlan& table = plan.tables[*table_it];
    if (info.name == table.source_weight) {
      shard.specs.push_back({table.out_weight, io::Dtype::U8, {table.rows, uint64_t(table.cols / 2)}});
    } else {
      shard.specs.push_back({table.out_scale, io::Dtype::F8_E4M3, {table.rows, uint64_t(table.cols / 16)}});
      shard.specs.push_back({table.out_global_scale, io::Dtype::F32, {}});
    }
  }
  std::string header;
  shard.layout = io::Writer::plan(shard.specs, &shard.data_offset, &header, shard.metadata);
}

std::vector<std::pair<std::string, std::string>> make_fingerprint(const Plan& plan,
                                                                  const std::vector<io::Reader*>& readers) {
  std::string headers;
  for (const auto* reader : readers) {
    headers += fmt::format("{}:{}:{};", reader->path().filename().string(), reader->file_size(), reader->data_offset());
    for (const auto& t : reader->tensors()) headers += fmt::format("{}:{}:{}-{};", t.name, io::dtype_name(t.dtype), t.begin, t.end);
  }
  return {{"tool_version", SHARDQ_VERSION},
          {"job", plan.job.canonical()},
          {"source_headers", headers},
          {"src", std::filesystem::weakly_canonical(std::filesystem::absolute(plan.src)).string()}};
}

} // namespace

uint64_t TablePlan::chunk_rows(uint64_t chunk) const {
  return std::min(rows_per_chunk, rows - chunk_first_row(chunk));
}

const io::TensorInfo& ShardPlan::planned(const std::string& name) const {
  for (const auto& info : layout) if (info.name == name) return info;
  throw PipelineError(fmt::format("{}: no planned tensor '{}'", file, name));
}

std::string Plan::wkv_weight(int layer) const { return fmt::format("layers.{}.engram.wkv.weight", layer); }
std::string Plan::wkv_scale(int layer) const { return fmt::format("layers.{}.engram.wkv.scale", layer); }

size_t Plan::shard_of_tensor(const std::string& name) const {
  const auto& map = source_index["weight_map"];
  if (!map.contains(name)) throw PipelineError(fmt::format("{}: tensor '{}' is not in the index", (src / kIndexFile).string(), name));
  const std::string file = map[name].get<std::string>();
  for (size_t s = 0; s < shards.size(); ++s) if (shards[s].file == file) return s;
  throw PipelineError(fmt::format("{}: shard '{}' of tensor '{}' is missing", src.string(), file, name));
}

Plan make_plan(const Job& job, int ranks) {
  Plan plan;
  plan.job = job;
  plan.src = job.src;
  plan.dst = job.dst;
  const auto index_path = plan.src / kIndexFile;
  const auto config_path = plan.src / kConfigFile;
  if (!std::filesystem::is_directory(plan.src)) throw PipelineError(fmt::format("{}: source folder not found", plan.src.string()));
  plan.source_index = io::read_json_object(index_path);
  plan.source_config = io::read_config(config_path);
  const auto& text_config = plan.source_config.contains("text_config") ? plan.source_config["text_config"] : plan.source_config;
  try {
    plan.layout = std::make_unique<EngramLayout>(engram_config_from_json(text_config));
  } catch (const std::exception& e) {
    throw PipelineError(fmt::format("{}: {}", config_path.string(), e.what()));
  }

  std::vector<std::unique_ptr<io::Reader>> readers;
  for (const auto& file : shard_files(plan.source_index, index_path)) {
    if (!std::filesystem::exists(plan.src / file)) {
      throw PipelineError(fmt::format("{}: shard '{}' named by the index is missing", index_path.string(), file));
    }
    readers.push_back(std::make_unique<io::Reader>(plan.src / file));
    ShardPlan shard;
    shard.file = file;
    shard.metadata = readers.back()->metadata();
    plan.shards.push_back(std::move(shard));
  }
  for (int layer : plan.layout->config().layer_ids) {
    const std::string weight = table_prefix(layer) + ".weight";
    const size_t s = plan.shard_of_tensor(weight);
    plan.shards[s].changed = true;
    plan.shards[s].tables.push_back(plan.tables.size());
    plan.tables.push_back(plan_table(plan, layer, *readers[s], s));
  }
  int next_owner = 0;
  for (size_t s = 0; s < plan.shards.size(); ++s) {
    if (!plan.shards[s].changed) continue;
    plan.shards[s].owner = next_owner++ % ranks;
    plan_changed_shard(plan, plan.shards[s], *readers[s]);
  }
  for (const auto& entry : std::filesystem::directory_iterator(plan.src)) {
    const std::string name = entry.path().filename().string();
    const bool shard = std::any_of(plan.shards.begin(), plan.shards.end(), [&](const ShardPlan& p) { return p.file == name; });
    if (entry.is_regular_file() && !shard && name != kIndexFile && name != kConfigFile) plan.other_files.push_back(name);
  }
  std::sort(plan.other_files.begin(), plan.other_files.end());
  std::vector<io::Reader*> raw;
  for (auto& r : readers) raw.push_back(r.get());
  plan.fingerprint = make_fingerprint(plan, raw);
  return plan;
}

namespace {

struct WkvFp8 {
  std::vector<uint8_t> codes, scales;
  uint64_t out_rows = 0, in_cols = 0;
};

WkvFp8 read_wkv_fp8(const Plan& plan, int layer) {
  const std::string weight_name = plan.wkv_weight(layer), scale_name = plan.wkv_scale(layer);
  const io::Reader weights(plan.src / plan.shards[plan.shard_of_tensor(weight_name)].file);
  const io::Reader scales(plan.src / plan.shards[plan.shard_of_tensor(scale_name)].file);
  const io::TensorInfo& weight = weights.tensor(weight_name);
  const io::TensorInfo& scale = scales.tensor(scale_name);
  const uint64_t in_cols = uint64_t(plan.layout->columns()) * uint64_t(plan.layout->config().head_dim);
  if (weight.shape.size() != 2 || weight.shape[1] != in_cols) {
    throw PipelineError(fmt::format("{}: tensor '{}' must be F8_E4M3 [*, {}] (24 hash columns x 256)",
                                    weights.path().string(), weight_name, in_cols));
  }
  WkvFp8 wkv;
  wkv.in_cols = in_cols;
  const uint64_t out_rows = wkv.out_rows = weight.shape[0];
  expect_tensor(weight, io::Dtype::F8_E4M3, {out_rows, in_cols}, weights.path().string());
  expect_tensor(scale, io::Dtype::F8_E8M0, {(out_rows + 31) / 32, (in_cols + 31) / 32}, scales.path().string());
  std::vector<uint8_t>& codes = wkv.codes;
  std::vector<uint8_t>& scale_bytes = wkv.scales;
  codes.resize(weight.end - weight.begin);
  scale_bytes.resize(scale.end - scale.begin);
  weights.read_bytes(weight.begin, codes);
  scales.read_bytes(scale.begin, scale_bytes);
  for (size_t i = 0; i < codes.size(); ++i) {
    if (E4M3::is_nan(codes[i])) {
      throw PipelineError(fmt::format("{}: tensor '{}' row {} column {}: E4M3 code 0x{:02X} is NaN",
                                      weights.path().string(), weight_name, i / in_cols, i % in_cols, codes[i]));
    }
  }
  for (size_t i = 0; i < scale_bytes.size(); ++i) {
    if (scale_bytes[i] == E8M0::nan_code) {
      throw PipelineError(fmt::format("{}: tensor '{}' block {}: E8M0 scale is NaN (0xFF)", scales.path().string(),
                                      scale_name, i));
    }
  }
  return wkv;
}

} // namespace

std::vector<float> read_dequantized_wkv(const Plan& plan, int layer) {
  const WkvFp8 wkv = read_wkv_fp8(plan, layer);
  return dequantize_wkv_fp8(wkv.codes.data(), wkv.scales.data(), int(wkv.out_rows), int(wkv.in_cols));
}

void check_wkv(const Plan& plan, int layer) { read_wkv_fp8(plan, layer); }

OutputSlot weight_slot(const Plan& plan, const TablePlan& table) {
  const ShardPlan& shard = plan.shards[table.shard];
  const auto& info = shard.planned(table.out_weight);
  return {info.begin, uint64_t(table.cols / 2), table.rows};
}

OutputSlot scale_slot(const Plan& plan, const TablePlan& table) {
  const ShardPlan& shard = plan.shards[table.shard];
  const auto& info = shard.planned(table.out_scale);
  return {info.begin, uint64_t(table.cols / 16), table.rows};
}

nlohmann::ordered_json output_index(const Plan& plan) {
  nlohmann::ordered_json index = plan.source_index;
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  uint64_t total = 0;
  for (const auto& shard : plan.shards) {
    if (shard.changed) {
      for (const auto& info : shard.layout) total += info.end - info.begin;
    }
  }
  // Unchanged shards keep their tensors: count them from the source index and headers.
  for (const auto& entry : plan.source_index["weight_map"].items()) {
    const std::string& name = entry.key();
    const auto& file = entry.value();
    const bool renamed = std::any_of(plan.tables.begin(), plan.tables.end(), [&](const TablePlan& t) {
      return t.source_weight == name || t.source_scale == name;
    });
    if (!renamed) weight_map[name] = file;
    for (const auto& t : plan.tables) {
      if (t.source_weight == name) weight_map[t.out_weight] = file;
      if (t.source_scale == name) {
        weight_map[t.out_scale] = file;
        weight_map[t.out_global_scale] = file;
      }
    }
  }
  for (const auto& shard : plan.shards) {
    if (shard.changed) continue;
    io::Reader reader(plan.src / shard.file);
    for (const auto& info : reader.tensors()) total += info.end - info.begin;
  }
  index["metadata"]["total_size"] = total;
  index["weight_map"] = weight_map;
  return index;
}

nlohmann::ordered_json output_config(const Plan& plan) {
  nlohmann::ordered_json config = plan.source_config;
  auto& text_config = config.contains("text_config") ? config["text_config"] : config;
  text_config["engram_embed_quant"] = "nvfp4";
  text_config["engram_embed_block_size"] = 16;
  text_config["engram_embed_scale_dtype"] = "e4m3";
  text_config["engram_embed_layers"] = plan.layout->config().layer_ids;
  return config;
}

} // namespace shardq
