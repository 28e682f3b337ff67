#include "pipeline/io/shard_readers.h"

namespace shardq::io {

const Reader& ShardReaders::get(std::string_view file) {
  auto it = readers_.find(file);
  if (it == readers_.end()) it = readers_.emplace(std::string(file), std::make_unique<Reader>(folder_ / file)).first;
  return *it->second;
}

} // namespace shardq::io
