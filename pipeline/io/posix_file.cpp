#include "pipeline/io/posix_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>

#include "pipeline/io/io_error.h"

namespace shardq::io {

std::string errno_text(int error) { return std::strerror(error); }

void pread_full(int fd, uint8_t* out, uint64_t size, uint64_t offset, const std::string& label) {
  while (size > 0) {
    const ssize_t got = ::pread(fd, out, size, off_t(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw IoError(fmt::format("{}: read of {} bytes at offset {} failed: {}", label, size, offset, errno_text(errno)));
    if (got == 0) throw IoError(fmt::format("{}: file ended at offset {} while {} more bytes were expected", label, offset, size));
    out += got;
    size -= uint64_t(got);
    offset += uint64_t(got);
  }
}

void pwrite_full(int fd, const uint8_t* bytes, uint64_t size, uint64_t offset, const std::string& label) {
  while (size > 0) {
    const ssize_t put = ::pwrite(fd, bytes, size, off_t(offset));
    if (put < 0 && errno == EINTR) continue;
    // pwrite returning 0 for a non-empty request would loop forever: treat it as EIO.
    if (put <= 0) {
      throw IoError(fmt::format("{}: write of {} bytes at offset {} failed: {}", label, size, offset, errno_text(put < 0 ? errno : EIO)));
    }
    bytes += put;
    size -= uint64_t(put);
    offset += uint64_t(put);
  }
}

void fsync_folder(const std::filesystem::path& folder) {
  const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw IoError(fmt::format("{}: cannot open folder to fsync: {}", folder.string(), errno_text(errno)));
  const int rc = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (rc != 0) throw IoError(fmt::format("{}: fsync of folder failed: {}", folder.string(), errno_text(error)));
}

std::filesystem::path folder_of(const std::filesystem::path& path) {
  return path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
}

} // namespace shardq::io
