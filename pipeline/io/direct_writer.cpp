#include "pipeline/io/direct_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "pipeline/io/io_error.h"
#include "pipeline/io/posix_file.h"

namespace shardq::io {

void DirectWriter::FreeAligned::operator()(uint8_t* p) const { std::free(p); }

DirectWriter::DirectWriter(const std::filesystem::path& path) : label_(path.string()) {
  // The file is already open for buffered writes: a refusal here (EINVAL on file systems
  // without O_DIRECT, EOPNOTSUPP on some FUSE ones) only means every write stays buffered.
  fd_ = ::open(path.c_str(), O_WRONLY | O_DIRECT | O_CLOEXEC);
}

DirectWriter::~DirectWriter() { disable(); }

void DirectWriter::disable() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

DirectWriter::Range DirectWriter::pages_inside(uint64_t offset, uint64_t size) const {
  if (!enabled() || size < kMinBytes) return {};
  const uint64_t begin = (offset + kPageBytes - 1) / kPageBytes * kPageBytes;
  const uint64_t end = (offset + size) / kPageBytes * kPageBytes;
  return begin < end ? Range{begin, end} : Range{};
}

bool DirectWriter::write(std::span<const uint8_t> bytes, uint64_t offset, Range pages) {
  if (!staging_) {
    staging_.reset(static_cast<uint8_t*>(std::aligned_alloc(kPageBytes, kStagingBytes)));
    if (!staging_) throw IoError(fmt::format("{}: cannot allocate {} bytes for direct writes", label_, kStagingBytes));
  }
  for (uint64_t at = pages.begin; at < pages.end;) {
    const uint64_t size = std::min(kStagingBytes, pages.end - at);
    std::memcpy(staging_.get(), bytes.data() + (at - offset), size);
    const ssize_t put = ::pwrite(fd_, staging_.get(), size, off_t(at));
    if (put < 0 && errno == EINTR) continue;
    // EINVAL: the device wants a coarser alignment; a short write that ends inside a
    // page cannot go on direct. Both leave the bytes to the buffered path.
    if ((put < 0 && errno == EINVAL) || (put > 0 && uint64_t(put) % kPageBytes != 0)) {
      disable();
      return false;
    }
    if (put <= 0) {
      throw IoError(fmt::format("{}: direct write of {} bytes at offset {} failed: {}", label_, size, at, errno_text(put < 0 ? errno : EIO)));
    }
    at += uint64_t(put);
  }
  return true;
}

} // namespace shardq::io
