// model.safetensors.index.json: {"metadata": {"total_size": N, ...}, "weight_map": {tensor: shard}}.
// Shard names come from untrusted files and are joined to a folder, so each must be a plain
// file name: never absolute, never with '/', '\\' or '..' (docs/formats.md "Untrusted input").
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pipeline/io/io_error.h"

namespace shardq::io {

struct ShardIndex {
  uint64_t total_size = 0; // sum of tensor bytes
  nlohmann::ordered_json extra_metadata = nlohmann::ordered_json::object(); // other "metadata" keys, kept
  std::vector<std::pair<std::string, std::string>> weight_map;              // tensor -> shard, file order

  bool operator==(const ShardIndex&) const = default;

  // Distinct shard names in order of first appearance.
  std::vector<std::string> shard_files() const;
  // The shard holding a tensor, or nullptr.
  const std::string* shard_of(std::string_view tensor) const;
};

inline constexpr std::string_view kIndexFileName = "model.safetensors.index.json";

// Throws IoError naming the index file and the entry when a shard name could leave its folder.
void check_shard_name(std::string_view shard, const std::filesystem::path& index_file, std::string_view tensor);

// Parses and checks every shard name; does not look at the shards themselves. Root keys
// other than "metadata" and "weight_map" are not kept. An index of the usual shape (flat
// metadata, a weight map of strings) is read from the JSON parser's events: a DOM of 100K
// entries costs several times the parse.
ShardIndex read_index(const std::filesystem::path& index_file);
// The two readings of an index's text that read_index chooses between (both before the
// shard names are checked), apart for the fuzzer: the plain-JSON one, nullopt unless the
// text has the usual shape, and the strict DOM one, which throws IoError naming the file.
std::optional<ShardIndex> read_simple_index(std::string_view text);
ShardIndex read_index_dom(std::string_view text, const std::filesystem::path& index_file);

// Throws "missing shard" (naming index, tensor and shard) when a referenced file is absent.
void validate_shards(const std::filesystem::path& index_file, const ShardIndex& index);
// read_index + validate_shards: what a loader of a source checkpoint wants.
ShardIndex load_index(const std::filesystem::path& index_file);

// The index's text, indent 2, trailing newline: what nlohmann's dump(2) gives for
// {"metadata": {"total_size", extra...}, "weight_map"}, written line by line (an
// ordered_json of 100K keys costs seconds to fill). index_file names it in errors.
std::string index_text(const std::filesystem::path& index_file, const ShardIndex& index);
// index_text, written atomically (tmp + fsync + rename + fsync folder).
void write_index(const std::filesystem::path& index_file, const ShardIndex& index);

} // namespace shardq::io
