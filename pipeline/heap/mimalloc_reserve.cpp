#include "pipeline/heap/mimalloc_reserve.h"

#include <mimalloc.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstring>

namespace shardq {
namespace {

// mimalloc arenas are whole blocks of this size, at an address aligned to it.
constexpr uint64_t kArenaBlock = uint64_t(64) << 20;
// Pages populated per call: a stop request is seen within a few ms.
constexpr uint64_t kPopulateStep = uint64_t(2) << 20;

} // namespace

std::jthread reserve_heap_mimalloc(uint64_t bytes) {
  const uint64_t size = (bytes + kArenaBlock - 1) / kArenaBlock * kArenaBlock;
  // Mapped with room to align; the unaligned ends stay untouched (never populated).
  void* mapped = ::mmap(nullptr, size + kArenaBlock, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mapped == MAP_FAILED) {
    spdlog::debug("heap reserve of {} MiB: mmap failed ({}): the heap grows as used", size >> 20, std::strerror(errno));
    return {};
  }
  const uintptr_t start = (reinterpret_cast<uintptr_t>(mapped) + kArenaBlock - 1) & ~uintptr_t(kArenaBlock - 1);
  char* arena = reinterpret_cast<char*>(start);
  // Committed (readable and writable already) and zero (fresh anonymous pages): mimalloc
  // neither commits nor clears it, and takes its segments from here before asking the OS.
  if (!mi_manage_os_memory(arena, size, /*is_committed=*/true, /*is_large=*/false, /*is_zero=*/true, /*numa_node=*/-1)) {
    spdlog::debug("heap reserve of {} MiB: mimalloc refused the block: the heap grows as used", size >> 20);
    return {};
  }
  return std::jthread([arena, size](std::stop_token stop) {
    for (uint64_t at = 0; at < size && !stop.stop_requested(); at += kPopulateStep) {
      // Maps the pages writable without writing them: safe while the allocator already uses them.
      if (::madvise(arena + at, kPopulateStep, MADV_POPULATE_WRITE) != 0) {
        spdlog::debug("heap reserve: MADV_POPULATE_WRITE failed ({}): the rest is faulted in as used", std::strerror(errno));
        return;
      }
    }
  });
}

} // namespace shardq
