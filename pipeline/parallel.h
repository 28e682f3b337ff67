// Independent per-item work of the plan (parsing shard headers, laying out output shards)
// spread over the cores: each item's result goes to its own slot, so the outcome is the
// same for any thread count.
#pragma once

#include <cstddef>
#include <functional>

namespace shardq {

// Runs body(i) for every i in [0, count) on up to the machine's cores; when items throw,
// rethrows the exception of the lowest such i (the one a plain loop would have met first).
void parallel_for(size_t count, const std::function<void(size_t)>& body);

} // namespace shardq
