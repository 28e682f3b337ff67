// Stage `pack`: a quantized chunk as the bytes that go to disk, and their checksum (the
// checkpoint records it; --verify-done re-reads the bytes and compares).
#pragma once

#include <cstdint>
#include <span>

#include "stages/quantize.h"

namespace shardq {

// xxh3-64 over the chunk's packed codes, then its scales.
uint64_t chunk_checksum(std::span<const uint8_t> packed, std::span<const uint8_t> scales);
inline uint64_t chunk_checksum(const Nvfp4Chunk& chunk) { return chunk_checksum(chunk.packed, chunk.scales); }

} // namespace shardq
