#include "stages/pack.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace shardq {

uint64_t chunk_checksum(std::span<const uint8_t> packed, std::span<const uint8_t> scales) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  XXH3_64bits_update(&state, packed.data(), packed.size());
  XXH3_64bits_update(&state, scales.data(), scales.size());
  return XXH3_64bits_digest(&state);
}

} // namespace shardq
