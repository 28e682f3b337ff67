#include "pipeline/io/shard_readers.h"

#include <fmt/format.h>

#include "pipeline/io/io_error.h"
#include "pipeline/parallel.h"

namespace shardq::io {

const Reader& ShardReaders::get(std::string_view file) {
  auto it = readers_.find(file);
  if (it == readers_.end()) it = readers_.emplace(std::string(file), std::make_unique<Reader>(folder_ / file)).first;
  return *it->second;
}

const Reader& ShardReaders::opened(std::string_view file) const {
  const auto it = readers_.find(file);
  if (it == readers_.end()) throw IoError(fmt::format("{}: shard not opened before the run", (folder_ / file).string()));
  return *it->second;
}

void ShardReaders::open_all(const std::vector<std::string>& files) {
  std::vector<std::string> missing;
  for (const auto& file : files) {
    if (!readers_.count(file)) missing.push_back(file);
  }
  std::vector<std::unique_ptr<Reader>> opened(missing.size());
  parallel_for(missing.size(), [&](size_t i) { opened[i] = std::make_unique<Reader>(folder_ / missing[i]); });
  for (size_t i = 0; i < missing.size(); ++i) readers_.emplace(missing[i], std::move(opened[i]));
}

} // namespace shardq::io
