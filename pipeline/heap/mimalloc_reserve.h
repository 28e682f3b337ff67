// Heap memory taken from the OS ahead of use, for the shardq binary (which allocates through
// mimalloc; the libraries and the tests do not). See RunArgs::reserve_heap.
#pragma once

#include <cstdint>
#include <thread>

namespace shardq {

// Has mimalloc reserve an arena of `bytes` (rounded to its arena blocks) and returns the
// thread that populates its pages, lowest first, as the allocator hands them out; it stops
// when asked (the jthread's destructor) or when the kernel cannot populate (before Linux
// 5.14): then the rest is faulted in as used, as without the block.
std::jthread reserve_heap_mimalloc(uint64_t bytes);

} // namespace shardq
