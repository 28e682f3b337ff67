#include "pipeline/checkpoint_durability.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "pipeline/io/posix_file.h"
#include "pipeline/pipeline_error.h"

namespace shardq {
namespace {

namespace fs = std::filesystem;

void fsync_path(const fs::path& path, int flags, const std::string& what) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) throw PipelineError("checkpoint: cannot open " + what + " " + path.string() + " to fsync: " + std::strerror(errno));
  const bool synced = ::fsync(fd) == 0;
  const int sync_errno = errno;
  const bool closed = ::close(fd) == 0; // NFS reports write errors at close
  if (!synced || !closed)
    throw PipelineError("checkpoint: fsync of " + what + " " + path.string() + " failed: " +
                        std::strerror(synced ? errno : sync_errno));
}

void fsync_folder_of(const fs::path& path) { fsync_path(io::folder_of(path), O_RDONLY | O_DIRECTORY, "folder"); }

void rename_or_throw(const fs::path& from, const fs::path& to) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    throw PipelineError("checkpoint: cannot rename " + from.string() + " to " + to.string() + ": " + std::strerror(errno));
}

} // namespace

fs::path with_suffix(const fs::path& path, const char* suffix) { return fs::path(path.string() + suffix); }

void replace_file(const fs::path& path, const std::function<void(const fs::path&)>& write,
                  const std::function<void()>& before_rename) {
  const fs::path tmp = with_suffix(path, ".tmp");
  ::unlink(tmp.c_str());
  try {
    write(tmp);
    fsync_path(tmp, O_RDONLY, "file");
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  before_rename();
  rename_or_throw(tmp, path);
  fsync_folder_of(path);
}

void keep_previous(const fs::path& path) {
  if (!fs::exists(path)) return;
  const fs::path prev = with_suffix(path, ".prev");
  const fs::path link = with_suffix(path, ".prev.tmp");
  ::unlink(link.c_str());
  if (::link(path.c_str(), link.c_str()) == 0) {
    rename_or_throw(link, prev);
    return;
  }
  rename_or_throw(path, prev);
}

void rename_durably(const fs::path& from, const fs::path& to) {
  rename_or_throw(from, to);
  fsync_folder_of(to);
}

void remove_durably(std::initializer_list<fs::path> files) {
  bool removed = false;
  for (const fs::path& file : files) removed = fs::remove(file) || removed;
  if (removed) fsync_folder_of(*files.begin());
}

} // namespace shardq
