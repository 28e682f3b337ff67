#include "pipeline/io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>

#include "pipeline/io/io_error.h"
#include "pipeline/io/posix_file.h"

namespace shardq::io {

namespace {

void write_and_sync(const std::filesystem::path& path, std::string_view bytes) {
  const std::string label = path.string();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError(fmt::format("{}: cannot create: {}", label, errno_text(errno)));
  try {
    pwrite_full(fd, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), 0, label);
    if (::fsync(fd) != 0) throw IoError(fmt::format("{}: fsync failed: {}", label, errno_text(errno)));
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) throw IoError(fmt::format("{}: close failed: {}", label, errno_text(errno)));
}

} // namespace

void stage_file(const std::filesystem::path& path, std::string_view bytes) {
  const std::filesystem::path tmp = staged_path(path);
  try {
    write_and_sync(tmp, bytes);
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw;
  }
}

void rename_staged_file(const std::filesystem::path& path) {
  const std::filesystem::path tmp = staged_path(path);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw IoError(fmt::format("{}: rename to {} failed: {}", tmp.string(), path.string(), errno_text(error)));
  }
}

void commit_staged_file(const std::filesystem::path& path) {
  rename_staged_file(path);
  fsync_folder(folder_of(path));
}

void write_file_atomic(const std::filesystem::path& path, std::string_view bytes) {
  stage_file(path, bytes);
  commit_staged_file(path);
}

std::string read_file_bounded(const std::filesystem::path& path, uint64_t max_bytes) {
  const std::string label = path.string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK); // a FIFO: refused below, not waited on
  if (fd < 0) throw IoError(fmt::format("{}: cannot open: {}", label, errno_text(errno)));
  std::string bytes;
  try {
    struct stat info {};
    if (::fstat(fd, &info) != 0) throw IoError(fmt::format("{}: fstat failed: {}", label, errno_text(errno)));
    if (!S_ISREG(info.st_mode)) throw IoError(fmt::format("{}: not a regular file", label));
    if (uint64_t(info.st_size) > max_bytes) {
      throw IoError(fmt::format("{}: file is {} bytes, more than the {} allowed", label, info.st_size, max_bytes));
    }
    bytes.resize(size_t(info.st_size));
    pread_full(fd, reinterpret_cast<uint8_t*>(bytes.data()), bytes.size(), 0, label);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return bytes;
}

} // namespace shardq::io
