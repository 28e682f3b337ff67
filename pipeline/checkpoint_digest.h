// The checkpoint's checksums (docs/checkpoint.md "Atomic saves"): xxh3-64 over a canonical
// serialization (fixed-width little-endian fields, length-prefixed strings), so a torn or
// bit-flipped generation is told apart from a good one. checkpoint.h declares the public
// pair (checkpoint_checksum, blobs_digest).
#pragma once

#include <cstdint>

#include "pipeline/checkpoint.h"

namespace shardq {

// checkpoint_checksum with the blobs' digest already at hand (a save and a load each hash
// the blobs once, not once per use).
uint64_t checksum_with_blobs(const CheckpointState& state, uint64_t blobs_digest_value);

} // namespace shardq
