// shardq_stream_copy FROM TO FILE...: copies each FILE of FROM into TO the way a streaming
// engine with no plan at all would write it: both cores, 1 MiB pieces read into a reused
// buffer, each piece's writeback started as soon as it is written (sync_file_range), each
// file fsynced at its end. scripts/bench.sh times it on a job's output: the least any
// engine needs to put those bytes on this disk, against which a whole job is measured.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr size_t kPieceBytes = size_t{1} << 20;

[[noreturn]] void fail(const std::string& what, const std::string& path) {
  throw std::runtime_error(what + " " + path + ": " + std::strerror(errno));
}

void copy_file(const std::string& from, const std::string& to, std::vector<char>& piece) {
  const int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) fail("open", from);
  const int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0) fail("create", to);
  for (off_t offset = 0;;) {
    const ssize_t got = ::pread(in, piece.data(), piece.size(), offset);
    if (got < 0) fail("read", from);
    if (got == 0) break;
    for (ssize_t put = 0; put < got;) {
      const ssize_t wrote = ::write(out, piece.data() + put, size_t(got - put));
      if (wrote < 0) fail("write", to);
      put += wrote;
    }
    if (::sync_file_range(out, offset, got, SYNC_FILE_RANGE_WRITE) != 0) fail("sync_file_range", to);
    offset += got;
  }
  if (::fsync(out) != 0) fail("fsync", to);
  ::close(out);
  ::close(in);
}

} // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s FROM TO FILE...\n", argv[0]);
    return 2;
  }
  const std::string from = argv[1], to = argv[2];
  const std::vector<std::string> files(argv + 3, argv + argc);
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  auto copy_some = [&] {
    std::vector<char> piece(kPieceBytes);
    try {
      for (size_t i; !failed && (i = next++) < files.size();) copy_file(from + "/" + files[i], to + "/" + files[i], piece);
    } catch (const std::exception& error) {
      failed = true;
      std::fprintf(stderr, "shardq_stream_copy: %s\n", error.what());
    }
  };
  std::vector<std::thread> threads(std::max(1u, std::thread::hardware_concurrency()));
  for (auto& thread : threads) thread = std::thread(copy_some);
  for (auto& thread : threads) thread.join();
  return failed ? 1 : 0;
}
