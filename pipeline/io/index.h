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
#include <unordered_map>
#include <utility>
#include <vector>

#include "pipeline/io/io_error.h"

namespace shardq::io {

// The weight map's entries (tensor -> shard, in file order) keep their names in one buffer
// and each shard file once: an index of 100K tensors is otherwise 200K small strings, whose
// allocation and page faults cost more than parsing the text.
class ShardIndex {
 public:
  struct Entry {
    std::string_view tensor;
    const std::string& shard;
  };
  class Entries;

  uint64_t total_size = 0; // sum of tensor bytes
  nlohmann::ordered_json extra_metadata = nlohmann::ordered_json::object(); // other "metadata" keys, kept

  // Room for `entries` entries whose names take `name_bytes` in all.
  void reserve(size_t entries, size_t name_bytes);
  void add(std::string_view tensor, std::string_view shard);
  size_t size() const { return slots_.size(); }
  bool empty() const { return slots_.empty(); }
  std::string_view tensor(size_t entry) const;
  const std::string& shard(size_t entry) const { return shards_[slots_[entry].shard]; }
  // The entry's shard as a position in shard_files().
  uint32_t shard_number(size_t entry) const { return slots_[entry].shard; }
  Entry operator[](size_t entry) const { return {tensor(entry), shard(entry)}; }
  Entries entries() const;
  // Distinct shard names in order of first appearance.
  const std::vector<std::string>& shard_files() const { return shards_; }
  // Each shard's first entry, in shard_files() order.
  std::vector<size_t> first_entries() const;
  // The shard holding a tensor, or nullptr.
  const std::string* shard_of(std::string_view tensor) const;

  // Equal entries in the same order (the rest is built from them), total and metadata.
  bool operator==(const ShardIndex& other) const;

 private:
  struct Slot {
    uint64_t offset = 0; // in names_
    uint32_t length = 0;
    uint32_t shard = 0; // in shards_
  };
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view text) const { return std::hash<std::string_view>{}(text); }
  };
  std::string names_;
  std::vector<Slot> slots_;
  std::vector<std::string> shards_;
  std::unordered_map<std::string, uint32_t, StringHash, std::equal_to<>> shard_numbers_;
};

// The entries in order, for range-for: `for (const auto& [tensor, shard] : index.entries())`.
class ShardIndex::Entries {
 public:
  class Iterator {
   public:
    Iterator(const ShardIndex& index, size_t entry) : index_(&index), entry_(entry) {}
    Entry operator*() const { return (*index_)[entry_]; }
    Iterator& operator++() {
      ++entry_;
      return *this;
    }
    bool operator==(const Iterator& other) const { return entry_ == other.entry_; }

   private:
    const ShardIndex* index_;
    size_t entry_;
  };
  explicit Entries(const ShardIndex& index) : index_(index) {}
  Iterator begin() const { return {index_, 0}; }
  Iterator end() const { return {index_, index_.size()}; }

 private:
  const ShardIndex& index_;
};

inline ShardIndex::Entries ShardIndex::entries() const { return Entries(*this); }

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

// The *.safetensors files of folder `dir` that `named` (an index's shard files) does not
// hold, sorted: a loader that globs the folder would read them with the checkpoint.
std::vector<std::string> shard_files_outside(const std::filesystem::path& dir, const std::vector<std::string>& named);

// The index's text, indent 2, trailing newline: what nlohmann's dump(2) gives for
// {"metadata": {"total_size", extra...}, "weight_map"}, written line by line (an
// ordered_json of 100K keys costs seconds to fill). index_file names it in errors.
std::string index_text(const std::filesystem::path& index_file, const ShardIndex& index);
// index_text, written atomically (tmp + fsync + rename + fsync folder).
void write_index(const std::filesystem::path& index_file, const ShardIndex& index);

} // namespace shardq::io
