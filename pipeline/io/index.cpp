#include "pipeline/io/index.h"

#include <fmt/format.h>

#include <set>
#include <unordered_set>

#include "pipeline/io/config.h"
#include "pipeline/io/io_error.h"
#include "pipeline/io/strict_json.h"

namespace shardq::io {

using Json = nlohmann::ordered_json;

std::vector<std::string> ShardIndex::shard_files() const {
  std::vector<std::string> files;
  std::set<std::string_view> seen;
  for (const auto& [tensor, shard] : weight_map) {
    if (seen.insert(shard).second) files.push_back(shard);
  }
  return files;
}

const std::string* ShardIndex::shard_of(std::string_view tensor) const {
  for (const auto& [name, shard] : weight_map) {
    if (name == tensor) return &shard;
  }
  return nullptr;
}

void check_shard_name(std::string_view shard, const std::filesystem::path& index_file, std::string_view tensor) {
  const char* problem = shard.empty()                          ? "is empty"
                        : shard.front() == '/'                 ? "is an absolute path"
                        : shard.find('/') != shard.npos        ? "contains '/'"
                        : shard.find('\\') != shard.npos       ? "contains '\\'"
                        : shard.find("..") != shard.npos       ? "contains '..'"
                        : shard.find('\0') != shard.npos       ? "contains a NUL byte"
                                                               : nullptr;
  if (problem) {
    throw IoError(fmt::format("{}: weight_map entry '{}': shard name '{}' {}; shard names must be plain file names "
                              "in the index's folder",
                              index_file.string(), tensor, shard, problem));
  }
}

ShardIndex read_index(const std::filesystem::path& index_file) {
  const std::string label = index_file.string();
  const Json json = read_json_object(index_file);
  ShardIndex index;
  if (const auto metadata = json.find("metadata"); metadata != json.end()) {
    if (!metadata->is_object()) throw IoError(fmt::format("{}: metadata is {}, not an object", label, metadata->type_name()));
    for (const auto& [key, value] : metadata->items()) {
      if (key != "total_size") {
        index.extra_metadata[key] = value;
      } else if (value.is_number_unsigned()) {
        index.total_size = value.get<uint64_t>();
      } else {
        throw IoError(fmt::format("{}: metadata.total_size is {}, not a non-negative integer", label, value.dump()));
      }
    }
  }
  const auto weight_map = json.find("weight_map");
  if (weight_map == json.end() || !weight_map->is_object()) throw IoError(fmt::format("{}: no weight_map object", label));
  for (const auto& [tensor, shard] : weight_map->items()) {
    if (!shard.is_string()) throw IoError(fmt::format("{}: weight_map entry '{}' is {}, not a file name", label, tensor, shard.dump()));
    check_shard_name(shard.get_ref<const std::string&>(), index_file, tensor);
    index.weight_map.emplace_back(tensor, shard.get<std::string>());
  }
  return index;
}

void validate_shards(const std::filesystem::path& index_file, const ShardIndex& index) {
  const std::filesystem::path folder = index_file.parent_path();
  std::set<std::string_view> checked;
  for (const auto& [tensor, shard] : index.weight_map) {
    if (!checked.insert(shard).second) continue;
    check_shard_name(shard, index_file, tensor);
    std::error_code ec;
    if (!std::filesystem::is_regular_file(folder / shard, ec)) {
      throw IoError(fmt::format("{}: missing shard '{}' (holds tensor '{}'): {} is not a file", index_file.string(), shard,
                                tensor, (folder / shard).string()));
    }
  }
}

ShardIndex load_index(const std::filesystem::path& index_file) {
  ShardIndex index = read_index(index_file);
  validate_shards(index_file, index);
  return index;
}

void write_index(const std::filesystem::path& index_file, const ShardIndex& index) {
  Json metadata = Json::object();
  metadata["total_size"] = index.total_size;
  for (const auto& [key, value] : index.extra_metadata.items()) {
    if (key != "total_size") metadata[key] = value;
  }
  Json weight_map = Json::object();
  std::unordered_set<std::string_view> tensors;
  for (const auto& [tensor, shard] : index.weight_map) {
    check_shard_name(shard, index_file, tensor);
    if (!tensors.insert(tensor).second) {
      throw IoError(fmt::format("{}: weight_map names tensor '{}' twice", index_file.string(), tensor));
    }
    append_new_key(weight_map, tensor, shard);
  }
  write_json_file(index_file, Json{{"metadata", std::move(metadata)}, {"weight_map", std::move(weight_map)}});
}

} // namespace shardq::io
