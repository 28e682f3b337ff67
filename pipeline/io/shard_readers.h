// The safetensors shards of one folder, each opened once: opening a Reader parses and
// validates its whole header, which for a shard of thousands of tensors costs far more
// than the small reads that callers make tensor by tensor.
#pragma once

#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "pipeline/io/safetensors.h"

namespace shardq::io {

// Opens each shard on first use and keeps it open. get and open_all are for one thread;
// opened only looks up, and is safe from several threads once no opening runs (during a
// run: the plan opened every source shard). The Readers it returns are thread-safe (pread
// only) and live as long as it does.
class ShardReaders {
 public:
  explicit ShardReaders(std::filesystem::path folder) : folder_(std::move(folder)) {}

  const Reader& get(std::string_view file);
  // A shard opened before; throws IoError naming it otherwise.
  const Reader& opened(std::string_view file) const;
  // Opens the listed shards not open yet, several at once (parallel_for): a model of 46
  // shards and 100K tensors parses its headers on every core. A shard that cannot be
  // opened throws as get() would, the first in list order.
  void open_all(const std::vector<std::string>& files);
  // open_all of the folder's *.safetensors files, begun now on a thread of its own, for a
  // caller that learns which shards it needs only later (from the index): their headers
  // are parsed meanwhile. Those that open are kept by the next open_all that lists them;
  // one that does not open is left to that open_all, which throws for it if it is listed.
  // Unlisted ones are dropped. Does nothing to shards already open.
  void start_opening_folder();
  const std::filesystem::path& folder() const { return folder_; }

 private:
  using Opened = std::map<std::string, std::unique_ptr<Reader>, std::less<>>;
  std::filesystem::path folder_;
  Opened readers_;
  std::future<Opened> early_; // start_opening_folder's, until the next open_all
};

} // namespace shardq::io
