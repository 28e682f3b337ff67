#include "pipeline/io/index.h"

#include <fmt/format.h>

#include <optional>
#include <set>
#include <unordered_set>

#include "pipeline/io/atomic_file.h"
#include "pipeline/io/config.h"
#include "pipeline/io/declining_sax.h"
#include "pipeline/io/io_error.h"
#include "pipeline/io/strict_json.h"

namespace shardq::io {

using Json = nlohmann::ordered_json;

namespace {

// {"metadata": {"total_size": n, key: string or number, ...}, "weight_map": {tensor: shard}}
// in either order; anything else declines.
class SimpleIndexEvents : public DecliningSax {
 public:
  ShardIndex take() { return std::move(index_); }
  bool seen_weight_map() const { return seen_weight_map_; }

  bool start_object(std::size_t) {
    if (where_ == Where::before_root) return enter(Where::root);
    if (where_ != Where::root_value) return false;
    if (pending_key_ == "metadata" && !seen_metadata_) {
      seen_metadata_ = true;
      return enter(Where::metadata);
    }
    if (pending_key_ == "weight_map" && !seen_weight_map_) {
      seen_weight_map_ = true;
      return enter(Where::weight_map);
    }
    return false;
  }
  bool end_object() {
    where_ = where_ == Where::root ? Where::after_root : Where::root;
    return true;
  }
  bool key(Json::string_t& key) {
    if (where_ == Where::root) return store_key(key, Where::root_value);
    if (where_ == Where::metadata) return !index_.extra_metadata.contains(key) && store_key(key, Where::metadata_value);
    if (where_ == Where::weight_map) return store_key(key, Where::shard_name);
    return false;
  }
  bool string(Json::string_t& value) {
    if (where_ == Where::shard_name) {
      index_.weight_map.emplace_back(std::move(pending_key_), std::move(value));
      return enter(Where::weight_map);
    }
    return metadata_value(value);
  }
  bool number_unsigned(Json::number_unsigned_t value) {
    if (where_ == Where::metadata_value && pending_key_ == "total_size" && !seen_total_size_) {
      seen_total_size_ = true;
      index_.total_size = value;
      return enter(Where::metadata);
    }
    return pending_key_ != "total_size" && metadata_value(value);
  }
  bool number_integer(Json::number_integer_t value) { return pending_key_ != "total_size" && metadata_value(value); }
  bool number_float(Json::number_float_t value, const Json::string_t&) {
    return pending_key_ != "total_size" && metadata_value(value);
  }

 private:
  enum class Where { before_root, root, root_value, metadata, metadata_value, weight_map, shard_name, after_root };

  bool enter(Where where) {
    where_ = where;
    return true;
  }
  bool store_key(Json::string_t& key, Where next) {
    pending_key_ = std::move(key);
    return enter(next);
  }
  template <class Value>
  bool metadata_value(Value value) {
    if (where_ != Where::metadata_value || pending_key_ == "total_size") return false;
    append_new_key(index_.extra_metadata, std::move(pending_key_), std::move(value));
    return enter(Where::metadata);
  }

  Where where_ = Where::before_root;
  std::string pending_key_;
  bool seen_metadata_ = false, seen_weight_map_ = false, seen_total_size_ = false;
  ShardIndex index_;
};

bool tensors_unique(const ShardIndex& index) {
  std::unordered_set<std::string_view> tensors;
  tensors.reserve(index.weight_map.size());
  for (const auto& [tensor, shard] : index.weight_map) {
    if (!tensors.insert(tensor).second) return false;
  }
  return true;
}

// The usual shape, without a DOM; nullopt for anything else.
std::optional<ShardIndex> read_simple_index(std::string_view text) {
  SimpleIndexEvents events;
  if (!sax_accepts(text, events) || !events.seen_weight_map()) return std::nullopt;
  ShardIndex index = events.take();
  if (!tensors_unique(index)) return std::nullopt;
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

// A JSON string literal (quoted, escaped as dump() escapes it; IoError on invalid UTF-8).
std::string quoted(const std::string& text, const std::filesystem::path& index_file) {
  try {
    return quote_json(text);
  } catch (const Json::type_error& e) {
    throw IoError(fmt::format("{}: cannot write '{}': {}", index_file.string(), text, e.what()));
  }
}

} // namespace

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

void write_index(const std::filesystem::path& index_file, const ShardIndex& index) {
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
  std::unordered_set<std::string_view> tensors;
  for (const auto& [tensor, shard] : index.weight_map) {
    check_shard_name(shard, index_file, tensor);
    if (!tensors.insert(tensor).second) {
      throw IoError(fmt::format("{}: weight_map names tensor '{}' twice", index_file.string(), tensor));
    }
    text += tensors.size() == 1 ? "\n    " : ",\n    ";
    text += quoted(tensor, index_file) + ": " + quoted(shard, index_file);
  }
  text += index.weight_map.empty() ? "}\n}\n" : "\n  }\n}\n";
  write_file_atomic(index_file, text);
}

} // namespace shardq::io
