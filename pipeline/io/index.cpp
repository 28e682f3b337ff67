#include "pipeline/io/index.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <set>

#include "pipeline/io/atomic_file.h"
#include "pipeline/io/config.h"
#include "pipeline/io/io_error.h"
#include "pipeline/io/plain_json.h"
#include "pipeline/io/strict_json.h"
#include "stages/name_index.h"

namespace shardq::io {

using Json = nlohmann::ordered_json;

namespace {

// metadata: {"total_size": n, key: string or unsigned, ...}, each key once.
bool read_metadata(PlainJson& json, ShardIndex& index) {
  bool seen_total_size = false;
  return json.object([&](std::string_view key) {
    if (key == "total_size") {
      const auto total = json.number();
      if (!total || seen_total_size) return false;
      seen_total_size = true;
      index.total_size = *total;
      return true;
    }
    if (index.extra_metadata.contains(key)) return false;
    if (json.next_is('"')) {
      const auto value = json.string();
      if (value) append_new_key(index.extra_metadata, std::string(key), std::string(*value));
      return value.has_value();
    }
    const auto value = json.number();
    if (value) append_new_key(index.extra_metadata, std::string(key), *value);
    return value.has_value();
  });
}

bool tensors_unique(const ShardIndex& index) {
  NameIndex tensors;
  return tensors.build(index.weight_map.size(), [&](size_t i) -> std::string_view { return index.weight_map[i].first; }).empty();
}

// Appends a JSON string literal (quoted, escaped as dump() escapes it; IoError on invalid UTF-8).
void append_quoted(std::string& out, std::string_view text, const std::filesystem::path& index_file) {
  try {
    append_json_string(out, text);
  } catch (const Json::type_error& e) {
    throw IoError(fmt::format("{}: cannot write '{}': {}", index_file.string(), text, e.what()));
  }
}

} // namespace

// The usual shape, {"metadata": {...}, "weight_map": {tensor: shard}} in either order, as
// plain JSON; nullopt for anything else.
std::optional<ShardIndex> read_simple_index(std::string_view text) {
  PlainJson json(text);
  ShardIndex index;
  index.weight_map.reserve(size_t(std::count(text.begin(), text.end(), ':'))); // at least one per entry
  bool seen_metadata = false, seen_weight_map = false;
  const bool read = json.object([&](std::string_view key) {
    if (key == "metadata" && !seen_metadata) {
      seen_metadata = true;
      return read_metadata(json, index);
    }
    if (key != "weight_map" || seen_weight_map) return false;
    seen_weight_map = true;
    return json.object([&](std::string_view tensor) {
      const auto shard = json.string();
      if (shard) index.weight_map.emplace_back(tensor, *shard);
      return shard.has_value();
    });
  });
  if (!read || !seen_weight_map || !json.at_end() || !tensors_unique(index)) return std::nullopt;
  return index;
}

ShardIndex read_index_dom(std::string_view text, const std::filesystem::path& index_file) {
  const std::string label = index_file.string();
  const Json json = parse_json_strict(text, label, "content");
  if (!json.is_object()) throw IoError(fmt::format("{}: content is {}, not a JSON object", label, json.type_name()));
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
    index.weight_map.emplace_back(tensor, shard.get<std::string>());
  }
  return index;
}

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
  const std::string text = read_file_bounded(index_file, kMaxJsonFileBytes);
  auto simple = read_simple_index(text);
  ShardIndex index = simple ? std::move(*simple) : read_index_dom(text, index_file);
  for (const auto& [tensor, shard] : index.weight_map) check_shard_name(shard, index_file, tensor);
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

std::string index_text(const std::filesystem::path& index_file, const ShardIndex& index) {
  Json metadata = Json::object();
  metadata["total_size"] = index.total_size;
  for (const auto& [key, value] : index.extra_metadata.items()) {
    if (key != "total_size") metadata[key] = value;
  }
  std::string text;
  try {
    text = "{\n  \"metadata\": " + metadata.dump(2);
  } catch (const Json::type_error& e) {
    throw IoError(fmt::format("{}: cannot write the metadata: {}", index_file.string(), e.what()));
  }
  // dump(2) of the inner object indents by its own depth; one level deeper here.
  for (size_t at = text.find('\n', 2); at != std::string::npos; at = text.find('\n', at + 1)) text.insert(at + 1, "  ");
  text += ",\n  \"weight_map\": {";
  const auto& map = index.weight_map;
  NameIndex tensors;
  const auto repeated = tensors.build(map.size(), [&](size_t i) -> std::string_view { return map[i].first; });
  if (!repeated.empty()) {
    throw IoError(fmt::format("{}: weight_map names tensor '{}' twice", index_file.string(), map[repeated.front()].first));
  }
  text.reserve(text.size() + map.size() * 96);
  for (size_t i = 0; i < map.size(); ++i) {
    const auto& [tensor, shard] = map[i];
    check_shard_name(shard, index_file, tensor);
    text += i == 0 ? "\n    " : ",\n    ";
    append_quoted(text, tensor, index_file);
    text += ": ";
    append_quoted(text, shard, index_file);
  }
  text += index.weight_map.empty() ? "}\n}\n" : "\n  }\n}\n";
  return text;
}

void write_index(const std::filesystem::path& index_file, const ShardIndex& index) {
  write_file_atomic(index_file, index_text(index_file, index));
}

} // namespace shardq::io
