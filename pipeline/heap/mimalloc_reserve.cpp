#include "pipeline/heap/mimalloc_reserve.h"

#include <mimalloc.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace shardq {
namespace {

// Pages populated per call: a stop request is seen within a few ms.
constexpr uint64_t kPopulateStep = uint64_t(2) << 20;

} // namespace

std::jthread reserve_heap_mimalloc(uint64_t bytes) {
  // Committed (readable and writable, not yet touched): mimalloc takes its segments from
  // this arena before asking the OS, and maps, aligns and rounds it itself.
  mi_arena_id_t arena_id = 0;
  if (mi_reserve_os_memory_ex(bytes, /*commit=*/true, /*allow_large=*/false, /*exclusive=*/false, &arena_id) != 0) {
    spdlog::debug("heap reserve of {} MiB: mimalloc could not reserve it: the heap grows as used", bytes >> 20);
    return {};
  }
  size_t size = 0;
  char* arena = static_cast<char*>(mi_arena_area(arena_id, &size));
  return std::jthread([arena, size](std::stop_token stop) {
    for (uint64_t at = 0; at < size && !stop.stop_requested(); at += kPopulateStep) {
      // Maps the pages writable without writing them: safe while the allocator already uses them.
      if (::madvise(arena + at, std::min<uint64_t>(kPopulateStep, size - at), MADV_POPULATE_WRITE) != 0) {
        spdlog::debug("heap reserve: MADV_POPULATE_WRITE failed ({}): the rest is faulted in as used", std::strerror(errno));
        return;
      }
    }
  });
}

} // namespace shardq
