// A digest that stands for a long canonical text in a fingerprint (source or reference
// headers: ~6 MB for a 100K-tensor model): xxh3-64 as 16 hex digits.
#pragma once

#include <fmt/format.h>
#include <xxhash.h>

#include <string>
#include <string_view>

namespace shardq {

inline std::string hex_digest(std::string_view text) { return fmt::format("{:016x}", XXH3_64bits(text.data(), text.size())); }

} // namespace shardq
