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

void ShardReaders::start_opening_folder() {
  std::vector<std::string> files;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(folder_, error)) {
    const std::string name = entry.path().filename().string();
    if (entry.path().extension() == ".safetensors" && !readers_.count(name)) files.push_back(name);
  }
  early_ = std::async(std::launch::async, [folder = folder_, files = std::move(files)] {
    std::vector<std::unique_ptr<Reader>> opened(files.size());
    parallel_for(files.size(), [&](size_t i) {
      try {
        opened[i] = std::make_unique<Reader>(folder / files[i]);
      } catch (const std::exception&) {
        // Not necessarily a shard of the model: open_all opens it again if it is listed.
      }
    });
    Opened readers;
    for (size_t i = 0; i < files.size(); ++i) {
      if (opened[i]) readers.emplace(files[i], std::move(opened[i]));
    }
    return readers;
  });
}

void ShardReaders::open_all(const std::vector<std::string>& files) {
  if (early_.valid()) {
    Opened early = early_.get();
    for (const auto& file : files) {
      const auto it = early.find(file);
      if (it != early.end() && !readers_.count(file)) readers_.emplace(file, std::move(it->second));
    }
  }
  std::vector<std::string> missing;
  for (const auto& file : files) {
    if (!readers_.count(file)) missing.push_back(file);
  }
  std::vector<std::unique_ptr<Reader>> opened(missing.size());
  parallel_for(missing.size(), [&](size_t i) { opened[i] = std::make_unique<Reader>(folder_ / missing[i]); });
  for (size_t i = 0; i < missing.size(); ++i) readers_.emplace(missing[i], std::move(opened[i]));
}

} // namespace shardq::io
