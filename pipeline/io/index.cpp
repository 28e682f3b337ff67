#include "pipeline/io/index.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

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

// Entries naming a tensor already named by an entry before them.
std::vector<size_t> repeated_tensors(const ShardIndex& index) {
  NameIndex tensors;
  return tensors.build(index.size(), [&](size_t i) { return index.tensor(i); });
}

// Each distinct shard name, checked once, with the first entry that names it for the message.
void check_shard_names(const ShardIndex& index, const std::filesystem::path& index_file) {
  for (size_t i : index.first_entries()) check_shard_name(index.shard(i), index_file, index.tensor(i));
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
  index.reserve(size_t(std::count(text.begin(), text.end(), ':')), text.size()); // at least one ':' per entry
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
      if (shard) index.add(tensor, *shard);
      return shard.has_value();
    });
  });
  if (!read || !seen_weight_map || !json.at_end() || !repeated_tensors(index).empty()) return std::nullopt;
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
    index.add(tensor, shard.get_ref<const std::string&>());
  }
  return index;
}

void ShardIndex::reserve(size_t entries, size_t name_bytes) {
  slots_.reserve(entries);
  names_.reserve(name_bytes);
}

void ShardIndex::add(std::string_view tensor, std::string_view shard) {
  // Entries come shard by shard in most indexes: the last entry's shard first.
  uint32_t number = slots_.empty() ? 0 : slots_.back().shard;
  if (slots_.empty() || shards_[number] != shard) {
    const auto [found, added] = shard_numbers_.try_emplace(std::string(shard), uint32_t(shards_.size()));
    if (added) shards_.emplace_back(shard);
    number = found->second;
  }
  slots_.push_back({names_.size(), uint32_t(tensor.size()), number});
  names_.append(tensor);
}

std::vector<size_t> ShardIndex::first_entries() const {
  std::vector<size_t> first(shards_.size(), size());
  for (size_t i = size(); i-- > 0;) first[slots_[i].shard] = i;
  return first;
}

std::string_view ShardIndex::tensor(size_t entry) const {
  const Slot& slot = slots_[entry];
  return std::string_view(names_).substr(slot.offset, slot.length);
}

const std::string* ShardIndex::shard_of(std::string_view tensor) const {
  for (size_t i = 0; i < size(); ++i) {
    if (this->tensor(i) == tensor) return &shard(i);
  }
  return nullptr;
}

bool ShardIndex::operator==(const ShardIndex& other) const {
  if (total_size != other.total_size || extra_metadata != other.extra_metadata || size() != other.size()) return false;
  for (size_t i = 0; i < size(); ++i) {
    if (tensor(i) != other.tensor(i) || shard(i) != other.shard(i)) return false;
  }
  return true;
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
  check_shard_names(index, index_file);
  return index;
}

void validate_shards(const std::filesystem::path& index_file, const ShardIndex& index) {
  const std::filesystem::path folder = index_file.parent_path();
  for (size_t i : index.first_entries()) {
    const std::string& shard = index.shard(i);
    const std::string_view tensor = index.tensor(i);
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
  const auto repeated = repeated_tensors(index);
  if (!repeated.empty()) {
    throw IoError(fmt::format("{}: weight_map names tensor '{}' twice", index_file.string(), index.tensor(repeated.front())));
  }
  check_shard_names(index, index_file);
  // Each shard's quoted name once, then copied in after each tensor.
  std::vector<std::string> quoted_shards(index.shard_files().size());
  for (size_t s = 0; s < quoted_shards.size(); ++s) append_quoted(quoted_shards[s], index.shard_files()[s], index_file);
  text.reserve(text.size() + index.size() * 96);
  for (size_t i = 0; i < index.size(); ++i) {
    text += i == 0 ? "\n    " : ",\n    ";
    append_quoted(text, index.tensor(i), index_file);
    text += ": ";
    text += quoted_shards[index.shard_number(i)];
  }
  text += index.empty() ? "}\n}\n" : "\n  }\n}\n";
  return text;
}

void write_index(const std::filesystem::path& index_file, const ShardIndex& index) {
  write_file_atomic(index_file, index_text(index_file, index));
}

std::vector<std::string> shard_files_outside(const std::filesystem::path& dir, const std::vector<std::string>& named) {
  std::vector<std::string> outside;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || !name.ends_with(".safetensors")) continue;
    if (std::find(named.begin(), named.end(), name) == named.end()) outside.push_back(name);
  }
  std::sort(outside.begin(), outside.end());
  return outside;
}

} // namespace shardq::io
