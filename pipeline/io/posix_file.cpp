#include "pipeline/io/posix_file.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/uio.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

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

namespace {

// pwritev or preadv until every piece is done (short transfers and EINTR resumed); a call
// that moves nothing for a non-empty request (end of file on a read) is EIO.
template <class Byte>
void transfer_vectors(bool write, int fd, std::span<const std::span<Byte>> pieces, uint64_t offset, const std::string& label) {
  std::vector<iovec> vectors;
  uint64_t left = 0;
  for (const auto& piece : pieces) {
    if (piece.empty()) continue;
    vectors.push_back({const_cast<uint8_t*>(piece.data()), piece.size()});
    left += piece.size();
  }
  size_t first = 0;
  while (left > 0) {
    const int count = int(std::min<size_t>(vectors.size() - first, IOV_MAX));
    const ssize_t moved = write ? ::pwritev(fd, vectors.data() + first, count, off_t(offset))
                                : ::preadv(fd, vectors.data() + first, count, off_t(offset));
    if (moved < 0 && errno == EINTR) continue;
    if (moved <= 0) {
      throw IoError(fmt::format("{}: {} of {} bytes at offset {} failed: {}", label, write ? "write" : "read", left, offset,
                                errno_text(moved < 0 ? errno : EIO)));
    }
    offset += uint64_t(moved);
    left -= uint64_t(moved);
    // Past the vectors done whole; a partly done one goes on from where it stopped.
    for (uint64_t done = uint64_t(moved); done > 0;) {
      iovec& v = vectors[first];
      const uint64_t step = std::min<uint64_t>(done, v.iov_len);
      v.iov_base = static_cast<uint8_t*>(v.iov_base) + step;
      v.iov_len -= step;
      done -= step;
      if (v.iov_len == 0) ++first;
    }
  }
}

} // namespace

void pwritev_full(int fd, std::span<const std::span<const uint8_t>> pieces, uint64_t offset, const std::string& label) {
  transfer_vectors(true, fd, pieces, offset, label);
}

void preadv_full(int fd, std::span<const std::span<uint8_t>> pieces, uint64_t offset, const std::string& label) {
  transfer_vectors(false, fd, pieces, offset, label);
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
